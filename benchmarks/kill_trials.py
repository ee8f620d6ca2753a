"""Random ``kill -9`` and double Ctrl-C trials of a real ``rljax train``, then ``--resume``.

    python -m benchmarks.kill_trials DIR [--trials 30] [--ctrl-c 10] [--preset cartpole-dqn]

Each kill trial starts ``rljax train PRESET --checkpoint-every STEPS --chunk-steps STEPS``
(a checkpoint after every chunk) in its own folder under DIR, waits until the run has
written its first checkpoint, sleeps a random time (uniform over ``--window`` seconds,
so the kill lands anywhere: inside a chunk, during a save, between files of a save), and
sends SIGKILL.
Then ``rljax train --resume RUN_DIR --total-steps N`` (N: two chunks past the newest
checkpoint folder) must finish (exit status 0) from that checkpoint, with
``metrics.jsonl``'s ``env_steps`` strictly increasing and ending at N, and no unfinished
save left in ``checkpoint/``.

Each Ctrl-C trial sends SIGINT, and a second SIGINT a random 0-300 ms later (while the
checkpoint the first one asked for is being written); the run must stop, and resuming it
must finish the same way.

Prints one JSON line per trial and a summary line; exits 1 if any run could not resume.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def _rljax(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from rljax.run.cli import main; "
            "sys.exit(main(sys.argv[1:]))", *args]


def _run_dir(logdir: str) -> str | None:
    found = [d for d in glob.glob(os.path.join(logdir, "*")) if os.path.isdir(d)]
    return found[0] if found else None


def _checkpoints(run_dir: str) -> list[int]:
    folder = os.path.join(run_dir, "checkpoint")
    if not os.path.isdir(folder):
        return []
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def _wait_for_checkpoint(proc: subprocess.Popen, logdir: str, timeout: float) -> str | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        run_dir = _run_dir(logdir)
        if run_dir and _checkpoints(run_dir):
            return run_dir
        time.sleep(0.05)
    return None


def _resume(run_dir: str, total: int) -> dict:
    done = subprocess.run(_rljax("train", "--resume", run_dir, "--total-steps", str(total),
                                 "--quiet"), capture_output=True, text=True)
    rows = [json.loads(line)["env_steps"] for line in open(os.path.join(run_dir,
                                                                       "metrics.jsonl"))]
    unfinished = [n for n in os.listdir(os.path.join(run_dir, "checkpoint")) if "tmp" in n]
    ok = (done.returncode == 0 and rows == sorted(set(rows)) and rows[-1] == total
          and not unfinished)
    return {"resumed": ok, "resume_rc": done.returncode, "rows": len(rows),
            "last_row": rows[-1] if rows else None, "unfinished_left": unfinished,
            "error": done.stderr.strip().splitlines()[-1:] if not ok else []}


def trial(kind: str, logdir: str, args: argparse.Namespace, rng: random.Random) -> dict:
    os.makedirs(logdir)
    proc = subprocess.Popen(_rljax("train", args.preset, "--total-steps", str(args.steps),
                                   "--checkpoint-every", str(args.checkpoint_every),
                                   "--chunk-steps", str(args.checkpoint_every),
                                   "--logdir", logdir, "--quiet", "--no-tensorboard"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_dir = _wait_for_checkpoint(proc, logdir, timeout=600)
    if run_dir is None:
        proc.kill()
        return {"kind": kind, "skipped": "no checkpoint before the run ended",
                "stderr": proc.communicate()[1][-300:]}
    wait = rng.uniform(0, args.window)
    time.sleep(wait)
    at = {"kind": kind, "after_first_checkpoint_s": round(wait, 3)}
    if kind == "kill":
        proc.send_signal(signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGINT)
        second = rng.uniform(0, 0.3)
        time.sleep(second)
        proc.send_signal(signal.SIGINT)
        at["second_sigint_s"] = round(second, 3)
    proc.wait()
    at.update(rc=proc.returncode, checkpoints=_checkpoints(run_dir))
    if proc.returncode == 0:  # finished before the signal: nothing to resume
        at["finished_first"] = True
        return at
    # Resume from the newest complete checkpoint and train two more chunks.
    newest = max(at["checkpoints"])
    at.update(_resume(run_dir, newest + 2 * args.checkpoint_every))
    return at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--ctrl-c", type=int, default=10)
    parser.add_argument("--preset", default="cartpole-dqn")
    parser.add_argument("--steps", type=int, default=81_920)
    parser.add_argument("--checkpoint-every", type=int, default=1_024)
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.dir, ignore_errors=True)
    results = []
    kinds = ["kill"] * args.trials + ["ctrl-c"] * args.ctrl_c
    for i, kind in enumerate(kinds):
        result = trial(kind, os.path.join(args.dir, f"{kind}-{i:02d}"), args, rng)
        print(json.dumps(result), flush=True)
        results.append(result)
    tried = [r for r in results if "resumed" in r]
    failed = [r for r in tried if not r["resumed"]]
    print(json.dumps({"summary": True, "trials": len(results), "resumed": len(tried) - len(failed),
                      "unresumable": len(failed), "finished_before_signal":
                      sum(bool(r.get("finished_first")) for r in results),
                      "skipped": sum("skipped" in r for r in results)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

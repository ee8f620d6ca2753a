"""Checks that a change leaves training unchanged: short runs of the reference presets
written by two checkouts, their metrics.jsonl compared row by row (wall-time fields aside).

    python -m benchmarks.same_behaviour run OUT_DIR [--only TAG ...]   # in each checkout
    python -m benchmarks.same_behaviour compare BEFORE AFTER

``run`` trains cartpole-a2c, -dqn, -ppo, -pqn, -rainbow (24k env steps) and reacher-ddpg,
-td3, -sac (16k) for seeds 0 and 1, cartpole-ppo with ``--seeds 4``, gymnax-cartpole-ppo,
cartpole-novel-ppo-rnn and minatar-breakout-pqn and -ppo (about 25k), each in its own
process with the compile cache off, using the rljax of the current directory; ``--only``
runs the runs of those tags alone. ``compare`` prints each run whose rows differ and exits 1
if any does. A refactor of the agents, loops or configs should compare equal everywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

RUNS: list[tuple[str, str, list[str]]] = [
    *[(f"{p}-s{s}", p, ["--seed", str(s), "--total-steps", "24000", "--chunk-steps", "4000"])
      for p in ("cartpole-a2c", "cartpole-dqn", "cartpole-ppo", "cartpole-pqn",
                "cartpole-rainbow") for s in (0, 1)],
    *[(f"{p}-s{s}", p, ["--seed", str(s), "--total-steps", "16000", "--chunk-steps", "2000"])
      for p in ("reacher-ddpg", "reacher-td3", "reacher-sac") for s in (0, 1)],
    ("cartpole-ppo-4seeds", "cartpole-ppo",
     ["--seeds", "4", "--total-steps", "24000", "--chunk-steps", "4000"]),
    ("gymnax-ppo-s0", "gymnax-cartpole-ppo",
     ["--total-steps", "24000", "--chunk-steps", "4000"]),
    ("ppo-rnn-s0", "cartpole-novel-ppo-rnn", ["--total-steps", "8192", "--chunk-steps", "2048"]),
    ("minatar-pqn-s0", "minatar-breakout-pqn",
     ["--total-steps", "24576", "--chunk-steps", "4096"]),
    ("minatar-ppo-s0", "minatar-breakout-ppo",
     ["--total-steps", "24576", "--chunk-steps", "8192"]),
]
WALL_TIME = ("time", "sps", "wall", "compile", "startup", "elapsed", "_s")


def run_all(out: str, only: list[str] | None = None) -> int:
    env = {**os.environ, "RLJAX_COMPILE_CACHE": "0",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    failed = 0
    for tag, preset, args in RUNS:
        if only and tag not in only:
            continue
        logdir = os.path.join(out, tag)
        os.makedirs(logdir, exist_ok=True)
        cmd = [sys.executable, "-m", "rljax.run.cli", "train", preset, "--logdir", logdir,
               "--quiet", "--no-tensorboard", *args]
        with open(os.path.join(logdir, "log.txt"), "w") as log:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if done.returncode:
            failed += 1
            print(f"{tag}: exit {done.returncode} (see {logdir}/log.txt)")
    return 1 if failed else 0


def _rows(path: pathlib.Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items()
             if not any(w in k for w in WALL_TIME)}
            for line in path.read_text().splitlines()]


def compare(before: str, after: str) -> int:
    a, b = pathlib.Path(before), pathlib.Path(after)
    compared = differ = 0
    for fa in sorted(a.rglob("metrics.jsonl")):
        rel = fa.relative_to(a)
        # <tag>/<run dir named with its start time>/[seed_k/]metrics.jsonl
        match = [f for f in b.glob(f"{rel.parts[0]}/*/{'/'.join(rel.parts[2:])}")]
        if not match:
            print(f"missing in {after}: {rel}")
            differ += 1
            continue
        compared += 1
        ra, rb = _rows(fa), _rows(match[0])
        if ra != rb:
            differ += 1
            pairs = zip(ra, rb, strict=False)  # a run may have fewer rows
            first = next((i for i, (x, y) in enumerate(pairs) if x != y), None)
            where = (f"first at row {first}: " + ", ".join(
                f"{k} {ra[first].get(k)} -> {rb[first].get(k)}"
                for k in sorted(set(ra[first]) | set(rb[first]))
                if ra[first].get(k) != rb[first].get(k))) if first is not None else (
                f"{len(ra)} rows against {len(rb)}")
            print(f"differs: {rel}: {where}")
    print(f"{compared} metrics files compared, {differ} differ or missing")
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run")
    runner.add_argument("out")
    runner.add_argument("--only", nargs="+", choices=[tag for tag, _, _ in RUNS],
                        help="the runs of these tags alone")
    cmp = sub.add_parser("compare")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_all(args.out, args.only)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

"""The stages of :mod:`benchmarks.gpu_campaign`, one per child process.

    python -m benchmarks.campaign_stages NAME --out DIR --deadline EPOCH_S [--smoke]

Each stage saves its result to ``DIR/stages/NAME.json`` (write and rename) after every item
it measures, so a stage cut at its deadline keeps what it finished. Heavy imports (JAX,
rljax) happen inside the stages, so the campaign's parent process never starts a backend.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die_with_parent(signum: int = signal.SIGKILL):
    """A ``preexec_fn`` that has Linux send ``signum`` to the child when its parent dies (a
    campaign killed with SIGKILL leaves no stage or training run behind); elsewhere a no-op."""
    parent = os.getpid()

    def set_signal():
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the signal was set
            os.kill(os.getpid(), signum)
    return set_signal


class Context(NamedTuple):
    out: str
    smoke: bool
    deadline: float  # time.time() by which the stage must have returned

    def left(self) -> float:
        return self.deadline - time.time()

    def save(self, name: str, result: dict) -> None:
        path = os.path.join(self.out, "stages", f"{name}.json")
        with open(f"{path}.tmp", "w") as f:
            json.dump(result, f, indent=2, default=str)
        os.replace(f"{path}.tmp", path)


def _versions() -> dict:
    out = {}
    for name in ("jax", "jaxlib", "jax-cuda13-plugin", "flax", "optax", "envpool", "gymnax",
                 "craftax", "brax", "playground", "mujoco-mjx", "numpy"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _nvidia_smi() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def machine(ctx: Context) -> dict:
    import jax

    result = {
        "backend": jax.default_backend(),
        "devices": [str(d.device_kind) for d in jax.devices()],
        "nvidia_smi": _nvidia_smi(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else None,
        "python": platform.python_version(),
        "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
        "versions": _versions(),
        "rljax_commit": _commit(),
    }
    ctx.save("machine", result)
    return result


def _junit_counts(path: str) -> dict:
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites)
              for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = [f"{case.get('classname')}::{case.get('name')}"
                              for case in root.iter("testcase")
                              if case.find("failure") is not None
                              or case.find("error") is not None]
    return counts


def tests(ctx: Context) -> dict:
    """The tests marked ``backend``: numerics and compiled behaviour that depend on the
    device. Several pytest workers share the accelerator, so none preallocates its memory."""
    xml = os.path.join(ctx.out, "tests.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "backend",
           f"--junitxml={xml}"]
    cmd += (["tests/losses/test_policy_gradient.py"] if ctx.smoke
            else ["-n", str(min(8, max(2, (os.cpu_count() or 2) // 2))), "--dist", "loadfile"])
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    began = time.monotonic()
    # At the stage's deadline pytest gets SIGINT: it stops and still writes the JUnit file of
    # the tests that finished, so a stage cut at its cap keeps their counts.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent())
    try:
        out, _ = proc.communicate(timeout=max(1.0, ctx.left() - 25))
        tail = out.strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        tail = ["timed out"]
    code = proc.returncode
    result = {"command": " ".join(cmd[1:]), "exit_code": code, "summary": " ".join(tail),
              "wall_s": round(time.monotonic() - began, 1)}
    if os.path.exists(xml):
        result.update(_junit_counts(xml))
    ctx.save("tests", result)
    return result


# (family, preset, chunk steps or None for the preset's own); brax: and playground: presets
# join when their packages are installed (:func:`_jax_physics_presets`).
THROUGHPUT = (
    ("envpool CartPole, A2C", "cartpole-a2c", 40_000),
    ("envpool CartPole, PPO", "cartpole-ppo", 40_960),
    ("envpool Breakout, DQN", "breakout-dqn", 1_024),
    ("envpool Reacher, DDPG", "reacher-ddpg", 20_000),
    ("gymnax CartPole, PPO", "gymnax-cartpole-ppo", 16_384),
    ("gymnax CartPole, PQN", "gymnax-cartpole-pqn", 16_384),
    ("MinAtar Breakout, PPO", "minatar-breakout-ppo", 81_920),
    ("MinAtar Breakout, PQN", "minatar-breakout-pqn", 40_960),
    ("Craftax-Classic, PPO", "craftax-classic-ppo", None),
)
# smoke: one family (the code is the same for every preset; the members and learning
# stages run a JAX-native preset)
SMOKE_THROUGHPUT = (("envpool CartPole, A2C", "cartpole-a2c", 2_000),)


def _jax_physics_presets() -> list[tuple[str, str, None]]:
    """The first brax: and the first playground: preset, where the package is installed."""
    from rljax.run.presets import PRESETS

    out = []
    for prefix, package in (("brax:", "brax"), ("playground:", "mujoco_playground")):
        if importlib.util.find_spec(package) is None:
            continue
        names = [n for n, p in PRESETS.items() if str(p.run.env_id).startswith(prefix)]
        if names:
            out.append((f"{prefix[:-1]} {PRESETS[names[0]].run.env_id.split(':', 1)[1]}",
                        names[0], None))
    return out


def throughput(ctx: Context) -> dict:
    from benchmarks import throughput as tp
    from rljax.run.presets import from_preset

    plan = SMOKE_THROUGHPUT if ctx.smoke else tuple(_jax_physics_presets()) + THROUGHPUT
    rounds = 1 if ctx.smoke else 3
    result = {"rounds": rounds, "families": {}}
    for family, preset, chunk in plan:
        if ctx.left() < 10:
            result["families"][family] = {"preset": preset, "skipped": "stage deadline"}
            continue
        try:
            steps = chunk or from_preset(preset).chunk_steps
            r = tp.bench_preset(preset, rounds, steps)
            result["families"][family] = {k: r[k] for k in (
                "preset", "env_id", "num_envs", "env_only_sps", "train_sps", "ratio")}
        except Exception as e:  # one family's failure must not lose the others'
            result["families"][family] = {"preset": preset, "error": f"{type(e).__name__}: {e}"}
        ctx.save("throughput", result)
    ctx.save("throughput", result)
    return result


MEMBERS = (("gymnax-cartpole-ppo", 16_384, (1, 16, 64, 256, 1024)),
           ("minatar-breakout-ppo", 8_192, (1, 16, 64)))
SMOKE_MEMBERS = (("gymnax-cartpole-ppo", 2_048, (1, 4)),)


def members(ctx: Context) -> dict:
    from benchmarks import throughput as tp

    result = {"presets": {}}
    for preset, chunk, counts in SMOKE_MEMBERS if ctx.smoke else MEMBERS:
        try:
            r = tp.bench_seeds(preset, 1 if ctx.smoke else 3, chunk, counts=counts)
            top = str(256 if 256 in counts else counts[-1])
            result["presets"][preset] = {
                "total_sps_by_seeds": r["total_sps_by_seeds"],
                "vs_one_seed": r["vs_one_seed"], f"ratio_{top}_to_1": r["vs_one_seed"][top],
                "gemm_2048_gflops": r["gemm_2048_gflops"],
                "update_gflops_by_seeds": r["update_gflops_by_seeds"]}
        except Exception as e:
            result["presets"][preset] = {"error": f"{type(e).__name__}: {e}"}
        ctx.save("members", result)
    return result


# (preset, seeds, share of the stage's time, extra arguments); smoke: toy budgets.
LEARNING = (("minatar-breakout-ppo", 16, 0.4, []),
            ("minatar-breakout-pqn", 16, 0.4, []),
            ("breakout-pqn", 1, 1.0, []))
# (one multi-seed JAX-native run for the report, one single-seed envpool run; small nets,
# short to compile: the stage's code is the same for every preset)
SMOKE_LEARNING = (("gymnax-cartpole-ppo", 2, 0.5, ["--total-steps", "8192"]),
                  ("cartpole-pqn", 1, 1.0, ["--total-steps", "4096"]))


def _existing_run(runs: str, preset: str) -> str | None:
    """The newest run directory of ``preset`` under ``runs`` holding a checkpoint."""
    dirs = sorted(d for d in glob.glob(os.path.join(runs, f"{preset}-s*"))
                  if os.path.isdir(os.path.join(d, "checkpoint")))
    return dirs[-1] if dirs else None


def _new_run(runs: str, preset: str, before: set) -> str | None:
    made = sorted(set(glob.glob(os.path.join(runs, f"{preset}-s*"))) - before)
    return made[-1] if made else None


def _train(ctx: Context, preset: str, seeds: int, extra: list, until: float) -> dict:
    """One training run, resumed if ``DIR/runs`` holds one of ``preset``; stopped with
    SIGINT (it saves a checkpoint) at ``until``."""
    runs = os.path.join(ctx.out, "runs")
    os.makedirs(runs, exist_ok=True)
    previous = _existing_run(runs, preset)
    if previous:
        cmd = ["train", "--resume", previous]
    else:
        cmd = ["train", preset, "--seeds", str(seeds), "--logdir", runs, *extra]
    cmd += ["--quiet", "--no-tensorboard"]
    before = set(glob.glob(os.path.join(runs, f"{preset}-s*")))
    began = time.monotonic()
    # If the stage is killed, the run still gets SIGINT: it saves a checkpoint and exits.
    proc = subprocess.Popen([sys.executable, "-m", "rljax.run.cli", *cmd], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=die_with_parent(signal.SIGINT))
    try:
        _, err = proc.communicate(timeout=max(1.0, until - time.time()))
        stopped = False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # finishes the chunk, saves a checkpoint, exits 130
        _, err = proc.communicate()
        stopped = True
    except KeyboardInterrupt:  # the campaign's SIGINT reached the run too: let it save
        _, err = proc.communicate()
        stopped = "interrupted"
    run_dir = previous or _new_run(runs, preset, before)
    out = {"command": "rljax " + " ".join(cmd), "exit_code": proc.returncode,
           "stopped_at_time_limit": stopped, "wall_s": round(time.monotonic() - began, 1),
           "run_dir": run_dir, "resumed": bool(previous)}
    if proc.returncode not in (0, 130):
        out["stderr_tail"] = err.strip().splitlines()[-5:]
    summary = os.path.join(run_dir or "", "summary.json")
    if run_dir and os.path.exists(summary):
        with open(summary) as f:
            out["summary"] = json.load(f)
    return out


def learning(ctx: Context) -> dict:
    # A chunk in flight when SIGINT comes finishes first, then the checkpoint is written.
    margin = 5.0 if ctx.smoke else 30.0
    result = {"runs": {}}
    for preset, seeds, share, extra in SMOKE_LEARNING if ctx.smoke else LEARNING:
        left = ctx.left() - margin
        if left < 5:
            result["runs"][preset] = {"skipped": "stage deadline"}
            continue
        result["runs"][preset] = _train(ctx, preset, seeds, extra, time.time() + share * left)
        ctx.save("learning", result)
        if result["runs"][preset]["stopped_at_time_limit"] == "interrupted":
            return result
    result["report"] = _report(ctx, result)
    ctx.save("learning", result)
    return result


def _report(ctx: Context, result: dict) -> str | None:
    """``rljax report`` over the runs with several seeds, into DIR/report.md, where rljax has
    that command."""
    if importlib.util.find_spec("rljax.run.report") is None:
        return None
    dirs = [r["run_dir"] for r in result["runs"].values()
            if r.get("run_dir") and (r.get("summary") or {}).get("num_seeds", 1) > 1]
    if not dirs or ctx.left() < 5:
        return None
    path = os.path.join(ctx.out, "report.md")
    done = subprocess.run([sys.executable, "-m", "rljax.run.cli", "report", *dirs, "--out",
                           path], cwd=ROOT, capture_output=True, text=True,
                          timeout=max(1.0, ctx.left()))
    return path if done.returncode == 0 else f"report failed: {done.stderr.strip()[-300:]}"


FUNCTIONS = {"machine": machine, "tests": tests, "throughput": throughput,
             "members": members, "learning": learning}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=sorted(FUNCTIONS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    ctx = Context(args.out, args.smoke, args.deadline)
    try:
        result = FUNCTIONS[args.stage](ctx)
    except KeyboardInterrupt:  # the campaign's SIGINT at the stage's cap: keep what is saved
        return 130
    return PARTIAL if _cut(result) else 0


# The exit code of a stage that returned in time but had to leave part of its work undone.
PARTIAL = 3


def _cut(result) -> bool:
    """Whether anything in ``result`` was skipped at the stage's deadline or timed out."""
    if isinstance(result, dict):
        return (result.get("skipped") == "stage deadline" or result.get("summary") == "timed out"
                or any(_cut(v) for v in result.values()))
    return False


if __name__ == "__main__":
    sys.exit(main())

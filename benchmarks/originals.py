"""rljax against the single-file references at the original implementations' configurations
(PureJaxRL's CartPole ppo, purejaxql's CartPole and MinAtar PQN): the steady rate of the
compiled training chunk, and the whole command as run with its compile time taken out.

- Steady (``--rows ppo pqn pqn-minatar``): rljax's chunk and the reference's
  (benchmarks/reference_native.py) at the same sizes, the same env steps per call, in
  one process, called in alternating pairs; the figures are the medians of the per-pair
  ratios of wall time and of the process's CPU time (rljax / reference: above 1 rljax is
  faster; on one XLA thread the CPU time is the work done, less moved by other processes'
  load than the wall time).
- As run (``--rows ppo-as-run``): ``rljax train gymnax-cartpole-ppo-purejaxrl`` as a user
  runs it (the persistent compilation cache off) and the reference's whole training as one
  program (PureJaxRL's way: ``jit`` of a scan over every update), each in a fresh process,
  alternated; each side's seconds are the process's wall time from outside less the time
  it spent compiling (rljax's summary ``compile_time_s``; the reference's ``lower`` and
  ``compile``). Both on one XLA thread, as the presets run.

The configurations: ``ppo``: 4 envs x 128 steps, 4 epochs x 4 minibatches, tanh 64-64, Adam
2.5e-4; ``pqn``: 32 envs x 64 steps, 4 epochs x 16 minibatches, LayerNorm 256-256, RAdam
1e-4, gradient norm 10; ``pqn-minatar``: the minatar-breakout-pqn preset, purejaxql's (128
envs x 32 steps, 2 epochs x 32 minibatches, LayerNorm 128-128). rljax is imported from
PYTHONPATH, so an older checkout can be measured by putting it first.

    python -m benchmarks.originals [--rows ppo pqn pqn-minatar ppo-as-run] [--pairs 7]
        [--total-steps 100000] [--tag before]

Writes benchmarks/results/originals[_TAG].json with the load before and after each row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import median, timed_wall_cpu, write_results

# row: (preset, config changes, loop sizes (num_envs, rollout_len) or None, updates a call)
STEADY = {
    "ppo": ("gymnax-cartpole-ppo-purejaxrl", {}, None, 32),
    "pqn": ("gymnax-cartpole-pqn", {"num_epochs": 4, "num_minibatches": 16, "lr": 1e-4,
                                    "hidden_sizes": (256, 256), "max_grad_norm": 10.0,
                                    "adam_eps": 1e-8}, (32, 64), 8),
    "pqn-minatar": ("minatar-breakout-pqn", {}, None, 10),
}
AS_RUN_PRESET = "gymnax-cartpole-ppo-purejaxrl"


def _run(preset: str, changes: dict, loop, updates: int):
    from rljax.records import OnPolicyLoop
    from rljax.run.presets import from_preset

    run = from_preset(preset)
    config = dataclasses.replace(run.config, **changes)
    if loop is not None:
        config = dataclasses.replace(config, loop=OnPolicyLoop(num_envs=loop[0],
                                                               rollout_len=loop[1]))
    steps = updates * config.loop.num_envs * config.loop.rollout_len
    return dataclasses.replace(run, config=config, chunk_steps=steps, total_steps=steps * 100)


def _sizes(config):
    from benchmarks.reference_native import Sizes

    return Sizes(config.loop.num_envs, config.loop.rollout_len, config.num_epochs,
                 config.num_minibatches, config.lr, config.hidden_sizes)


def steady(row: str, pairs: int) -> dict:
    from benchmarks.common import compiled_chunk
    from benchmarks.reference_native import ReferenceLoop

    preset, changes, loop, updates = STEADY[row]
    run = _run(preset, changes, loop, updates)
    program = compiled_chunk(run)
    reference = ReferenceLoop(run.algo, run.env_id, _sizes(run.config), updates)

    def rljax_call():
        program["state"], _ = program["chunk"](program["state"])
        return program["state"]

    def reference_call():
        reference._carry = reference._run(reference._carry)
        return reference._carry

    load_before = os.getloadavg()
    ours, theirs = [], []
    for k in range(pairs):  # alternate which goes first
        if k % 2 == 0:
            ours.append(timed_wall_cpu(rljax_call))
            theirs.append(timed_wall_cpu(reference_call))
        else:
            theirs.append(timed_wall_cpu(reference_call))
            ours.append(timed_wall_cpu(rljax_call))
    ratios = [t[0] / o[0] for o, t in zip(ours, theirs, strict=True)]
    cpu_ratios = [t[1] / o[1] for o, t in zip(ours, theirs, strict=True)]
    steps = program["steps"]
    return {"preset": preset, "changes": {k: str(v) for k, v in changes.items()},
            "steps_per_call": steps, "rljax_sps": steps / median([o[0] for o in ours]),
            "reference_sps": steps / median([t[0] for t in theirs]),
            "ratio_median": median(ratios), "ratios": ratios,
            "cpu_ratio_median": median(cpu_ratios), "cpu_ratios": cpu_ratios,
            "pairs": pairs, "load_before": load_before, "load_after": os.getloadavg()}


def whole_reference(total_steps: int) -> dict:
    """The reference's whole training in this process: ``{"compile_s", "train_s"}``."""
    import jax

    from benchmarks.reference_native import make_ppo

    sizes = _sizes(_run(AS_RUN_PRESET, {}, None, 1).config)
    updates = total_steps // (sizes.num_envs * sizes.rollout_len)
    init, run = make_ppo("gymnax:CartPole-v1", sizes)
    start = time.perf_counter()
    train = jax.jit(lambda key: run(init(key), updates)).lower(jax.random.key(0)).compile()
    compiled = time.perf_counter()
    jax.block_until_ready(train(jax.random.key(0)))
    return {"compile_s": compiled - start, "train_s": time.perf_counter() - compiled}


def _timed_process(argv: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{argv}: {proc.stderr[-2000:]}")
    return wall, proc.stdout


def _last_json(stdout: str) -> dict:
    return json.loads(stdout[stdout.rindex("\n{") + 1:] if "\n{" in stdout else stdout)


def as_run(pairs: int, total_steps: int) -> dict:
    env = {**os.environ, "RLJAX_COMPILE_CACHE": "0"}
    load_before = os.getloadavg()
    ours, theirs, parts = [], [], []
    with tempfile.TemporaryDirectory() as logdir:
        def rljax_s() -> float:
            wall, out = _timed_process(
                [sys.executable, "-m", "rljax.run.cli", "train", AS_RUN_PRESET,
                 "--total-steps", str(total_steps), "--logdir", logdir, "--no-tensorboard",
                 "--quiet"], env)
            summary = _last_json(out)
            parts.append({k: summary.get(k) for k in ("compile_time_s", "setup_s",
                                                      "finish_s", "wall_time_s",
                                                      "env_steps")})
            return wall - summary["compile_time_s"]

        def reference_s() -> float:
            wall, out = _timed_process(
                [sys.executable, "-m", "benchmarks.originals", "--whole-reference",
                 str(total_steps)], env)
            return wall - _last_json(out)["compile_s"]

        for k in range(pairs):
            if k % 2 == 0:
                ours.append(rljax_s())
                theirs.append(reference_s())
            else:
                theirs.append(reference_s())
                ours.append(rljax_s())
    ratios = [t / o for o, t in zip(ours, theirs, strict=True)]
    return {"preset": AS_RUN_PRESET, "total_steps": total_steps,
            "rljax_s_less_compile": ours, "reference_s_less_compile": theirs,
            "ratio_median": median(ratios), "ratios": ratios, "rljax_summaries": parts,
            "pairs": pairs, "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=[*STEADY, "ppo-as-run"],
                        choices=[*STEADY, "ppo-as-run"])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--total-steps", type=int, default=100_352,
                        help="env steps of each whole command (ppo-as-run)")
    parser.add_argument("--whole-reference", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    from rljax.cpu_threads import set_cpu_threads

    set_cpu_threads(1)  # the presets' pool, for both sides
    if args.whole_reference is not None:
        print(json.dumps(whole_reference(args.whole_reference)))
        return
    import rljax

    results = {"rljax": os.path.dirname(rljax.__file__), "rows": {}}
    for row in args.rows:
        r = (as_run(args.pairs, args.total_steps) if row == "ppo-as-run"
             else steady(row, args.pairs))
        results["rows"][row] = r
        print(f"{row}: rljax / reference, median of {r['pairs']} pairs: "
              f"{r['ratio_median']:.3f} (pairs {min(r['ratios']):.2f}-{max(r['ratios']):.2f})"
              + (f", CPU time {r['cpu_ratio_median']:.3f}" if "cpu_ratio_median" in r else "")
              + "; "
              f"load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}", flush=True)
    path = write_results("originals" + (f"_{args.tag}" if args.tag else ""), results)
    print(path)


if __name__ == "__main__":
    main()

"""Training throughput against the raw envpool XLA ceiling, in one process.

For each agent the env-only ceiling (random actions in a jitted scan, same task
and num_envs) and the training loop (the preset's compiled chunk) are timed in
interleaved rounds; the figure of merit is the ratio of their medians.

    python -m benchmarks.throughput [--only a2c] [--rounds 5]

Writes benchmarks/results/throughput.json.
"""

from __future__ import annotations

import argparse
import dataclasses

import jax

from benchmarks.common import (
    interleaved,
    machine,
    make_random_rollout,
    median,
    timed,
    write_results,
)
from rljax import envs
from rljax.config import from_preset
from rljax.training.driver import build


def bench_preset(preset: str, rounds: int, chunk_steps: int, **overrides) -> dict:
    """Ceiling and training steps/s for a preset at its num_envs."""
    run = from_preset(preset, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    env, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    chunk = trainer.chunk.lower(state).compile()
    state, _ = chunk(state)  # warm up (learning may start later in off-policy loops)
    box = {"train": state}

    def train_sps():
        def go():
            box["train"], metrics = chunk(box["train"])
            return metrics
        return trainer.steps_per_chunk / timed(go)

    ceiling_env = envs.make(run.env_id, run.config.num_envs, run.seed + 1,
                            **dict(run.env_options))
    steps = max(1, trainer.steps_per_chunk // run.config.num_envs)
    rollout = make_random_rollout(ceiling_env, steps)
    ebox = {"state": rollout(ceiling_env.reset(), jax.random.key(1))}

    def env_sps():
        def go():
            ebox["state"] = rollout(ebox["state"], jax.random.key(2))
            return ebox["state"]
        return steps * run.config.num_envs / timed(go)

    samples = interleaved({"env_only": env_sps, "train": train_sps}, rounds)
    env_m, train_m = median(samples["env_only"]), median(samples["train"])
    return {
        "preset": preset,
        "env_id": run.env_id,
        "num_envs": run.config.num_envs,
        "env_steps_per_update": trainer.steps_per_update,
        "env_only_sps": env_m,
        "train_sps": train_m,
        "ratio": train_m / env_m,
        "rounds": samples,
    }


BENCHES = {
    "a2c": lambda rounds: bench_preset("cartpole-a2c", rounds, chunk_steps=40_000),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), help="benchmarks to run")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = {"machine": machine(), "results": {}}
    for name in args.only or BENCHES:
        r = BENCHES[name](args.rounds)
        results["results"][name] = r
        print(f"{name:<14} {r['env_id']:<12} envs={r['num_envs']:<3} env-only "
              f"{r['env_only_sps']:>10,.0f} steps/s   train {r['train_sps']:>10,.0f} steps/s   "
              f"ratio {r['ratio']:.2f}")
    path = write_results("throughput", results)
    print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()

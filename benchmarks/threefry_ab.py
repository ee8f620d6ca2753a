"""Training chunks compiled with JAX's own threefry lowering on CPU and with the unrolled one
rljax installs (``rljax.threefry``), timed in interleaved rounds in one process.

    python -m benchmarks.threefry_ab [PRESET ...] [--rounds 7]

Each preset is built twice and its chunk compiled once under each lowering (JAX-native
presets only: two envpool pools of one task in a process can fail); the ratio is the median
of the per-round ratios, so load from other processes largely cancels.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from statistics import median

import jax

from rljax import threefry
from rljax.run.build import build
from rljax.run.presets import from_preset

PRESETS = ("gymnax-cartpole-ppo", "gymnax-cartpole-pqn", "minatar-breakout-ppo",
           "minatar-breakout-pqn")


def compare(preset: str, rounds: int, chunk_steps: int = 16_384) -> dict:
    """``{"rolled": sps, "unrolled": sps, "unrolled_vs_rolled": median ratio}``."""
    run = dataclasses.replace(from_preset(preset, tensorboard=False), chunk_steps=chunk_steps,
                              total_steps=chunk_steps * 1000)
    programs = {}
    for name, unrolled in (("rolled", False), ("unrolled", True)):
        _, _, trainer, _ = build(run)
        state = trainer.init(jax.random.key(0))
        with threefry.lowering(unrolled):
            chunk = trainer.chunk.lower(state).compile()
        state, _ = chunk(state)  # warm up
        programs[name] = {"chunk": chunk, "state": jax.block_until_ready(state),
                          "steps": trainer.steps_per_chunk, "seconds": []}
    for _ in range(rounds):
        for p in programs.values():
            start = time.perf_counter()
            p["state"], _ = p["chunk"](p["state"])
            jax.block_until_ready(p["state"])
            p["seconds"].append(time.perf_counter() - start)
    rolled, unrolled = programs["rolled"], programs["unrolled"]
    return {"rolled": rolled["steps"] / median(rolled["seconds"]),
            "unrolled": unrolled["steps"] / median(unrolled["seconds"]),
            "unrolled_vs_rolled": median(a / b for a, b in zip(
                rolled["seconds"], unrolled["seconds"], strict=True))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=PRESETS)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    for preset in args.presets:
        r = compare(preset, args.rounds)
        print(f"{preset:<24} env steps/s rolled {r['rolled']:>9,.0f}  unrolled "
              f"{r['unrolled']:>9,.0f}  unrolled / rolled {r['unrolled_vs_rolled']:.3f}",
              flush=True)


if __name__ == "__main__":
    main()

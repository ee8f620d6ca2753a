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

from benchmarks.common import chunk_seconds, compiled_chunk, median
from rljax import threefry
from rljax.run.presets import from_preset

PRESETS = ("gymnax-cartpole-ppo", "gymnax-cartpole-pqn", "minatar-breakout-ppo",
           "minatar-breakout-pqn")


def compare(preset: str, rounds: int, chunk_steps: int = 16_384) -> dict:
    """``{"rolled": sps, "unrolled": sps, "unrolled_vs_rolled": median ratio}``."""
    run = dataclasses.replace(from_preset(preset, tensorboard=False), chunk_steps=chunk_steps,
                              total_steps=chunk_steps * 1000)
    programs = {name: compiled_chunk(run, lambda unrolled=unrolled: threefry.lowering(unrolled))
                for name, unrolled in (("rolled", False), ("unrolled", True))}
    seconds = chunk_seconds(programs, rounds)
    steps = programs["rolled"]["steps"]
    rolled, unrolled = seconds["rolled"], seconds["unrolled"]
    return {"rolled": steps / median(rolled), "unrolled": steps / median(unrolled),
            "unrolled_vs_rolled": median([a / b for a, b in zip(rolled, unrolled,
                                                                 strict=True)])}


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

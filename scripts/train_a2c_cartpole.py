"""Reproduces the cartpole-a2c reference run: three seeds, 500k env steps each.

    python scripts/train_a2c_cartpole.py [--seeds 0 1 2] [--logdir runs]

Prints one line per seed (steps to solve, final 100-episode mean, wall time) and
exits non-zero if a seed fails to solve.
"""

from __future__ import annotations

import argparse
import sys

import rljax


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--logdir", default="runs")
    args = parser.parse_args(argv)
    solved = 0
    for seed in args.seeds:
        run = rljax.train("cartpole-a2c", seed=seed, logdir=args.logdir, progress=True)
        s = run.summary
        solved += s["solved_at_step"] is not None
        print(f"seed {seed}: solved at {s['solved_at_step']} env steps, final mean "
              f"{s['final_return_mean']:.1f}, wall {s['wall_time_s']:.1f} s "
              f"(compile {s['compile_time_s']:.1f} s), {s['sps']:,.0f} steps/s, {run.run_dir}")
    print(f"{solved}/{len(args.seeds)} seeds solved")
    return 0 if solved == len(args.seeds) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Reproduces the Breakout DQN reference run (``breakout-dqn``).

The reference trains 1,000,000 updates (32M env steps); the preset's default budget is
10M, so pass ``--total-steps 32000000`` for the full reference run (the schedules'
breakpoints are the reference's either way). ``--preset breakout-dqn-500k`` runs the
labelled 500k-step CPU demonstration instead.

    python scripts/train_dqn_breakout.py [--total-steps 32000000] [--seed 0]
                                         [--logdir runs] [--plot docs/breakout-dqn.png]
                                         [--resume RUN_DIR]

Prints the final 100-episode mean score (whole games, raw score) against a random
policy's (about 1.2) and the wall time; exits non-zero unless the final mean is at
least 3x the random policy's.
"""

from __future__ import annotations

import argparse
import sys

import rljax
from rljax.run.plotting import plot_runs

RANDOM_POLICY_RETURN = 1.2  # mean game score of uniform random actions in Breakout-v5


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="breakout-dqn",
                        choices=["breakout-dqn", "breakout-dqn-500k"])
    parser.add_argument("--total-steps", type=int, help="env-step budget (default: preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--plot", help="PNG of the learning curve")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a saved run")
    args = parser.parse_args(argv)
    run = rljax.train(args.preset, seed=args.seed, logdir=args.logdir, progress=True,
                      total_steps=args.total_steps, resume=args.resume)
    s = run.summary
    final = s["final_return_mean"] or 0.0
    print(f"{args.preset} seed {args.seed}: final 100-episode mean score {final:.2f} "
          f"(random policy ~{RANDOM_POLICY_RETURN}) after {s['env_steps']:,} env steps and "
          f"{s['episodes']:,} games, wall {s['wall_time_s'] / 3600:.2f} h "
          f"({s['sps']:,.0f} steps/s), {run.run_dir}")
    if args.plot:
        print(plot_runs([run.run_dir], args.plot, title=f"{args.preset} (seed {args.seed})"))
    return 0 if final >= 3 * RANDOM_POLICY_RETURN else 1


if __name__ == "__main__":
    sys.exit(main())

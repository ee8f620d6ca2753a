"""Reproduces the HalfCheetah-v5 SAC run: ``halfcheetah-sac`` (the SAC paper's
configuration), 1M env steps, the seeds trained as one program.

    python scripts/train_sac_halfcheetah.py [--seeds 1] [--seed 0] [--preset halfcheetah-sac]
                                            [--logdir runs] [--plot docs/halfcheetah-sac.png]

One seed takes hours on a 2-core CPU (one gradient step of 256 with 256-256 networks per
env step; see docs/benchmarks.md); on a GPU, pass ``--seeds 3`` or more. Prints one line
per seed (final 100-episode mean, evaluation return of the noise-free policy, the env step
at which the mean first reached ``--target``) and the wall time; exits non-zero unless
every seed reaches the target within the budget.
"""

from __future__ import annotations

import argparse
import sys

from _report import report_seeds

import rljax
from rljax.run.plotting import plot_runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="halfcheetah-sac",
                        choices=["halfcheetah-sac", "halfcheetah-td3", "hopper-sac"])
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds, trained as one program")
    parser.add_argument("--target", type=float, default=9_000.0,
                        help="100-episode mean return to reach (hopper-sac: pass 3000)")
    parser.add_argument("--total-steps", type=int, help="env-step budget (default: preset's)")
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--plot", help="PNG of the learning curve")
    args = parser.parse_args(argv)
    run = rljax.train(args.preset, seed=args.seed, num_seeds=args.seeds, logdir=args.logdir,
                      total_steps=args.total_steps, eval_every=100_000, progress=True)
    ok = report_seeds(run, args.seed, args.seeds, args.target)
    if args.plot:
        print(plot_runs([run.run_dir], args.plot, title=f"{args.preset}"))
    return 0 if ok == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())

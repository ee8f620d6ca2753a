"""Reproduces the Reacher-v5 DDPG runs: three seeds of ``reacher-ddpg`` (or of
``reacher-ddpg-reference`` with ``--preset``).

    python scripts/train_ddpg_reacher.py [--preset reacher-ddpg] [--seeds 0 1 2]
                                         [--logdir runs] [--plot docs/reacher-ddpg.png]

Prints one line per seed: the env step at which the 100-episode mean return first
reached -4.0 (read from the metrics rows, one per 20k env steps), the step at which it
reached the solve threshold -3.75 (``solved_at_step``, exact), the final mean and the
wall time; draws the seeds' mean curve when ``--plot`` is given. Exits non-zero unless
every seed reaches -4.0 within 300k env steps and -3.75 within 1M (reacher-ddpg) or
solves within the budget (reference).
"""

from __future__ import annotations

import argparse
import sys

import rljax
from rljax.run.plotting import plot_runs

TARGET, TARGET_STEPS, SOLVE_STEPS = -4.0, 300_000, 1_000_000


def first_step_at(metrics: list[dict], level: float) -> int | None:
    for row in metrics:
        value = row.get("return_mean_100")
        if value is not None and value >= level:
            return row["env_steps"]
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="reacher-ddpg",
                        choices=["reacher-ddpg", "reacher-ddpg-reference"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--total-steps", type=int, help="env-step budget (default: preset's)")
    parser.add_argument("--plot", help="PNG of the seeds' learning curves")
    args = parser.parse_args(argv)
    ok, run_dirs = 0, []
    for seed in args.seeds:
        run = rljax.train(args.preset, seed=seed, logdir=args.logdir, progress=True,
                          total_steps=args.total_steps)
        s, run_dirs = run.summary, run_dirs + [run.run_dir]
        at_target = first_step_at(run.metrics, TARGET)
        solved = s["solved_at_step"]
        if args.preset == "reacher-ddpg":
            passed = (at_target is not None and at_target <= TARGET_STEPS
                      and solved is not None and solved <= SOLVE_STEPS)
        else:
            passed = solved is not None
        ok += passed
        print(f"seed {seed}: {TARGET} reached at {at_target} env steps, solved ({s['threshold']}) "
              f"at {solved}, final mean {s['final_return_mean']:.2f} after {s['env_steps']:,} "
              f"steps, wall {s['wall_time_s']:.0f} s (compile {s['compile_time_s']:.0f} s), "
              f"{s['sps']:,.0f} steps/s, {run.run_dir}", flush=True)
    if args.plot:
        print(plot_runs(run_dirs, args.plot, title=f"{args.preset} on Reacher-v5"))
    print(f"{ok}/{len(args.seeds)} seeds passed")
    return 0 if ok == len(args.seeds) else 1


if __name__ == "__main__":
    sys.exit(main())

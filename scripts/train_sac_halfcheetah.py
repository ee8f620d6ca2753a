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
import json
import os
import sys

import rljax
from rljax.run.plotting import plot_runs


def first_step_at(metrics: list[dict], key: str, level: float) -> int | None:
    for row in metrics:
        value = row.get(key)
        if value is not None and value >= level:
            return row["env_steps"]
    return None


def member_metrics(run_dir: str, seed: int, several: bool) -> list[dict]:
    """A seed's metrics rows (its own folder when several seeds ran as one program)."""
    path = os.path.join(run_dir, f"seed_{seed}" if several else "", "metrics.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


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
    s = run.summary
    seeds = s.get("seeds") or [dict(seed=args.seed, **s)]
    ok = 0
    for one in seeds:
        rows = member_metrics(run.run_dir, one["seed"], args.seeds > 1)
        reached = first_step_at(rows, "return_mean_100", args.target)
        ok += reached is not None
        print(f"seed {one['seed']}: {args.target:g} reached at {reached} env steps, final "
              f"100-episode mean {one['final_return_mean']:.0f}, evaluation "
              f"{one.get('eval_return_mean')}", flush=True)
    print(f"{ok}/{len(seeds)} seeds reached {args.target:g}; "
          f"{s['env_steps']:,} steps per seed in {s['wall_time_s']:.0f} s "
          f"(compile {s['compile_time_s']:.0f} s), {s['sps']:,.0f} steps/s, {run.run_dir}")
    if args.plot:
        print(plot_runs([run.run_dir], args.plot, title=f"{args.preset}"))
    return 0 if ok == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())

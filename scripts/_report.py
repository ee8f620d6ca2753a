"""What the training scripts print: each seed's first env step at a target return, its
final 100-episode mean, and the run's wall time, read from the run directory."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import rljax
from rljax.run.plotting import plot_runs


def first_step_at(metrics: list[dict], key: str, level: float) -> int | None:
    """The env step of the first metrics row whose ``key`` is at least ``level``."""
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


def report_seeds(run: Any, first_seed: int, num_seeds: int, target: float,
                 unit: str = "return") -> int:
    """Prints one line per seed and one for the run; returns how many seeds reached
    ``target`` (100-episode mean)."""
    s = run.summary
    seeds = s.get("seeds") or [dict(seed=first_seed, **s)]
    ok = 0
    for one in seeds:
        rows = member_metrics(run.run_dir, one["seed"], num_seeds > 1)
        reached = first_step_at(rows, "return_mean_100", target)
        ok += reached is not None
        final = one["final_return_mean"]
        print(f"seed {one['seed']}: {unit} {target:g} reached at {reached} env steps, final "
              f"100-episode mean {final if final is None else round(final, 2)}, evaluation "
              f"{one.get('eval_return_mean')}", flush=True)
    print(f"{ok}/{len(seeds)} seeds reached {target:g}; {s['env_steps']:,} steps per seed in "
          f"{s['wall_time_s']:.0f} s (compile {s['compile_time_s']:.0f} s), "
          f"{s['sps']:,.0f} steps/s, {run.run_dir}")
    return ok


RANDOM_BREAKOUT_SCORE = 1.2  # mean game score of uniform random actions in Breakout-v5


def breakout_main(doc: str, presets: list[str], argv: list[str] | None = None) -> int:
    """The command line of the Breakout scripts: trains ``--preset`` (the first of
    ``presets`` by default), prints each seed's result and exits 0 when every seed's
    100-episode mean reached ``--target``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--preset", default=presets[0], choices=presets)
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds, trained as one program")
    parser.add_argument("--target", type=float, default=10.0,
                        help=f"100-episode mean game score to reach (random policy: "
                             f"~{RANDOM_BREAKOUT_SCORE})")
    parser.add_argument("--total-steps", type=int, help="env-step budget (default: preset's)")
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--plot", help="PNG of the learning curve")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a saved run")
    args = parser.parse_args(argv)
    budget = {} if args.total_steps is None else {"total_steps": args.total_steps}
    if args.resume:  # the configuration it was saved with
        run = rljax.train(resume=args.resume, progress=True, **budget)
    else:
        run = rljax.train(args.preset, seed=args.seed, num_seeds=args.seeds,
                          logdir=args.logdir, progress=True, **budget)
    ok = report_seeds(run, args.seed, args.seeds, args.target, unit="score")
    if args.plot:
        print(plot_runs([run.run_dir], args.plot, title=args.preset))
    return 0 if ok == args.seeds else 1

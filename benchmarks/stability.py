"""Long-run stability: do presets stay solved when trained well past their budgets?

    python -m benchmarks.stability [--presets P ...] [--seeds 8] [--factor 5] [--set F=V ...]
    python -m benchmarks.stability --analyze RUN_DIR [RUN_DIR ...]

Each preset trains ``--seeds`` seeds in one program (``rljax train PRESET --seeds N``) for
``--factor`` times its step budget, with ``stop_on_solve`` off and each ``--set
FIELD=VALUE`` (as ``rljax train --set``) on its agent config. From each seed's metrics
rows (the 100-episode mean return, one row per ``chunk_steps``) it reads:

* solved at: ``solved_at_step`` of the summary (exact), and the first row at or above
  the preset's threshold (None: never), from which the next column counts;
* min after: the lowest 100-episode mean from that row on;
* final: the last row's 100-episode mean;
* stays: whether min after is still at or above the threshold.

and writes one table per preset into ``benchmarks/results/stability.json`` (keyed by
preset, seeds, factor and the ``--set`` fields; earlier entries are kept) and prints it.
``--analyze`` reads run directories made before (by this script or by the same ``rljax
train`` command) instead of training. The run directories go under ``--logdir`` (default
a temporary folder).

``--metric eval_return_mean`` reads the noise-free evaluations instead (the rows of a run
with ``eval_every``), where the training mean pays for exploration: the Reacher presets'
Gaussian action noise costs about 1.0 of return per episode in control cost, so their
training mean sits below the threshold their noise-free policy reaches. ``--threshold``
reads the rows against another yardstick than the preset's, and ``--window K`` reads each
row as the mean of K rows (K x 100 episodes where each row's are new: evaluations, or
Reacher's 50-step training episodes), steadier where a preset's converged policy scores
within a few standard errors of its threshold (the Reacher presets:
``benchmarks/frozen_policy.py``); each is added to the results key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

from benchmarks.common import RESULTS_DIR, add_result

# The CartPole and Reacher presets, envpool and gymnax, memory presets included.
PRESETS = ("cartpole-a2c", "cartpole-dqn", "cartpole-rainbow", "cartpole-ppo", "cartpole-pqn",
           "gymnax-cartpole-ppo", "gymnax-cartpole-ppo-purejaxrl", "gymnax-cartpole-pqn",
           "reacher-ddpg", "reacher-td3",
           "reacher-sac", "reacher-ppo", "cartpole-novel-ppo-rnn", "cartpole-novel-pqn-rnn")
RESULTS = os.path.join(RESULTS_DIR, "stability.json")


def _rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


METRICS = ("return_mean_100", "eval_return_mean")


def seed_table(rows: list[dict], threshold: float, metric: str = "return_mean_100",
               window: int = 1) -> dict:
    """solved at / min after / final / stays of one seed's metrics rows, read from
    ``metric`` (rows without it are skipped), each row as the mean of it and the
    ``window - 1`` rows before it (from the ``window``-th row on)."""
    curve = [(r["env_steps"], r[metric]) for r in rows if r.get(metric) is not None]
    if window > 1:
        curve = [(curve[i][0], sum(v for _, v in curve[i + 1 - window:i + 1]) / window)
                 for i in range(window - 1, len(curve))]
    solved = next((i for i, (_, ret) in enumerate(curve) if ret >= threshold), None)
    after = None if solved is None else min(ret for _, ret in curve[solved:])
    return {"solved_at": None if solved is None else curve[solved][0],
            "min_after": after, "final": curve[-1][1] if curve else None,
            "env_steps": curve[-1][0] if curve else None,
            "stays": after is not None and after >= threshold}


def analyze(run_dir: str, metric: str = "return_mean_100",
            threshold: float | None = None, window: int = 1) -> dict:
    """The stability table of a run directory (one seed, or each member of several), read
    from ``metric`` against ``threshold`` (default: the run's own), over ``window``-row
    means."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    if threshold is None:
        threshold = config["threshold"]
    if threshold is None:
        raise ValueError(f"{run_dir} has no solve threshold; give --threshold")
    members = sorted(d for d in os.listdir(run_dir) if d.startswith("seed_"))
    paths = ([os.path.join(run_dir, d, "metrics.jsonl") for d in members] if members
             else [os.path.join(run_dir, "metrics.jsonl")])
    summary_path = os.path.join(run_dir, "summary.json")
    summary = {}
    if os.path.isfile(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
    exact = {s["seed"]: s.get("solved_at_step") for s in summary.get("seeds", [summary])
             if "seed" in s}
    seeds = {}
    for path in paths:
        name = os.path.basename(os.path.dirname(path))
        seed = int(name[len("seed_"):]) if name.startswith("seed_") else config["seed"]
        seeds[seed] = seed_table(_rows(path), threshold, metric, window)
        if metric == "return_mean_100" and threshold == config["threshold"] and window == 1:
            # summary.json's solved_at_step is exact; the rows' is the first row past it.
            seeds[seed]["solved_at_exact"] = exact.get(seed)
    if not any(s["env_steps"] for s in seeds.values()):
        raise ValueError(f"{run_dir}: no metrics row has {metric!r}"
                         + (" (was the run trained with eval_every?)"
                            if metric == "eval_return_mean" else ""))
    return {"preset": config.get("preset"), "threshold": threshold, "metric": metric,
            "window": window,
            "total_steps": config["total_steps"], "run_dir": run_dir, "seeds": seeds,
            "solved": sum(s["solved_at"] is not None for s in seeds.values()),
            "stay_solved": sum(s["stays"] for s in seeds.values()), "count": len(seeds)}


def train(preset: str, seeds: int, factor: float, logdir: str,
          overrides: dict | None = None) -> str:
    import rljax
    from rljax.run.presets import from_preset

    budget = from_preset(preset).total_steps
    config = from_preset(preset, num_seeds=seeds, total_steps=int(budget * factor),
                         logdir=logdir, tensorboard=False, **(overrides or {}))
    run = rljax.train(dataclasses.replace(config, stop_on_solve=False), progress=True)
    return run.run_dir


def render(table: dict) -> str:
    fmt = lambda x: "-" if x is None else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"
    reached = max((s["env_steps"] or 0) for s in table["seeds"].values())
    lines = [f"{table['preset']}, {reached:,} of {table['total_steps']:,} env steps: "
             f"{table['stay_solved']} of {table['count']} seeds stay >= {table['threshold']} "
             f"after solving ({table['solved']} solved; {table.get('metric', METRICS[0])}"
             + (f", means of {table['window']} rows" if table.get("window", 1) > 1 else "")
             + ")",
             "| seed | solved at | min after solving | final |", "| --- | --- | --- | --- |"]
    for seed, s in table["seeds"].items():
        lines.append(f"| {seed} | {fmt(s.get('solved_at_exact') or s['solved_at'])} | "
                     f"{fmt(s['min_after'])} | "
                     f"{fmt(s['final'])} |")
    return "\n".join(lines)


def record(table: dict, label: str) -> None:
    key = f"{table['preset']} seeds={table['count']} steps={table['total_steps']}"
    key += f" {label}" if label else ""
    add_result(RESULTS, key, dict(table, run_dir=os.path.basename(table["run_dir"])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--factor", type=float, default=5.0)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--analyze", nargs="+", metavar="RUN_DIR",
                        help="tabulate these run directories instead of training")
    parser.add_argument("--label", default="", help="a word added to the results key "
                                                   "(say, before / after a change)")
    parser.add_argument("--metric", default=METRICS[0], choices=METRICS,
                        help="the rows' figure read: the training episodes' 100-episode "
                             "mean, or the noise-free evaluation (runs with eval_every)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="read against this return instead of the preset's threshold")
    parser.add_argument("--window", type=int, default=1, metavar="K",
                        help="read each row as the mean of it and the K - 1 rows before "
                             "(K x the episodes: a steadier figure near the threshold)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override an agent config field or a run setting "
                             "(eval_every, eval_episodes, cpu_devices, schedule_steps: "
                             "rljax train's --eval-every ...) of every preset trained "
                             "(added to the results key); repeatable")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.factor <= 0 or args.window < 1:
        parser.error("--seeds and --window must be >= 1 and --factor > 0")
    from rljax.run.config import parse_assignments

    try:
        overrides = parse_assignments(args.set)
    except ValueError as e:
        parser.error(str(e))
    words = [f"{k} {v}" for k, v in overrides.items()]
    words += [] if args.metric == METRICS[0] else [args.metric]
    words += [] if args.threshold is None else [f"threshold {args.threshold:g}"]
    words += [] if args.window == 1 else [f"window {args.window}"]
    label = " ".join(words + [args.label]).strip()
    run_dirs = args.analyze or []
    if not run_dirs:
        from rljax.run.presets import from_preset

        try:  # a bad field or value: one line before anything compiles
            runs = {p: from_preset(p, num_seeds=args.seeds, **overrides) for p in args.presets}
        except ValueError as e:
            parser.error(str(e))
        quiet = [p for p, run in runs.items() if args.metric != METRICS[0] and not run.eval_every]
        if quiet:  # else the error would come after hours of training
            parser.error(f"--metric {args.metric} reads evaluations, and {', '.join(quiet)} "
                         "does not evaluate (eval_every 0): add --set eval_every=STEPS")
        logdir = args.logdir or tempfile.mkdtemp(prefix="rljax-stability-")
        run_dirs = [train(p, args.seeds, args.factor, logdir, overrides)
                    for p in args.presets]
    for run_dir in run_dirs:
        try:
            table = analyze(run_dir, args.metric, args.threshold, args.window)
        except ValueError as e:
            parser.error(str(e))
        record(table, label)
        print(render(table), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How often does a policy that no longer changes read below the threshold?

    python -m benchmarks.frozen_policy RUN_DIR [--best | --from-checkpoint STEP]
        [--episodes 1000] [--rounds 10] [--block 100] [--threshold T] [--evals N]

A run's stability is read from a long series of 100-episode means (the training episodes
or the noise-free evaluations, one per metrics row). Each mean is a sample: even a policy
that never changes reads above and below its true mean, by about the episodes' standard
deviation / sqrt(100). Where a preset's threshold lies within a few such widths of what
its converged policy scores, "never below the threshold after first reaching it" fails
by chance over a long run, whatever the agent does.

This loads one checkpoint of each member (seed) of RUN_DIR, plays its noise-free policy
on ``--rounds`` x ``--episodes`` fresh episodes (each round its own env seed), cuts the
returns into blocks of ``--block`` episodes (a 100-episode mean as the run reads it) and
reports per member: the mean over all episodes (the policy's score, known to within
std / sqrt(episodes)), the episodes' standard deviation, the share of blocks below the
threshold, and the chance that ``--evals`` blocks in a row all stay at or above it: as
counted, ``(1 - share) ** evals``, and from the normal approximation. ``--evals`` defaults
to the number of evaluation rows of the run read (its total steps / eval_every). The table
also goes into ``benchmarks/results/frozen_policy.json``, keyed by the run's preset, the
checkpoint read and ``--label``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from statistics import NormalDist

import numpy as np

from benchmarks.common import RESULTS_DIR, add_result

RESULTS = os.path.join(RESULTS_DIR, "frozen_policy.json")


def blocks_below(returns: np.ndarray, block: int, threshold: float) -> tuple[int, int]:
    """(blocks whose mean is below ``threshold``, blocks) of consecutive ``block``-episode
    means of ``returns`` (a trailing part block is left out)."""
    n = len(returns) // block
    if n == 0:
        raise ValueError(f"{len(returns)} returns make no block of {block}")
    means = np.asarray(returns[: n * block], dtype=np.float64).reshape(n, block).mean(axis=1)
    return int((means < threshold).sum()), n


def stay_chance(mean: float, std: float, block: int, threshold: float, evals: int) -> float:
    """The normal approximation's chance that ``evals`` independent ``block``-episode means
    of a policy scoring ``mean`` with episode std ``std`` all stay >= ``threshold``."""
    if std <= 0:
        return float(mean >= threshold)
    below = NormalDist(mean, std / math.sqrt(block)).cdf(threshold)
    return (1.0 - below) ** evals


def member_rows(returns_per_member: list[np.ndarray], block: int, threshold: float,
                evals: int) -> list[dict]:
    rows = []
    for k, returns in enumerate(returns_per_member):
        returns = np.asarray(returns, dtype=np.float64)
        below, n = blocks_below(returns, block, threshold)
        mean, std = float(returns.mean()), float(returns.std(ddof=1))
        rows.append({"member": k, "episodes": len(returns), "mean": mean, "std": std,
                     "mean_se": std / math.sqrt(len(returns)), "block_sd": std / math.sqrt(block),
                     "blocks_below": below, "blocks": n,
                     "stay_counted": (1.0 - below / n) ** evals,
                     "stay_normal": stay_chance(mean, std, block, threshold, evals)})
    return rows


def render(rows: list[dict], threshold: float, block: int, evals: int) -> str:
    lines = [f"threshold {threshold:g}, blocks of {block} episodes, {evals} evaluations in a row",
             f"| member | episodes | mean | episode std | sd of a {block}-episode mean | "
             f"blocks below | P(all {evals} stay), counted | normal approx. |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['member']} | {r['episodes']:,} | {r['mean']:.3f} +- {r['mean_se']:.3f} "
                     f"| {r['std']:.3f} | {r['block_sd']:.3f} | {r['blocks_below']} of "
                     f"{r['blocks']} | {r['stay_counted']:.3f} | {r['stay_normal']:.3f} |")
    return "\n".join(lines)


def play(run_dir: str, best: bool, step: int | None, episodes: int, rounds: int
         ) -> tuple[list[np.ndarray], object]:
    """Each member's returns over ``rounds`` x ``episodes`` fresh noise-free episodes."""
    import rljax

    run = rljax.load(run_dir, from_checkpoint=step, best=best)
    per_member: list[list[float]] = [[] for _ in range(run.config.num_members)]
    for r in range(rounds):
        result = rljax.evaluate(run, episodes=episodes, seed=run.config.seed + 20_000 + r)
        members = result.get("members", [result])
        for k, m in enumerate(members):
            per_member[k].extend(m["returns"])
    return [np.asarray(x) for x in per_member], run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best evaluation's checkpoint")
    which.add_argument("--from-checkpoint", type=int, default=None, metavar="STEP")
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--threshold", type=float, default=None,
                        help="default: the preset's (the run config's) threshold")
    parser.add_argument("--evals", type=int, default=None,
                        help="evaluations in a row (default: the run's evaluation rows)")
    parser.add_argument("--label", default="", help="words added to the results key")
    args = parser.parse_args(argv)
    for name in ("episodes", "rounds", "block"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.episodes * args.rounds < args.block:
        parser.error(f"--episodes x --rounds ({args.episodes * args.rounds}) is less than "
                     f"one --block ({args.block})")
    returns, run = play(args.run_dir, args.best, args.from_checkpoint, args.episodes,
                        args.rounds)
    threshold = run.config.threshold if args.threshold is None else args.threshold
    if threshold is None:
        parser.error("the run has no threshold: give --threshold")
    evals = args.evals
    if evals is None:
        every = run.config.eval_every or run.config.chunk_steps
        evals = max(1, round(run.config.total_steps / every))
    rows = member_rows(returns, args.block, threshold, evals)
    print(render(rows, threshold, args.block, evals), file=sys.stdout)
    which = ("best" if args.best else f"checkpoint {args.from_checkpoint}"
             if args.from_checkpoint is not None else "last checkpoint")
    key = " ".join(w for w in (getattr(run.config, "preset", None) or run.config.env_id,
                               f"seeds={len(rows)}", which, args.label) if w)
    add_result(RESULTS, key, {"run_dir": os.path.basename(os.path.normpath(args.run_dir)),
                 "threshold": threshold, "block": args.block, "evals": evals, "members": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Aggregate statistics over seeds and tasks with stratified bootstrap intervals.

The measures of Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS 2021): the interquartile mean (IQM), the mean, the median, the
optimality gap, the probability of improvement and performance profiles, each with a
percentile interval from a stratified bootstrap: every resample draws each task's runs with
replacement from that task's runs alone, so every task keeps its weight.

Scores are ``[R, T]`` arrays, ``R`` runs (seeds) of ``T`` tasks (one column for one task).
An aggregate maps ``[..., R, T]`` to ``[...]`` (or ``[..., K]`` for a profile), so the
same function gives the point estimate and, on ``[N, R, T]`` resamples, the bootstrap
distribution. Plain NumPy and SciPy; nothing here imports the rest of rljax, so the run
layer's ``rljax report``, its plots and the benchmarks share one implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

TRIM = 0.25  # the IQM drops this share of the sorted scores from each end
DEFAULT_REPS = 2000
DEFAULT_LEVEL = 0.95


class Estimate(NamedTuple):
    """A point estimate with its bootstrap interval (``nan`` bounds: not computed)."""

    point: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray


def _flat(scores: np.ndarray) -> np.ndarray:
    """``[..., R, T]`` -> ``[..., R * T]``."""
    scores = np.asarray(scores, float)
    return scores.reshape(*scores.shape[:-2], -1)


def trimmed_mean(x: np.ndarray, cut: float) -> np.ndarray:
    """Mean of the last axis after dropping ``floor(cut * n)`` of the sorted values from
    each end (scipy.stats.trim_mean's rule)."""
    x = np.sort(np.asarray(x, float), axis=-1)
    n = x.shape[-1]
    k = int(np.floor(cut * n))
    if n - 2 * k <= 0:
        raise ValueError(f"cut {cut} leaves no values of {n}")
    return x[..., k:n - k].mean(-1)


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean of all runs of all tasks: ``[..., R, T] -> [...]``."""
    return trimmed_mean(_flat(scores), TRIM)


def mean(scores: np.ndarray) -> np.ndarray:
    """Mean of the per-task means (equal weight per task): ``[..., R, T] -> [...]``."""
    return np.asarray(scores, float).mean(-2).mean(-1)


def median(scores: np.ndarray) -> np.ndarray:
    """Median over tasks of the per-task means (rliable's aggregate median); for one task,
    use :func:`run_median`."""
    return np.median(np.asarray(scores, float).mean(-2), axis=-1)


def run_median(scores: np.ndarray) -> np.ndarray:
    """Median of all runs of all tasks: ``[..., R, T] -> [...]``."""
    return np.median(_flat(scores), axis=-1)


def optimality_gap(scores: np.ndarray, target: float = 1.0) -> np.ndarray:
    """Mean shortfall of the runs below ``target`` (normalised scores: 1, the reference):
    ``mean(target - min(score, target))``."""
    return (target - np.minimum(_flat(scores), target)).mean(-1)


def profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Performance profile: for each threshold ``tau``, the share of runs scoring above it,
    averaged over tasks: ``[..., R, T] -> [..., K]``."""
    s = np.asarray(scores, float)[..., None]  # [..., R, T, 1]
    return (s > np.asarray(taus, float)).mean(-3).mean(-2)


def improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Probability of improvement P(X > Y): per task, the share of (x run, y run) pairs in
    which x scores more, ties counting half (the Mann-Whitney U over ``R_x * R_y``); then
    averaged over tasks. ``x``: ``[..., Rx, T]``, ``y``: ``[..., Ry, T]`` -> ``[...]``."""
    x = np.asarray(x, float)[..., :, None, :]
    y = np.asarray(y, float)[..., None, :, :]
    wins = (x > y) + 0.5 * (x == y)  # [..., Rx, Ry, T]
    return wins.mean((-3, -2)).mean(-1)


def bootstrap_indices(num_runs: int, num_tasks: int, reps: int = DEFAULT_REPS,
                      seed: int = 0) -> np.ndarray:
    """Stratified resampling indices ``[reps, R, T]``: column ``t`` of a resample takes
    task ``t``'s runs ``idx[:, :, t]``, drawn with replacement from that task's own runs."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_runs, size=(reps, num_runs, num_tasks))


def resample(scores: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``[R, T]`` scores and ``[N, R, T]`` indices -> ``[N, R, T]`` resampled scores."""
    scores = np.asarray(scores, float)
    return np.take_along_axis(np.broadcast_to(scores, indices.shape), indices, axis=-2)


def percentile_interval(samples: np.ndarray, level: float = DEFAULT_LEVEL
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The ``level`` percentile interval over the first axis of bootstrap samples."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail], axis=0)
    return low, high


def _check(scores: np.ndarray, name: str = "scores") -> np.ndarray:
    scores = np.asarray(scores, float)
    if scores.ndim != 2 or 0 in scores.shape:
        raise ValueError(f"{name} must be a [runs, tasks] array with at least one of each, "
                         f"got shape {scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{name} holds values that are not finite")
    return scores


def interval(scores: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray],
             reps: int = DEFAULT_REPS, seed: int = 0, level: float = DEFAULT_LEVEL,
             indices: np.ndarray | None = None) -> Estimate:
    """``statistic`` of ``[R, T]`` scores with its stratified bootstrap percentile interval
    (``reps`` resamples from ``seed``, or the given ``[N, R, T]`` ``indices``). With one
    run per task no resample differs from the data: the bounds are ``nan``."""
    scores = _check(scores)
    point = statistic(scores)
    if scores.shape[0] < 2:
        nan = np.full(np.shape(point), np.nan)
        return Estimate(point, nan, nan)
    if indices is None:
        indices = bootstrap_indices(*scores.shape, reps=reps, seed=seed)
    low, high = percentile_interval(statistic(resample(scores, indices)), level)
    return Estimate(point, low, high)


def improvement_interval(x: np.ndarray, y: np.ndarray, reps: int = DEFAULT_REPS,
                         seed: int = 0, level: float = DEFAULT_LEVEL,
                         indices: tuple[np.ndarray, np.ndarray] | None = None) -> Estimate:
    """P(X > Y) with an interval from resampling X's and Y's runs independently, each
    stratified by task. ``indices``: ``([N, Rx, T], [N, Ry, T])`` to use instead."""
    x, y = _check(x, "x"), _check(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must score the same tasks, got {x.shape[1]} and "
                         f"{y.shape[1]} columns")
    point = improvement(x, y)
    if min(x.shape[0], y.shape[0]) < 2:
        return Estimate(point, np.nan, np.nan)
    if indices is None:
        indices = (bootstrap_indices(*x.shape, reps=reps, seed=seed),
                   bootstrap_indices(*y.shape, reps=reps, seed=seed + 1))
    low, high = percentile_interval(improvement(resample(x, indices[0]),
                                                resample(y, indices[1])), level)
    return Estimate(point, low, high)


def normalize(scores: np.ndarray, random: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(score - random) / (reference - random)`` per task (the last axis): 0 is the random
    policy, 1 the reference."""
    random, reference = np.asarray(random, float), np.asarray(reference, float)
    if np.any(reference == random):
        raise ValueError("a reference score equals its random score; cannot normalise")
    return (np.asarray(scores, float) - random) / (reference - random)


AGGREGATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "iqm": iqm, "mean": mean, "median": median, "optimality_gap": optimality_gap}

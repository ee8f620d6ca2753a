"""The plots of ``rljax report``: sample-efficiency curves (the IQM over env steps with its
interval as a band) and performance profiles (the share of runs above each score), one line
per configuration (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rljax import stats
from rljax.run.plotting import save_figure

POINTS = 30  # env-step points of a sample-efficiency curve


def _normalise(values: np.ndarray, tasks: list[str], table: dict | None) -> np.ndarray:
    if table is None:
        return values
    random, reference = np.array([table[t] for t in tasks]).T
    return stats.normalize(values, random, reference)


def curve_matrix(config, key: str, table: dict | None, curve: Callable
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``grid [P]`` and ``scores [P, R, T]``: each run's ``key`` (``curve(run, key)``)
    interpolated onto env steps that every run of the configuration reached (normalised
    with ``table``)."""
    curves = [[curve(r, key) for r in g.runs] for g in config.groups]
    flat = [c for task in curves for c in task if len(c[0])]
    start = max(c[0][0] for c in flat)
    end = min(c[0][-1] for c in flat)
    grid = np.linspace(start, end, POINTS) if end > start else np.array([end])
    values = np.array([[np.interp(grid, s, v) if len(s) else np.full(grid.shape, np.nan)
                        for s, v in task] for task in curves])  # [T, R, P]
    values = np.transpose(values, (2, 1, 0))
    return grid, _normalise(values, [g.task for g in config.groups], table)


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.2), dpi=110)


def draw_curves(configs: list, key: str, table: dict | None, reps: int, seed: int,
                path: str, curve: Callable) -> str:
    """IQM of ``key`` over env steps with its interval, one line per configuration."""
    fig, ax = _axes()
    for config in configs:
        grid, values = curve_matrix(config, key, table, curve)
        if np.isnan(values).any():
            continue  # a run without the metric: nothing to draw for it
        ests = [stats.interval(v, stats.iqm, reps=reps, seed=seed) for v in values]
        point, low, high = (np.array([e[i] for e in ests], float) for i in range(3))
        (line,) = ax.plot(grid, point, label=f"{config.label} ({values.shape[1]} seeds)")
        ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps")
    what = "normalised " if table is not None else ""
    ax.set_ylabel(f"IQM of {what}{key}")
    ax.set_title(f"Sample efficiency: IQM with {stats.DEFAULT_LEVEL:.0%} bootstrap CI")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, path)


def draw_profiles(configs: list, key: str, table: dict | None, reps: int, seed: int,
                  path: str, score_matrix: Callable) -> str:
    """Share of runs scoring above each threshold, one line per configuration."""
    matrices = [score_matrix(c, key, table) for c in configs]
    low = min(m.min() for m in matrices)
    high = max(m.max() for m in matrices)
    pad = 0.05 * ((high - low) or max(abs(high), 1.0))  # each line starts at 1, ends at 0
    taus = np.linspace(low - pad, high + pad, 101)
    fig, ax = _axes()
    for config, scores in zip(configs, matrices, strict=True):
        est = stats.interval(scores, lambda s: stats.profile(s, taus), reps=reps, seed=seed)
        (line,) = ax.plot(taus, est.point, drawstyle="steps-post", label=config.label)
        ax.fill_between(taus, est.low, est.high, step="post", color=line.get_color(),
                        alpha=0.2)
    what = "normalised score" if table is not None else f"final {key}"
    ax.set_xlabel(f"{what} (tau)")
    ax.set_ylabel("share of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Performance profile")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, path)


def draw(configs: list, key: str, table: dict | None, reps: int, seed: int,
         curves_path: str, profiles_path: str, *, curve: Callable,
         score_matrix: Callable) -> list[str]:
    """Both plots; returns their paths. ``curve(run, key)`` and ``score_matrix(config,
    key, table)`` are :mod:`rljax.run.report`'s (handed in: it imports this module)."""
    return [draw_curves(configs, key, table, reps, seed, curves_path, curve),
            draw_profiles(configs, key, table, reps, seed, profiles_path, score_matrix)]

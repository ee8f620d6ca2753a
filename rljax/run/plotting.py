"""Learning-curve plots from run directories (matplotlib, no display needed)."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from rljax.run.logging import read_json, read_jsonl

CURVE_KEY = "return_mean_100"


def check_run_dir(run_dir: str) -> None:
    if not os.path.isdir(run_dir):
        raise ValueError(f"run directory {run_dir!r} does not exist")
    if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        raise ValueError(f"{run_dir!r} is not an rljax run directory (no metrics.jsonl)")


def load_curve(run_dir: str, key: str = CURVE_KEY) -> tuple[np.ndarray, np.ndarray]:
    """Env steps and ``key`` from a run's metrics.jsonl (rows without it skipped)."""
    check_run_dir(run_dir)
    rows = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
            if r.get(key) is not None]
    return (np.array([r["env_steps"] for r in rows], float),
            np.array([r[key] for r in rows], float))


def _config(run_dir: str) -> dict:
    """The run's config.json as a dict ({} when there is none).

    Raises:
        ValueError: naming the file when it cannot be read or is not a JSON object.
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        return {}
    config = read_json(path)
    if not isinstance(config, dict):
        raise ValueError(f"cannot read {path}: expected a JSON object, got "
                         f"{type(config).__name__}")
    return config


def _label(run_dir: str) -> str:
    config = _config(run_dir)
    if config:
        return (config.get("label") or config.get("preset")
                or f"{config.get('algo')} {config.get('env_id')}")
    return os.path.basename(os.path.normpath(run_dir))


def _threshold(run_dir: str) -> float | None:
    return _config(run_dir).get("threshold")


def aggregate(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200):
    """Mean and std of several curves on a common step grid (up to the shortest run)."""
    end = min(steps[-1] for steps, _ in curves)
    start = max(steps[0] for steps, _ in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    values = np.stack([np.interp(grid, s, v) for s, v in curves])
    return grid, values.mean(0), values.std(0)


def expand_seeds(run_dir: str) -> list[str]:
    """A many-member run directory's member folders (``seed_K/``, or
    ``FIELD=VALUE_seed_K/`` in a sweep), or the run itself."""
    def order(name: str):
        seed = name.rsplit("seed_", 1)[1]
        return (name.rsplit("seed_", 1)[0], int(seed) if seed.isdigit() else 0)

    members = sorted((d for d in os.listdir(run_dir)
                      if (d.startswith("seed_") or "_seed_" in d)
                      and os.path.isfile(os.path.join(run_dir, d, "metrics.jsonl"))), key=order)
    return [os.path.join(run_dir, d) for d in members] or [run_dir]


def plot_runs(run_dirs: list[str], out: str, key: str = CURVE_KEY,
              title: str | None = None) -> str:
    """Draws ``key`` against env steps; runs of the same preset (and the seeds of a
    many-seed run) are drawn as the mean with a band of one standard deviation
    across seeds. Returns ``out``."""
    run_dirs = [d for run_dir in run_dirs for d in expand_seeds(run_dir)]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: OrderedDict[str, list[str]] = OrderedDict()
    for run_dir in run_dirs:
        groups.setdefault(_label(run_dir), []).append(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    thresholds = set()
    for label, dirs in groups.items():
        curves = [c for c in (load_curve(d, key) for d in dirs) if len(c[0])]
        if not curves:
            continue
        thresholds.update(t for t in (_threshold(d) for d in dirs) if t is not None)
        if len(curves) == 1:
            ax.plot(*curves[0], label=label)
        else:
            grid, mean, std = aggregate(curves)
            (line,) = ax.plot(grid, mean, label=f"{label} (mean of {len(curves)} seeds)")
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    for t in sorted(thresholds):
        ax.axhline(t, color="gray", linestyle="--", linewidth=1, label=f"threshold {t:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return, last 100 episodes" if key == CURVE_KEY else key)
    ax.set_title(title or ", ".join(groups))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out)
    except OSError as e:
        raise ValueError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out

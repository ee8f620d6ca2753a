"""Learning-curve plots from run directories (matplotlib, no display needed)."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from rljax.run.config import NOT_LEARNING
from rljax.run.logging import read_json, read_jsonl

CURVE_KEY = "return_mean_100"


def default_out(run_dirs: list[str], key: str = CURVE_KEY) -> str:
    """Where ``rljax plot`` writes without ``--out``: ``RUN_DIR/curve.png`` for one run
    (``curve-KEY.png`` for another metric), the same name in the runs' common folder for
    several."""
    name = "curve.png" if key == CURVE_KEY else f"curve-{key}.png"
    if len(run_dirs) == 1:
        return os.path.join(run_dirs[0], name)
    return os.path.join(os.path.commonpath([os.path.abspath(d) for d in run_dirs]), name)


def check_run_dir(run_dir: str) -> None:
    if not os.path.isdir(run_dir):
        raise ValueError(f"run directory {run_dir!r} does not exist")
    if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        raise ValueError(f"{run_dir!r} is not an rljax run directory (no metrics.jsonl)")


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def load_curve(run_dir: str, key: str = CURVE_KEY) -> tuple[np.ndarray, np.ndarray]:
    """Env steps and ``key`` from a run's metrics.jsonl (rows without a number for ``key``
    skipped).

    Raises:
        ValueError: a row without a number for ``env_steps``, or env steps that do not
            increase, naming the file and the row.
    """
    check_run_dir(run_dir)
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_jsonl(path)
    for number, row in enumerate(rows, 1):
        if not _number(row.get("env_steps")):
            raise ValueError(f"{path}, row {number}: env_steps is "
                             f"{row.get('env_steps', 'missing')!r}, not a number")
        if number > 1 and row["env_steps"] <= rows[number - 2]["env_steps"]:
            raise ValueError(f"{path}, row {number}: env_steps go from "
                             f"{rows[number - 2]['env_steps']} to {row['env_steps']}; each row "
                             f"must be further on than the one before")
    rows = [r for r in rows if _number(r.get(key))]
    return (np.array([r["env_steps"] for r in rows], float),
            np.array([r[key] for r in rows], float))


def metric_names(run_dir: str) -> set[str]:
    """The metrics that some row of the run's metrics.jsonl holds a number for."""
    check_run_dir(run_dir)
    return {k for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
            for k, v in r.items() if _number(v)}


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


# Run settings that do not change what is learned: runs differing only in these (and in
# the seed) are drawn as one curve, the mean over the seeds.
_NOT_LEARNING = (*NOT_LEARNING, "label")


def _learning_config(run_dir: str) -> dict | None:
    config = _config(run_dir)
    return {k: v for k, v in config.items() if k not in _NOT_LEARNING} if config else None


def _differences(a: dict, b: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """``(field, value in a, value in b)`` for each field where two configs differ."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append((f"{prefix}{key}", x, y))
    return out


def group_runs(run_dirs: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Groups runs whose whole configuration, all but the seed (and logging settings),
    is the same; returns ``[(label, run_dirs)]`` and lines saying what was averaged and
    what was kept apart, and why. Runs without a config.json are never averaged."""
    groups: list[tuple[dict | None, list[str]]] = []
    for run_dir in run_dirs:
        config = _learning_config(run_dir)
        same = [dirs for key, dirs in groups if config is not None and key == config]
        if same:
            same[0].append(run_dir)
        else:
            groups.append((config, [run_dir]))
    names = [_label(dirs[0]) for _, dirs in groups]
    labels, notes = list(names), []
    for i, (config, dirs) in enumerate(groups):
        if len(dirs) > 1:
            notes.append(f"averaged {len(dirs)} runs as {names[i]!r} (the same configuration "
                         f"but for the seed): {', '.join(dirs)}")
        first = next((j for j in range(i) if names[j] == names[i]), None)
        if first is None:
            continue
        diff = _differences(groups[first][0] or {}, config or {})
        said = "; ".join(f"{f} {x!r} vs {y!r}" for f, x, y in diff[:4]) or "no config.json"
        notes.append(f"not averaged with {groups[first][1][0]}: {dirs[0]} differs in {said}")
        labels[i] = f"{names[i]} ({', '.join(f'{f}={y}' for f, _, y in diff[:2])})"
        if labels[first] == names[first]:
            labels[first] = f"{names[first]} ({', '.join(f'{f}={x}' for f, x, _ in diff[:2])})"
    return list(zip(labels, [d for _, d in groups], strict=True)), notes


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


def _once(run_dirs: list[str], notes: list[str] | None) -> list[str]:
    """The member folders of ``run_dirs`` (:func:`expand_seeds`), each once: a run named
    twice (or within a run also named) is drawn once, and ``notes`` says so."""
    out, seen = [], {}
    for d in (d for run_dir in run_dirs for d in expand_seeds(run_dir)):
        real = os.path.realpath(d)
        if real in seen:
            if notes is not None:
                notes.append(f"{d} was given twice (as {seen[real]}); drawn once")
            continue
        seen[real] = d
        out.append(d)
    return out


def plot_runs(run_dirs: list[str], out: str, key: str = CURVE_KEY,
              title: str | None = None, notes: list[str] | None = None) -> str:
    """Draws ``key`` against env steps; runs whose configuration is the same but for the
    seed (and the seeds of a many-seed run) are drawn as the mean with a band of one
    standard deviation across seeds; runs that differ otherwise are drawn apart.
    Returns ``out``; ``notes`` receives lines saying what was averaged and why.

    Raises:
        ValueError: no row of any run holds ``key``.
    """
    run_dirs = _once(run_dirs, notes)
    for run_dir in run_dirs:
        load_curve(run_dir, key)  # refuses unreadable steps before anything is drawn
    if not any(key in metric_names(d) for d in run_dirs):
        names = sorted(set().union(*(metric_names(d) for d in run_dirs)) - {"env_steps"})
        raise ValueError(f"no metrics row of {', '.join(run_dirs)} has a value for {key!r}; "
                         f"metrics there: {', '.join(names) or 'none'}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped, lines = group_runs(run_dirs)
    if notes is not None:
        notes.extend(lines)
    groups = OrderedDict(grouped)
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
    return save_figure(fig, out)


def save_figure(fig, out: str) -> str:
    """Writes and closes a matplotlib figure; returns ``out``.

    Raises:
        ValueError: ``out`` cannot be written (naming it and why).
    """
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out)
    except OSError as e:
        raise ValueError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out

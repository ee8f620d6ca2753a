"""``rljax report``: scores over seeds and tasks with stratified bootstrap intervals.

Runs are found in the given folders (a run, a many-seed run's ``seed_K`` /
``FIELD=VALUE_seed_K`` folders, or a folder of runs), grouped by task and configuration
(runs are pooled only when their settings are the same but for the seed and logging), and
each group's final scores (the last value of a metric in each run's metrics.jsonl: by
default the mean return of the last 100 episodes) are summarised by their mean, median and
IQM with 95% intervals (:mod:`rljax.stats`). With ``normalize``, each configuration's scores
are normalised per task (0: random policy, 1: reference) and aggregated across its tasks;
``compare`` gives the probability that one configuration improves on another.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from typing import Any, NamedTuple

import numpy as np

from rljax import stats
from rljax.run.logging import read_json, read_jsonl, write_json
from rljax.run.plotting import _differences, expand_seeds, group_runs
from rljax.run.reference_scores import SCORES
from rljax.run.report_markdown import markdown

METRIC = "return_mean_100"
EVAL = "eval_return_mean"
_TASK_KEYS = ("env_id", "preset", "threshold", "label")  # what differs between tasks


class Run(NamedTuple):
    path: str
    config: dict
    rows: list[dict]
    program: str  # the folder of the program that trained it (a many-seed run's top)


class Group(NamedTuple):
    label: str
    task: str
    runs: list[Run]


def _finite(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _run_folders(path: str, depth: int = 0) -> list[str]:
    if os.path.isfile(os.path.join(path, "metrics.jsonl")) or depth == 3:
        members = expand_seeds(path) if os.path.isfile(os.path.join(path, "metrics.jsonl")) \
            else []
        return [m for m in members if os.path.isfile(os.path.join(m, "metrics.jsonl"))]
    found = []
    for name in sorted(os.listdir(path)):
        sub = os.path.join(path, name)
        if os.path.isdir(sub) and not name.startswith("."):
            found += _run_folders(sub, depth + 1)
    return found


def _load(member: str) -> Run:
    parent = os.path.dirname(os.path.normpath(member))
    is_member = os.path.basename(member).rsplit("seed_", 1)[-1].isdigit() and \
        os.path.isfile(os.path.join(parent, "config.json"))
    own = os.path.join(member, "config.json")
    config = read_json(own) if os.path.isfile(own) else {}
    if not isinstance(config, dict):
        raise ValueError(f"cannot read {own}: expected a JSON object")
    if not config and not is_member:
        raise ValueError(f"{member} has no config.json: cannot tell its task and settings")
    if not config:
        top = read_json(os.path.join(parent, "config.json"))
        config = dict(top, seed=int(os.path.basename(member).rsplit("seed_", 1)[1]),
                      num_seeds=1)
    if int(config.get("num_seeds") or 1) > 1:
        raise ValueError(f"{member} is a run of {config['num_seeds']} seeds without its "
                         "seed_K folders: its seeds cannot be told apart")
    return Run(member, config, read_jsonl(os.path.join(member, "metrics.jsonl")),
               parent if is_member else member)


def load_runs(paths: list[str]) -> list[Run]:
    """Every run under ``paths``, each seed of a many-seed run apart.

    Raises:
        ValueError: a path that does not exist or holds no runs.
    """
    folders: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            raise ValueError(f"run directory {path!r} does not exist")
        found = _run_folders(path)
        if not found:
            raise ValueError(f"{path} holds no rljax runs (no metrics.jsonl in it, in "
                             "seed_K folders or in its subfolders)")
        folders += [f for f in found if f not in folders]
    return [_load(f) for f in folders]


def final_score(run: Run, key: str) -> float | None:
    """The last finite value of ``key`` in the run's metrics rows."""
    values = [r[key] for r in run.rows if _finite(r.get(key))]
    return float(values[-1]) if values else None


def curve(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [r for r in run.rows if _finite(r.get(key)) and _finite(r.get("env_steps"))]
    return (np.array([r["env_steps"] for r in rows], float),
            np.array([r[key] for r in rows], float))


def make_groups(runs: list[Run]) -> tuple[list[Group], list[str]]:
    """Runs with the same settings but for the seed (and logging) as one group each."""
    by_path = {r.path: r for r in runs}
    grouped, notes = group_runs([r.path for r in runs])
    groups = [Group(label, str(by_path[dirs[0]].config.get("env_id")),
                    [by_path[d] for d in dirs]) for label, dirs in grouped]
    # The task column tells groups apart that differ only in their task: plain names.
    plain = [_name(g.runs[0].config) or g.label for g in groups]
    pairs = list(zip(plain, (g.task for g in groups), strict=True))
    return [g._replace(label=name) if pairs.count((name, g.task)) == 1 else g
            for g, name in zip(groups, plain, strict=True)], notes


def _name(config: dict) -> str | None:
    return config.get("label") or config.get("preset")


def _configuration(group: Group) -> dict:
    """A group's settings without what names its task."""
    from rljax.run.config import NOT_LEARNING

    return {k: v for k, v in group.runs[0].config.items()
            if k not in (*NOT_LEARNING, *_TASK_KEYS)}


def check_scores(groups: list[Group], key: str) -> None:
    """One line for each way the runs cannot be reported on ``key``.

    Raises:
        ValueError: no run has ``key``; a run has no value for it (no finished episodes).
    """
    runs = [r for g in groups for r in g.runs]
    if not any(final_score(r, key) is not None for r in runs):
        names = sorted({k for r in runs for row in r.rows for k, v in row.items()
                        if _finite(v)} - {"env_steps"})
        raise ValueError(f"no metrics row of the {len(runs)} runs has a value for {key!r}; "
                         f"metrics there: {', '.join(names) or 'none'}")
    for run in runs:
        if final_score(run, key) is None:
            why = " (no episode finished)" if key == METRIC else ""
            raise ValueError(f"run {run.path} has no value for {key!r}{why}")


def _estimates(scores: np.ndarray, reps: int, seed: int, measures: dict) -> dict:
    indices = (stats.bootstrap_indices(*scores.shape, reps=reps, seed=seed)
               if scores.shape[0] > 1 else None)
    out = {}
    for name, fn in measures.items():
        est = stats.interval(scores, fn, indices=indices)
        out[name] = [float(est.point), float(est.low), float(est.high)]
    return out


TASK_MEASURES = {"mean": stats.mean, "median": stats.run_median, "iqm": stats.iqm}


def task_rows(groups: list[Group], key: str, reps: int, seed: int) -> list[dict]:
    """Per group: seeds, the measures of the final ``key`` (and of the greedy evaluation
    where every run has one) with intervals, env steps and the programs' wall time."""
    rows = []
    for g in groups:
        scores = np.array([[final_score(r, key)] for r in g.runs])
        row = {"label": g.label, "task": g.task, "seeds": len(g.runs), "metric": key,
               **_estimates(scores, reps, seed, TASK_MEASURES),
               "env_steps": max(int(r.rows[-1].get("env_steps", 0)) for r in g.runs),
               "wall_time_s": _wall_time(g.runs), "runs": [r.path for r in g.runs]}
        evals = [final_score(r, EVAL) for r in g.runs]
        if key == METRIC and all(v is not None for v in evals):
            row["eval"] = _estimates(np.array(evals)[:, None], reps, seed, TASK_MEASURES)
        rows.append(row)
    return rows


def _wall_time(runs: list[Run]) -> float | None:
    """The wall time of the programs that trained ``runs``, each program once."""
    total, seen = 0.0, set()
    for run in runs:
        if run.program in seen:
            continue
        seen.add(run.program)
        path = os.path.join(run.program, "summary.json")
        summary = read_json(path) if os.path.isfile(path) else {}
        if not _finite(summary.get("wall_time_s")):
            return None
        total += summary["wall_time_s"]
    return total


def scores_table(normalize: bool | str | dict | None) -> dict[str, tuple[float, float]]:
    """``{task: (random, reference)}``: the shipped scores (``True``), a JSON file's or a
    dict's ``{task: {"random": R, "reference": S}}``."""
    if normalize is True or normalize == "shipped":
        return {t: (s.random, s.reference) for t, s in SCORES.items()}
    data = read_json(normalize) if isinstance(normalize, str) else normalize
    try:
        return {t: (float(v["random"]), float(v["reference"])) for t, v in data.items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise ValueError(f"--normalize {normalize}: expected {{task: {{\"random\": R, "
                         "\"reference\": S}}}}") from None


class Configuration(NamedTuple):
    label: str
    groups: list[Group]  # one per task


def configurations(groups: list[Group]) -> list[Configuration]:
    """Groups with the same settings on different tasks, as one configuration each,
    labelled by their presets (and the settings that tell two such labels apart)."""
    keys: dict[str, list[Group]] = {}
    for g in groups:
        keys.setdefault(json.dumps(_configuration(g), sort_keys=True, default=str),
                        []).append(g)
    members = []
    for found in keys.values():
        tasks = [g.task for g in found]  # the same settings twice on a task: keep apart
        members += [found] if len(set(tasks)) == len(tasks) else [[g] for g in found]
    names = [" / ".join(dict.fromkeys(str(_name(g.runs[0].config) or g.label)
                                      for g in found)) for found in members]
    labels = list(names)
    for i, j in itertools.combinations(range(len(names)), 2):
        if names[i] == names[j]:
            a, b = _configuration(members[i][0]), _configuration(members[j][0])
            diff = _differences(a, b)[:2]
            labels[i] = f"{names[i]} ({', '.join(f'{f}={x}' for f, x, _ in diff)})"
            labels[j] = f"{names[j]} ({', '.join(f'{f}={y}' for f, _, y in diff)})"
    return [Configuration(label, found) for label, found in zip(labels, members,
                                                                strict=True)]


def score_matrix(config: Configuration, key: str,
                 table: dict[str, tuple[float, float]] | None) -> np.ndarray:
    """``[seeds, tasks]`` final scores of a configuration, normalised with ``table``.

    Raises:
        ValueError: tasks with different numbers of seeds, or a task without scores.
    """
    counts = {g.task: len(g.runs) for g in config.groups}
    if len(set(counts.values())) > 1:
        raise ValueError(f"{config.label}: aggregating across tasks needs the same number "
                         f"of seeds on each, got {counts}")
    scores = np.array([[final_score(r, key) for r in g.runs] for g in config.groups]).T
    if table is None:
        return scores
    missing = [t for t in counts if t not in table]
    if missing:
        raise ValueError(f"no random and reference scores for {', '.join(missing)}; give "
                         "--normalize SCORES.json with {task: {\"random\": R, "
                         "\"reference\": S}}")
    random, reference = np.array([table[t] for t in counts]).T
    return stats.normalize(scores, random, reference)


AGGREGATE_MEASURES = stats.AGGREGATES  # iqm, mean, median (of task means), optimality gap


def compare(configs: list[Configuration], a: str, b: str, key: str, reps: int,
            seed: int) -> dict:
    """The probability that configuration ``a`` scores above ``b`` (a label, or a run
    directory of it) on their tasks, with its interval."""
    def find(name: str) -> Configuration:
        for c in configs:
            paths = {os.path.normpath(r.path) for g in c.groups for r in g.runs}
            tops = {os.path.normpath(os.path.dirname(p)) for p in paths}
            if name in (c.label, *(g.label for g in c.groups)) or \
                    os.path.normpath(name) in paths | tops:
                return c
        raise ValueError(f"--compare: {name!r} names no configuration; the "
                         f"configurations are: {'; '.join(c.label for c in configs)}")

    ca, cb = find(a), find(b)
    if ca is cb:
        raise ValueError(f"--compare: {a!r} and {b!r} are the same configuration")
    ta, tb = [g.task for g in ca.groups], [g.task for g in cb.groups]
    if sorted(ta) != sorted(tb):
        raise ValueError(f"--compare: {ca.label} ran {', '.join(ta)} but {cb.label} ran "
                         f"{', '.join(tb)}; compare configurations on the same tasks")
    cb = Configuration(cb.label, sorted(cb.groups, key=lambda g: ta.index(g.task)))
    x, y = score_matrix(ca, key, None), score_matrix(cb, key, None)
    est = stats.improvement_interval(x, y, reps=reps, seed=seed)
    return {"a": ca.label, "b": cb.label, "tasks": ta, "metric": key,
            "probability_of_improvement": [float(est.point), float(est.low),
                                           float(est.high)]}


def build(paths: list[str], key: str = METRIC, normalize: bool | str | dict | None = None,
          compare_pair: tuple[str, str] | None = None, reps: int = stats.DEFAULT_REPS,
          seed: int = 0, allow_one_seed: bool = False
          ) -> tuple[dict, list[Configuration], dict | None]:
    """The report of the runs under ``paths`` as a JSON-ready dict (see :func:`report`),
    the configurations and the ``{task: (random, reference)}`` table it normalised with.

    Raises:
        ValueError: one line for input it cannot report on (no runs, no finished episodes,
            a metric no row has, one seed, mixed tasks without ``normalize``, ...).
    """
    if not (isinstance(reps, int) and reps >= 100):
        raise ValueError(f"reps must be an integer >= 100, got {reps!r}")
    groups, notes = make_groups(load_runs(paths))
    check_scores(groups, key)
    single = [g for g in groups if len(g.runs) < 2]
    if single and not allow_one_seed:
        raise ValueError(f"{single[0].label} on {single[0].task} has one seed "
                         f"({single[0].runs[0].path}): no bootstrap interval; give two or "
                         "more seeds of each configuration (--seeds N)")
    tasks = list(dict.fromkeys(g.task for g in groups))
    if len(tasks) > 1 and not normalize:
        raise ValueError(f"the runs are on {len(tasks)} tasks ({', '.join(tasks)}); give "
                         "--normalize to aggregate across tasks, or report each task apart")
    configs = configurations(groups)
    report = {"metric": key, "reps": reps, "seed": seed, "level": stats.DEFAULT_LEVEL,
              "tasks": task_rows(groups, key, reps, seed), "notes": notes}
    table = None
    if normalize:
        table = scores_table(normalize)
        report["normalized"] = [
            {"label": c.label, "tasks": [g.task for g in c.groups],
             "seeds": len(c.groups[0].runs),
             **_estimates(score_matrix(c, key, table), reps, seed, AGGREGATE_MEASURES)}
            for c in configs]
        report["scores"] = {t: list(table[t]) for t in tasks}
    if compare_pair is not None:
        report["compare"] = compare(configs, *compare_pair, key, reps, seed)
    return report, configs, table


def report(run_dirs: list[str] | str, *, metric: str = METRIC,
           normalize: bool | str | dict | None = None,
           compare: tuple[str, str] | None = None, reps: int = stats.DEFAULT_REPS,
           seed: int = 0, out: str | None = None, json_out: str | None = None,
           allow_one_seed: bool = False) -> dict:
    """Scores of the runs under ``run_dirs`` with 95% stratified bootstrap intervals.

    Args:
        run_dirs: run directories, many-seed run directories or folders of runs.
        metric: the metrics.jsonl key whose last value is a run's score.
        normalize: ``True`` for rljax's random and reference scores
            (:mod:`rljax.run.reference_scores`), or a JSON file / dict of
            ``{task: {"random": R, "reference": S}}``: adds aggregates across tasks.
        compare: two configuration labels (or run directories): P(first > second).
        reps, seed: bootstrap resamples and the seed that draws them.
        out: write the Markdown there, with ``-curves.png`` and ``-profiles.png`` beside it.
        json_out: write the report as JSON there.
        allow_one_seed: report one-seed groups (without intervals) instead of refusing.

    Returns:
        The report as a dict (``markdown`` holds the text).

    Raises:
        ValueError: input it cannot report on, before anything is written.
    """
    from rljax.run import report_plots

    paths = [run_dirs] if isinstance(run_dirs, str) else list(run_dirs)
    result, configs, table = build(paths, metric, normalize, compare, reps, seed,
                                   allow_one_seed)
    result["markdown"] = markdown(result)
    for path in (out, json_out):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"cannot write {path}: its folder does not exist")
    if out is not None:
        stem = os.path.splitext(out)[0]
        result["plots"] = report_plots.draw(configs, metric, table, reps, seed,
                                            f"{stem}-curves.png", f"{stem}-profiles.png",
                                            curve=curve, score_matrix=score_matrix)
        with open(out, "w") as f:
            f.write(result["markdown"])
    if json_out is not None:
        write_json(json_out, result)
    return result

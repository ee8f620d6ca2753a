"""The run directory and the summaries written into it.

A run directory holds::

    config.json     the RunConfig
    metrics.jsonl   one row per ``chunk_steps`` env steps
    summary.json    totals, timing, final return, solved_at_step
    curve.png       the learning curve
    events.out.tfevents.*   the same metrics for TensorBoard
    checkpoint/     the train state (rljax.run.checkpoint)
    .lock           held (flock) by the process training in it

With several members (seeds, sweep values) each member also has a folder of its own,
``seed_S`` or ``FIELD=VALUE_seed_S``, holding its ``config.json`` (as a single run),
``metrics.jsonl`` and ``summary.json``; the top-level files aggregate the members.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import time
import warnings
from typing import Any

import jax
import numpy as np

from rljax._version import __version__
from rljax.envs.stats import last_episodes
from rljax.loops.state import LoopState
from rljax.parallel import multihost
from rljax.run.config import RunConfig
from rljax.run.logging import write_json

LOCK_FILE = ".lock"


class RunDirInUse(ValueError):
    """Another process trains in the run directory."""


def run_name(run: RunConfig) -> str:
    """What the run is called in its folder's name and its progress lines: its preset,
    followed by its env when that is not the preset's own (``gymnax-cartpole-ppo-gymnax-
    Acrobot-v1``); without a preset, ``ALGO-ENV``."""
    from rljax.run.presets import PRESETS

    if run.preset is None:
        return f"{run.algo}-{run.env_id}".replace(":", "-")
    own = PRESETS[run.preset].run.env_id if run.preset in PRESETS else run.env_id
    return run.preset if run.env_id == own else f"{run.preset}-{run.env_id}".replace(":", "-")


def make_run_dir(run: RunConfig) -> str:
    """Creates ``LOGDIR/NAME-sSEED-YYYYmmdd-HHMMSS`` (``-2``, ``-3``, ... if it exists;
    NAME: :func:`run_name`)."""
    name = run_name(run)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(run.logdir, f"{name}-s{run.seed}-{stamp}")
    path, i = base, 1
    while os.path.exists(path):
        i += 1
        path = f"{base}-{i}"
    os.makedirs(path)
    return path


def open_run_dir(run: RunConfig, run_dir: str | None = None) -> str:
    """Creates ``run_dir`` (default: a new folder under ``run.logdir``) and writes its
    config.json; returns its path.

    Raises:
        ValueError: the folder cannot be created or written (naming it and why); the
            folders this call created are removed again.
    """
    existed = run_dir is not None and os.path.isdir(run_dir)
    missing = _missing_folders(run_dir or run.logdir)
    try:
        run_dir = run_dir or make_run_dir(run)
        os.makedirs(run_dir, exist_ok=True)
        write_json(os.path.join(run_dir, "config.json"), run.to_dict())
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        created = [] if existed or run_dir is None else [os.path.abspath(run_dir)]
        for folder in dict.fromkeys(created + missing):
            _remove_quietly(folder)
        reason = getattr(e, "strerror", None) or str(e)
        raise ValueError(f"cannot write the run directory under {run_dir or run.logdir!r}: "
                         f"{reason}") from None
    return run_dir


def _missing_folders(path: str) -> list[str]:
    """The folders of ``path`` that do not exist yet, deepest first."""
    out = []
    try:
        path = os.path.abspath(path)
        while path and not os.path.exists(path):
            out.append(path)
            path = os.path.dirname(path)
    except ValueError:  # a NUL byte
        return []
    return out


def _remove_quietly(folder: str) -> None:
    for path in (os.path.join(folder, "config.json.tmp"), os.path.join(folder, "config.json"),
                 folder):
        try:
            (os.rmdir if path == folder else os.remove)(path)
        except (OSError, ValueError):
            pass


def lock(run_dir: str):
    """Takes the run directory's lock (an ``flock`` on ``RUN_DIR/.lock``, released when the
    returned file is closed or the process ends, a crash included).

    Raises:
        RunDirInUse: another process holds it.
        ValueError: the lock file cannot be opened for writing (a read-only directory).
    """
    try:
        f = open(os.path.join(run_dir, LOCK_FILE), "a+")
    except OSError as e:
        raise ValueError(f"cannot write in run directory {run_dir} ({LOCK_FILE}: "
                         f"{e.strerror}); a run writes its metrics and checkpoints there, "
                         f"so it must be writable") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        who = f"process {holder}" if holder.isdigit() else "another process"
        raise RunDirInUse(f"run directory {run_dir} is in use by {who} (its {LOCK_FILE} "
                          "is locked); wait for that run to end or stop it") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def share_path(path: str | None) -> str | None:
    """The first process's ``path`` on every process of a multi-process run (every
    process calls this at the same point); ``path`` itself in a single process."""
    if jax.process_count() == 1:
        return path
    from jax.experimental import multihost_utils

    data = np.zeros(4096, np.uint8)
    encoded = (path or "").encode()
    data[:len(encoded)] = np.frombuffer(encoded, np.uint8)
    with multihost.waiting("sharing the run directory"):
        shared = np.asarray(multihost_utils.broadcast_one_to_all(data))
    return bytes(shared).rstrip(b"\0").decode() or None


def _metrics_files(run_dir: str, run: RunConfig) -> list[str]:
    folders = [run_dir] + ([os.path.join(run_dir, _member_name(run, k))
                            for k in range(run.num_members)] if run.num_members > 1 else [])
    return [p for p in (os.path.join(f, "metrics.jsonl") for f in folders) if os.path.isfile(p)]


def split_rows(lines: list[str], env_steps: int) -> tuple[list[str], list[str]]:
    """The metrics rows (JSON lines) logged at or before ``env_steps``, and those after;
    lines that are no complete row (a half-written last line) are in neither."""
    before, after = [], []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            steps = row.get("env_steps", 0)
            (after if isinstance(steps, int | float) and steps > env_steps else before
             ).append(line)
    return before, after


def drop_rows_after(run_dir: str, run: RunConfig, env_steps: int) -> float:
    """Removes the metrics rows logged after ``env_steps`` (the resumed checkpoint's step)
    and any half-written last line, so that a resumed run's rows follow on without
    repeating steps.

    Returns:
        The ``wall_time_s`` of the last row kept (0.0 if none): the resumed run's clock
        starts there, so ``wall_time_s`` counts the time that produced the kept rows.
    """
    elapsed = 0.0
    for i, path in enumerate(_metrics_files(run_dir, run)):
        with open(path) as f:
            lines = f.read().splitlines()
        keep, _ = split_rows(lines, env_steps)
        if i == 0 and keep:
            wall = json.loads(keep[-1]).get("wall_time_s")
            elapsed = float(wall) if isinstance(wall, int | float) else elapsed
        if len(keep) != len(lines):
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.writelines(line + "\n" for line in keep)
            os.replace(tmp, path)
    return elapsed


def manifest(run: RunConfig) -> dict:
    """What a checkpoint records of the run that wrote it."""
    return {"rljax_version": __version__, "preset": run.preset, "algo": run.algo,
            "env_id": run.env_id, "run": run.to_dict()}


def member_slice(tree: Any, k: int, num_members: int) -> Any:
    """Member ``k``'s slice of a state or metrics tree (the tree itself for one member)."""
    return tree if num_members == 1 else jax.tree.map(lambda x: x[k], tree)


def _member_name(run: RunConfig, k: int) -> str:
    seed, value = run.members[k]
    if run.sweep is None:
        return f"seed_{seed}"
    # The field's own name (alpha for replay.alpha), as older runs named their folders.
    return f"{run.sweep[0].rsplit('.', 1)[-1]}={value:g}_seed_{seed}"


def member_dir(run_dir: str, run: RunConfig, k: int) -> str:
    """Member ``k``'s folder (created): ``seed_S`` (seeds) or ``FIELD=VALUE_seed_S``
    (sweeps)."""
    path = os.path.join(run_dir, _member_name(run, k))
    os.makedirs(path, exist_ok=True)
    return path


def _member_config(run: RunConfig, k: int) -> dict:
    """Member ``k`` as a single run's config.json (plus a plot label for sweeps)."""
    seed, value = run.members[k]
    out = dict(run.to_dict(), seed=seed, num_seeds=1, sweep=None)
    if run.sweep is not None:
        field = run.sweep[0]
        head, _, tail = field.partition(".")
        out["config"] = dict(out["config"], **{head: dict(out["config"][head], **{tail: value})
                                               if tail else value})
        out["label"] = f"{run.preset or run.algo} {field}={value:g}"
    return out


_SPREAD_KEYS = ("episode_return_mean", "return_mean_100", "eval_return_mean")


def aggregate(rows: list[dict], base: dict) -> dict:
    """One metrics row from the members' rows: ``base``, then the mean over members of
    each other numeric key, with the std of the return keys (``KEY_std``). A key no member
    has a number for yet (``return_mean_100`` before any episode has ended) is kept as
    None, as in a one-member row."""
    out = dict(base)
    for key in rows[0]:
        if key in base:
            continue
        values = [r.get(key) for r in rows if isinstance(r.get(key), int | float)]
        if values:
            out[key] = float(np.mean(values))
            if key in _SPREAD_KEYS:
                out[f"{key}_std"] = float(np.std(values))
        elif all(r.get(key) is None for r in rows):
            out[key] = None
    return out


def _seed_summary(stats: Any, solved_at: Any) -> dict:
    rets, lens = last_episodes(stats, 100)
    return {
        "episodes": int(stats.episodes),
        "final_return_mean": float(np.mean(rets)) if len(rets) else None,
        "final_length_mean": float(np.mean(lens)) if len(lens) else None,
        "solved_at_step": int(solved_at) if int(solved_at) >= 0 else None,
    }


def _sweep_summary(run: RunConfig, members: list[dict]) -> list[dict]:
    """Per sweep value: the mean and std over its seeds, and how many solved."""
    field, values = run.sweep
    out = []
    for value in values:
        group = [m for m in members if m["sweep"][field] == value]
        finals = [m["final_return_mean"] for m in group if m["final_return_mean"] is not None]
        solved = [m["solved_at_step"] for m in group if m["solved_at_step"] is not None]
        out.append({field: value, "final_return_mean": float(np.mean(finals)) if finals else None,
                    "final_return_std": float(np.std(finals)) if finals else None,
                    "seeds_solved": len(solved),
                    "solved_at_step_mean": float(np.mean(solved)) if solved else None})
    return out


def run_summary(run: RunConfig, state: LoopState, times: tuple[float, float, float],
                compile_time: float, interrupted: bool, first_steps: int = 0,
                evals: list[dict] | None = None) -> dict:
    """The run's summary; with several seeds the single-run keys aggregate them
    (returns: mean over seeds; ``solved_at_step``: when the last seed solved, null
    unless all did; ``sps``: all seeds' env steps) and ``seeds`` lists each one.

    ``times`` are ``time.perf_counter()`` readings: when the run began, when its first
    chunk began and when its last row was logged (``train_time_s`` is between the two)."""
    start, train_start, train_end = times
    stats, steps, solved_at = multihost.fetch((state.env.stats, state.env_steps,
                                               state.solved_at))
    num_seeds = run.num_members
    env_steps = int(np.ravel(steps)[0])
    seeds = []
    for k, (seed, value) in enumerate(run.members):
        one = dict(seed=seed, **_seed_summary(member_slice(stats, k, num_seeds),
                                              np.ravel(solved_at)[k]))
        if value is not None:
            one["sweep"] = {run.sweep[0]: value}
        if evals is not None:
            one["eval_return_mean"] = evals[k]["return_mean"]
            one["eval_returns"] = evals[k]["returns"]
        seeds.append(one)
    train_time = train_end - train_start
    solved = [s["solved_at_step"] for s in seeds if s["solved_at_step"] is not None]
    finals = [s["final_return_mean"] for s in seeds if s["final_return_mean"] is not None]
    lengths = [s["final_length_mean"] for s in seeds if s["final_length_mean"] is not None]
    summary = {
        "preset": run.preset,
        "algo": run.algo,
        "env_id": run.env_id,
        "seed": run.seed,
        "env_steps": env_steps,
        "wall_time_s": time.perf_counter() - start,
        "compile_time_s": compile_time,
        "train_time_s": train_time,
        "sps": num_seeds * (env_steps - first_steps) / max(train_time, 1e-9),
        "episodes": sum(s["episodes"] for s in seeds),
        "final_return_mean": float(np.mean(finals)) if finals else None,
        "final_length_mean": float(np.mean(lengths)) if lengths else None,
        "threshold": run.threshold,
        "solved_at_step": max(solved) if len(solved) == num_seeds else None,
        "device": str(jax.devices()[0].device_kind),
    }
    if evals is not None:
        means = [s["eval_return_mean"] for s in seeds if s["eval_return_mean"] is not None]
        summary["eval_return_mean"] = float(np.mean(means)) if means else None
        if num_seeds == 1:
            summary["eval_returns"] = seeds[0]["eval_returns"]
    if num_seeds > 1:
        summary["num_seeds"] = num_seeds
        summary["total_env_steps"] = num_seeds * env_steps
        summary["final_return_std"] = float(np.std(finals)) if finals else None
        summary["seeds_solved"] = len(solved)
        summary["seeds"] = seeds
    if run.sweep is not None:
        summary["num_members"] = run.num_members
        summary["num_seeds"] = run.num_seeds
        summary["sweep"] = _sweep_summary(run, seeds)
    if interrupted:
        summary["interrupted"] = True
    if first_steps:
        summary["resumed_from_step"] = first_steps
    return summary


def stamp_finish(summary: dict, times: tuple[float, float, float]) -> None:
    """Sets the summary's ``wall_time_s`` and ``finish_s`` (the time since the last
    metrics row: the final checkpoint, the summaries and the plot) to now; ``times`` as
    :func:`run_summary` takes them."""
    start, _, train_end = times
    now = time.perf_counter()
    summary["wall_time_s"] = now - start
    summary["finish_s"] = now - train_end


def write_summaries(run_dir: str, run: RunConfig, summary: dict,
                    times: tuple[float, float, float] | None = None) -> None:
    """Writes each member's summary.json and config.json, curve.png, then summary.json;
    with ``times`` (see :func:`stamp_finish`) the summary's ``wall_time_s`` and
    ``finish_s`` count everything but that last write."""
    for k, seed_summary in enumerate(summary.get("seeds", [])):
        folder = member_dir(run_dir, run, k)
        write_json(os.path.join(folder, "summary.json"), seed_summary)
        write_json(os.path.join(folder, "config.json"), _member_config(run, k))
    _plot_curve(run_dir)
    if times is not None:
        stamp_finish(summary, times)
    write_json(os.path.join(run_dir, "summary.json"), summary)


def _plot_curve(run_dir: str) -> None:
    """Writes curve.png; a plotting failure must never cost the run its results."""
    from rljax.run.plotting import load_curve, plot_runs

    try:
        if len(load_curve(run_dir)[0]):
            plot_runs([run_dir], os.path.join(run_dir, "curve.png"))
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"could not draw {run_dir}/curve.png: {e}", stacklevel=2)

"""What a run may do with the checkpoints already in its run directory.

* A resume continues a compatible run from its newest checkpoint, or from an earlier one
  asked for by env step (``--from-checkpoint STEP``); a resume whose checkpoint has
  reached the step budget has nothing to do and changes no file (:class:`NothingToDo`).
* A corrupted newest checkpoint is refused in one line that names the newest earlier
  checkpoint that is intact (read back and checked against its checksums), and the option
  that uses it.
* Resuming from an earlier checkpoint moves the newer ones aside, into
  ``RUN_DIR/checkpoint.superseded/``, so that the resumed run's saves are the newest.
* A fresh run is refused in a run directory that holds checkpoints.
* A resume keeps the saved run's schedules: a learning rate annealed over the run (PPO's,
  PQN's ``anneal_lr``) keeps the length it was saved with (the run's ``schedule_steps``),
  and the agent's own check says in one warning what the extra steps train with
  (:func:`keep_schedules`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rljax.run import checkpoint, rundir
from rljax.run.config import RunConfig
from rljax.run.registry import get_algorithm

SUPERSEDED = "checkpoint.superseded"


class NothingToDo(ValueError):
    """A resumed run whose checkpoint has reached its step budget: nothing to train."""


def _step_folders(run_dir: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(run_dir, checkpoint.CHECKPOINT_DIR))
    except OSError:
        return []
    return sorted(int(d) for d in names if d.isdigit())


def claim_run_dir(run: RunConfig, run_dir: str | None, resume: str | None, writer: bool,
                  stack: contextlib.ExitStack, step: int | None = None
                  ) -> tuple[RunConfig, str | None]:
    """Checks that ``resume`` may continue as ``run`` from checkpoint ``step`` (taking its
    lock first, so that a directory in use is refused before anything else), or that
    ``run_dir`` holds no checkpoint that a fresh run would mix with; returns the run (with
    the saved schedules, :func:`keep_schedules`) and the run directory.

    Raises:
        NothingToDo: the checkpoint has reached ``run.total_steps``.
    """
    if resume is not None:
        if not os.path.isdir(resume):
            raise checkpoint.CheckpointError(f"no checkpoint in {resume!r} (no such directory)")
        if writer:
            stack.enter_context(rundir.lock(resume))
        with naming_intact(resume):
            saved = checkpoint.read_manifest(resume, step)
        _check_run_dir_config(resume, saved)
        steps = saved.get("env_steps")
        if isinstance(steps, int) and steps >= run.total_steps:
            checkpoint.check_compatible(saved, rundir.manifest(run)["run"])
            raise NothingToDo(f"{resume} has trained {steps:,} env steps, its budget "
                              f"(total_steps {run.total_steps:,}) is spent; nothing was "
                              "changed (give a larger total_steps to train on)")
        saved_run = _saved_run(saved.get("run") or {})
        run = keep_schedules(run, saved_run)
        expected = rundir.manifest(run)["run"]
        if saved_run is not None and (saved_run.schedule_steps is None
                                      or not get_algorithm(run.algo).anneals(run.config)):
            # saved as "the run's length", which keep_schedules has just resolved, or
            # recorded for an agent that anneals nothing (an older rljax kept it for any)
            expected = dict(expected, schedule_steps=saved_run.schedule_steps)
        checkpoint.check_compatible(saved, expected)
        return run, resume
    if run_dir is not None and os.path.isdir(os.path.join(run_dir, checkpoint.CHECKPOINT_DIR)):
        try:
            steps = checkpoint.read_manifest(run_dir)["env_steps"]
        except checkpoint.CheckpointError:
            folders = _step_folders(run_dir)
            if not folders:
                return run, run_dir
            steps = folders[-1]
        raise ValueError(f"run directory {run_dir} already holds a checkpoint (env step "
                         f"{steps:,}); continue it with resume, or choose another directory")
    return run, run_dir


def _check_run_dir_config(run_dir: str, saved: dict) -> None:
    """Refuses a checkpoint that another run made (copied into this run directory): its
    run must match ``RUN_DIR/config.json`` but for what a resume may change, as
    ``rljax eval`` checks it. A config.json that does not read as a run is not checked."""
    path = os.path.join(run_dir, "config.json")
    try:
        with open(path) as f:
            here = RunConfig.from_dict(json.load(f))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return
    saved_run = _saved_run(saved.get("run") or {})
    if saved_run is not None and here.schedule_steps is None:
        # config.json leaves the schedules to the run's length, which a resume resolved
        here = dataclasses.replace(here, schedule_steps=saved_run.schedule_steps)
    try:
        checkpoint.check_compatible(saved, here.to_dict())
    except checkpoint.CheckpointError as e:
        raise checkpoint.CheckpointError(f"{e}; {path} describes this run directory's run, "
                                         "so its checkpoint is not this run's") from None


def _saved_run(saved: dict) -> RunConfig | None:
    """The run config of a manifest's ``run``, as this version reads it (None: unreadable;
    the compatibility check names what differs)."""
    try:
        return RunConfig.from_dict(saved)
    except (KeyError, TypeError, ValueError):
        return None


def keep_schedules(run: RunConfig, saved: RunConfig | None) -> RunConfig:
    """``run`` with the schedule length (``schedule_steps``) of the ``saved`` run when it
    leaves it to the run's budget and the budget changed: a learning rate annealed over the
    run keeps the length it was saved with (the agent warns in one line when it reaches 0
    before the new budget ends)."""
    if (run.schedule_steps is not None or saved is None
            or not get_algorithm(run.algo).anneals(run.config)):
        return run  # nothing anneals: no schedule to keep
    length = saved.total_steps if saved.schedule_steps is None else saved.schedule_steps
    if length == run.total_steps:
        return run
    return dataclasses.replace(run, schedule_steps=length)


def intact_before(run_dir: str, step: int) -> int | None:
    """The newest checkpoint older than ``step`` that reads back whole and matches its
    checksums (None: none does)."""
    for earlier in reversed([s for s in checkpoint._store().steps(
            os.path.join(run_dir, checkpoint.CHECKPOINT_DIR)) if s < step]):
        try:
            checkpoint.verify(run_dir, earlier)
        except checkpoint.CheckpointError:
            continue
        return earlier
    return None


@contextlib.contextmanager
def naming_intact(run_dir: str) -> Iterator[None]:
    """Turns a :class:`~rljax.run.checkpoint.Corrupted` checkpoint of ``run_dir`` into one
    line that ends with the newest intact earlier checkpoint and the option that uses it."""
    try:
        yield
    except checkpoint.Corrupted as e:
        earlier = intact_before(run_dir, e.step)
        hint = ("no earlier checkpoint is intact" if earlier is None else
                f"the checkpoint of env step {earlier:,} is intact: use it with "
                f"--from-checkpoint {earlier} (from_checkpoint={earlier} in Python)")
        raise checkpoint.CheckpointError(f"{e}; {hint}") from None


def saved_run(run_dir: str, step: int | None = None) -> RunConfig:
    """:func:`rljax.run.checkpoint.saved_run`, a damaged checkpoint refused naming the
    intact earlier one."""
    with naming_intact(run_dir):
        run = checkpoint.saved_run(run_dir, step)
    if run.schedule_steps is not None and not get_algorithm(run.algo).anneals(run.config):
        # an older rljax recorded it for agents that anneal nothing, which now refuse it
        run = dataclasses.replace(run, schedule_steps=None)
    return run


def restore(run_dir: str, make_template: Callable[[], Any], step: int | None = None) -> Any:
    """:func:`rljax.run.checkpoint.restore` of checkpoint ``step`` (default: the newest)
    into ``make_template()``; a corrupted one is refused naming the intact earlier one.

    Raises:
        CheckpointError: as restore does; for a corrupted checkpoint the message ends with
            the intact earlier checkpoint and the option that uses it.
    """
    with naming_intact(run_dir):
        return checkpoint.restore(run_dir, make_template(), step)


def set_aside_newer(run_dir: str, step: int) -> dict[int, str]:
    """Moves the checkpoints newer than ``step`` into ``RUN_DIR/checkpoint.superseded/``,
    each under its step, or ``STEP.2``, ``STEP.3``, ... when a checkpoint set aside
    before holds that name (none is replaced); returns ``{step: its new name}``."""
    newer = [s for s in _step_folders(run_dir) if s > step]
    target = os.path.join(run_dir, SUPERSEDED)
    moved = {}
    for s in newer:
        os.makedirs(target, exist_ok=True)
        name, n = str(s), 1
        while os.path.lexists(os.path.join(target, name)):
            n += 1
            name = f"{s}.{n}"
        os.rename(os.path.join(run_dir, checkpoint.CHECKPOINT_DIR, str(s)),
                  os.path.join(target, name))
        moved[s] = name
    return moved


def set_aside_rows(run_dir: str, step: int) -> tuple[str, int] | None:
    """Copies the rows of ``RUN_DIR/metrics.jsonl`` logged after ``step`` (which the resumed
    run drops) into ``RUN_DIR/checkpoint.superseded/metrics.after-STEP.jsonl`` (``.2``,
    ... when taken); returns its path and the number of rows (None: no row to keep)."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    _, later = rundir.split_rows(lines, step)
    if not later:
        return None
    os.makedirs(os.path.join(run_dir, SUPERSEDED), exist_ok=True)
    path, n = os.path.join(run_dir, SUPERSEDED, f"metrics.after-{step}.jsonl"), 1
    while os.path.lexists(path):
        n += 1
        path = os.path.join(run_dir, SUPERSEDED, f"metrics.after-{step}.jsonl.{n}")
    with open(path, "w") as f:
        f.writelines(line + "\n" for line in later)
    return path, len(later)


def set_aside(run_dir: str, step: int) -> None:
    """Resuming from the earlier checkpoint ``step``: moves the newer checkpoints aside and
    keeps a copy of the metrics rows the resumed run drops, saying where in one line."""
    moved, rows = set_aside_newer(run_dir, step), set_aside_rows(run_dir, step)
    done = []
    if moved:
        done.append(f"moved the newer checkpoints to {os.path.join(run_dir, SUPERSEDED)}/ ("
                    + ", ".join(f"env step {s:,} as {name}" for s, name in moved.items())
                    + ")")
    if rows is not None:
        done.append(f"copied the {rows[1]} metrics row(s) after env step {step:,}, which "
                    f"metrics.jsonl drops, to {rows[0]}")
    if done:
        print(f"rljax: resuming from the checkpoint of env step {step:,}: "
              + " and ".join(done), file=sys.stderr)

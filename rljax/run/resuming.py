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
import os
import shutil
from collections.abc import Callable
from typing import Any

from rljax.run import checkpoint, rundir
from rljax.run.config import RunConfig

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
        saved = checkpoint.read_manifest(resume, step)
        steps = saved.get("env_steps")
        if isinstance(steps, int) and steps >= run.total_steps:
            checkpoint.check_compatible(saved, rundir.manifest(run)["run"])
            raise NothingToDo(f"{resume} has trained {steps:,} env steps, its budget "
                              f"(total_steps {run.total_steps:,}) is spent; nothing was "
                              "changed (give a larger total_steps to train on)")
        saved_run = _saved_run(saved.get("run") or {})
        run = keep_schedules(run, saved_run)
        expected = rundir.manifest(run)["run"]
        if saved_run is not None and saved_run.schedule_steps is None:
            # saved as "the run's length", which keep_schedules has just resolved
            expected = dict(expected, schedule_steps=None)
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
    if run.schedule_steps is not None or saved is None:
        return run
    length = saved.total_steps if saved.schedule_steps is None else saved.schedule_steps
    if length == run.total_steps:
        return run
    return dataclasses.replace(run, schedule_steps=length)


def intact_before(run_dir: str, make_template: Callable[[], Any], step: int) -> int | None:
    """The newest checkpoint older than ``step`` that reads back whole and matches its
    checksums (None: none does)."""
    for earlier in reversed([s for s in checkpoint._store().steps(
            os.path.join(run_dir, checkpoint.CHECKPOINT_DIR)) if s < step]):
        try:
            checkpoint.restore(run_dir, make_template(), earlier)
        except checkpoint.CheckpointError:
            continue
        return earlier
    return None


def restore(run_dir: str, make_template: Callable[[], Any], step: int | None = None) -> Any:
    """:func:`rljax.run.checkpoint.restore` of checkpoint ``step`` (default: the newest)
    into ``make_template()``; a corrupted one is refused naming the intact earlier one.

    Raises:
        CheckpointError: as restore does; for a corrupted checkpoint the message ends with
            the intact earlier checkpoint and the option that uses it.
    """
    try:
        return checkpoint.restore(run_dir, make_template(), step)
    except checkpoint.Corrupted as e:
        earlier = intact_before(run_dir, make_template, e.step)
        hint = ("no earlier checkpoint is intact" if earlier is None else
                f"the checkpoint of env step {earlier:,} is intact: use it with "
                f"--from-checkpoint {earlier} (from_checkpoint={earlier} in Python)")
        raise checkpoint.CheckpointError(f"{e}; {hint}") from None


def set_aside_newer(run_dir: str, step: int) -> list[int]:
    """Moves the checkpoints newer than ``step`` into ``RUN_DIR/checkpoint.superseded/``
    (replacing any of the same step there); returns their steps."""
    newer = [s for s in _step_folders(run_dir) if s > step]
    target = os.path.join(run_dir, SUPERSEDED)
    for s in newer:
        os.makedirs(target, exist_ok=True)
        shutil.rmtree(os.path.join(target, str(s)), ignore_errors=True)
        os.replace(os.path.join(run_dir, checkpoint.CHECKPOINT_DIR, str(s)),
                   os.path.join(target, str(s)))
    return newer

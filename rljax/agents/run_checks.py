"""Checks of settings that depend on the run an agent is part of, shared by the agents'
``check_run(config, spec, run)`` (reached through :mod:`rljax.run.registry`, which calls
it while a run is assembled, before anything compiles): values with which training would
silently do nothing are refused in one line, and a learning rate annealed to 0 before the
run ends is said in one warning. ``run`` is the :class:`rljax.agents.base.RunLength`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from rljax.agents.base import RunLength
from rljax.envs.spec import EnvSpec


def soft_targets(tau: float | None) -> None:
    """Refuses ``tau`` 0 (the target networks would never move)."""
    if tau == 0:
        raise ValueError("tau=0 never moves the target networks toward the learned ones; use "
                         "a tau in (0, 1]")


def target_period(period: int, run: RunLength) -> None:
    """Refuses a hard target copy every ``period`` updates in a shorter run."""
    if period > run.updates:
        raise ValueError(f"target_period={period:,} updates is longer than the run "
                         f"({run.updates:,} updates): the target network would never be "
                         f"updated; use target_period <= {run.updates:,} or a larger "
                         "total_steps")


def policy_delay(delay: int, grads_per_update: int, run: RunLength) -> None:
    """Refuses an actor delayed by more critic steps than the run takes."""
    grads = run.updates * grads_per_update
    if delay > grads:
        raise ValueError(f"policy_delay={delay:,} critic updates is longer than the run "
                         f"({grads:,}): the actor would never be updated; use policy_delay <= "
                         f"{grads:,} or a larger total_steps")


def target_entropy(target: float | None, spec: EnvSpec) -> None:
    """Refuses a target entropy above the largest any policy over the action box has."""
    if target is None or spec.discrete:
        return
    # The largest entropy of any density over the action box: the uniform one's.
    ceiling = float(np.sum(np.log(np.asarray(spec.action_high, np.float64)
                                  - np.asarray(spec.action_low, np.float64))))
    if target > ceiling:
        raise ValueError(f"target_entropy={target:g} is above the largest entropy a policy "
                         f"over {spec.task_id}'s actions can have ({ceiling:.3g}, uniform over "
                         f"the action box): the temperature would grow without bound; use a "
                         f"target below it (the default, None, is -{spec.action_shape[-1]})")


def needs_run(algo: str, anneal: bool, run: RunLength | None) -> None:
    """ValueError when an agent that anneals over the run (``anneal``) is built without
    the run's length."""
    if anneal and run is None:
        raise ValueError(f"anneal_lr needs the run's length: {algo}'s factory takes "
                         "run=RunLength(updates, schedule_updates) (a run gives it)")


def annealed_early(anneal: bool, run: RunLength) -> None:
    """Warns in one line when a learning rate annealed over ``run.schedule_updates`` reaches
    0 before the run ends (a resume with a larger budget keeps the saved schedule)."""
    if anneal and run.schedule_updates < run.updates:
        warnings.warn(f"the learning rate anneals to 0 by update {run.schedule_updates:,} "
                      f"(schedule_steps) of the run's {run.updates:,}: the last "
                      f"{run.updates - run.schedule_updates:,} updates train with a learning "
                      "rate of 0; leave schedule_steps unset to anneal over the run",
                      stacklevel=4)


def nothing(config: Any, spec: EnvSpec, run: RunLength) -> None:
    """The ``check_run`` of an agent without run-dependent settings."""
    del config, spec, run

"""Batched environments for rljax: one contract, two backends.

A task id names its backend: bare ids are envpool's (``CartPole-v1``, ``Breakout-v5``,
``Reacher-v5``), ``SUITE:NAME`` ids are JAX-native suites stepped inside the program
(``gymnax:CartPole-v1``, ``gymnax:Breakout-MinAtar``,
``craftax:Craftax-Classic-Symbolic-v1``). Every backend returns an :class:`Env`
(:mod:`rljax.envs.base`); ``rljax envs`` lists the ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rljax.envs.base import Env
from rljax.envs.base import EnvState
from rljax.envs.base import StepResult
from rljax.envs.base import env_seeds
from rljax.envs.base import resolve_seeds
from rljax.envs.spec import EnvSpec
from rljax.envs.spec import all_task_ids
from rljax.envs.stats import EpisodeStats
from rljax.envs.stats import recent_mean_return


def is_native(task_id: str) -> bool:
    """Whether ``task_id`` names a JAX-native suite (``SUITE:NAME``)."""
    return isinstance(task_id, str) and ":" in task_id


def make(task_id: str, num_envs: int = 8, seed: int | Sequence[int] = 0,
         **kwargs: Any) -> Env:
    """Builds one run's batched env of ``task_id`` with the backend its id names.

    Arguments as :func:`rljax.envs.pool.make` (envpool) takes them: ``seed`` is the run's
    seed or every env's own; JAX-native suites (:func:`rljax.envs.native.make`) take the
    same ones, and their own options. Several members' envs (seeds, sweep values) and
    data-parallel shards are composed around this env by :mod:`rljax.parallel.envs`.
    """
    if is_native(task_id):
        from rljax.envs import native

        # rljax's own wrapper options apply over any backend (envpool's make takes them
        # itself, checking them with its options).
        indices = kwargs.pop("obs_indices", None)
        env = native.make(task_id, num_envs, seed, **kwargs)
        if indices is not None:
            from rljax.envs.wrappers import select_obs

            env = select_obs(env, indices)
        return env
    from rljax.envs import pool

    return pool.make(task_id, num_envs, seed, **kwargs)


def vmappable(task_id: str) -> bool:
    """Whether the backend of ``task_id`` builds vmappable envs (``EnvSpec.vmappable``):
    JAX-native suites do; envpool does not (one pool holds several members' envs)."""
    return is_native(task_id)


def check_task(task_id: str) -> None:
    """Refuses an unknown task id (suggesting close matches) or one no agent takes."""
    if is_native(task_id):
        from rljax.envs import native

        native.task_spec(task_id)
        return
    from rljax.envs import spec

    spec.check_task(task_id)


def check_options(task_id: str, options: dict[str, Any]) -> None:
    """Refuses ``options`` (``rljax.envs.make``'s keyword arguments, ``obs_indices``
    included) that the backend of ``task_id`` does not take, naming the option."""
    if not is_native(task_id):
        from rljax.envs import spec

        spec.check_options(task_id, 1, 0, options)
        return
    from rljax.envs import native
    from rljax.envs.wrappers import check_obs_indices

    rest = {k: v for k, v in options.items() if k != "obs_indices"}
    obs_shape = native.task_spec(task_id, **rest).obs_shape
    if options.get("obs_indices") is not None:
        check_obs_indices(options["obs_indices"], obs_shape)


def reward_threshold(task_id: str) -> float | None:
    """The task's "solved" mean return where its backend defines one."""
    if is_native(task_id):
        from rljax.envs import native

        return native.task_spec(task_id).reward_threshold
    from rljax.envs.spec import task_spec

    value = getattr(task_spec(task_id).config, "reward_threshold", None)
    return None if value is None else float(value)


def task_ids() -> dict[str, list[str]]:
    """The task ids of each backend: ``{"envpool": [...], "gymnax": [...], ...}``."""
    from rljax.envs import native

    out: dict[str, list[str]] = {"envpool": list(all_task_ids())}
    for tid in native.task_ids():
        out.setdefault(tid.split(":")[0], []).append(tid)
    return out


__all__ = [
    "Env",
    "EnvSpec",
    "EnvState",
    "EpisodeStats",
    "StepResult",
    "all_task_ids",
    "check_options",
    "check_task",
    "env_seeds",
    "is_native",
    "make",
    "recent_mean_return",
    "resolve_seeds",
    "reward_threshold",
    "task_ids",
    "vmappable",
]

"""Batched environments for rljax: one contract, backends as records in one registry.

A task id names its backend (:mod:`rljax.envs.registry`): bare ids are envpool's
(``CartPole-v1``, ``Breakout-v5``, ``Reacher-v5``), ``PREFIX:NAME`` ids another backend's:
the JAX-native suites stepped inside the program (``gymnax:CartPole-v1``,
``gymnax:Breakout-MinAtar``, ``craftax:Craftax-Classic-Symbolic-v1``), a user's own
(:func:`register`), or a factory ``module:callable`` returning an env object
(:mod:`rljax.envs.objects`). Every backend returns an :class:`Env`
(:mod:`rljax.envs.base`); ``rljax envs`` lists the ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rljax.envs.base import Env
from rljax.envs.base import EnvState
from rljax.envs.base import StepResult
from rljax.envs.base import env_seeds
from rljax.envs.base import resolve_seeds
from rljax.envs.registry import Backend, backends, lookup, register
from rljax.envs.spec import EnvSpec
from rljax.envs.spec import all_task_ids
from rljax.envs.stats import EpisodeStats
from rljax.envs.stats import recent_mean_return


def is_native(task_id: str) -> bool:
    """Whether ``task_id``'s backend steps its envs inside the program (is vmappable)."""
    return vmappable(task_id)


def make(task_id: str, num_envs: int = 8, seed: int | Sequence[int] = 0,
         **kwargs: Any) -> Env:
    """Builds one run's batched env of ``task_id`` with the backend its id names
    (:func:`rljax.envs.registry.lookup`).

    Arguments as :func:`rljax.envs.pool.make` (envpool) takes them: ``seed`` is the run's
    seed or every env's own; every backend takes the same ones, and its own options.
    Several members' envs (seeds, sweep values) and data-parallel shards are composed
    around this env by :mod:`rljax.parallel.envs`.
    """
    backend, name = lookup(task_id)
    # rljax's own wrapper options apply over any backend's env.
    indices = kwargs.pop("obs_indices", None)
    env = backend.make(name, num_envs, seed, **kwargs)
    if env.spec.task_id != task_id:  # a backend names its tasks without the prefix
        env = env._replace(spec=dataclasses.replace(env.spec, task_id=task_id))
    if indices is not None:
        from rljax.envs.wrappers import select_obs

        env = select_obs(env, indices)
    return env


def vmappable(task_id: str) -> bool:
    """Whether the backend of ``task_id`` builds vmappable envs (``EnvSpec.vmappable``):
    JAX-native suites do; envpool does not (one pool holds several members' envs)."""
    return lookup(task_id)[0].vmappable


def check_task(task_id: str) -> None:
    """Refuses an unknown task id (suggesting close matches) or one no agent takes."""
    backend, name = lookup(task_id)
    backend.spec(name)


def check_options(task_id: str, options: dict[str, Any]) -> None:
    """Refuses ``options`` (``rljax.envs.make``'s keyword arguments, ``obs_indices``
    included) that the backend of ``task_id`` does not take, naming the option."""
    from rljax.envs.wrappers import check_obs_indices

    backend, name = lookup(task_id)
    rest = {k: v for k, v in options.items() if k != "obs_indices"}
    from rljax.envs import pool

    if backend is pool.BACKEND:  # envpool's make takes obs_indices among its options
        from rljax.envs import spec

        spec.check_options(task_id, 1, 0, options)
        return
    obs_shape = backend.spec(name, **rest).obs_shape
    if options.get("obs_indices") is not None:
        check_obs_indices(options["obs_indices"], obs_shape)


def reward_threshold(task_id: str) -> float | None:
    """The task's "solved" mean return where its backend defines one."""
    backend, name = lookup(task_id)
    if name in backend.thresholds:
        return float(backend.thresholds[name])
    return backend.spec(name).reward_threshold


def task_ids() -> dict[str, list[str]]:
    """The task ids of each registered backend: ``{"envpool": [...], "gymnax": [...],
    ...}`` (the bare ids' backend under its package's name)."""
    out: dict[str, list[str]] = {}
    for prefix, backend in backends().items():
        label = prefix or backend.package or "bare"
        out[label] = [f"{prefix}:{t}" if prefix else t for t in backend.task_ids()]
    return out


__all__ = [
    "Backend",
    "Env",
    "EnvSpec",
    "EnvState",
    "EpisodeStats",
    "StepResult",
    "all_task_ids",
    "backends",
    "check_options",
    "check_task",
    "env_seeds",
    "is_native",
    "lookup",
    "make",
    "recent_mean_return",
    "resolve_seeds",
    "register",
    "reward_threshold",
    "task_ids",
    "vmappable",
]

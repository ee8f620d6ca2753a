"""The contract of every env backend: a batched env's state, step record and functions.

Backends (:mod:`rljax.envs.pool` for envpool, :mod:`rljax.envs.native` for JAX-native
suites) each turn a task id into an :class:`Env` of one run's envs:
``make(task_id, num_envs, seed, **options)``, where ``seed`` is the run's seed or every
env's own seed (:func:`resolve_seeds`). Backends know nothing of members (seeds, sweep
values), data shards or devices: :mod:`rljax.parallel.envs` composes those around any
``Env``, by vmapping it where ``spec.vmappable`` and otherwise by asking the backend for one
env holding every member's envs, each with its own seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from flax import struct

from rljax.envs.spec import EnvSpec
from rljax.envs.stats import EpisodeStats
from rljax.types import Array


@struct.dataclass
class EnvState:
    """State of a batched environment inside the compiled loop.

    Attributes:
        handle: the backend's own state: envpool's XLA handle (opaque bytes), or the
            JAX-native envs' states and keys (:class:`rljax.envs.native.Handle`).
        obs: the observation each env acts on next, ``[B, *obs_shape]``.
        done: whether each env's last step ended an episode, ``[B]`` bool (envpool: the
            next step is a reset step; JAX-native envs: ``obs`` is already the next
            episode's first observation).
        stats: episode statistics.
        extras: per-run sums a backend keeps besides (Craftax: achievements of finished
            episodes), or None.
    """

    handle: Any
    obs: Array
    done: Array
    stats: EpisodeStats
    extras: Any = None


class StepResult(NamedTuple):
    """What one batched step returns, all ``[B, ...]``.

    Attributes:
        obs: observation after the step (the real final observation when the
            episode ended here; the state's ``obs`` is what the env acts on next).
        reward: reward as the agent trains on it (clipped for Atari by default).
        terminated: a terminal state was reached: do not bootstrap.
        truncated: a time limit cut the episode: bootstrap from ``obs``.
        valid: False on reset steps (the action was ignored); such a step is not
            a transition and must not be learned from.
        episode_end: a whole episode (for Atari: a whole game) ended here.
        episode_return: return of that episode (raw score), where ``episode_end``.
        episode_length: length of that episode in agent steps, where ``episode_end``.
        score: the reward the episode statistics sum (for Atari the raw game score,
            before clipping; else ``reward``), from which the parallel layer counts a
            composed env's episodes (:mod:`rljax.parallel.envs`).
    """

    obs: Array
    reward: Array
    terminated: Array
    truncated: Array
    valid: Array
    episode_end: Array
    episode_return: Array
    episode_length: Array
    score: Array


class Env(NamedTuple):
    """A batched environment of any backend (envpool, JAX-native).

    Attributes:
        spec: static description.
        pool: the underlying envpool object (host side); None for JAX-native envs.
        reset: ``reset() -> EnvState``: resets every env and returns the state to carry
            into compiled code.
        step: ``step(state, action) -> (state, StepResult)``; jittable, usable in
            ``lax.scan``. Where ``spec.vmappable`` (JAX-native envs) it is vmappable and
            the same function for every seed (the seeds live in the state); envpool's
            is not (:mod:`rljax.parallel.envs` steps several members' envs as one pool).
        host_step: ``host_step(action) -> (obs, reward, terminated, truncated, info)``
            NumPy-level step with rljax's dtype conversions, for scripts and tests
            (envpool only; None otherwise).
        state_shapes: ``state_shapes() -> EnvState`` of ``jax.ShapeDtypeStruct`` s: what
            ``reset()`` returns, without resetting (for checks made before a run
            allocates); None where the env does not say.
        achievement_names: names of the achievements counted in ``EnvState.extras``
            (Craftax), else None.
    """

    spec: EnvSpec
    pool: Any
    reset: Callable[[], EnvState]
    step: Callable[[EnvState, Array], tuple[EnvState, StepResult]]
    host_step: Callable[[Any], tuple] | None
    state_shapes: Callable[[], EnvState] | None = None
    achievement_names: tuple[str, ...] | None = None


SEED_STRIDE = 1_000_003  # prime, larger than any num_envs: seeds never share an env seed


def resolve_seeds(seed: Any, num_envs: int) -> list[int]:
    """The per-env seeds a backend's ``make`` draws from: ``seed`` is a run's seed (env
    ``i`` gets :func:`env_seeds` ``(seed, num_envs)[i]``) or a sequence of ``num_envs``
    seeds, one per env (how the parallel layer builds members' and shards' envs).

    Raises:
        ValueError: a seed outside ``[0, 2**31)``, or a sequence of another length.
    """
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        if not 0 <= seed < 2**31:
            raise ValueError(f"seed must be an integer in [0, 2**31), got {seed!r}")
        return env_seeds(int(seed), num_envs)
    try:
        seeds = [int(s) for s in seed]
        ok = all(not isinstance(s, bool) and float(s) == int(s) for s in seed)
    except (TypeError, ValueError):
        seeds, ok = [], False
    if not ok or len(seeds) != num_envs or any(not 0 <= s < 2**31 for s in seeds):
        raise ValueError(f"seed must be an integer in [0, 2**31) or a sequence of num_envs="
                         f"{num_envs} such integers, got {seed!r}")
    return seeds


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """Per-env seeds of a run: env ``i`` of run ``seed`` gets ``seed * SEED_STRIDE + i``.

    Runs with different seeds never share an env seed (envpool's own scheme, env
    ``i`` seeded ``seed + i``, would give seeds 0 and 1 fifteen envs in common at
    16 envs), and a pool holding several runs' envs reproduces each run exactly.
    """
    return [env_seed(seed, i) for i in range(num_envs)]


def env_seed(seed: int, i: int) -> int:
    """The seed of env ``i`` of run ``seed`` (:func:`env_seeds`)."""
    return (seed * SEED_STRIDE + i) % 2**31



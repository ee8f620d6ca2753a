"""The contract of every env backend: a batched env's state, step record and functions.

Backends (:mod:`rljax.envs.pool` for envpool, :mod:`rljax.envs.native` for JAX-native
suites) each turn a task id into an :class:`Env`; loops, agents and the parallel layer see
nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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
    """

    obs: Array
    reward: Array
    terminated: Array
    truncated: Array
    valid: Array
    episode_end: Array
    episode_return: Array
    episode_length: Array


class Env(NamedTuple):
    """A batched environment of any backend (envpool, JAX-native).

    Attributes:
        spec: static description.
        pool: the underlying envpool object (host side); None for JAX-native envs.
        reset: ``reset() -> EnvState``: resets every env and returns the state to carry
            into compiled code.
        step: ``step(state, action) -> (state, StepResult)``; jittable, usable in
            ``lax.scan``. JAX-native envs' step is vmappable; envpool's only over the
            members of one pool (see :func:`rljax.envs.make`).
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


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """Per-env seeds of a run: env ``i`` of run ``seed`` gets ``seed * SEED_STRIDE + i``.

    Runs with different seeds never share an env seed (envpool's own scheme, env
    ``i`` seeded ``seed + i``, would give seeds 0 and 1 fifteen envs in common at
    16 envs), and a pool holding several runs' envs reproduces each run exactly.
    """
    return [(seed * SEED_STRIDE + i) % 2**31 for i in range(num_envs)]



"""Brax-style envs as rljax envs: ``reset(key) -> state``, ``step(state, action) -> state``.

A brax-style env is an object whose ``reset(key)`` and ``step(state, action)`` are pure
JAX functions of a state carrying ``obs`` (an array ``[observation_size]``), ``reward`` and
``done`` (termination, as a number or bool), with ``observation_size`` and ``action_size``
and continuous actions in ``[-1, 1]`` (brax's own envs, a Playground env, a user's). It
has no time limit of its own: rljax keeps one, ``max_episode_steps`` (default: the env's
attribute of that name, else 1000, as brax's training does), apart from termination: a
step that ends the episode by the limit alone is *truncated* and bootstraps from its real
final observation.

:func:`source` wraps such an env once into the gymnax shape (``reset_env`` /
``step_env`` with a step counter), so :mod:`rljax.envs.native` builds, vmaps, seeds and
checkpoints it as it does gymnax's envs; :func:`make` is the whole adapter, for a backend
(``brax:``, ``playground:``) or a user's env object (:mod:`rljax.envs.objects`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.envs import native
from rljax.envs.base import Env
from rljax.types import Array

DEFAULT_MAX_EPISODE_STEPS = 1000


def is_brax_style(obj: Any) -> bool:
    """Whether ``obj`` has a brax-style env's methods and sizes."""
    return all(callable(getattr(obj, m, None)) for m in ("reset", "step")) and all(
        hasattr(obj, a) for a in ("observation_size", "action_size"))


@struct.dataclass
class Params:
    """The time limit, the only parameter rljax gives a brax-style env."""

    max_steps_in_episode: int = struct.field(pytree_node=False,
                                             default=DEFAULT_MAX_EPISODE_STEPS)


@struct.dataclass
class State:
    """The env's own state and the steps taken in its episode."""

    inner: Any
    time: Array


class _Box(NamedTuple):
    shape: tuple[int, ...]
    low: float = -1.0
    high: float = 1.0


class GymnaxShaped:
    """A brax-style env in the gymnax shape :mod:`rljax.envs.native` steps."""

    def __init__(self, env: Any):
        self.env = env

    def reset_env(self, key: Array, params: Params) -> tuple[Array, State]:
        inner = self.env.reset(key)
        return inner.obs, State(inner=inner, time=jnp.zeros((), jnp.int32))

    def step_env(self, key: Array, state: State, action: Array, params: Params):
        inner = self.env.step(state.inner, action)
        done = jnp.asarray(inner.done).astype(bool)
        return (inner.obs, State(inner=inner, time=state.time + 1),
                jnp.asarray(inner.reward, jnp.float32), done, {})

    def observation_space(self, params: Params) -> _Box:
        return _Box((_size("observation_size", self.env.observation_size),))

    def action_space(self, params: Params) -> _Box:
        return _Box((_size("action_size", self.env.action_size),))


def _size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"a brax-style env's {name} must be an integer >= 1 (its "
                         f"observation a flat array), got {value!r}")
    return value


def _split_done(env, params: Params, state: State, done: Array) -> tuple[Array, Array]:
    # ``done`` is termination only; the step limit truncates an episode not terminated.
    return done, (state.time >= params.max_steps_in_episode) & ~done


SUITE = native.Suite(package="", tasks=(), make=None, split_done=_split_done,
                     time_limit=lambda p: int(p.max_steps_in_episode),
                     with_time_limit=lambda p, n: p.replace(max_steps_in_episode=int(n)))


def source(env: Any, task_id: str, max_episode_steps: int | None = None,
           threshold: float | None = None) -> native.Source:
    """``env`` wrapped once as a :class:`rljax.envs.native.Source` of ``task_id``.

    Raises:
        ValueError: ``env`` lacks a brax-style env's methods or sizes, or its observation
            is not one flat float array of ``observation_size``.
    """
    if not is_brax_style(env):
        raise ValueError(f"{type(env).__name__} is not a brax-style env: it needs reset(key), "
                         "step(state, action), observation_size and action_size")
    shaped = GymnaxShaped(env)
    size = shaped.observation_space(None).shape
    shaped.action_space(None)
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    obs = getattr(state, "obs", None)
    if not isinstance(obs, jax.ShapeDtypeStruct) or obs.shape != size:
        what = (f"shape {obs.shape}" if isinstance(obs, jax.ShapeDtypeStruct)
                else type(obs).__name__)
        raise ValueError(f"{type(env).__name__}'s observation must be one array of shape "
                         f"{size} (observation_size), got {what}")
    if max_episode_steps is None:  # the env's own, else brax's default
        max_episode_steps = getattr(env, "max_episode_steps", None) or DEFAULT_MAX_EPISODE_STEPS
    steps = max_episode_steps
    return native.Source(task_id, SUITE, shaped, Params(max_steps_in_episode=int(steps)),
                         threshold)


def make(env: Any, num_envs: int, seed: int | Sequence[int] = 0, *, task_id: str,
         max_episode_steps: int | None = None, threshold: float | None = None,
         **options: Any) -> Env:
    """``num_envs`` envs of the brax-style ``env`` as an rljax :class:`Env` (vmappable,
    reset in the step that ends an episode, env ``i`` of run ``seed`` seeded as every
    backend seeds it). ``options`` are :mod:`rljax.envs.native`'s (``reset_ratio``)."""
    options = native.check_options(task_id, dict(options))
    return native.make_from(source(env, task_id, max_episode_steps, threshold), num_envs,
                            seed, options)

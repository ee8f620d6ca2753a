"""envpool adapter: one batched environment, stepped on the host or inside XLA.

envpool resets an environment on the step *after* it ends: the step that
returns ``terminated`` or ``truncated`` carries the real final observation, and
the following step ignores its action, returns reward 0 and the first
observation of the next episode. rljax calls that following step a *reset step*
and marks it ``valid=False``; learners mask it out, so no transition ever
crosses an episode boundary.

MuJoCo tasks use float64 observations and actions. rljax keeps JAX in its
default 32-bit mode and enables 64-bit types only around the envpool custom call
(``jax.enable_x64`` as a context manager, at build and at trace time), casting
actions up and observations down right there.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.envs.spec import EnvSpec, check_options
from rljax.envs.stats import EpisodeStats, init_stats, update_stats
from rljax.types import Array


@struct.dataclass
class EnvState:
    """State of a batched environment inside the compiled loop.

    Attributes:
        handle: envpool's XLA handle (opaque bytes).
        obs: current observation of each env, ``[B, *obs_shape]``.
        done: whether each env's last step ended an episode (so the next step is
            a reset step), ``[B]`` bool.
        stats: episode statistics.
    """

    handle: Array
    obs: Array
    done: Array
    stats: EpisodeStats


class StepResult(NamedTuple):
    """What one batched step returns, all ``[B, ...]``.

    Attributes:
        obs: observation after the step (the real final observation when the
            episode ended here).
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
    """A batched envpool environment.

    Attributes:
        spec: static description.
        pool: the underlying envpool object (host side).
        reset: ``reset() -> EnvState``: resets every env on the host and returns
            the state to carry into compiled code.
        step: ``step(state, action) -> (state, StepResult)``; jittable, usable in
            ``lax.scan``; not vmappable (one pool per program).
        host_step: ``host_step(action) -> (obs, reward, terminated, truncated, info)``
            NumPy-level step with rljax's dtype conversions, for scripts and tests.
    """

    spec: EnvSpec
    pool: Any
    reset: Callable[[], EnvState]
    step: Callable[[EnvState, Array], tuple[EnvState, StepResult]]
    host_step: Callable[[Any], tuple]


def _x64_context(enabled: bool):
    return jax.enable_x64(True) if enabled else contextlib.nullcontext()


def _build_spec(task_id: str, num_envs: int, pool: Any, options: dict) -> tuple[EnvSpec, bool]:
    obs_space = pool.observation_space
    act_space = pool.action_space
    needs_x64 = np.dtype(obs_space.dtype) == np.float64 or (
        hasattr(act_space, "dtype") and np.dtype(act_space.dtype) == np.float64
    )
    obs_dtype = np.dtype(np.float32) if np.dtype(obs_space.dtype) == np.float64 else np.dtype(
        obs_space.dtype)
    config = pool.spec.config
    if hasattr(act_space, "n"):
        num_actions, action_shape, low, high = int(act_space.n), (), None, None
    else:
        num_actions, action_shape = None, tuple(int(d) for d in act_space.shape)
        low = tuple(float(x) for x in np.asarray(act_space.low).reshape(-1))
        high = tuple(float(x) for x in np.asarray(act_space.high).reshape(-1))
    threshold = getattr(config, "reward_threshold", None)
    spec = EnvSpec(
        task_id=task_id,
        num_envs=num_envs,
        obs_shape=tuple(int(d) for d in obs_space.shape),
        obs_dtype=obs_dtype,
        num_actions=num_actions,
        action_shape=action_shape,
        action_low=low,
        action_high=high,
        max_episode_steps=int(config.max_episode_steps),
        reward_threshold=None if threshold is None else float(threshold),
        is_atari="episodic_life" in config._fields and "stack_num" in config._fields,
        options=tuple(sorted(options.items())),
    )
    return spec, needs_x64


def make(task_id: str, num_envs: int = 8, seed: int = 0, **options: Any) -> Env:
    """Builds a batched envpool environment.

    Args:
        task_id: an envpool task id such as ``"CartPole-v1"``, ``"Breakout-v5"`` or
            ``"Reacher-v5"``.
        num_envs: number of environments stepped together, >= 1.
        seed: base seed; env ``i`` is seeded by envpool from ``seed``.
        **options: envpool options (``max_episode_steps``, ``episodic_life``,
            ``reward_clip``, ``num_threads``, ...). For Atari rljax defaults to
            ``episodic_life=True, reward_clip=True``.

    Returns:
        An :class:`Env`.

    Raises:
        ValueError: unknown task id (with suggestions), ``num_envs < 1``, a bad
            seed, or an option the task does not have; raised before any pool is built.
    """
    import envpool

    merged = check_options(task_id, num_envs, seed, options)
    with warnings.catch_warnings():
        # gymnasium warns that float64 Box bounds are stored as float32: harmless here.
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        pool = envpool.make(task_id, env_type="gymnasium", num_envs=int(num_envs),
                            batch_size=int(num_envs), seed=int(seed), **merged)
        spec, needs_x64 = _build_spec(task_id, int(num_envs), pool, merged)
    with _x64_context(needs_x64):
        handle0, _recv, _send, xla_step = pool.xla()
    action_np_dtype = np.float64 if needs_x64 else (
        np.int32 if spec.discrete else np.float32)
    track_game = spec.is_atari

    def reset() -> EnvState:
        obs, _ = pool.reset()
        return EnvState(
            handle=jnp.asarray(handle0),
            obs=jnp.asarray(np.asarray(obs).astype(spec.obs_dtype, copy=False)),
            done=jnp.zeros((spec.num_envs,), bool),
            stats=init_stats(spec.num_envs),
        )

    def step(state: EnvState, action: Array) -> tuple[EnvState, StepResult]:
        with _x64_context(needs_x64):
            act = jnp.asarray(action).astype(jnp.float64 if needs_x64 else action_np_dtype)
            handle, (obs, reward, terminated, truncated, info) = xla_step(state.handle, act)
            obs = obs.astype(spec.obs_dtype)
            reward = reward.astype(jnp.float32)
            raw_reward = info["reward"].astype(jnp.float32) if track_game else reward
        terminated = terminated.astype(bool)
        truncated = truncated.astype(bool)
        valid = ~state.done
        if track_game:
            episode_end = (info["terminated"].astype(bool) | truncated) & valid
        else:
            episode_end = (terminated | truncated) & valid
        stats, ep_ret, ep_len = update_stats(state.stats, raw_reward, valid, episode_end)
        new_state = EnvState(handle=handle, obs=obs, done=terminated | truncated, stats=stats)
        return new_state, StepResult(obs, reward, terminated, truncated, valid, episode_end,
                                     ep_ret, ep_len)

    def host_step(action: Any) -> tuple:
        obs, reward, terminated, truncated, info = pool.step(
            np.asarray(action).astype(action_np_dtype))
        return (np.asarray(obs).astype(spec.obs_dtype, copy=False),
                np.asarray(reward, np.float32), np.asarray(terminated, bool),
                np.asarray(truncated, bool), info)

    return Env(spec=spec, pool=pool, reset=reset, step=step, host_step=host_step)

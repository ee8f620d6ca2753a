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
import types
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax import resources
from rljax.envs import envpool_ffi, envpool_import
from rljax.envs.base import Env, EnvState, StepResult, resolve_seeds
from rljax.envs.registry import Backend
from rljax.envs.spec import (
    EnvSpec,
    check_options,
    check_task,
    is_atari_config,
    task_spaces,
    task_spec,
)
from rljax.envs.stats import init_stats, update_stats
from rljax.types import Array


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
        is_atari=is_atari_config(config._fields),
        options=tuple(sorted(options.items())),
    )
    return spec, needs_x64


def make(task_id: str, num_envs: int = 8, seed: int | Sequence[int] = 0,
         **options: Any) -> Env:
    """Builds a batched envpool environment: one pool of ``num_envs`` envs.

    Args:
        task_id: an envpool task id such as ``"CartPole-v1"``, ``"Breakout-v5"`` or
            ``"Reacher-v5"``.
        num_envs: number of environments stepped together, >= 1.
        seed: run seed; env ``i`` gets :func:`env_seeds` ``(seed, num_envs)[i]``. Or a
            sequence of ``num_envs`` per-env seeds (:func:`rljax.envs.base.resolve_seeds`):
            how :mod:`rljax.parallel.envs` builds one pool for several members' envs, or a
            data shard's envs, each seeded as in its single run.
        **options: envpool options (``max_episode_steps``, ``episodic_life``,
            ``reward_clip``, ``num_threads``, ...). For Atari rljax defaults to
            ``episodic_life=True, reward_clip=True``. And rljax's own ``obs_indices``:
            keep only these entries of flat observations
            (:func:`rljax.envs.wrappers.select_obs`; e.g. ``(0, 2)`` hides CartPole's
            velocities).

    Returns:
        An :class:`Env` (``spec.vmappable`` False: envpool's XLA step cannot be vmapped).

    Raises:
        ValueError: unknown task id (with suggestions), a task whose spaces no rljax
            agent takes, ``num_envs < 1``, a bad seed, an option the task does not have,
            or more envs than the host memory holds; raised before any pool is built.
    """
    merged = check_options(task_id, num_envs, seed, options)
    total = int(num_envs)
    _check_pool_memory(task_id, total)  # before reading a seed per env
    seeds = resolve_seeds(seed, total)
    with warnings.catch_warnings():
        # gymnasium warns that float64 Box bounds are stored as float32: harmless here.
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        # envpool's own ``seed`` is unused where every env has its ``env_seed``.
        envpool = envpool_import.registry(task_id)
        pool = envpool.make(task_id, env_type="gymnasium", num_envs=total, batch_size=total,
                            seed=int(seed) if isinstance(seed, int | np.integer) else 0,
                            env_seed=seeds, **merged)
        spec, needs_x64 = _build_spec(task_id, total, pool, merged)
    with _x64_context(needs_x64):
        handle0, _recv, _send, xla_step = envpool_ffi.xla(pool)
    action_np_dtype = np.float64 if needs_x64 else (
        np.int32 if spec.discrete else np.float32)
    track_game = spec.is_atari

    def pool_step(handle: Array, action: Array) -> tuple:
        """The envpool custom call on the whole pool, with rljax's dtype casts."""
        with _x64_context(needs_x64):
            act = jnp.asarray(action).astype(jnp.float64 if needs_x64 else action_np_dtype)
            handle, (obs, reward, terminated, truncated, info) = xla_step(handle, act)
            obs = obs.astype(spec.obs_dtype)
            reward = reward.astype(jnp.float32)
            raw_reward = info["reward"].astype(jnp.float32) if track_game else reward
            game_over = info["terminated"].astype(bool) if track_game else terminated.astype(
                bool)
        return handle, obs, reward, terminated.astype(bool), truncated.astype(bool), (
            raw_reward, game_over)

    def initial_state(obs: Array) -> EnvState:
        return EnvState(handle=jnp.asarray(handle0), obs=obs, done=jnp.zeros((total,), bool),
                        stats=init_stats(total))

    # reset builds the state on the host and copies it over: no program to compile when
    # a run's first evaluation resets its envs between training chunks.
    fresh = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), jax.eval_shape(
        lambda: initial_state(jnp.zeros((total,) + spec.obs_shape, spec.obs_dtype))))

    def reset() -> EnvState:
        obs, _ = pool.reset()
        return jax.device_put(fresh.replace(handle=np.asarray(handle0), obs=np.asarray(
            obs).astype(spec.obs_dtype, copy=False)))

    def state_shapes() -> EnvState:
        return jax.eval_shape(lambda: initial_state(
            jnp.zeros((total,) + spec.obs_shape, spec.obs_dtype)))

    def step(state: EnvState, action: Array) -> tuple[EnvState, StepResult]:
        handle, obs, reward, terminated, truncated, (raw_reward, game_over) = pool_step(
            state.handle, action)
        valid = ~state.done
        episode_end = (game_over | truncated) & valid
        stats, ep_ret, ep_len = update_stats(state.stats, raw_reward, valid, episode_end)
        new_state = EnvState(handle=handle, obs=obs, done=terminated | truncated, stats=stats)
        return new_state, StepResult(obs, reward, terminated, truncated, valid, episode_end,
                                     ep_ret, ep_len, raw_reward)

    def host_step(action: Any) -> tuple:
        obs, reward, terminated, truncated, info = pool.step(
            np.asarray(action).astype(action_np_dtype))
        return (np.asarray(obs).astype(spec.obs_dtype, copy=False),
                np.asarray(reward, np.float32), np.asarray(terminated, bool),
                np.asarray(truncated, bool), info)

    env = Env(spec=spec, pool=pool, reset=reset, step=step, host_step=host_step,
              state_shapes=state_shapes)
    if options.get("obs_indices") is not None:
        from rljax.envs.wrappers import select_obs

        env = select_obs(env, options["obs_indices"])
    return env


def _check_pool_memory(task_id: str, num_envs: int) -> None:
    """Refuses a pool whose envs alone would not fit in the host memory available."""
    space, _ = task_spaces(task_spec(task_id))
    need = resources.env_pool_bytes(num_envs, space.shape, space.dtype)
    what = f"{num_envs:,} envpool envs"
    resources.check_fits({what: need}, {what: "num_envs"})


def static_spec(task_id: str, **options: Any) -> EnvSpec:
    """The :class:`EnvSpec` of one env of ``task_id``, read from envpool's spec without
    building a pool; ValueError for an unknown task (with suggestions) or one whose
    spaces no rljax agent takes."""
    check_task(task_id)
    envpool_spec = task_spec(task_id)
    observations, actions = task_spaces(envpool_spec)
    view = types.SimpleNamespace(observation_space=observations, action_space=actions,
                                 spec=envpool_spec)
    return _build_spec(task_id, 1, view, dict(options))[0]


def _all_task_ids() -> tuple[str, ...]:
    from rljax.envs.spec import all_task_ids

    return all_task_ids()


# envpool as the env backend of bare task ids (rljax.envs.registry registers it).
BACKEND = Backend(make=make, task_ids=_all_task_ids, spec=static_spec, vmappable=False,
                  package="envpool", description="bare ids, stepped on the host")

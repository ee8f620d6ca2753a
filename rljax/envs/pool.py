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
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax import resources
from rljax.envs import envpool_ffi
from rljax.envs.base import Env, EnvState, StepResult, env_seeds
from rljax.envs.spec import EnvSpec, check_options, is_atari_config, task_spaces, task_spec
from rljax.envs.stats import init_stats, update_stats
from rljax.types import Array, Split


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


def _seed_batched(pool_step: Callable, num_seeds: int) -> Callable:
    """``pool_step`` for one seed's envs, to be called under ``jax.vmap`` over seeds.

    envpool's custom call cannot be vmapped, so this gives it a batching rule: the
    seeds' actions ``[S, B, ...]`` are flattened into one call on the pool of
    ``S * B`` envs and the outputs split back, per seed. Called without vmap it
    raises, since one seed cannot step the pool alone.
    """

    message = (f"this env holds {num_seeds} seeds' envs: call its step under jax.vmap "
               "over the seed axis (see rljax.parallel.members)")

    def _refuse(*_):
        raise ValueError(message)

    @jax.custom_batching.custom_vmap
    def step(handle, action):
        # Traced for its output shapes even under vmap; executed only without vmap.
        pooled = jax.eval_shape(pool_step, handle, jnp.concatenate([action] * num_seeds))
        one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
            (x.shape[0] // num_seeds,) + x.shape[1:] if x.ndim else x.shape, x.dtype),
            pooled[1:])
        return (handle, *jax.pure_callback(_refuse, one, handle, action))

    @step.def_vmap
    def _rule(axis_size, in_batched, handle, action):
        if axis_size != num_seeds:
            raise ValueError(f"vmapped over {axis_size} members, but the pool holds "
                             f"{num_seeds} seeds' envs")
        handle_batched, action_batched = in_batched
        handle = handle[0] if handle_batched else handle
        action = action if action_batched else jnp.broadcast_to(
            action, (num_seeds,) + action.shape)
        flat = action.reshape((-1,) + action.shape[2:])
        handle, *outs = pool_step(handle, flat)
        split = lambda x: x.reshape((num_seeds, -1) + x.shape[1:])
        outs = jax.tree.map(split, outs)
        handle = jnp.broadcast_to(handle, (num_seeds,) + handle.shape)
        out = (handle, *outs)
        return out, jax.tree.map(lambda _: True, out)

    return step


def make(task_id: str, num_envs: int = 8, seed: int = 0, *, num_seeds: int = 1,
         member_seeds: Sequence[int] | None = None, member_axis: bool | None = None,
         data_shard: tuple[int, int, Split] | None = None, **options: Any) -> Env:
    """Builds a batched envpool environment.

    Args:
        task_id: an envpool task id such as ``"CartPole-v1"``, ``"Breakout-v5"`` or
            ``"Reacher-v5"``.
        num_envs: number of environments stepped together, >= 1 (per seed).
        seed: run seed; env ``i`` gets :func:`env_seeds` ``(seed, num_envs)[i]``.
        num_seeds: build one pool holding the envs of runs ``seed, seed + 1, ...,
            seed + num_seeds - 1`` (``num_seeds * num_envs`` envs, seed-major), each
            seeded exactly as in a single run. Then ``reset()`` returns a state with a
            leading seed axis and ``step`` works under ``jax.vmap`` over that axis.
        member_seeds: the run seed of each of the ``num_seeds`` members of the pool
            (default ``seed, seed + 1, ...``); members may repeat a seed (a
            hyperparameter sweep runs each value on the same seeds).
        member_axis: give states a leading member axis (and ``step`` its vmap rule)
            even for one member (default: when ``num_seeds > 1``); used where several
            pools each hold a share of the members (``rljax.parallel.devices``).
        data_shard: ``(index, count, split)``: this pool holds shard ``index`` of
            ``count`` equal shards of one run's ``num_envs * count`` envs (envs
            ``index * num_envs ...``, seeded as in the unsharded run), for data-parallel
            learning (``rljax.parallel.data_parallel``). Its ``step`` gathers every
            shard's rewards and episode ends with ``split`` (a :class:`rljax.types.Split`),
            so the episode statistics are those of the whole run, identical on every
            device.
        **options: envpool options (``max_episode_steps``, ``episodic_life``,
            ``reward_clip``, ``num_threads``, ...). For Atari rljax defaults to
            ``episodic_life=True, reward_clip=True``. And rljax's own ``obs_indices``:
            keep only these entries of flat observations
            (:func:`rljax.envs.wrappers.select_obs`; e.g. ``(0, 2)`` hides CartPole's
            velocities).

    Returns:
        An :class:`Env`.

    Raises:
        ValueError: unknown task id (with suggestions), a task whose spaces no rljax
            agent takes, ``num_envs < 1``, a bad seed, an option the task does not have,
            or more envs than the host memory holds; raised before any pool is built.
    """
    import envpool

    merged = check_options(task_id, num_envs, seed, options)
    if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or num_seeds < 1:
        raise ValueError(f"num_seeds must be an integer >= 1, got {num_seeds!r}")
    if member_seeds is None:
        member_seeds = [int(seed) + k for k in range(num_seeds)]
    member_seeds = [int(s) for s in member_seeds]
    if len(member_seeds) != num_seeds or any(not 0 <= s < 2**31 for s in member_seeds):
        raise ValueError(f"member_seeds must hold num_seeds={num_seeds} seeds in [0, 2**31), "
                         f"got {member_seeds!r}")
    total = int(num_envs) * num_seeds
    _check_pool_memory(task_id, total, num_seeds)
    seeds = [s for member in member_seeds for s in env_seeds(member, int(num_envs))]
    stats_envs = total
    if data_shard is not None:
        shard, shards, _ = data_shard
        if num_seeds != 1 or member_axis or not 0 <= shard < shards:
            raise ValueError(f"data_shard={data_shard[:2]!r} needs one member and a shard index "
                             "in [0, count)")
        seeds = env_seeds(member_seeds[0], total * shards)[shard * total:(shard + 1) * total]
        stats_envs = total * shards
    with warnings.catch_warnings():
        # gymnasium warns that float64 Box bounds are stored as float32: harmless here.
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        pool = envpool.make(task_id, env_type="gymnasium", num_envs=total, batch_size=total,
                            seed=int(seed), env_seed=seeds, **merged)
        spec, needs_x64 = _build_spec(task_id, int(num_envs), pool, merged)
    spec = dataclasses.replace(spec, num_seeds=num_seeds)
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

    if member_axis is None:
        member_axis = num_seeds > 1
    raw_step = _seed_batched(pool_step, num_seeds) if member_axis else pool_step

    def initial_state(obs: Array) -> EnvState:
        state = EnvState(handle=jnp.asarray(handle0), obs=obs, done=jnp.zeros((total,), bool),
                         stats=init_stats(stats_envs))
        if not member_axis:
            return state
        split = lambda x: x.reshape((num_seeds, spec.num_envs) + x.shape[1:])
        return EnvState(handle=jnp.broadcast_to(state.handle, (num_seeds,) + handle0.shape),
                        obs=split(obs), done=split(state.done),
                        stats=jax.vmap(lambda _: init_stats(spec.num_envs))(
                            jnp.arange(num_seeds)))

    def reset() -> EnvState:
        obs, _ = pool.reset()
        return initial_state(jnp.asarray(np.asarray(obs).astype(spec.obs_dtype, copy=False)))

    def state_shapes() -> EnvState:
        return jax.eval_shape(lambda: initial_state(
            jnp.zeros((total,) + spec.obs_shape, spec.obs_dtype)))

    def step(state: EnvState, action: Array) -> tuple[EnvState, StepResult]:
        handle, obs, reward, terminated, truncated, (raw_reward, game_over) = raw_step(
            state.handle, action)
        valid = ~state.done
        episode_end = (game_over | truncated) & valid
        if data_shard is None:
            stats, ep_ret, ep_len = update_stats(state.stats, raw_reward, valid, episode_end)
        else:  # every shard's envs, in the unsharded run's order
            split = data_shard[2]
            stats, ep_ret, ep_len = update_stats(state.stats,
                                                 *split.gather((raw_reward, valid, episode_end)))
            ep_ret, ep_len = split.local((ep_ret, ep_len))
        new_state = EnvState(handle=handle, obs=obs, done=terminated | truncated, stats=stats)
        return new_state, StepResult(obs, reward, terminated, truncated, valid, episode_end,
                                     ep_ret, ep_len)

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


def _check_pool_memory(task_id: str, num_envs: int, num_seeds: int) -> None:
    """Refuses a pool whose envs alone would not fit in the host memory available."""
    space, _ = task_spaces(task_spec(task_id))
    need = resources.env_pool_bytes(num_envs, space.shape, space.dtype)
    what = f"{num_envs:,} envpool envs"
    resources.check_fits({what: need}, {what: "num_envs" + (
        f" or the number of members ({num_seeds})" if num_seeds > 1 else "")})

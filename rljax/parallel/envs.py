"""Members and data shards composed around any env backend.

A backend (:mod:`rljax.envs`) turns a task id into one run's :class:`~rljax.envs.Env`:
``envs.make(task_id, num_envs, seed, **options)``, ``seed`` a run's seed or every env's own.
It knows nothing of members or shards; this module builds them from that one call:

* **Members** (seeds x sweep values, :func:`members`): an env whose states have a leading
  member axis ``[M]`` and whose ``step`` runs under ``jax.vmap`` over it (the members'
  trainers are vmapped, :mod:`rljax.parallel.members`). Where the env declares
  ``spec.vmappable`` (JAX-native envs) each member's env is the single run's, built with
  its seed: the states are stacked and the one ``step`` is vmapped. Otherwise (envpool,
  whose XLA step cannot be vmapped) the backend builds one env of ``M * num_envs`` envs
  seeded member by member as their single runs are, and its step gets a batching rule that
  flattens the members' actions into one call on it and splits the results back.
* **Data shards** (:func:`shard`): shard ``i`` of ``count`` of one run's envs, built from
  those envs' seeds, whose episode statistics are the whole run's (every shard's rewards
  and episode ends, gathered through a :class:`~rljax.types.Split`), so they are the same
  on every device and equal a one-device run's.

Either way env ``i`` of member ``s`` draws seed ``env_seeds(s, num_envs)[i]``: member ``k``
and shard ``k`` reproduce the single run's envs exactly. The episode statistics of a
composed env are counted here from each step's ``StepResult`` (``score``, ``valid``,
``episode_end``), the same counting the backends do for one run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rljax import envs
from rljax.envs.base import Env, EnvState, StepResult, env_seed, env_seeds
from rljax.envs.stats import init_stats, update_stats
from rljax.types import Split


def check_member_seeds(member_seeds: Sequence[int]) -> list[int]:
    """The members' run seeds as ints; ValueError unless each is in ``[0, 2**31)``."""
    seeds = [int(s) for s in member_seeds]
    if not seeds or any(not 0 <= s < 2**31 for s in seeds):
        raise ValueError(f"member_seeds must hold num_seeds={len(seeds)} seeds in [0, 2**31), "
                         f"got {list(member_seeds)!r}")
    return seeds


def members(task_id: str, num_envs: int, member_seeds: Sequence[int], **options: Any) -> Env:
    """The envs of ``len(member_seeds)`` members (which may repeat a seed: a sweep runs each
    value on the same seeds), ``num_envs`` each, with a leading member axis on the states;
    ``step`` must be called under ``jax.vmap`` over that axis. ``spec.num_envs`` is one
    member's, ``spec.num_seeds`` the number of members.
    """
    seeds = check_member_seeds(member_seeds)
    if envs.vmappable(task_id):
        member_envs = [envs.make(task_id, num_envs, s, **options) for s in seeds]
        return _vmapped_members(member_envs)
    pool = envs.make(task_id, num_envs * len(seeds), _MemberEnvSeeds(seeds, num_envs),
                     **options)
    return _pooled_members(pool, len(seeds))


class _MemberEnvSeeds(Sequence):
    """Every env's seed of the members, member-major (member ``k``'s are its single run's),
    computed as read: a pool refused for its size never lists them."""

    def __init__(self, seeds: list[int], num_envs: int):
        self.seeds, self.num_envs = seeds, num_envs

    def __len__(self) -> int:
        return len(self.seeds) * self.num_envs

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not 0 <= i < len(self):
            raise IndexError(i)
        member, env = divmod(i, self.num_envs)
        return env_seed(self.seeds[member], env)


def _stack(trees: list) -> Any:
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def _vmapped_members(member_envs: list[Env]) -> Env:
    first, count = member_envs[0], len(member_envs)

    def reset() -> EnvState:
        return _stack([e.reset() for e in member_envs])

    def state_shapes() -> EnvState:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct((count,) + x.shape, x.dtype),
                            first.state_shapes())

    # A vmappable env's step is the same function whatever its seeds: the first member's
    # steps every member's state under the members' vmap.
    return first._replace(spec=dataclasses.replace(first.spec, num_seeds=count), reset=reset,
                          state_shapes=None if first.state_shapes is None else state_shapes)


def _pooled_members(pool: Env, count: int) -> Env:
    """``pool`` (``count * n`` envs, member-major) as ``count`` members of ``n`` envs."""
    n = pool.spec.num_envs // count

    def split(x):
        return x.reshape((count, n) + x.shape[1:])

    def whole_step(handle, obs, done, action):
        """One step of every member's envs: the pool's own step (its statistics, of all
        members' envs together, are left unused)."""
        state = EnvState(handle=handle, obs=obs, done=done,
                         stats=init_stats(pool.spec.num_envs))
        new, out = pool.step(state, action)
        return new.handle, new.obs, new.done, out

    message = (f"this env holds {count} members' envs: call its step under jax.vmap over "
               "the member axis (see rljax.parallel.members)")

    def _refuse(*_):
        raise ValueError(message)

    @jax.custom_batching.custom_vmap
    def member_step(handle, obs, done, action):
        # Traced for its output shapes even under vmap; executed only without vmap.
        tile = lambda x: jnp.concatenate([x] * count)  # noqa: E731
        whole = jax.eval_shape(whole_step, handle, tile(obs), tile(done), tile(action))
        one = jax.tree.map(lambda x: jax.ShapeDtypeStruct((n,) + x.shape[1:], x.dtype),
                           whole[1:])
        return (handle, *jax.pure_callback(_refuse, one, handle, action))

    @member_step.def_vmap
    def _rule(axis_size, in_batched, handle, obs, done, action):
        if axis_size != count:
            raise ValueError(f"vmapped over {axis_size} members, but the env holds {count} "
                             "members' envs")
        handle = handle[0] if in_batched[0] else handle
        obs, done, action = (x if b else jnp.broadcast_to(x, (count,) + x.shape)
                             for x, b in zip((obs, done, action), in_batched[1:], strict=True))
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        handle, *outs = whole_step(handle, flat(obs), flat(done), flat(action))
        outs = jax.tree.map(split, outs)
        out = (jnp.broadcast_to(handle, (count,) + handle.shape), *outs)
        return out, jax.tree.map(lambda _: True, out)

    def initial(state: EnvState) -> EnvState:
        return EnvState(handle=jnp.broadcast_to(state.handle, (count,) + state.handle.shape),
                        obs=split(state.obs), done=split(state.done),
                        stats=jax.vmap(lambda _: init_stats(n))(jnp.arange(count)))

    def reset() -> EnvState:
        return initial(pool.reset())

    def state_shapes() -> EnvState:
        return jax.eval_shape(initial, pool.state_shapes())

    def step(state: EnvState, action) -> tuple[EnvState, StepResult]:
        handle, obs, done, out = member_step(state.handle, state.obs, state.done, action)
        return _count_episodes(EnvState(handle=handle, obs=obs, done=done, stats=state.stats,
                                        extras=state.extras), out, state.stats)

    spec = dataclasses.replace(pool.spec, num_envs=n, num_seeds=count)
    return pool._replace(spec=spec, reset=reset, step=step,
                         state_shapes=None if pool.state_shapes is None else state_shapes)


def _count_episodes(new: EnvState, out: StepResult, stats, split: Split | None = None
                    ) -> tuple[EnvState, StepResult]:
    """``new`` and ``out`` with the episode statistics counted on ``stats`` from the step's
    scores, valid steps and episode ends (gathered from every shard with ``split``)."""
    counted = (out.score, out.valid, out.episode_end)
    if split is None:
        stats, ep_ret, ep_len = update_stats(stats, *counted)
    else:  # every shard's envs, in the unsharded run's order
        stats, ep_ret, ep_len = update_stats(stats, *split.gather(counted))
        ep_ret, ep_len = split.local((ep_ret, ep_len))
    return new.replace(stats=stats), out._replace(episode_return=ep_ret, episode_length=ep_len)


def shard(task_id: str, num_envs: int, seed: int, index: int, count: int, split: Split,
          **options: Any) -> Env:
    """Shard ``index`` of ``count`` equal shards of one run's ``num_envs * count`` envs
    (envs ``index * num_envs ...``, seeded as in the unsharded run), for data-parallel
    learning (:mod:`rljax.parallel.data_parallel`). Its ``step`` counts every shard's
    rewards and episode ends (gathered with ``split``, inside ``shard_map``), so its
    episode statistics are those of the whole run, the same on every device."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in [0, {count})")
    total = num_envs * count
    env = envs.make(task_id, num_envs, env_seeds(seed, total)[index * num_envs:
                                                              (index + 1) * num_envs],
                    **options)
    def reset() -> EnvState:
        return env.reset().replace(stats=init_stats(total))

    def state_shapes() -> EnvState:
        return env.state_shapes().replace(stats=jax.eval_shape(lambda: init_stats(total)))

    def step(state: EnvState, action) -> tuple[EnvState, StepResult]:
        # The backend's count of this shard alone is left unused.
        new, out = env.step(state.replace(stats=init_stats(num_envs)), action)
        return _count_episodes(new, out, state.stats, split)

    return env._replace(reset=reset, step=step,
                        state_shapes=None if env.state_shapes is None else state_shapes)

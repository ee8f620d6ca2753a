"""One agent learning data-parallel over devices, in one SPMD program.

This module is where data-parallel learning lives, for every agent and loop alike; it is
the only code (with :mod:`rljax.parallel.devices`) that names a mesh axis.

The run's ``num_envs`` envs are split into equal shards along a 1-D device mesh (axis
``"data"``); each device steps its shard (its own env, seeded as those envs are in a
one-device run: :func:`rljax.parallel.envs.shard`) and holds a copy of the agent's
parameters and optimizer state.
Per update:

1. **Acting** (both loops, through :func:`split`): each device gathers every shard's
   observations, runs the policy on the whole batch with the run's key and keeps its own
   envs' actions, so every env gets the action it gets in a one-device run.
2. **Env step**: each device steps its own pool (``lax.switch`` on its mesh index, as in
   :mod:`rljax.parallel.devices`); the episode statistics gather every shard's rewards and
   episode ends, so they are the whole run's, identical on each device.
3. **Learning**: the agent is built with :func:`average_gradients` chained in front of its
   optimizers, so every device applies the same step, the mean of the devices'
   gradients. On-policy (A2C): each device's gradient is that of its shard's rollout
   (its own masked means and advantage statistics). Off-policy (DQN, DDPG): every device
   stores every shard's transitions, so the replay and its priorities are the same on
   each, and samples the same batch; each device learns from its equal slice of it and
   the slices' TD errors are gathered back for the priority update: the gradient work is
   split, the replay is repeated.
4. **Metrics** of each update are averaged over the devices.
5. **Running statistics** of the rollouts (PPO's observation normalizer and reward
   scaler) take in every shard's rollout through :func:`split`, which the agent is
   given: they are the one-device run's, the same on every device.

Off-policy runs compute what the one-device run computes, up to the order of floating-
point sums (equal slices of a mean loss average to the whole batch's). An on-policy
rollout's masked mean weighs each shard by its count of valid steps, which differs a
little between shards (envpool's reset steps), so there the data-parallel gradient is
the standard mean of the shards' gradients rather than the one-device gradient (they
agree where the shards' counts and statistics agree: tested on the first update).

One exception to "agents name no axis": batch norm's training statistics must be the
whole batch's, and flax's ``BatchNorm`` takes them through a named axis, so agents with
batch-norm layers (DDPG) take :data:`AXIS` from the :class:`~rljax.agents.base.Parallel`
record that :func:`agent_parallel` gives every agent factory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rljax.agents.base import Parallel
from rljax.envs.base import Env, EnvState
from rljax.loops.state import LoopState, Trainer
from rljax.parallel import devices, multihost
from rljax.parallel import envs as parallel_envs
from rljax.types import Split

AXIS = "data"


def check_split(num_envs: int, num_devices: int, batch_size: int | None = None) -> None:
    """Envs (and an off-policy agent's minibatch) must split evenly over the devices."""
    if num_envs % num_devices:
        raise ValueError(f"num_envs={num_envs} cannot be split evenly over {num_devices} "
                         f"devices for data-parallel learning; use a multiple of "
                         f"{num_devices}")
    if batch_size is not None and batch_size % num_devices:
        raise ValueError(f"batch_size={batch_size} cannot be split evenly over {num_devices} "
                         f"devices for data-parallel learning; use a multiple of "
                         f"{num_devices}")


def make_env(task_id: str, num_envs: int, seed: int, mesh: Mesh, **options) -> Env:
    """The run's ``num_envs`` envs in one shard per device of ``mesh``.

    ``reset()`` returns the global state: ``obs`` and ``done`` ``[num_envs, ...]`` and the
    pools' handles split over the mesh, the episode statistics (of all envs) replicated.
    ``step`` must run inside ``shard_map`` over :data:`AXIS` on the local shards.
    """
    count = mesh.devices.size
    check_split(num_envs, count)
    pools, first, step = devices.device_pools(
        mesh, AXIS, lambda i: parallel_envs.shard(task_id, num_envs // count, seed, i, count,
                                                  split(), **options))

    def reset() -> EnvState:
        # The envs' arrays (handle, obs, done) are split; the statistics, of all envs,
        # are the same on every device.
        local = devices.reset_pools(mesh, pools)
        split = devices.join_shards(mesh, AXIS, [(d, s.replace(stats=None)) for d, s in local])
        return split.replace(stats=multihost.replicate(jax.device_get(local[0][1].stats), mesh))

    spec = dataclasses.replace(first.spec, num_envs=num_envs)
    return Env(spec=spec, pool=pools, reset=reset, step=step, host_step=first.host_step)


def _gather(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.lax.all_gather(x, AXIS, tiled=True), tree)


def _local(tree: Any) -> Any:
    def cut(x):
        size = x.shape[0] // jax.lax.axis_size(AXIS)
        return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(AXIS) * size, size)

    return jax.tree.map(cut, tree)


def split() -> Split:
    """The loops' and env pools' view of the whole batch across :data:`AXIS` (inside
    ``shard_map``): ``gather`` lays every shard's leading axis end to end, ``local`` cuts
    this shard's equal part back out."""
    return Split(gather=_gather, local=_local)


def average_gradients() -> optax.GradientTransformation:
    """A stateless optax transformation replacing gradients by their mean over
    :data:`AXIS`; chained first, every device then takes the same optimizer step."""

    def init(params):
        del params
        return optax.EmptyState()

    def update(updates, state, params=None):
        del params
        return jax.lax.pmean(updates, AXIS), state

    return optax.GradientTransformation(init, update)


def agent_parallel() -> Parallel:
    """The record that makes an agent learn data-parallel (every ``make_<algo>`` takes it):
    the gradient average, :func:`split` for agents that keep running statistics of their
    rollouts or memory of every env, and :data:`AXIS` for batch-norm statistics."""
    return Parallel(grad_transform=average_gradients(), split=split(), batch_norm_axis=AXIS)


def _state_specs() -> LoopState:
    """Partition specs (a prefix of the loop state): the envs' arrays split over
    :data:`AXIS`; parameters, optimizer, statistics, keys and counters replicated."""
    whole, split = PartitionSpec(), PartitionSpec(AXIS)
    return LoopState(agent=whole, env=EnvState(handle=split, obs=split, done=split, stats=whole),
                     key=whole, env_steps=whole, solved_at=whole, memory=whole, batches=whole)


def shard_trainer(trainer: Trainer, env: Env, mesh: Mesh) -> Trainer:
    """A one-agent trainer (built on :func:`make_env`, an agent made with
    :func:`agent_parallel` and a loop given :func:`split`) whose chunk runs as one SPMD
    program over
    ``mesh``, jitted with the state donated; ``init`` places the state on the mesh."""
    if trainer.init_state is None or trainer.chunk_fn is None:
        raise ValueError("data-parallel learning needs a trainer with init_state and chunk_fn")
    specs = _state_specs()
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)

    place_init = multihost.init_on(trainer.init_state, shardings, mesh)

    def init(key: jax.Array):
        return place_init(key, env.reset())

    def chunk_fn(state: LoopState):
        state, metrics = trainer.chunk_fn(state)
        return state, jax.lax.pmean(metrics, AXIS)

    local_chunk = jax.shard_map(chunk_fn, mesh=mesh, in_specs=(specs,),
                                out_specs=(specs, PartitionSpec()), check_vma=False)
    return trainer._replace(init=init, chunk=jax.jit(local_chunk, donate_argnums=0))

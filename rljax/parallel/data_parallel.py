"""One agent learning data-parallel over devices, in one SPMD program.

The run's ``num_envs`` envs are split into equal shards along a 1-D device mesh (axis
``"data"``); each device steps its shard (its own envpool pool, seeded as those envs are
in a one-device run) and holds a copy of the agent's parameters and optimizer state.
Per update:

1. **Acting**: each device gathers every shard's observations (``all_gather``), runs the
   policy on the whole batch with the run's key and keeps its own envs' actions. Every
   env therefore gets the action it gets in a one-device run; the policy's forward pass
   is repeated on each device (cheap next to learning for the MLP policies this serves).
2. **Env step**: each device steps its own pool (``lax.switch`` on its mesh index, as
   in :mod:`rljax.parallel.devices`); the episode statistics gather every shard's
   rewards and episode ends, so they are the whole run's, identical on each device.
3. **Learning** (A2C): each device computes the gradient of its shard's terms of the
   whole batch's loss; ``lax.psum`` sums them to the whole batch's gradient (a mean over
   all envs' valid steps, whatever each shard's count), and every device applies the same
   optimizer step, so the copies of the parameters stay identical.
3'. **Learning** (DQN, DDPG; :mod:`rljax.loops.off_policy`): every device stores every
   shard's transitions, so the replay (and its priorities) is the same on each, and
   samples the same batch; each device learns from its equal slice of that batch, the
   gradients (and DDPG's batch-norm statistics) are averaged over the devices, and the
   slices' TD errors are gathered back for the priority update. Replay memory and
   sampling are repeated on each device; the gradient work is split.

The run computes what the one-device run with the same seed computes, up to the order of
floating-point sums (tested on 4 CPU devices; a rounding-level difference can still flip
a greedy action late in an off-policy run, after which the two runs part ways).
"""

from __future__ import annotations

import dataclasses

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rljax import envs
from rljax.agents.base import Agent
from rljax.envs.pool import Env, EnvState
from rljax.loops.state import LoopState, Trainer
from rljax.parallel import devices, multihost

AXIS = "data"
ALGORITHMS = ("a2c", "dqn", "ddpg")


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
    """The run's ``num_envs`` envs in one pool per device of ``mesh``.

    ``reset()`` returns the global state: ``obs`` and ``done`` ``[num_envs, ...]`` and the
    pools' handles split over the mesh, the episode statistics (of all envs) replicated.
    ``step`` must run inside ``shard_map`` over :data:`AXIS` on the local shards.
    """
    count = mesh.devices.size
    check_split(num_envs, count)
    pools, first, step = devices.device_pools(
        mesh, AXIS, lambda i: envs.make(task_id, num_envs // count, seed,
                                        data_shard=(AXIS, i, count), **options))

    def reset() -> EnvState:
        # The envs' arrays (handle, obs, done) are split; the statistics, of all envs,
        # are the same on every device.
        local = devices.reset_pools(mesh, pools)
        split = devices.join_shards(mesh, AXIS, [(d, s.replace(stats=None)) for d, s in local])
        return split.replace(stats=multihost.replicate(jax.device_get(local[0][1].stats), mesh))

    spec = dataclasses.replace(first.spec, num_envs=num_envs)
    return Env(spec=spec, pool=pools, reset=reset, step=step, host_step=first.host_step)


def gathered_act(agent: Agent, axis_name: str = AXIS) -> Agent:
    """On-policy ``agent`` whose ``act`` sees every shard's observations and returns this
    shard's actions (and extras): the actions a one-device run takes. Runs inside
    ``shard_map`` over ``axis_name``."""
    inner = agent.act

    def act(params, obs, key, step):
        local = obs.shape[0]
        out = inner(params, jax.lax.all_gather(obs, axis_name, tiled=True), key, step)
        start = jax.lax.axis_index(axis_name) * local
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, local), out)

    return agent._replace(act=act)


def _state_specs() -> LoopState:
    """Partition specs (a prefix of the loop state): the envs' arrays split over
    :data:`AXIS`; parameters, optimizer, statistics, keys and counters replicated."""
    whole, split = PartitionSpec(), PartitionSpec(AXIS)
    return LoopState(agent=whole, env=EnvState(handle=split, obs=split, done=split, stats=whole),
                     key=whole, env_steps=whole, solved_at=whole, memory=whole, batches=whole)


def shard_trainer(trainer: Trainer, env: Env, mesh: Mesh) -> Trainer:
    """A one-agent trainer (built on :func:`make_env` and an agent and loop learning
    over :data:`AXIS`) whose chunk runs as one SPMD program over
    ``mesh``, jitted with the state donated; ``init`` places the state on the mesh."""
    if trainer.init_state is None or trainer.chunk_fn is None:
        raise ValueError("data-parallel learning needs a trainer with init_state and chunk_fn")
    specs = _state_specs()
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)

    place_init = multihost.init_on(trainer.init_state, shardings, mesh)

    def init(key: jax.Array):
        return place_init(key, env.reset())

    local_chunk = jax.shard_map(trainer.chunk_fn, mesh=mesh, in_specs=(specs,),
                                out_specs=(specs, PartitionSpec()), check_vma=False)
    return trainer._replace(init=init, chunk=jax.jit(local_chunk, donate_argnums=0))

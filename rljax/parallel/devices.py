"""Members (seeds, sweep values) sharded over devices, in one SPMD program.

A many-member run keeps a leading member axis ``[M]`` on every leaf of its state
(:mod:`rljax.parallel.members`). Here that axis is split over a 1-D device mesh
(``jax.sharding.Mesh`` with axis ``"members"``): with ``D`` devices each holds
``M / D`` members, their parameters, replay and envs, and runs the vmapped
chunk on them (``jax.shard_map``). Nothing crosses devices while training.

Each device gets its own members' envs (:func:`rljax.parallel.envs.members`, seeded as
in single runs). envpool's XLA step names its pool by a compile-time attribute, so one
program cannot point different devices at different pools through an operand: the env
step is a ``lax.switch`` on the device's index along the mesh axis whose branch ``d``
steps device ``d``'s envs. Every device compiles the same program and runs only its own
branch (for JAX-native envs the branches are the same function).

Across hosts the same program runs under ``jax.distributed.initialize()`` (JAX's
own runtime): each process builds pools for its addressable devices only, the
mesh spans ``jax.devices()``, and a process's branches for other processes'
devices are never taken. Members must divide evenly over the devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rljax.envs.base import Env, EnvState
from rljax.parallel import envs as parallel_envs
from rljax.parallel import multihost
from rljax.parallel.members import seed_keys

AXIS = "members"


def device_mesh(devices: Sequence[jax.Device] | None = None, axis: str = AXIS) -> Mesh:
    """A 1-D mesh named ``axis`` over ``devices`` (default: all devices of all processes)."""
    devices = list(jax.devices() if devices is None else devices)
    return Mesh(np.array(devices), (axis,))


def check_divisible(num_members: int, num_devices: int) -> None:
    if num_members % num_devices:
        raise ValueError(f"{num_members} members cannot be split evenly over {num_devices} "
                         f"devices; use a multiple of {num_devices} seeds x sweep values")


def device_pools(mesh: Mesh, axis: str, make_pool: Callable[[int], Env]):
    """One pool per device of ``mesh``, ``make_pool(i)`` for the ``i``-th device, built
    for this process's devices only (None for the others'), and an env ``step`` that
    runs device ``i``'s pool; the step must run inside ``shard_map`` over ``axis``.

    Returns:
        ``(pools, first local pool, step)``.
    """
    local = {d.id for d in jax.local_devices()}
    pools = [make_pool(i) if d.id in local else None for i, d in enumerate(mesh.devices.flat)]
    first = next(p for p in pools if p is not None)
    # A process holds pools for its own devices only; other devices' branches are
    # never taken there, so they may call any local pool.
    branches = [(p or first).step for p in pools]

    def step(state: EnvState, action: jax.Array):
        return jax.lax.switch(jax.lax.axis_index(axis), branches, state, action)

    return pools, first, step


def reset_pools(mesh: Mesh, pools: list) -> list[tuple[jax.Device, Any]]:
    """Resets this process's pools (from :func:`device_pools`): ``(device, state)``
    for each of its devices."""
    devices = list(mesh.devices.flat)
    return [(devices[i], p.reset()) for i, p in enumerate(pools) if p is not None]


def join_shards(mesh: Mesh, axis: str, local: list[tuple[jax.Device, Any]]) -> Any:
    """One global state from each local device's part (:func:`reset_pools`), the parts
    laid end to end along the leading axis and split over ``axis``."""
    sharding = NamedSharding(mesh, PartitionSpec(axis))

    def assemble(*leaves):
        shape = (leaves[0].shape[0] * mesh.devices.size,) + leaves[0].shape[1:]
        return jax.make_array_from_single_device_arrays(
            shape, sharding, [jax.device_put(x, d) for (d, _), x in zip(local, leaves,
                                                                      strict=True)])

    return jax.tree.map(assemble, *[state for _, state in local])


def make_sharded_env(task_id: str, num_envs: int, member_seeds: Sequence[int], mesh: Mesh,
                     **options) -> Env:
    """An env holding ``len(member_seeds)`` members' envs, one pool per device of
    ``mesh``; its ``step`` must run inside ``shard_map`` over :data:`AXIS`.

    ``reset()`` returns the global state (leading member axis), sharded over the mesh.
    """
    num_members, num_devices = len(member_seeds), mesh.devices.size
    check_divisible(num_members, num_devices)
    per = num_members // num_devices

    def make_pool(i: int) -> Env:
        return parallel_envs.members(task_id, num_envs, member_seeds[i * per:(i + 1) * per],
                                     **options)

    pools, first, step = device_pools(mesh, AXIS, make_pool)

    def reset() -> EnvState:
        return join_shards(mesh, AXIS, reset_pools(mesh, pools))

    spec = dataclasses.replace(first.spec, num_seeds=num_members)
    return Env(spec=spec, pool=[p.pool if p is not None else None for p in pools],
               reset=reset, step=step, host_step=first.host_step)


def shard_trainer(trainer, env: Env, member_seeds: Sequence[int], mesh: Mesh):
    """A many-member trainer (built on ``env`` from :func:`make_sharded_env`, members
    with ``member_seeds``) whose chunk runs each device's members there: ``shard_map``
    over the member axis, jitted with the state donated; ``init`` builds the state in
    place on the mesh."""
    spec = PartitionSpec(AXIS)
    sharding = NamedSharding(mesh, spec)
    local_chunk = jax.shard_map(trainer.chunk_fn, mesh=mesh, in_specs=(spec, spec),
                                out_specs=spec, check_vma=False)
    # A constant of the program, split by shard_map: a program may not close over an
    # array that spans several processes' devices.
    values = np.asarray(trainer.member_values)
    keys = seed_keys(member_seeds)
    place_init = multihost.init_on(trainer.init_state, sharding, mesh)

    def init(key=None):
        del key  # each member's key comes from its own seed, as in a single run
        return place_init(keys, env.reset())

    def chunk(state):
        return local_chunk(state, values)

    return trainer._replace(init=init, chunk=jax.jit(chunk, donate_argnums=0))


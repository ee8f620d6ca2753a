"""Assembling a run: ``RunConfig -> (env, agent, trainer, num_chunks)``.

One member (a seed, a sweep value) is one agent and one trainer; several members
become one vectorized trainer over their envs (composed around the backend's env by
:mod:`rljax.parallel.envs`), optionally sharded over devices, and a single agent on
several devices learns data-parallel. :func:`make_env` is where the run layer builds
every env: training's, evaluation's and ``rljax bench``'s.

Assembling allocates nothing large and compiles nothing: the checks of
:mod:`rljax.run.preflight` (replay structure, int32 counters, a swept field that sets a
shape, memory) run on the way, so a run that cannot work is refused here, before the
driver opens its run directory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh

from rljax import envs
from rljax.agents.base import ONE_DEVICE, Parallel, RunLength
from rljax.loops.state import Trainer
from rljax.parallel import data_parallel, devices, sweep
from rljax.parallel import envs as parallel_envs
from rljax.parallel.members import vectorize_members, vectorize_seeds
from rljax.run import preflight
from rljax.run.config import RunConfig
from rljax.run.registry import get_algorithm


def build(run: RunConfig) -> tuple[envs.Env, Any, Trainer, int]:
    """Builds env, agent and trainer for ``run``; returns them and the chunk count.

    With several members (seeds, sweep values) the trainer runs them all in one
    program; ``agent`` is the base config's agent.

    Raises:
        rljax.parallel.sweep.SweepError: the swept hyperparameter changes shapes.
        ValueError: a run that cannot work (see :mod:`rljax.run.preflight`): a replay
            smaller than a batch, counters that would overflow, more memory than there is.
    """
    algo = get_algorithm(run.algo)
    preflight.check_replay(run)
    members = run.members
    mesh = None
    if run.devices > 1:
        available = jax.devices()
        if run.devices > len(available):
            raise ValueError(f"devices={run.devices} but JAX sees {len(available)} "
                             f"({available[0].platform}); on CPU, set XLA_FLAGS="
                             f"--xla_force_host_platform_device_count={run.devices}")
        if len(members) == 1:
            return _build_data_parallel(run, algo, available[:run.devices])
        mesh = devices.device_mesh(available[:run.devices])
    elif run.cpu_devices > 1 and jax.default_backend() == "cpu":
        # Members over host devices, one per core (cpu_threads.set_cpu_devices made them;
        # where JAX started with fewer, it warned and the members stay on one device).
        cpus = jax.devices("cpu")
        if len(cpus) >= run.cpu_devices:
            mesh = devices.device_mesh(cpus[:run.cpu_devices])
    several = len(members) > 1 or mesh is not None
    env = make_env(run.env_id, run.config.loop.num_envs, run.seed, run.env_options,
                   members=[s for s, _ in members] if several else None, mesh=mesh)
    preflight.check_values(run, env.spec, run_length(run))
    single = len(members) == 1 and mesh is None
    agent = _make_agent(algo, run, run.config, env.spec, jit_init=single)

    def make_trainer(config):
        member_agent = agent if config is run.config else _make_agent(algo, run, config,
                                                                      env.spec, jit_init=single)
        return algo.make_trainer(member_agent, env, config, _updates_per_chunk(run),
                                 run.threshold)

    trainer = make_trainer(run.config)
    num_chunks = _num_chunks(run, trainer)
    preflight.check_counters(run, trainer.steps_per_update, trainer.updates_per_chunk,
                             num_chunks)
    if run.sweep is not None:
        field, values = run.sweep
        builder = sweep.sweep_builder(make_trainer, run.config, field)
        trainer = vectorize_members(builder, env, [s for s, _ in members],
                                    sweep.sweep_values(run.config, field, values,
                                                       run.num_seeds))
    elif len(members) > 1 or mesh is not None:
        trainer = vectorize_seeds(trainer, env, run.seed)
    if mesh is not None:
        trainer = devices.shard_trainer(trainer, env, [s for s, _ in members], mesh)
    if not _check_state(run, env, trainer, algo.loop) and run.sweep is not None:
        trainer = sweep.checked_init(trainer, run.sweep[0])  # traced at init instead
    preflight.warn_if_never_learning(run)
    return env, agent, trainer, num_chunks


def make_env(task_id: str, num_envs: int, seed: int, options: Any = (), *,
             members: Sequence[int] | None = None, mesh: Mesh | None = None) -> envs.Env:
    """Builds envs for the run layer, the one place it does: a run's training envs (from
    :func:`build`), the evaluation envs (the driver, ``rljax.evaluate``) and ``rljax
    bench``'s env-only ceiling.

    Args:
        task_id, num_envs, seed: the task, its envs per run and the run's seed.
        options: env options (a dict or ``(name, value)`` pairs).
        members: each member's run seed (seeds x sweep values): their envs with a leading
            member axis (:func:`rljax.parallel.envs.members`), split over ``mesh``'s
            devices when a mesh is given (:mod:`rljax.parallel.devices`).
        mesh: without ``members``, a data-parallel mesh: one run's envs split into one
            shard per device (:mod:`rljax.parallel.data_parallel`).

    Returns:
        An :class:`rljax.envs.Env`.
    """
    options = dict(options)
    if members is not None:
        if mesh is not None:
            return devices.make_sharded_env(task_id, num_envs, members, mesh, **options)
        return parallel_envs.members(task_id, num_envs, members, **options)
    if mesh is not None:
        return data_parallel.make_env(task_id, num_envs, seed, mesh, **options)
    return envs.make(task_id, num_envs, seed, **options)


def _make_agent(algo, run: RunConfig, config, spec, jit_init: bool = True,
                parallel: Parallel = ONE_DEVICE):
    """The algorithm's agent for ``run`` (its length, :func:`run_length`), with ``init``
    jitted for a single run: one compiled program (cached by the compilation cache) instead
    of hundreds of eager operations, with the same result. Members keep the plain ``init``
    under their vmap: a jitted init nested in the vmapped member init, run op by op, could
    hang in XLA:CPU's runtime, and jitting the whole member init hung sharded programs."""
    agent = algo.make_agent(config, spec, parallel=parallel, run=run_length(run))
    return agent._replace(init=jax.jit(agent.init)) if jit_init else agent


def _check_state(run: RunConfig, env: envs.Env, trainer: Trainer, loop: str) -> bool:
    """Traces the initial state (and, for a sweep, one chunk) from abstract inputs and
    checks the run's memory; returns whether the state could be traced here (not for
    envs sharded over devices)."""
    if run.sweep is not None and env.state_shapes is not None:
        with sweep.refusing(run.sweep[0]):
            state = preflight.abstract_state(trainer, env, run)
            jax.eval_shape(trainer.chunk, state)
    else:
        state = preflight.abstract_state(trainer, env, run)
    preflight.check_memory(run, env.spec, state, loop)
    return state is not None


def run_length(run: RunConfig) -> RunLength:
    """What an agent knows of ``run``'s length: its loop updates and those its schedules
    run over (``schedule_steps``, or the whole run)."""
    per_update = run.config.loop.steps_per_update
    schedule = run.total_steps if run.schedule_steps is None else run.schedule_steps
    return RunLength(updates=_total_updates(run),
                     schedule_updates=max(1, math.ceil(schedule / per_update)))


def _total_updates(run: RunConfig) -> int:
    return max(1, math.ceil(run.total_steps / run.config.loop.steps_per_update))


def _updates_per_chunk(run: RunConfig) -> int:
    """Updates per chunk asked of the trainer: ``chunk_steps`` worth, evened out over the
    run's chunks."""
    total = _total_updates(run)
    chunks = max(1, math.ceil(total / max(1, run.chunk_steps // run.config.loop.steps_per_update)))
    return math.ceil(total / chunks)


def _num_chunks(run: RunConfig, trainer: Trainer) -> int:
    # A trainer may compile fewer updates per chunk than asked (e.g. conv learners on
    # XLA:CPU, which are slow inside rolled loops); the chunk count follows.
    return max(1, math.ceil(_total_updates(run) / trainer.updates_per_chunk))


def _build_data_parallel(run: RunConfig, algo, device_list) -> tuple[envs.Env, Any, Trainer, int]:
    """One agent learning data-parallel over ``devices`` (rljax.parallel.data_parallel)."""
    mesh = devices.device_mesh(device_list, data_parallel.AXIS)
    env = make_env(run.env_id, run.config.loop.num_envs, run.seed, run.env_options, mesh=mesh)
    preflight.check_values(run, env.spec, run_length(run))
    agent = _make_agent(algo, run, run.config, env.spec, jit_init=False,
                        parallel=data_parallel.agent_parallel())
    trainer = algo.make_trainer(agent, env, run.config, _updates_per_chunk(run), run.threshold,
                                split=data_parallel.split())
    num_chunks = _num_chunks(run, trainer)
    preflight.check_counters(run, trainer.steps_per_update, trainer.updates_per_chunk,
                             num_chunks)
    preflight.check_memory(run, env.spec, None, algo.loop)
    preflight.warn_if_never_learning(run)
    return env, agent, data_parallel.shard_trainer(trainer, env, mesh), num_chunks

"""The off-policy loop: act -> env step -> store -> learn, compiled per chunk.

One *update* (loop iteration) takes ``env_steps_per_update`` steps of every env
(acting with exploration, storing each step in replay) and then, once the replay
holds ``min_size`` transitions, ``grad_steps`` gradient steps, each sampling a
batch, calling ``agent.update`` and writing the new priorities back. A chunk
scans ``updates_per_chunk`` updates.

``unroll=True`` unrolls the gradient steps and the updates of a chunk (the DQN option
``unroll``; XLA:CPU can run conv-net gradients faster unrolled than in a rolled loop).

For one agent learning data-parallel (:mod:`rljax.parallel.data_parallel`) the loop runs
on each device's shard of the envs and ``split`` gives it the whole batch where needed:
acting, storing and sampling see every shard, so the replay, its priorities and each
sampled batch are the same on every device; each device then learns from its equal slice
of the batch and the slices' TD errors are gathered back for the priorities.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from rljax import lockstep
from rljax.agents.base import Agent
from rljax.envs import Env
from rljax.loops.memory import Memory
from rljax.loops.state import LoopState, Trainer, check_solved, initial_counters
from rljax.types import WHOLE, Split, Transition


def _example_transition(env: Env) -> Transition:
    spec = env.spec
    obs = jnp.zeros(spec.obs_shape, spec.obs_dtype)
    action = jnp.zeros((), jnp.int32) if spec.discrete else jnp.zeros(spec.action_shape,
                                                                       jnp.float32)
    return Transition(obs, action, jnp.zeros((), jnp.float32), jnp.zeros((), bool),
                      jnp.zeros((), bool), obs)


def make_off_policy_trainer(agent: Agent, env: Env, memory: Memory, *,
                            env_steps_per_update: int, grad_steps: int,
                            updates_per_chunk: int,
                            beta_fn: Callable[[jax.Array], jax.Array] | None = None,
                            initial_priorities: bool = False, unroll: bool = False,
                            flush_every: int | None = None,
                            threshold: float | None = None,
                            split: Split = WHOLE) -> Trainer:
    """Builds the compiled off-policy training loop.

    Args:
        agent: an agent whose ``update`` takes a replay :class:`~rljax.types.Sample` and
            returns TD errors.
        env: the batched environment.
        memory: replay memory (see :mod:`rljax.loops.memory`).
        env_steps_per_update: steps of every env per update.
        grad_steps: gradient steps per update once learning has started.
        updates_per_chunk: updates per compiled chunk.
        beta_fn: importance-sampling exponent as a function of the update count
            (None: 1.0).
        initial_priorities: give new transitions their TD error as priority
            (needs ``agent.td_error``) instead of the maximum priority.
        unroll: unroll gradient steps and updates (conv nets on XLA:CPU).
        flush_every: empty the replay memory after every this many sampled
            batches (None: never), for agents that learn only from recent data.
        threshold: solve threshold for ``solved_at`` (None: never solved).
        split: one agent learning data-parallel (see the module docstring); ``env`` then
            steps this device's shard of the envs.
    """
    if initial_priorities and agent.td_error is None:
        raise ValueError("initial_priorities needs an agent with a td_error function")
    if flush_every is not None and (not isinstance(flush_every, int) or flush_every < 1):
        raise ValueError(f"flush_every must be an integer >= 1 or None, got {flush_every!r}")
    num_envs = env.spec.num_envs

    gather, local = split
    beta_fn = beta_fn or (lambda step: jnp.ones((), jnp.float32))
    example = _example_transition(env)

    def init_state(key: jax.Array, env_state) -> LoopState:
        agent_key, key = jax.random.split(key)
        env_steps, solved_at = initial_counters()
        return LoopState(agent=agent.init(agent_key), env=env_state, key=key,
                         env_steps=env_steps, solved_at=solved_at,
                         memory=memory.init(example), batches=jnp.zeros((), jnp.int32))

    def init(key: jax.Array) -> LoopState:
        return init_state(key, env.reset())

    def env_step(carry, key):
        agent_state, env_state, mem_state, update_step = carry
        obs, done = gather((env_state.obs, env_state.done))
        action, _, agent_state = agent.act(agent_state, obs, key, update_step, done)
        env_state, out = env.step(env_state, local(action))
        reward, terminated, truncated, next_obs, valid = gather(
            (out.reward, out.terminated, out.truncated, out.obs, out.valid))
        step = Transition(obs, action, reward, terminated, truncated, next_obs)
        td_fn = (lambda tr: agent.td_error(agent_state, tr)) if initial_priorities else None
        mem_state = memory.add(mem_state, step, valid, td_fn)
        return (agent_state, env_state, mem_state, update_step), None

    def grad_step(carry, key):
        # Each step first writes the previous step's priorities, then samples: the same
        # order of operations as sample -> update -> write, but with the write at the top
        # of the loop body XLA:CPU updates the priority tree in place; written after the
        # update it copies the whole tree twice per step (4 MB each at capacity 1M).
        agent_state, mem_state, beta, indices, td_error = carry
        mem_state = memory.update_priorities(mem_state, indices, td_error)
        sample_key, update_key = jax.random.split(key)
        batch = memory.sample(mem_state, sample_key, beta)
        agent_state, metrics, td_error = agent.update(agent_state, local(batch), update_key)
        return (agent_state, mem_state, beta, batch.indices, gather(td_error)), metrics

    def learn(agent_state, mem_state, beta, key):
        def first_sample(agent_state, mem_state):
            batch = memory.sample(mem_state, key, beta)
            return batch.indices, gather(agent.update(agent_state, local(batch), key)[2])

        shapes = jax.eval_shape(first_sample, agent_state, mem_state)
        # Slot -1 is no written slot: update_priorities ignores it.
        no_write = (jnp.full(shapes[0].shape, -1, jnp.int32),
                    jnp.zeros(shapes[1].shape, shapes[1].dtype))
        (agent_state, mem_state, _, indices, td_error), metrics = jax.lax.scan(
            grad_step, (agent_state, mem_state, beta, *no_write),
            jax.random.split(key, grad_steps), unroll=grad_steps if unroll else 1)
        mem_state = memory.update_priorities(mem_state, indices, td_error)
        return agent_state, mem_state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)

    def metrics_template(agent_state, mem_state, beta, key):
        shapes = jax.eval_shape(learn, agent_state, mem_state, beta, key)[2]
        return jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

    def one_update(state: LoopState, update_step):
        key, act_key, learn_key = jax.random.split(state.key, 3)
        (agent_state, env_state, mem_state, _), _ = jax.lax.scan(
            env_step, (state.agent, state.env, state.memory, update_step),
            jax.random.split(act_key, env_steps_per_update),
            unroll=env_steps_per_update if unroll else 1)
        beta = jnp.asarray(beta_fn(update_step), jnp.float32)

        def skip(agent_state, mem_state, beta, key):
            return agent_state, mem_state, metrics_template(agent_state, mem_state, beta, key)

        learning = memory.can_sample(mem_state)
        agent_state, mem_state, metrics = lockstep.cond(
            learning, learn, skip, agent_state, mem_state, beta, learn_key)
        sampled = state.batches + learning.astype(jnp.int32) * grad_steps
        if flush_every is not None:
            # Flush when this update's batches cross a multiple of flush_every.
            flush = sampled // flush_every > state.batches // flush_every
            mem_state = lockstep.cond(flush, lambda m: memory.init(example), lambda m: m,
                                      mem_state)
        state = state.replace(batches=sampled)
        metrics = dict(metrics, replay_size=memory.size(mem_state).astype(jnp.float32),
                       beta=beta)
        state = state.replace(agent=agent_state, env=env_state, memory=mem_state, key=key,
                              env_steps=state.env_steps + env_steps_per_update * num_envs)
        return state.replace(solved_at=check_solved(state, threshold)), metrics

    def chunk(state: LoopState):
        first = state.env_steps // (env_steps_per_update * num_envs)
        return jax.lax.scan(one_update, state, first + jnp.arange(updates_per_chunk),
                            unroll=updates_per_chunk if unroll else 1)

    return Trainer(init=init, chunk=jax.jit(chunk, donate_argnums=0),
                   updates_per_chunk=updates_per_chunk,
                   steps_per_update=env_steps_per_update * num_envs, init_state=init_state,
                   chunk_fn=chunk)

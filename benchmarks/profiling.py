"""Pieces of a training loop timed on their own, and the arithmetic to read them by.

* :func:`gemm_rate`: this CPU's float32 matmul rate (GFLOP/s) for a square shape, in a
  jitted chain of dependent matmuls: the ceiling a learner's GEMMs can reach.
* :func:`td3_step_flops`, :func:`sac_step_flops`: matmul FLOPs of one gradient step of
  the twin-critic agents, counted analytically (formulas in the docstrings).
* :func:`rollout_only_trainer`, :func:`collect_rollout`, :func:`update_only`: an
  on-policy loop without its update (act + env step + record), and the update alone on
  a collected rollout, to split a training update's time between acting and learning.
* :func:`replay_batches`, :func:`learner_steps`: replay samples drawn from a trained
  off-policy loop's memory, and ``agent.update`` on them alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent, Update
from rljax.loops.memory import make_memory
from rljax.types import Rollout

# --- the matmul ceiling -------------------------------------------------------------------


def gemm_rate(n: int, seconds: float = 0.5,
              per_cpu_second: list | None = None) -> Callable[[], float]:
    """A callable that runs a jitted chain of ``[n, n] @ [n, n]`` float32 matmuls for about
    ``seconds`` and returns GFLOP/s (``2 n^3`` FLOPs per matmul); ``per_cpu_second``, when
    given, receives each call's GFLOP per second of process CPU time (all threads), a
    figure other processes' load moves less than wall time.

    Each matmul takes the previous product as input, so none can be skipped or run ahead;
    the right-hand side is orthogonal, so the values neither grow nor shrink into denormals
    however long the chain.
    """
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    b = jnp.asarray(q, jnp.float32)
    x0 = jnp.asarray(rng.standard_normal((n, n)), jnp.float32)

    @jax.jit
    def chain(x, reps):
        return jax.lax.fori_loop(0, reps, lambda _, y: y @ b, x)

    flops = 2.0 * n ** 3
    jax.block_until_ready(chain(x0, 2))  # compile
    start = time.perf_counter()
    jax.block_until_ready(chain(x0, 4))
    per = max((time.perf_counter() - start) / 4, 1e-7)
    reps = max(4, int(seconds / per))

    def run() -> float:
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(chain(x0, reps))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        if per_cpu_second is not None:
            per_cpu_second.append(reps * flops / max(cpu, 1e-9) / 1e9)
        return reps * flops / wall / 1e9

    return run


# --- FLOPs of the twin-critic agents ------------------------------------------------------


def mlp_forward_flops(batch: int, sizes: Sequence[int]) -> float:
    """Matmul FLOPs of an MLP's forward pass: ``sum_i 2 N s_i s_{i+1}`` for layer sizes
    ``sizes = (in, hidden..., out)`` and batch ``N`` (biases and activations, O(N s), are
    left out)."""
    return float(sum(2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:], strict=False)))


def mlp_backward_flops(batch: int, sizes: Sequence[int], *, params: bool,
                       input_grad: bool) -> float:
    """Matmul FLOPs of an MLP's backward pass: each layer's weight gradient (``2 N s_i
    s_{i+1}``, when ``params``) and input gradient (the same count; the first layer's only
    when ``input_grad``)."""
    per_layer = [2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:], strict=False)]
    weights = sum(per_layer) if params else 0
    inputs = sum(per_layer) if input_grad else sum(per_layer[1:])
    return float(weights + inputs)


def td3_step_flops(batch: int, obs_dim: int, action_dim: int, actor_hidden: Sequence[int],
                   critic_hidden: Sequence[int], policy_delay: int) -> dict:
    """Matmul FLOPs of one TD3 gradient step (one critic step, ``1 / policy_delay`` of an
    actor step), counting the work the algorithm needs::

        actor  A = (o, *actor_hidden, a)          critic  C = (o + a, *critic_hidden, 1)
        target   fwd(A) + 2 fwd(C)                          mu'(s'), both target critics
        critics  2 [fwd(C) + bwd(C, params)]                both critics, no input gradient
        actor    [fwd(A) + fwd(C) + bwd(C, input) + bwd(A, params)] / policy_delay
                                                            -Q_1(s, mu(s)), gradient via a

    with ``fwd(X) = sum_i 2 N X_i X_{i+1}`` and a backward pass of ``fwd`` per gradient
    kind (weights, inputs; the first layer's input gradient only where needed).
    """
    actor = (obs_dim, *actor_hidden, action_dim)
    critic = (obs_dim + action_dim, *critic_hidden, 1)
    fa, fc = mlp_forward_flops(batch, actor), mlp_forward_flops(batch, critic)
    parts = {
        "target": fa + 2 * fc,
        "critics": 2 * (fc + mlp_backward_flops(batch, critic, params=True, input_grad=False)),
        "actor": (fa + fc + mlp_backward_flops(batch, critic, params=False, input_grad=True)
                  + mlp_backward_flops(batch, actor, params=True, input_grad=False))
                 / policy_delay,
    }
    return {**parts, "total": sum(parts.values())}


def sac_step_flops(batch: int, obs_dim: int, action_dim: int, actor_hidden: Sequence[int],
                   critic_hidden: Sequence[int]) -> dict:
    """Matmul FLOPs of one SAC gradient step (critic, actor and temperature steps; the
    temperature's is no matmul)::

        actor  A = (o, *actor_hidden, 2 a)        (mean and log-std heads)
        critic C = (o + a, *critic_hidden, 1)
        target   fwd(A) + 2 fwd(C)                          a' ~ pi(s'), both target critics
        critics  2 [fwd(C) + bwd(C, params)]
        actor    fwd(A) + 2 [fwd(C) + bwd(C, input)] + bwd(A, params)
                                                            alpha log pi - min_j Q_j(s, a)
    """
    actor = (obs_dim, *actor_hidden, 2 * action_dim)
    critic = (obs_dim + action_dim, *critic_hidden, 1)
    fa, fc = mlp_forward_flops(batch, actor), mlp_forward_flops(batch, critic)
    parts = {
        "target": fa + 2 * fc,
        "critics": 2 * (fc + mlp_backward_flops(batch, critic, params=True, input_grad=False)),
        "actor": (fa + 2 * (fc + mlp_backward_flops(batch, critic, params=False,
                                                     input_grad=True))
                  + mlp_backward_flops(batch, actor, params=True, input_grad=False)),
    }
    return {**parts, "total": sum(parts.values())}


def on_policy_update_flops(algo: str, config, spec) -> float | None:
    """Matmul FLOPs of one PPO or PQN update on flat observations (None for frames or
    other agents): every epoch passes every sample forward and backward (weight gradients)
    through each network; PQN also evaluates its Q-network on the rollout's ``T + 1``
    observations for the Q(lambda) targets::

        PPO  epochs * T B * sum_{net in actor, critic} [fwd(net) + bwd(net, params)] / N
        PQN  epochs * T B * [fwd(Q) + bwd(Q, params)] / N + (T + 1) B fwd(Q) / N

    (per-sample counts; actor ``(o, *hidden, A)``, critic ``(o, *hidden, 1)``, a shared
    torso counted once with both heads; Q ``(o, *hidden, A)``). None for agents with memory
    (not counted)."""
    if (len(spec.obs_shape) != 1 or algo not in ("ppo", "pqn")
            or getattr(config, "memory", None) is not None):
        return None
    o, hidden = spec.obs_shape[0], tuple(config.hidden_sizes)
    out = spec.num_actions if spec.discrete else spec.action_shape[0]
    samples = config.loop.num_envs * config.loop.rollout_len

    def fwd_bwd(sizes):
        return (mlp_forward_flops(1, sizes)
                + mlp_backward_flops(1, sizes, params=True, input_grad=False))

    if algo == "pqn":
        q = (o, *hidden, out)
        return (config.num_epochs * samples * fwd_bwd(q)
                + (samples + config.loop.num_envs) * mlp_forward_flops(1, q))
    if config.shared_torso:
        per_sample = fwd_bwd((o, *hidden, out + 1))
    else:
        per_sample = fwd_bwd((o, *hidden, out)) + fwd_bwd((o, *hidden, 1))
    return float(config.num_epochs * samples * per_sample)


# --- on-policy loops split into acting and learning -----------------------------------------


def without_update(agent: Agent) -> Agent:
    """``agent`` whose update returns the state unchanged: its loop only acts, steps the
    envs and records the rollout."""
    return agent._replace(update=lambda state, batch, key: Update(state, {}))


def collect_rollout(agent: Agent, env, agent_state, env_state, rollout_len: int,
                    key: jax.Array) -> tuple[Rollout, object]:
    """One rollout of ``rollout_len`` steps as the on-policy loop records it; returns
    ``(rollout, env_state)``."""

    def step(carry, key):
        env_state = carry
        obs = env_state.obs
        action, extras, _ = agent.act(agent_state, obs, key, jnp.zeros((), jnp.int32),
                                      env_state.done)
        env_state, out = env.step(env_state, action)
        return env_state, (obs, action, out.reward, out.terminated, out.truncated, out.valid,
                           extras)

    @jax.jit
    def run(env_state, key):
        env_state, (obs, action, reward, term, trunc, valid, extras) = jax.lax.scan(
            step, env_state, jax.random.split(key, rollout_len))
        obs = jnp.concatenate([obs, env_state.obs[None]], axis=0)
        return Rollout(obs, action, reward, term, trunc, valid, extras), env_state

    return run(env_state, key)


def update_only(agent: Agent, updates: int) -> Callable:
    """``run(state, rollout) -> state``: ``updates`` calls of ``agent.update`` on one
    rollout in a compiled scan (state donated), as the loop makes them."""

    def run(state, rollout):
        def body(state, key):
            return agent.update(state, rollout, key).state, None

        return jax.lax.scan(body, state, jax.random.split(jax.random.key(7), updates))[0]

    return jax.jit(run, donate_argnums=0)


# --- off-policy learners on their own ---------------------------------------------------------


def replay_batches(config, spec, memory_state, key: jax.Array, count: int,
                   beta: float = 0.5):
    """``count`` replay samples from ``memory_state`` (an off-policy loop's memory built
    from ``config`` as :func:`rljax.loops.factory.off_policy` builds it), stacked on a
    leading axis."""
    frame_replay = getattr(config, "frame_replay", False)
    frames = spec.is_atari if frame_replay is None else frame_replay
    memory = make_memory(capacity=config.replay.buffer_size, num_envs=spec.num_envs,
                         batch_size=config.replay.batch_size, n_step=config.replay.n_step,
                         gamma=config.gamma,
                         alpha=config.replay.alpha if config.replay.prioritized else None,
                         eps=config.replay.priority_eps, min_size=config.replay.min_replay,
                         frames=frames)
    sample = jax.jit(lambda keys: jax.lax.map(
        lambda k: memory.sample(memory_state, k, beta), keys))
    return sample(jax.random.split(key, count))


def learner_steps(agent: Agent) -> Callable:
    """``run(state, batches) -> state``: one gradient step of ``agent.update`` per batch of
    ``batches`` (stacked replay samples, :func:`replay_batches`) in a compiled scan (state
    donated): the learner without sampling, priorities or acting. Distinct batches, not one
    repeated: a network fitted to a single batch for hundreds of steps can drive its
    softmaxes into denormal floats, which run far slower on CPUs."""

    def run(state, batches):
        def body(state, batch_and_key):
            batch, key = batch_and_key
            return agent.update(state, batch, key).state, None

        count = jax.tree.leaves(batches)[0].shape[0]
        keys = jax.random.split(jax.random.key(11), count)
        return jax.lax.scan(body, state, (batches, keys))[0]

    return jax.jit(run, donate_argnums=0)

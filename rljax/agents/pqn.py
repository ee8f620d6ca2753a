"""Parallelised Q-network (PQN; Gallici et al. 2024, "Simplifying Deep Temporal
Difference Learning").

Q-learning without replay and without a target network: ``num_envs`` envs are stepped
``rollout_len`` times with an epsilon-greedy policy, the rollout's Peng's Q(lambda)
targets are computed once from the current network,

    G_t = r_t + gamma (1 - terminated_t) ((1 - lambda) max_a Q(s_{t+1}, a) + lambda G_{t+1})

(the trace cut at every episode end and at the rollout's end, truncated episodes
bootstrapping from their real final observation; :func:`rljax.losses.q_lambda_returns`),
and the network regresses ``Q(s_t, a_t)`` on them, ``0.5 (Q(s_t, a_t) - G_t)^2``, for
``num_epochs`` epochs of shuffled minibatches (every sample once per epoch). What keeps
this stable is LayerNorm before every hidden nonlinearity of the Q-network
(:mod:`rljax.networks.layer_norm`), the paper's central point. Envpool's reset steps are
masked out of the loss.

Epsilon is a piecewise-linear schedule in loop updates, as DQN's
(:func:`rljax.exploration.piecewise_linear`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, losses, validate
from rljax.agents.base import (
    ONE_DEVICE,
    Agent,
    Parallel,
    Update,
    annealed_learning_rate,
    check_action_space,
    check_annealing,
    check_memory_fields,
)
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.core import ACTIVATIONS, Network
from rljax.networks.distributions import take_action
from rljax.networks.layer_norm import make_layer_norm_q_network
from rljax.records import OnPolicyLoop, shape_field
from rljax.types import (
    Array,
    Metrics,
    Params,
    PRNGKey,
    Rollout,
    next_obs,
    next_values,
    valid_mask,
)
from rljax.validate import Schedule

OPTIMIZERS = ("radam", "adam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PQNConfig:
    """PQN hyperparameters (defaults: the rljax configuration for CartPole-v1).

    The paper's public configurations (purejaxql), for reference:

    * CartPole-v1: 32 envs x 64 steps, 4 epochs x 16 minibatches, two LayerNorm layers
      of 256 units, RAdam lr 1e-4 annealed linearly to 0, max grad norm 10, gamma 0.99,
      lambda 0.95, rewards scaled by 0.1, epsilon 1 -> 0.2 over the first 20% of the
      updates (500k env steps);
    * Atari (10M env steps = 40M frames): 128 envs x 32 steps, 2 epochs x 32 minibatches,
      the Nature CNN with LayerNorm, RAdam lr 2.5e-4 (constant), max grad norm 10,
      gamma 0.99, lambda 0.65, epsilon 1 -> 0.001 over the first 10% of the updates
      (``((0, 1.0), (244, 0.001))``), rewards clipped and life loss as episode end.

    Learning-rate annealing is linear in loop updates: update ``u`` (from 0) uses
    ``lr * max(0, 1 - u / total_updates)``; ``total_updates`` (the run's env steps
    divided by ``loop.steps_per_update``) must be known with ``anneal_lr``: a run
    (``rljax.run.build``) fills it in when it is None.

    Attributes:
        loop: the on-policy loop (:class:`rljax.records.OnPolicyLoop`).
        gamma: discount.
        q_lambda: lambda of the Q(lambda) targets (0: one-step Q-learning targets).
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * rollout_len``.
        epsilon: epsilon-greedy schedule ``((update, value), ...)``.
        reward_scale: rewards are multiplied by it before the targets.
        optimizer: "radam" (the paper's) or "adam".
        lr: learning rate.
        anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
        total_updates: loop updates of the run (needed by ``anneal_lr``).
        adam_eps: (R)Adam epsilon. The CartPole presets use 1e-3: at the default, once a
            seed has converged its noise gradients still move every parameter by about
            ``lr`` per step, and the greedy policy drifts (docs/results.md).
        max_grad_norm: clip each minibatch gradient to this global norm; None: off.
        hidden_sizes: MLP layer sizes (flat observations; frames get the Nature CNN).
        activation: hidden activation name of the MLP.
        layer_norm: LayerNorm before every hidden nonlinearity (False for ablations).
        conv_method: the Nature CNN's convolutions (frames only), "matmul" or "xla".
        memory: a recurrent core, "gru" or "lstm" (PQN-RNN, :mod:`rljax.agents.recurrent`);
            None: feed-forward. With memory the LayerNorm torso (``hidden_sizes``) feeds
            the core and a linear layer on the core gives the Q-values; minibatches are
            whole env sequences (``num_minibatches`` must divide ``num_envs``).
        memory_size: units of the recurrent core.
        memory_reset_every_step: reset the core's carry before every step (an ablation:
            the network keeps its shape but remembers nothing).
    """

    loop: OnPolicyLoop = OnPolicyLoop(num_envs=32, rollout_len=16)
    gamma: float = 0.99
    q_lambda: float = 0.95
    num_epochs: int = shape_field(4)
    num_minibatches: int = shape_field(4)
    epsilon: Schedule = ((0, 1.0), (50, 0.05), (150, 0.01))
    reward_scale: float = 0.1
    optimizer: str = "radam"
    lr: float = 1e-3
    anneal_lr: bool = False
    total_updates: int | None = shape_field(None)
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 10.0
    hidden_sizes: tuple[int, ...] = shape_field((128, 128), network=True)
    activation: str = "relu"
    layer_norm: bool = True
    conv_method: str = "matmul"
    memory: str | None = None
    memory_size: int = shape_field(128)
    memory_reset_every_step: bool = False

    def __post_init__(self):
        for name in ("num_epochs", "num_minibatches"):
            validate.integer(name, getattr(self, name), low=1)
        validate.integer("total_updates", self.total_updates, low=1,
                         high=validate.INT32_LIMIT - 1, optional=True,
                         note=validate.INT32_NOTE)
        loop = self.loop
        if loop.steps_per_update % self.num_minibatches:
            raise ValueError(
                f"num_minibatches must divide num_envs * rollout_len = {loop.num_envs} * "
                f"{loop.rollout_len} = {loop.steps_per_update}, got {self.num_minibatches!r}")
        for name in ("lr", "adam_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("q_lambda", self.q_lambda, low=0.0, high=1.0)
        validate.number("reward_scale", self.reward_scale, low=0.0, high=1e6, low_open=True)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.sizes("hidden_sizes", self.hidden_sizes)
        validate.choice("activation", self.activation, tuple(ACTIVATIONS))
        validate.choice("optimizer", self.optimizer, OPTIMIZERS)
        validate.choice("conv_method", self.conv_method, CONV_METHODS)
        for name in ("anneal_lr", "layer_norm", "memory_reset_every_step"):
            validate.boolean(name, getattr(self, name))
        check_memory_fields(self)
        check_annealing(self)
        validate.schedule("epsilon", self.epsilon, low=0.0, high=1.0)


def epsilon_schedule(config: PQNConfig) -> optax.Schedule:
    """Epsilon as a function of the loop update count."""
    return exploration.piecewise_linear(config.epsilon)


@struct.dataclass
class PQNState:
    """Train state.

    Attributes:
        params: Q-network variables.
        opt_state: optimizer state.
        step: updates done.
        update_step: loop update the exploring policy last acted in (for the epsilon
            metric).
    """

    params: Params
    opt_state: optax.OptState
    step: Array
    update_step: Array


class Parts(NamedTuple):
    """PQN's network and optimizer, built once by :func:`make_pqn`, and the env's time
    limit (:func:`targets`)."""

    net: Network
    optimizer: optax.GradientTransformation
    time_limit: int = 0


def network(config: PQNConfig, spec: EnvSpec) -> Network:
    """The Q-network of ``config`` for ``spec``."""
    return make_layer_norm_q_network(spec.obs_shape, spec.num_actions, config.hidden_sizes,
                                     activation=config.activation, layer_norm=config.layer_norm,
                                     conv_method=config.conv_method)


def learning_rate(config: PQNConfig) -> optax.Schedule:
    """The learning rate as a function of the optimizer's step count (minibatch steps)."""
    return annealed_learning_rate(config.lr, config.anneal_lr, config.total_updates,
                                  config.num_epochs * config.num_minibatches)


def optimizer(config: PQNConfig, parallel: Parallel = ONE_DEVICE
              ) -> optax.GradientTransformation:
    """The optimizer of ``config`` (also PQN-RNN's), after the parallel transformation."""
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    make = optax.radam if config.optimizer == "radam" else optax.adam
    # One array per parameter, not optax.flatten: the flat vector made each minibatch step
    # of the MinAtar preset 13% slower on XLA:CPU (its elementwise optimizer kernels over
    # one odd-length vector); CartPole-sized networks time the same either way
    # (docs/benchmarks.md, "PQN's optimizer state").
    return parallel.optimizer(
        optax.chain(*clip, make(learning_rate(config), eps=config.adam_eps)))


def init(spec: EnvSpec, parts: Parts, key: PRNGKey) -> PQNState:
    params = parts.net.init(key, jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype))
    return PQNState(params=params, opt_state=parts.optimizer.init(params),
                    step=jnp.zeros((), jnp.int32), update_step=jnp.zeros((), jnp.int32))


def act(config: PQNConfig, net: Network, state: PQNState, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, dict, PQNState]:
    """Epsilon-greedy actions ``[B]`` at ``epsilon(step)``; the extras keep ``q_max
    [B]``, the greedy value of ``obs``, which the update bootstraps from (:func:`targets`)."""
    del new_episode
    q = net.apply(state.params, obs)
    state = state.replace(update_step=jnp.asarray(step, jnp.int32))
    action = exploration.epsilon_greedy(key, q, epsilon_schedule(config)(step))
    return action, {"q_max": jnp.max(q, axis=-1)}, state


def policy(net: Network, params: Params, obs: Array) -> Array:
    """Greedy actions ``[B]``."""
    return jnp.argmax(net.apply(params, obs), axis=-1).astype(jnp.int32)


def targets(config: PQNConfig, net: Network, params: Params, batch: Rollout,
            time_limit: int = 0) -> Array:
    """Q(lambda) targets ``[T, B]`` of a rollout from the network ``params``.

    Rewards are scaled by ``reward_scale``; the targets of reset steps are meaningless
    (masked by ``batch.valid``). With the greedy values recorded when acting
    (``batch.extras["q_max"]``, by the same ``params``), the network runs only on the last
    observation and the truncated steps' final observations (at most ``ceil(T /
    time_limit)`` per env, :func:`rljax.types.next_values`); without them, on every step's
    next observation.
    """
    if "q_max" in batch.extras:
        def greedy(o: Array) -> Array:
            return jnp.max(net.apply(params, o), axis=-1)

        q_t = next_values(batch, batch.extras["q_max"], greedy, time_limit)[..., None]
    else:
        q_t = net.apply(params, next_obs(batch))
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    fn = functools.partial(losses.q_lambda_returns, lambda_=config.q_lambda)
    return jax.vmap(fn, in_axes=1, out_axes=1)(
        batch.reward.astype(jnp.float32) * config.reward_scale, discount, end, q_t)


class Samples(NamedTuple):
    """Per-sample data of an update, ``[T, B, ...]`` (or one minibatch's ``[N, ...]``)."""

    obs: Array
    action: Array
    target: Array
    valid: Array | None


def q_lambda_loss(q: Array, data: Samples) -> tuple[Array, Metrics]:
    """``0.5 (Q(s, a) - G)^2`` averaged over the valid samples, from the Q-values ``q
    [..., A]`` of ``data.obs`` (shared by PQN and PQN-RNN); ``(loss, metrics)``."""
    q_a = take_action(q, data.action, 0.0)
    td = jax.lax.stop_gradient(data.target) - q_a
    loss = losses.masked_mean(0.5 * jnp.square(td), data.valid)
    return loss, {"loss": loss, "q_mean": losses.masked_mean(q_a, data.valid),
                  "td_abs": losses.masked_mean(jnp.abs(td), data.valid)}


def minibatch_loss(net: Network, params: Params, minibatch: Samples) -> tuple[Array, Metrics]:
    """:func:`q_lambda_loss` on a minibatch ``[N]``."""
    return q_lambda_loss(net.apply(params, minibatch.obs), minibatch)


def update(config: PQNConfig, parts: Parts, state: PQNState, batch: Rollout,
           key: PRNGKey) -> Update:
    """``num_epochs`` epochs of minibatch steps towards the rollout's Q(lambda) targets."""
    data = Samples(obs=batch.obs[:-1], action=batch.action,
                   target=targets(config, parts.net, state.params, batch,
                                  parts.time_limit),
                   valid=valid_mask(batch))
    params, opt_state, metrics = minibatch_epochs(
        key, state.params, state.opt_state, data,
        functools.partial(minibatch_loss, parts.net), parts.optimizer, config.num_epochs,
        config.num_minibatches)
    metrics["target_mean"] = losses.masked_mean(data.target, data.valid)
    metrics["epsilon"] = epsilon_schedule(config)(state.update_step)
    return Update(state.replace(params=params, opt_state=opt_state, step=state.step + 1),
                  metrics)


def make_pqn(config: PQNConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE) -> Agent:
    """Builds the PQN agent for a discrete-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`): its
            ``grad_transform`` goes before the optimizer; its ``split`` lets an agent with
            memory see every env's carry. Default: one device.

    Raises:
        ValueError: if the environment's actions are continuous.
    """
    if config.anneal_lr and config.total_updates is None:
        raise ValueError("anneal_lr needs total_updates (the run's env steps divided by "
                         "num_envs * rollout_len; a run fills it in), got total_updates=None")
    check_action_space("PQN", spec, discrete=True)
    if config.memory is not None:
        from rljax.agents.recurrent_pqn import make_recurrent_pqn

        return make_recurrent_pqn(config, spec, parallel=parallel)
    built = Parts(network(config, spec), optimizer(config, parallel), spec.max_episode_steps)
    return Agent(
        init=functools.partial(init, spec, built),
        act=functools.partial(act, config, built.net),
        update=functools.partial(update, config, built),
        policy=functools.partial(policy, built.net),
        params=lambda state: state.params,
    )

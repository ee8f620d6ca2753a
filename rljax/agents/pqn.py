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

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax import exploration, losses
from rljax.agents import run_checks
from rljax.agents.base import (
    ONE_DEVICE,
    Agent,
    Parallel,
    RunLength,
    Update,
    check_action_space,
)
from rljax.agents.pqn_core import (
    OPTIMIZERS,
    PQNConfig,
    PQNState,
    Samples,
    epsilon_schedule,
    optimizer,
    q_lambda_loss,
    upgrade_record,
)
from rljax.agents.recurrent_pqn import make_recurrent_pqn
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks.core import Network
from rljax.networks.layer_norm import make_layer_norm_q_network
from rljax.networks.torso import HeadSpec, make_torso_network
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

__all__ = ["OPTIMIZERS", "PQNConfig", "PQNState", "make_pqn", "upgrade_record"]

class Parts(NamedTuple):
    """PQN's network and optimizer, built once by :func:`make_pqn`, and the env's time
    limit (:func:`targets`)."""

    net: Network
    optimizer: optax.GradientTransformation
    time_limit: int = 0


def network(config: PQNConfig, spec: EnvSpec) -> Network:
    """The Q-network of ``config`` for ``spec``."""
    if config.network is not None:  # the user's torso and a linear Q-value layer
        return make_torso_network(config.network, spec.obs_shape,
                                  (HeadSpec(spec.num_actions, None),))
    return make_layer_norm_q_network(spec.obs_shape, spec.num_actions, config.hidden_sizes,
                                     activation=config.activation, layer_norm=config.layer_norm,
                                     conv_method=config.conv_method)


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


def gradient_steps(config: PQNConfig) -> tuple[int, int, str]:
    """Gradient steps per loop update, samples per step, and the fields that set them."""
    return (config.num_epochs * config.num_minibatches,
            config.loop.steps_per_update // config.num_minibatches,
            "num_epochs x num_minibatches")


def check_run(config: PQNConfig, spec: EnvSpec, run: RunLength) -> None:
    """The settings that depend on the run: a learning rate annealed to 0 before the run
    ends is said in one warning."""
    del spec
    run_checks.annealed_early(config.anneal_lr, run)


def anneals(config) -> bool:
    """Whether the run's ``schedule_steps`` applies: the learning rate anneals over it."""
    return config.anneal_lr


def make_pqn(config: PQNConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the PQN agent for a discrete-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`): its
            ``grad_transform`` goes before the optimizer; its ``split`` lets an agent with
            memory see every env's carry. Default: one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`), which ``anneal_lr``
            needs; None: an agent outside a run.

    Raises:
        ValueError: if the environment's actions are continuous, for ``anneal_lr``
            without ``run``, or a ``network`` whose torso does not map observations
            ``[B, *obs_shape]`` to features ``[B, F]``.
    """
    check_action_space("PQN", spec, discrete=True)
    run_checks.needs_run("PQN", config.anneal_lr, run)
    if config.memory is not None:
        return make_recurrent_pqn(config, spec, parallel=parallel, run=run)
    built = Parts(network(config, spec), optimizer(config, parallel, run),
                  spec.max_episode_steps)
    return Agent(
        init=functools.partial(init, spec, built),
        act=functools.partial(act, config, built.net),
        update=functools.partial(update, config, built),
        policy=functools.partial(policy, built.net),
        params=lambda state: state.params,
    )

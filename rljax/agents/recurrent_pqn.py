"""PQN-RNN: PQN (:mod:`rljax.agents.pqn`) with a recurrent core, ``config.memory`` set.

The network is a LayerNorm torso (``hidden_sizes``) -> recurrent core -> linear
Q-values; the memory travels through the agent contract as :mod:`rljax.agents.recurrent`
describes, and minibatches are whole env sequences.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax import exploration, losses
from rljax.agents import recurrent
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update
from rljax.agents.pqn_core import (
    PQNConfig,
    PQNState,
    epsilon_schedule,
    optimizer,
    q_lambda_loss,
)
from rljax.agents.recurrent import RecurrentState, resets
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks.recurrent import RecurrentNetwork, make_recurrent_network
from rljax.networks.torso import HeadSpec
from rljax.types import WHOLE, Array, Metrics, Params, PRNGKey, Rollout, Split, next_obs


class Parts(NamedTuple):
    """PQN-RNN's network and optimizer, built once by :func:`make_recurrent_pqn`, and the
    env's time limit (:func:`targets`)."""

    net: RecurrentNetwork
    optimizer: optax.GradientTransformation
    time_limit: int = 0


def network(config: PQNConfig, spec: EnvSpec) -> RecurrentNetwork:
    """LayerNorm torso (``hidden_sizes``) -> core -> linear Q-values."""
    return make_recurrent_network(
        spec.obs_shape, config.memory.core, config.memory.size, config.hidden_sizes,
        (HeadSpec(spec.num_actions, 1.0),), activation=config.activation,
        layer_norm=config.layer_norm, conv_method=config.conv_method,
        network=config.network)


def init(config: PQNConfig, spec: EnvSpec, parts: Parts, key: PRNGKey) -> RecurrentState:
    params = parts.net.init(key, jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype))
    learner = PQNState(params=params, opt_state=parts.optimizer.init(params),
                       step=jnp.zeros((), jnp.int32), update_step=jnp.zeros((), jnp.int32))
    return RecurrentState(learner=learner, hidden=parts.net.initial_carry((config.loop.num_envs,)))


def act(config: PQNConfig, net: RecurrentNetwork, state: RecurrentState, obs: Array,
        key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, RecurrentState]:
    """Epsilon-greedy actions at ``epsilon(step)``; extras ``q_max`` (the greedy value,
    which the update bootstraps from), ``hidden`` and ``new_episode``."""
    hidden, (q,) = net.apply(state.learner.params, state.hidden, obs,
                             resets(config, new_episode))
    action = exploration.epsilon_greedy(key, q, epsilon_schedule(config)(step))
    learner = state.learner.replace(update_step=jnp.asarray(step, jnp.int32))
    extras = {"q_max": jnp.max(q, axis=-1), **recurrent.memory_extras(state, new_episode)}
    return action, extras, RecurrentState(learner, hidden)


def policy(config: PQNConfig, net: RecurrentNetwork, params: Params, obs: Array, carry: Any,
           new_episode: Array) -> tuple[Array, Any]:
    """Greedy actions and the carry."""
    carry, (q,) = net.apply(params, carry, obs, resets(config, new_episode))
    return jnp.argmax(q, axis=-1).astype(jnp.int32), carry


class QSequenceSamples(NamedTuple):
    """PQN-RNN's per-sample data, time-major ``[T, B, ...]``, and ``hidden`` ``[B, H]``."""

    obs: Array
    reset: Array
    action: Array
    target: Array
    valid: Array
    hidden: Any


def targets(config: PQNConfig, net: RecurrentNetwork, state: RecurrentState, batch: Rollout,
            split: Split = WHOLE, time_limit: int = 0) -> Array:
    """Q(lambda) targets ``[T, B]``, each step's next greedy value that of the observation
    it ended in, from the carry it left (rewards scaled by ``reward_scale``). With the
    greedy values acting recorded (``extras["q_max"]``) the network runs only after the
    last step and on truncated steps (:func:`rljax.agents.recurrent.next_values`);
    without them, or with ``time_limit`` 0, after every step."""
    recorded = batch.extras.get("q_max")
    q_next = recurrent.next_values(
        config, net, state.learner.params, batch, split.local(state.hidden),
        next_obs(batch), jnp.zeros(batch.reward.shape) if recorded is None else recorded,
        lambda outputs: jnp.max(outputs[0], axis=-1), 0 if recorded is None else time_limit)
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    fn = functools.partial(losses.q_lambda_returns, lambda_=config.q_lambda)
    return jax.vmap(fn, in_axes=1, out_axes=1)(
        batch.reward.astype(jnp.float32) * config.reward_scale, discount, end,
        q_next[..., None])


def sequence_loss(net: RecurrentNetwork, params: Params,
                  minibatch: QSequenceSamples) -> tuple[Array, Metrics]:
    """``0.5 (Q(s, a) - G)^2`` over the valid steps of whole env sequences."""
    data = recurrent.time_major(minibatch._replace(hidden=None))
    (q,) = net.unroll(params, minibatch.hidden, data.obs, data.reset).outputs
    return q_lambda_loss(q, data)


def update(config: PQNConfig, parts: Parts, split: Split, state: RecurrentState,
           batch: Rollout, key: PRNGKey) -> Update:
    """``num_epochs`` epochs over minibatches of whole env sequences towards Q(lambda)."""
    learner = state.learner
    extras = batch.extras
    target = targets(config, parts.net, state, batch, split, parts.time_limit)
    data = QSequenceSamples(obs=batch.obs[:-1], reset=resets(config, extras["new_episode"]),
                            action=batch.action, target=target, valid=batch.valid,
                            hidden=recurrent.first(extras["hidden"]))
    params, opt_state, metrics = minibatch_epochs(
        key, learner.params, learner.opt_state, recurrent.env_major(data),
        functools.partial(sequence_loss, parts.net), parts.optimizer, config.num_epochs,
        config.num_minibatches)
    metrics["target_mean"] = losses.masked_mean(target, batch.valid)
    metrics["epsilon"] = epsilon_schedule(config)(learner.update_step)
    learner = learner.replace(params=params, opt_state=opt_state, step=learner.step + 1)
    return Update(state.replace(learner=learner), metrics)


def make_recurrent_pqn(config: PQNConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
                       run: RunLength | None = None) -> Agent:
    """PQN-RNN (``config.memory`` set); :func:`rljax.agents.pqn.make_pqn` builds it."""
    built = Parts(network(config, spec), optimizer(config, parallel, run),
                  spec.max_episode_steps)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, built.net),
        update=functools.partial(update, config, built, parallel.split),
        policy=functools.partial(policy, config, built.net),
        params=lambda state: state.learner.params,
        policy_init=lambda batch_size: built.net.initial_carry((batch_size,)),
    )

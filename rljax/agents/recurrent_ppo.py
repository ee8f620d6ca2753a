"""PPO-RNN: PPO (:mod:`rljax.agents.ppo`) with a recurrent core, ``config.memory`` set.

The network is torso (the first of ``hidden_sizes``) -> recurrent core -> actor and
critic heads (the rest of ``hidden_sizes``, then the output layer); the memory travels
through the agent contract as :mod:`rljax.agents.recurrent` describes, and minibatches
are whole env sequences.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax import losses
from rljax.agents import ppo_networks as heads
from rljax.agents import recurrent
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update
from rljax.agents.ppo_core import PPOConfig, PPOState, policy_params
from rljax.agents.ppo_loss import loss_terms, scale_rewards, updated_obs_stats
from rljax.agents.recurrent import RecurrentState, resets
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks.recurrent import RecurrentNetwork, make_recurrent_network
from rljax.networks.torso import HeadSpec
from rljax.types import WHOLE, Array, Metrics, Params, PRNGKey, Rollout, Split, next_obs


class Parts(NamedTuple):
    """PPO-RNN's network and optimizer, built once by :func:`make_recurrent_ppo`."""

    net: RecurrentNetwork
    optimizer: optax.GradientTransformation


def network(config: PPOConfig, spec: EnvSpec) -> RecurrentNetwork:
    """Torso (the first of ``hidden_sizes``) -> core -> actor and critic heads (the rest of
    ``hidden_sizes``, then the output layer); with ``memory.separate_critic`` the critic
    has a torso and core of its own."""
    return make_recurrent_network(
        spec.obs_shape, config.memory.core, config.memory.size, config.hidden_sizes[:1],
        (HeadSpec(heads.num_outputs(spec), 0.01), HeadSpec(1, 1.0, squeeze=True)),
        head_sizes=config.hidden_sizes[1:], activation=config.activation,
        network=config.network, towers=2 if config.memory.separate_critic else 1)


def init(config: PPOConfig, spec: EnvSpec, parts: Parts, key: PRNGKey) -> RecurrentState:
    params = heads.with_log_std(config, spec,
                                {"net": parts.net.init(key, heads.example_obs(config, spec))})
    learner = PPOState(params=params, opt_state=parts.optimizer.init(params),
                       **heads.init_statistics(config, spec), step=jnp.zeros((), jnp.int32))
    return RecurrentState(learner=learner, hidden=parts.net.initial_carry((config.loop.num_envs,)))


def act(config: PPOConfig, spec: EnvSpec, net: RecurrentNetwork, state: RecurrentState,
        obs: Array, key: PRNGKey, step: Array,
        new_episode: Array) -> tuple[Array, dict, RecurrentState]:
    """PPO's act with memory: extras ``log_prob``, ``value`` (and ``raw_action``) plus
    ``hidden`` and ``new_episode``."""
    del step
    learner = state.learner
    x = heads.prepare(config, learner.obs_stats, obs)
    hidden, (head, value) = net.apply(learner.params["net"], state.hidden, x,
                                      resets(config, new_episode))
    action, extras = heads.sample(spec, learner.params, head, key)
    extras = {"value": value, **recurrent.memory_extras(state, new_episode), **extras}
    return action, extras, state.replace(hidden=hidden)


def policy(config: PPOConfig, spec: EnvSpec, net: RecurrentNetwork, params: Params,
           obs: Array, carry: Any, new_episode: Array) -> tuple[Array, Any]:
    """The most likely action (the clipped mean for continuous actions) and the carry;
    ``params`` as :func:`rljax.agents.ppo.policy_params` gives them."""
    x = heads.prepare(config, params["obs_stats"], obs)
    carry, (head, _) = net.apply(params["net"]["net"], carry, x, resets(config, new_episode))
    return heads.most_likely(spec, head), carry


class SequenceSamples(NamedTuple):
    """PPO-RNN's per-sample data, time-major ``[T, B, ...]`` (a minibatch: ``[T, b, ...]``),
    and ``hidden``, each env's carry at the rollout's start ``[B, H]``."""

    obs: Array
    reset: Array
    action: Array
    log_prob: Array
    value: Array
    advantage: Array
    target: Array
    valid: Array
    hidden: Any


def samples(config: PPOConfig, spec: EnvSpec, net: RecurrentNetwork, state: RecurrentState,
            batch: Rollout, split: Split = WHOLE) -> tuple[SequenceSamples, Any]:
    """GAE advantages and value targets of a rollout, bootstrapped as
    :mod:`rljax.agents.recurrent` says, and the updated reward scaler."""
    learner = state.learner
    prepare = functools.partial(heads.prepare, config, learner.obs_stats)
    extras = batch.extras
    next_value = recurrent.next_values(
        config, net, learner.params["net"], batch, split.local(state.hidden),
        prepare(next_obs(batch)), extras["value"], lambda outputs: outputs[1],
        spec.max_episode_steps)
    scaler, reward = learner.reward_scaler, batch.reward
    if config.reward_scaling:
        scaler, reward = scale_rewards(config, scaler, batch, split)
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    gae = functools.partial(losses.gae_advantages, lambda_=config.gae_lambda)
    adv = jax.vmap(gae, in_axes=1, out_axes=1)(reward, discount, end, extras["value"],
                                               next_value)
    adv = jax.lax.stop_gradient(adv)
    return SequenceSamples(
        obs=prepare(batch.obs[:-1]), reset=resets(config, extras["new_episode"]),
        action=batch.action if spec.discrete else extras["raw_action"],
        log_prob=extras["log_prob"], value=extras["value"], advantage=adv,
        target=jax.lax.stop_gradient(adv + extras["value"]), valid=batch.valid,
        hidden=recurrent.first(extras["hidden"])), scaler


def sequence_loss(config: PPOConfig, spec: EnvSpec, net: RecurrentNetwork, params: Params,
                  minibatch: SequenceSamples) -> tuple[Array, Metrics]:
    """PPO's loss on a minibatch of whole env sequences (the core unrolled over them)."""
    data = recurrent.time_major(minibatch._replace(hidden=None))
    head, value = net.unroll(params["net"], minibatch.hidden, data.obs, data.reset).outputs
    log_prob, entropy = heads.log_prob_and_entropy(spec, params, head, data.action)
    return loss_terms(config, log_prob, entropy, value, data)


def update(config: PPOConfig, spec: EnvSpec, parts: Parts, split: Split,
           state: RecurrentState, batch: Rollout, key: PRNGKey) -> Update:
    """``num_epochs`` epochs over minibatches of whole env sequences."""
    learner = state.learner
    data, scaler = samples(config, spec, parts.net, state, batch, split)
    params, opt_state, metrics = minibatch_epochs(
        key, learner.params, learner.opt_state, recurrent.env_major(data),
        functools.partial(sequence_loss, config, spec, parts.net), parts.optimizer,
        config.num_epochs, config.num_minibatches)
    learner = PPOState(params=params, opt_state=opt_state,
                       obs_stats=updated_obs_stats(config, learner.obs_stats, batch, split),
                       reward_scaler=scaler, step=learner.step + 1)
    return Update(state.replace(learner=learner), metrics)


def make_recurrent_ppo(config: PPOConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
                       run: RunLength | None = None) -> Agent:
    """PPO-RNN (``config.memory`` set); :func:`rljax.agents.ppo.make_ppo` builds it."""
    built = Parts(network(config, spec),
                  heads.optimizer(config, parallel, run, spec.num_seeds))
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built.net),
        update=functools.partial(update, config, spec, built, parallel.split),
        policy=functools.partial(policy, config, spec, built.net),
        params=lambda state: policy_params(state.learner),
        policy_init=lambda batch_size: built.net.initial_carry((batch_size,)),
    )

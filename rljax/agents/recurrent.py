"""Agents with memory: PPO-RNN and PQN-RNN, the ``memory`` option of PPO and PQN.

The network is torso -> recurrent core (GRU or LSTM) -> heads
(:mod:`rljax.networks.recurrent`), and the memory travels through the ordinary agent
contract:

* **state**: the train state is :class:`RecurrentState`, the feed-forward agent's state
  (``learner``) and ``hidden``, the core's carry for each of the ``B`` envs as acting left
  it. It is part of every checkpoint, and of every member of a vmapped run.
* **act**: ``act(state, obs, key, step, new_episode)`` resets the carry of the envs whose
  previous step ended an episode (``new_episode``; every env with
  ``memory_reset_every_step``), steps the core and acts on its output. Beside the
  feed-forward agent's extras it returns ``extras["hidden"]``, the carry the step started
  from (before the reset), and ``extras["new_episode"]``: the loop stores both in
  ``Rollout.extras`` (``[T, B, ...]``).
* **update** replays the rollout: from ``extras["hidden"][0]`` and the ``new_episode``
  flags the core recomputes, with the acting parameters, exactly the carries and outputs
  acting saw (:func:`replay`; checked to 1e-6 by the tests). Minibatches split the envs,
  never time: each holds whole ``[T]`` sequences of ``B / num_minibatches`` envs with their
  initial carries, and the loss unrolls the core over them with the parameters being
  learned (as PureJaxRL's PPO-RNN and purejaxql's PQN-RNN do).
* **bootstrapping**: the value (or Q-values) after step ``t`` is that of the observation
  step ``t`` ended in, processed from the carry step ``t`` left, without a reset: for envpool
  (``Rollout.final_obs`` None) ``obs[t + 1]``, for envs that reset in the same step
  ``final_obs[t]`` (:func:`rljax.types.next_obs`). The carry each step left is the next
  step's recorded carry, and after the last step the state's ``hidden``, so no second
  unroll is needed.
* **policy**: evaluation carries memory too. ``Agent.policy_init(batch_size)`` gives the
  initial carry and ``policy(params, obs, carry, new_episode) -> (action, carry)`` steps it
  (:class:`rljax.agents.base.StatefulPolicyFn`).

With envpool, a finished episode is followed by a reset step (``new_episode`` True, action
ignored, not learned from) whose observation is the old episode's final one: the reset
clears the carry before that step, and the new episode's first real step starts from the
carry of that one step (zeros advanced by the old episode's final observation). With envs
that reset in the same step, the new episode's first step starts from zeros.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, losses, normalization
from rljax.agents import ppo, pqn
from rljax.agents.base import Agent, Update
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks.distributions import (
    categorical_log_prob,
    categorical_sample,
    greedy,
    take_action,
)
from rljax.networks.gaussian import gaussian_log_prob, gaussian_sample
from rljax.networks.recurrent import (
    HeadSpec,
    RecurrentNetwork,
    make_recurrent_network,
    reset_carry,
)
from rljax.types import WHOLE, Array, Metrics, Params, PRNGKey, Rollout, Split, next_obs


@struct.dataclass
class RecurrentState:
    """Train state of an agent with memory.

    Attributes:
        learner: the feed-forward agent's state (:class:`~rljax.agents.ppo.PPOState` or
            :class:`~rljax.agents.pqn.PQNState`), its ``params`` the recurrent network's.
        hidden: the core's carry for each env, ``[B, H]`` (GRU) or ``([B, H], [B, H])``
            (LSTM), as the last ``act`` left it.
    """

    learner: Any
    hidden: Any


# ------------------------------------------------------------------ shared machinery

def _resets(config: Any, new_episode: Array) -> Array:
    """Where the carry is reset before a step: where an episode began, or everywhere."""
    if config.memory_reset_every_step:
        return jnp.ones_like(new_episode, bool)
    return new_episode.astype(bool)


def _first(tree: Any) -> Any:
    return jax.tree.map(lambda x: x[0], tree)


def carries_after(batch: Rollout, final: Any) -> Any:
    """The carry each step of ``batch`` left, ``[T, B, H]``: the next step's recorded carry
    (``extras["hidden"][t + 1]``), and ``final`` (the state's carry) after the last step."""
    return jax.tree.map(lambda h, f: jnp.concatenate([h[1:], f[None]], axis=0),
                        batch.extras["hidden"], final)


def _env_major(samples: Any) -> Any:
    """Samples of ``[T, B, ...]`` leaves and ``hidden`` ``[B, H]`` -> ``[B, 1, T, ...]`` and
    ``[B, 1, H]``: whole env sequences as the samples :func:`minibatch_epochs` shuffles."""
    seqs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1)[:, None], samples._replace(hidden=None))
    return seqs._replace(hidden=jax.tree.map(lambda x: x[:, None], samples.hidden))


def _time_major(tree: Any) -> Any:
    """A minibatch's ``[b, T, ...]`` leaves -> ``[T, b, ...]``."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tree)


def _bootstrap(config: Any, net: RecurrentNetwork, params: Params, batch: Rollout,
               final_hidden: Any, obs_next: Array) -> tuple:
    """The heads on the observation each step ended in, from the carry the step left."""
    after = carries_after(batch, final_hidden)
    if config.memory_reset_every_step:
        after = reset_carry(after, jnp.ones(batch.reward.shape, bool))
    return net.step_from(params, after, obs_next)


def _memory_extras(state: RecurrentState, new_episode: Array) -> dict:
    return {"hidden": state.hidden, "new_episode": new_episode.astype(bool)}


# ------------------------------------------------------------------ PPO-RNN

def ppo_network(config: ppo.PPOConfig, spec: EnvSpec) -> RecurrentNetwork:
    """Torso (the first of ``hidden_sizes``) -> core -> actor and critic heads (the rest of
    ``hidden_sizes``, then the output layer)."""
    outputs = spec.num_actions if spec.discrete else spec.action_shape[0]
    return make_recurrent_network(
        spec.obs_shape, config.memory, config.memory_size, config.hidden_sizes[:1],
        (HeadSpec(outputs, 0.01), HeadSpec(1, 1.0, squeeze=True)),
        head_sizes=config.hidden_sizes[1:], activation=config.activation)


def ppo_init(config: ppo.PPOConfig, spec: EnvSpec, key: PRNGKey,
             grad_transform: optax.GradientTransformation | None = None) -> RecurrentState:
    net = ppo_network(config, spec)
    obs = jnp.zeros((1,) + spec.obs_shape, jnp.float32 if config.normalize_obs
                    else spec.obs_dtype)
    params = {"net": net.init(key, obs)}
    if not spec.discrete:
        params["log_std"] = jnp.full(spec.action_shape, config.log_std_init, jnp.float32)
    learner = ppo.PPOState(
        params=params, opt_state=ppo._make_optimizer(config, grad_transform).init(params),
        obs_stats=normalization.init_stats(spec.obs_shape) if config.normalize_obs else None,
        reward_scaler=(normalization.init_reward_scaler(config.loop.num_envs)
                       if config.reward_scaling else None),
        step=jnp.zeros((), jnp.int32))
    return RecurrentState(learner=learner, hidden=net.initial_carry((config.loop.num_envs,)))


def ppo_act(config: ppo.PPOConfig, spec: EnvSpec, state: RecurrentState, obs: Array,
            key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, RecurrentState]:
    """PPO's act with memory: extras ``log_prob``, ``value`` (and ``raw_action``) plus
    ``hidden`` and ``new_episode``."""
    del step
    learner, net = state.learner, ppo_network(config, spec)
    x = ppo._prepare(config, learner.obs_stats, obs)
    hidden, (head, value) = net.apply(learner.params["net"], state.hidden, x,
                                      _resets(config, new_episode))
    extras = {"value": value, **_memory_extras(state, new_episode)}
    if spec.discrete:
        action = categorical_sample(key, head).astype(jnp.int32)
        extras["log_prob"] = categorical_log_prob(head, action)
    else:
        raw = gaussian_sample(key, head, learner.params["log_std"])
        extras["log_prob"] = gaussian_log_prob(head, learner.params["log_std"], raw)
        extras["raw_action"] = raw
        low, high = ppo._bounds(spec)
        action = jnp.clip(raw, low, high)
    return action, extras, state.replace(hidden=hidden)


def ppo_policy(config: ppo.PPOConfig, spec: EnvSpec, params: Params, obs: Array, carry: Any,
               new_episode: Array) -> tuple[Array, Any]:
    """The most likely action (the clipped mean for continuous actions) and the carry;
    ``params`` as :func:`ppo.policy_params` gives them."""
    x = ppo._prepare(config, params["obs_stats"], obs)
    carry, (head, _) = ppo_network(config, spec).apply(params["net"]["net"], carry, x,
                                                       _resets(config, new_episode))
    if spec.discrete:
        return greedy(head).astype(jnp.int32), carry
    low, high = ppo._bounds(spec)
    return jnp.clip(head, low, high), carry


class Replay(NamedTuple):
    """The rollout replayed by the core (:func:`replay`), every leaf ``[T, B, ...]``.

    Attributes:
        hidden: the carry each step started from (before its reset).
        outputs: the heads' outputs (PPO: ``(logits or means, values)``; PQN:
            ``(q_values,)``).
    """

    hidden: Any
    outputs: tuple


def replay(net: RecurrentNetwork, config: Any, params: Params, obs: Array,
           batch: Rollout) -> Replay:
    """The core unrolled over the rollout from its first recorded carry, reset where the
    recorded ``new_episode`` flags say: with the acting parameters, the carries and outputs
    acting saw. ``obs``: the ``[T, B, ...]`` observations as the network takes them."""
    out = net.unroll(params, _first(batch.extras["hidden"]), obs,
                     _resets(config, batch.extras["new_episode"]))
    return Replay(out.carries, out.outputs)


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


def ppo_samples(config: ppo.PPOConfig, spec: EnvSpec, state: RecurrentState, batch: Rollout,
                split: Split = WHOLE) -> tuple[SequenceSamples, Any]:
    """GAE advantages and value targets of a rollout, bootstrapped as the module docstring
    says, and the updated reward scaler."""
    learner, net = state.learner, ppo_network(config, spec)
    prepare = functools.partial(ppo._prepare, config, learner.obs_stats)
    extras = batch.extras
    _, next_value = _bootstrap(config, net, learner.params["net"], batch,
                               split.local(state.hidden), prepare(next_obs(batch)))
    scaler, reward = learner.reward_scaler, batch.reward
    if config.reward_scaling:
        scaler, reward = ppo._scale_rewards(config, scaler, batch, split)
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    gae = functools.partial(losses.gae_advantages, lambda_=config.gae_lambda)
    adv = jax.vmap(gae, in_axes=1, out_axes=1)(reward, discount, end, extras["value"],
                                               next_value)
    adv = jax.lax.stop_gradient(adv)
    return SequenceSamples(
        obs=prepare(batch.obs[:-1]), reset=_resets(config, extras["new_episode"]),
        action=batch.action if spec.discrete else extras["raw_action"],
        log_prob=extras["log_prob"], value=extras["value"], advantage=adv,
        target=jax.lax.stop_gradient(adv + extras["value"]), valid=batch.valid,
        hidden=_first(extras["hidden"])), scaler


def ppo_sequence_loss(config: ppo.PPOConfig, spec: EnvSpec, params: Params,
                      minibatch: SequenceSamples) -> tuple[Array, Metrics]:
    """PPO's loss on a minibatch of whole env sequences (the core unrolled over them)."""
    data = _time_major(minibatch._replace(hidden=None))
    out = ppo_network(config, spec).unroll(params["net"], minibatch.hidden, data.obs, data.reset)
    head, value = out.outputs
    log_prob, entropy = ppo._log_prob_and_entropy(spec, params, head, data.action)
    return ppo.loss_terms(config, log_prob, entropy, value, data)


def ppo_update(config: ppo.PPOConfig, spec: EnvSpec, state: RecurrentState, batch: Rollout,
               key: PRNGKey, grad_transform: optax.GradientTransformation | None = None,
               split: Split = WHOLE) -> Update:
    """``num_epochs`` epochs over minibatches of whole env sequences."""
    learner = state.learner
    data, scaler = ppo_samples(config, spec, state, batch, split)
    params, opt_state, metrics = minibatch_epochs(
        key, learner.params, learner.opt_state, _env_major(data),
        functools.partial(ppo_sequence_loss, config, spec),
        ppo._make_optimizer(config, grad_transform), config.num_epochs,
        config.num_minibatches)
    obs_stats = learner.obs_stats
    if config.normalize_obs:
        obs_stats = normalization.update_stats(
            obs_stats, *ppo._all_envs(split, (batch.obs[:-1], batch.valid)))
    learner = ppo.PPOState(params=params, opt_state=opt_state, obs_stats=obs_stats,
                           reward_scaler=scaler, step=learner.step + 1)
    return Update(state.replace(learner=learner), metrics)


def make_recurrent_ppo(config: ppo.PPOConfig, spec: EnvSpec, *,
                       grad_transform: optax.GradientTransformation | None = None,
                       split: Split = WHOLE) -> Agent:
    """PPO-RNN (``config.memory`` set); :func:`rljax.agents.ppo.make_ppo` builds it."""
    net = ppo_network(config, spec)
    return Agent(
        init=functools.partial(ppo_init, config, spec, grad_transform=grad_transform),
        act=functools.partial(ppo_act, config, spec),
        update=functools.partial(ppo_update, config, spec, grad_transform=grad_transform,
                                 split=split),
        policy=functools.partial(ppo_policy, config, spec),
        params=lambda state: ppo.policy_params(state.learner),
        policy_init=lambda batch_size: net.initial_carry((batch_size,)),
    )


# ------------------------------------------------------------------ PQN-RNN

def pqn_network(config: pqn.PQNConfig, spec: EnvSpec) -> RecurrentNetwork:
    """LayerNorm torso (``hidden_sizes``) -> core -> linear Q-values."""
    return make_recurrent_network(
        spec.obs_shape, config.memory, config.memory_size, config.hidden_sizes,
        (HeadSpec(spec.num_actions, 1.0),), activation=config.activation,
        layer_norm=config.layer_norm, conv_method=config.conv_method)


def pqn_init(config: pqn.PQNConfig, spec: EnvSpec, key: PRNGKey,
             grad_transform: optax.GradientTransformation | None = None) -> RecurrentState:
    net = pqn_network(config, spec)
    params = net.init(key, jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype))
    learner = pqn.PQNState(params=params,
                           opt_state=pqn._make_optimizer(config, grad_transform).init(params),
                           step=jnp.zeros((), jnp.int32), update_step=jnp.zeros((), jnp.int32))
    return RecurrentState(learner=learner, hidden=net.initial_carry((config.loop.num_envs,)))


def pqn_act(config: pqn.PQNConfig, spec: EnvSpec, state: RecurrentState, obs: Array,
            key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, RecurrentState]:
    """Epsilon-greedy actions at ``epsilon(step)``; extras ``hidden`` and ``new_episode``."""
    hidden, (q,) = pqn_network(config, spec).apply(state.learner.params, state.hidden, obs,
                                                   _resets(config, new_episode))
    action = exploration.epsilon_greedy(key, q, pqn.epsilon_schedule(config)(step))
    learner = state.learner.replace(update_step=jnp.asarray(step, jnp.int32))
    return action, _memory_extras(state, new_episode), RecurrentState(learner, hidden)


def pqn_policy(config: pqn.PQNConfig, spec: EnvSpec, params: Params, obs: Array, carry: Any,
               new_episode: Array) -> tuple[Array, Any]:
    """Greedy actions and the carry."""
    carry, (q,) = pqn_network(config, spec).apply(params, carry, obs,
                                                  _resets(config, new_episode))
    return jnp.argmax(q, axis=-1).astype(jnp.int32), carry


class QSequenceSamples(NamedTuple):
    """PQN-RNN's per-sample data, time-major ``[T, B, ...]``, and ``hidden`` ``[B, H]``."""

    obs: Array
    reset: Array
    action: Array
    target: Array
    valid: Array
    hidden: Any


def pqn_targets(config: pqn.PQNConfig, spec: EnvSpec, state: RecurrentState,
                batch: Rollout, split: Split = WHOLE) -> Array:
    """Q(lambda) targets ``[T, B]``, each step's next Q-values those of the observation it
    ended in, from the carry it left (rewards scaled by ``reward_scale``)."""
    (q_next,) = _bootstrap(config, pqn_network(config, spec), state.learner.params, batch,
                           split.local(state.hidden), next_obs(batch))
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    fn = functools.partial(losses.q_lambda_returns, lambda_=config.q_lambda)
    return jax.vmap(fn, in_axes=1, out_axes=1)(
        batch.reward.astype(jnp.float32) * config.reward_scale, discount, end, q_next)


def pqn_sequence_loss(config: pqn.PQNConfig, spec: EnvSpec, params: Params,
                      minibatch: QSequenceSamples) -> tuple[Array, Metrics]:
    """``0.5 (Q(s, a) - G)^2`` over the valid steps of whole env sequences."""
    data = _time_major(minibatch._replace(hidden=None))
    (q,) = pqn_network(config, spec).unroll(params, minibatch.hidden, data.obs,
                                            data.reset).outputs
    q_a = take_action(q, data.action, 0.0)
    td = jax.lax.stop_gradient(data.target) - q_a
    loss = losses.masked_mean(0.5 * jnp.square(td), data.valid)
    return loss, {"loss": loss, "q_mean": losses.masked_mean(q_a, data.valid),
                  "td_abs": losses.masked_mean(jnp.abs(td), data.valid)}


def pqn_update(config: pqn.PQNConfig, spec: EnvSpec, state: RecurrentState, batch: Rollout,
               key: PRNGKey, grad_transform: optax.GradientTransformation | None = None,
               split: Split = WHOLE) -> Update:
    """``num_epochs`` epochs over minibatches of whole env sequences towards Q(lambda)."""
    learner = state.learner
    extras = batch.extras
    target = pqn_targets(config, spec, state, batch, split)
    data = QSequenceSamples(obs=batch.obs[:-1], reset=_resets(config, extras["new_episode"]),
                            action=batch.action, target=target, valid=batch.valid,
                            hidden=_first(extras["hidden"]))
    params, opt_state, metrics = minibatch_epochs(
        key, learner.params, learner.opt_state, _env_major(data),
        functools.partial(pqn_sequence_loss, config, spec),
        pqn._make_optimizer(config, grad_transform), config.num_epochs,
        config.num_minibatches)
    metrics["target_mean"] = losses.masked_mean(target, batch.valid)
    metrics["epsilon"] = pqn.epsilon_schedule(config)(learner.update_step)
    learner = learner.replace(params=params, opt_state=opt_state, step=learner.step + 1)
    return Update(state.replace(learner=learner), metrics)


def make_recurrent_pqn(config: pqn.PQNConfig, spec: EnvSpec, *,
                       grad_transform: optax.GradientTransformation | None = None,
                       split: Split = WHOLE) -> Agent:
    """PQN-RNN (``config.memory`` set); :func:`rljax.agents.pqn.make_pqn` builds it."""
    net = pqn_network(config, spec)
    return Agent(
        init=functools.partial(pqn_init, config, spec, grad_transform=grad_transform),
        act=functools.partial(pqn_act, config, spec),
        update=functools.partial(pqn_update, config, spec, grad_transform=grad_transform,
                                 split=split),
        policy=functools.partial(pqn_policy, config, spec),
        params=lambda state: state.learner.params,
        policy_init=lambda batch_size: net.initial_carry((batch_size,)),
    )

"""Proximal policy optimization (PPO; Schulman et al. 2017, "Proximal Policy
Optimization Algorithms"), the clipped-surrogate variant.

``num_envs`` envs are stepped ``rollout_len`` times with the current policy, which
records each action's log-probability and the critic's value. The learner computes
GAE(lambda) advantages and value targets over the rollout (Schulman et al. 2016), then
runs ``num_epochs`` epochs over the ``T * B`` samples, each epoch a fresh shuffle into
``num_minibatches`` minibatches (every sample once per epoch), with one Adam step per
minibatch on

    policy loss  -min(r A, clip(r, 1 - eps, 1 + eps) A),  r = pi(a|s) / pi_old(a|s)
    value loss   (V(s) - G)^2, optionally clipped around the rollout's values
    entropy     -entropy_coef * H[pi(.|s)]

(``loss = policy + value_coef * value - entropy_coef * entropy``), the advantages
standardized within each minibatch, gradients clipped to a global norm. Envpool's reset
steps are masked out of every mean.

Discrete actions use a categorical policy; continuous ones a diagonal Gaussian whose
mean the network outputs and whose state-independent log-std is a learned parameter.
The env is stepped with the sampled action clipped to its bounds; the unclipped action
is stored (``extras["raw_action"]``) and its log-probability used, so the ratio is that
of the distribution actually sampled from. Frames get the Nature CNN torso, flat
observations an MLP; actor and critic are separate networks or share a torso.

Optional companions for continuous control (as in OpenAI Baselines' ``VecNormalize``):
observations standardized by their running mean and std, and rewards divided by the
running std of the discounted return. Both statistics live in the agent state and are
updated from each rollout's valid steps in ``update``; ``act`` and ``policy`` use the
statistics as of the last update, and a rollout is learned from with the statistics it
was collected with.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import losses, normalization, validate
from rljax.agents.base import (
    Agent,
    Update,
    annealed_learning_rate,
    check_memory_fields,
    with_grad_transform,
)
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks import core as nets
from rljax.networks.distributions import (
    categorical_entropy,
    categorical_log_prob,
    categorical_sample,
    greedy,
)
from rljax.networks.gaussian import gaussian_entropy, gaussian_log_prob, gaussian_sample
from rljax.records import OnPolicyLoop, shape_field
from rljax.types import WHOLE, Array, Metrics, Params, PRNGKey, Rollout, Split

# Bound on standardized observations and on scaled rewards.
NORMALIZATION_CLIP = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyperparameters (defaults: the rljax configuration for CartPole-v1).

    The value loss is the plain squared error: implementations that halve it (CleanRL,
    Baselines) with a coefficient ``c`` correspond to ``value_coef = c / 2``.

    Learning-rate annealing is linear in loop updates: update ``u`` (from 0) uses
    ``lr * max(0, 1 - u / total_updates)`` for all of its minibatch steps, as CleanRL
    does. The run's length is not the agent's to know, so ``total_updates`` (the run's
    env steps divided by ``loop.steps_per_update``) must be known with ``anneal_lr``: a run
    (``rljax.run.build``) fills it in when it is None.

    Attributes:
        loop: the on-policy loop (:class:`rljax.records.OnPolicyLoop`).
        gamma: discount.
        gae_lambda: GAE lambda.
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * rollout_len``.
        clip_eps: clipping range of the probability ratio.
        value_clip_eps: clipping range of the value around the rollout's value; None: off.
        entropy_coef: weight of the entropy bonus.
        value_coef: weight of the value loss.
        lr: Adam learning rate.
        anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
        total_updates: loop updates of the run (needed by ``anneal_lr``).
        adam_eps: Adam epsilon.
        max_grad_norm: clip each minibatch gradient to this global norm; None: off.
        normalize_advantages: standardize advantages within each minibatch.
        normalize_obs: standardize observations by their running statistics (flat
            observations only).
        reward_scaling: divide rewards by the running std of the discounted return.
        hidden_sizes: MLP layer sizes of the actor and of the critic (flat observations;
            frames get the Nature CNN).
        activation: hidden activation name.
        shared_torso: one torso with policy and value heads; False: separate networks.
        log_std_init: initial log standard deviation of the Gaussian policy (continuous
            actions).
        memory: a recurrent core, "gru" or "lstm" (PPO-RNN, :mod:`rljax.agents.recurrent`);
            None: feed-forward. With memory the actor and critic share the torso (the
            first layer of ``hidden_sizes``) and the core, each head has the remaining
            layers of ``hidden_sizes`` before its output layer, and ``shared_torso`` is
            ignored; minibatches are whole env sequences (``num_minibatches`` must divide
            ``num_envs``).
        memory_size: units of the recurrent core.
        memory_reset_every_step: reset the core's carry before every step (an ablation:
            the network keeps its shape but remembers nothing).
    """

    loop: OnPolicyLoop = OnPolicyLoop(num_envs=32, rollout_len=16)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_epochs: int = shape_field(4)
    num_minibatches: int = shape_field(4)
    clip_eps: float = 0.2
    value_clip_eps: float | None = None
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    lr: float = 2.5e-3
    anneal_lr: bool = False
    total_updates: int | None = shape_field(None)
    adam_eps: float = 1e-5
    max_grad_norm: float | None = 0.5
    normalize_advantages: bool = True
    normalize_obs: bool = False
    reward_scaling: bool = False
    hidden_sizes: tuple[int, ...] = shape_field((64, 64), network=True)
    activation: str = "tanh"
    shared_torso: bool = False
    log_std_init: float = 0.0
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
        for name in ("lr", "adam_eps", "clip_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("value_clip_eps", self.value_clip_eps, low=0.0, low_open=True,
                        optional=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("gae_lambda", self.gae_lambda, low=0.0, high=1.0)
        validate.number("entropy_coef", self.entropy_coef, low=0.0, high=1e3)
        validate.number("value_coef", self.value_coef, low=0.0, high=1e3)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.number("log_std_init", self.log_std_init, low=-20.0, high=20.0)
        validate.sizes("hidden_sizes", self.hidden_sizes)
        validate.choice("activation", self.activation, tuple(nets.ACTIVATIONS))
        for name in ("anneal_lr", "normalize_advantages", "normalize_obs", "reward_scaling",
                     "shared_torso", "memory_reset_every_step"):
            validate.boolean(name, getattr(self, name))
        check_memory_fields(self)

    @property
    def minibatch_size(self) -> int:
        return self.loop.steps_per_update // self.num_minibatches


@struct.dataclass
class PPOState:
    """Train state.

    Attributes:
        params: ``{"actor": ..., "critic": ...}`` or ``{"actor_critic": ...}``, and
            ``"log_std" [A]`` for continuous actions.
        opt_state: Adam state.
        obs_stats: running observation statistics (None without ``normalize_obs``).
        reward_scaler: per-env discounted returns and their statistics (None without
            ``reward_scaling``).
        step: updates done.
    """

    params: Params
    opt_state: optax.OptState
    obs_stats: normalization.RunningStats | None
    reward_scaler: normalization.RewardScalerState | None
    step: Array


class _Nets(NamedTuple):
    actor: nets.Network  # the shared actor-critic when critic is None
    critic: nets.Network | None


def _num_outputs(spec: EnvSpec) -> int:
    return spec.num_actions if spec.discrete else spec.action_shape[0]


def _networks(config: PPOConfig, spec: EnvSpec) -> _Nets:
    outputs = _num_outputs(spec)
    if config.shared_torso:
        return _Nets(nets.make_actor_critic(spec.obs_shape, outputs, config.hidden_sizes,
                                            config.activation), None)
    return _Nets(nets.make_policy_network(spec.obs_shape, outputs, config.hidden_sizes,
                                          config.activation),
                 nets.make_value_network(spec.obs_shape, config.hidden_sizes,
                                         config.activation))


def _forward(config: PPOConfig, spec: EnvSpec, params: Params,
             obs: Array) -> tuple[Array, Array]:
    """``(logits [..., A] or means [..., A], values [...])`` of prepared observations."""
    networks = _networks(config, spec)
    if networks.critic is None:
        return networks.actor.apply(params["actor_critic"], obs)
    return (networks.actor.apply(params["actor"], obs),
            networks.critic.apply(params["critic"], obs))


def _prepare(config: PPOConfig, obs_stats: normalization.RunningStats | None,
             obs: Array) -> Array:
    if config.normalize_obs:
        return normalization.normalize_obs(obs_stats, obs, clip=NORMALIZATION_CLIP)
    return obs


def _log_prob_and_entropy(spec: EnvSpec, params: Params, head: Array,
                          action: Array) -> tuple[Array, Array]:
    if spec.discrete:
        return categorical_log_prob(head, action), categorical_entropy(head)
    return (gaussian_log_prob(head, params["log_std"], action),
            gaussian_entropy(params["log_std"], head.shape[:-1]))


def _bounds(spec: EnvSpec) -> tuple[Array, Array]:
    return (jnp.asarray(spec.action_low, jnp.float32),
            jnp.asarray(spec.action_high, jnp.float32))


def learning_rate(config: PPOConfig) -> optax.Schedule:
    """The learning rate as a function of the optimizer's step count (minibatch steps)."""
    return annealed_learning_rate(config.lr, config.anneal_lr, config.total_updates,
                                  config.num_epochs * config.num_minibatches)


def _make_optimizer(config: PPOConfig,
                    grad_transform: optax.GradientTransformation | None = None
                    ) -> optax.GradientTransformation:
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    # One flat vector: a handful of kernels per step instead of several per parameter array.
    return with_grad_transform(
        optax.flatten(optax.chain(*clip, optax.adam(learning_rate(config),
                                                    eps=config.adam_eps))),
        grad_transform)


def init(config: PPOConfig, spec: EnvSpec, key: PRNGKey,
         grad_transform: optax.GradientTransformation | None = None) -> PPOState:
    networks = _networks(config, spec)
    obs = jnp.zeros((1,) + spec.obs_shape, jnp.float32 if config.normalize_obs
                    else spec.obs_dtype)
    actor_key, critic_key = jax.random.split(key)
    if networks.critic is None:
        params = {"actor_critic": networks.actor.init(actor_key, obs)}
    else:
        params = {"actor": networks.actor.init(actor_key, obs),
                  "critic": networks.critic.init(critic_key, obs)}
    if not spec.discrete:
        params["log_std"] = jnp.full(spec.action_shape, config.log_std_init, jnp.float32)
    return PPOState(
        params=params, opt_state=_make_optimizer(config, grad_transform).init(params),
        obs_stats=normalization.init_stats(spec.obs_shape) if config.normalize_obs else None,
        reward_scaler=(normalization.init_reward_scaler(config.loop.num_envs)
                       if config.reward_scaling else None),
        step=jnp.zeros((), jnp.int32))


def act(config: PPOConfig, spec: EnvSpec, state: PPOState, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, dict, PPOState]:
    """Actions ``[B]`` (discrete) or ``[B, A]`` (continuous, clipped to the bounds)
    sampled from the policy, with extras ``log_prob [B]``, ``value [B]`` and, for
    continuous actions, the unclipped ``raw_action [B, A]``."""
    del step, new_episode
    head, value = _forward(config, spec, state.params, _prepare(config, state.obs_stats, obs))
    if spec.discrete:
        action = categorical_sample(key, head).astype(jnp.int32)
        return action, {"log_prob": categorical_log_prob(head, action), "value": value}, state
    raw = gaussian_sample(key, head, state.params["log_std"])
    low, high = _bounds(spec)
    extras = {"log_prob": gaussian_log_prob(head, state.params["log_std"], raw),
              "value": value, "raw_action": raw}
    return jnp.clip(raw, low, high), extras, state


def policy(config: PPOConfig, spec: EnvSpec, params: Params, obs: Array) -> Array:
    """The most likely action (the mean, clipped to the bounds, for continuous actions);
    ``params`` as :func:`policy_params` gives them."""
    head, _ = _forward(config, spec, params["net"], _prepare(config, params["obs_stats"], obs))
    if spec.discrete:
        return greedy(head).astype(jnp.int32)
    low, high = _bounds(spec)
    return jnp.clip(head, low, high)


def policy_params(state: PPOState) -> dict[str, Any]:
    """What :func:`policy` needs: the networks and the observation statistics."""
    return {"net": state.params, "obs_stats": state.obs_stats}


def advantages_and_returns(config: PPOConfig, reward: Array, batch: Rollout,
                           values: Array | tuple[Array, Array]) -> tuple[Array, Array]:
    """GAE advantages and value targets ``[T, B]`` from ``values [T + 1, B]``.

    Terminated episodes do not bootstrap, truncated ones bootstrap from the value of
    their real final observation, and no trace crosses an episode end; the targets of
    reset steps are meaningless (masked by ``batch.valid``).

    Args:
        config: hyperparameters (``gamma``, ``gae_lambda``).
        reward: rewards ``[T, B]`` (scaled or not).
        batch: the rollout (its episode-end flags).
        values: critic values of ``batch.obs``, ``[T + 1, B]``, or ``(v_tm1, v_t)``, both
            ``[T, B]``: those of the observations acted in and of the observations each
            step bootstraps from (:func:`rljax.types.next_obs`).
    """
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    v_tm1, v_t = values if isinstance(values, tuple) else (values[:-1], values[1:])
    gae = functools.partial(losses.gae_advantages, lambda_=config.gae_lambda)
    adv = jax.vmap(gae, in_axes=1, out_axes=1)(reward, discount, end, v_tm1, v_t)
    return jax.lax.stop_gradient(adv), jax.lax.stop_gradient(adv + v_tm1)


class Samples(NamedTuple):
    """The per-sample data of an update, every field ``[T, B, ...]`` (or one minibatch's
    ``[N, ...]``).

    Attributes:
        obs: prepared (normalized) observations the actions were taken in.
        action: actions as sampled (unclipped for continuous actions).
        log_prob: their log-probabilities under the rollout's policy.
        value: the rollout's values.
        advantage: GAE advantages.
        target: value targets.
        valid: False on reset steps.
    """

    obs: Array
    action: Array
    log_prob: Array
    value: Array
    advantage: Array
    target: Array
    valid: Array


def minibatch_loss(config: PPOConfig, spec: EnvSpec, params: Params,
                   minibatch: Samples) -> tuple[Array, Metrics]:
    """PPO's loss on one minibatch ``[N]``; returns ``(loss, metrics)``."""
    head, value = _forward(config, spec, params, minibatch.obs)
    log_prob, entropy = _log_prob_and_entropy(spec, params, head, minibatch.action)
    return loss_terms(config, log_prob, entropy, value, minibatch)


def loss_terms(config: PPOConfig, log_prob: Array, entropy: Array, value: Array,
               data: Samples) -> tuple[Array, Metrics]:
    """The clipped surrogate, clipped value loss and entropy bonus from the current
    policy's ``log_prob``, ``entropy`` and ``value`` (shaped like ``data``'s fields, masked
    by ``data.valid``); ``(loss, metrics)``. Shared by feed-forward and recurrent PPO."""
    mask = data.valid
    adv = data.advantage
    if config.normalize_advantages:
        adv = losses.normalize(adv, mask)
    mean = functools.partial(losses.masked_mean, mask=mask)
    policy_loss = mean(losses.clipped_surrogate_loss(log_prob, data.log_prob, adv,
                                                     config.clip_eps))
    value_loss = mean(losses.clipped_value_loss(value, data.value, data.target,
                                                config.value_clip_eps))
    entropy = mean(entropy)
    total = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    metrics = {
        "loss": total, "policy_loss": policy_loss, "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": mean(losses.approx_kl(log_prob, data.log_prob)),
        "clip_fraction": mean(losses.clip_fraction(log_prob, data.log_prob,
                                                   config.clip_eps)),
    }
    return total, metrics


def _all_envs(split: Split, tree: Any) -> Any:
    """``[T, b, ...]`` rollout arrays of this shard's envs -> ``[T, B, ...]`` of all envs."""
    return jax.tree.map(lambda x: jnp.swapaxes(split.gather(jnp.swapaxes(x, 0, 1)), 0, 1),
                        tree)


def _own_envs(split: Split, x: Array) -> Array:
    """``[T, B, ...]`` of all envs -> ``[T, b, ...]`` of this shard's envs."""
    return jnp.swapaxes(split.local(jnp.swapaxes(x, 0, 1)), 0, 1)


def _scale_rewards(config: PPOConfig, scaler: normalization.RewardScalerState,
                   batch: Rollout, split: Split = WHOLE
                   ) -> tuple[normalization.RewardScalerState, Array]:
    # The scaler tracks every env's return; on one shard of a data-parallel run it scales
    # all envs' rewards (the same on every device) and keeps its own envs' part.
    def step(scaler, xs):
        reward, done, valid = xs
        return normalization.scale_rewards(scaler, reward, done, config.gamma, mask=valid,
                                           clip=NORMALIZATION_CLIP)

    scaler, reward = jax.lax.scan(step, scaler, _all_envs(
        split, (batch.reward, batch.terminated | batch.truncated, batch.valid)))
    return scaler, _own_envs(split, reward)


def samples(config: PPOConfig, spec: EnvSpec, state: PPOState, batch: Rollout,
            split: Split = WHOLE) -> tuple[Samples, normalization.RewardScalerState | None]:
    """The rollout's samples (advantages and targets from the critic) and the updated
    reward scaler. ``split``: how a shard of a data-parallel run sees every env (the
    reward scaler's statistics are all envs')."""
    obs = _prepare(config, state.obs_stats, batch.obs)
    extras = batch.extras
    # The rollout's values of obs[:-1] were recorded when acting; only the last
    # observation's is missing, or, for envs that reset in the same step, those of the
    # final observations each step bootstraps from.
    if batch.final_obs is None:
        _, last_value = _forward(config, spec, state.params, obs[-1])
        next_values = jnp.concatenate([extras["value"][1:], last_value[None]], axis=0)
    else:
        final = _prepare(config, state.obs_stats, batch.final_obs)
        _, next_values = _forward(config, spec, state.params, final)
    values = (extras["value"], next_values)
    scaler, reward = state.reward_scaler, batch.reward
    if config.reward_scaling:
        scaler, reward = _scale_rewards(config, scaler, batch, split)
    adv, target = advantages_and_returns(config, reward, batch, values)
    action = batch.action if spec.discrete else extras["raw_action"]
    return Samples(obs=obs[:-1], action=action, log_prob=extras["log_prob"],
                   value=extras["value"], advantage=adv, target=target,
                   valid=batch.valid), scaler


def update(config: PPOConfig, spec: EnvSpec, state: PPOState, batch: Rollout,
           key: PRNGKey, grad_transform: optax.GradientTransformation | None = None,
           split: Split = WHOLE) -> Update:
    """``num_epochs`` epochs of minibatch steps on a rollout (extras from :func:`act`).
    On a shard of a data-parallel run (``split``), the running observation and reward
    statistics take in every shard's rollout, so they stay the same on every device and
    equal a one-device run's; the minibatches are the shard's own."""
    data, scaler = samples(config, spec, state, batch, split)
    params, opt_state, metrics = minibatch_epochs(
        key, state.params, state.opt_state, data,
        functools.partial(minibatch_loss, config, spec),
        _make_optimizer(config, grad_transform), config.num_epochs, config.num_minibatches)
    obs_stats = state.obs_stats
    if config.normalize_obs:
        obs_stats = normalization.update_stats(
            obs_stats, *_all_envs(split, (batch.obs[:-1], batch.valid)))
    return Update(PPOState(params=params, opt_state=opt_state, obs_stats=obs_stats,
                           reward_scaler=scaler, step=state.step + 1), metrics)


def make_ppo(config: PPOConfig, spec: EnvSpec, *,
             grad_transform: optax.GradientTransformation | None = None,
             split: Split = WHOLE) -> Agent:
    """Builds the PPO agent.

    Args:
        config: hyperparameters.
        spec: the environment's spec: discrete actions, or continuous ones of shape
            ``[A]`` with bounds.
        grad_transform: applied to the gradients before the optimizer (the parallel
            layer passes one that averages them over devices); None: nothing.
        split: on one shard of a data-parallel run, how to see every shard's envs (the
            parallel layer passes it): the running observation and reward statistics
            are then every env's. Default: one device.

    Raises:
        ValueError: for ``normalize_obs`` with frame observations, or continuous actions
            that are not a vector.
    """
    if config.anneal_lr and config.total_updates is None:
        raise ValueError("anneal_lr needs total_updates (the run's env steps divided by "
                         "num_envs * rollout_len; a run fills it in), got total_updates=None")
    if config.normalize_obs and spec.is_image:
        raise ValueError(f"normalize_obs standardizes flat observations, but {spec.task_id} "
                         f"gives frames of shape {spec.obs_shape}; set normalize_obs=false")
    if not spec.discrete and (len(spec.action_shape) != 1 or spec.action_low is None):
        raise ValueError(f"PPO needs discrete actions or a bounded action vector [A], but "
                         f"{spec.task_id} has actions of shape {spec.action_shape}")
    if config.memory is not None:
        from rljax.agents.recurrent import make_recurrent_ppo

        return make_recurrent_ppo(config, spec, grad_transform=grad_transform, split=split)
    return Agent(
        init=functools.partial(init, config, spec, grad_transform=grad_transform),
        act=functools.partial(act, config, spec),
        update=functools.partial(update, config, spec, grad_transform=grad_transform,
                                 split=split),
        policy=functools.partial(policy, config, spec),
        params=policy_params,
    )

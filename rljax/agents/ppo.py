"""Proximal policy optimization (PPO; Schulman et al. 2017, "Proximal Policy
Optimization Algorithms"), the clipped-surrogate variant.

``num_envs`` envs are stepped ``rollout_len`` times with the current policy, which
records each action's log-probability and the critic's value. The learner computes
GAE(lambda) advantages and value targets over the rollout (Schulman et al. 2016), then
runs ``num_epochs`` epochs over the ``T * B`` samples, each epoch a fresh shuffle into
``num_minibatches`` minibatches (every sample once per epoch), with one Adam step per
minibatch on the clipped surrogate, value loss and entropy bonus
(:mod:`rljax.agents.ppo_loss`), gradients clipped to a global norm.

Discrete actions use a categorical policy; continuous ones a diagonal Gaussian with a
learned state-independent log-std (:mod:`rljax.agents.ppo_networks`). Frames get the
Nature CNN torso, flat observations an MLP; actor and critic are separate networks or
share a torso. With ``memory`` the agent is PPO-RNN (:mod:`rljax.agents.recurrent`).

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

from rljax import normalization, validate
from rljax.agents import ppo_networks as heads
from rljax.agents.base import (
    ONE_DEVICE,
    Agent,
    Parallel,
    Update,
    check_action_space,
    check_annealing,
    check_memory_fields,
)
from rljax.agents.ppo_loss import (
    Samples,
    advantages_and_returns,
    loss_terms,
    scale_rewards,
    updated_obs_stats,
)
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks import core as nets
from rljax.records import OnPolicyLoop, shape_field
from rljax.types import (
    WHOLE,
    Array,
    Metrics,
    Params,
    PRNGKey,
    Rollout,
    Split,
    next_values,
    valid_mask,
)


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
        for name in ("lr", "adam_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        # The ratio is clipped to [1 - clip_eps, 1 + clip_eps]: past 1 the range holds
        # negative ratios and clips nothing.
        validate.number("clip_eps", self.clip_eps, low=0.0, high=1.0, low_open=True)
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
        check_annealing(self)

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


class Parts(NamedTuple):
    """PPO's networks and optimizer, built once by :func:`make_ppo`."""

    actor: nets.Network  # the shared actor-critic when critic is None
    critic: nets.Network | None
    optimizer: optax.GradientTransformation


def parts(config: PPOConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The networks and optimizer of ``config`` for ``spec``."""
    outputs = heads.num_outputs(spec)
    optimizer = heads.optimizer(config, parallel)
    if config.shared_torso:
        return Parts(nets.make_actor_critic(spec.obs_shape, outputs, config.hidden_sizes,
                                            config.activation), None, optimizer)
    return Parts(nets.make_policy_network(spec.obs_shape, outputs, config.hidden_sizes,
                                          config.activation),
                 nets.make_value_network(spec.obs_shape, config.hidden_sizes,
                                         config.activation), optimizer)


def forward(parts: Parts, params: Params, obs: Array) -> tuple[Array, Array]:
    """``(logits [..., A] or means [..., A], values [...])`` of prepared observations."""
    if parts.critic is None:
        return parts.actor.apply(params["actor_critic"], obs)
    return parts.actor.apply(params["actor"], obs), parts.critic.apply(params["critic"], obs)


def init(config: PPOConfig, spec: EnvSpec, parts: Parts, key: PRNGKey) -> PPOState:
    obs = heads.example_obs(config, spec)
    actor_key, critic_key = jax.random.split(key)
    if parts.critic is None:
        params = {"actor_critic": parts.actor.init(actor_key, obs)}
    else:
        params = {"actor": parts.actor.init(actor_key, obs),
                  "critic": parts.critic.init(critic_key, obs)}
    params = heads.with_log_std(config, spec, params)
    return PPOState(params=params, opt_state=parts.optimizer.init(params),
                    **heads.init_statistics(config, spec), step=jnp.zeros((), jnp.int32))


def act(config: PPOConfig, spec: EnvSpec, parts: Parts, state: PPOState, obs: Array,
        key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, PPOState]:
    """Actions ``[B]`` (discrete) or ``[B, A]`` (continuous, clipped to the bounds)
    sampled from the policy, with extras ``log_prob [B]``, ``value [B]`` and, for
    continuous actions, the unclipped ``raw_action [B, A]``."""
    del step, new_episode
    head, value = forward(parts, state.params, heads.prepare(config, state.obs_stats, obs))
    action, extras = heads.sample(spec, state.params, head, key)
    return action, {**extras, "value": value}, state


def policy(config: PPOConfig, spec: EnvSpec, parts: Parts, params: Params,
           obs: Array) -> Array:
    """The most likely action (the mean, clipped to the bounds, for continuous actions);
    ``params`` as :func:`policy_params` gives them."""
    head, _ = forward(parts, params["net"], heads.prepare(config, params["obs_stats"], obs))
    return heads.most_likely(spec, head)


def policy_params(state: PPOState) -> dict[str, Any]:
    """What :func:`policy` needs: the networks and the observation statistics."""
    return {"net": state.params, "obs_stats": state.obs_stats}


def minibatch_loss(config: PPOConfig, spec: EnvSpec, parts: Parts, params: Params,
                   minibatch: Samples) -> tuple[Array, Metrics]:
    """PPO's loss on one minibatch ``[N]``; returns ``(loss, metrics)``."""
    head, value = forward(parts, params, minibatch.obs)
    log_prob, entropy = heads.log_prob_and_entropy(spec, params, head, minibatch.action)
    return loss_terms(config, log_prob, entropy, value, minibatch)


def samples(config: PPOConfig, spec: EnvSpec, parts: Parts, state: PPOState, batch: Rollout,
            split: Split = WHOLE) -> tuple[Samples, normalization.RewardScalerState | None]:
    """The rollout's samples (advantages and targets from the critic) and the updated
    reward scaler. ``split``: how a shard of a data-parallel run sees every env (the
    reward scaler's statistics are all envs')."""
    obs = heads.prepare(config, state.obs_stats, batch.obs)
    extras = batch.extras
    # The rollout's values of obs[:-1] were recorded when acting; only the last
    # observation's is missing, and, for envs that reset in the same step, those of the
    # truncated steps' final observations (rljax.types.next_values).
    def value_fn(o: Array) -> Array:
        return forward(parts, state.params, heads.prepare(config, state.obs_stats, o))[1]

    following = next_values(batch, extras["value"], value_fn, spec.max_episode_steps)
    values = (extras["value"], following)
    scaler, reward = state.reward_scaler, batch.reward
    if config.reward_scaling:
        scaler, reward = scale_rewards(config, scaler, batch, split)
    adv, target = advantages_and_returns(config, reward, batch, values)
    action = batch.action if spec.discrete else extras["raw_action"]
    return Samples(obs=obs[:-1], action=action, log_prob=extras["log_prob"],
                   value=extras["value"], advantage=adv, target=target,
                   valid=valid_mask(batch)), scaler


def update(config: PPOConfig, spec: EnvSpec, parts: Parts, split: Split, state: PPOState,
           batch: Rollout, key: PRNGKey) -> Update:
    """``num_epochs`` epochs of minibatch steps on a rollout (extras from :func:`act`).
    On a shard of a data-parallel run (``split``), the running observation and reward
    statistics take in every shard's rollout, so they stay the same on every device and
    equal a one-device run's; the minibatches are the shard's own."""
    data, scaler = samples(config, spec, parts, state, batch, split)
    params, opt_state, metrics = minibatch_epochs(
        key, state.params, state.opt_state, data,
        functools.partial(minibatch_loss, config, spec, parts), parts.optimizer,
        config.num_epochs, config.num_minibatches)
    return Update(PPOState(params=params, opt_state=opt_state,
                           obs_stats=updated_obs_stats(config, state.obs_stats, batch, split),
                           reward_scaler=scaler, step=state.step + 1), metrics)


def check(config: PPOConfig, spec: EnvSpec) -> None:
    """The checks of :func:`make_ppo` (feed-forward and recurrent)."""
    if config.anneal_lr and config.total_updates is None:
        raise ValueError("anneal_lr needs total_updates (the run's env steps divided by "
                         "num_envs * rollout_len; a run fills it in), got total_updates=None")
    if config.normalize_obs and spec.is_image:
        raise ValueError(f"normalize_obs standardizes flat observations, but {spec.task_id} "
                         f"gives frames of shape {spec.obs_shape}; set normalize_obs=false")
    if not spec.discrete:
        check_action_space("PPO", spec, discrete=False)


def make_ppo(config: PPOConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE) -> Agent:
    """Builds the PPO agent (PPO-RNN with ``config.memory``).

    Args:
        config: hyperparameters.
        spec: the environment's spec: discrete actions, or continuous ones of shape
            ``[A]`` with bounds.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`): its
            ``grad_transform`` goes before the optimizer, and through its ``split`` the
            running observation and reward statistics are every shard's envs'. Default:
            one device.

    Raises:
        ValueError: for ``normalize_obs`` with frame observations, or continuous actions
            that are not a vector.
    """
    check(config, spec)
    if config.memory is not None:
        from rljax.agents.recurrent_ppo import make_recurrent_ppo

        return make_recurrent_ppo(config, spec, parallel=parallel)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built),
        update=functools.partial(update, config, spec, built, parallel.split),
        policy=functools.partial(policy, config, spec, built),
        params=policy_params,
    )

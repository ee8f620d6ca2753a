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
share a torso; ``network`` puts a user's torso in place of both
(:mod:`rljax.networks.torso`). With ``memory`` the agent is PPO-RNN (:mod:`rljax.agents.recurrent`).

Optional companions for continuous control (as in OpenAI Baselines' ``VecNormalize``):
observations standardized by their running mean and std, and rewards divided by the
running std of the discounted return. Both statistics live in the agent state and are
updated from each rollout's valid steps in ``update``; ``act`` and ``policy`` use the
statistics as of the last update, and a rollout is learned from with the statistics it
was collected with.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax import normalization
from rljax.agents import ppo_networks as heads
from rljax.agents import run_checks
from rljax.agents.base import (
    ONE_DEVICE,
    Agent,
    Parallel,
    RunLength,
    Update,
    check_action_space,
)
from rljax.agents.ppo_core import PPOConfig, PPOState, policy_params, upgrade_record
from rljax.agents.ppo_loss import (
    Samples,
    advantages_and_returns,
    loss_terms,
    scale_rewards,
    updated_obs_stats,
)
from rljax.agents.recurrent_ppo import make_recurrent_ppo
from rljax.envs.spec import EnvSpec
from rljax.minibatches import minibatch_epochs
from rljax.networks import core as nets
from rljax.networks.torso import make_torso_actor_critic
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

__all__ = ["PPOConfig", "PPOState", "make_ppo", "policy_params", "upgrade_record"]


class Parts(NamedTuple):
    """PPO's networks and optimizer, built once by :func:`make_ppo`."""

    actor: nets.Network  # the shared actor-critic when critic is None
    critic: nets.Network | None
    optimizer: optax.GradientTransformation


def parts(config: PPOConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE,
          run: RunLength | None = None) -> Parts:
    """The networks and optimizer of ``config`` for ``spec``."""
    outputs = heads.num_outputs(spec)
    optimizer = heads.optimizer(config, parallel, run, spec.num_seeds)
    if config.network is not None:  # the user's torso with PPO's output layers
        return Parts(*make_torso_actor_critic(config.network, spec.obs_shape, outputs,
                                              config.shared_torso), optimizer)
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


def gradient_steps(config: PPOConfig) -> tuple[int, int, str]:
    """Gradient steps per loop update, samples per step, and the fields that set them."""
    return (config.num_epochs * config.num_minibatches, config.minibatch_size,
            "num_epochs x num_minibatches")


def check_run(config: PPOConfig, spec: EnvSpec, run: RunLength) -> None:
    """The settings that depend on the run: a learning rate annealed to 0 before the run
    ends is said in one warning."""
    del spec
    run_checks.annealed_early(config.anneal_lr, run)


def anneals(config) -> bool:
    """Whether the run's ``schedule_steps`` applies: the learning rate anneals over it."""
    return config.anneal_lr


def check(config: PPOConfig, spec: EnvSpec) -> None:
    """The checks of :func:`make_ppo` (feed-forward and recurrent)."""
    if config.normalize_obs and spec.is_image:
        raise ValueError(f"normalize_obs standardizes flat observations, but {spec.task_id} "
                         f"gives frames of shape {spec.obs_shape}; set normalize_obs=false")
    if not spec.discrete:
        check_action_space("PPO", spec, discrete=False)


def make_ppo(config: PPOConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the PPO agent (PPO-RNN with ``config.memory``).

    Args:
        config: hyperparameters.
        spec: the environment's spec: discrete actions, or continuous ones of shape
            ``[A]`` with bounds.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`): its
            ``grad_transform`` goes before the optimizer, and through its ``split`` the
            running observation and reward statistics are every shard's envs'. Default:
            one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`), which ``anneal_lr``
            needs; None: an agent outside a run.

    Raises:
        ValueError: for ``normalize_obs`` with frame observations, continuous actions
            that are not a vector, ``anneal_lr`` without ``run``, or a ``network`` whose
            torso does not map observations ``[B, *obs_shape]`` to features ``[B, F]``.
    """
    check(config, spec)
    run_checks.needs_run("PPO", config.anneal_lr, run)
    if config.memory is not None:
        return make_recurrent_ppo(config, spec, parallel=parallel, run=run)
    built = parts(config, spec, parallel, run)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built),
        update=functools.partial(update, config, spec, built, parallel.split),
        policy=functools.partial(policy, config, spec, built),
        params=policy_params,
    )

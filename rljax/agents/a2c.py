"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, "Asynchronous
Methods for Deep Reinforcement Learning", in its batched synchronous form).

``num_envs`` envs are stepped ``rollout_len`` times; the learner computes
bootstrapped n-step returns (or GAE, Schulman et al. 2016) from the critic,
advantages ``A = G - V(s)``, and takes one gradient step on

    policy loss  -log pi(a|s) * A          (A normalized over the batch by default)
    entropy     -entropy_coef * H[pi(.|s)]
    value loss   (G - V(s))^2              (MSE)

By default actor and critic are separate networks with their own Adam optimizer;
``shared_torso=True`` gives one torso with two heads and one optimizer (actor_lr),
the value loss weighted by ``value_coef``; ``network`` puts a user's torso in place of
the MLPs (:mod:`rljax.networks.torso`). Envpool reset steps are masked out.
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
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update, check_action_space
from rljax.envs.spec import EnvSpec
from rljax.gradients import flattened, gradient_step
from rljax.networks import core as nets
from rljax.networks.distributions import categorical_sample, greedy
from rljax.networks.torso import import_string, make_torso_actor_critic
from rljax.records import OnPolicyLoop, shape_field
from rljax.types import Array, Metrics, Params, PRNGKey, Rollout, next_obs
from rljax.validate import Schedule


@dataclasses.dataclass(frozen=True, kw_only=True)
class A2CConfig:
    """A2C hyperparameters (defaults: the rljax reference design).

    Attributes:
        loop: the on-policy loop (:class:`rljax.records.OnPolicyLoop`; ``rollout_len``
            is the n of the n-step return).
        gamma: discount.
        gae_lambda: use GAE(lambda) when set; bootstrapped n-step returns when None.
        normalize_advantages: standardize advantages over each batch.
        advantage_std_floor: with ``normalize_advantages``, divide by the batch's std or
            this floor, whichever is larger (reward units), so that advantages that have
            shrunk to noise (a converged policy whose episodes all run to the time limit)
            are not scaled up to full-size policy updates that sharpen the policy to a
            deterministic one; 0 divides by the std however small.
        entropy_coef: weight of the entropy bonus.
        value_coef: weight of the value loss (shared torso only; with separate
            networks the critic has its own optimizer).
        actor_lr: Adam learning rate of the actor (and of the shared network).
        critic_lr: Adam learning rate of the critic.
        actor_hidden: hidden layer sizes of the actor (shared torso too).
        critic_hidden: hidden layer sizes of the critic.
        activation: hidden activation name.
        shared_torso: one torso with policy and value heads.
        max_grad_norm: clip each network's gradient to this global norm; None: off.
        update_rms_clip: clip each network's Adam update (before the learning rate) to
            this root-mean-square, Adafactor's update clipping (Shazeer and Stern 2018):
            after a long stretch of tiny gradients (a converged policy) Adam's second
            moment has decayed, and the first large gradients (a failed episode) would
            otherwise move every parameter by up to ~30 learning rates per update;
            None: off.
        logit_penalty: weight of the mean squared centred logit (each state's logits
            minus their mean) in the actor's loss. A softmax that saturates has no
            gradient (``p (1 - p)`` vanishes, and ``1 - p`` is 0 in float32 past a logit
            gap of ~17), so a policy sharpened to a deterministic one that then turns
            wrong never learns back; this penalty's gradient grows with the logits and
            holds them where the policy gradient still acts. 0: off.
        network: a torso of the user's in place of the MLPs (or CNN): a flax module class
            or its import string ``"pkg.mod:Class"`` (kept as the string;
            :mod:`rljax.networks.torso`); A2C puts its policy and value layers on its
            features (one torso for both with ``shared_torso``, else one each); the
            hidden sizes are then unused. None: the MLPs.
        lr_factor: a multiplier of both learning rates, piecewise linear in loop updates
            (``((update, factor), ...)``, :func:`rljax.exploration.piecewise_linear`;
            the last factor holds from its update on); None: constant learning rates.
    """

    loop: OnPolicyLoop = OnPolicyLoop(num_envs=16, rollout_len=5)
    gamma: float = 0.99
    gae_lambda: float | None = None
    normalize_advantages: bool = True
    advantage_std_floor: float | None = None
    entropy_coef: float = 0.005
    value_coef: float = 0.5
    actor_lr: float = 5e-4
    critic_lr: float = 7e-4
    actor_hidden: tuple[int, ...] = shape_field((128, 128), network=True)
    critic_hidden: tuple[int, ...] = shape_field((64, 64), network=True)
    activation: str = "relu"
    shared_torso: bool = False
    max_grad_norm: float | None = None
    update_rms_clip: float | None = None
    logit_penalty: float | None = None
    network: type | str | None = None  # a class is kept as its import string
    lr_factor: Schedule | None = None

    def __post_init__(self):
        for name in ("actor_lr", "critic_lr"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("gae_lambda", self.gae_lambda, low=0.0, high=1.0, optional=True)
        validate.number("entropy_coef", self.entropy_coef, low=0.0, high=1e3)
        validate.number("advantage_std_floor", self.advantage_std_floor, low=0.0, high=1e12,
                        optional=True)
        validate.number("value_coef", self.value_coef, low=0.0, high=1e3)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.number("update_rms_clip", self.update_rms_clip, low=1e-12, high=1e12,
                        optional=True)
        validate.number("logit_penalty", self.logit_penalty, low=0.0, high=1e3, optional=True)
        if self.lr_factor is not None:
            validate.schedule("lr_factor", self.lr_factor, low=0.0, high=1e3)
        validate.sizes("actor_hidden", self.actor_hidden)
        validate.sizes("critic_hidden", self.critic_hidden)
        validate.choice("activation", self.activation, tuple(nets.ACTIVATIONS))
        for name in ("normalize_advantages", "shared_torso"):
            validate.boolean(name, getattr(self, name))
        object.__setattr__(self, "network", import_string(self.network))


@struct.dataclass
class A2CState:
    """Train state: parameters, optimizer state and number of updates done."""

    params: Params
    opt_state: optax.OptState
    step: Array


class Parts(NamedTuple):
    """A2C's networks and optimizer, built once by :func:`make_a2c`."""

    actor: nets.Network  # the shared actor-critic when critic is None
    critic: nets.Network | None
    optimizer: optax.GradientTransformation


def parts(config: A2CConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The networks and optimizer of ``config`` for ``spec``."""
    if config.network is not None:  # the user's torso with A2C's output layers
        actor, critic = make_torso_actor_critic(config.network, spec.obs_shape,
                                                spec.num_actions, config.shared_torso)
    elif config.shared_torso:
        actor = nets.make_actor_critic(spec.obs_shape, spec.num_actions, config.actor_hidden,
                                       config.activation)
        critic = None
    else:
        actor = nets.make_policy_network(spec.obs_shape, spec.num_actions, config.actor_hidden,
                                         config.activation)
        critic = nets.make_value_network(spec.obs_shape, config.critic_hidden,
                                         config.activation)
    return Parts(actor, critic, parallel.optimizer(_optimizer(config)))


def _optimizer(config: A2CConfig) -> optax.GradientTransformation:
    def adam(lr):
        lr = exploration.scaled_learning_rate(lr, config.lr_factor)
        clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
        step = optax.adam(lr) if config.update_rms_clip is None else optax.chain(
            optax.scale_by_adam(), optax.clip_by_block_rms(config.update_rms_clip),
            optax.scale_by_learning_rate(lr))
        # One flat vector per network: a handful of kernels instead of several per
        # parameter array, which is most of an update's cost on XLA:CPU (and the block
        # whose update RMS update_rms_clip bounds is the whole network).
        return flattened(optax.chain(*clip, step))

    if config.shared_torso:
        return adam(config.actor_lr)
    labels = lambda params: {name: jax.tree.map(lambda _, n=name: n, sub)
                             for name, sub in params.items()}
    return optax.multi_transform(
        {"actor": adam(config.actor_lr), "critic": adam(config.critic_lr)}, labels)


def _logits(parts: Parts, params: Params, obs: Array) -> Array:
    if parts.critic is None:
        return parts.actor.apply(params, obs)[0]
    return parts.actor.apply(params["actor"], obs)


def init(spec: EnvSpec, parts: Parts, key: PRNGKey) -> A2CState:
    obs = jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype)
    actor_key, critic_key = jax.random.split(key)
    if parts.critic is None:
        params = parts.actor.init(actor_key, obs)
    else:
        params = {"actor": parts.actor.init(actor_key, obs),
                  "critic": parts.critic.init(critic_key, obs)}
    opt_state = parts.optimizer.init(params)
    return A2CState(params=params, opt_state=opt_state, step=jnp.zeros((), jnp.int32))


def act(parts: Parts, state: A2CState, obs: Array, key: PRNGKey, step: Array,
        new_episode: Array) -> tuple[Array, dict, A2CState]:
    """Actions ``[B]`` sampled from the policy."""
    del step, new_episode
    return categorical_sample(key, _logits(parts, state.params, obs)), {}, state


def policy(parts: Parts, params: Params, obs: Array) -> Array:
    return greedy(_logits(parts, params, obs))


def advantages_and_returns(config: A2CConfig, batch: Rollout,
                           values: Array | tuple[Array, Array]) -> tuple[Array, Array]:
    """Advantages and value targets ``[T, B]`` from ``values [T + 1, B]`` (the values of
    ``batch.obs``), or from ``(v_tm1, v_t)``, both ``[T, B]``: the values of the
    observations acted in and of those each step bootstraps from."""
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    v_tm1, v_t = values if isinstance(values, tuple) else (values[:-1], values[1:])
    if config.gae_lambda is None:
        returns = jax.vmap(losses.n_step_returns, in_axes=1, out_axes=1)(
            batch.reward, discount, end, v_t)
        adv = returns - v_tm1
    else:
        gae = functools.partial(losses.gae_advantages, lambda_=config.gae_lambda)
        adv = jax.vmap(gae, in_axes=1, out_axes=1)(batch.reward, discount, end, v_tm1, v_t)
        returns = adv + v_tm1
    return jax.lax.stop_gradient(adv), jax.lax.stop_gradient(returns)


def loss(config: A2CConfig, parts: Parts, params: Params,
         batch: Rollout) -> tuple[Array, Metrics]:
    """A2C loss on a rollout; returns ``(loss, metrics)``."""
    # Envs that reset in the same step bootstrap from the final observations instead of
    # obs[1:] (rljax.types.next_obs); values[1:] are then those.
    final = None if batch.final_obs is None else next_obs(batch)
    if parts.critic is None:
        logits, values = parts.actor.apply(params, batch.obs)
        logits = logits[:-1]
        if final is not None:
            values = (values[:-1], parts.actor.apply(params, final)[1])
    else:  # the actor never needs the last observation
        logits = _logits(parts, params, batch.obs[:-1])
        critic = functools.partial(parts.critic.apply, params["critic"])
        values = critic(batch.obs) if final is None else (critic(batch.obs[:-1]),
                                                            critic(final))
    adv, returns = advantages_and_returns(config, batch, values)
    v_tm1 = values[0] if isinstance(values, tuple) else values[:-1]
    mask = batch.valid
    if config.normalize_advantages:
        adv = losses.normalize(adv, mask, min_std=config.advantage_std_floor or 0.0)
    mean = functools.partial(losses.masked_mean, mask=mask)
    pg = mean(losses.policy_gradient_loss(logits, batch.action, adv))
    entropy = -mean(losses.entropy_loss(logits))
    vloss = mean(losses.value_loss(v_tm1, returns))
    value_weight = config.value_coef if config.shared_torso else 1.0
    total = pg - config.entropy_coef * entropy + value_weight * vloss
    metrics = {"loss": total, "policy_loss": pg, "value_loss": vloss, "entropy": entropy,
               "value_mean": mean(v_tm1)}
    if config.logit_penalty:
        centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
        squared = mean(jnp.mean(jnp.square(centred), axis=-1))
        total = total + config.logit_penalty * squared
        metrics.update(loss=total, logit_sq=squared)
    return total, metrics


def update(config: A2CConfig, parts: Parts, state: A2CState, batch: Rollout,
           key: PRNGKey) -> Update:
    """One gradient step on a rollout."""
    del key
    step = gradient_step(functools.partial(loss, config, parts), parts.optimizer,
                         state.params, state.opt_state, batch)
    metrics = {**step.aux, "grad_norm": step.grad_norm}
    return Update(A2CState(params=step.params, opt_state=step.opt_state,
                           step=state.step + 1), metrics)


def make_a2c(config: A2CConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the A2C agent for a discrete-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`; its
            ``grad_transform`` goes before the optimizers); default: one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`); no setting
            of this agent depends on it.

    Raises:
        ValueError: if the environment's actions are continuous.
    """
    check_action_space("A2C", spec, discrete=True)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, spec, built),
        act=functools.partial(act, built),
        update=functools.partial(update, config, built),
        policy=functools.partial(policy, built),
        params=lambda state: state.params,
    )

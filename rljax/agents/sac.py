"""Soft actor-critic with automatic entropy tuning (SAC; Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications").

A tanh-squashed Gaussian policy ``pi(a|s)`` (:mod:`rljax.networks.tanh_gaussian`: a
state-dependent mean and log-std, the log-std clipped to ``[log_std_min, log_std_max]``,
actions rescaled to the env's bounds and the log-density corrected for both), two critics
``Q_1, Q_2`` with target copies and a temperature ``alpha = exp(log_alpha)`` learn from
replay (uniform by default; prioritized and n-step through the config). Each update, on one
batch:

    critics      a' ~ pi(.|s'),  y = r + discount * (min_j Q'_j(s', a') - alpha log pi(a'|s'))
                 loss sum_j mean_i w_i 0.5 (y_i - Q_j(s_i, a_i))^2               (eq. 3, 5)
    actor        a ~ pi(.|s) reparameterised,
                 loss mean_i alpha log pi(a_i|s_i) - min_j Q_j(s_i, a_i)   (new critics; eq. 7)
    temperature  loss mean_i -log_alpha (log pi(a_i|s_i) + target_entropy)  (eq. 18, in log alpha)
    targets      theta'_j <- (1 - tau) theta'_j + tau theta_j

``alpha`` in the critic and actor losses is the value before this update's temperature
step; the temperature step uses the actor step's samples (their log-densities under the
actor before its step). ``w_i`` are the importance weights of prioritized replay (all 1
when uniform) and ``discount = gamma^m (1 - terminated)``. The default target entropy is
``-A`` for ``A`` action dimensions (the paper's heuristic). The entropy is that of the
action in the env's units (the log-density includes the rescaling's ``-sum log h``); for
the ``[-1, 1]`` boxes of the MuJoCo tasks that is the squashed Gaussian's own.

Priorities: ``update`` returns the first critic's TD errors ``y - Q_1(s, a)``. ``td_error``
(initial priorities) must not draw noise, so it bootstraps from the squashed mean ``a'``
of the policy and its log-density: one fixed point in place of the soft value's
expectation over ``pi``, good enough to rank new transitions.

Exploration is the policy's own sampling; before it, the first ``random_steps`` env steps
(rounded up to whole loop updates) take uniform random actions. Evaluation (``policy``)
takes the squashed mean.

Defaults follow the paper's hyperparameter table: 256-256 ReLU networks, Adam
3e-4 for actor, critics and temperature, batch 256, tau 0.005, gamma 0.99, one gradient
step per env step; the initial temperature 1 and the log-std clip ``[-20, 2]`` are those of
common implementations; the 10,000 initial random steps and learning from then on are
rljax's choice (the TD3 authors use 25,000, CleanRL 5,000).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import validate
from rljax.agents import run_checks
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update
from rljax.agents.continuous import (
    adam,
    bounds,
    check_continuous,
    critic_step,
    example_inputs,
    own_copy,
    with_random_phase,
)
from rljax.envs.spec import EnvSpec
from rljax.gradients import gradient_step
from rljax.losses.continuous import sac_actor_loss, sac_critic_target, temperature_loss
from rljax.networks import Network, tanh_gaussian
from rljax.networks.continuous import TwinCritic, make_gaussian_actor, make_twin_critic
from rljax.networks.core import ACTIVATIONS
from rljax.networks.torso import import_string, user_torso
from rljax.records import OffPolicyLoop, Replay, shape_field
from rljax.targets import soft_update
from rljax.types import Array, PRNGKey, Sample


@dataclasses.dataclass(frozen=True, kw_only=True)
class SACConfig:
    """SAC hyperparameters (defaults: see the module docstring).

    ``alpha`` is prioritized replay's priority exponent, as in every rljax off-policy
    config; the entropy temperature is set by the ``temperature`` fields.

    Attributes:
        loop: the off-policy loop (:class:`rljax.records.OffPolicyLoop`), with the
            random initial phase of ``random_steps`` env steps.
        replay: the replay (:class:`rljax.records.Replay`).
        gamma: discount.
        actor_hidden: policy hidden layer sizes.
        critic_hidden: hidden layer sizes of each critic.
        activation: hidden activation name.
        actor_lr: policy Adam learning rate.
        critic_lr: critics' Adam learning rate.
        temperature_lr: Adam learning rate of ``log_alpha``.
        tau: soft target-update rate of the critics.
        init_temperature: the temperature ``alpha`` at the start.
        learn_temperature: tune ``alpha`` toward ``target_entropy``; False: keep
            ``init_temperature``.
        target_entropy: the entropy the temperature steers to; None: ``-A``.
        log_std_min: lower clip of the policy's log standard deviation.
        log_std_max: upper clip.
        network: a torso of the user's encoding the observation: a flax module class or
            its import string ``"pkg.mod:Class"`` (kept as the string;
            :mod:`rljax.networks.torso`). The policy's mean and log-std layers go on its
            features (``actor_hidden`` unused); each critic's ``critic_hidden`` layers on
            its features concatenated with the action. Each network has a torso of its
            own. None: the MLPs.
    """

    loop: OffPolicyLoop = OffPolicyLoop(random_steps=10_000)
    replay: Replay = Replay(batch_size=256, buffer_size=1_000_000, learning_starts=10_000)
    gamma: float = 0.99
    actor_hidden: tuple[int, ...] = shape_field((256, 256), network=True)
    critic_hidden: tuple[int, ...] = shape_field((256, 256), network=True)
    activation: str = "relu"
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    tau: float = 0.005
    init_temperature: float = 1.0
    learn_temperature: bool = True
    target_entropy: float | None = None
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        for name in ("actor_lr", "critic_lr", "temperature_lr", "init_temperature"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("tau", self.tau, low=0.0, high=1.0)
        validate.number("target_entropy", self.target_entropy, low=-1e6, high=1e6,
                        optional=True)
        validate.number("log_std_min", self.log_std_min, low=-100.0, high=100.0)
        validate.number("log_std_max", self.log_std_max, low=self.log_std_min, low_open=True,
                        high=100.0, note="above log_std_min")
        validate.boolean("learn_temperature", self.learn_temperature)
        validate.sizes("actor_hidden", self.actor_hidden)
        validate.sizes("critic_hidden", self.critic_hidden)
        validate.choice("activation", self.activation, tuple(ACTIVATIONS))
        object.__setattr__(self, "network", import_string(self.network))


@struct.dataclass
class SACState:
    """Train state.

    Attributes:
        actor: policy variables ``{"params": ...}``.
        critic, target_critic: twin-critic variables, every leaf with a leading axis of 2.
        log_alpha: log of the temperature, scalar.
        actor_opt, critic_opt, temperature_opt: Adam states.
        step: gradient steps done.
    """

    actor: Any
    critic: Any
    target_critic: Any
    log_alpha: Array
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    temperature_opt: optax.OptState
    step: Array


class Parts(NamedTuple):
    """SAC's networks and optimizers, built once by :func:`make_sac`."""

    actor: Network
    critic: TwinCritic
    actor_opt: optax.GradientTransformation
    critic_opt: optax.GradientTransformation
    temperature_opt: optax.GradientTransformation


def parts(config: SACConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The networks and optimizers of ``config`` for ``spec``."""
    torso = user_torso(config.network, spec.obs_shape)
    return Parts(make_gaussian_actor(spec.action_shape[0], hidden_sizes=config.actor_hidden,
                                     activation=config.activation,
                                     log_std_min=config.log_std_min,
                                     log_std_max=config.log_std_max, torso=torso),
                 make_twin_critic(hidden_sizes=config.critic_hidden,
                                  activation=config.activation, torso=torso),
                 adam(config.actor_lr, parallel), adam(config.critic_lr, parallel),
                 adam(config.temperature_lr, parallel))


def target_entropy(config: SACConfig, spec: EnvSpec) -> float:
    """``config.target_entropy``, or ``-A`` when it is None."""
    if config.target_entropy is None:
        return -float(spec.action_shape[0])
    return float(config.target_entropy)


def init(config: SACConfig, spec: EnvSpec, parts: Parts, key: PRNGKey) -> SACState:
    actor_key, critic_key = jax.random.split(key)
    obs, action = example_inputs(spec)
    actor = parts.actor.init(actor_key, obs)
    critic = parts.critic.init(critic_key, obs, action)
    log_alpha = jnp.asarray(math.log(config.init_temperature), jnp.float32)
    return SACState(actor=actor, critic=critic, target_critic=own_copy(critic),
                    log_alpha=log_alpha, actor_opt=parts.actor_opt.init(actor["params"]),
                    critic_opt=parts.critic_opt.init(critic["params"]),
                    temperature_opt=parts.temperature_opt.init(log_alpha),
                    step=jnp.zeros((), jnp.int32))


def sample(spec: EnvSpec, parts: Parts, params: Any, obs: Array,
           key: PRNGKey) -> tuple[Array, Array]:
    """Policy samples ``(action [N, A], log pi(action|obs) [N])``, reparameterised in
    ``params``."""
    mean, log_std = parts.actor.apply(params, obs)
    low, high = bounds(spec)
    return tanh_gaussian.sample_and_log_prob(key, mean, log_std, low, high)


def policy(config: SACConfig, spec: EnvSpec, parts: Parts, params: Any, obs: Array) -> Array:
    """Noise-free actions ``[N, A]``: the squashed mean."""
    del config
    mean, _ = parts.actor.apply(params, obs)
    low, high = bounds(spec)
    return tanh_gaussian.deterministic_action(mean, low, high)


def act(config: SACConfig, spec: EnvSpec, parts: Parts, state: SACState, obs: Array,
        key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, SACState]:
    """Policy samples ``[B, A]``, or uniform random actions in the random phase."""
    del new_episode
    sample_key, random_key = jax.random.split(key)
    action, _ = sample(spec, parts, state.actor, obs, sample_key)
    return with_random_phase(config, spec, action, random_key, step), {}, state


def critic_target(config: SACConfig, spec: EnvSpec, parts: Parts, state: SACState,
                  transition: Any, key: PRNGKey | None = None) -> Array:
    """Soft clipped double-Q target ``y [N]`` with the current temperature; ``key``: one
    policy sample ``a' ~ pi(.|s')``; None: the squashed mean (see the module docstring)."""
    del config
    next_obs = transition.next_obs
    if key is None:
        mean, log_std = parts.actor.apply(state.actor, next_obs)
        low, high = bounds(spec)
        a_t = tanh_gaussian.deterministic_action(mean, low, high)
        log_prob_t = tanh_gaussian.log_prob(mean, log_std, a_t, low, high)
    else:
        a_t, log_prob_t = sample(spec, parts, state.actor, next_obs, key)
    q_t = parts.critic.apply(state.target_critic, next_obs, a_t)
    return sac_critic_target(transition.reward, transition.discount, q_t[0], q_t[1],
                             log_prob_t, jnp.exp(state.log_alpha))


def actor_loss(spec: EnvSpec, parts: Parts, params: Any, state: SACState, obs: Array,
               key: PRNGKey) -> tuple[Array, Array]:
    """``mean alpha log pi(a|s) - min_j Q_j(s, a)`` with ``a ~ pi(.|s)`` from ``key`` and
    the critics of ``state``; returns ``(loss, log_prob [N])``."""
    action, log_prob = sample(spec, parts, {"params": params}, obs, key)
    q = parts.critic.apply(state.critic, obs, action)
    loss = sac_actor_loss(q[0], q[1], log_prob, jnp.exp(state.log_alpha))
    return jnp.mean(loss), log_prob


def _temperature_loss(config: SACConfig, spec: EnvSpec, log_alpha: Array,
                      log_prob: Array) -> Array:
    return jnp.mean(temperature_loss(log_alpha, log_prob, target_entropy(config, spec)))


def update(config: SACConfig, spec: EnvSpec, parts: Parts, state: SACState, batch: Sample,
           key: PRNGKey) -> Update:
    """Critic step (next actions from ``jax.random.split(key)[0]``), actor step on the new
    critics (samples from ``[1]``), temperature step, soft update of the target critics."""
    target_key, actor_key = jax.random.split(key)
    target = critic_target(config, spec, parts, state, batch.transition, target_key)
    critic, critic_opt_state, metrics, td = critic_step(
        parts.critic, parts.critic_opt, state.critic, state.critic_opt, batch, target)
    state = state.replace(critic=critic, critic_opt=critic_opt_state)

    step = gradient_step(functools.partial(actor_loss, spec, parts), parts.actor_opt,
                         state.actor["params"], state.actor_opt, state, batch.transition.obs,
                         actor_key)
    log_prob = step.aux
    state = state.replace(actor={"params": step.params}, actor_opt=step.opt_state)
    alpha = jnp.exp(state.log_alpha)
    metrics = {**metrics, "actor_loss": step.loss, "actor_grad_norm": step.grad_norm,
               "alpha": alpha, "entropy": -jnp.mean(log_prob)}

    if config.learn_temperature:
        step = gradient_step(functools.partial(_temperature_loss, config, spec),
                             parts.temperature_opt, state.log_alpha, state.temperature_opt,
                             log_prob, has_aux=False)
        state = state.replace(log_alpha=step.params, temperature_opt=step.opt_state)
        metrics["temperature_loss"] = step.loss
    state = state.replace(target_critic=soft_update(state.target_critic, state.critic,
                                                    config.tau),
                          step=state.step + 1)
    return Update(state, metrics, td)


def td_error(config: SACConfig, spec: EnvSpec, parts: Parts, state: SACState,
             transition: Any) -> Array:
    """``y - Q_1(s, a)`` ``[N]`` bootstrapped from the squashed mean (initial priorities)."""
    q1 = parts.critic.apply_first(state.critic, transition.obs, transition.action)
    return critic_target(config, spec, parts, state, transition) - q1


def check_run(config: SACConfig, spec: EnvSpec, run: RunLength) -> None:
    """Refuses settings with which this run would never update a network
    (:mod:`rljax.agents.run_checks`)."""
    run_checks.soft_targets(config.tau)
    run_checks.target_entropy(config.target_entropy, spec)


def make_sac(config: SACConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the SAC agent for a continuous-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`; its
            ``grad_transform`` goes before each of the three optimizers); default: one
            device.
        run: the run's length (:class:`rljax.agents.base.RunLength`); no setting
            of this agent depends on it.

    Raises:
        ValueError: if the environment's actions are discrete or not a 1-D box.
    """
    check_continuous("SAC", spec)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built),
        update=functools.partial(update, config, spec, built),
        policy=functools.partial(policy, config, spec, built),
        params=lambda state: state.actor,
        td_error=functools.partial(td_error, config, spec, built),
    )

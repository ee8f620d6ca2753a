"""Twin delayed deep deterministic policy gradient (TD3; Fujimoto et al. 2018,
"Addressing Function Approximation Error in Actor-Critic Methods").

A deterministic actor ``mu(s)`` (tanh to the action bounds) and two critics ``Q_1, Q_2``
learn from replay (uniform by default; prioritized and n-step through the config):

    target   a' = clip(mu'(s') + clip(eps, -c h, c h), low, high),  eps ~ N(0, (sigma h)^2)
             y  = r + discount * min(Q'_1(s', a'), Q'_2(s', a'))          (eq. 10, sec. 5.3)
    critics  loss sum_j mean_i w_i 0.5 (y_i - Q_j(s_i, a_i))^2
    actor    loss mean_i -Q_1(s_i, mu(s_i))       every policy_delay-th step, on the new critics
    targets  theta' <- (1 - tau) theta' + tau theta   actor and both critics, with the actor step

``h = (high - low) / 2`` is the action half-range: the paper's noise scales (exploration
``N(0, 0.1^2)``, target smoothing ``sigma = 0.2`` clipped at ``c = 0.5``) are for actions
in ``[-1, 1]``, and rljax multiplies them by each dimension's half-range, so they mean the
same on any box. ``w_i`` are the importance weights of prioritized replay (all 1 when
uniform) and ``discount = gamma^m (1 - terminated)``. The critic loss is half the squared
error per critic (the authors' code uses the full mean squared error; Adam's steps do not
depend on that factor).

Delayed updates (sec. 5.2): the actor and all three targets move on critic steps ``0,
policy_delay, 2 policy_delay, ...`` (:func:`rljax.losses.continuous.delayed_update`), so
``N`` updates make ``ceil(N / policy_delay)`` actor steps. Metrics ``actor_loss`` and
``actor_grad_norm`` are 0 on skipped steps and ``policy_delay`` times the value on actor
steps, so that their mean over a multiple of ``policy_delay`` steps (what the loop reports
over its gradient steps) is the actor steps' mean, as in :mod:`rljax.agents.ddpg`.

Priorities: ``update`` returns the first critic's TD errors ``y - Q_1(s, a)``, and
``td_error`` (initial priorities) the same without target smoothing noise.

Exploration: Gaussian noise ``N(0, (exploration_noise h)^2)`` on the actor's action, clipped
to the bounds; before that, the first ``random_steps`` env steps (rounded up to whole loop
updates) take uniform random actions, the paper's initial exploration phase.

Defaults are those of the authors' published code, which revised the paper's: 256-256 ReLU
networks and Adam 3e-4 for actor and critics (the paper: 400-300 networks, Adam 1e-3,
batch 100), batch 256, tau 0.005, gamma 0.99, 25,000 initial random steps with learning
from then on, one env and one gradient step per env step.

What DDPG, TD3 and SAC share (twin critics, target smoothing, delayed actor steps, the
random initial phase) lives in :mod:`rljax.agents.continuous`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, validate
from rljax.agents import run_checks
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update
from rljax.agents.continuous import (
    adam,
    bounds,
    check_continuous,
    critic_step,
    delayed_actor_step,
    example_inputs,
    own_copy,
    smooth_target_action,
    soft_update_targets,
    with_random_phase,
)
from rljax.envs.spec import EnvSpec
from rljax.gradients import gradient_step
from rljax.losses import ddpg_actor_loss
from rljax.losses.continuous import clipped_double_q_target
from rljax.networks import Network, make_ddpg_actor
from rljax.networks.continuous import TwinCritic, make_twin_critic
from rljax.networks.core import ACTIVATIONS
from rljax.networks.torso import import_string, user_torso
from rljax.records import OffPolicyLoop, Replay, shape_field
from rljax.types import Array, Metrics, PRNGKey, Sample


@dataclasses.dataclass(frozen=True, kw_only=True)
class TD3Config:
    """TD3 hyperparameters (defaults: the authors' code, see the module docstring).

    Attributes:
        loop: the off-policy loop (:class:`rljax.records.OffPolicyLoop`), with the
            random initial phase of ``random_steps`` env steps.
        replay: the replay (:class:`rljax.records.Replay`).
        gamma: discount.
        actor_hidden: actor hidden layer sizes.
        critic_hidden: hidden layer sizes of each critic.
        activation: hidden activation name.
        actor_lr: actor Adam learning rate.
        critic_lr: critics' Adam learning rate.
        tau: soft target-update rate.
        policy_delay: critic steps per actor step and target update.
        exploration_noise: std of the Gaussian action noise, in half-ranges.
        target_noise: std of the target-smoothing noise, in half-ranges.
        target_noise_clip: that noise is clipped to this many half-ranges.
        network: a torso of the user's encoding the observation: a flax module class or
            its import string ``"pkg.mod:Class"`` (kept as the string;
            :mod:`rljax.networks.torso`). The actor's output layer goes on its features
            (``actor_hidden`` unused); each critic's ``critic_hidden`` layers on its
            features concatenated with the action. Each network has a torso of its own.
            None: the MLPs.
    """

    loop: OffPolicyLoop = OffPolicyLoop(random_steps=25_000)
    replay: Replay = Replay(batch_size=256, buffer_size=1_000_000, learning_starts=25_000)
    gamma: float = 0.99
    actor_hidden: tuple[int, ...] = shape_field((256, 256), network=True)
    critic_hidden: tuple[int, ...] = shape_field((256, 256), network=True)
    activation: str = "relu"
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    tau: float = 0.005
    policy_delay: int = 2
    exploration_noise: float = 0.1
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.integer("policy_delay", self.policy_delay, low=1)
        for name in ("actor_lr", "critic_lr"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("tau", self.tau, low=0.0, high=1.0)
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            validate.number(name, getattr(self, name), low=0.0, high=1e6)
        validate.sizes("actor_hidden", self.actor_hidden)
        validate.sizes("critic_hidden", self.critic_hidden)
        validate.choice("activation", self.activation, tuple(ACTIVATIONS))
        object.__setattr__(self, "network", import_string(self.network))


@struct.dataclass
class TD3State:
    """Train state.

    Attributes:
        actor, target_actor: actor variables ``{"params": ...}``.
        critic, target_critic: twin-critic variables, every leaf with a leading axis of 2.
        actor_opt, critic_opt: Adam states.
        step: critic steps done.
    """

    actor: Any
    critic: Any
    target_actor: Any
    target_critic: Any
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    step: Array


class Parts(NamedTuple):
    """TD3's networks and optimizers, built once by :func:`make_td3`."""

    actor: Network
    critic: TwinCritic
    actor_opt: optax.GradientTransformation
    critic_opt: optax.GradientTransformation


def parts(config: TD3Config, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The networks and optimizers of ``config`` for ``spec``."""
    torso = user_torso(config.network, spec.obs_shape)
    return Parts(make_ddpg_actor(spec.action_low, spec.action_high,
                                 hidden_sizes=config.actor_hidden,
                                 activation=config.activation, batch_norm=False, torso=torso),
                 make_twin_critic(hidden_sizes=config.critic_hidden,
                                  activation=config.activation, torso=torso),
                 adam(config.actor_lr, parallel), adam(config.critic_lr, parallel))


def init(config: TD3Config, spec: EnvSpec, parts: Parts, key: PRNGKey) -> TD3State:
    del config
    actor_key, critic_key = jax.random.split(key)
    obs, action = example_inputs(spec)
    actor = parts.actor.init(actor_key, obs)
    critic = parts.critic.init(critic_key, obs, action)
    return TD3State(actor=actor, critic=critic, target_actor=own_copy(actor),
                    target_critic=own_copy(critic),
                    actor_opt=parts.actor_opt.init(actor["params"]),
                    critic_opt=parts.critic_opt.init(critic["params"]),
                    step=jnp.zeros((), jnp.int32))


def policy(config: TD3Config, spec: EnvSpec, parts: Parts, params: Any, obs: Array) -> Array:
    """Noise-free actions ``[N, A]``."""
    del config
    low, high = bounds(spec)
    return jnp.clip(parts.actor.apply(params, obs), low, high)


def act(config: TD3Config, spec: EnvSpec, parts: Parts, state: TD3State, obs: Array,
        key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, TD3State]:
    """Exploring actions ``[B, A]``: ``clip(mu(s) + N(0, (sigma h)^2), low, high)``, or
    uniform ones in the random phase."""
    del new_episode
    noise_key, random_key = jax.random.split(key)
    low, high = bounds(spec)
    mu = policy(config, spec, parts, state.actor, obs)
    noise = exploration.gaussian_noise(noise_key, mu.shape, config.exploration_noise)
    action = jnp.clip(mu + noise * (high - low) / 2, low, high)
    return with_random_phase(config, spec, action, random_key, step), {}, state


def critic_target(config: TD3Config, spec: EnvSpec, parts: Parts, state: TD3State,
                  transition: Any, key: PRNGKey | None = None) -> Array:
    """Clipped double-Q target ``y [N]`` of n-step transitions; ``key``: with target
    policy smoothing (noise ``target_noise * h * jax.random.normal(key, [N, A])``),
    None: without."""
    a_t = parts.actor.apply(state.target_actor, transition.next_obs)
    if key is not None:
        a_t = smooth_target_action(key, a_t, config.target_noise, config.target_noise_clip,
                                   spec, half_ranges=True)
    else:
        a_t = jnp.clip(a_t, *bounds(spec))
    q_t = parts.critic.apply(state.target_critic, transition.next_obs, a_t)
    return clipped_double_q_target(transition.reward, transition.discount, q_t[0], q_t[1])


def actor_loss(parts: Parts, params: Any, state: TD3State, obs: Array) -> Array:
    """``mean -Q_1(s, mu(s))`` with the critics of ``state``."""
    q1 = parts.critic.apply_first(state.critic, obs, parts.actor.apply({"params": params}, obs))
    return jnp.mean(ddpg_actor_loss(q1))


def _actor_step(config: TD3Config, parts: Parts, state: TD3State,
                obs: Array) -> tuple[TD3State, Metrics]:
    """Actor step on the current critics, then soft updates of all targets."""
    step = gradient_step(functools.partial(actor_loss, parts), parts.actor_opt,
                         state.actor["params"], state.actor_opt, state, obs, has_aux=False)
    state = state.replace(actor={"params": step.params}, actor_opt=step.opt_state)
    return (soft_update_targets(state, config.tau),
            {"actor_loss": step.loss, "actor_grad_norm": step.grad_norm})


def update(config: TD3Config, spec: EnvSpec, parts: Parts, state: TD3State, batch: Sample,
           key: PRNGKey) -> Update:
    """One critic step toward the smoothed clipped double-Q target (noise from ``key``),
    then, every ``policy_delay``-th step, an actor step and the target updates."""
    target = critic_target(config, spec, parts, state, batch.transition, key)
    critic, critic_opt_state, metrics, td = critic_step(
        parts.critic, parts.critic_opt, state.critic, state.critic_opt, batch, target)
    state = state.replace(critic=critic, critic_opt=critic_opt_state)
    state, actor_metrics = delayed_actor_step(
        state.step, config.policy_delay, functools.partial(_actor_step, config, parts), state,
        batch.transition.obs)
    state = state.replace(step=state.step + 1)
    return Update(state, {**metrics, **actor_metrics}, td)


def td_error(config: TD3Config, spec: EnvSpec, parts: Parts, state: TD3State,
             transition: Any) -> Array:
    """``y - Q_1(s, a)`` ``[N]`` without smoothing noise (initial priorities)."""
    q1 = parts.critic.apply_first(state.critic, transition.obs, transition.action)
    return critic_target(config, spec, parts, state, transition) - q1


def check_run(config: TD3Config, spec: EnvSpec, run: RunLength) -> None:
    """Refuses settings with which this run would never update a network
    (:mod:`rljax.agents.run_checks`)."""
    run_checks.soft_targets(config.tau)
    run_checks.policy_delay(config.policy_delay, config.loop.grad_steps, run)


def make_td3(config: TD3Config, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the TD3 agent for a continuous-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`; its
            ``grad_transform`` goes before both optimizers); default: one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`); no setting
            of this agent depends on it.

    Raises:
        ValueError: if the environment's actions are discrete or not a 1-D box.
    """
    check_continuous("TD3", spec)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built),
        update=functools.partial(update, config, spec, built),
        policy=functools.partial(policy, config, spec, built),
        params=lambda state: state.actor,
        td_error=functools.partial(td_error, config, spec, built),
    )

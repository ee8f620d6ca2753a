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

The pieces other agents share live here as well: the random initial phase, the
continuous-action check and the twin critics' loss and step (:func:`critic_step`), which
:mod:`rljax.agents.sac` uses.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, lockstep, validate
from rljax.agents.base import Agent, Update, with_grad_transform
from rljax.envs.spec import EnvSpec
from rljax.losses import ddpg_actor_loss, weighted_td_loss
from rljax.losses.continuous import (
    clipped_double_q_target,
    delayed_update,
    smoothed_target_action,
)
from rljax.networks import Network, make_ddpg_actor
from rljax.networks.continuous import TwinCritic, make_twin_critic
from rljax.networks.core import ACTIVATIONS
from rljax.records import OffPolicyLoop, Replay, shape_field
from rljax.targets import soft_update
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


class Nets(NamedTuple):
    actor: Network
    critic: TwinCritic


# --- pieces shared with SAC -----------------------------------------------------------


def check_continuous(algo: str, spec: EnvSpec) -> None:
    """ValueError unless ``spec`` has vector observations and a 1-D box of actions."""
    if spec.discrete:
        raise ValueError(
            f"{algo} needs a continuous action space, but {spec.task_id} has "
            f"{spec.num_actions} discrete actions; use a discrete-action agent (dqn or a2c)")
    if len(spec.action_shape) != 1 or len(spec.obs_shape) != 1:
        raise ValueError(f"{algo} in rljax needs vector observations and 1-D actions; "
                         f"{spec.task_id} has observations {spec.obs_shape} and actions "
                         f"{spec.action_shape}")


def bounds(spec: EnvSpec) -> tuple[Array, Array]:
    """Action bounds ``(low [A], high [A])`` as float32."""
    return (jnp.asarray(spec.action_low, jnp.float32),
            jnp.asarray(spec.action_high, jnp.float32))


def adam(lr: float, grad_transform: optax.GradientTransformation | None
         ) -> optax.GradientTransformation:
    # Per parameter array, not optax.flatten: XLA:CPU copies the twin critics' stacked,
    # transposed first-layer gradient into the flat vector very slowly, and with 256x256
    # networks that copy took over half of a gradient step (TD3 8.6 -> 3.4 ms, SAC 14.7
    # -> 5.3 ms per step of 256 without it; docs/benchmarks.md).
    return with_grad_transform(optax.adam(lr), grad_transform)


def with_random_phase(config: Any, spec: EnvSpec, action: Array, key: PRNGKey,
                      step: Array) -> Array:
    """``action [B, A]``, or uniform random actions during the first
    ``config.loop.random_steps`` env steps (loop update ``step`` starts at env step
    ``step * config.loop.steps_per_update``)."""
    if config.loop.random_steps == 0:
        return action
    low, high = bounds(spec)
    uniform = jax.random.uniform(key, action.shape, action.dtype, low, high)
    early = jnp.asarray(step) * config.loop.steps_per_update < config.loop.random_steps
    return jnp.where(early, uniform, action)


def twin_critic_loss(critic: Network, params: Any, batch: Sample,
                     target: Array) -> tuple[Array, tuple[Array, Array]]:
    """``sum_j mean_i w_i 0.5 (y_i - Q_j(s_i, a_i))^2`` for the twin critics.

    Args:
        critic: the twin critic (:func:`rljax.networks.continuous.make_twin_critic`).
        params: its parameters.
        batch: replay sample: transitions ``[N]`` and importance ``weights [N]``.
        target: ``y [N]`` (gradient-free).

    Returns:
        ``(loss, (td [2, N], q [2, N]))``.
    """
    tr = batch.transition
    q = critic.apply({"params": params}, tr.obs, tr.action)
    td = jax.lax.stop_gradient(target)[None] - q
    loss = sum(weighted_td_loss(td[j], batch.weights, loss="l2") for j in range(q.shape[0]))
    return loss, (td, q)


def critic_step(critic: Network, optimizer: optax.GradientTransformation, variables: Any,
                opt_state: optax.OptState, batch: Sample,
                target: Array) -> tuple[Any, optax.OptState, Metrics, Array]:
    """One optimizer step of the twin critics toward ``target [N]``.

    Returns:
        ``(variables, opt_state, metrics, td [N])``: the new critic, and the first critic's
        TD errors before the step (new priorities).
    """
    params = variables["params"]
    (loss, (td, q)), grads = jax.value_and_grad(
        functools.partial(twin_critic_loss, critic), has_aux=True)(params, batch, target)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    metrics = {"critic_loss": loss, "q_mean": jnp.mean(q[0]),
               "td_abs_mean": jnp.mean(jnp.abs(td[0])),
               "critic_grad_norm": optax.tree.norm(grads)}
    return {"params": optax.apply_updates(params, updates)}, opt_state, metrics, td[0]


# --- TD3 ------------------------------------------------------------------------------


def networks(config: TD3Config, spec: EnvSpec) -> Nets:
    return Nets(make_ddpg_actor(spec.action_low, spec.action_high,
                                hidden_sizes=config.actor_hidden,
                                activation=config.activation, batch_norm=False),
                make_twin_critic(hidden_sizes=config.critic_hidden,
                                 activation=config.activation))


def _optimizers(config: TD3Config, grad_transform: optax.GradientTransformation | None):
    return adam(config.actor_lr, grad_transform), adam(config.critic_lr, grad_transform)


def init(config: TD3Config, spec: EnvSpec, key: PRNGKey,
         grad_transform: optax.GradientTransformation | None = None) -> TD3State:
    nets = networks(config, spec)
    actor_key, critic_key = jax.random.split(key)
    obs = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
    action = jnp.zeros((1,) + spec.action_shape, jnp.float32)
    actor = nets.actor.init(actor_key, obs)
    critic = nets.critic.init(critic_key, obs, action)
    copy = lambda tree: jax.tree.map(jnp.array, tree)  # own buffers: the loop donates state
    actor_opt, critic_opt = _optimizers(config, grad_transform)
    return TD3State(actor=actor, critic=critic, target_actor=copy(actor),
                    target_critic=copy(critic), actor_opt=actor_opt.init(actor["params"]),
                    critic_opt=critic_opt.init(critic["params"]),
                    step=jnp.zeros((), jnp.int32))


def policy(config: TD3Config, spec: EnvSpec, params: Any, obs: Array) -> Array:
    """Noise-free actions ``[N, A]``."""
    low, high = bounds(spec)
    return jnp.clip(networks(config, spec).actor.apply(params, obs), low, high)


def act(config: TD3Config, spec: EnvSpec, state: TD3State, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, dict, TD3State]:
    """Exploring actions ``[B, A]``: ``clip(mu(s) + N(0, (sigma h)^2), low, high)``, or
    uniform ones in the random phase."""
    del new_episode
    noise_key, random_key = jax.random.split(key)
    low, high = bounds(spec)
    mu = policy(config, spec, state.actor, obs)
    noise = exploration.gaussian_noise(noise_key, mu.shape, config.exploration_noise)
    action = jnp.clip(mu + noise * (high - low) / 2, low, high)
    return with_random_phase(config, spec, action, random_key, step), {}, state


def critic_target(config: TD3Config, spec: EnvSpec, state: TD3State, transition: Any,
                  key: PRNGKey | None = None) -> Array:
    """Clipped double-Q target ``y [N]`` of n-step transitions; ``key``: with target
    policy smoothing (noise ``target_noise * h * jax.random.normal(key, [N, A])``),
    None: without."""
    nets = networks(config, spec)
    low, high = bounds(spec)
    a_t = nets.actor.apply(state.target_actor, transition.next_obs)
    if key is not None:
        # Smoothing in [-1, 1] coordinates, where the paper's scales apply.
        mid, half = (high + low) / 2, (high - low) / 2
        unit = smoothed_target_action(key, (a_t - mid) / half, config.target_noise,
                                      config.target_noise_clip, -1.0, 1.0)
        a_t = mid + half * unit
    a_t = jnp.clip(a_t, low, high)
    q_t = nets.critic.apply(state.target_critic, transition.next_obs, a_t)
    return clipped_double_q_target(transition.reward, transition.discount, q_t[0], q_t[1])


def actor_loss(config: TD3Config, spec: EnvSpec, params: Any, state: TD3State,
               obs: Array) -> Array:
    """``mean -Q_1(s, mu(s))`` with the critics of ``state``."""
    nets = networks(config, spec)
    q1 = nets.critic.apply_first(state.critic, obs, nets.actor.apply({"params": params}, obs))
    return jnp.mean(ddpg_actor_loss(q1))


def _actor_step(config: TD3Config, spec: EnvSpec, optimizer: optax.GradientTransformation,
                state: TD3State, obs: Array) -> tuple[TD3State, Metrics]:
    """Actor step on the current critics, then soft updates of all targets."""
    params = state.actor["params"]
    loss, grads = jax.value_and_grad(functools.partial(actor_loss, config, spec))(
        params, state, obs)
    updates, actor_opt = optimizer.update(grads, state.actor_opt, params)
    actor = {"params": optax.apply_updates(params, updates)}
    state = state.replace(actor=actor, actor_opt=actor_opt,
                          target_actor=soft_update(state.target_actor, actor, config.tau),
                          target_critic=soft_update(state.target_critic, state.critic,
                                                    config.tau))
    return state, {"actor_loss": loss, "actor_grad_norm": optax.tree.norm(grads)}


def update(config: TD3Config, spec: EnvSpec, state: TD3State, batch: Sample, key: PRNGKey,
           grad_transform: optax.GradientTransformation | None = None) -> Update:
    """One critic step toward the smoothed clipped double-Q target (noise from ``key``),
    then, every ``policy_delay``-th step, an actor step and the target updates."""
    actor_opt, critic_opt = _optimizers(config, grad_transform)
    target = critic_target(config, spec, state, batch.transition, key)
    critic, critic_opt_state, metrics, td = critic_step(
        networks(config, spec).critic, critic_opt, state.critic, state.critic_opt, batch,
        target)
    state = state.replace(critic=critic, critic_opt=critic_opt_state)
    obs = batch.transition.obs
    delay = config.policy_delay
    if delay == 1:
        state, actor_metrics = _actor_step(config, spec, actor_opt, state, obs)
    else:
        def step(state):
            state, m = _actor_step(config, spec, actor_opt, state, obs)
            return state, jax.tree.map(lambda x: x * delay, m)

        def skip(state):
            return state, {"actor_loss": jnp.zeros(()), "actor_grad_norm": jnp.zeros(())}

        state, actor_metrics = lockstep.cond(delayed_update(state.step, delay), step, skip,
                                             state)
    state = state.replace(step=state.step + 1)
    return Update(state, {**metrics, **actor_metrics}, td)


def td_error(config: TD3Config, spec: EnvSpec, state: TD3State, transition: Any) -> Array:
    """``y - Q_1(s, a)`` ``[N]`` without smoothing noise (initial priorities)."""
    q1 = networks(config, spec).critic.apply_first(state.critic, transition.obs,
                                                   transition.action)
    return critic_target(config, spec, state, transition) - q1


def make_td3(config: TD3Config, spec: EnvSpec, *,
             grad_transform: optax.GradientTransformation | None = None) -> Agent:
    """Builds the TD3 agent for a continuous-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        grad_transform: applied to the gradients before both optimizers (the parallel
            layer passes one that averages them over devices); None: nothing.

    Raises:
        ValueError: if the environment's actions are discrete or not a 1-D box.
    """
    check_continuous("TD3", spec)
    return Agent(
        init=functools.partial(init, config, spec, grad_transform=grad_transform),
        act=functools.partial(act, config, spec),
        update=functools.partial(update, config, spec, grad_transform=grad_transform),
        policy=functools.partial(policy, config, spec),
        params=lambda state: state.actor,
        td_error=functools.partial(td_error, config, spec),
    )

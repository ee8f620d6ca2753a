"""Deep deterministic policy gradient (DDPG; Lillicrap et al. 2016, "Continuous Control
with Deep Reinforcement Learning"), with the rljax reference's options.

A deterministic actor ``mu(s)`` (tanh to the action bounds) and a critic ``Q(s, a)``
learn from (prioritized, n-step) replay:

    critic   delta = r + discount * Q'(s', mu'(s')) - Q(s, a),  loss mean_i w_i l(delta_i)
    actor    loss  = mean_i -Q(s_i, mu(s_i))                    (the just-updated critic)
    targets  theta' <- (1 - tau) theta' + tau theta              (after every gradient step)

``l`` is ``0.5 x^2`` (or Huber), ``w_i`` the importance weights of prioritized replay
(Schaul et al. 2016) and ``discount = gamma^m (1 - terminated)``. Both optimizers are Adam
with L2 weight decay added to the gradient before Adam (``optax.add_decayed_weights``
then ``optax.adam``): what PyTorch's ``Adam(weight_decay=...)`` does, unlike AdamW's
decoupled decay.

Exploration lives in the agent state, per env: an Ornstein-Uhlenbeck (or Gaussian) action
noise multiplied by a scale that decays by ``noise_decay`` at every new episode of that env;
OU processes restart at ``mu = 0`` at new episodes. Optionally every actor layer is a
NoisyDense (Fortunato et al. 2018) whose noise inputs, while acting, follow their own OU
process per env (``noisy_noise="ou"``) or are drawn afresh each step (``"key"``).

Off by default, three options of TD3 (Fujimoto et al. 2018, "Addressing Function
Approximation Error in Actor-Critic Methods"): twin critics with the smaller target
(``twin_critics``), clipped Gaussian noise on target actions (``target_noise``) and one
actor step per ``policy_delay`` critic steps.

Batch norm (input layer only) updates its running statistics in the critic and actor
gradient steps only; acting, evaluation, targets and initial TD errors use the running
statistics and change nothing. Target networks are soft-updated as whole variable trees
(parameters and batch statistics).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration
from rljax.agents import run_checks
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update
from rljax.agents.continuous import (
    check_continuous,
    delayed_actor_step,
    example_inputs,
    own_copy,
    smooth_target_action,
    soft_update_targets,
)
from rljax.agents.ddpg_config import DDPGConfig
from rljax.envs.spec import EnvSpec
from rljax.gradients import flattened, gradient_step
from rljax.losses import ddpg_actor_loss, ddpg_critic_td, weighted_td_loss
from rljax.networks import Network, make_ddpg_actor, make_ddpg_critic, noise_like
from rljax.networks.noisy import gaussian_noise_like
from rljax.networks.torso import user_torso
from rljax.types import Array, Metrics, PRNGKey, Sample


@struct.dataclass
class DDPGState:
    """Train state.

    Attributes:
        actor, critic: online variables (``{"params", "batch_stats"}``; with
            ``twin_critics`` every critic leaf has a leading axis of 2).
        target_actor, target_critic: target variables, same structure.
        actor_opt, critic_opt: optimizer states (over ``params`` only).
        ou: action OU state ``[B, A]``.
        noise_scale: per-env factor on the action noise ``[B]``.
        noisy_ou: OU state of the NoisyNet noise inputs (``noise_like`` tree with
            leaves ``[B, fan]``; empty unless ``noisy`` with ``noisy_noise="ou"``).
        step: gradient steps done.
    """

    actor: Any
    critic: Any
    target_actor: Any
    target_critic: Any
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    ou: Array
    noise_scale: Array
    noisy_ou: Any
    step: Array


class Parts(NamedTuple):
    """DDPG's networks and optimizers, built once by :func:`make_ddpg`.

    ``train_actor`` and ``train_critic`` are the networks of the gradient steps: with the
    parallel layer's ``batch_norm_axis`` their training-mode batch statistics are the whole
    batch's (see :class:`rljax.agents.base.Parallel`); the others act, evaluate and
    compute targets.
    """

    actor: Network
    critic: Network
    train_actor: Network
    train_critic: Network
    actor_opt: optax.GradientTransformation
    critic_opt: optax.GradientTransformation


def _networks(config: DDPGConfig, spec: EnvSpec,
              batch_norm_axis: str | None) -> tuple[Network, Network]:
    common = dict(activation=config.activation, negative_slope=config.negative_slope,
                  batch_norm=config.batch_norm, batch_norm_momentum=config.batch_norm_momentum,
                  batch_norm_axis=batch_norm_axis,
                  torso=user_torso(config.network, spec.obs_shape))
    return (make_ddpg_actor(spec.action_low, spec.action_high, hidden_sizes=config.actor_hidden,
                            noisy=config.noisy, sigma0=config.noisy_sigma0, **common),
            make_ddpg_critic(hidden_sizes=config.critic_hidden, **common))


def _optimizer(config: DDPGConfig, lr: float, weight_decay: float) -> optax.GradientTransformation:
    if config.lr_decay_steps is not None:
        lr = optax.linear_schedule(lr, lr * config.lr_end_factor, config.lr_decay_steps)
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    # One flat vector per network: a few kernels per update instead of several per
    # parameter array, which is most of an update's cost on XLA:CPU.
    return flattened(optax.chain(*clip, *decay, optax.adam(lr)))


def parts(config: DDPGConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The networks and optimizers of ``config`` for ``spec``."""
    actor, critic = _networks(config, spec, None)
    train_actor, train_critic = (_networks(config, spec, parallel.batch_norm_axis)
                                 if parallel.batch_norm_axis else (actor, critic))
    return Parts(actor, critic, train_actor, train_critic,
                 parallel.optimizer(_optimizer(config, config.actor_lr,
                                               config.actor_weight_decay)),
                 parallel.optimizer(_optimizer(config, config.critic_lr,
                                               config.critic_weight_decay)))


def _split(variables: dict) -> tuple[Any, dict]:
    return variables["params"], {k: v for k, v in variables.items() if k != "params"}


def _apply_train(net: Network, variables: dict, *args, **kwargs) -> tuple[Array, dict]:
    """Training-mode forward pass: ``(output, new non-param collections)``."""
    if "batch_stats" not in variables:
        return net.apply(variables, *args, **kwargs), {}
    out, updates = net.apply(variables, *args, train=True, mutable=["batch_stats"], **kwargs)
    return out, dict(updates)


def _critics(config: DDPGConfig, critic: Network, variables: dict, obs: Array, action: Array,
             train: bool = False) -> tuple[Array, dict]:
    """Q-values ``[C, N]`` of the ``C`` critics (1, or 2 with ``twin_critics``) and, in
    training mode, their new statistics."""
    def one(v):
        if train:
            return _apply_train(critic, v, obs, action)
        return critic.apply(v, obs, action), {}

    if config.twin_critics:
        return jax.vmap(one)(variables)
    q, updates = one(variables)
    return q[None], updates


def _first_critic(config: DDPGConfig, variables: dict) -> dict:
    return jax.tree.map(lambda x: x[0], variables) if config.twin_critics else variables


def _noise_tree_key(config: DDPGConfig, key: PRNGKey | None) -> dict:
    return {"noise_key": key} if config.noisy and key is not None else {}


def init(config: DDPGConfig, spec: EnvSpec, parts: Parts, key: PRNGKey) -> DDPGState:
    actor_key, critic_key = jax.random.split(key)
    obs, action = example_inputs(spec)
    actor = parts.actor.init(actor_key, obs)
    if config.twin_critics:
        critic = jax.vmap(lambda k: parts.critic.init(k, obs, action))(
            jax.random.split(critic_key))
    else:
        critic = parts.critic.init(critic_key, obs, action)
    target_critic = own_copy(critic)
    if config.target_critic_init == "zeros":
        target_critic["params"] = jax.tree.map(jnp.zeros_like, critic["params"])
    b = spec.num_envs
    noisy_ou = {}
    if config.noisy and config.noisy_noise == "ou":
        noisy_ou = noise_like(actor, (b,))
    return DDPGState(
        actor=actor, critic=critic, target_actor=own_copy(actor), target_critic=target_critic,
        actor_opt=parts.actor_opt.init(actor["params"]),
        critic_opt=parts.critic_opt.init(critic["params"]),
        ou=exploration.ou_init((b,) + spec.action_shape),
        noise_scale=jnp.full((b,), config.noise_scale, jnp.float32), noisy_ou=noisy_ou,
        step=jnp.zeros((), jnp.int32))


def _clip(spec: EnvSpec, action: Array) -> Array:
    return jnp.clip(action, jnp.asarray(spec.action_low, jnp.float32),
                    jnp.asarray(spec.action_high, jnp.float32))


def act(config: DDPGConfig, spec: EnvSpec, parts: Parts, state: DDPGState, obs: Array,
        key: PRNGKey, step: Array, new_episode: Array) -> tuple[Array, dict, DDPGState]:
    """Exploring actions ``[B, A]``, clipped to the bounds; steps the noise state."""
    del step
    action_key, noisy_key = jax.random.split(key)
    scale = jnp.where(new_episode, jnp.maximum(state.noise_scale * config.noise_decay,
                                               config.noise_scale_min), state.noise_scale)
    state = state.replace(noise_scale=scale)
    kwargs = {}
    if config.noisy and config.noisy_noise == "ou":
        eps = exploration.ou_reset(state.noisy_ou, new_episode)
        eps, noisy_ou = exploration.ou_step(eps, noisy_key, config.ou_theta, config.ou_sigma)
        state, kwargs = state.replace(noisy_ou=noisy_ou), {"noise": eps}
    elif config.noisy:  # one independent draw per env
        kwargs = {"noise": gaussian_noise_like(state.actor, noisy_key, (obs.shape[0],))}
    mu = parts.actor.apply(state.actor, obs, **kwargs)
    if config.noise == "ou":
        ou = exploration.ou_reset(state.ou, new_episode)
        noise, ou = exploration.ou_step(ou, action_key, config.ou_theta, config.ou_sigma)
        state = state.replace(ou=ou)
    elif config.noise == "gaussian":
        noise = exploration.gaussian_noise(action_key, mu.shape, config.gaussian_sigma)
    else:
        noise = jnp.zeros_like(mu)
    return _clip(spec, mu + scale[:, None] * noise), {}, state


def policy(config: DDPGConfig, spec: EnvSpec, parts: Parts, params: dict, obs: Array) -> Array:
    """Noise-free actions ``[N, A]`` (running batch-norm statistics, NoisyNet means)."""
    del config
    return _clip(spec, parts.actor.apply(params, obs))


def target_q(config: DDPGConfig, spec: EnvSpec, parts: Parts, state: DDPGState,
             next_obs: Array, key: PRNGKey | None = None) -> Array:
    """``Q'(s', mu'(s'))`` ``[N]`` from the target nets in evaluation mode (running
    statistics). With ``key``: a NoisyNet target actor is noisy, and ``target_noise``
    smooths the target action (``mu'(s') + clip(N(0, sigma^2), -c, c)``, clipped to the
    bounds; Fujimoto et al. 2018, in the action's units)."""
    noisy_key = smooth_key = None
    if key is not None:
        noisy_key, smooth_key = jax.random.split(key)
    a_t = parts.actor.apply(state.target_actor, next_obs, **_noise_tree_key(config, noisy_key))
    if smooth_key is not None and config.target_noise > 0:
        a_t = smooth_target_action(smooth_key, a_t, config.target_noise,
                                   config.target_noise_clip, spec, half_ranges=False)
    return jnp.min(_critics(config, parts.critic, state.target_critic, next_obs, a_t)[0],
                   axis=0)


def critic_loss(config: DDPGConfig, spec: EnvSpec, parts: Parts, params: Any,
                state: DDPGState, batch: Sample, key: PRNGKey | None = None):
    """Weighted critic loss (summed over twin critics); returns ``(loss, (td [N], q [N],
    critic non-params))``, TD errors and values of the first critic."""
    tr = batch.transition
    q_t = target_q(config, spec, parts, state, tr.next_obs, key)
    _, rest = _split(state.critic)
    q, updates = _critics(config, parts.train_critic, {"params": params, **rest},
                          tr.obs, tr.action, train=True)
    td = jax.vmap(jax.vmap(ddpg_critic_td), in_axes=(0, None, None, None))(
        q, tr.reward, tr.discount, q_t)
    kind = "huber" if config.td_loss == "huber" else "l2"
    loss = sum(weighted_td_loss(td[i], batch.weights, loss=kind, delta=config.huber_delta)
               for i in range(td.shape[0]))
    return loss, (td[0], q[0], {**rest, **updates})


def actor_loss(config: DDPGConfig, spec: EnvSpec, parts: Parts, params: Any,
               state: DDPGState, obs: Array, key: PRNGKey | None = None):
    """``mean -Q(s, mu(s))`` with the critic of ``state`` (batch statistics, as it is
    trained, its own statistics untouched); returns ``(loss, actor non-params)``."""
    del spec
    _, rest = _split(state.actor)
    action, updates = _apply_train(parts.train_actor, {"params": params, **rest}, obs,
                                   **_noise_tree_key(config, key))
    q, _ = _apply_train(parts.train_critic, _first_critic(config, state.critic), obs, action)
    return jnp.mean(ddpg_actor_loss(q)), {**rest, **updates}


def _actor_step(config: DDPGConfig, spec: EnvSpec, parts: Parts, state: DDPGState,
                obs: Array, key: PRNGKey) -> tuple[DDPGState, Metrics]:
    """Actor step on the current critic, then soft updates of both targets."""
    step = gradient_step(functools.partial(actor_loss, config, spec, parts), parts.actor_opt,
                         _split(state.actor)[0], state.actor_opt, state, obs, key)
    state = state.replace(actor={"params": step.params, **step.aux},
                          actor_opt=step.opt_state)
    return (soft_update_targets(state, config.tau),
            {"actor_loss": step.loss, "actor_grad_norm": step.grad_norm})


def update(config: DDPGConfig, spec: EnvSpec, parts: Parts, state: DDPGState, batch: Sample,
           key: PRNGKey) -> Update:
    """One critic step, one actor step (on the new critic; every ``policy_delay``-th
    step only), then soft target updates (with the actor step)."""
    target_key, actor_key = jax.random.split(key)
    step = gradient_step(functools.partial(critic_loss, config, spec, parts), parts.critic_opt,
                         _split(state.critic)[0], state.critic_opt, state, batch, target_key)
    td, q, critic_rest = step.aux
    state = state.replace(critic={"params": step.params, **critic_rest},
                          critic_opt=step.opt_state)
    state, actor_metrics = delayed_actor_step(
        state.step, config.policy_delay, functools.partial(_actor_step, config, spec, parts),
        state, batch.transition.obs, actor_key)
    state = state.replace(step=state.step + 1)
    metrics = {"critic_loss": step.loss, "q_mean": jnp.mean(q),
               "td_abs_mean": jnp.mean(jnp.abs(td)), "critic_grad_norm": step.grad_norm,
               "noise_scale": jnp.mean(state.noise_scale), **actor_metrics}
    return Update(state, metrics, td)


def td_error(config: DDPGConfig, spec: EnvSpec, parts: Parts, state: DDPGState,
             transition: Any) -> Array:
    """TD errors ``[N]`` of n-step transitions, all networks in evaluation mode (the
    initial priorities of new transitions)."""
    q_t = target_q(config, spec, parts, state, transition.next_obs)
    q = parts.critic.apply(_first_critic(config, state.critic), transition.obs,
                           transition.action)
    return jax.vmap(ddpg_critic_td)(q, transition.reward, transition.discount, q_t)


def check_run(config: DDPGConfig, spec: EnvSpec, run: RunLength) -> None:
    """Refuses settings with which this run would never update a network
    (:mod:`rljax.agents.run_checks`)."""
    run_checks.soft_targets(config.tau)
    run_checks.policy_delay(config.policy_delay, config.loop.grad_steps, run)


def make_ddpg(config: DDPGConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
              run: RunLength | None = None) -> Agent:
    """Builds the DDPG agent for a continuous-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`): its
            ``grad_transform`` goes before both optimizers, and with ``batch_norm`` its
            ``batch_norm_axis`` gives the gradient steps the whole batch's statistics;
            default: one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`); no setting
            of this agent depends on it.

    Raises:
        ValueError: if the environment's actions are discrete or not a 1-D box.
    """
    check_continuous("DDPG", spec)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, config, spec, built),
        act=functools.partial(act, config, spec, built),
        update=functools.partial(update, config, spec, built),
        policy=functools.partial(policy, config, spec, built),
        params=lambda state: state.actor,
        td_error=functools.partial(td_error, config, spec, built),
    )

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

from rljax import exploration, lockstep
from rljax.agents.base import Agent, Update, with_grad_transform
from rljax.agents.ddpg_config import DDPGConfig
from rljax.envs.spec import EnvSpec
from rljax.losses import ddpg_actor_loss, ddpg_critic_td, weighted_td_loss
from rljax.networks import Network, make_ddpg_actor, make_ddpg_critic, noise_like
from rljax.networks.noisy import gaussian_noise_like
from rljax.targets import soft_update
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


class _Parallel(NamedTuple):
    """Data-parallel hooks from the parallel layer (see :func:`make_ddpg`)."""

    grad_transform: optax.GradientTransformation | None = None
    batch_norm_axis: str | None = None


class Nets(NamedTuple):
    actor: Network
    critic: Network


def networks(config: DDPGConfig, spec: EnvSpec, batch_norm_axis: str | None = None) -> Nets:
    """Actor and critic; with ``batch_norm_axis``, training-mode batch statistics are taken
    over the whole batch split along that mesh axis (see :func:`make_ddpg`)."""
    common = dict(activation=config.activation, negative_slope=config.negative_slope,
                  batch_norm=config.batch_norm, batch_norm_momentum=config.batch_norm_momentum,
                  batch_norm_axis=batch_norm_axis)
    return Nets(
        make_ddpg_actor(spec.action_low, spec.action_high, hidden_sizes=config.actor_hidden,
                        noisy=config.noisy, sigma0=config.noisy_sigma0, **common),
        make_ddpg_critic(hidden_sizes=config.critic_hidden, **common))


def _optimizer(config: DDPGConfig, lr: float, weight_decay: float) -> optax.GradientTransformation:
    if config.lr_decay_steps is not None:
        lr = optax.linear_schedule(lr, lr * config.lr_end_factor, config.lr_decay_steps)
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    # One flat vector per network: a few kernels per update instead of several per
    # parameter array, which is most of an update's cost on XLA:CPU.
    return optax.flatten(optax.chain(*clip, *decay, optax.adam(lr)))


def _optimizers(config: DDPGConfig, grad_transform: optax.GradientTransformation | None = None):
    return (with_grad_transform(_optimizer(config, config.actor_lr, config.actor_weight_decay),
                                grad_transform),
            with_grad_transform(_optimizer(config, config.critic_lr,
                                           config.critic_weight_decay), grad_transform))


def _split(variables: dict) -> tuple[Any, dict]:
    return variables["params"], {k: v for k, v in variables.items() if k != "params"}


def _apply_train(net: Network, variables: dict, *args, **kwargs) -> tuple[Array, dict]:
    """Training-mode forward pass: ``(output, new non-param collections)``."""
    if "batch_stats" not in variables:
        return net.apply(variables, *args, **kwargs), {}
    out, updates = net.apply(variables, *args, train=True, mutable=["batch_stats"], **kwargs)
    return out, dict(updates)


def _critics(config: DDPGConfig, nets: Nets, variables: dict, obs: Array, action: Array,
             train: bool = False) -> tuple[Array, dict]:
    """Q-values ``[C, N]`` of the ``C`` critics (1, or 2 with ``twin_critics``) and, in
    training mode, their new statistics."""
    def one(v):
        if train:
            return _apply_train(nets.critic, v, obs, action)
        return nets.critic.apply(v, obs, action), {}

    if config.twin_critics:
        return jax.vmap(one)(variables)
    q, updates = one(variables)
    return q[None], updates


def _first_critic(config: DDPGConfig, variables: dict) -> dict:
    return jax.tree.map(lambda x: x[0], variables) if config.twin_critics else variables


def _noise_tree_key(config: DDPGConfig, key: PRNGKey | None) -> dict:
    return {"noise_key": key} if config.noisy and key is not None else {}


def init(config: DDPGConfig, spec: EnvSpec, key: PRNGKey,
         grad_transform: optax.GradientTransformation | None = None) -> DDPGState:
    nets = networks(config, spec)
    actor_key, critic_key = jax.random.split(key)
    obs = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
    action = jnp.zeros((1,) + spec.action_shape, jnp.float32)
    actor = nets.actor.init(actor_key, obs)
    if config.twin_critics:
        critic = jax.vmap(lambda k: nets.critic.init(k, obs, action))(
            jax.random.split(critic_key))
    else:
        critic = nets.critic.init(critic_key, obs, action)
    copy = lambda tree: jax.tree.map(jnp.array, tree)  # own buffers: the loop donates state
    target_critic = copy(critic)
    if config.target_critic_init == "zeros":
        target_critic["params"] = jax.tree.map(jnp.zeros_like, critic["params"])
    actor_opt, critic_opt = _optimizers(config, grad_transform)
    b = spec.num_envs
    noisy_ou = {}
    if config.noisy and config.noisy_noise == "ou":
        noisy_ou = noise_like(actor, (b,))
    return DDPGState(
        actor=actor, critic=critic, target_actor=copy(actor), target_critic=target_critic,
        actor_opt=actor_opt.init(actor["params"]), critic_opt=critic_opt.init(critic["params"]),
        ou=exploration.ou_init((b,) + spec.action_shape),
        noise_scale=jnp.full((b,), config.noise_scale, jnp.float32), noisy_ou=noisy_ou,
        step=jnp.zeros((), jnp.int32))


def _clip(spec: EnvSpec, action: Array) -> Array:
    return jnp.clip(action, jnp.asarray(spec.action_low, jnp.float32),
                    jnp.asarray(spec.action_high, jnp.float32))


def act(config: DDPGConfig, spec: EnvSpec, state: DDPGState, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, dict, DDPGState]:
    """Exploring actions ``[B, A]``, clipped to the bounds; steps the noise state."""
    del step
    nets = networks(config, spec)
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
    mu = nets.actor.apply(state.actor, obs, **kwargs)
    if config.noise == "ou":
        ou = exploration.ou_reset(state.ou, new_episode)
        noise, ou = exploration.ou_step(ou, action_key, config.ou_theta, config.ou_sigma)
        state = state.replace(ou=ou)
    elif config.noise == "gaussian":
        noise = exploration.gaussian_noise(action_key, mu.shape, config.gaussian_sigma)
    else:
        noise = jnp.zeros_like(mu)
    return _clip(spec, mu + scale[:, None] * noise), {}, state


def policy(config: DDPGConfig, spec: EnvSpec, params: dict, obs: Array) -> Array:
    """Noise-free actions ``[N, A]`` (running batch-norm statistics, NoisyNet means)."""
    return _clip(spec, networks(config, spec).actor.apply(params, obs))


def target_q(config: DDPGConfig, spec: EnvSpec, state: DDPGState, next_obs: Array,
             key: PRNGKey | None = None) -> Array:
    """``Q'(s', mu'(s'))`` ``[N]`` from the target nets in evaluation mode (running
    statistics). With ``key``: a NoisyNet target actor is noisy, and ``target_noise``
    smooths the target action (``mu'(s') + clip(N(0, sigma^2), -c, c)``, clipped to the
    bounds; Fujimoto et al. 2018)."""
    nets = networks(config, spec)
    noisy_key = smooth_key = None
    if key is not None:
        noisy_key, smooth_key = jax.random.split(key)
    a_t = nets.actor.apply(state.target_actor, next_obs, **_noise_tree_key(config, noisy_key))
    if smooth_key is not None and config.target_noise > 0:
        eps = config.target_noise * jax.random.normal(smooth_key, a_t.shape, a_t.dtype)
        clip = config.target_noise_clip
        a_t = _clip(spec, a_t + jnp.clip(eps, -clip, clip))
    return jnp.min(_critics(config, nets, state.target_critic, next_obs, a_t)[0], axis=0)


def critic_loss(config: DDPGConfig, spec: EnvSpec, params: Any, state: DDPGState,
                batch: Sample, key: PRNGKey | None = None,
                batch_norm_axis: str | None = None):
    """Weighted critic loss (summed over twin critics); returns ``(loss, (td [N], q [N],
    critic non-params))``, TD errors and values of the first critic."""
    tr = batch.transition
    q_t = target_q(config, spec, state, tr.next_obs, key)
    _, rest = _split(state.critic)
    q, updates = _critics(config, networks(config, spec, batch_norm_axis),
                          {"params": params, **rest},
                          tr.obs, tr.action, train=True)
    td = jax.vmap(jax.vmap(ddpg_critic_td), in_axes=(0, None, None, None))(
        q, tr.reward, tr.discount, q_t)
    kind = "huber" if config.td_loss == "huber" else "l2"
    loss = sum(weighted_td_loss(td[i], batch.weights, loss=kind, delta=config.huber_delta)
               for i in range(td.shape[0]))
    return loss, (td[0], q[0], {**rest, **updates})


def actor_loss(config: DDPGConfig, spec: EnvSpec, params: Any, state: DDPGState,
               obs: Array, key: PRNGKey | None = None,
               batch_norm_axis: str | None = None):
    """``mean -Q(s, mu(s))`` with the critic of ``state`` (batch statistics, as it is
    trained, its own statistics untouched); returns ``(loss, actor non-params)``."""
    nets = networks(config, spec, batch_norm_axis)
    _, rest = _split(state.actor)
    action, updates = _apply_train(nets.actor, {"params": params, **rest}, obs,
                                   **_noise_tree_key(config, key))
    q, _ = _apply_train(nets.critic, _first_critic(config, state.critic), obs, action)
    return jnp.mean(ddpg_actor_loss(q)), {**rest, **updates}


def _actor_step(config: DDPGConfig, spec: EnvSpec, state: DDPGState, obs: Array,
                key: PRNGKey, parallel: _Parallel) -> tuple[DDPGState, Metrics]:
    """Actor step on the current critic, then soft updates of both targets."""
    actor_opt = _optimizers(config, parallel.grad_transform)[0]
    actor_params, _ = _split(state.actor)
    (loss, actor_rest), grads = jax.value_and_grad(
        functools.partial(actor_loss, config, spec, batch_norm_axis=parallel.batch_norm_axis),
        has_aux=True)(actor_params, state, obs, key)
    updates, actor_opt_state = actor_opt.update(grads, state.actor_opt, actor_params)
    actor = {"params": optax.apply_updates(actor_params, updates), **actor_rest}
    state = state.replace(
        actor=actor, actor_opt=actor_opt_state,
        target_actor=soft_update(state.target_actor, actor, config.tau),
        target_critic=soft_update(state.target_critic, state.critic, config.tau))
    return state, {"actor_loss": loss, "actor_grad_norm": optax.tree.norm(grads)}


def update(config: DDPGConfig, spec: EnvSpec, state: DDPGState, batch: Sample,
           key: PRNGKey, parallel: _Parallel = None) -> Update:
    """One critic step, one actor step (on the new critic; every ``policy_delay``-th
    step only), then soft target updates (with the actor step)."""
    parallel = parallel or _Parallel()
    target_key, actor_key = jax.random.split(key)
    critic_opt = _optimizers(config, parallel.grad_transform)[1]
    critic_params, _ = _split(state.critic)
    (c_loss, (td, q, critic_rest)), c_grads = jax.value_and_grad(
        functools.partial(critic_loss, config, spec, batch_norm_axis=parallel.batch_norm_axis),
        has_aux=True)(critic_params, state, batch, target_key)
    q_mean, td_abs_mean = jnp.mean(q), jnp.mean(jnp.abs(td))
    updates, critic_opt_state = critic_opt.update(c_grads, state.critic_opt, critic_params)
    critic = {"params": optax.apply_updates(critic_params, updates), **critic_rest}
    state = state.replace(critic=critic, critic_opt=critic_opt_state)

    obs = batch.transition.obs
    if config.policy_delay == 1:
        state, actor_metrics = _actor_step(config, spec, state, obs, actor_key, parallel)
    else:
        def skip(state, obs, key):
            return state, {"actor_loss": jnp.zeros(()), "actor_grad_norm": jnp.zeros(())}

        def step(state, obs, key):
            # Scaled so that the mean over policy_delay steps is the actor steps' mean.
            state, m = _actor_step(config, spec, state, obs, key, parallel)
            return state, jax.tree.map(lambda x: x * config.policy_delay, m)

        state, actor_metrics = lockstep.cond(state.step % config.policy_delay == 0, step, skip,
                                             state, obs, actor_key)
    state = state.replace(step=state.step + 1)
    metrics = {"critic_loss": c_loss, "q_mean": q_mean, "td_abs_mean": td_abs_mean,
               "critic_grad_norm": optax.tree.norm(c_grads),
               "noise_scale": jnp.mean(state.noise_scale), **actor_metrics}
    return Update(state, metrics, td)


def td_error(config: DDPGConfig, spec: EnvSpec, state: DDPGState, transition: Any) -> Array:
    """TD errors ``[N]`` of n-step transitions, all networks in evaluation mode (the
    initial priorities of new transitions)."""
    q_t = target_q(config, spec, state, transition.next_obs)
    q = networks(config, spec).critic.apply(_first_critic(config, state.critic),
                                            transition.obs, transition.action)
    return jax.vmap(ddpg_critic_td)(q, transition.reward, transition.discount, q_t)


def make_ddpg(config: DDPGConfig, spec: EnvSpec, *,
              grad_transform: optax.GradientTransformation | None = None,
              batch_norm_axis: str | None = None) -> Agent:
    """Builds the DDPG agent for a continuous-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        grad_transform: applied to the gradients before both optimizers (the parallel
            layer passes one that averages them over devices); None: nothing.
        batch_norm_axis: the one place an agent names a mesh axis. With ``batch_norm``
            and data-parallel learning, each device holds a slice of every batch, and
            flax's BatchNorm can only take the whole batch's statistics through a named
            mesh axis (a mean over devices inside the layer); averaging gradients
            afterwards cannot recover them. The parallel layer passes its axis here; None elsewhere.

    Raises:
        ValueError: if the environment's actions are discrete or not a 1-D box.
    """
    if spec.discrete:
        raise ValueError(
            f"DDPG needs a continuous action space, but {spec.task_id} has {spec.num_actions} "
            "discrete actions; use a discrete-action agent (dqn or a2c) for it")
    if len(spec.action_shape) != 1 or len(spec.obs_shape) != 1:
        raise ValueError(f"DDPG in rljax needs vector observations and 1-D actions; "
                         f"{spec.task_id} has observations {spec.obs_shape} and actions "
                         f"{spec.action_shape}")
    parallel = _Parallel(grad_transform, batch_norm_axis)
    return Agent(
        init=functools.partial(init, config, spec, grad_transform=grad_transform),
        act=functools.partial(act, config, spec),
        update=functools.partial(update, config, spec, parallel=parallel),
        policy=functools.partial(policy, config, spec),
        params=lambda state: state.actor,
        td_error=functools.partial(td_error, config, spec),
    )

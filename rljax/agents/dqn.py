"""Deep Q-networks (DQN; Mnih et al. 2015, "Human-level control through deep
reinforcement learning") with the usual improvements as options.

A Q-network learns from (prioritized, n-step) replay; each gradient step minimizes

    delta_i = r_i + discount_i * Q'(s'_i, argmax_a Q(s'_i, a)) - Q(s_i, a_i)
    loss    = mean_i w_i l(delta_i)

* double Q-learning (van Hasselt et al. 2016): the online network picks the next action,
  the target network ``Q'`` values it (``double_q=False``: ``max_a Q'(s', a)``);
* ``discount_i = gamma^m (1 - terminated)`` for an ``m <= n``-step window (Sutton 1988;
  replay computes it), so terminal transitions do not bootstrap and truncated ones do;
* ``l`` is the Huber loss (Mnih et al.'s error clipping) or ``0.5 x^2``; ``w_i`` are the
  importance weights of prioritized replay (Schaul et al. 2016; 1 with uniform replay),
  whose new priorities are ``(|delta_i| + eps)^alpha``;
* dueling head ``Q = V + A - mean A`` (Wang et al. 2016);
* NoisyNet exploration (Fortunato et al. 2018) in place of epsilon-greedy: the head's
  layers are NoisyDense, fresh factorized noise per env at each acting step and per
  network at each gradient step;
* the target network is copied every ``target_period`` loop updates (``target_period *
  grad_steps`` gradient steps) or, with ``tau`` set, Polyak-averaged after every step;
* a categorical head (C51, Bellemare et al. 2017) with ``num_atoms = K > 1``: returns are
  distributions ``p(s, a)`` over atoms ``z = linspace(v_min, v_max, K)``, ``Q(s, a) =
  sum_k z_k p_k(s, a)`` acts; the loss is the cross-entropy to the projection of ``r +
  discount * z`` under ``p'(s', a*)`` (``a*`` the online network's pick, the target's
  without ``double_q``), priorities ``KL(target || p(s, a))`` (Hessel et al. 2018, sec.
  3). With dueling, NoisyNet, n-step returns and prioritized replay this is Rainbow.

Schedules (epsilon, replay's beta) are piecewise linear in loop updates, given as
``((update, value), ...)`` points (:func:`rljax.exploration.piecewise_linear`).
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
from rljax.agents import run_checks
from rljax.agents.base import ONE_DEVICE, Agent, Parallel, RunLength, Update, check_action_space
from rljax.agents.dqn_categorical import (  # categorical_targets, support: dqn's API too
    categorical_loss,
    categorical_losses,
    categorical_targets,
    mean_q,
    support,
)
from rljax.envs.spec import EnvSpec
from rljax.gradients import flattened, gradient_step
from rljax.losses.value_learning import LOSSES
from rljax.networks import Network, make_q_network, noise_like
from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.core import ACTIVATIONS
from rljax.networks.torso import import_string
from rljax.records import OffPolicyLoop, Replay, no_random_phase, shape_field
from rljax.targets import periodic_update, soft_update
from rljax.types import Array, Metrics, NStepTransition, Params, PRNGKey, Sample
from rljax.validate import Schedule

_CHOICES = {"td_loss": LOSSES, "conv_method": CONV_METHODS, "activation": tuple(ACTIVATIONS)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNConfig:
    """DQN hyperparameters (defaults: the rljax reference configuration for Breakout).

    Attributes:
        loop: the off-policy loop (:class:`rljax.records.OffPolicyLoop`).
        replay: prioritized, n-step replay (:class:`rljax.records.Replay`).
        epsilon: epsilon-greedy schedule, ``((update, value), ...)``; unused with ``noisy``.
        noisy: NoisyNet head instead of epsilon-greedy.
        noisy_sigma0: NoisyDense initial noise scale.
        gamma: discount.
        double_q: double Q-learning target; False: the max of the target network.
        dueling: dueling head.
        hidden_sizes: MLP torso layer sizes (vector observations; frames get the Nature CNN).
        head_hidden_sizes: hidden layers of the head (of each dueling stream).
        activation: hidden activation name.
        conv_method: the Nature CNN's convolutions: "matmul" (im2col, no conv op) or "xla".
        td_loss: loss of the TD error, "huber" or "l2" (unused with ``num_atoms > 1``).
        huber_delta: where the Huber loss turns linear.
        num_atoms: 1: Q-values; ``K > 1`` (51 in C51, Rainbow): a categorical head over K atoms.
        v_min: the lowest atom (the categorical head's support starts there).
        v_max: the highest atom, above ``v_min``.
        lr: Adam learning rate.
        lr_factor: a multiplier of ``lr``, piecewise linear in loop updates (``((update,
            factor), ...)`` like ``epsilon``; the last factor holds from its update on);
            None: a constant learning rate.
        adam_eps: Adam epsilon.
        max_grad_norm: clip gradients to this global norm; None: off.
        target_period: loop updates between hard target copies (used when ``tau`` is None).
        tau: Polyak step of a soft target update after every gradient step; None: hard.
        network: a user's torso in place of the MLP or CNN (a flax module class or its
            import string, kept as the string; :mod:`rljax.networks.torso`) under the
            head as set (dueling, NoisyNet, categorical). None: the MLP or CNN.
    """

    loop: OffPolicyLoop = OffPolicyLoop(num_envs=8, env_steps_per_update=4, grad_steps=8)
    replay: Replay = Replay(batch_size=32, buffer_size=2**14, prioritized=True)
    epsilon: Schedule = ((0, 1.0), (25_000, 0.1), (500_000, 0.01))
    noisy: bool = False
    noisy_sigma0: float = 0.5
    gamma: float = 0.99
    double_q: bool = True
    dueling: bool = True
    hidden_sizes: tuple[int, ...] = shape_field((64, 64), network=True)
    head_hidden_sizes: tuple[int, ...] = shape_field((), network=True)
    activation: str = "relu"
    conv_method: str = "matmul"
    td_loss: str = "huber"
    huber_delta: float = 1.0
    num_atoms: int = shape_field(1, network=True)
    v_min: float = -10.0
    v_max: float = 10.0
    lr: float = 2.5e-4
    lr_factor: Schedule | None = None
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 0.5
    target_period: int = 250
    tau: float | None = None
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        no_random_phase("dqn", self.loop)
        validate.integer("num_atoms", self.num_atoms, low=1,
                         note="1: Q-values; 2 or more: a categorical return distribution")
        validate.number("v_min", self.v_min), validate.number("v_max", self.v_max)
        if not self.v_min < self.v_max:
            raise ValueError(f"v_min must be below v_max (the categorical support runs from "
                             f"v_min to v_max), got v_min={self.v_min!r} and "
                             f"v_max={self.v_max!r}")
        # The update counter (target_period divides it) is int32.
        validate.integer("target_period", self.target_period, low=1,
                         high=validate.INT32_LIMIT - 1, note=validate.INT32_NOTE)
        for name in ("lr", "huber_delta", "adam_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("noisy_sigma0", self.noisy_sigma0, low=0.0, high=1e3)
        validate.number("tau", self.tau, low=0.0, high=1.0, optional=True)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.sizes("hidden_sizes", self.hidden_sizes)
        validate.sizes("head_hidden_sizes", self.head_hidden_sizes, allow_empty=True)
        for name, allowed in _CHOICES.items():
            validate.choice(name, getattr(self, name), allowed)
        for name in ("noisy", "double_q", "dueling"):
            validate.boolean(name, getattr(self, name))
        validate.schedule("epsilon", self.epsilon, low=0.0, high=1.0)
        object.__setattr__(self, "network", import_string(self.network))
        if self.lr_factor is not None:
            validate.schedule("lr_factor", self.lr_factor, low=0.0, high=1e3)

    @property
    def distributional(self) -> bool:
        """Whether the head is categorical (``num_atoms > 1``)."""
        return self.num_atoms > 1


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Epsilon as a function of the loop update count."""
    return exploration.piecewise_linear(config.epsilon)


@struct.dataclass
class DQNState:
    """Train state: online and target network variables, Adam state, gradient steps done
    and the loop update the exploring policy last acted in (for the epsilon metric)."""

    params: Params
    target_params: Params
    opt_state: optax.OptState
    step: Array
    update_step: Array


class Parts(NamedTuple):
    """DQN's network and optimizer, built once by :func:`make_dqn`."""

    net: Network
    optimizer: optax.GradientTransformation


def network(config: DQNConfig, spec: EnvSpec) -> Network:
    """The Q-network of ``config`` for ``spec``."""
    return make_q_network(spec.obs_shape, spec.num_actions, config.hidden_sizes,
                          head_hidden_sizes=config.head_hidden_sizes, dueling=config.dueling,
                          noisy=config.noisy, sigma0=config.noisy_sigma0,
                          activation=config.activation, conv_method=config.conv_method,
                          num_atoms=config.num_atoms if config.distributional else None,
                          network=config.network)


def q_values(config: DQNConfig, out: Array) -> Array:
    """``Q(s, .) [..., A]`` from the network's output: the output itself, or with a
    categorical head (logits ``[..., A, K]``) the mean returns ``sum_k z_k p_k``."""
    return mean_q(support(config), out) if config.distributional else out


def parts(config: DQNConfig, spec: EnvSpec, parallel: Parallel = ONE_DEVICE) -> Parts:
    """The network and optimizer of ``config`` for ``spec``."""
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    # One flat vector: a handful of kernels per step instead of several per parameter array.
    lr = exploration.scaled_learning_rate(config.lr, config.lr_factor, config.loop.grad_steps)
    optimizer = flattened(optax.chain(*clip, optax.adam(lr, eps=config.adam_eps)))
    return Parts(network(config, spec), parallel.optimizer(optimizer))


def init(spec: EnvSpec, parts: Parts, key: PRNGKey) -> DQNState:
    params = parts.net.init(key, jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype))
    return DQNState(params=params, target_params=jax.tree.map(jnp.copy, params),
                    opt_state=parts.optimizer.init(params),
                    step=jnp.zeros((), jnp.int32), update_step=jnp.zeros((), jnp.int32))


def _per_env_noise(params: Params, key: PRNGKey, num_envs: int) -> dict:
    template = noise_like(params, (num_envs,))
    leaves, treedef = jax.tree.flatten(template)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype)
                                        for k, x in zip(keys, leaves, strict=True)])


def act(config: DQNConfig, net: Network, state: DQNState, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, dict, DQNState]:
    """Exploring actions ``[B]``: epsilon-greedy at ``epsilon(step)``, or greedy in a
    noisy network with fresh noise per env."""
    del new_episode
    state = state.replace(update_step=jnp.asarray(step, jnp.int32))
    if config.noisy:
        noise = _per_env_noise(state.params, key, obs.shape[0])
        q = q_values(config, net.apply(state.params, obs, noise=noise))
        return jnp.argmax(q, axis=-1).astype(jnp.int32), {}, state
    q = q_values(config, net.apply(state.params, obs))
    return exploration.epsilon_greedy(key, q, epsilon_schedule(config)(step)), {}, state


def policy(config: DQNConfig, net: Network, params: Params, obs: Array) -> Array:
    """Noise-free greedy actions ``[B]`` (of the mean returns with a categorical head)."""
    q = q_values(config, net.apply(params, obs))
    return jnp.argmax(q, axis=-1).astype(jnp.int32)


def td_errors(config: DQNConfig, net: Network, params: Params, target_params: Params,
              transition: NStepTransition, key: PRNGKey | None = None) -> tuple[Array, Array]:
    """TD errors ``[N]`` of a batch of transitions, and the online ``Q(s, .) [N, A]``.

    Only ``params``' use on ``transition.obs`` is differentiable. ``key`` draws the
    NoisyNet noise (one draw per network application); None: noise-free.
    """
    keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
    q_tm1 = net.apply(params, transition.obs, noise_key=keys[0])
    q_t_target = net.apply(target_params, transition.next_obs, noise_key=keys[1])
    args = (q_tm1, transition.action, transition.reward, transition.discount)
    if config.double_q:
        q_t_online = net.apply(jax.lax.stop_gradient(params), transition.next_obs,
                               noise_key=keys[2])
        td = jax.vmap(losses.double_q_learning_td)(*args, q_t_online, q_t_target)
    else:
        td = jax.vmap(losses.q_learning_td)(*args, q_t_target)
    return td, q_tm1


def loss(config: DQNConfig, net: Network, params: Params, target_params: Params,
         batch: Sample, key: PRNGKey | None = None) -> tuple[Array, tuple[Array, Metrics]]:
    """Importance-weighted TD loss of a replay sample.

    With a categorical head: the importance-weighted cross-entropy, ``mean_i w_i CE_i``,
    and ``td_error`` is the per-transition ``KL(target || p) >= 0`` (see
    :func:`categorical_losses`), from which replay's priorities are ``(KL + eps)^alpha``.

    Returns:
        ``(loss, (td_error [N], metrics))``.
    """
    if config.distributional:
        return categorical_loss(config, net, params, target_params, batch, key)
    td, q_tm1 = td_errors(config, net, params, target_params, batch.transition, key)
    total = losses.weighted_td_loss(td, batch.weights, loss=config.td_loss,
                                    delta=config.huber_delta)
    metrics = {"loss": total, "q_mean": jnp.mean(q_tm1), "td_abs_mean": jnp.mean(jnp.abs(td))}
    return total, (td, metrics)


def update(config: DQNConfig, parts: Parts, state: DQNState, batch: Sample,
           key: PRNGKey) -> Update:
    """One gradient step and the target update; returns the TD errors for priorities."""
    key = key if config.noisy else None
    grad = gradient_step(functools.partial(loss, config, parts.net), parts.optimizer,
                         state.params, state.opt_state, state.target_params, batch, key)
    td, metrics = grad.aux
    params = grad.params
    step = state.step + 1
    if config.tau is not None:
        target = soft_update(state.target_params, params, config.tau)
    else:
        target = periodic_update(state.target_params, params, step,
                                 config.target_period * config.loop.grad_steps)
    metrics["grad_norm"] = grad.grad_norm
    if not config.noisy:
        metrics["epsilon"] = epsilon_schedule(config)(state.update_step)
    state = state.replace(params=params, target_params=target, opt_state=grad.opt_state,
                          step=step)
    return Update(state, metrics, td)


def td_error(config: DQNConfig, net: Network, state: DQNState,
             transition: NStepTransition) -> Array:
    """Noise-free TD errors ``[N]`` (initial priorities of new transitions); the KL
    divergences to the targets with a categorical head."""
    if config.distributional:
        target, logits_tm1 = categorical_targets(config, net, state.params,
                                                 state.target_params, transition)
        return categorical_losses(logits_tm1, transition.action, target)[1]
    return td_errors(config, net, state.params, state.target_params, transition)[0]


def check_run(config: DQNConfig, spec: EnvSpec, run: RunLength) -> None:
    """Refuses settings with which this run would never update a network
    (:mod:`rljax.agents.run_checks`)."""
    run_checks.soft_targets(config.tau)
    if config.tau is None:
        run_checks.target_period(config.target_period, run)


def make_dqn(config: DQNConfig, spec: EnvSpec, *, parallel: Parallel = ONE_DEVICE,
             run: RunLength | None = None) -> Agent:
    """Builds the DQN agent for a discrete-action environment.

    Args:
        config: hyperparameters.
        spec: the environment's spec.
        parallel: data-parallel hooks (:class:`rljax.agents.base.Parallel`; its
            ``grad_transform`` goes before the optimizer); default: one device.
        run: the run's length (:class:`rljax.agents.base.RunLength`); no setting
            of this agent depends on it.

    Raises:
        ValueError: if the environment's actions are continuous.
    """
    check_action_space("DQN", spec, discrete=True)
    built = parts(config, spec, parallel)
    return Agent(
        init=functools.partial(init, spec, built),
        act=functools.partial(act, config, built.net),
        update=functools.partial(update, config, built),
        policy=functools.partial(policy, config, built.net),
        params=lambda state: state.params,
        td_error=functools.partial(td_error, config, built.net),
    )

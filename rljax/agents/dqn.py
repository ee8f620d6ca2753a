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
  grad_steps`` gradient steps) or, with ``tau`` set, Polyak-averaged after every step.

Schedules (epsilon, prioritized replay's beta) are piecewise linear in the number of loop
updates, given as ``((update, value), ...)`` points (:func:`rljax.exploration.piecewise_linear`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, losses
from rljax.agents.base import OffPolicyAgent, check_positive, check_range, check_sizes
from rljax.buffers.nstep import NStepTransition
from rljax.buffers.prioritized import PrioritizedSample
from rljax.envs.spec import EnvSpec
from rljax.losses.value_learning import LOSSES
from rljax.networks import Network, make_q_network, noise_like
from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.core import get_activation
from rljax.targets import periodic_update, soft_update
from rljax.types import Array, Metrics, Params, PRNGKey

Schedule = tuple[tuple[int, float], ...]
_CHOICES = {"loss": LOSSES, "conv_method": CONV_METHODS}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNConfig:
    """DQN hyperparameters (defaults: the rljax reference configuration for Breakout).

    One loop *update* steps every env ``env_steps_per_update`` times, then (once replay
    holds ``learning_starts`` transitions) takes ``grad_steps`` gradient steps.

    Attributes:
        num_envs: parallel environments.
        env_steps_per_update: steps of every env per update.
        grad_steps: gradient steps per update.
        batch_size: transitions per gradient step.
        buffer_size: replay capacity in transitions.
        learning_starts: transitions in replay before learning starts; None: a full
            buffer (frame replay: every row written, see ``rljax.loops.memory``).
        prioritized: proportional prioritized replay; False: uniform.
        alpha: priority exponent.
        priority_eps: added to ``|delta|`` in priorities.
        beta: importance-sampling exponent schedule, ``((update, value), ...)``.
        initial_priorities: new transitions get their TD error as priority (flat replay
            only), else the largest priority so far.
        epsilon: epsilon-greedy schedule, ``((update, value), ...)``; unused with ``noisy``.
        noisy: NoisyNet head instead of epsilon-greedy.
        sigma0: NoisyDense initial noise scale.
        n_step: n-step return length (1: one-step TD).
        gamma: discount.
        double_q: double Q-learning target; False: the max of the target network.
        dueling: dueling head.
        hidden_sizes: MLP torso layer sizes (vector observations; frames get the Nature CNN).
        head_hidden_sizes: hidden layers of the head (of each dueling stream).
        activation: hidden activation name.
        conv_method: the Nature CNN's convolutions (frames only): "matmul" (im2col;
            faster per gradient step on an H100 and on XLA:CPU, where the two are within
            noise of each other in the whole training loop) or "xla".
        loss: "huber" or "l2".
        huber_delta: where the Huber loss turns linear.
        lr: Adam learning rate.
        adam_eps: Adam epsilon.
        max_grad_norm: clip gradients to this global norm; None: off.
        target_period: loop updates between hard target copies (used when ``tau`` is None).
        tau: Polyak step of a soft target update after every gradient step; None: hard.
        frame_replay: store Atari frames once (stacks rebuilt at sample time); None: for
            Atari tasks.
        unroll: unroll gradient steps and updates in the compiled chunk (not needed for
            speed since the Nature CNN's gradients run fast in rolled loops).
    """

    num_envs: int = 8
    env_steps_per_update: int = 4
    grad_steps: int = 8
    batch_size: int = 32
    buffer_size: int = 2**14
    learning_starts: int | None = None
    prioritized: bool = True
    alpha: float = 0.6
    priority_eps: float = 1e-6
    beta: Schedule = ((0, 0.4), (1_000_000, 1.0))
    initial_priorities: bool = False
    epsilon: Schedule = ((0, 1.0), (25_000, 0.1), (500_000, 0.01))
    noisy: bool = False
    sigma0: float = 0.5
    n_step: int = 1
    gamma: float = 0.99
    double_q: bool = True
    dueling: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    head_hidden_sizes: tuple[int, ...] = ()
    activation: str = "relu"
    conv_method: str = "matmul"
    loss: str = "huber"
    huber_delta: float = 1.0
    lr: float = 2.5e-4
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 0.5
    target_period: int = 250
    tau: float | None = None
    frame_replay: bool | None = None
    unroll: bool = False

    def __post_init__(self):
        check_positive(self, "num_envs", "env_steps_per_update", "grad_steps", "batch_size",
                       "buffer_size", "n_step", "target_period", integer=True)
        check_positive(self, "lr", "huber_delta", "adam_eps")
        check_range(self, "gamma", 0.0, 1.0)
        check_range(self, "alpha", 0.0, 1e3)
        check_range(self, "priority_eps", 0.0, 1e3)
        check_range(self, "sigma0", 0.0, 1e3)
        check_range(self, "tau", 0.0, 1.0, optional=True)
        check_range(self, "max_grad_norm", 1e-12, 1e12, optional=True)
        check_sizes(self, "hidden_sizes")
        if not isinstance(self.head_hidden_sizes, tuple) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0
                for v in self.head_hidden_sizes):
            raise ValueError(f"head_hidden_sizes must be a tuple of positive integers "
                             f"(possibly empty), got {self.head_hidden_sizes!r}")
        get_activation(self.activation)
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                                 f"got {getattr(self, name)!r}")
        for name in ("prioritized", "initial_priorities", "noisy", "double_q", "dueling",
                     "unroll"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.frame_replay is not None and not isinstance(self.frame_replay, bool):
            raise ValueError(f"frame_replay must be true, false or None, "
                             f"got {self.frame_replay!r}")
        if self.learning_starts is not None:
            check_positive(self, "learning_starts", integer=True)
            if not self.batch_size <= self.learning_starts <= self.buffer_size:
                raise ValueError(
                    f"learning_starts must be in [batch_size={self.batch_size}, "
                    f"buffer_size={self.buffer_size}] or None (a full buffer), "
                    f"got {self.learning_starts!r}")
        _check_schedule("epsilon", self.epsilon)
        _check_schedule("beta", self.beta)

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.env_steps_per_update

    @property
    def min_replay(self) -> int:
        """Transitions in replay before learning starts."""
        return self.buffer_size if self.learning_starts is None else self.learning_starts


def _check_schedule(name: str, points: Schedule) -> None:
    """Schedules are tuples of ``(update, value)`` pairs with values in [0, 1]."""
    ok = isinstance(points, tuple) and all(isinstance(p, tuple) for p in points)
    try:
        if not ok:
            raise ValueError("not a tuple of pairs")
        exploration.piecewise_linear(points)
    except ValueError as e:
        raise ValueError(f"{name} must be a schedule ((update, value), ...) with increasing "
                         f"updates, e.g. '0:1.0,25000:0.1' on the command line, got "
                         f"{points!r} ({e})") from None
    if not all(0.0 <= v <= 1.0 for _, v in points):
        raise ValueError(f"{name} values must be in [0, 1], got {points!r}")


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Epsilon as a function of the loop update count."""
    return exploration.piecewise_linear(config.epsilon)


def beta_schedule(config: DQNConfig) -> optax.Schedule:
    """Importance-sampling exponent as a function of the loop update count."""
    return exploration.piecewise_linear(config.beta)


@struct.dataclass
class DQNState:
    """Train state.

    Attributes:
        params: online network variables.
        target_params: target network variables.
        opt_state: Adam state.
        step: gradient steps done.
        update_step: loop update the exploring policy last acted in (for the epsilon
            metric).
    """

    params: Params
    target_params: Params
    opt_state: optax.OptState
    step: Array
    update_step: Array


def _network(config: DQNConfig, spec: EnvSpec) -> Network:
    return make_q_network(spec.obs_shape, spec.num_actions, config.hidden_sizes,
                          head_hidden_sizes=config.head_hidden_sizes, dueling=config.dueling,
                          noisy=config.noisy, sigma0=config.sigma0,
                          activation=config.activation, conv_method=config.conv_method)


def _make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    # One flat vector: a handful of kernels per step instead of several per parameter array.
    return optax.flatten(optax.chain(*clip, optax.adam(config.lr, eps=config.adam_eps)))


def init(config: DQNConfig, spec: EnvSpec, key: PRNGKey) -> DQNState:
    params = _network(config, spec).init(key, jnp.zeros((1,) + spec.obs_shape, spec.obs_dtype))
    return DQNState(params=params, target_params=jax.tree.map(jnp.copy, params),
                    opt_state=_make_optimizer(config).init(params),
                    step=jnp.zeros((), jnp.int32), update_step=jnp.zeros((), jnp.int32))


def _per_env_noise(params: Params, key: PRNGKey, num_envs: int) -> dict:
    template = noise_like(params, (num_envs,))
    leaves, treedef = jax.tree.flatten(template)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype)
                                        for k, x in zip(keys, leaves, strict=True)])


def act(config: DQNConfig, spec: EnvSpec, state: DQNState, obs: Array, key: PRNGKey,
        step: Array, new_episode: Array) -> tuple[Array, DQNState]:
    """Exploring actions ``[B]``: epsilon-greedy at ``epsilon(step)``, or greedy in a
    noisy network with fresh noise per env."""
    del new_episode
    net = _network(config, spec)
    state = state.replace(update_step=jnp.asarray(step, jnp.int32))
    if config.noisy:
        noise = _per_env_noise(state.params, key, obs.shape[0])
        q = net.apply(state.params, obs, noise=noise)
        return jnp.argmax(q, axis=-1).astype(jnp.int32), state
    q = net.apply(state.params, obs)
    return exploration.epsilon_greedy(key, q, epsilon_schedule(config)(step)), state


def greedy_act(config: DQNConfig, spec: EnvSpec, params: Params, obs: Array) -> Array:
    """Noise-free greedy actions ``[B]``."""
    return jnp.argmax(_network(config, spec).apply(params, obs), axis=-1).astype(jnp.int32)


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


def loss(config: DQNConfig, spec: EnvSpec, params: Params, target_params: Params,
         batch: PrioritizedSample, key: PRNGKey | None = None) -> tuple[Array, tuple[Array,
                                                                                  Metrics]]:
    """Importance-weighted TD loss of a replay sample.

    Returns:
        ``(loss, (td_error [N], metrics))``.
    """
    td, q_tm1 = td_errors(config, _network(config, spec), params, target_params,
                          batch.transition, key)
    total = losses.weighted_td_loss(td, batch.weights, loss=config.loss,
                                    delta=config.huber_delta)
    metrics = {"loss": total, "q_mean": jnp.mean(q_tm1), "td_abs_mean": jnp.mean(jnp.abs(td))}
    return total, (td, metrics)


def update(config: DQNConfig, spec: EnvSpec, state: DQNState, batch: PrioritizedSample,
           key: PRNGKey, axis_name: str | None = None) -> tuple[DQNState, Metrics, Array]:
    """One gradient step and the target update; returns the TD errors for priorities.

    With ``axis_name`` the batch is one equal shard of a batch split over that mesh axis
    (inside ``shard_map``): gradients and metrics are averaged over the shards (the whole
    batch's mean loss), so every shard takes the same step; the TD errors stay the shard's.
    """
    key = key if config.noisy else None
    grads, (td, metrics) = jax.grad(functools.partial(loss, config, spec), has_aux=True)(
        state.params, state.target_params, batch, key)
    if axis_name is not None:
        grads, metrics = jax.lax.pmean((grads, metrics), axis_name)
    updates, opt_state = _make_optimizer(config).update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    step = state.step + 1
    if config.tau is not None:
        target = soft_update(state.target_params, params, config.tau)
    else:
        target = periodic_update(state.target_params, params, step,
                                 config.target_period * config.grad_steps)
    metrics["grad_norm"] = optax.tree.norm(grads)
    if not config.noisy:
        metrics["epsilon"] = epsilon_schedule(config)(state.update_step)
    state = state.replace(params=params, target_params=target, opt_state=opt_state, step=step)
    return state, metrics, td


def td_error(config: DQNConfig, spec: EnvSpec, state: DQNState,
             transition: NStepTransition) -> Array:
    """Noise-free TD errors ``[N]`` (initial priorities of new transitions)."""
    return td_errors(config, _network(config, spec), state.params, state.target_params,
                     transition)[0]


def make_dqn(config: DQNConfig, spec: EnvSpec, axis_name: str | None = None) -> OffPolicyAgent:
    """Builds the DQN agent for a discrete-action environment.

    ``axis_name``: learn data-parallel over that mesh axis (``update`` runs inside
    ``shard_map`` on a shard of each batch; see :mod:`rljax.parallel.data_parallel`).

    Raises:
        ValueError: if the environment's actions are continuous.
    """
    if not spec.discrete:
        raise ValueError(
            f"DQN needs a discrete action space, but {spec.task_id} has a continuous one "
            f"(Box of shape {spec.action_shape}, low {spec.action_low}, high "
            f"{spec.action_high}); use a continuous-control agent such as ddpg")
    return OffPolicyAgent(
        init=functools.partial(init, config, spec),
        act=functools.partial(act, config, spec),
        update=functools.partial(update, config, spec, axis_name=axis_name),
        greedy_act=functools.partial(greedy_act, config, spec),
        params=lambda state: state.params,
        td_error=functools.partial(td_error, config, spec),
    )

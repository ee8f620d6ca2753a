"""What the continuous-control actor-critics (DDPG, TD3, SAC) share.

* the action-space check (:func:`check_continuous`) and the action bounds;
* their optimizers (:func:`adam`, with the parallel gradient transformation);
* the twin critics' loss and step (:func:`twin_critic_loss`, :func:`critic_step`; TD3 and
  SAC), on :func:`rljax.gradients.gradient_step`;
* target policy smoothing (:func:`smooth_target_action`; TD3, and DDPG's ``target_noise``)
  on :func:`rljax.losses.continuous.smoothed_target_action`;
* delayed actor updates with the soft updates of the targets (:func:`delayed_actor_step`,
  :func:`soft_update_targets`; TD3 and DDPG) on
  :func:`rljax.losses.continuous.delayed_update`;
* the random initial phase (:func:`with_random_phase`; TD3 and SAC).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from rljax import lockstep
from rljax.agents.base import Parallel, check_action_space
from rljax.envs.spec import EnvSpec
from rljax.gradients import gradient_step
from rljax.losses import weighted_td_loss
from rljax.losses.continuous import delayed_update, smoothed_target_action
from rljax.networks import Network
from rljax.targets import soft_update
from rljax.types import Array, ArrayLike, Metrics, PRNGKey, Sample


def check_continuous(algo: str, spec: EnvSpec) -> None:
    """ValueError unless ``spec`` has flat observations and a bounded vector of actions."""
    check_action_space(algo, spec, discrete=False, flat_obs=True)


def bounds(spec: EnvSpec) -> tuple[Array, Array]:
    """Action bounds ``(low [A], high [A])`` as float32."""
    return (jnp.asarray(spec.action_low, jnp.float32),
            jnp.asarray(spec.action_high, jnp.float32))


def example_inputs(spec: EnvSpec) -> tuple[Array, Array]:
    """``(obs [1, ...], action [1, A])`` of zeros, to initialize networks with."""
    return (jnp.zeros((1,) + spec.obs_shape, jnp.float32),
            jnp.zeros((1,) + spec.action_shape, jnp.float32))


def own_copy(tree: Any) -> Any:
    """A copy with its own buffers (target networks: the loop donates the state)."""
    return jax.tree.map(jnp.array, tree)


def adam(lr: float, parallel: Parallel) -> optax.GradientTransformation:
    """Adam over each parameter array, after the parallel gradient transformation."""
    # Per parameter array, not optax.flatten: XLA:CPU copies the twin critics' stacked,
    # transposed first-layer gradient into the flat vector very slowly, and with 256x256
    # networks that copy took over half of a gradient step (TD3 8.6 -> 3.4 ms, SAC 14.7
    # -> 5.3 ms per step of 256 without it; docs/benchmarks.md).
    return parallel.optimizer(optax.adam(lr))


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


def smooth_target_action(key: PRNGKey, action: Array, noise: ArrayLike, noise_clip: ArrayLike,
                         spec: EnvSpec, *, half_ranges: bool) -> Array:
    """Target policy smoothing (Fujimoto et al. 2018, sec. 5.3): ``action [N, A]`` plus
    clipped Gaussian noise, clipped to the bounds.

    Args:
        key: PRNG key of the noise.
        action: the target actor's actions.
        noise: the noise's standard deviation.
        noise_clip: its bound.
        spec: the env's spec (the action bounds).
        half_ranges: ``noise`` and ``noise_clip`` are in half-ranges ``h = (high - low) /
            2`` of each dimension (TD3: the smoothing runs in ``[-1, 1]`` coordinates,
            where the paper's scales apply); False: in the action's own units (DDPG).
    """
    low, high = bounds(spec)
    if not half_ranges:
        return smoothed_target_action(key, action, noise, noise_clip, low, high)
    mid, half = (high + low) / 2, (high - low) / 2
    unit = smoothed_target_action(key, (action - mid) / half, noise, noise_clip, -1.0, 1.0)
    return jnp.clip(mid + half * unit, low, high)


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
    step = gradient_step(functools.partial(twin_critic_loss, critic), optimizer,
                         variables["params"], opt_state, batch, target)
    td, q = step.aux
    metrics = {"critic_loss": step.loss, "q_mean": jnp.mean(q[0]),
               "td_abs_mean": jnp.mean(jnp.abs(td[0])), "critic_grad_norm": step.grad_norm}
    return {"params": step.params}, step.opt_state, metrics, td[0]


def soft_update_targets(state: Any, tau: float) -> Any:
    """``state`` with its ``target_actor`` and ``target_critic`` moved toward its actor and
    critic by ``tau`` (after an actor step)."""
    return state.replace(target_actor=soft_update(state.target_actor, state.actor, tau),
                         target_critic=soft_update(state.target_critic, state.critic, tau))


def delayed_actor_step(step: Array, delay: int,
                       actor_step: Callable[..., tuple[Any, Metrics]], state: Any,
                       *operands: Any) -> tuple[Any, Metrics]:
    """``actor_step(state, *operands) -> (state, metrics)`` on critic steps ``0, delay,
    2 delay, ...`` (Fujimoto et al. 2018, sec. 5.2; ``step``: critic steps done before this
    one).

    The metrics (``actor_loss``, ``actor_grad_norm``) are 0 on skipped steps and ``delay``
    times the value on actor steps, so that their mean over a multiple of ``delay`` steps
    (what the loop reports over its gradient steps) is the actor steps' mean.
    """
    if delay == 1:
        return actor_step(state, *operands)

    def run(state, *operands):
        state, metrics = actor_step(state, *operands)
        return state, jax.tree.map(lambda x: x * delay, metrics)

    def skip(state, *operands):
        return state, {"actor_loss": jnp.zeros(()), "actor_grad_norm": jnp.zeros(())}

    return lockstep.cond(delayed_update(step, delay), run, skip, state, *operands)

"""Targets and losses of continuous-control actor-critics: TD3 and SAC.

TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods") and SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications", with automatic entropy tuning).

Unlike the per-transition functions of :mod:`rljax.losses.value_learning`, these are
elementwise: every per-transition argument has the same shape, ``[]`` for one
transition or ``[B]`` for a batch (no ``vmap`` needed), and the result has that shape.
The arguments must match exactly rather than broadcast, so that a ``[B]`` reward and a
``[B, 1]`` critic output fail loudly instead of making a ``[B, B]`` target. As in
:mod:`rljax.losses.value_learning`, ``discount_t = gamma^m * (1 - terminated)`` already
folds in the n-step window and termination, and targets are under ``stop_gradient``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.losses.checks import concrete, same_shape
from rljax.types import Array, ArrayLike, PRNGKey

# Shapes the transition arguments take.
_ONE_OR_BATCH = " ([] for one transition, [B] for a batch)"


def _scalar(fn: str, name: str, x: ArrayLike) -> Array:
    x = jnp.asarray(x)
    if x.ndim != 0:
        raise ValueError(f"{fn}: {name} must be a scalar, got shape {x.shape}")
    return x


def _check_nonnegative(fn: str, name: str, x: ArrayLike) -> None:
    array = concrete(x)
    if array is not None and not np.all(array >= 0):
        raise ValueError(f"{fn}: {name} must be >= 0, got {x!r}")


def clipped_double_q_target(r_t: ArrayLike, discount_t: ArrayLike, q1_t: ArrayLike,
                            q2_t: ArrayLike) -> Array:
    """Clipped double-Q target (Fujimoto et al. 2018, sec. 4.2, eq. 10).

    ``y = r_t + discount_t * min(q1_t, q2_t)``: the smaller of the two target critics
    curbs the overestimation a single critic's maximisation builds up.

    Args:
        r_t: (n-step) reward, ``[]`` or ``[B]``.
        discount_t: ``gamma^m * (1 - terminated)``, same shape.
        q1_t: first target critic at the next state and the (smoothed) target action,
            same shape.
        q2_t: second target critic there, same shape.

    Returns:
        Target, same shape, under ``stop_gradient``.
    """
    r_t, discount_t, q1_t, q2_t = same_shape("clipped_double_q_target", _ONE_OR_BATCH, r_t=r_t,
                                             discount_t=discount_t, q1_t=q1_t, q2_t=q2_t)
    return jax.lax.stop_gradient(r_t + discount_t * jnp.minimum(q1_t, q2_t))


def smoothed_target_action(key: PRNGKey, action: ArrayLike, noise_std: ArrayLike,
                           noise_clip: ArrayLike, low: ArrayLike, high: ArrayLike) -> Array:
    """TD3 target policy smoothing (Fujimoto et al. 2018, sec. 5.3).

    ``clip(action + clip(eps, -noise_clip, noise_clip), low, high)`` with
    ``eps ~ N(0, noise_std^2)`` drawn as ``noise_std * jax.random.normal(key, action.shape)``,
    so that the critic's target is an average over a small neighbourhood of the target
    action rather than a sharp peak the actor could exploit. ``noise_std`` and
    ``noise_clip`` are in the action's own units (the paper's 0.2 and 0.5 are for
    actions in [-1, 1]; scale them by ``(high - low) / 2`` for other bounds).

    Args:
        key: PRNG key.
        action: target actor's action ``[..., A]`` (``[B, A]`` for a batch).
        noise_std: noise standard deviation, scalar >= 0.
        noise_clip: noise bound, scalar >= 0.
        low: lower action bounds, ``[A]`` or a scalar.
        high: upper action bounds, ``[A]`` or a scalar.

    Returns:
        Smoothed actions, shape and dtype of ``action``, within ``[low, high]``.
    """
    fn = "smoothed_target_action"
    action = jnp.asarray(action)
    if not jnp.issubdtype(action.dtype, jnp.floating):
        raise ValueError(f"{fn}: action must be floating point, got dtype {action.dtype}")
    _check_nonnegative(fn, "noise_std", noise_std)
    _check_nonnegative(fn, "noise_clip", noise_clip)
    noise_std = _scalar(fn, "noise_std", noise_std)
    noise_clip = _scalar(fn, "noise_clip", noise_clip)
    low, high = _bounds(fn, low, high, action.shape, action.dtype)
    eps = noise_std.astype(action.dtype) * jax.random.normal(key, action.shape, action.dtype)
    clip = noise_clip.astype(action.dtype)
    return jnp.clip(action + jnp.clip(eps, -clip, clip), low, high)


def _bounds(fn: str, low: ArrayLike, high: ArrayLike, shape: tuple[int, ...],
            dtype: Any) -> tuple[Array, Array]:
    if len(shape) == 0:
        raise ValueError(f"{fn}: action must have a trailing action axis [..., A], got a scalar")
    for name, bound in (("low", low), ("high", high)):
        bound_shape = np.shape(bound)
        if bound_shape not in ((), shape[-1:]):
            raise ValueError(f"{fn}: {name} must be a scalar or [A] = {shape[-1:]}, got shape "
                             f"{bound_shape}")
    low_np, high_np = concrete(low), concrete(high)
    if low_np is not None and high_np is not None and not np.all(low_np <= high_np):
        raise ValueError(f"{fn}: low must be <= high, got low {low!r}, high {high!r}")
    return jnp.asarray(low, dtype), jnp.asarray(high, dtype)


def sac_critic_target(r_t: ArrayLike, discount_t: ArrayLike, q1_t: ArrayLike, q2_t: ArrayLike,
                      next_log_prob_t: ArrayLike, alpha: ArrayLike) -> Array:
    """Soft clipped double-Q target (Haarnoja et al. 2018, eq. 3, with the minimum of two
    target critics of their practical algorithm).

    ``y = r_t + discount_t * (min(q1_t, q2_t) - alpha * next_log_prob_t)``, the soft
    state value ``V(s') = E_{a' ~ pi}[Q(s', a') - alpha log pi(a'|s')]`` estimated with one
    fresh policy sample ``a'`` at the next state and the smaller of two target critics.

    Args:
        r_t: (n-step) reward, ``[]`` or ``[B]``.
        discount_t: ``gamma^m * (1 - terminated)``, same shape.
        q1_t: first target critic at ``(s', a')``, same shape.
        q2_t: second target critic at ``(s', a')``, same shape.
        next_log_prob_t: ``log pi(a'|s')`` of the current policy, same shape.
        alpha: entropy temperature, scalar > 0 (``exp(log_alpha)``).

    Returns:
        Target, same shape, under ``stop_gradient``.
    """
    fn = "sac_critic_target"
    r_t, discount_t, q1_t, q2_t, next_log_prob_t = same_shape(
        fn, _ONE_OR_BATCH, r_t=r_t, discount_t=discount_t, q1_t=q1_t, q2_t=q2_t,
        next_log_prob_t=next_log_prob_t)
    alpha = _scalar(fn, "alpha", alpha)
    soft_v = jnp.minimum(q1_t, q2_t) - alpha * next_log_prob_t
    return jax.lax.stop_gradient(r_t + discount_t * soft_v)


def sac_actor_loss(q1: ArrayLike, q2: ArrayLike, log_prob: ArrayLike, alpha: ArrayLike) -> Array:
    """SAC policy loss per sample (Haarnoja et al. 2018, eq. 7 with clipped double Q).

    ``alpha * log pi(a|s) - min(q1, q2)`` for ``a`` sampled by reparameterisation
    (:func:`rljax.networks.tanh_gaussian.sample_and_log_prob`), so the gradient reaches
    the policy through both ``log_prob`` and the critics' inputs. ``alpha`` is held
    fixed (``stop_gradient``; it has its own loss, :func:`temperature_loss`); the caller
    holds the critics' parameters fixed by differentiating with respect to the actor's
    only.

    Args:
        q1: first online critic at ``(s, a)``, ``[]`` or ``[B]``.
        q2: second online critic at ``(s, a)``, same shape.
        log_prob: ``log pi(a|s)``, same shape.
        alpha: entropy temperature, scalar.

    Returns:
        Loss per sample, same shape (average it over the batch).
    """
    q1, q2, log_prob = same_shape("sac_actor_loss", _ONE_OR_BATCH, q1=q1, q2=q2,
                                  log_prob=log_prob)
    alpha = jax.lax.stop_gradient(_scalar("sac_actor_loss", "alpha", alpha))
    return alpha * log_prob - jnp.minimum(q1, q2)


def temperature_loss(log_alpha: ArrayLike, log_prob: ArrayLike,
                     target_entropy: ArrayLike) -> Array:
    """Automatic entropy tuning per sample (Haarnoja et al. 2018, eq. 18, in log alpha).

    ``-log_alpha * stop_gradient(log_prob + target_entropy)``. Its gradient in
    ``log_alpha`` is ``-(log_prob + target_entropy)``, whose batch mean is
    ``H - target_entropy`` for the entropy estimate ``H = -mean(log_prob)``: gradient
    descent raises alpha while the policy's entropy is below the target and lowers it
    while above. The paper writes the loss in ``alpha`` (``-alpha (log_prob +
    target_entropy)``); optimising ``log_alpha`` with it in this form (as the SAC
    authors' own code does) gives steps that do not shrink with alpha, so alpha stays
    positive and can move across orders of magnitude at a steady pace. The usual target
    is ``-A`` for ``A`` action dimensions (Haarnoja et al. 2018's hyperparameters).

    Args:
        log_alpha: the trained parameter, scalar.
        log_prob: ``log pi(a|s)`` of fresh policy samples, any shape (``[B]``).
        target_entropy: desired entropy, scalar.

    Returns:
        Loss per sample, shape of ``log_prob`` (average it over the batch).
    """
    log_alpha = _scalar("temperature_loss", "log_alpha", log_alpha)
    target_entropy = _scalar("temperature_loss", "target_entropy", target_entropy)
    return -log_alpha * jax.lax.stop_gradient(jnp.asarray(log_prob) + target_entropy)


def delayed_update(step: ArrayLike, period: int) -> Array:
    """Whether a delayed (TD3, Fujimoto et al. 2018, sec. 5.2) update runs at ``step``.

    ``step % period == 0``, with ``step`` the number of critic updates done before this
    one (0 first): the actor and the targets move on critic updates ``0, period,
    2 period, ...``, so ``N`` critic updates come with ``ceil(N / period)`` delayed ones.
    Use it as the predicate of ``jax.lax.cond``.

    Args:
        step: critic updates done so far, int scalar (or any shape).
        period: delay, a positive Python int (the paper: 2).

    Returns:
        bool array, shape of ``step``.
    """
    if isinstance(period, bool) or not isinstance(period, int | np.integer) or period <= 0:
        raise ValueError(f"delayed_update: period must be a positive integer, got {period!r}")
    step = jnp.asarray(step)
    if not jnp.issubdtype(step.dtype, jnp.integer):
        raise ValueError(f"delayed_update: step must be an integer, got dtype {step.dtype}")
    return step % period == 0

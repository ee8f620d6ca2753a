"""PPO's clipped objectives (Schulman et al. 2017, "Proximal Policy Optimization
Algorithms"), elementwise over samples.

Every function takes arrays of one common shape ``[...]`` (a minibatch ``[N]`` or a
rollout ``[T, B]``) and returns per-sample terms of that shape; reduce them with a
masked mean at the call site. Only the current policy's log-probabilities and the
current values receive gradients: the old policy's log-probabilities and values, the
advantages and the value targets are data of the rollout and are held constant.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.losses.checks import same_shape
from rljax.types import Array, ArrayLike


def _check_clip_eps(fn: str, clip_eps: float) -> None:
    # Traced values (a schedule) cannot be checked here.
    if isinstance(clip_eps, int | float) and not isinstance(clip_eps, bool) and not clip_eps > 0:
        raise ValueError(f"{fn}: clip_eps must be > 0, got {clip_eps!r}")


def _log_ratio(log_prob_t: Array, old_log_prob_t: Array) -> Array:
    return log_prob_t - jax.lax.stop_gradient(old_log_prob_t)


def clipped_surrogate_loss(log_prob_t: ArrayLike, old_log_prob_t: ArrayLike,
                           adv_t: ArrayLike, clip_eps: float) -> Array:
    """Negated clipped surrogate objective (Schulman et al. 2017, eq. 7).

    ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(log_prob - old_log_prob)``.
    The gradient is zero where the clipped term is the smaller one: where the ratio has
    already moved past ``1 + eps`` (``A > 0``) or below ``1 - eps`` (``A < 0``) in the
    direction the advantage favours.

    Args:
        log_prob_t: log-probabilities of the taken actions under the current policy,
            ``[...]``.
        old_log_prob_t: the same under the policy that collected the rollout, ``[...]``.
        adv_t: advantages ``[...]``.
        clip_eps: clipping range ``eps`` > 0 (0.2 in the paper's MuJoCo experiments).

    Returns:
        Per-sample losses ``[...]``.
    """
    log_prob_t, old_log_prob_t, adv_t = same_shape(
        "clipped_surrogate_loss", log_prob_t=log_prob_t, old_log_prob_t=old_log_prob_t,
        adv_t=adv_t)
    _check_clip_eps("clipped_surrogate_loss", clip_eps)
    ratio = jnp.exp(_log_ratio(log_prob_t, old_log_prob_t))
    adv_t = jax.lax.stop_gradient(adv_t)
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    return -jnp.minimum(ratio * adv_t, clipped * adv_t)


def clip_fraction(log_prob_t: ArrayLike, old_log_prob_t: ArrayLike, clip_eps: float) -> Array:
    """Indicator that the ratio lies outside ``[1 - eps, 1 + eps]``, a metric.

    Its mean over a batch is the fraction of samples whose ratio the surrogate clips
    (on either side, whichever the advantage's sign), as commonly logged for PPO.

    Args:
        log_prob_t: current log-probabilities ``[...]``.
        old_log_prob_t: rollout log-probabilities ``[...]``.
        clip_eps: clipping range > 0.

    Returns:
        ``1.0`` where clipped, else ``0.0``, ``[...]`` (no gradient).
    """
    log_prob_t, old_log_prob_t = same_shape(
        "clip_fraction", log_prob_t=log_prob_t, old_log_prob_t=old_log_prob_t)
    _check_clip_eps("clip_fraction", clip_eps)
    ratio = jnp.exp(_log_ratio(log_prob_t, old_log_prob_t))
    outside = jnp.abs(ratio - 1.0) > clip_eps
    return jax.lax.stop_gradient(outside.astype(ratio.dtype))


def approx_kl(log_prob_t: ArrayLike, old_log_prob_t: ArrayLike) -> Array:
    """Per-sample estimate of ``KL(old || current)``, a metric: ``(r - 1) - log r``.

    For actions drawn from the old policy this is unbiased and never negative (the
    "k3" estimator of Schulman 2020, "Approximating KL Divergence"), unlike the mean of
    ``-log r``.

    Args:
        log_prob_t: current log-probabilities ``[...]``.
        old_log_prob_t: rollout log-probabilities ``[...]``.

    Returns:
        Estimates ``[...]``, differentiable in ``log_prob_t``.
    """
    log_prob_t, old_log_prob_t = same_shape(
        "approx_kl", log_prob_t=log_prob_t, old_log_prob_t=old_log_prob_t)
    log_ratio = _log_ratio(log_prob_t, old_log_prob_t)
    # expm1 keeps (r - 1) - log r accurate for the tiny log-ratios of early epochs.
    return jnp.expm1(log_ratio) - log_ratio


def clipped_value_loss(v_t: ArrayLike, old_v_t: ArrayLike, target_t: ArrayLike,
                       clip_eps: float | None) -> Array:
    """PPO's value loss, optionally clipped around the rollout's values.

    ``max((v - G)^2, (v_old + clip(v - v_old, -eps, eps) - G)^2)``, as in OpenAI
    Baselines' PPO2 (the paper itself does not clip values); with ``clip_eps`` None the
    plain squared error ``(v - G)^2``. There is no factor 0.5: the squared error
    matches :func:`rljax.losses.value_loss`, so a coefficient of 0.5 reproduces
    implementations that halve it. The gradient is zero where the clipped term is the
    larger one and ``v`` lies outside ``v_old +- eps``.

    Args:
        v_t: current values ``[...]``.
        old_v_t: values predicted when the rollout was collected ``[...]`` (unused
            when ``clip_eps`` is None, but its shape is still checked).
        target_t: value targets ``G`` (returns) ``[...]``.
        clip_eps: clipping range > 0 in the value's units, or None for no clipping.

    Returns:
        Per-sample losses ``[...]``.
    """
    v_t, old_v_t, target_t = same_shape("clipped_value_loss", v_t=v_t, old_v_t=old_v_t,
                                         target_t=target_t)
    target_t = jax.lax.stop_gradient(target_t)
    unclipped = jnp.square(v_t - target_t)
    if clip_eps is None:
        return unclipped
    _check_clip_eps("clipped_value_loss", clip_eps)
    old_v_t = jax.lax.stop_gradient(old_v_t)
    v_clipped = old_v_t + jnp.clip(v_t - old_v_t, -clip_eps, clip_eps)
    return jnp.maximum(unclipped, jnp.square(v_clipped - target_t))

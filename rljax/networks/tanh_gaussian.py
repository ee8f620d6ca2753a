"""Tanh-squashed diagonal Gaussian policy, as pure functions (no flax).

The SAC policy (Haarnoja et al. 2018, "Soft Actor-Critic", appendix C): a Gaussian
``u ~ N(mean, diag(exp(log_std))^2)`` squashed by ``tanh`` and rescaled to the action
box, ``a = c + s * tanh(u)`` with ``c = (high + low) / 2`` and ``s = (high - low) / 2``.
By the change of variables (their eq. 21, plus the rescaling's Jacobian),

    log pi(a) = sum_i [log N(u_i) - log(1 - tanh(u_i)^2) - log s_i].

``log(1 - tanh(u)^2)`` is evaluated as ``2 (log 2 - u - softplus(-2 u))``, which stays
finite where ``1 - tanh(u)^2`` underflows (``|u|`` beyond about 9 in float32).

``mean`` and ``log_std`` are ``[..., A]`` (a batch ``[B, A]``); ``log_std`` may also be
``[A]`` (state-independent) and is used as given: bounding it (SAC: ``[-20, 2]``) is the
network's job. ``low`` and ``high`` are ``[A]`` or scalars, with ``low < high``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import Array, ArrayLike, PRNGKey

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check(fn: str, mean: ArrayLike, log_std: ArrayLike | None, low: ArrayLike,
           high: ArrayLike) -> tuple[Array, Array | None, Array, Array]:
    mean = jnp.asarray(mean)
    if mean.ndim == 0 or not jnp.issubdtype(mean.dtype, jnp.floating):
        raise ValueError(f"{fn}: mean must be a floating-point [..., A] array, got shape "
                         f"{mean.shape} and dtype {mean.dtype}")
    if log_std is not None:
        log_std = jnp.asarray(log_std, mean.dtype)
        if log_std.ndim == 0 or log_std.ndim > mean.ndim or (
                mean.shape[mean.ndim - log_std.ndim:] != log_std.shape):
            raise ValueError(f"{fn}: log_std must have the shape of mean {mean.shape} or a "
                             f"trailing part of it ([A] at least), got {log_std.shape}")
    for name, bound in (("low", low), ("high", high)):
        if np.shape(bound) not in ((), mean.shape[-1:]):
            raise ValueError(f"{fn}: {name} must be a scalar or [A] = {mean.shape[-1:]}, got "
                             f"shape {np.shape(bound)}")
    low_np, high_np = _concrete(low), _concrete(high)
    if low_np is not None and high_np is not None and not np.all(low_np < high_np):
        raise ValueError(f"{fn}: low must be < high, got low {low!r}, high {high!r}")
    return mean, log_std, jnp.asarray(low, mean.dtype), jnp.asarray(high, mean.dtype)


def _concrete(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array, or None when it is traced (not known until run time)."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _log_one_minus_tanh_sq(u: Array) -> Array:
    # 1 - tanh(u)^2 = 4 / (e^u + e^-u)^2, whose log is 2 (log 2 - u - log(1 + e^-2u)); the
    # softplus keeps it exact for large |u| of either sign instead of log(0) = -inf.
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def _log_prob_of_u(log_std: Array, u: Array, z: Array, half_range: Array) -> Array:
    """Log-density of ``a = c + s tanh(u)`` given ``u`` and ``z = (u - mean) / std``."""
    log_normal = -0.5 * jnp.square(z) - log_std - _HALF_LOG_2PI
    # u and z have the shape of mean, so a scalar half_range counts once per dimension.
    return jnp.sum(log_normal - _log_one_minus_tanh_sq(u) - jnp.log(half_range), axis=-1)


def sample_and_log_prob(key: PRNGKey, mean: ArrayLike, log_std: ArrayLike, low: ArrayLike,
                        high: ArrayLike) -> tuple[Array, Array]:
    """A reparameterised sample and its log-density (Haarnoja et al. 2018, eq. 11 and 21).

    ``u = mean + exp(log_std) * eps`` with ``eps = jax.random.normal(key, mean.shape)``;
    the action is ``c + s tanh(u)``, clipped to ``[low, high]`` against rounding (in
    float32 ``tanh(u)`` is exactly +-1 once ``|u|`` passes about 9, so such actions lie on
    a bound). The log-density is computed from ``u`` and ``eps``, not from the action, so
    it stays exact and finite there. Gradients reach ``mean`` and ``log_std`` through both
    outputs.

    Args:
        key: PRNG key.
        mean: pre-tanh mean ``[..., A]``.
        log_std: pre-tanh log standard deviation, ``[..., A]`` or ``[A]``.
        low: lower action bounds, ``[A]`` or a scalar.
        high: upper action bounds, ``[A]`` or a scalar.

    Returns:
        ``(action [..., A], log_prob [...])``.
    """
    mean, log_std, low, high = _check("sample_and_log_prob", mean, log_std, low, high)
    eps = jax.random.normal(key, mean.shape, mean.dtype)
    u = mean + jnp.exp(log_std) * eps
    half_range = (high - low) / 2
    action = jnp.clip((high + low) / 2 + half_range * jnp.tanh(u), low, high)
    return action, _log_prob_of_u(log_std, u, eps, half_range)


def deterministic_action(mean: ArrayLike, low: ArrayLike, high: ArrayLike) -> Array:
    """The squashed mean ``c + s tanh(mean)``, ``[..., A]`` (SAC's evaluation action)."""
    mean, _, low, high = _check("deterministic_action", mean, None, low, high)
    return jnp.clip((high + low) / 2 + (high - low) / 2 * jnp.tanh(mean), low, high)


def log_prob(mean: ArrayLike, log_std: ArrayLike, action: ArrayLike, low: ArrayLike,
             high: ArrayLike) -> Array:
    """Log-density of a given action ``[..., A]``; returns ``[...]``.

    The squashing is inverted with ``u = atanh(y) = 0.5 (log(a - low) - log(high - a))``
    for ``y = (a - c) / s``, written with the distances to the bounds because those are
    exact in floating point near a bound, where ``1 - y`` is not. The clip: the action is
    first clipped into ``[low, high]``, then each distance is clipped below at
    ``s * epsneg`` (``epsneg = 2^-24`` in float32, ``finfo(dtype).epsneg``). That never
    touches an action strictly inside the box whose distance to the bound is at least
    that (any float32 action of a ``[-1, 1]`` box), and reads an action on (or beyond) a
    bound as ``|u| = 0.5 log(2 / epsneg)``, about 8.66 in float32: about where float32
    ``tanh`` reaches +-1, so a sampled action on a bound gets a finite log-density (and
    finite gradients) instead of ``+-inf``. Such an action's true ``u`` is lost to
    rounding, so its log-density is not that of the sample that produced it; use the
    ``log_prob`` returned by :func:`sample_and_log_prob` for fresh samples.

    Args:
        mean: pre-tanh mean ``[..., A]``.
        log_std: pre-tanh log standard deviation, ``[..., A]`` or ``[A]``.
        action: actions ``[..., A]``, the shape of ``mean``.
        low: lower action bounds, ``[A]`` or a scalar.
        high: upper action bounds, ``[A]`` or a scalar.

    Returns:
        Log-densities ``[...]``.
    """
    mean, log_std, low, high = _check("log_prob", mean, log_std, low, high)
    action = jnp.asarray(action, mean.dtype)
    if action.shape != mean.shape:
        raise ValueError(f"log_prob: action must have the shape of mean {mean.shape}, got "
                         f"{action.shape}")
    half_range = (high - low) / 2
    smallest = half_range * jnp.finfo(mean.dtype).epsneg
    action = jnp.clip(action, low, high)
    u = 0.5 * (jnp.log(jnp.maximum(action - low, smallest))
               - jnp.log(jnp.maximum(high - action, smallest)))
    z = (u - mean) * jnp.exp(-log_std)
    return _log_prob_of_u(log_std, u, z, half_range)

"""Diagonal Gaussian policy distribution, as pure functions (no flax).

The usual continuous-control policy of PPO (Schulman et al. 2017, after Schulman et al.
2015): the network outputs the mean ``[..., A]`` and a learned, state-independent
``log_std [A]`` broadcasts over the batch. A state-dependent ``log_std [..., A]`` works
as well.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rljax.types import Array, ArrayLike, PRNGKey

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check(fn: str, mean: Array, log_std: Array, action: Array | None = None) -> None:
    if mean.ndim == 0 or log_std.ndim == 0:
        raise ValueError(f"{fn}: mean [..., A] and log_std [A] need an action axis, got "
                         f"mean {mean.shape}, log_std {log_std.shape}")
    if log_std.shape[-1] != mean.shape[-1] or log_std.ndim > mean.ndim:
        raise ValueError(f"{fn}: log_std must be [A] (or broadcast to mean's [..., A]), got "
                         f"log_std {log_std.shape} for mean {mean.shape}")
    if action is not None and action.shape != mean.shape:
        raise ValueError(f"{fn}: action must have mean's shape {mean.shape}, got "
                         f"{action.shape}")


def gaussian_sample(key: PRNGKey, mean: ArrayLike, log_std: ArrayLike) -> Array:
    """Samples actions ``mean + exp(log_std) * eps``, ``eps ~ N(0, I)``.

    Reparameterized: differentiable in ``mean`` and ``log_std``.

    Args:
        key: PRNG key.
        mean: means ``[..., A]``.
        log_std: log standard deviations ``[A]`` (or broadcastable to ``[..., A]``).

    Returns:
        Actions ``[..., A]``, unbounded (clip or squash them at the env if needed).
    """
    mean, log_std = jnp.asarray(mean), jnp.asarray(log_std)
    _check("gaussian_sample", mean, log_std)
    eps = jax.random.normal(key, mean.shape, mean.dtype)
    return mean + jnp.exp(log_std) * eps


def gaussian_log_prob(mean: ArrayLike, log_std: ArrayLike, action: ArrayLike) -> Array:
    """Log-density of ``action`` under ``N(mean, diag(exp(log_std))^2)``.

    ``sum_i -0.5 ((a_i - mu_i) / sigma_i)^2 - log sigma_i - 0.5 log(2 pi)``.

    Args:
        mean: means ``[..., A]``.
        log_std: log standard deviations ``[A]`` (or broadcastable to ``[..., A]``).
        action: actions ``[..., A]``.

    Returns:
        Log-densities ``[...]`` (summed over the action dimensions).
    """
    mean, log_std, action = jnp.asarray(mean), jnp.asarray(log_std), jnp.asarray(action)
    _check("gaussian_log_prob", mean, log_std, action)
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * jnp.square(z) - log_std - _HALF_LOG_2PI, axis=-1)


def gaussian_entropy(log_std: ArrayLike, batch_shape: tuple[int, ...] = ()) -> Array:
    """Entropy ``sum_i log sigma_i + 0.5 log(2 pi e)`` of the diagonal Gaussian.

    It does not depend on the mean, so a state-independent ``log_std`` gives one value
    for every state; ``batch_shape`` repeats it to match per-sample terms.

    Args:
        log_std: log standard deviations ``[A]`` (or ``[..., A]``).
        batch_shape: shape to broadcast the entropy to, e.g. ``mean.shape[:-1]``.

    Returns:
        Entropies, ``log_std.shape[:-1]`` broadcast with ``batch_shape``.
    """
    log_std = jnp.asarray(log_std)
    if log_std.ndim == 0:
        raise ValueError(f"gaussian_entropy: log_std must be [A] or [..., A], got shape "
                         f"{log_std.shape}")
    entropy = jnp.sum(log_std + 0.5 + _HALF_LOG_2PI, axis=-1)
    try:
        return jnp.broadcast_to(entropy, jnp.broadcast_shapes(entropy.shape, tuple(batch_shape)))
    except ValueError as e:
        raise ValueError(f"gaussian_entropy: log_std {log_std.shape} does not broadcast to "
                         f"batch_shape {tuple(batch_shape)}") from e

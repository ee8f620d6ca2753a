"""Per-transition actor-critic loss terms (Mnih et al. 2016, A3C/A2C).

Each function handles one transition; call sites batch with ``jax.vmap`` or
rely on broadcasting, then take a masked mean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.networks.distributions import categorical_entropy, categorical_log_prob
from rljax.types import Array


def policy_gradient_loss(logits_t: Array, a_t: Array, adv_t: Array) -> Array:
    """``-log pi(a_t | s_t) * A_t``, the advantage held constant."""
    return -categorical_log_prob(logits_t, a_t) * jax.lax.stop_gradient(adv_t)


def entropy_loss(logits_t: Array) -> Array:
    """Negative policy entropy (minimizing it encourages exploration)."""
    return -categorical_entropy(logits_t)


def value_loss(v_t: Array, target_t: Array) -> Array:
    """Squared error to a fixed target: ``(target - v)^2``."""
    return jnp.square(jax.lax.stop_gradient(target_t) - v_t)


def masked_mean(x: Array, mask: Array, axis_name: str | None = None) -> Array:
    """Mean of ``x`` over entries where ``mask`` is True (0 if none).

    With ``axis_name`` (inside ``shard_map`` over that mesh axis, each shard holding part
    of one batch), the mean is over every shard's entries, the same value on each shard.
    For statistics only: to differentiate a mean over shards, use
    :func:`masked_mean_share` and sum the gradients over the axis.
    """
    mask = mask.astype(x.dtype)
    total, count = jnp.sum(x * mask), jnp.sum(mask)
    if axis_name is not None:
        total, count = jax.lax.psum((total, count), axis_name)
    return total / jnp.maximum(count, 1.0)


def masked_mean_share(x: Array, mask: Array, axis_name: str | None) -> Array:
    """This shard's term of the masked mean of ``x`` over all shards along ``axis_name``:
    the sum of its masked entries over the count of masked entries of all shards.

    The shards' terms, and their gradients, sum (``lax.psum``) to the mean over the whole
    batch and its gradient, whatever each shard's count: the data-parallel form of
    :func:`masked_mean`, which it equals when ``axis_name`` is None. No collective depends
    on ``x``, so the term is differentiated locally.
    """
    if axis_name is None:
        return masked_mean(x, mask)
    mask = mask.astype(x.dtype)
    count = jax.lax.psum(jnp.sum(mask), axis_name)
    return jnp.sum(x * mask) / jnp.maximum(count, 1.0)


def normalize(x: Array, mask: Array, eps: float = 1e-8, axis_name: str | None = None) -> Array:
    """Standardizes ``x`` with the mean and std of its masked entries (of all shards along
    ``axis_name`` when given)."""
    mean = masked_mean(x, mask, axis_name)
    var = masked_mean(jnp.square(x - mean), mask, axis_name)
    return (x - mean) / (jnp.sqrt(var) + eps)

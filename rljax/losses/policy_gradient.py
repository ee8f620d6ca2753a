"""Per-transition actor-critic loss terms (Mnih et al. 2016, A3C/A2C).

Each function handles one transition; call sites batch with ``jax.vmap`` or
rely on broadcasting, then take a masked mean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.networks.distributions import (
    categorical_entropy,
    categorical_log_prob,
    check_integer_action,
)
from rljax.types import Array


def policy_gradient_loss(logits_t: Array, a_t: Array, adv_t: Array) -> Array:
    """``-log pi(a_t | s_t) * A_t``, the advantage held constant.

    ``logits_t [..., A]`` may hold ``-inf`` at masked actions other than ``a_t`` (integer,
    ``[...]``); an ``a_t`` outside ``[0, A)`` has log-probability ``-inf``.
    """
    a_t = check_integer_action("policy_gradient_loss", "a_t", a_t)
    return -categorical_log_prob(logits_t, a_t) * jax.lax.stop_gradient(adv_t)


def entropy_loss(logits_t: Array) -> Array:
    """Negative policy entropy (minimizing it encourages exploration); masked (``-inf``)
    logits count as probability 0, with no NaN in the value or the gradient."""
    return -categorical_entropy(logits_t)


def value_loss(v_t: Array, target_t: Array) -> Array:
    """Squared error to a fixed target: ``(target - v)^2``."""
    return jnp.square(jax.lax.stop_gradient(target_t) - v_t)


def masked_mean(x: Array, mask: Array | None) -> Array:
    """Mean of ``x`` over entries where ``mask`` is True (0 if none); None: every entry."""
    if mask is None:
        return jnp.mean(x)
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def normalize(x: Array, mask: Array, eps: float = 1e-8, min_std: float = 0.0) -> Array:
    """Standardizes ``x`` with the mean and std of its masked entries; a std below
    ``min_std`` divides by ``min_std`` instead (``x`` is centred but not scaled up)."""
    mean = masked_mean(x, mask)
    var = masked_mean(jnp.square(x - mean), mask)
    return (x - mean) / (jnp.maximum(jnp.sqrt(var), min_std) + eps)

"""Categorical distribution over logits, as pure functions (no flax).

Masked actions are given logit ``-inf``: they have probability 0, never a NaN log-probability,
entropy or gradient, as long as the action whose log-probability is taken is not masked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.types import Array, ArrayLike, PRNGKey


def check_integer_action(fn: str, name: str, action: ArrayLike) -> Array:
    """``action`` as an array, or ``TypeError`` naming ``fn`` and ``name`` if its dtype is not
    an integer one (the dtype is static, so this holds under ``jit`` too)."""
    action = jnp.asarray(action)
    if not jnp.issubdtype(action.dtype, jnp.integer):
        raise TypeError(f"{fn}: {name} must have an integer dtype (int8-int64 or uint8-uint64), "
                        f"got {action.dtype}")
    return action


def take_action(values: Array, action: Array, fill: float) -> Array:
    """``values[..., action]``, broadcasting ``values [..., A]`` against ``action [...]``, and
    ``fill`` where ``action`` is outside ``[0, A)`` (negative indices do not wrap).

    A select, not a sum of a one-hot product: ``0 * -inf`` would make every masked
    (``-inf``) entry a NaN in the value and in the gradient, while ``where`` passes the
    chosen entry through unchanged and gives the others a zero gradient. (It fuses with the
    reduction; a gather was slower per training step: docs/benchmarks.md.)
    """
    num = values.shape[-1]
    if jnp.iinfo(action.dtype).max <= jnp.iinfo(jnp.int32).max:
        action = action.astype(jnp.int32)  # `num` fits, whatever the narrow dtype
    chosen = action[..., None] == jnp.arange(num, dtype=action.dtype)
    picked = jnp.sum(jnp.where(chosen, values, jnp.zeros((), values.dtype)), axis=-1)
    in_range = (action >= 0) & (action < num)
    return jnp.where(in_range, picked, jnp.asarray(fill, values.dtype))


def categorical_sample(key: PRNGKey, logits: Array) -> Array:
    """Samples actions ``[...]`` from ``logits [..., A]``."""
    return jax.random.categorical(key, logits, axis=-1)


def categorical_log_prob(logits: Array, action: Array) -> Array:
    """Log-probability of ``action [...]`` (integer) under ``logits [..., A]``.

    ``-inf`` for an action outside ``[0, A)``; finite, with a finite gradient, for an action
    whose logit is finite even when other logits are ``-inf`` (masked).
    """
    action = check_integer_action("categorical_log_prob", "action", action)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return take_action(logp, action, -jnp.inf)


def categorical_entropy(logits: Array) -> Array:
    """Entropy ``[...]`` of the distribution given by ``logits [..., A]``.

    ``p log p`` is taken as 0 where ``p == 0`` (a ``-inf`` logit, or one that underflows),
    in the value and in the gradient.
    """
    logp = jax.nn.log_softmax(logits, axis=-1)
    p = jnp.exp(logp)
    # log p replaced by 0 before the product, not after: then neither the value nor the
    # gradient of p * log p meets 0 * -inf.
    return -jnp.sum(p * jnp.where(p > 0, logp, 0.0), axis=-1)


def greedy(logits: Array) -> Array:
    """Most likely action ``[...]``."""
    return jnp.argmax(logits, axis=-1)

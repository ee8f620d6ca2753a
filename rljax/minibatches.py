"""Shuffled minibatches of a rollout, for several epochs of updates per rollout (PPO,
PQN).
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp

from rljax.types import PRNGKey


def shuffled_minibatches(key: PRNGKey, batch_tree: Any, num_minibatches: int) -> Any:
    """Splits a ``[T, B, ...]`` batch into ``num_minibatches`` shuffled minibatches.

    The leading ``T * B`` samples of every leaf are flattened and permuted with one
    permutation shared by all leaves, so each sample lands in exactly one minibatch and
    a sample's fields stay together. Call once per epoch with a fresh key.

    Args:
        key: PRNG key of the permutation.
        batch_tree: pytree whose leaves all start with the same ``[T, B]``.
        num_minibatches: number of minibatches; must divide ``T * B``.

    Returns:
        The tree with leaves ``[num_minibatches, T * B // num_minibatches, ...]``.

    Raises:
        ValueError: if the leaves' leading dims differ or ``T * B`` is not divisible by
            ``num_minibatches``.
    """
    leaves = jax.tree.leaves(batch_tree)
    if not leaves:
        raise ValueError("shuffled_minibatches: batch_tree has no arrays")
    shapes = [jnp.shape(leaf) for leaf in leaves]
    leading = {shape[:2] for shape in shapes}
    if len(leading) != 1 or len(next(iter(leading))) != 2:
        raise ValueError(f"shuffled_minibatches: every leaf must start with the same [T, B], "
                         f"got shapes {shapes}")
    t, b = next(iter(leading))
    size = t * b
    try:
        count = None if isinstance(num_minibatches, bool) else operator.index(num_minibatches)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ValueError(f"shuffled_minibatches: num_minibatches must be a positive int, got "
                         f"{num_minibatches!r}")
    num_minibatches = count
    if size % num_minibatches:
        raise ValueError(f"shuffled_minibatches: the batch of T * B = {t} * {b} = {size} "
                         f"samples does not split into num_minibatches = {num_minibatches} "
                         f"equal minibatches")
    order = jax.random.permutation(key, size)

    def split(leaf):
        leaf = jnp.asarray(leaf)
        flat = leaf.reshape((size,) + leaf.shape[2:])
        return flat[order].reshape((num_minibatches, size // num_minibatches) + leaf.shape[2:])

    return jax.tree.map(split, batch_tree)

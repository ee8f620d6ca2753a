"""Shuffled minibatches of a rollout, for several epochs of updates per rollout (PPO,
PQN).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from rljax.gradients import gradient_step
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


def minibatch_epochs(key: PRNGKey, params: Any, opt_state: Any, data: Any,
                     loss_fn: Callable[[Any, Any], tuple[jax.Array, dict]],
                     optimizer: optax.GradientTransformation, num_epochs: int,
                     num_minibatches: int) -> tuple[Any, Any, dict]:
    """``num_epochs`` epochs of one optimizer step per shuffled minibatch of ``data``.

    Args:
        key: PRNG key; one split per epoch shuffles that epoch's minibatches.
        params: parameters, differentiated through ``loss_fn(params, minibatch) -> (loss,
            metrics)``.
        opt_state: ``optimizer``'s state.
        data: a ``[T, B, ...]`` tree (see :func:`shuffled_minibatches`).
        loss_fn: the minibatch loss.
        optimizer: an optax transformation.
        num_epochs: passes over ``data``.
        num_minibatches: minibatches per pass.

    Returns:
        ``(params, opt_state, metrics)`` with each metric (and ``grad_norm``) averaged over
        all minibatch steps.
    """
    def minibatch_step(carry, minibatch):
        step = gradient_step(loss_fn, optimizer, *carry, minibatch)
        metrics = {**step.aux, "grad_norm": step.grad_norm}
        return (step.params, step.opt_state), metrics

    def epoch(carry, epoch_key):
        minibatches = shuffled_minibatches(epoch_key, data, num_minibatches)
        return jax.lax.scan(minibatch_step, carry, minibatches)

    (params, opt_state), metrics = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(key, num_epochs))
    return params, opt_state, jax.tree.map(jnp.mean, metrics)

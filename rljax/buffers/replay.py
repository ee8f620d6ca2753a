"""Circular uniform replay of any transition pytree (Lin, 1992; Mnih et al., 2015, DQN).

Layout: every leaf of the transition pytree is stored as one ``[capacity, ...]`` array; a
scalar ``cursor`` is the next slot to write and ``size`` the number of slots written so far.

Invalid transitions (envpool's reset steps, ``valid == False``) are never written: ``add``
*compacts* the batch, giving the ``j``-th valid transition slot ``(cursor + j) % capacity``
and sending invalid ones to out-of-range indices that the scatter drops. Every written slot
is therefore a real transition, the written slots are exactly ``[0, size)``, and uniform
sampling is one draw from ``{0, ..., size - 1}`` per sample, with no tree and no rejection.
(Within one call the order of the valid transitions is kept; a batch with more valid
transitions than ``capacity`` keeps its last ``capacity`` ones.)

Cost: ``add`` scatters ``B`` rows, ``sample`` gathers ``K`` rows; nothing touches the whole
buffer, so with the state donated to a jitted caller both run in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.buffers import _native
from rljax.buffers._checks import positive_int
from rljax.buffers.sum_tree import uniform_index
from rljax.types import Array, PRNGKey


class ReplaySample(NamedTuple):
    """A uniform sample.

    Attributes:
        indices: ``[K]`` int32 slots that were drawn.
        transition: the stored pytree, every leaf ``[K, ...]``.
    """

    indices: Array
    transition: Any


@struct.dataclass
class ReplayState:
    """Uniform replay state.

    Attributes:
        storage: transition pytree, every leaf ``[capacity, ...]``.
        cursor: ``[]`` int32, next slot to write.
        size: ``[]`` int32, number of written slots (<= capacity); slots ``[0, size)`` are valid.
        capacity: number of slots (static).
    """

    storage: Any
    cursor: Array
    size: Array
    capacity: int = struct.field(pytree_node=False)


class ReplayBuffer(NamedTuple):
    """Functions of a uniform replay buffer; see the module-level functions of the same name."""

    init: Callable[[Any], ReplayState]
    add: Callable[..., ReplayState]
    sample: Callable[[ReplayState, PRNGKey], ReplaySample]
    can_sample: Callable[[ReplayState], Array]


def empty_storage(example: Any, capacity: int) -> Any:
    """Zeros shaped ``[capacity, *x.shape]`` for every leaf ``x`` of one example transition."""
    return jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.result_type(x)), example)


def compact_slots(cursor: Array, valid: Array, capacity: int) -> tuple[Array, Array]:
    """Slots for the valid entries of a batch, written contiguously from ``cursor``.

    Args:
        cursor: ``[]`` int32 next slot.
        valid: ``[B]`` bool.
        capacity: number of slots.

    Returns:
        ``slots [B]`` (``capacity + b`` for dropped entries, which a ``mode="drop"`` scatter
        ignores; all distinct) and ``count [] int32``, the number of valid entries.
    """
    b = valid.shape[0]
    valid = valid.astype(bool)
    rank = jnp.cumsum(valid, dtype=jnp.int32) - 1
    count = rank[-1] + 1
    keep = valid & (rank >= count - capacity) if b > capacity else valid
    slots = jnp.where(keep, (cursor + rank) % capacity, capacity + jnp.arange(b, dtype=jnp.int32))
    return slots, count


def scatter_rows(storage: Any, slots: Array, batch: Any) -> Any:
    """``storage[slots] = batch`` for every leaf, dropping out-of-range slots (all distinct)."""
    return jax.tree.map(
        lambda s, x: s.at[slots].set(x.astype(s.dtype), mode="drop", unique_indices=True),
        storage,
        batch,
    )


def _batch_valid(batch: Any, valid: Array | None) -> Array:
    b = jax.tree.leaves(batch)[0].shape[0]
    return jnp.ones(b, bool) if valid is None else jnp.asarray(valid, bool).reshape(b)


def init(example: Any, capacity: int) -> ReplayState:
    """An empty buffer for transitions shaped like ``example`` (one transition, no batch axis)."""
    return ReplayState(
        storage=empty_storage(example, capacity),
        cursor=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        capacity=capacity,
    )


def add(state: ReplayState, batch: Any, valid: Array | None = None) -> ReplayState:
    """Writes the valid transitions of a batch, one per environment.

    Args:
        state: buffer state.
        batch: transition pytree, every leaf ``[B, ...]`` (``B`` = number of envs).
        valid: ``[B]`` bool, False for reset steps (not stored); default all True.

    Returns:
        The new state.
    """
    slots, count = compact_slots(state.cursor, _batch_valid(batch, valid), state.capacity)
    return state.replace(
        storage=scatter_rows(state.storage, slots, batch),
        cursor=(state.cursor + count) % state.capacity,
        size=jnp.minimum(state.size + count, state.capacity),
    )


def take_rows(tree: Any, indices: Array) -> Any:
    """``jax.tree.map(lambda x: x[indices], tree)`` for ``[K]`` int ``indices``.

    On CPU one native call copies the rows of every leaf (:mod:`rljax.buffers._native`):
    XLA:CPU runs each leaf's gather as a separate task, often split over its thread pool."""
    leaves, treedef = jax.tree.flatten(tree)
    indices = jnp.asarray(indices, jnp.int32)
    rows = _native.dispatch(
        lambda indices, *leaves: _native.gather_rows(list(leaves), indices),
        lambda indices, *leaves: [x[indices] for x in leaves],
        indices, *leaves, supported=bool(leaves),
    )
    return treedef.unflatten(rows)


def sample(state: ReplayState, key: PRNGKey, batch_size: int) -> ReplaySample:
    """``batch_size`` slots drawn uniformly, with replacement, from the written slots.

    Each of the ``size`` written slots has probability ``1 / size`` (up to a modulo bias
    below ``size / 2**32``, see :func:`rljax.buffers.sum_tree.uniform_index`).
    Undefined (returns slot 0) when the buffer is empty; check ``can_sample``.

    Returns:
        ``ReplaySample`` with ``indices [K]`` and the transitions ``[K, ...]``.
    """
    indices = uniform_index(key, batch_size, state.size)
    return ReplaySample(indices, take_rows(state.storage, indices))


def can_sample(state: ReplayState, min_size: int) -> Array:
    """``[]`` bool: at least ``min_size`` transitions are stored."""
    return state.size >= min_size


def make_replay(capacity: int, batch_size: int, min_size: int | None = None) -> ReplayBuffer:
    """Builds a uniform circular replay buffer.

    Args:
        capacity: number of transitions kept, any integer >= 1.
        batch_size: transitions per ``sample``, >= 1.
        min_size: ``can_sample`` is True from this many stored transitions (default
            ``batch_size``), >= 1.

    Returns:
        ``ReplayBuffer(init(example), add(state, batch, valid=None), sample(state, key),
        can_sample(state))``.

    Raises:
        ValueError: on a bad argument.
    """
    capacity = positive_int("capacity", capacity)
    batch_size = positive_int("batch_size", batch_size)
    min_size = batch_size if min_size is None else positive_int("min_size", min_size)
    return ReplayBuffer(
        init=functools.partial(init, capacity=capacity),
        add=add,
        sample=functools.partial(sample, batch_size=batch_size),
        can_sample=functools.partial(can_sample, min_size=min_size),
    )

"""Proportional prioritized replay (Schaul et al., 2016, "Prioritized Experience Replay", ICLR).

Slot ``i`` holds priority ``p_i = (|delta_i| + eps) ** alpha`` in a float32 sum-tree
(:mod:`rljax.buffers.sum_tree`) and is drawn with probability ``P(i) = p_i / sum_k p_k`` by
stratified sampling (one draw per equal segment of the total). New transitions get the largest
priority seen so far (``max_priority``, initially 1.0) so that each is replayed at least about
once, unless ``add`` is given their TD errors (DDPG's reference uses the initial TD error).
Importance-sampling weights correct the bias:

    w_i = (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta = (p_min / p_i) ** beta,

with the max over the sampled batch and ``N`` the number of written slots; ``N`` and the
total cancel in the normalized form, which is how it is computed (no overflow for tiny
``P``). DQN's reference: ``alpha = 0.6``, ``beta`` annealed 0.4 -> 1 by the agent (``beta``
is an argument of ``sample``); DDPG's: ``alpha = 0.6``, ``beta = 1``.

Layout and validity are those of :mod:`rljax.buffers.replay`: storage ``[capacity, ...]``,
invalid transitions (reset steps) are never written (the batch is compacted), so every leaf
with a positive priority is a real, written transition and unwritten leaves are 0 and are
never sampled (see the sum-tree docstring for the float32 guarantee). Priorities are clipped
to ``[1e-30, 1e30]`` so a written slot never rounds to zero and the total cannot overflow;
a NaN TD error gives its slot priority 0 (never replayed until overwritten).
``update_priorities`` ignores indices that are not written slots, and duplicate indices keep
the last value.

On CPU a sample's stratified draw (search and leaf values) and its gather of rows, and a
priority write with its running maximum, are each one native call
(:mod:`rljax.buffers._native`); other backends run the JAX composition, same rules. The
probabilities and importance weights are computed by the same JAX code everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.buffers import sum_tree
from rljax.buffers._checks import float_in, positive_int
from rljax.buffers.replay import (
    _batch_valid,
    compact_slots,
    empty_storage,
    scatter_rows,
    take_rows,
)
from rljax.types import Array, ArrayLike, PRNGKey, Sample

PRIORITY_MIN = 1e-30
PRIORITY_MAX = 1e30


PrioritizedSample = Sample  # the record lives in rljax.types


@struct.dataclass
class PrioritizedState:
    """Prioritized replay state.

    Attributes:
        storage: transition pytree, every leaf ``[capacity, ...]``.
        tree: float32 sum-tree of the priorities, ``capacity`` leaves.
        max_priority: ``[]`` largest priority ever set (initially 1.0).
        cursor: ``[]`` int32, next slot to write.
        size: ``[]`` int32, number of written slots; slots ``[0, size)`` are valid.
        capacity: number of slots (static).
    """

    storage: Any
    tree: sum_tree.SumTreeState
    max_priority: Array
    cursor: Array
    size: Array
    capacity: int = struct.field(pytree_node=False)


class PrioritizedBuffer(NamedTuple):
    """Functions of a prioritized buffer; see the module-level functions of the same name."""

    init: Callable[[Any], PrioritizedState]
    add: Callable[..., PrioritizedState]
    sample: Callable[..., PrioritizedSample]
    update_priorities: Callable[[PrioritizedState, Array, Array], PrioritizedState]
    can_sample: Callable[[PrioritizedState], Array]


def priority(td_errors: ArrayLike, alpha: float, eps: float) -> Array:
    """``p = (|delta| + eps) ** alpha``, clipped to ``[1e-30, 1e30]``; NaN stays NaN.

    The power is taken as ``exp(alpha * log(x))`` (exact for alpha 0, 1 and 0.5, where it is
    1, ``x`` and ``sqrt(x)``): XLA:CPU vectorizes ``exp`` and ``log`` but calls a scalar
    ``pow`` per element, which made ``pow`` a quarter of a 32-slot priority update. Relative
    error: below ``3e-7 + 1.5e-7 |alpha ln x|`` (the float32 exponent's rounding), e.g.
    1.5e-6 at alpha 0.6 and ``|delta|`` 1e6, where XLA's ``pow`` is within 8e-7 (tested
    against float64).
    """
    x = jnp.abs(jnp.asarray(td_errors, jnp.float32)) + jnp.float32(eps)
    static = isinstance(alpha, (int, float))
    if static and alpha == 0:
        p = jnp.ones_like(x)
    elif static and alpha == 1:
        p = x
    elif static and alpha == 0.5:
        p = jnp.sqrt(x)
    else:  # x = 0 gives exp(-inf) = 0, x = inf gives inf, as the power does (alpha > 0)
        p = jnp.where(alpha == 0, 1.0, jnp.exp(alpha * jnp.log(x)))
    return jnp.clip(p, PRIORITY_MIN, PRIORITY_MAX)


def _check_beta(beta: ArrayLike) -> bool:
    """Raises ``ValueError`` for a concrete ``beta`` outside ``[0, 1]``; returns whether it was
    concrete (a traced one cannot be checked)."""
    if isinstance(beta, jax.core.Tracer):
        return False
    value = np.asarray(beta)
    if not (np.issubdtype(value.dtype, np.number) and not np.iscomplexobj(value)
            and np.all((value >= 0) & (value <= 1))):
        raise ValueError(f"beta must be in [0, 1], got {beta!r}")
    return True


def importance_weights(p: Array, beta: ArrayLike) -> Array:
    """``[K]`` weights ``(p_ref / p_i) ** beta`` = ``(N P(i))^-beta / max_j (N P(j))^-beta``,
    with ``p_ref`` the batch's smallest priority (its largest for a negative ``beta``).

    ``beta`` must be in ``[0, 1]`` (``ValueError`` if it is concrete and is not); a traced one
    is not checked, and any value gives the formula above. Taken as
    ``exp(beta * log(p_ref / p_i))``, as :func:`priority` takes its power (XLA:CPU vectorizes
    exp and log, not pow): relative error below ``3e-7 + 1.5e-7 |beta ln r|``."""
    concrete = _check_beta(beta)
    written = p > 0  # all but an empty tree's zeros
    p = jnp.where(written, p, jnp.inf)
    p_ref = jnp.min(p)
    if not concrete:  # the largest (N P)^-beta is at the largest priority when beta < 0
        p_ref = jnp.where(beta < 0, jnp.max(jnp.where(written, p, 0.0)), p_ref)
    # p_ref / p underflows below 1e-38 (or overflows past 3e38 for beta < 0) when a batch spans
    # > 38 decades: keep log finite there, so that beta = 0 gives 1, not 0 * -inf (the weight is
    # ~0 for beta != 0 either way).
    finfo = jnp.finfo(jnp.float32)
    ratio = jnp.clip(p_ref / p, finfo.tiny, finfo.max)
    return jnp.where(written, jnp.exp(beta * jnp.log(ratio)), 1.0)


def proportional_draw(
    tree: sum_tree.SumTreeState, key: PRNGKey, batch_size: int, beta: ArrayLike
) -> tuple[Array, Array, Array]:
    """Stratified draw from a float32 priority tree: ``(indices, probabilities, weights)``,
    each ``[batch_size]`` (the uniforms are those ``sum_tree.stratified_sample`` draws)."""
    unit = jax.random.uniform(key, (batch_size,), jnp.float32)
    indices, p = sum_tree.stratified_draw(tree, unit)
    return indices, p / sum_tree.total(tree), importance_weights(p, beta)


def _set_priorities(
    state: PrioritizedState, slots: Array, p: Array, size: Array | None = None,
    unique: bool = False,
) -> PrioritizedState:
    # Slots at or above `size` (default capacity) are not written; a NaN priority is stored as
    # 0 (sanitized by the tree) and does not count in the max.
    tree, max_priority = sum_tree.set_and_max(
        state.tree, slots, p, unique=unique, size=size, running_max=state.max_priority)
    return state.replace(tree=tree, max_priority=max_priority)


def init(example: Any, capacity: int) -> PrioritizedState:
    """An empty buffer for transitions shaped like ``example`` (one transition, no batch axis)."""
    return PrioritizedState(
        storage=empty_storage(example, capacity),
        tree=sum_tree.init(capacity, jnp.float32),
        max_priority=jnp.ones((), jnp.float32),
        cursor=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        capacity=capacity,
    )


def add(
    state: PrioritizedState,
    batch: Any,
    valid: Array | None = None,
    td_errors: Array | None = None,
    *,
    alpha: float,
    eps: float,
) -> PrioritizedState:
    """Writes the valid transitions of a batch with the max priority (or their TD errors').

    Args:
        state: buffer state.
        batch: transition pytree, every leaf ``[B, ...]``.
        valid: ``[B]`` bool, False for reset steps (not stored); default all True.
        td_errors: optional ``[B]`` initial TD errors; priority ``(|delta| + eps)^alpha``.
        alpha: priority exponent (bound by the factory).
        eps: priority offset (bound by the factory).

    Returns:
        The new state.
    """
    valid = _batch_valid(batch, valid)
    slots, count = compact_slots(state.cursor, valid, state.capacity)
    if td_errors is None:
        p = jnp.broadcast_to(state.max_priority, valid.shape)
    else:
        p = priority(jnp.reshape(td_errors, valid.shape), alpha, eps)
    state = _set_priorities(state, slots, p, unique=True)  # unused slots are `capacity`
    return state.replace(
        storage=scatter_rows(state.storage, slots, batch),
        cursor=(state.cursor + count) % state.capacity,
        size=jnp.minimum(state.size + count, state.capacity),
    )


def sample(
    state: PrioritizedState, key: PRNGKey, beta: ArrayLike = 1.0, *, batch_size: int
) -> PrioritizedSample:
    """Stratified proportional sample with importance weights.

    Args:
        state: buffer state (must have ``can_sample``; an empty one returns slot 0).
        key: PRNG key.
        beta: importance-sampling exponent in ``[0, 1]``, scalar (may be traced; a concrete
            value outside ``[0, 1]`` raises ``ValueError``).
        batch_size: number of draws ``K`` (bound by the factory).

    Returns:
        ``PrioritizedSample`` with ``indices, transition, probabilities, weights``, ``[K]``.
    """
    indices, probabilities, weights = proportional_draw(state.tree, key, batch_size, beta)
    return PrioritizedSample(
        indices=indices,
        transition=take_rows(state.storage, indices),
        probabilities=probabilities,
        weights=weights,
    )


def update_priorities(
    state: PrioritizedState, indices: Array, td_errors: Array, *, alpha: float, eps: float
) -> PrioritizedState:
    """Sets ``p_i = (|delta_i| + eps)^alpha`` for sampled slots.

    Args:
        state: buffer state.
        indices: ``[K]`` int slots (from ``sample``); duplicates keep the last TD error;
            indices that are not written slots are ignored.
        td_errors: ``[K]`` new TD errors.
        alpha: priority exponent (bound by the factory).
        eps: priority offset (bound by the factory).

    Returns:
        The new state.
    """
    indices = jnp.asarray(indices, jnp.int32).reshape(-1)
    p = priority(jnp.reshape(td_errors, indices.shape), alpha, eps)
    return _set_priorities(state, indices, p, size=state.size)


def can_sample(state: PrioritizedState, min_size: int) -> Array:
    """``[]`` bool: at least ``min_size`` transitions are stored and the total is positive."""
    return (state.size >= min_size) & (sum_tree.total(state.tree) > 0)


def make_prioritized(
    capacity: int,
    batch_size: int,
    alpha: float = 0.6,
    eps: float = 1e-6,
    min_size: int | None = None,
) -> PrioritizedBuffer:
    """Builds a proportional prioritized replay buffer.

    Args:
        capacity: number of transitions kept, any integer >= 1.
        batch_size: transitions per ``sample``, >= 1.
        alpha: priority exponent, >= 0 (0 = uniform). DQN and DDPG references: 0.6.
        eps: added to ``|delta|``, >= 0, so no transition's priority vanishes.
        min_size: ``can_sample`` threshold (default ``batch_size``), >= 1.

    Returns:
        ``PrioritizedBuffer(init(example), add(state, batch, valid=None, td_errors=None),
        sample(state, key, beta=1.0), update_priorities(state, indices, td_errors),
        can_sample(state))``.

    Raises:
        ValueError: on a bad argument.
    """
    capacity = positive_int("capacity", capacity)
    batch_size = positive_int("batch_size", batch_size)
    alpha = float_in("alpha", alpha, 0.0, 1e3)
    eps = float_in("eps", eps, 0.0, 1e3)
    min_size = batch_size if min_size is None else positive_int("min_size", min_size)
    return PrioritizedBuffer(
        init=functools.partial(init, capacity=capacity),
        add=functools.partial(add, alpha=alpha, eps=eps),
        sample=functools.partial(sample, batch_size=batch_size),
        update_priorities=functools.partial(update_priorities, alpha=alpha, eps=eps),
        can_sample=functools.partial(can_sample, min_size=min_size),
    )

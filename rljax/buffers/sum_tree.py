"""Array sum-tree for proportional sampling (Schaul et al., 2016, "Prioritized Experience Replay").

Layout: a ``fanout``-ary tree (default 8), its levels stored one after another in a single
flat array ``nodes`` (one buffer to donate). Level 0 holds the leaves (slot ``j`` is leaf
``j``), padded with zeros to a multiple of ``fanout``; entry ``i`` of level ``l + 1`` is the
sum of entries ``i * fanout .. i * fanout + fanout - 1`` of level ``l``; the last level is one
row of ``fanout`` entries whose sum is the total. Capacity 100k takes 6 levels (a binary tree
would take 17) and about ``capacity * 8 / 7`` values. The per-level work (a ``[K, fanout]``
gather of child rows, a ``[K, fanout] x [fanout, fanout]`` prefix-sum matmul and two fused
reductions for a search; a gather, a row sum and a ``K``-entry scatter for a set) runs in a
``fori_loop`` over levels, which on XLA:CPU compiles faster and runs as fast as the unrolled
form (and keeps ``nodes`` in place). A search does about ``K * fanout`` element operations
per level plus a fixed cost per level; fanout 8 was the fastest of 4, 8 and 16 on XLA:CPU
(figures in docs/benchmarks.md). Nothing touches a whole level, so with a donated state
every operation is in place.

On CPU, :func:`find` and :func:`set` run as native kernels instead (one XLA FFI call each,
in place, same rules; :mod:`rljax.buffers._native`), chosen when the program is lowered;
other backends run the JAX version below (about 3x faster on CPU; docs/benchmarks.md). Both
follow the
descent of point 3 below, so the guarantees hold for either; they may disagree on a query
within float32 rounding of a boundary, since they add the prefix sums in different orders.

Numerics (float32 trees; integer trees are exact and need none of this):

1. **No drift, duplicates safe.** ``set`` writes the leaves, then recomputes every ancestor as
   the sum of its stored children, bottom-up, one level per step; it never adds deltas, so no
   error accumulates over any number of updates and a subtree whose leaves are all zero sums
   to exactly 0. Duplicate indices within one batch keep only their last write (earlier ones
   are dropped before the scatter), and a parent shared by several written leaves is
   recomputed from the same already-written children, so every write to it carries the same
   value and the scatter order cannot matter.
2. **No subnormals.** Values below the smallest normal float32 (1.2e-38), negatives and NaN are
   stored as 0 (XLA:CPU may flush subnormals, making ``x > 0`` disagree with a sum). A float sum
   of non-negative normal numbers, in any order, is then 0 iff every term is 0: a node is
   positive iff one of its children is. Values must be finite and their sum must not overflow.
3. **Descent never ends on a zero leaf.** At each level, for the node's children ``c`` and
   their exclusive prefix sums ``E`` (summed in any order, any rounding), the candidates are the
   children with ``c_i > 0`` and ``E_i <= u``; the descent takes the last candidate ``j`` and
   continues with ``u <- max(u - E_j, 0)``. The first positive child is always a candidate: its
   ``E`` is a sum of zeros, exactly 0, and ``u >= 0`` (NaN and negative queries become 0). So
   whenever ``total > 0`` every step goes to a positive child and the leaf reached has a
   positive value: never a zero-priority, padding or unwritten slot. This uses no property of
   the rounding; a query at or beyond the total (``u = total``, ``total * (1 - tiny)`` rounded
   up, the top of the last stratified segment) simply takes the last positive child each time.
4. **Accuracy.** In exact arithmetic the descent returns the leaf ``j`` with ``prefix_j <= u <
   prefix_j + p_j``. In float32 each node and prefix is within a few ulps (``~fanout * 2**-24``
   relative) of the exact sum, so each leaf's selection interval moves by about ``levels *
   fanout * 2**-24 * total`` at either end: its probability is ``p_j / total`` up to an
   absolute error of about ``2 * levels * fanout * 2**-24`` (``1e-5`` at capacity ``2**20``).
   A leaf with ``p_j / total`` below that may be drawn less often than it should, as in any
   float32 PER, but the guarantee of point 3 holds for every leaf.

Stratified sampling draws ``u_k = total * (k + U_k) / K`` with ``U_k ~ U[0, 1)``: one draw per
equal segment of the total, as in the paper. Integer trees (``dtype=jnp.int32``) do exact
arithmetic; over 0/1 leaves they give uniform sampling over the ones (each draw is
``bits mod total``, bias below ``total / 2**32``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.buffers import _native
from rljax.buffers._checks import positive_int
from rljax.types import Array, ArrayLike, PRNGKey

# De-duplication: an O(K^2) comparison is cheapest up to here; above, one sort of packed
# (index, position) keys (the crossover measured on XLA:CPU: docs/benchmarks.md).
_DEDUP_QUADRATIC_MAX = 48
DEFAULT_FANOUT = 8
VALUE_MAX = 1e30  # float leaves are clipped here, so sums of up to 3e8 leaves stay finite


@struct.dataclass
class SumTreeState:
    """Sum-tree over ``capacity`` leaves.

    Attributes:
        nodes: all levels in one flat array, leaves first (offsets from
            :func:`level_offsets`); one buffer, so a donated state updates in place.
        capacity: number of usable leaves (static).
        fanout: children per node (static).
    """

    nodes: Array
    capacity: int = struct.field(pytree_node=False)
    fanout: int = struct.field(pytree_node=False)

    @property
    def leaves(self) -> Array:
        """``[capacity]`` leaf values."""
        return self.nodes[: self.capacity]

    @property
    def levels(self) -> tuple[Array, ...]:
        """The levels as separate arrays, leaves first (for inspection and tests)."""
        offsets = level_offsets(self.capacity, self.fanout)
        return tuple(self.nodes[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True))


def level_sizes(capacity: int, fanout: int) -> list[int]:
    """Sizes of the levels of a tree, leaves first (each a multiple of ``fanout``)."""
    sizes = [-(-capacity // fanout) * fanout]
    while sizes[-1] > fanout:
        sizes.append(-(-sizes[-1] // fanout // fanout) * fanout)
    return sizes


def level_offsets(capacity: int, fanout: int) -> list[int]:
    """Start of each level in ``nodes``, and the end; all multiples of ``fanout``."""
    return [0, *np.cumsum(level_sizes(capacity, fanout)).tolist()]


def init(capacity: int, dtype: jnp.dtype = jnp.float32,
         fanout: int = DEFAULT_FANOUT) -> SumTreeState:
    """An all-zero tree.

    Args:
        capacity: number of leaves, any integer >= 1.
        dtype: ``float32`` for priorities, ``int32`` for exact counts.
        fanout: children per node, >= 2.

    Returns:
        The tree state.

    Raises:
        ValueError: on a bad argument.
    """
    capacity = positive_int("capacity", capacity)
    fanout = positive_int("fanout", fanout, minimum=2)
    size = level_offsets(capacity, fanout)[-1]
    return SumTreeState(nodes=jnp.zeros(size, dtype), capacity=capacity, fanout=fanout)


def total(state: SumTreeState) -> Array:
    """Sum of all leaves, ``[]``."""
    return jnp.sum(state.nodes[-state.fanout :])


def get(state: SumTreeState, indices: ArrayLike) -> Array:
    """Leaf values at ``indices`` ``[K]`` (int), ``[K]``."""
    return state.nodes[jnp.asarray(indices, jnp.int32)]


def _is_float(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


def _sanitize(values: Array, dtype) -> Array:
    if _is_float(dtype):
        values = values.astype(dtype)
        return jnp.where(values >= jnp.finfo(dtype).tiny, jnp.minimum(values, VALUE_MAX), 0)
    return jnp.maximum(values, 0).astype(dtype)


def _keep_last(indices: Array, capacity: int) -> Array:
    """``[K]`` bool, True for the last occurrence of each index in ``indices``.

    Indices outside ``[0, capacity)`` share one bucket (their writes are dropped anyway)."""
    k = indices.shape[0]
    pos = jnp.arange(k, dtype=jnp.int32)
    if k <= _DEDUP_QUADRATIC_MAX:
        later_same = (indices[None, :] == indices[:, None]) & (pos[None, :] > pos[:, None])
        return ~jnp.any(later_same, axis=1)
    bucket = jnp.where((indices >= 0) & (indices < capacity), indices, capacity)
    if (capacity + 1) * k <= np.iinfo(np.int32).max:
        # One single-operand sort of keys `bucket * K + position` (all distinct): sorted, the
        # keys of one index are adjacent and in position order, the last one is its last write.
        keys = jax.lax.sort(bucket * k + pos, is_stable=False)
        sorted_idx, sorted_pos = keys // k, keys % k
    else:
        sorted_pos = jnp.argsort(bucket, stable=True).astype(jnp.int32)
        sorted_idx = bucket[sorted_pos]
    last_sorted = jnp.append(sorted_idx[1:] != sorted_idx[:-1], True)
    return jnp.zeros(k, bool).at[sorted_pos].set(last_sorted, unique_indices=True)


def set(state: SumTreeState, indices: ArrayLike, values: ArrayLike,  # noqa: A001
        unique: bool = False) -> SumTreeState:
    """Sets leaves ``indices`` to ``values`` and recomputes their ancestors from children.

    Duplicates: the last occurrence in the batch wins. Indices outside ``[0, capacity)`` are
    ignored (use them to mask writes). Values are sanitized as in the module docstring.
    On CPU this is one native call (:mod:`rljax.buffers._native`), elsewhere the JAX version.

    Args:
        state: the tree.
        indices: ``[K]`` int leaf indices.
        values: ``[K]`` new leaf values (>= 0).
        unique: static promise that the in-range indices are distinct, which skips the
            ``[K, K]`` de-duplication of the JAX version (the buffers' own adds write distinct
            slots); the native version needs none.

    Returns:
        The updated tree.
    """
    return set_and_max(state, indices, values, unique)[0]


def set_and_max(state: SumTreeState, indices: ArrayLike, values: ArrayLike,
                unique: bool = False, size: ArrayLike | None = None,
                running_max: ArrayLike | None = None) -> tuple[SumTreeState, Array]:
    """:func:`set` restricted to ``indices < size``, also returning the running maximum.

    Args:
        state, indices, values, unique: as for :func:`set`.
        size: ``[]`` int, only leaves below it are written (default ``capacity``): a buffer's
            written slots.
        running_max: ``[]``, a maximum to raise (default 0).

    Returns:
        The tree, and ``max(running_max, largest sanitized value among the written entries)``
        (duplicates included), ``[]``: prioritized replay's running maximum, computed by the
        native kernel in the same pass.
    """
    node = jnp.asarray(indices, jnp.int32).reshape(-1)
    dtype = state.nodes.dtype
    values = jnp.asarray(values).reshape(-1).astype(dtype)
    cap, f = state.capacity, state.fanout
    limit = jnp.asarray(cap if size is None else size, jnp.int32)
    floor = jnp.zeros((), dtype) if running_max is None else jnp.asarray(running_max, dtype)

    def in_jax(nodes, node, values, limit, floor):
        values = _sanitize(values, dtype)
        written = (node >= 0) & (node < jnp.minimum(limit, cap))
        largest = jnp.max(jnp.where(written, values, 0), initial=0).astype(dtype)
        nodes = _set_jax(nodes, jnp.where(written, node, -1), values, cap, f, unique)
        return nodes, jnp.maximum(floor, largest)

    nodes, largest = _native.dispatch(
        lambda nodes, node, values, limit, floor: _native.set_leaves(
            nodes, node, values, cap, f, limit=limit, floor=floor),
        in_jax, state.nodes, node, values, limit, floor, supported=_native.supports(dtype),
    )
    return state.replace(nodes=nodes), largest


def _set_jax(nodes: Array, node: Array, values: Array, capacity: int, f: int,
             unique: bool) -> Array:
    offsets = level_offsets(capacity, f)
    keep = (node >= 0) & (node < capacity)
    if not unique:
        keep = keep & _keep_last(node, capacity)
    node = jnp.where(keep, node, 0)
    dropped = offsets[-1]  # out of range: `mode="drop"` ignores it
    nodes = nodes.at[jnp.where(keep, node, dropped)].set(values, mode="drop")
    starts = jnp.asarray(offsets, jnp.int32)

    # A loop over levels (not unrolled) compiles faster and lets XLA keep `nodes` in place.
    def parent_level(level, carry):
        nodes, node = carry
        sums = jnp.sum(nodes.reshape(-1, f)[starts[level - 1] // f + node // f], axis=1)
        node = node // f
        nodes = nodes.at[jnp.where(keep, starts[level] + node, dropped)].set(sums, mode="drop")
        return nodes, node

    nodes, _ = jax.lax.fori_loop(1, len(offsets) - 1, parent_level, (nodes, node))
    return nodes


def find(state: SumTreeState, queries: ArrayLike) -> Array:
    """Batched prefix-sum search: the leaf ``j`` with ``prefix_j <= u < prefix_j + p_j``.

    Follows the descent of the module docstring: the result has a positive value whenever
    ``total > 0``, for any query (NaN or negative queries act as 0, queries at or above the
    total give the last positive leaf). With ``total == 0`` the result is leaf 0. On CPU this
    is one native call (:mod:`rljax.buffers._native`), elsewhere the JAX version.

    Args:
        state: the tree.
        queries: ``[K]`` values, normally in ``[0, total)``.

    Returns:
        ``[K]`` int32 leaf indices.
    """
    dtype = state.nodes.dtype
    u = jnp.asarray(queries, dtype).reshape(-1)
    cap, f = state.capacity, state.fanout
    return _native.dispatch(
        lambda nodes, u: _native.find(nodes, u, cap, f),
        lambda nodes, u: _find_jax(nodes, u, cap, f),
        state.nodes, u, supported=_native.supports(dtype),
    )


def _find_jax(nodes: Array, u: Array, capacity: int, f: int) -> Array:
    offsets = level_offsets(capacity, f)
    dtype = nodes.dtype
    if _is_float(dtype):
        u = jnp.nan_to_num(u, nan=0.0)
    u = jnp.maximum(u, 0)
    rows = nodes.reshape(-1, f)
    child = jnp.arange(f, dtype=jnp.int32)
    # Exclusive prefix sums as one small matmul: E_i = sum_{l < i} c_l. For the first positive
    # child every term is 0 * 1 or c * 0 with finite c, so its E is exactly 0.
    strictly_upper = jnp.triu(jnp.ones((f, f), dtype), 1)
    top_down = jnp.asarray(offsets[-2::-1], jnp.int32) // f  # first row of each level

    def child_level(i, carry):
        row, u = carry
        c = rows[top_down[i] + row]  # [K, f] children of the current nodes
        excl = jnp.dot(c, strictly_upper, precision=jax.lax.Precision.HIGHEST)
        candidate = (c > 0) & (excl <= u[:, None])
        j = jnp.max(jnp.where(candidate, child, 0), axis=1)
        u = jnp.maximum(u - jnp.max(jnp.where(candidate, excl, 0), axis=1), 0)
        return row * f + j, u

    row = jnp.zeros(u.shape, jnp.int32)
    row, _ = jax.lax.fori_loop(0, len(offsets) - 1, child_level, (row, u))
    return jnp.minimum(row, capacity - 1)


def uniform_index(key: PRNGKey, batch_size: int, n: Array) -> Array:
    """``[batch_size]`` int32 draws from ``{0, ..., n - 1}`` (0 if ``n == 0``).

    ``bits mod n`` from one 32-bit draw each (one PRNG call, cheaper than ``randint``'s
    three); the modulo bias is below ``n / 2**32`` (2e-4 relative at a million slots).
    """
    bits = jax.random.bits(key, (batch_size,), jnp.uint32)
    return (bits % jnp.maximum(n, 1).astype(jnp.uint32)).astype(jnp.int32)


def sample(state: SumTreeState, key: PRNGKey, batch_size: int) -> Array:
    """``batch_size`` independent proportional draws, ``[batch_size]`` int32 indices."""
    if _is_float(state.nodes.dtype):
        u = jax.random.uniform(key, (batch_size,), state.nodes.dtype) * total(state)
    else:
        u = uniform_index(key, batch_size, total(state))
    return find(state, u)


def stratified_sample(state: SumTreeState, key: PRNGKey, batch_size: int) -> Array:
    """One proportional draw in each of ``batch_size`` equal segments of the total.

    Float trees: ``u_k = total * (k + U_k) / batch_size``. Integer trees: the segment
    ``[floor(k T / K), floor((k + 1) T / K))`` of ``T = total``, drawn exactly (an empty
    segment, possible when ``T < K``, falls back to its start).

    Args:
        state: the tree.
        key: PRNG key.
        batch_size: number of draws ``K``.

    Returns:
        ``[K]`` int32 leaf indices, in segment order.
    """
    if _is_float(state.nodes.dtype):
        return stratified_find(state, jax.random.uniform(key, (batch_size,), state.nodes.dtype))
    k = np.arange(batch_size)
    t = total(state)
    # k * T / K without overflowing int32: k * (T // K) + k * (T % K) // K.
    q, r = t // batch_size, t % batch_size
    lo = k * q + (k * r) // batch_size
    hi = (k + 1) * q + ((k + 1) * r) // batch_size
    return find(state, lo + uniform_index(key, batch_size, hi - lo))


def stratified_find(state: SumTreeState, unit: Array) -> Array:
    """Float trees: the leaves at ``u_k = total * (k + unit_k) / K`` for ``[K]`` draws
    ``unit`` in ``[0, 1)``, one in each of ``K`` equal segments of the total."""
    k = unit.shape[0]
    return find(state, total(state) * ((np.arange(k) + unit) / k))


def stratified_draw(state: SumTreeState, unit: Array) -> tuple[Array, Array]:
    """:func:`stratified_find` and the drawn leaves' values: ``(indices, values)``, ``[K]``.

    Float32 trees on CPU: one native call (search and leaf read), elsewhere the JAX version
    (the same search, then :func:`get`)."""
    unit = jnp.asarray(unit, state.nodes.dtype)

    def in_jax(nodes, unit):
        indices = stratified_find(state.replace(nodes=nodes), unit)
        return indices, nodes[indices]

    return _native.dispatch(
        lambda nodes, unit: _native.stratified_draw(nodes, unit, state.capacity, state.fanout),
        in_jax, state.nodes, unit, supported=jnp.dtype(state.nodes.dtype) == jnp.float32,
    )


def from_values(values: ArrayLike, capacity: int, dtype: jnp.dtype = jnp.float32,
                fanout: int = DEFAULT_FANOUT) -> SumTreeState:
    """Builds a tree from ``[capacity]`` leaf values in one pass (tests and bulk loads)."""
    state = init(capacity, dtype, fanout)
    sizes = level_sizes(capacity, fanout)
    level = jnp.zeros(sizes[0], dtype).at[:capacity].set(_sanitize(jnp.asarray(values), dtype))
    levels = [level]
    for size in sizes[1:]:
        sums = jnp.sum(levels[-1].reshape(-1, fanout), axis=1)
        levels.append(jnp.zeros(size, dtype).at[: sums.shape[0]].set(sums))
    return state.replace(nodes=jnp.concatenate(levels))

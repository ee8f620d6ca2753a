"""Sum-tree: batched set against a NumPy reference, exact consistency, search numerics."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from buffers_reference import assert_frequencies
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.buffers import _native, sum_tree

SETTINGS = settings(max_examples=25, deadline=None)
CAPACITIES = (1, 5, 100)
FANOUTS = (2, 8, 16)
K = 8

jit_set = jax.jit(sum_tree.set)
jit_find = jax.jit(sum_tree.find)
jit_stratified = jax.jit(sum_tree.stratified_sample, static_argnames="batch_size")
jit_sample = jax.jit(sum_tree.sample, static_argnames="batch_size")


@pytest.fixture(autouse=True, scope="module", params=["native", "jax"])
def implementation(request):
    """Every test runs with the native CPU kernels and with the JAX version (which GPUs run).
    The choice is made when a function is traced, hence the cleared caches."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLJAX_NATIVE", "1" if request.param == "native" else "0")
        if request.param == "native" and not _native.available():
            pytest.skip("native kernels turned off (RLJAX_NATIVE=0) or not buildable here")
        jax.clear_caches()
        yield request.param
    jax.clear_caches()


def leaves(state: sum_tree.SumTreeState) -> np.ndarray:
    return np.asarray(state.leaves)


def assert_consistent(state: sum_tree.SumTreeState) -> None:
    """Every node is the float32 sum of its children (up to summation order), a node is 0
    iff all its children are, and padding is 0."""
    levels = [np.asarray(x) for x in state.levels]
    assert np.all(levels[0][state.capacity :] == 0)
    for lower, upper in zip(levels[:-1], levels[1:], strict=True):
        sums = lower.reshape(-1, state.fanout).astype(np.float64).sum(axis=1)
        np.testing.assert_allclose(upper[: len(sums)], sums, rtol=1e-6)
        np.testing.assert_array_equal(upper[: len(sums)] > 0, sums > 0)
        assert np.all(upper[len(sums) :] == 0)


def test_init_layout_and_bad_arguments():
    assert [x.shape[0] for x in sum_tree.init(5).levels] == [8]
    assert [x.shape[0] for x in sum_tree.init(100_000).levels] == [
        100_000, 12_504, 1_568, 200, 32, 8]
    assert [x.shape[0] for x in sum_tree.init(100_000, fanout=16).levels] == [
        100_000, 6256, 400, 32, 16]
    assert [x.shape[0] for x in sum_tree.init(5, fanout=2).levels] == [6, 4, 2]
    assert float(sum_tree.total(sum_tree.init(7))) == 0
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="capacity"):
            sum_tree.init(bad)
    with pytest.raises(ValueError, match="fanout must be an integer >= 2, got 1"):
        sum_tree.init(4, fanout=1)


@SETTINGS
@given(
    capacity=st.sampled_from(CAPACITIES),
    fanout=st.sampled_from(FANOUTS),
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(-2, 110), min_size=K, max_size=K),
            st.lists(
                st.one_of(st.just(0.0), st.floats(1e-6, 1e3).map(np.float32)),
                min_size=K,
                max_size=K,
            ),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_set_matches_reference(capacity, fanout, batches):
    """Random batches with duplicates and out-of-range indices; last write wins."""
    state = sum_tree.init(capacity, fanout=fanout)
    ref = np.zeros(capacity, np.float32)
    for idx, val in batches:
        state = jit_set(state, jnp.array(idx), jnp.array(val, jnp.float32))
        for i, v in zip(idx, val, strict=True):
            if 0 <= i < capacity:
                ref[i] = v
    np.testing.assert_array_equal(leaves(state), ref)
    assert_consistent(state)
    np.testing.assert_allclose(
        float(sum_tree.total(state)), ref.astype(np.float64).sum(), rtol=1e-5
    )


def test_eager_matches_jitted():
    idx = jnp.array([3, 17, 3, -1, 19, 0, 25, 8])
    val = jnp.array([1.0, 2.0, 0.5, 9.0, 0.0, 4.0, 9.0, 1e-3])
    eager = sum_tree.set(sum_tree.init(20, fanout=4), idx, val)
    jitted = jit_set(sum_tree.init(20, fanout=4), idx, val)
    np.testing.assert_array_equal(np.asarray(eager.nodes), np.asarray(jitted.nodes))
    # leaves 0: 4.0, 3: 0.5, 8: 1e-3, 17: 2.0 (the duplicate 3 keeps 0.5; -1 and 25 ignored)
    u = jnp.array([-1.0, 0.0, 3.9, 4.0, 4.2, 4.5005, 5.4, 100.0])
    expected = [0, 0, 0, 3, 3, 8, 17, 17]
    np.testing.assert_array_equal(np.asarray(sum_tree.find(eager, u)), expected)
    np.testing.assert_array_equal(np.asarray(jit_find(jitted, u)), expected)


def test_duplicates_last_write_wins_both_dedup_paths():
    for k in (6, 300):  # quadratic and sort-based de-duplication
        idx = np.arange(k) % 3
        vals = np.arange(1, k + 1, dtype=np.float32)
        state = jit_set(sum_tree.init(4, fanout=2), jnp.array(idx), jnp.array(vals))
        last = [vals[np.nonzero(idx == i)[0][-1]] for i in range(3)]
        np.testing.assert_array_equal(leaves(state), [*last, 0.0])
        assert_consistent(state)


@pytest.mark.parametrize("k", [5, 48, 49, 128, 333])
def test_keep_last_matches_python_loop(k):
    """Every de-duplication path (quadratic, packed-key sort, and the argsort used when
    ``capacity * K`` would overflow int32) marks exactly the last write of each in-range
    index, on random batches with many duplicates and some out-of-range indices (which
    ``set`` drops whatever their mark)."""
    rng = np.random.default_rng(k)
    keep_last = jax.jit(sum_tree._keep_last, static_argnums=1)
    for capacity in (50, 30_000_000):
        idx = rng.integers(-3, 60, k)
        idx[rng.random(k) < 0.1] = capacity + 5
        expected = np.array([i == max(j for j in range(k) if idx[j] == idx[i])
                             for i in range(k)])
        kept = np.asarray(keep_last(jnp.array(idx, jnp.int32), capacity))
        in_range = (idx >= 0) & (idx < capacity)
        np.testing.assert_array_equal(kept[in_range], expected[in_range])


def test_set_with_128_duplicated_indices_matches_reference():
    rng = np.random.default_rng(1)
    state, ref = sum_tree.init(300), np.zeros(300, np.float32)
    for _ in range(5):
        idx = rng.integers(-5, 320, 128)
        val = rng.lognormal(0, 2, 128).astype(np.float32)
        state = jit_set(state, jnp.array(idx), jnp.array(val))
        for i, v in zip(idx, val, strict=True):
            if 0 <= i < 300:
                ref[i] = v
    np.testing.assert_array_equal(leaves(state), ref)
    assert_consistent(state)


def test_sanitizes_negative_nan_and_subnormal_values():
    vals = jnp.array([-1.0, jnp.nan, 1e-40, 2.0])
    state = jit_set(sum_tree.init(4), jnp.arange(4), vals)
    np.testing.assert_array_equal(leaves(state), [0, 0, 0, 2.0])


def test_many_updates_do_not_drift():
    """Deltas would accumulate error; recomputation keeps the root equal to the leaf sum."""
    rng = np.random.default_rng(0)
    state = sum_tree.init(1000)
    for _ in range(300):
        idx = rng.integers(0, 1000, 32)
        state = jit_set(state, jnp.array(idx), jnp.array(rng.lognormal(0, 4, 32), jnp.float32))
    state = jit_set(state, jnp.arange(1000), jnp.zeros(1000))
    assert float(sum_tree.total(state)) == 0.0
    assert_consistent(state)


@SETTINGS
@given(
    capacity=st.sampled_from([5, 100]),
    fanout=st.sampled_from(FANOUTS),
    values=st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1e3)), min_size=100, max_size=100),
    u01=st.lists(st.floats(0.0, 1.0), min_size=K, max_size=K),
)
def test_find_matches_prefix_sums(capacity, fanout, values, u01):
    vals = np.array(values[:capacity], np.float32)
    vals[0] = max(vals[0], 1.0)  # a nonempty tree
    state = sum_tree.from_values(jnp.array(vals), capacity, fanout=fanout)
    total = float(sum_tree.total(state))
    u = np.array(u01, np.float32) * np.float32(total)
    idx = np.asarray(jit_find(state, jnp.array(u)))
    cum = np.concatenate([[0.0], np.cumsum(vals.astype(np.float64))])
    tol = 1e-5 * total
    for j, uj in zip(idx, u, strict=True):
        assert vals[j] > 0
        assert cum[j] - tol <= uj <= cum[j + 1] + tol


@functools.lru_cache(maxsize=3)
def _big_tree(cap: int, fanout: int):
    """Priorities log-uniform in [1e-6, 1e3], about a third of them zero, long zero runs at
    both ends, the smallest priority next to them."""
    rng = np.random.default_rng(0)
    vals = (10.0 ** rng.uniform(-6, 3, cap)).astype(np.float32)
    vals[rng.random(cap) < 1 / 3] = 0
    zeros = cap // 200
    vals[:zeros] = 0
    vals[-zeros:] = 0
    vals[-zeros - 1] = 1e-6  # the last positive leaf is the smallest priority
    vals[zeros] = 1e-6
    return sum_tree.from_values(jnp.array(vals), cap, fanout=fanout), vals


@pytest.mark.parametrize("cap,fanout", [(1 << 20, 8), (1 << 20, 16), (1 << 12, 2)])
def test_never_returns_zero_leaf_at_large_capacity(cap, fanout):
    state, vals = _big_tree(cap, fanout)
    assert_consistent(state)
    total = sum_tree.total(state)
    tiny = jnp.array([0.0, 1e-9, 1e-8, 6e-8, 1.2e-7, 1e-7, 1e-6, 1e-4])
    segs = jnp.arange(129, dtype=jnp.float32) / 128
    queries = jnp.concatenate(
        [
            total * (1 - tiny),
            jnp.array([0.0, -1.0, jnp.nan, jnp.inf]),
            total + jnp.array([0.0, 1.0]),
            jnp.nextafter(total, 0.0)[None],
            total * segs,  # exact segment edges, including 0 and total
            jnp.nextafter(total * segs, 0.0),
            # stratified draws as `stratified_sample` computes them, 8 batches of 512
            total
            * ((jnp.arange(4096) % 512 + jax.random.uniform(jax.random.key(0), (4096,))) / 512),
        ]
    )
    idx = np.asarray(jit_find(state, queries))
    assert np.all((idx >= 0) & (idx < len(vals)))
    assert np.all(vals[idx] > 0), queries[vals[idx] == 0]
    assert idx[8] == cap // 200  # u = 0 lands on the first positive leaf


@SETTINGS
@given(position=st.integers(0, 99), value=st.sampled_from([1e-30, 1e-6, 1.0, 3e30]))
def test_single_positive_leaf_is_always_found(position, value):
    vals = np.zeros(100, np.float32)
    vals[position] = value
    state = sum_tree.from_values(jnp.array(vals), 100)
    total = sum_tree.total(state)
    u = jnp.concatenate([jnp.linspace(0, 1, 9) * total, jnp.array([-5.0, 1e38])])
    assert np.all(np.asarray(jit_find(state, u)) == position)


def test_stratified_one_draw_per_segment():
    vals = np.random.default_rng(2).random(50).astype(np.float32)
    state = sum_tree.from_values(jnp.array(vals), 50)
    k = 16
    idx = np.asarray(jit_stratified(state, jax.random.key(3), batch_size=k))
    cum = np.concatenate([[0.0], np.cumsum(vals.astype(np.float64))])
    edges = np.linspace(0, cum[-1], k + 1)
    for s, j in enumerate(idx):  # leaf j's interval overlaps segment s
        assert cum[j] <= edges[s + 1] + 1e-4 and cum[j + 1] >= edges[s] - 1e-4


def test_sampling_frequencies_match_priorities():
    """Chi-square, fixed seeds, level 1e-4 (see buffers_reference.chi2_critical)."""
    vals = np.array([0.0, 1.0, 2.0, 0.0, 5.0, 0.5, 3.0, 0.0, 8.0, 0.25, 1e-6], np.float32)
    state = sum_tree.from_values(jnp.array(vals), len(vals))
    keys = jax.random.split(jax.random.key(4), 200)
    strat = jax.vmap(lambda k: jit_stratified(state, k, batch_size=256))(keys)
    indep = jit_sample(state, jax.random.key(5), batch_size=50_000)
    assert_frequencies(np.asarray(strat), vals)
    assert_frequencies(np.asarray(indep), vals)


def test_integer_tree_is_exactly_uniform_over_ones():
    flags = np.array([1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1], np.int32)
    state = jit_set(sum_tree.init(11, jnp.int32), jnp.arange(11), jnp.array(flags))
    assert int(sum_tree.total(state)) == 7
    # Every integer query u in [0, 7) maps to the u-th one: an exact bijection.
    np.testing.assert_array_equal(np.asarray(jit_find(state, jnp.arange(7))), np.nonzero(flags)[0])
    draws = jit_sample(state, jax.random.key(6), batch_size=40_000)
    assert_frequencies(np.asarray(draws), flags.astype(float))
    strat = np.asarray(jit_stratified(state, jax.random.key(7), batch_size=7))
    np.testing.assert_array_equal(strat, np.nonzero(flags)[0])  # T == K: one per segment


def test_vmap_over_trees():
    vals = jnp.array([[1.0, 0.0, 3.0], [0.0, 2.0, 0.0]])
    states = jax.jit(jax.vmap(lambda v: sum_tree.set(sum_tree.init(3), jnp.arange(3), v)))(vals)
    np.testing.assert_array_equal(np.asarray(jax.vmap(sum_tree.total)(states)), [4.0, 2.0])
    keys = jax.random.split(jax.random.key(8), 2)
    sample = functools.partial(sum_tree.stratified_sample, batch_size=64)
    idx = jax.jit(jax.vmap(sample))(states, keys)
    assert np.all(np.asarray(idx)[1] == 1) and set(np.asarray(idx)[0].tolist()) == {0, 2}

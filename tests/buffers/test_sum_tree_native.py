"""Native CPU sum-tree kernels: agreement with the JAX version, selection, build and fallback."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.buffers import _native, sum_tree

pytestmark = pytest.mark.skipif(
    not _native.available(),
    reason="native kernels turned off (RLJAX_NATIVE=0) or not buildable here",
)


@pytest.fixture(autouse=True)
def _on_the_cpu():
    """The native kernels are XLA:CPU custom calls: every test here runs on the CPU device,
    also where the default device is a GPU."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def random_tree(rng, capacity, fanout, dtype=np.float32):
    vals = (10.0 ** rng.uniform(-6, 3, capacity)).astype(dtype)
    if dtype == np.int32:
        vals = rng.integers(0, 3, capacity).astype(np.int32)
    vals[rng.random(capacity) < 0.3] = 0
    return sum_tree.from_values(jnp.array(vals), capacity, jnp.dtype(dtype), fanout=fanout)


@pytest.mark.parametrize("capacity,fanout", [(1, 8), (7, 8), (100_000, 8), (1000, 3), (5000, 16)])
def test_set_agrees_with_jax_version(capacity, fanout):
    """Batches with duplicates and masked (-1, capacity) indices: identical leaves, nodes equal
    up to summation order, and the same zero pattern."""
    rng = np.random.default_rng(capacity)
    state = random_tree(rng, capacity, fanout)
    native_set = jax.jit(lambda n, i, v: _native.set_leaves(n, i, v, capacity, fanout))
    jax_set = jax.jit(lambda n, i, v: sum_tree._set_jax(
        n, i, sum_tree._sanitize(v, n.dtype), capacity, fanout, False))
    a = b = state.nodes
    for k in (1, 32, 128, 300):
        idx = rng.integers(-1, capacity + 1, k).astype(np.int32)
        idx[: k // 4] = idx[k // 4 : 2 * (k // 4)]  # duplicates
        vals = rng.lognormal(0, 3, k).astype(np.float32)
        vals[rng.random(k) < 0.2] = 0
        vals[rng.random(k) < 0.05] = np.nan
        a, largest = native_set(a, jnp.array(idx), jnp.array(vals))
        b = jax_set(b, jnp.array(idx), jnp.array(vals))
        in_range = (idx >= 0) & (idx < capacity)
        assert float(largest) == np.nanmax(np.where(in_range, vals, 0), initial=0)
        np.testing.assert_array_equal(np.asarray(a)[:capacity], np.asarray(b)[:capacity])
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6)
        np.testing.assert_array_equal(np.asarray(a) > 0, np.asarray(b) > 0)


@pytest.mark.parametrize("capacity,fanout", [(100_000, 8), (1000, 3), (5000, 16), (33, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_find_agrees_with_jax_version(capacity, fanout, dtype):
    """Same leaf for every query, except float32 queries within rounding of a boundary
    between two leaves (the prefix sums are added in another order); always a positive leaf."""
    rng = np.random.default_rng(fanout)
    state = random_tree(rng, capacity, fanout, dtype)
    total = sum_tree.total(state)
    if dtype == np.int32:
        u = jnp.array(rng.integers(0, int(total), 4096), jnp.int32)
    else:
        u = jnp.concatenate([jnp.array(rng.random(4096), jnp.float32) * total,
                             jnp.array([0.0, -1.0, jnp.nan, jnp.inf]), total[None]])
    native = np.asarray(jax.jit(lambda n, q: _native.find(n, q, capacity, fanout))(state.nodes, u))
    plain = np.asarray(jax.jit(lambda n, q: sum_tree._find_jax(n, q, capacity, fanout))(
        state.nodes, u))
    vals = np.asarray(state.leaves)
    assert np.all(vals[native] > 0)
    differ = np.nonzero(native != plain)[0]
    if dtype == np.int32:
        assert differ.size == 0
        return
    assert differ.size <= 4, differ.size
    cum = np.concatenate([[0.0], np.cumsum(vals.astype(np.float64))])
    for i in differ:  # both leaves' intervals reach the query, within float32 rounding
        for j in (native[i], plain[i]):
            assert cum[j] - 1e-5 * cum[-1] <= float(u[i]) <= cum[j + 1] + 1e-5 * cum[-1]


@pytest.mark.parametrize("capacity,fanout", [(100_000, 8), (1000, 3), (5, 8)])
def test_stratified_draw_agrees_with_find_and_get(capacity, fanout):
    """The native draw returns stratified_find's leaves (single and vmapped trees) and their
    values; it lowers to one call."""
    rng = np.random.default_rng(capacity)
    state = random_tree(rng, capacity, fanout)
    state = state.replace(nodes=state.nodes.at[0].set(0.0)) if capacity < 8 else state
    unit = jnp.array(rng.random((3, 128)), jnp.float32)
    draw = jax.jit(jax.vmap(lambda u: sum_tree.stratified_draw(state, u)))
    idx, values = (np.asarray(x) for x in draw(unit))
    assert "rljax_stratified_draw_f32" in draw.lower(unit).as_text()
    leaves = np.asarray(state.leaves)
    for m in range(3):
        np.testing.assert_array_equal(idx[m], np.asarray(sum_tree.stratified_find(state, unit[m])))
        np.testing.assert_array_equal(values[m], leaves[idx[m]])
    assert np.all(values > 0) and np.all(np.diff(idx, axis=1) >= 0)  # segment order
    trees = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    both = jax.jit(jax.vmap(sum_tree.stratified_draw))(trees, unit[:2])
    np.testing.assert_array_equal(np.asarray(both[0]), idx[:2])


@pytest.mark.parametrize("native", [True, False])
def test_set_and_max_sanitizes_alike(native, monkeypatch):
    monkeypatch.setenv("RLJAX_NATIVE", "1" if native else "0")
    jax.clear_caches()
    vals = jnp.array([-1.0, jnp.nan, 1e-40, 2.0, 3e30, jnp.inf, 7.0, 5.0])
    idx = jnp.array([0, 1, 2, 3, 4, 5, 9, -1])  # 9 and -1 are out of range
    tree, largest = jax.jit(sum_tree.set_and_max)(sum_tree.init(6), idx, vals)
    np.testing.assert_array_equal(
        np.asarray(tree.leaves), np.array([0, 0, 0, 2.0, 1e30, 1e30], np.float32))
    assert float(largest) == np.float32(1e30)
    _, none = jax.jit(sum_tree.set_and_max)(sum_tree.init(6), jnp.array([-1, 6]), vals[:2])
    assert float(none) == 0.0
    ints, top = jax.jit(sum_tree.set_and_max)(
        sum_tree.init(4, jnp.int32), jnp.array([0, 1, 2]), jnp.array([-3, 4, 2]))
    np.testing.assert_array_equal(np.asarray(ints.leaves), [0, 4, 2, 0])
    assert int(top) == 4 and top.dtype == jnp.int32
    # only leaves below `size` are written; the running maximum only rises
    tree, top = jax.jit(sum_tree.set_and_max)(
        sum_tree.init(6), jnp.array([0, 2, 3, 5]), jnp.array([1.0, 4.0, 9.0, 2.0]),
        size=jnp.int32(3), running_max=jnp.float32(3.0))
    np.testing.assert_array_equal(np.asarray(tree.leaves), [1.0, 0, 4.0, 0, 0, 0])
    assert float(top) == 4.0 and float(sum_tree.total(tree)) == 5.0
    _, top = jax.jit(sum_tree.set_and_max)(
        sum_tree.init(6), jnp.array([1]), jnp.array([2.0]), running_max=jnp.float32(3.0))
    assert float(top) == 3.0
    members = jax.jit(jax.vmap(lambda s, m: sum_tree.set_and_max(
        sum_tree.init(4), jnp.arange(4), jnp.arange(1.0, 5.0), size=s, running_max=m)))(
        jnp.array([1, 4]), jnp.array([0.5, 9.0]))
    np.testing.assert_array_equal(np.asarray(members[0].nodes[:, :4]), [[1, 0, 0, 0], [1, 2, 3, 4]])
    np.testing.assert_array_equal(np.asarray(members[1]), [1.0, 9.0])
    monkeypatch.undo()
    jax.clear_caches()


def test_lowering_for_gpus_uses_the_jax_version():
    """platform_dependent picks the JAX branch when lowering for CUDA (no GPU needed)."""
    tree = sum_tree.init(1000)
    fn = jax.jit(lambda t, u, i, v: (sum_tree.find(t, u), sum_tree.set(t, i, v)))
    args = (tree, jnp.zeros(8), jnp.zeros(8, jnp.int32), jnp.ones(8))
    # (export refuses custom calls without a stability promise unless told they are known)
    known = [jax.export.DisabledSafetyCheck.custom_call(f"rljax_sum_tree_{op}_f32")
             for op in ("find", "set")]
    gpu = jax.export.export(fn, platforms=["cuda"], disabled_checks=known)(*args).mlir_module()
    cpu = jax.export.export(fn, platforms=["cpu"], disabled_checks=known)(*args).mlir_module()
    assert "rljax_sum_tree" not in gpu
    assert "rljax_sum_tree_find_f32" in cpu and "rljax_sum_tree_set_f32" in cpu


def test_vmapped_trees_use_one_call_and_match_each_member():
    rng = np.random.default_rng(3)
    trees = [random_tree(rng, 500, 8) for _ in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *trees)
    u = jnp.array(rng.random((3, 64)), jnp.float32) * jax.vmap(sum_tree.total)(stacked)[:, None]
    idx = jnp.array(rng.integers(0, 500, (3, 16)), jnp.int32)
    val = jnp.array(rng.random((3, 16)), jnp.float32)
    found = jax.jit(jax.vmap(sum_tree.find))(stacked, u)
    updated = jax.jit(jax.vmap(sum_tree.set))(stacked, idx, val)
    for m, tree in enumerate(trees):
        np.testing.assert_array_equal(np.asarray(found[m]), np.asarray(sum_tree.find(tree, u[m])))
        one = sum_tree.set(tree, idx[m], val[m])
        np.testing.assert_array_equal(np.asarray(updated.nodes[m]), np.asarray(one.nodes))
    hlo = jax.jit(jax.vmap(sum_tree.find)).lower(stacked, u).as_text()
    assert hlo.count("rljax_sum_tree_find_f32") == 1


def test_choice_follows_rljax_native(monkeypatch):
    tree = sum_tree.init(100)
    u = jnp.zeros(4)

    def lowered():
        jax.clear_caches()
        return jax.jit(sum_tree.find).lower(tree, u).as_text()

    assert "rljax_sum_tree_find_f32" in lowered()
    monkeypatch.setenv("RLJAX_NATIVE", "0")
    assert "rljax_sum_tree_find_f32" not in lowered()
    monkeypatch.undo()
    jax.clear_caches()


def test_build_reuses_the_cache_and_reports_compiler_errors(tmp_path):
    # A build from nothing, then found again: envpool's forwarder, which the same function
    # builds in a thirtieth of the kernels' time (the kernels' own build: every test here).
    from rljax.envs import envpool_ffi

    path = _native.build(str(tmp_path), source=envpool_ffi.SOURCE, stem="envpool_ffi")
    assert path == envpool_ffi.library_path(str(tmp_path)) and _native.intact(path)
    stamp = os.stat(path).st_mtime_ns
    assert _native.build(str(tmp_path), source=envpool_ffi.SOURCE,
                         stem="envpool_ffi") == path and os.stat(path).st_mtime_ns == stamp
    with pytest.raises(_native.BuildError, match="failed"):
        _native.build(str(tmp_path / "other"), compiler="false")
    assert os.listdir(tmp_path / "other") == []  # no partial library left behind
    with pytest.raises(_native.BuildError, match="could not run"):
        _native.build(str(tmp_path / "third"), compiler=str(tmp_path / "no-such-compiler"))


def test_set_is_in_place_inside_a_donated_scan():
    """The compiled update loop keeps one copy of the tree: no full-size copy per step."""
    tree = sum_tree.init(100_000)
    idx = jnp.zeros((8, 32), jnp.int32)
    val = jnp.ones((8, 32))
    loop = jax.jit(lambda t, i, v: jax.lax.scan(lambda t, x: (sum_tree.set(t, *x), None),
                                                 t, (i, v))[0], donate_argnums=0)
    hlo = loop.lower(tree, idx, val).compile().as_text()
    size = tree.nodes.shape[0]
    copies = [line for line in hlo.splitlines() if f"f32[{size}]" in line and " copy(" in line]
    assert not copies, copies


def test_take_rows_matches_indexing_for_any_leaves():
    """Every dtype and row shape, negative and out-of-range indices (counted from the end, then
    clamped, as ``x[i]``), vmapped stores, and the JAX fallback."""
    from rljax.buffers.replay import take_rows

    rng = np.random.default_rng(5)
    store = dict(
        obs=jnp.array(rng.normal(size=(50, 4)), jnp.float32),
        frames=jnp.array(rng.integers(0, 255, (50, 2, 3, 3)), jnp.uint8),
        action=jnp.array(rng.integers(0, 9, 50), jnp.int32),
        done=jnp.array(rng.random(50) < 0.5),
        value=jnp.array(rng.normal(size=50), jnp.float16),
        empty=jnp.zeros((50, 0), jnp.float32),
        wide=jnp.array(rng.normal(size=(50, 3)), jnp.float64) if jax.config.x64_enabled
        else jnp.array(rng.integers(0, 2**31, (50, 3)), jnp.uint32),
    )
    idx = jnp.array([0, 49, 7, 7, -1, -50, 60, -70, 3], jnp.int32)
    expected = jax.tree.map(lambda x: np.asarray(x[idx]), store)
    got = jax.jit(take_rows)(store, idx)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, got), expected)
    assert "rljax_gather_rows" in jax.jit(take_rows).lower(store, idx).as_text()

    stacked = jax.tree.map(lambda x: jnp.stack([x, x[::-1]]), store)
    both = jnp.stack([idx, idx[::-1]])
    got = jax.jit(jax.vmap(take_rows))(stacked, both)
    for m in range(2):
        member = jax.tree.map(lambda x, m=m: x[m], stacked)
        jax.tree.map(np.testing.assert_array_equal,
                     jax.tree.map(lambda x, m=m: np.asarray(x[m]), got),
                     jax.tree.map(lambda x, m=m: np.asarray(x[both[m]]), member))
    assert take_rows({}, idx) == {}


def test_prioritized_sample_agrees_with_jax_version(monkeypatch):
    """The native stratified draw (search and leaf values in one call) against the JAX
    composition, single and vmapped buffers, on priorities spanning nine decades."""
    from rljax.buffers import make_prioritized

    rng = np.random.default_rng(11)
    buf = make_prioritized(3000, 128, alpha=0.6)
    state = buf.init(dict(obs=jnp.zeros(3), a=jnp.zeros((), jnp.int32)))
    state = buf.add(state, dict(obs=jnp.array(rng.normal(size=(3000, 3)), jnp.float32),
                                a=jnp.arange(3000, dtype=jnp.int32)))
    state = buf.update_priorities(state, jnp.arange(3000),
                                  jnp.array(10.0 ** rng.uniform(-6, 3, 3000), jnp.float32))
    keys = jax.random.split(jax.random.key(0), 4)
    draw = jax.jit(jax.vmap(lambda k, b: buf.sample(state, k, b)))
    betas = jnp.array([0.4, 0.7, 1.0, 0.0])
    native = draw(keys, betas)
    monkeypatch.setenv("RLJAX_NATIVE", "0")
    jax.clear_caches()
    plain = jax.jit(jax.vmap(lambda k, b: buf.sample(state, k, b)))(keys, betas)
    monkeypatch.undo()
    jax.clear_caches()
    same = np.asarray(native.indices) == np.asarray(plain.indices)
    assert same.mean() > 0.99, same.mean()
    np.testing.assert_array_equal(np.asarray(native.transition["a"]), np.asarray(native.indices))
    rows = np.asarray(native.indices)
    np.testing.assert_allclose(np.asarray(native.probabilities)[same],
                               np.asarray(plain.probabilities)[same], rtol=1e-5)
    # the batch minimum may be another leaf where the draws differ: compare rows that agree
    for m in range(4):
        if same[m].all():
            np.testing.assert_allclose(np.asarray(native.weights[m]),
                                       np.asarray(plain.weights[m]), rtol=1e-5)
    assert np.all(np.asarray(native.weights) <= 1) and np.all(np.asarray(native.weights) > 0)
    np.testing.assert_array_equal(np.asarray(native.weights[3]), 1.0)  # beta = 0
    assert rows.min() >= 0 and rows.max() < 3000

"""Prioritized replay against a Python reference: priorities, max priority, weights."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from buffers_reference import assert_frequencies
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.buffers import make_prioritized, prioritized

B, K, CAPACITY, ALPHA, EPS = 4, 6, 10, 0.6, 1e-3
EXAMPLE = {"id": jnp.zeros((), jnp.int32), "obs": jnp.zeros(2, jnp.float32)}


def batch_of(ids) -> dict:
    ids = np.asarray(ids)
    return {
        "id": jnp.asarray(ids, jnp.int32),
        "obs": jnp.asarray(np.stack([ids, -ids], -1), jnp.float32),
    }


@functools.cache
def compiled():
    buf = make_prioritized(CAPACITY, batch_size=K, alpha=ALPHA, eps=EPS)
    return buf, dict(
        add=jax.jit(buf.add),
        sample=jax.jit(buf.sample),
        update=jax.jit(buf.update_priorities),
    )


class Reference:
    """Python PER: slot -> (id, priority); new slots get the running max priority."""

    def __init__(self):
        self.ids, self.p, self.cursor, self.max_p = {}, {}, 0, 1.0

    def add(self, ids, valid, td=None):
        for b, (i, v) in enumerate(zip(ids, valid, strict=True)):
            if v:
                p = self.max_p if td is None else (abs(td[b]) + EPS) ** ALPHA
                self.ids[self.cursor], self.p[self.cursor] = i, p
                self.max_p = max(self.max_p, p)
                self.cursor = (self.cursor + 1) % CAPACITY

    def update(self, idx, td):
        for i, d in zip(idx, td, strict=True):  # sequential: last write wins
            if i in self.p:
                self.p[i] = (abs(d) + EPS) ** ALPHA
                self.max_p = max(self.max_p, self.p[i])

    def probs(self):
        p = np.zeros(CAPACITY)
        for i, v in self.p.items():
            p[i] = v
        return p / p.sum()


op = st.one_of(
    st.tuples(st.just("add"), st.lists(st.booleans(), min_size=B, max_size=B), st.none()),
    st.tuples(
        st.just("add_td"),
        st.lists(st.booleans(), min_size=B, max_size=B),
        st.lists(st.floats(-5, 5), min_size=B, max_size=B),
    ),
    st.tuples(
        st.just("update"),
        st.lists(st.integers(0, CAPACITY - 1), min_size=K, max_size=K),
        st.lists(st.floats(-5, 5), min_size=K, max_size=K),
    ),
)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(op, min_size=1, max_size=10))
def test_operations_match_reference(ops):
    """Jitted add / update / sample against the Python reference."""
    buf, fns = compiled()
    add, update = fns["add"], fns["update"]
    state, ref, next_id = buf.init(EXAMPLE), Reference(), 1
    for name, a, b in ops:
        if name.startswith("add"):
            ids = list(range(next_id, next_id + B))
            next_id += B
            td = None if b is None else jnp.array(b, jnp.float32)
            state = add(state, batch_of(ids), jnp.array(a), td)
            ref.add(ids, a, None if b is None else np.float32(b))
        else:
            state = update(state, jnp.array(a), jnp.array(b, jnp.float32))
            ref.update(a, np.float32(b))
    leaves = np.asarray(state.tree.leaves)
    expected = np.zeros(CAPACITY)
    for i, p in ref.p.items():
        expected[i] = p
        assert int(state.storage["id"][i]) == ref.ids[i]
    np.testing.assert_allclose(leaves, expected, rtol=1e-5)
    np.testing.assert_allclose(float(state.max_priority), ref.max_p, rtol=1e-5)
    assert int(state.size) == len(ref.p)
    if ref.p:
        s = fns["sample"](state, jax.random.key(next_id), 0.5)
        idx = np.asarray(s.indices)
        assert all(i in ref.p for i in idx.tolist())
        np.testing.assert_array_equal(np.asarray(s.transition["id"]), [ref.ids[i] for i in idx])
        probs = ref.probs()[idx]
        np.testing.assert_allclose(np.asarray(s.probabilities), probs, rtol=1e-4)
        w = (len(ref.p) * probs) ** -0.5
        np.testing.assert_allclose(np.asarray(s.weights), w / w.max(), rtol=1e-4)


def test_eager_matches_jitted():
    buf, fns = compiled()
    eager = jitted = buf.init(EXAMPLE)
    rng = np.random.default_rng(0)
    for step in range(1):
        batch, valid = batch_of(np.arange(4) + 4 * step), jnp.asarray(rng.random(B) < 0.7)
        td = jnp.asarray(rng.normal(size=B), jnp.float32)
        eager, jitted = buf.add(eager, batch, valid, td), fns["add"](jitted, batch, valid, td)
        idx, err = jnp.asarray(rng.integers(0, 8, K)), jnp.asarray(rng.normal(size=K), jnp.float32)
        eager = buf.update_priorities(eager, idx, err)
        jitted = fns["update"](jitted, idx, err)
    key = jax.random.key(1)
    for a, b in zip(
        jax.tree.leaves((eager, buf.sample(eager, key, 0.4))),
        jax.tree.leaves((jitted, fns["sample"](jitted, key, 0.4))),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_duplicate_indices_in_update_last_wins():
    buf, fns = compiled()
    state = fns["add"](buf.init(EXAMPLE), batch_of([1, 2, 3, 4]), jnp.ones(B, bool), None)
    idx = jnp.array([2, 0, 2, 3, 0, 2])
    td = jnp.array([9.0, 1.0, 0.5, 2.0, 4.0, 3.0])
    state = fns["update"](state, idx, td)
    p = lambda d: (d + EPS) ** ALPHA
    np.testing.assert_allclose(
        np.asarray(state.tree.leaves)[:4], [p(4.0), 1.0, p(3.0), p(2.0)], rtol=1e-6
    )
    np.testing.assert_allclose(float(state.max_priority), p(9.0), rtol=1e-6)  # max seen


@pytest.mark.parametrize("alpha", [0.0, 0.4, 0.5, 0.6, 1.0, 2.0, 7.5])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_priority_matches_float64_power(alpha, eps):
    """``exp(alpha log x)`` against NumPy's float64 power on |delta| from 1e-12 to 1e12, then
    the clip: relative error within 3e-7 + 1.5e-7 |alpha ln x| (float32 rounding of the
    exponent; 1.5e-6 at alpha 0.6 and |delta| 1e6); special values as the power gives them
    (0 -> 0, inf -> inf, NaN -> NaN, before the clip; alpha 0 -> 1)."""
    rng = np.random.default_rng(int(alpha * 10) + int(eps > 0))
    td = (rng.choice([-1, 1], 20_000) * 10.0 ** rng.uniform(-12, 12, 20_000)).astype(np.float32)
    x = (np.abs(td) + np.float32(eps)).astype(np.float64)  # the sum is a float32 one
    expected = np.clip(x**alpha, prioritized.PRIORITY_MIN, prioritized.PRIORITY_MAX)
    got = np.asarray(jax.jit(lambda d: prioritized.priority(d, alpha, eps))(td), np.float64)
    expected = expected.astype(np.float32).astype(np.float64)
    bound = expected * (3e-7 + 1.5e-7 * np.abs(alpha * np.log(x)))
    assert np.all(np.abs(got - expected) <= bound), np.max(np.abs(got - expected) / bound)
    special = jnp.asarray([0.0, -0.0, np.inf, -np.inf, np.nan], jnp.float32)
    got = np.asarray(prioritized.priority(special, alpha, eps))
    with np.errstate(all="ignore"):
        expected = np.clip(
            (np.abs(np.asarray(special)) + np.float32(eps)).astype(np.float64) ** alpha,
            prioritized.PRIORITY_MIN, prioritized.PRIORITY_MAX,
        )
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-6)  # NaN == NaN


def test_update_ignores_unwritten_slots():
    buf, fns = compiled()
    state = fns["add"](buf.init(EXAMPLE), batch_of([1, 2, 3, 4]), jnp.ones(B, bool), None)
    state = fns["update"](state, jnp.array([7, 8, 9, 1, -1, 12]), jnp.ones(K))
    leaves = np.asarray(state.tree.leaves)
    assert np.all(leaves[4:] == 0) and leaves[1] == pytest.approx((1 + EPS) ** ALPHA)


def test_sampling_frequencies_match_priorities():
    """Chi-square at level 1e-4, fixed seed: stratified draws follow p_i / sum p."""
    buf, fns = compiled()
    state = fns["add"](buf.init(EXAMPLE), batch_of(np.arange(4)), jnp.ones(B, bool), None)
    state = fns["add"](state, batch_of(np.arange(4)), jnp.ones(B, bool), None)
    td = jnp.array([0.0, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    state = fns["update"](state, jnp.arange(6), td[:6])
    state = fns["update"](state, jnp.array([6, 7, 6, 7, 6, 7]), td[jnp.array([6, 7, 6, 7, 6, 7])])
    sample = functools.partial(prioritized.sample, batch_size=30_000)
    idx = jax.jit(sample)(state, jax.random.key(0)).indices
    p = np.concatenate([(np.abs(np.asarray(td)) + EPS) ** ALPHA, [0, 0]])
    assert_frequencies(np.asarray(idx), p)


def test_invalid_and_unwritten_slots_never_sampled():
    buf = make_prioritized(64, batch_size=5000, alpha=ALPHA, eps=EPS)
    state = buf.init(EXAMPLE)
    add = jax.jit(buf.add)
    rng = np.random.default_rng(1)
    valid_ids = set()
    for step in range(6):
        ids = np.arange(step * 8, step * 8 + 8) + 1
        valid = rng.random(8) < 0.5
        valid_ids |= set(ids[valid].tolist())
        state = add(state, batch_of(ids), jnp.array(valid), jnp.asarray(rng.normal(size=8)))
    s = jax.jit(buf.sample)(state, jax.random.key(2))
    assert set(np.asarray(s.transition["id"]).ravel().tolist()) <= valid_ids
    assert np.all(np.asarray(s.indices) < int(state.size))


def test_importance_weights_formula():
    p = jnp.array([0.5, 2.0, 1.0, 0.25])
    for beta in (0.0, 0.4, 1.0):
        probs = np.asarray(p) / 10.0
        w = (7 * probs) ** -beta
        np.testing.assert_allclose(
            np.asarray(prioritized.importance_weights(p, beta)), w / w.max(), rtol=1e-6
        )
    # Priorities 60 decades apart (the clip's extremes): p_min / p underflows, no NaN.
    extreme = jnp.array([prioritized.PRIORITY_MIN, prioritized.PRIORITY_MAX, 1.0], jnp.float32)
    np.testing.assert_array_equal(np.asarray(prioritized.importance_weights(extreme, 0.0)), 1.0)
    w = np.asarray(jax.jit(prioritized.importance_weights)(extreme, 1.0))
    assert w[0] == 1.0 and 0 <= w[1] < 1e-37 and w[2] == pytest.approx(1e-30, rel=1e-5)
    np.testing.assert_array_equal(  # an empty tree's zeros weigh 1
        np.asarray(prioritized.importance_weights(jnp.zeros(3), 0.4)), 1.0)


@pytest.mark.parametrize("beta", [-0.1, 1.5, float("nan"), np.float32(2.0), jnp.asarray(-1.0),
                                  np.array([0.5, 1.2]), "0.5"])
def test_concrete_beta_outside_unit_interval_is_refused(beta):
    buf, fns = compiled()
    state = fns["add"](buf.init(EXAMPLE), batch_of([1, 2, 3, 4]), jnp.ones(B, bool), None)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got "):
        buf.sample(state, jax.random.key(0), beta)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got "):
        prioritized.importance_weights(jnp.ones(3), beta)
    # A concrete array closed over by a jitted function is still concrete.
    closed = beta if isinstance(beta, str) else jnp.asarray(beta, jnp.float32)
    with pytest.raises(ValueError, match="beta must be in"):
        jax.jit(lambda p: prioritized.importance_weights(p, closed))(jnp.ones(3))


@pytest.mark.parametrize("beta", [0.0, 1.0, np.float32(0.4), jnp.asarray(0.7), np.array(1)])
def test_concrete_beta_in_unit_interval_is_accepted(beta):
    p = jnp.array([0.5, 2.0, 1.0])
    w = (np.asarray(p, np.float64)) ** -float(beta)
    np.testing.assert_allclose(np.asarray(prioritized.importance_weights(p, beta)), w / w.max(),
                               rtol=1e-6)


@pytest.mark.parametrize("beta", [-1.0, -0.3, 0.0, 0.4, 1.0, 1.7, 3.0])
def test_traced_beta_follows_the_formula_at_any_value(beta):
    """Unchecked when traced: ``w_i = (N P(i))^-beta / max_j (N P(j))^-beta`` for any beta,
    including negative ones (where the largest weight is the largest priority's)."""
    rng = np.random.default_rng(int(10 * beta) + 20)
    p = (10.0 ** rng.uniform(-3, 3, K)).astype(np.float32)
    p64 = p.astype(np.float64)
    n = 7
    w = (n * p64 / p64.sum()) ** -beta
    got = jax.jit(prioritized.importance_weights)(jnp.asarray(p), beta)
    bound = 3e-7 + 1.5e-7 * np.abs(beta * np.log(p64.max() / p64.min()))
    np.testing.assert_allclose(np.asarray(got), w / w.max(), rtol=2 * bound)
    assert np.asarray(got).max() == 1.0
    # With the empty tree's zeros: they weigh 1 and do not enter the normalization.
    with_zeros = jnp.asarray(np.concatenate([p, [0.0, 0.0]]))
    got = np.asarray(jax.jit(prioritized.importance_weights)(with_zeros, beta))
    np.testing.assert_allclose(got[:K], w / w.max(), rtol=2 * bound)
    np.testing.assert_array_equal(got[K:], 1.0)
    # Priorities 60 decades apart: no NaN; a ratio beyond float32's range is held at its
    # smallest normal, so a weight below tiny^|beta| may read as up to that (and one below
    # tiny itself as 0).
    extreme = np.array([prioritized.PRIORITY_MIN, prioritized.PRIORITY_MAX, 1.0], np.float32)
    got = np.asarray(jax.jit(prioritized.importance_weights)(jnp.asarray(extreme), beta))
    w = extreme.astype(np.float64) ** -beta
    tiny = float(np.finfo(np.float32).tiny)
    atol = 1.01 * max(tiny ** abs(beta), tiny)
    np.testing.assert_allclose(got, w / w.max(), rtol=1e-5, atol=atol)
    assert np.all(np.isfinite(got)) and got.max() == 1.0


def test_traced_beta_in_sample_and_vmap():
    """The loops pass beta traced (from a schedule): sample's weights follow the formula."""
    buf, fns = compiled()
    state = fns["add"](buf.init(EXAMPLE), batch_of([1, 2, 3, 4]), jnp.ones(B, bool),
                       jnp.array([0.1, 1.0, 3.0, 10.0]))
    betas = jnp.array([0.0, 0.4, 1.0])
    out = jax.jit(jax.vmap(buf.sample, in_axes=(None, None, 0)))(state, jax.random.key(3), betas)
    p = np.asarray(state.tree.leaves)[np.asarray(out.indices)]
    for i, beta in enumerate(np.asarray(betas)):
        w = p[i].astype(np.float64) ** -beta
        np.testing.assert_allclose(np.asarray(out.weights[i]), w / w.max(), rtol=1e-5)


def test_vmap_over_seeds():
    buf = make_prioritized(16, batch_size=8, alpha=ALPHA, eps=EPS)
    seeds = 2
    states = jax.vmap(lambda _: buf.init(EXAMPLE))(jnp.arange(seeds))
    ids = np.arange(seeds * B).reshape(seeds, B)
    batches = jax.tree.map(lambda *x: jnp.stack(x), *[batch_of(i) for i in ids])
    states = jax.jit(jax.vmap(buf.add))(states, batches)
    keys = jax.random.split(jax.random.key(5), seeds)
    out = jax.jit(jax.vmap(buf.sample, in_axes=(0, 0, None)))(states, keys, 0.4)
    td = jnp.arange(seeds * 8, dtype=jnp.float32).reshape(seeds, 8)
    states = jax.jit(jax.vmap(buf.update_priorities))(states, out.indices, td)
    add1, sample1, update1 = jax.jit(buf.add), jax.jit(buf.sample), jax.jit(buf.update_priorities)
    for i in range(seeds):
        single = add1(buf.init(EXAMPLE), batch_of(ids[i]))
        ref = sample1(single, keys[i], 0.4)
        np.testing.assert_array_equal(np.asarray(out.indices[i]), np.asarray(ref.indices))
        single = update1(single, ref.indices, td[i])
        np.testing.assert_allclose(
            np.asarray(states.tree.nodes[i]), np.asarray(single.tree.nodes), rtol=1e-6
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(capacity=0, batch_size=1), "capacity must be an integer >= 1, got 0"),
        (dict(capacity=4, batch_size=-1), "batch_size"),
        (dict(capacity=4, batch_size=2, alpha=-0.1), r"alpha must be in \[0.0, 1000.0\], got -0.1"),
        (dict(capacity=4, batch_size=2, eps=-1), "eps"),
        (dict(capacity=4, batch_size=2, alpha="x"), "alpha must be a number"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_prioritized(**kwargs)

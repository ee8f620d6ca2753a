"""C51 projection, double-Q target and cross-entropy loss against Python-loop / NumPy
references, jitted and not; targets off, on and beyond the support."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.losses import distributional as dist

K, A, B = 11, 4, 8
V_MIN, V_MAX = -5.0, 5.0
SUPPORT = np.linspace(V_MIN, V_MAX, K, dtype=np.float32)  # atoms 1 apart, exact in float32
SETTINGS = settings(max_examples=20, deadline=None)
TOL = dict(rtol=1e-5, atol=1e-6)
JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])

project = jax.vmap(dist.categorical_projection, in_axes=(None, 0, 0, 0))
double_target = jax.vmap(dist.categorical_double_q_target, in_axes=(None, 0, 0, 0, 0))
td_loss = jax.vmap(dist.categorical_td_loss)
td_loss_grad = jax.grad(lambda logits, a, target: jnp.sum(td_loss(logits, a, target)),
                        argnums=(0, 2))
FNS = {
    "project": {False: project, True: jax.jit(project)},
    "double": {False: double_target, True: jax.jit(double_target)},
    "loss": {False: td_loss, True: jax.jit(td_loss)},
    "loss_grad": {False: td_loss_grad, True: jax.jit(td_loss_grad)},
}


def ref_projection(support, probs, r, discount):
    """Bellemare et al. 2017, algorithm 1, atom by atom in float64."""
    support = np.asarray(support, np.float64)
    v_min, v_max, k = support[0], support[-1], len(support)
    dz = (v_max - v_min) / (k - 1)
    out = np.zeros(k)
    for j in range(k):
        tz = min(max(float(r) + float(discount) * support[j], v_min), v_max)
        b = (tz - v_min) / dz
        lo, up = math.floor(b), math.ceil(b)
        if lo == up:
            out[lo] += probs[j]
        else:
            out[lo] += probs[j] * (up - b)
            out[up] += probs[j] * (b - lo)
    return out


def softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# Rewards below, above and exactly on the support's ends, on atoms, and between them.
rewards = st.one_of(
    st.sampled_from([V_MIN, V_MAX, V_MIN - 3.0, V_MAX + 7.0, 0.0, 1.0, -2.0, 2.5, 0.3]),
    st.floats(-12, 12, width=32, allow_subnormal=False))
# Terminal (0), n-step powers gamma^n, and 1 (atoms land on atoms when r is an integer).
discounts = st.sampled_from([0.0, 0.99, 0.99**3, 0.9**5, 0.5, 1.0])


def batch_inputs(data, size=B):
    probs = data.draw(st.lists(st.lists(st.floats(0, 1, width=32, allow_subnormal=False),
                                        min_size=K, max_size=K), min_size=size, max_size=size))
    probs = np.asarray(probs, np.float64) + 1e-3  # never all zero
    probs = (probs / probs.sum(-1, keepdims=True)).astype(np.float32)
    r = np.asarray(data.draw(st.lists(rewards, min_size=size, max_size=size)), np.float32)
    d = np.asarray(data.draw(st.lists(discounts, min_size=size, max_size=size)), np.float32)
    return probs, r, d


@JIT
@SETTINGS
@given(data=st.data())
def test_projection_matches_reference_and_is_a_distribution(jit, data):
    probs, r, d = batch_inputs(data)
    got = np.asarray(FNS["project"][jit](SUPPORT, probs, r, d))
    expected = np.stack([ref_projection(SUPPORT, p, ri, di)
                         for p, ri, di in zip(probs, r, d, strict=True)])
    np.testing.assert_allclose(got, expected, **TOL)
    assert np.all(got >= 0)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


@SETTINGS
@given(data=st.data(), num_atoms=st.sampled_from([2, 3, 51]),
       v_min=st.sampled_from([-10.0, -1.0, 0.0]), width=st.sampled_from([0.5, 3.0, 20.0]))
def test_projection_on_other_supports(data, num_atoms, v_min, width):
    # Supports whose spacing is not exact in float32 (51 atoms over [-10, 10]: 0.4).
    support = np.linspace(v_min, v_min + width, num_atoms, dtype=np.float32)
    probs = data.draw(st.lists(st.floats(1e-3, 1.0), min_size=num_atoms,
                               max_size=num_atoms))
    probs = np.asarray(probs, np.float32) / np.float32(sum(probs))
    r = data.draw(st.floats(v_min - width, v_min + 2 * width, width=32, allow_subnormal=False)
                  | st.sampled_from([v_min, v_min + width, float(support[num_atoms // 2])]))
    d = data.draw(discounts)
    got = np.asarray(jax.jit(dist.categorical_projection)(support, probs, np.float32(r),
                                                          np.float32(d)))
    np.testing.assert_allclose(got, ref_projection(support, probs, r, d), rtol=1e-4, atol=1e-5)
    assert np.all(got >= 0)
    np.testing.assert_allclose(got.sum(), probs.sum(dtype=np.float64), atol=1e-5)


def test_terminal_transition_puts_all_mass_next_to_the_reward():
    probs = softmax(np.arange(K, dtype=np.float64)).astype(np.float32)
    # r on an atom: all mass there; between atoms 1 and 2 (values -4, -3): split 0.75/0.25.
    got = dist.categorical_projection(SUPPORT, probs, 0.0, 0.0)
    np.testing.assert_allclose(got, np.eye(K)[K // 2], atol=1e-6)
    got = dist.categorical_projection(SUPPORT, probs, -3.75, 0.0)
    np.testing.assert_allclose(got, 0.75 * np.eye(K)[1] + 0.25 * np.eye(K)[2], atol=1e-6)
    # Beyond the ends: clipped onto the end atoms.
    np.testing.assert_allclose(dist.categorical_projection(SUPPORT, probs, 100.0, 0.0),
                               np.eye(K)[-1], atol=1e-6)
    np.testing.assert_allclose(dist.categorical_projection(SUPPORT, probs, -100.0, 0.5),
                               np.eye(K)[0], atol=1e-6)


def test_no_mass_leaks_off_the_last_atom():
    # In float32, (v_max - v_min) / spacing is 50.000004 for this support: a target on
    # v_max must still put all its mass on the last atom.
    support = np.linspace(-5.437446214385879, 50.45806786987387, 51, dtype=np.float32)
    probs = np.eye(51, dtype=np.float32)[-1]
    for r, d in [(100.0, 0.0), (0.0, 1.0), (float(support[-1]), 0.0)]:
        got = np.asarray(dist.categorical_projection(support, probs, r, d))
        np.testing.assert_array_equal(got, np.eye(51)[-1])


def test_shift_by_whole_atoms_moves_mass_and_piles_it_at_the_end():
    probs = np.full(K, 1.0 / K, np.float32)
    got = dist.categorical_projection(SUPPORT, probs, 2.0, 1.0)  # every atom up by 2
    expected = np.zeros(K)
    expected[2:-1] = 1.0 / K
    expected[-1] = 3.0 / K  # the top three atoms clip to v_max
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_q_values_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(B, A, K)).astype(np.float32)
    expected = softmax(logits) @ SUPPORT.astype(np.float64)
    np.testing.assert_allclose(jax.jit(dist.categorical_q_values)(SUPPORT, logits), expected,
                               **TOL)


@JIT
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_double_q_target_matches_numpy(jit, data, seed):
    _, r, d = batch_inputs(data)
    rng = np.random.default_rng(seed)
    online = rng.normal(scale=2.0, size=(B, A, K)).astype(np.float32)
    target = rng.normal(scale=2.0, size=(B, A, K)).astype(np.float32)
    got = FNS["double"][jit](SUPPORT, r, d, online, target)
    a_star = (softmax(online) @ SUPPORT.astype(np.float64)).argmax(-1)
    p_star = softmax(target)[np.arange(B), a_star]
    expected = np.stack([ref_projection(SUPPORT, p, ri, di)
                         for p, ri, di in zip(p_star, r, d, strict=True)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_double_q_selects_with_online_and_evaluates_with_target():
    # Action 1 has the higher mean under the online net, action 0 under the target net.
    online = np.full((2, K), -1e3, np.float32)
    online[0, 6], online[1, 8] = 0.0, 0.0  # means 1 and 3
    target = np.full((2, K), -1e3, np.float32)
    target[0, 9], target[1, 3] = 0.0, 0.0  # means 4 and -2
    got = dist.categorical_double_q_target(SUPPORT, 1.0, 0.5, online, target)
    # a* = 1; target mass at -2, shifted to 1 + 0.5 * -2 = 0: atom 5.
    np.testing.assert_allclose(got, np.eye(K)[5], atol=1e-6)
    # Plain C51: the target net selects too, a* = 0; 1 + 0.5 * 4 = 3: atom 8.
    got = dist.categorical_double_q_target(SUPPORT, 1.0, 0.5, target, target)
    np.testing.assert_allclose(got, np.eye(K)[8], atol=1e-6)


@JIT
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_td_loss_and_gradient_match_numpy(jit, data, seed):
    target_probs, _, _ = batch_inputs(data)
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(B, A, K)).astype(np.float32)
    a = rng.integers(0, A, size=B).astype(np.int32)
    log_p = np.log(softmax(logits[np.arange(B), a]))
    expected = -np.sum(target_probs * log_p, axis=-1)
    np.testing.assert_allclose(FNS["loss"][jit](logits, a, target_probs), expected, **TOL)
    # d loss / d logits[a] = softmax(logits[a]) - target (the target sums to 1); 0 elsewhere.
    g_logits, g_target = FNS["loss_grad"][jit](logits, a, target_probs)
    expected_grad = np.zeros((B, A, K))
    expected_grad[np.arange(B), a] = softmax(logits[np.arange(B), a]) - target_probs
    np.testing.assert_allclose(g_logits, expected_grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(g_target, 0.0)


@JIT
def test_td_loss_is_finite_with_minus_inf_logits(jit):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(A, K)).astype(np.float32)
    logits[0] = -np.inf  # another action masked out entirely
    logits[2, :3] = -np.inf  # atoms of the taken action, with no target mass there
    target = np.zeros(K, np.float32)
    target[4:8] = [0.1, 0.2, 0.3, 0.4]
    a = np.int32(2)
    fn = jax.jit(jax.value_and_grad(dist.categorical_td_loss)) if jit else jax.value_and_grad(
        dist.categorical_td_loss)
    loss, grad = fn(logits, a, target)
    finite_row = logits[2, 3:].astype(np.float64)
    log_p = finite_row - np.log(np.sum(np.exp(finite_row)))
    np.testing.assert_allclose(loss, -np.sum(target[3:] * log_p), rtol=1e-5)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(np.asarray(grad)[[0, 1, 3]], 0.0)
    np.testing.assert_allclose(np.asarray(grad)[2, :3], 0.0)
    np.testing.assert_allclose(np.asarray(grad)[2, 3:], np.exp(log_p) - target[3:], atol=1e-6)


def test_batch_of_projections_feeds_the_loss_end_to_end():
    # A target built and scored per transition under vmap, as a C51 update does.
    rng = np.random.default_rng(5)
    online, target, logits = (rng.normal(size=(B, A, K)).astype(np.float32) for _ in range(3))
    r = rng.normal(size=B).astype(np.float32)
    d = np.where(rng.random(B) < 0.3, 0.0, 0.99**3).astype(np.float32)
    a = rng.integers(0, A, size=B).astype(np.int32)

    @jax.jit
    def loss(logits):
        t = double_target(SUPPORT, r, d, online, target)
        return jnp.mean(td_loss(logits, a, t))

    value, grad = jax.value_and_grad(loss)(logits)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    t = np.asarray(double_target(SUPPORT, r, d, online, target))
    expected = np.mean(-np.sum(t * np.log(softmax(logits[np.arange(B), a])), -1))
    np.testing.assert_allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda: dist.categorical_projection(SUPPORT, np.ones((2, K)) / K, 0.0, 1.0),
     "probs_t must be rank 1 .*got shape \\(2, 11\\)"),
    (lambda: dist.categorical_projection(SUPPORT, np.ones(K + 1) / K, 0.0, 1.0),
     "last axis of probs_t must have the K = 11 atoms"),
    (lambda: dist.categorical_projection(SUPPORT, np.ones(K) / K, np.zeros(2), 1.0),
     "r_t must be a scalar"),
    (lambda: dist.categorical_projection(np.zeros(1), np.ones(1), 0.0, 1.0),
     "support must be \\[K\\] with K >= 2"),
    (lambda: dist.categorical_projection(np.array([0.0, 1.0, 3.0]), np.ones(3) / 3, 0.0, 1.0),
     "support must be increasing and evenly spaced"),
    (lambda: dist.categorical_double_q_target(SUPPORT, 0.0, 1.0, np.zeros((A, K)),
                                              np.zeros((A + 1, K))), "must have the same shape"),
    (lambda: dist.categorical_double_q_target(SUPPORT, 0.0, 1.0, np.zeros(K), np.zeros(K)),
     "logits_t_online must be rank 2"),
    (lambda: dist.categorical_td_loss(np.zeros((A, K)), np.float32(1.0), np.ones(K) / K),
     "a_tm1 must be an integer"),
    (lambda: dist.categorical_td_loss(np.zeros((A, K)), 0, np.ones(K - 1)),
     "last axis of logits_tm1 must have the K = 10 atoms"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()

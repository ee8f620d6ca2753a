"""Tanh-squashed Gaussian: samples, log-densities and gradients against a float64 NumPy
change of variables (near and on the bounds too), and a Monte-Carlo density check."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rljax.networks import tanh_gaussian as tg

B, A = 8, 3
SETTINGS = settings(max_examples=20, deadline=None)
JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
# Bounds with exact float32 centres and half-ranges: a symmetric, a shifted and a narrow box.
LOW = np.array([-1.0, -2.0, 0.0], np.float32)
HIGH = np.array([1.0, 3.0, 0.5], np.float32)

FNS = {
    "sample": {False: tg.sample_and_log_prob, True: jax.jit(tg.sample_and_log_prob)},
    "log_prob": {False: tg.log_prob, True: jax.jit(tg.log_prob)},
    "det": {False: tg.deterministic_action, True: jax.jit(tg.deterministic_action)},
}


def np_log_prob_of_u(mean, log_std, u, low, high):
    """sum_i log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log s_i, in float64, with
    ``-log(1 - tanh^2) = 2 log cosh`` (finite in float64 for |u| < 700)."""
    mean, log_std, u = (np.asarray(x, np.float64) for x in (mean, log_std, u))
    std = np.exp(log_std)
    half_range = (np.asarray(high, np.float64) - np.asarray(low, np.float64)) / 2
    log_normal = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    per_dim = log_normal + 2 * np.log(np.cosh(u)) - np.log(half_range)
    return np.sum(np.broadcast_to(per_dim, np.broadcast_shapes(per_dim.shape, mean.shape)), -1)


def np_inverse(action, low, high):
    """The documented inverse: clip to the box, distances to the bounds clipped below at
    ``s * 2^-24``, ``u = 0.5 (log(a - low) - log(high - a))``; float64."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    a = np.clip(np.asarray(action, np.float64), low, high)
    smallest = (high - low) / 2 * 2.0**-24
    return 0.5 * (np.log(np.maximum(a - low, smallest)) - np.log(np.maximum(high - a, smallest)))


# Pre-tanh means across and beyond the range float32 tanh resolves (|u| up to ~20+).
means = hnp.arrays(np.float32, (B, A), elements=st.floats(-20, 20, width=32,
                                                           allow_subnormal=False))
log_stds = hnp.arrays(np.float32, (B, A), elements=st.floats(-5, 1, width=32,
                                                              allow_subnormal=False))


@JIT
@SETTINGS
@given(mean=means, log_std=log_stds, seed=st.integers(0, 2**16))
def test_sample_and_log_prob_match_numpy(jit, mean, log_std, seed):
    key = jax.random.key(seed)
    action, logp = FNS["sample"][jit](key, mean, log_std, LOW, HIGH)
    eps = np.asarray(jax.random.normal(key, (B, A), jnp.float32), np.float64)
    u = mean + np.exp(log_std.astype(np.float64)) * eps
    half_range, centre = (HIGH - LOW) / 2, (HIGH + LOW) / 2
    assert np.all(np.isfinite(action)) and np.all(np.isfinite(logp))
    assert np.all(action >= LOW) and np.all(action <= HIGH)
    np.testing.assert_allclose(action, centre + half_range * np.tanh(u), rtol=0, atol=1e-6)
    # float32 u = mean + std * eps carries ~ulp(20) = 2e-6 of rounding; 2 |tanh| per unit.
    np.testing.assert_allclose(logp, np_log_prob_of_u(mean, log_std, u, LOW, HIGH), rtol=1e-5,
                               atol=1e-4)


@JIT
def test_sample_gradients_match_numpy_at_large_pre_tanh_values(jit):
    # With eps held fixed: d log_prob / d mean_i = 2 tanh(u_i) and
    # d log_prob / d log_std_i = -1 + 2 tanh(u_i) std_i eps_i (the Gaussian term in eps
    # depends on neither). Saturated tanh (|u| = 20) must not give NaN or inf.
    mean = np.array([[20.0, -20.0, 0.5], [-15.0, 9.0, -0.3]], np.float32)
    log_std = np.array([[-3.0, -3.0, 0.0], [-4.0, -2.0, 0.5]], np.float32)
    key = jax.random.key(7)

    def total(mean, log_std):
        return jnp.sum(tg.sample_and_log_prob(key, mean, log_std, LOW, HIGH)[1])

    grad = jax.grad(total, argnums=(0, 1))
    g_mean, g_log_std = (jax.jit(grad) if jit else grad)(mean, log_std)
    eps = np.asarray(jax.random.normal(key, mean.shape, jnp.float32), np.float64)
    std = np.exp(log_std.astype(np.float64))
    u = mean + std * eps
    np.testing.assert_allclose(g_mean, 2 * np.tanh(u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_log_std, -1 + 2 * np.tanh(u) * std * eps, rtol=1e-5,
                               atol=1e-5)


def _near_bound_actions():
    """Actions on, within 1e-7 of, and beyond the bounds, and interior ones, ``[N, A]``."""
    rows = [LOW, HIGH, LOW + 1e-7, HIGH - 1e-7, LOW + 1e-6, HIGH - 1e-6, LOW - 1.0, HIGH + 1.0,
            (LOW + HIGH) / 2]
    rng = np.random.default_rng(0)
    rows += list(rng.uniform(LOW, HIGH, size=(7, A)))
    # Mixed rows: one coordinate on a bound, others inside.
    rows += [np.where(np.arange(A) == i, HIGH - 1e-7, (LOW + HIGH) / 2) for i in range(A)]
    return np.asarray(rows, np.float32)


_log_prob_grads = jax.jit(jax.grad(lambda m, s, a: jnp.sum(tg.log_prob(m, s, a, LOW, HIGH)),
                                   argnums=(0, 1)))


@JIT
@pytest.mark.parametrize("log_std_value", [-5.0, -1.0, 0.5])
def test_log_prob_matches_numpy_near_and_on_the_bounds(jit, log_std_value):
    action = _near_bound_actions()
    n = action.shape[0]
    rng = np.random.default_rng(1)
    mean = rng.uniform(-3, 3, size=(n, A)).astype(np.float32)
    log_std = np.full((n, A), log_std_value, np.float32)
    got = FNS["log_prob"][jit](mean, log_std, action, LOW, HIGH)
    expected = np_log_prob_of_u(mean, log_std, np_inverse(action, LOW, HIGH), LOW, HIGH)
    assert np.all(np.isfinite(got))
    # Relative: with std = e^-5 the Gaussian term reaches ~1e6 (float32 keeps ~7 digits).
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-4)
    grads = _log_prob_grads(mean, log_std, action)
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_log_prob_of_a_bound_reads_the_documented_clip():
    # On a bound of a [-1, 1] box: |u| = 0.5 log(2 / 2^-24) = 12.5 log 2.
    u_max = 12.5 * math.log(2.0)
    mean = np.zeros((2, 1), np.float32)
    log_std = np.zeros((2, 1), np.float32)
    action = np.array([[1.0], [-1.0]], np.float32)
    got = tg.log_prob(mean, log_std, action, -1.0, 1.0)
    expected = np_log_prob_of_u(mean, log_std, np.array([[u_max], [-u_max]]), -1.0, 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # The float32 actions nearest the bound, 1 - 2^-24 and 1 - 2^-23, are not clipped:
    # they read as the exact atanh.
    inside = np.array([[1.0 - 2.0**-24], [1.0 - 2.0**-23]], np.float32)
    np.testing.assert_allclose(
        tg.log_prob(mean, log_std, inside, -1.0, 1.0),
        np_log_prob_of_u(mean, log_std, np.arctanh(inside.astype(np.float64)), -1.0, 1.0),
        rtol=1e-6)


@JIT
def test_log_prob_agrees_with_sampled_log_prob(jit):
    # Away from saturation the inverse recovers u from the float32 action, so both
    # densities agree; |u| <= 3 keeps 1 - |tanh u| >= 5e-3 (action rounding ~6e-8).
    rng = np.random.default_rng(2)
    mean = rng.uniform(-1.5, 1.5, size=(256, A)).astype(np.float32)
    log_std = rng.uniform(-2, -0.5, size=(256, A)).astype(np.float32)
    key = jax.random.key(11)
    action, logp = tg.sample_and_log_prob(key, mean, log_std, LOW, HIGH)
    eps = np.asarray(jax.random.normal(key, mean.shape, jnp.float32))
    keep = np.all(np.abs(mean + np.exp(log_std) * eps) <= 3.0, axis=-1)
    assert keep.sum() > 200
    again = FNS["log_prob"][jit](mean, log_std, action, LOW, HIGH)
    np.testing.assert_allclose(np.asarray(again)[keep], np.asarray(logp)[keep], rtol=1e-4,
                               atol=1e-3)


@JIT
def test_deterministic_action_matches_numpy(jit):
    mean = np.array([[0.0, 0.7, -1.3], [20.0, -20.0, 9.5]], np.float32)
    got = FNS["det"][jit](mean, LOW, HIGH)
    expected = (HIGH + LOW) / 2 + (HIGH - LOW) / 2 * np.tanh(mean.astype(np.float64))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[1, :2], [HIGH[0], LOW[1]])


def test_state_independent_log_std_and_scalar_bounds_broadcast():
    rng = np.random.default_rng(4)
    mean = rng.normal(size=(B, A)).astype(np.float32)
    log_std = np.array([-1.0, 0.0, 0.3], np.float32)
    key = jax.random.key(5)
    a1, lp1 = tg.sample_and_log_prob(key, mean, log_std, -2.0, 2.0)
    a2, lp2 = tg.sample_and_log_prob(key, mean, np.broadcast_to(log_std, (B, A)),
                                     np.full(A, -2.0, np.float32), np.full(A, 2.0, np.float32))
    np.testing.assert_allclose(a1, a2, rtol=0, atol=1e-6)  # exp may differ by an ulp
    np.testing.assert_allclose(lp1, lp2, rtol=1e-6)
    np.testing.assert_allclose(tg.log_prob(mean, log_std, a1, -2.0, 2.0), lp1, rtol=1e-4,
                               atol=1e-3)
    assert a1.shape == (B, A) and lp1.shape == (B,)


def test_monte_carlo_histogram_matches_the_density():
    """Histogram of 400k samples of a 1-D policy on [-2, 3] against the bin integrals of
    exp(log_prob) (midpoint rule, 200 nodes a bin). Fixed seed; tolerance per bin:
    5 binomial standard errors sqrt(p / N) plus 2e-4 for the quadrature."""
    n, bins, nodes = 400_000, 50, 200
    low, high = np.float32(-2.0), np.float32(3.0)
    mean, log_std = np.float32(0.8), np.float32(math.log(0.9))
    action, _ = jax.jit(tg.sample_and_log_prob)(
        jax.random.key(0), jnp.full((n, 1), mean), jnp.full((n, 1), log_std), low, high)
    edges = np.linspace(low, high, bins + 1)
    freq = np.histogram(np.asarray(action)[:, 0], bins=edges)[0] / n
    width = (high - low) / (bins * nodes)
    grid = (low + width * (np.arange(bins * nodes) + 0.5)).astype(np.float32)[:, None]
    density = np.exp(np.asarray(jax.jit(tg.log_prob)(
        jnp.full_like(grid, mean), jnp.full_like(grid, log_std), grid, low, high),
        np.float64))
    prob = density.reshape(bins, nodes).sum(axis=1) * width
    assert abs(prob.sum() - 1.0) < 1e-3
    # The policy puts real mass near the upper bound, where the Jacobian term matters.
    assert freq[-5:].sum() > 0.05
    np.testing.assert_array_less(np.abs(freq - prob), 5 * np.sqrt(prob / n) + 2e-4)


@pytest.mark.parametrize("call, match", [
    (lambda: tg.sample_and_log_prob(jax.random.key(0), np.zeros(()), 0.0, -1, 1),
     "mean must be a floating-point \\[..., A\\]"),
    (lambda: tg.sample_and_log_prob(jax.random.key(0), np.zeros((B, A)), np.zeros((B, 1)),
                                    -1, 1), "log_std must have the shape of mean"),
    (lambda: tg.log_prob(np.zeros((B, A)), np.zeros(A), np.zeros((B, A + 1)), -1, 1),
     "action must have the shape of mean"),
    (lambda: tg.deterministic_action(np.zeros((B, A)), np.zeros(A + 1), 1.0),
     "low must be a scalar or \\[A\\]"),
    (lambda: tg.deterministic_action(np.zeros((B, A)), 1.0, 1.0), "low must be < high"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()

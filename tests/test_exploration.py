"""Epsilon-greedy frequencies, piecewise-linear schedules, OU and Gaussian noise statistics.

Statistical tests use fixed seeds (so they are deterministic) and tolerances of about
5 standard errors, so that a correct implementation passes for almost any seed and a
wrong formula (off by a factor, a missing sqrt(dt), a wrong decay) fails.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax import exploration as ex

N = 20_000  # samples / chains per statistical test

# --- epsilon-greedy -------------------------------------------------------------------

A = 4
Q = np.tile(np.array([0.1, 2.0, -1.0, 0.5], np.float32), (N, 1))  # greedy action 1
GREEDY = 1
# Chi-square critical value at p = 0.001 with A - 1 = 3 degrees of freedom.
CHI2_3DOF_P001 = 16.27
eps_greedy = jax.jit(ex.epsilon_greedy)


def chi_square(actions, probs):
    counts = np.bincount(np.asarray(actions), minlength=len(probs))
    expected = len(actions) * np.asarray(probs)
    return float(np.sum((counts - expected) ** 2 / expected))


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0])
def test_epsilon_greedy_frequencies(epsilon):
    actions = eps_greedy(jax.random.key(0), Q, epsilon)
    assert actions.shape == (N,) and actions.dtype == jnp.int32
    p_greedy = 1 - epsilon + epsilon / A
    # Binomial bound on the greedy count: 5 standard deviations.
    greedy = int(np.sum(np.asarray(actions) == GREEDY))
    assert abs(greedy - N * p_greedy) <= 5 * np.sqrt(N * p_greedy * (1 - p_greedy))
    probs = np.full(A, epsilon / A)
    probs[GREEDY] = p_greedy
    assert chi_square(actions, probs) < CHI2_3DOF_P001


def test_epsilon_greedy_edge_cases_and_per_row_epsilon():
    # Shapes kept at [N, A]: random-number kernels take about a second to compile.
    np.testing.assert_array_equal(eps_greedy(jax.random.key(1), Q, 0.0), GREEDY)
    ties = np.zeros((N, A), np.float32)
    np.testing.assert_array_equal(eps_greedy(jax.random.key(1), ties, 0.0), 0)
    eps = np.where(np.arange(N) % 2 == 0, 0.0, 1.0).astype(np.float32)
    actions = np.asarray(eps_greedy(jax.random.key(2), Q, eps))
    np.testing.assert_array_equal(actions[::2], GREEDY)  # epsilon 0 rows never explore
    assert chi_square(actions[1::2], np.full(A, 1 / A)) < CHI2_3DOF_P001  # epsilon 1: uniform
    # Same key, same actions; different keys, different ones.
    a, b = eps_greedy(jax.random.key(3), Q, 0.5), eps_greedy(jax.random.key(3), Q, 0.5)
    np.testing.assert_array_equal(a, b)
    assert np.any(a != eps_greedy(jax.random.key(4), Q, 0.5))


@pytest.mark.parametrize("epsilon", [-0.1, 1.5, np.array([0.5, 2.0]), True])
def test_epsilon_greedy_rejects_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon must be in \\[0, 1\\]"):
        ex.epsilon_greedy(jax.random.key(0), Q[:2], epsilon)


# --- schedules ------------------------------------------------------------------------

T = 2_000_000  # updates in a training run
EPSILON = ex.piecewise_linear([(0, 1.0), (25_000, 0.1), (T // 2, 0.01)])
BETA = ex.piecewise_linear([(0, 0.4), (T, 1.0)])
jit_epsilon = jax.jit(EPSILON)


def f32(x):
    return float(np.float32(x))


@pytest.mark.parametrize("schedule", [EPSILON, jit_epsilon], ids=["eager", "jit"])
def test_dqn_epsilon_schedule(schedule):
    value = lambda step: float(schedule(jnp.int32(step)))
    assert value(0) == 1.0
    assert value(25_000) == f32(0.1)
    assert value(T // 2) == f32(0.01)
    assert value(T // 2 + 1) == f32(0.01) and value(T) == f32(0.01)
    np.testing.assert_allclose(value(12_500), 0.55, rtol=1e-6)
    np.testing.assert_allclose(value(25_000 + (T // 2 - 25_000) // 2), 0.055, rtol=1e-5)
    steps = np.array([0, 25_000, 3 * T], np.int32)
    np.testing.assert_array_equal(schedule(steps), np.float32([1.0, 0.1, 0.01]))


def test_beta_schedule_is_exact_at_its_ends():
    # optax.linear_schedule(0.4, 1.0, T)(0) is 0.39999998: the reason for own segments.
    assert float(BETA(0)) == f32(0.4)
    assert float(BETA(T)) == 1.0 and float(BETA(10 * T)) == 1.0
    np.testing.assert_allclose(float(BETA(T // 2)), 0.7, rtol=1e-6)


def test_schedule_before_first_point_and_single_point():
    late = ex.piecewise_linear([(100, 3.0), (200, 1.0)])
    assert float(late(0)) == 3.0 and float(late(150)) == 2.0 and float(late(500)) == 1.0
    constant = ex.piecewise_linear([(0, 0.25)])
    assert float(constant(0)) == 0.25 and float(constant(10**9)) == 0.25


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6),
                          # XLA:CPU flushes subnormal float32 to zero.
                          st.floats(-10, 10, width=32, allow_subnormal=False)), min_size=1,
                max_size=5, unique_by=lambda p: p[0]),
       st.lists(st.integers(0, 2 * 10**6), min_size=11, max_size=11))
def test_schedule_matches_numpy_interp(points, probe):
    points = sorted(points)
    schedule = ex.piecewise_linear(points)
    xs, ys = [p[0] for p in points], np.array([p[1] for p in points])
    # One [16] batch of steps: the breakpoints (padded with the last) and the probes.
    steps = np.array(xs + xs[-1:] * (5 - len(xs)) + probe, np.int32)
    got = np.asarray(schedule(steps))
    np.testing.assert_array_equal(got[:len(xs)], ys.astype(np.float32))  # exact
    np.testing.assert_allclose(got, np.interp(steps, xs, ys), rtol=1e-5, atol=1e-5)


def test_scaled_learning_rate_matches_numpy():
    assert ex.scaled_learning_rate(3e-4, None) == 3e-4
    points = [(0, 1.0), (10, 1.0), (30, 0.1)]
    lr = ex.scaled_learning_rate(3e-4, points, steps_per_update=4)
    count = np.arange(0, 200, 3, dtype=np.int32)
    expected = 3e-4 * np.interp(count // 4, [p[0] for p in points], [p[1] for p in points])
    np.testing.assert_allclose(np.asarray(jax.jit(lr)(count)), expected, rtol=1e-6)
    # A schedule as the rate (an annealed one): the product, count by count.
    annealed = ex.scaled_learning_rate(lambda c: 3e-4 * (1 - c / 400), points, 4)
    np.testing.assert_allclose(np.asarray(jax.jit(annealed)(count)),
                               expected * (1 - count / 400), rtol=1e-5)


@pytest.mark.parametrize("points, match", [
    ([], "non-empty"),
    (None, "non-empty"),
    ([(0, 1.0), (10, 0.5), (5, 0.1)], "strictly increasing, got \\[0, 10, 5\\]"),
    ([(0, 1.0), (0, 0.5)], "strictly increasing"),
    ([(-1, 1.0)], "integer >= 0, got -1"),
    ([(1.5, 1.0)], "integer >= 0, got 1.5"),
    ([(0, float("nan"))], "finite number, got nan"),
    ([(0, 1.0, 2.0)], "\\(step, value\\) pairs"),
])
def test_schedule_rejects_bad_points(points, match):
    with pytest.raises(ValueError, match=match):
        ex.piecewise_linear(points)


# --- Ornstein-Uhlenbeck ---------------------------------------------------------------

STEPS = 1_500


@functools.partial(jax.jit, static_argnames="steps")
def ou_moments(key, x0, theta, sigma, mu, dt, steps=STEPS):
    """Mean and variance over N chains after each of ``steps`` steps from ``x0``."""

    def step(state, key):
        _, state = ex.ou_step(state, key, theta, sigma, mu, dt)
        return state, (jnp.mean(state), jnp.var(state))

    _, (mean, var) = jax.lax.scan(step, jnp.full((N,), x0), jax.random.split(key, steps))
    return mean, var


@pytest.mark.optimized
@pytest.mark.parametrize("theta, sigma, mu, dt, x0", [
    (0.01, 0.2, 0.0, 1.0, 3.0),  # the DDPG reference
    (0.1, 0.3, 0.5, 0.5, -2.0),  # non-zero mean, dt != 1
])
def test_ou_mean_reversion_and_stationary_variance(theta, sigma, mu, dt, x0):
    mean, var = map(np.asarray, ou_moments(jax.random.key(5), x0, theta, sigma, mu, dt))
    a = 1 - theta * dt
    k = np.arange(1, STEPS + 1)
    # Exact for the discrete update x' = x + theta (mu - x) dt + sigma sqrt(dt) N(0, 1):
    expected_mean = mu + a**k * (x0 - mu)
    expected_var = sigma**2 * dt * (1 - a ** (2 * k)) / (1 - a**2)
    for i in (9, 99, 299, STEPS - 1):
        # The mean of N samples has standard error sqrt(var / N); the sample variance has
        # relative standard error sqrt(2 / N) = 1% (Gaussian chains).
        assert abs(mean[i] - expected_mean[i]) < 5 * np.sqrt(expected_var[i] / N), i
        np.testing.assert_allclose(var[i], expected_var[i], rtol=5 * np.sqrt(2 / N))
    stationary = sigma**2 * dt / (1 - a**2)
    assert a ** (2 * STEPS) < 1e-3  # the last step is stationary to 0.1%
    np.testing.assert_allclose(var[-1], stationary, rtol=5 * np.sqrt(2 / N))
    if dt == 1.0:
        np.testing.assert_allclose(stationary, sigma**2 / (1 - (1 - theta) ** 2))


def test_ou_step_on_pytrees_is_reproducible_and_resettable():
    state = {"a": ex.ou_init((3, 2)), "b": ex.ou_init((3, 2), mu=1.0)}
    np.testing.assert_array_equal(state["b"], 1.0)
    noise, new = ex.ou_step(state, jax.random.key(0), 0.15, 0.2, mu=1.0)
    assert noise is new
    again, _ = ex.ou_step(state, jax.random.key(0), 0.15, 0.2, mu=1.0)
    jax.tree.map(np.testing.assert_array_equal, noise, again)
    # Each leaf gets its own key: equal-shaped leaves move differently.
    assert not np.allclose(new["a"] - state["a"], new["b"] - state["b"])
    reset = ex.ou_reset(new, np.array([True, False, True]), mu=1.0)
    for leaf, old in zip(jax.tree.leaves(reset), jax.tree.leaves(new), strict=True):
        leaf = np.asarray(leaf)
        np.testing.assert_array_equal(leaf[[0, 2]], 1.0)
        np.testing.assert_array_equal(leaf[1], old[1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma=-0.1), "sigma must be a number >= 0, got -0.1"),
    (dict(theta=-0.01), "theta must be a number >= 0"),
    (dict(dt=0.0), "dt must be a number > 0"),
    (dict(theta=0.5, dt=3.0), "theta \\* dt must be <= 1"),
])
def test_ou_step_rejects_bad_arguments(kwargs, match):
    args = dict(theta=0.01, sigma=0.2) | kwargs
    with pytest.raises(ValueError, match=match):
        ex.ou_step(jnp.zeros(2), jax.random.key(0), **args)


def test_ou_reset_checks_shapes():
    with pytest.raises(ValueError, match="started must be \\[B\\] bool"):
        ex.ou_reset(jnp.zeros((3, 2)), np.zeros((3, 1), bool))
    with pytest.raises(ValueError, match="B = 4"):
        ex.ou_reset(jnp.zeros((3, 2)), np.zeros(4, bool))


def test_gaussian_noise():
    noise = np.asarray(ex.gaussian_noise(jax.random.key(0), (N,), 0.3))
    # Std of N Gaussian samples: relative standard error sqrt(1 / (2N)) = 0.5%.
    np.testing.assert_allclose(noise.std(), 0.3, rtol=5 * np.sqrt(1 / (2 * N)))
    assert abs(noise.mean()) < 5 * 0.3 / np.sqrt(N)
    with pytest.raises(ValueError, match="sigma must be a number >= 0"):
        ex.gaussian_noise(jax.random.key(0), (2,), -1.0)

"""Diagonal Gaussian: log-density and entropy against closed forms, sampling by Monte Carlo."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.networks.gaussian import gaussian_entropy, gaussian_log_prob, gaussian_sample


def ref_log_prob(mean, log_std, action):
    std = np.exp(log_std)
    dens = np.exp(-0.5 * ((action - mean) / std) ** 2) / (std * np.sqrt(2 * np.pi))
    return np.sum(np.log(dens), axis=-1)


def ref_entropy(log_std):
    # Differential entropy of N(mu, sigma^2) is 0.5 log(2 pi e sigma^2), per dimension.
    return np.sum(0.5 * np.log(2 * np.pi * np.e * np.exp(2 * log_std)), axis=-1)


_log_prob_jit = jax.jit(gaussian_log_prob)


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_log_prob_matches_closed_form(jit, seed):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(5, 3)).astype(np.float32)
    log_std = rng.uniform(-1.5, 1.0, size=3).astype(np.float32)
    action = (mean + rng.normal(scale=2.0, size=mean.shape)).astype(np.float32)
    got = (_log_prob_jit if jit else gaussian_log_prob)(mean, log_std, action)
    assert got.shape == (5,)
    want = ref_log_prob(*(x.astype(np.float64) for x in (mean, log_std, action)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_log_prob_with_state_dependent_log_std():
    rng = np.random.default_rng(1)
    mean, log_std, action = (rng.normal(size=(2, 4, 3)) for _ in range(3))
    np.testing.assert_allclose(gaussian_log_prob(mean, log_std, action),
                               ref_log_prob(mean, log_std, action), rtol=1e-5, atol=1e-5)


def test_log_prob_gradients():
    # d/dmu = (a - mu) / sigma^2; d/dlog_std = z^2 - 1 per dimension, summed over the batch.
    mean = jnp.array([[0.5, -1.0], [0.0, 2.0]])
    log_std = jnp.array([0.3, -0.2])
    action = jnp.array([[1.0, 0.0], [-1.0, 2.5]])
    d_mean, d_log_std = jax.grad(lambda m, s: jnp.sum(gaussian_log_prob(m, s, action)),
                                 argnums=(0, 1))(mean, log_std)
    var = np.exp(2 * np.asarray(log_std))
    np.testing.assert_allclose(d_mean, (action - mean) / var, rtol=1e-5)
    z2 = np.square(np.asarray(action - mean)) / var
    np.testing.assert_allclose(d_log_std, np.sum(z2 - 1, axis=0), rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_entropy_matches_closed_form_and_broadcasts(jit):
    log_std = np.array([-1.0, 0.0, 0.7], np.float32)
    fn = jax.jit(gaussian_entropy, static_argnums=1) if jit else gaussian_entropy
    np.testing.assert_allclose(fn(log_std), ref_entropy(log_std.astype(np.float64)), rtol=1e-6)
    batched = fn(log_std, (4, 2))
    assert batched.shape == (4, 2)
    np.testing.assert_allclose(batched, np.full((4, 2), ref_entropy(log_std)), rtol=1e-6)
    per_state = np.stack([log_std, log_std - 1.0])
    np.testing.assert_allclose(fn(per_state, (2,)), ref_entropy(per_state), rtol=1e-6)


def test_entropy_is_minus_expected_log_prob():
    # H = -E[log p(a)]: ties the entropy to the log-density through samples.
    mean = jnp.zeros((100_000, 2))
    log_std = jnp.array([0.4, -0.8])
    a = gaussian_sample(jax.random.key(3), mean, log_std)
    est = -jnp.mean(gaussian_log_prob(mean, log_std, a))
    # -log p has std sqrt(A / 2) = 1 here, so the standard error is 3.2e-3; allow 5 of them.
    np.testing.assert_allclose(est, gaussian_entropy(log_std), atol=1.6e-2)


@pytest.mark.parametrize("jit", [False, True])
def test_samples_have_the_right_mean_and_std(jit):
    n = 200_000
    mean = jnp.broadcast_to(jnp.array([1.0, -2.0, 0.0]), (n, 3))
    log_std = jnp.log(jnp.array([0.5, 2.0, 1.0]))
    fn = jax.jit(gaussian_sample) if jit else gaussian_sample
    a = np.asarray(fn(jax.random.key(0), mean, log_std), np.float64)
    assert a.shape == (n, 3)
    std = np.array([0.5, 2.0, 1.0])
    # Standard errors: std / sqrt(n) for the mean, about std / sqrt(2 n) for the std;
    # both within 5 standard errors (at most 2.3e-2 and 1.6e-2 here).
    np.testing.assert_array_less(np.abs(a.mean(axis=0) - [1.0, -2.0, 0.0]), 5 * std / math.sqrt(n))
    np.testing.assert_array_less(np.abs(a.std(axis=0) - std), 5 * std / math.sqrt(2 * n))
    # Dimensions are independent.
    corr = np.corrcoef(a.T)[np.triu_indices(3, 1)]
    np.testing.assert_array_less(np.abs(corr), 5 / math.sqrt(n))


def test_sampling_is_deterministic_per_key_and_reparameterized():
    mean, log_std = jnp.zeros((4, 2)), jnp.array([0.0, 1.0])
    a1 = gaussian_sample(jax.random.key(1), mean, log_std)
    np.testing.assert_array_equal(a1, gaussian_sample(jax.random.key(1), mean, log_std))
    assert not np.allclose(a1, gaussian_sample(jax.random.key(2), mean, log_std))
    d_mean = jax.grad(lambda m: jnp.sum(gaussian_sample(jax.random.key(1), m, log_std)))(mean)
    np.testing.assert_allclose(d_mean, 1.0)


@pytest.mark.parametrize("fn, args, match", [
    (gaussian_log_prob, (jnp.zeros((2, 3)), jnp.zeros(2), jnp.zeros((2, 3))), "log_std must"),
    (gaussian_log_prob, (jnp.zeros((2, 3)), jnp.zeros(3), jnp.zeros((2, 2))), "action must"),
    (gaussian_sample, (jax.random.key(0), jnp.zeros(()), jnp.zeros(())), "action axis"),
    (gaussian_entropy, (jnp.zeros(()),), "log_std must"),
    (gaussian_entropy, (jnp.zeros((3, 2)), (4,)), "does not broadcast"),
])
def test_bad_shapes_are_refused(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)

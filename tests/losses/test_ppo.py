"""PPO's clipped surrogate and value losses against NumPy, both clip sides, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.losses.ppo import approx_kl, clip_fraction, clipped_surrogate_loss, clipped_value_loss

EPS = 0.2


def ref_surrogate(lp, old, adv, eps):
    r = np.exp(lp - old)
    return -np.minimum(r * adv, np.clip(r, 1 - eps, 1 + eps) * adv)


def ref_surrogate_grad(lp, old, adv, eps):
    """d loss / d log_prob: ``-A r`` where the unclipped term counts, else 0."""
    r = np.exp(lp - old)
    inside = (r >= 1 - eps) & (r <= 1 + eps)
    unclipped_smaller = r * adv < np.clip(r, 1 - eps, 1 + eps) * adv
    return np.where(inside | unclipped_smaller, -adv * r, 0.0)


def ref_value(v, old, g, eps):
    if eps is None:
        return (v - g) ** 2
    vc = old + np.clip(v - old, -eps, eps)
    return np.maximum((v - g) ** 2, (vc - g) ** 2)


def ref_value_grad(v, old, g, eps):
    if eps is None:
        return 2 * (v - g)
    vc = old + np.clip(v - old, -eps, eps)
    inside = np.abs(v - old) <= eps
    return np.where(inside | ((v - g) ** 2 > (vc - g) ** 2), 2 * (v - g), 0.0)


_surrogate_jit = jax.jit(clipped_surrogate_loss, static_argnames="clip_eps")
_value_jit = jax.jit(clipped_value_loss, static_argnames="clip_eps")


def surrogate_grad(lp, old, adv, eps):
    return jax.grad(lambda x: jnp.sum(clipped_surrogate_loss(x, old, adv, eps)))(lp)


def value_grad(v, old, g, eps):
    return jax.grad(lambda x: jnp.sum(clipped_value_loss(x, old, g, eps)))(v)


# (ratio, advantage, expected loss, expected d loss / d log_prob) at eps = 0.2.
SURROGATE_CASES = {
    "adv+ ratio above 1+eps: clipped": (1.5, 2.0, -1.2 * 2.0, 0.0),
    "adv+ ratio below 1-eps: unclipped": (0.6, 2.0, -0.6 * 2.0, -2.0 * 0.6),
    "adv- ratio above 1+eps: unclipped": (1.5, -3.0, 1.5 * 3.0, 3.0 * 1.5),
    "adv- ratio below 1-eps: clipped": (0.6, -3.0, 0.8 * 3.0, 0.0),
    "adv+ ratio inside": (1.1, 2.0, -1.1 * 2.0, -2.0 * 1.1),
    "adv- ratio inside": (0.9, -3.0, 0.9 * 3.0, 3.0 * 0.9),
}


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("case", list(SURROGATE_CASES))
def test_surrogate_each_clip_side(case, jit):
    ratio, adv, want_loss, want_grad = SURROGATE_CASES[case]
    old = jnp.array([-1.3], jnp.float32)
    lp = old + jnp.log(jnp.float32(ratio))
    adv = jnp.array([adv], jnp.float32)
    fn = _surrogate_jit if jit else clipped_surrogate_loss
    np.testing.assert_allclose(fn(lp, old, adv, clip_eps=EPS), [want_loss], rtol=1e-5)
    grad = (jax.jit(surrogate_grad, static_argnums=3) if jit else surrogate_grad)(lp, old, adv,
                                                                                EPS)
    np.testing.assert_allclose(grad, [want_grad], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.sampled_from([0.1, 0.2, 0.3]))
def test_surrogate_matches_numpy(jit, seed, eps):
    rng = np.random.default_rng(seed)
    old = rng.normal(size=(4, 6)).astype(np.float32)
    lp = (old + rng.normal(scale=0.4, size=old.shape)).astype(np.float32)
    adv = rng.normal(size=old.shape).astype(np.float32)
    fn = _surrogate_jit if jit else clipped_surrogate_loss
    lp64, old64, adv64 = (x.astype(np.float64) for x in (lp, old, adv))
    np.testing.assert_allclose(fn(lp, old, adv, clip_eps=eps),
                               ref_surrogate(lp64, old64, adv64, eps), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(surrogate_grad(jnp.asarray(lp), old, adv, eps),
                               ref_surrogate_grad(lp64, old64, adv64, eps), rtol=1e-5, atol=1e-6)
    r = np.exp(lp64 - old64)
    frac = np.mean(np.abs(r - 1) > eps)
    np.testing.assert_allclose(jnp.mean(clip_fraction(lp, old, eps)), frac, rtol=1e-6)


def test_surrogate_holds_old_log_prob_and_advantage_constant():
    lp, old, adv = jnp.array([0.1, -0.4]), jnp.array([0.0, 0.0]), jnp.array([1.0, -2.0])
    f = lambda *xs: jnp.sum(clipped_surrogate_loss(*xs, 0.2))
    _, d_old, d_adv = jax.grad(f, argnums=(0, 1, 2))(lp, old, adv)
    np.testing.assert_array_equal(d_old, 0.0)
    np.testing.assert_array_equal(d_adv, 0.0)


def test_ratio_one_gives_the_policy_gradient():
    # At the rollout's own policy the surrogate is -A with gradient -A (Schulman 2017, eq. 6).
    lp = jnp.array([-0.5, -2.0, -1.0])
    adv = jnp.array([1.5, -0.5, 0.0])
    np.testing.assert_allclose(clipped_surrogate_loss(lp, lp, adv, 0.2), -adv)
    np.testing.assert_allclose(surrogate_grad(lp, lp, adv, 0.2), -adv)


def test_clip_fraction_counts_both_sides():
    old = jnp.zeros(5)
    lp = jnp.log(jnp.array([1.5, 0.6, 1.1, 0.9, 1.0]))
    np.testing.assert_array_equal(clip_fraction(lp, old, 0.2), [1.0, 1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("jit", [False, True])
def test_approx_kl_matches_numpy_and_is_nonnegative(jit):
    rng = np.random.default_rng(3)
    old = rng.normal(size=50).astype(np.float32)
    lp = (old + rng.normal(scale=0.5, size=50)).astype(np.float32)
    fn = jax.jit(approx_kl) if jit else approx_kl
    got = fn(lp, old)
    x = lp.astype(np.float64) - old
    np.testing.assert_allclose(got, (np.exp(x) - 1) - x, rtol=1e-4, atol=1e-7)
    assert np.all(np.asarray(got) >= 0)


def test_approx_kl_is_accurate_for_tiny_log_ratios():
    x = 1e-3
    got = approx_kl(jnp.array([x], jnp.float32), jnp.zeros(1))
    np.testing.assert_allclose(got, [x**2 / 2 + x**3 / 6], rtol=1e-3)


def test_approx_kl_estimates_the_kl_divergence():
    # Actions drawn from the old categorical: the mean estimate approaches KL(old || new).
    p_old = np.array([0.5, 0.3, 0.2])
    p_new = np.array([0.4, 0.4, 0.2])
    a = jax.random.choice(jax.random.key(0), 3, (200_000,), p=jnp.asarray(p_old))
    est = jnp.mean(approx_kl(jnp.log(jnp.asarray(p_new))[a], jnp.log(jnp.asarray(p_old))[a]))
    kl = np.sum(p_old * np.log(p_old / p_new))
    # Estimator std / sqrt(n) is about 1e-4 here; 5e-4 is 5 standard errors.
    np.testing.assert_allclose(est, kl, atol=5e-4)


# (v, old_v, target, expected loss, expected d loss / d v) at eps = 0.5.
VALUE_CASES = {
    "above range, clipped term larger: zero gradient": (2.0, 0.0, 3.0, 2.5**2, 0.0),
    "above range, unclipped larger": (2.0, 0.0, 0.0, 4.0, 4.0),
    "below range, clipped term larger: zero gradient": (-2.0, 0.0, -3.0, 2.5**2, 0.0),
    "below range, unclipped larger": (-2.0, 0.0, 1.0, 9.0, -6.0),
    "inside range": (0.3, 0.0, 1.0, 0.49, -1.4),
}


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("case", list(VALUE_CASES))
def test_value_clipping_each_side(case, jit):
    v, old, g, want_loss, want_grad = (jnp.array([x], jnp.float32) for x in VALUE_CASES[case])
    fn = _value_jit if jit else clipped_value_loss
    np.testing.assert_allclose(fn(v, old, g, clip_eps=0.5), want_loss, rtol=1e-5)
    np.testing.assert_allclose(value_grad(v, old, g, 0.5), want_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.sampled_from([None, 0.1, 1.0]))
def test_value_loss_matches_numpy(jit, seed, eps):
    rng = np.random.default_rng(seed)
    v, old, g = (rng.normal(size=(3, 5)).astype(np.float32) for _ in range(3))
    fn = _value_jit if jit else clipped_value_loss
    v64, old64, g64 = (x.astype(np.float64) for x in (v, old, g))
    np.testing.assert_allclose(fn(v, old, g, clip_eps=eps), ref_value(v64, old64, g64, eps),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_grad(jnp.asarray(v), old, g, eps),
                               ref_value_grad(v64, old64, g64, eps), rtol=1e-5, atol=1e-6)


def test_value_loss_without_clipping_ignores_old_values():
    v, g = jnp.array([1.0, -2.0]), jnp.array([0.5, 0.0])
    np.testing.assert_allclose(clipped_value_loss(v, jnp.full(2, 100.0), g, None), [0.25, 4.0])
    f = lambda *xs: jnp.sum(clipped_value_loss(*xs, 0.1))
    _, d_old, d_target = jax.grad(f, argnums=(0, 1, 2))(v, jnp.zeros(2), g)
    np.testing.assert_array_equal(d_old, 0.0)
    np.testing.assert_array_equal(d_target, 0.0)


@pytest.mark.parametrize("fn, args", [
    (clipped_surrogate_loss, (jnp.zeros(4), jnp.zeros((4, 1)), jnp.zeros(4), 0.2)),
    (clipped_value_loss, (jnp.zeros(4), jnp.zeros(4), jnp.zeros(3), 0.2)),
    (clip_fraction, (jnp.zeros((2, 3)), jnp.zeros(3), 0.2)),
    (approx_kl, (jnp.zeros(2), jnp.zeros(3))),
])
def test_shape_mismatch_is_refused(fn, args):
    with pytest.raises(ValueError, match="must have the same shape"):
        fn(*args)


@pytest.mark.parametrize("eps", [0.0, -0.1])
def test_nonpositive_clip_eps_is_refused(eps):
    x = jnp.zeros(3)
    with pytest.raises(ValueError, match="clip_eps must be > 0"):
        clipped_surrogate_loss(x, x, x, eps)
    with pytest.raises(ValueError, match="clip_eps must be > 0"):
        clipped_value_loss(x, x, x, eps)

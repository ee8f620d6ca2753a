"""TD3 and SAC targets and losses against NumPy, jitted and not; gradient signs and stops."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rljax.losses import continuous as cont

B, A = 16, 3
SETTINGS = settings(max_examples=25, deadline=None)
TOL = dict(rtol=1e-5, atol=1e-5)
JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])

FNS = {
    "clipped": {False: cont.clipped_double_q_target, True: jax.jit(cont.clipped_double_q_target)},
    "sac_critic": {False: cont.sac_critic_target, True: jax.jit(cont.sac_critic_target)},
    "sac_actor": {False: cont.sac_actor_loss, True: jax.jit(cont.sac_actor_loss)},
    "temperature": {False: cont.temperature_loss, True: jax.jit(cont.temperature_loss)},
    "smooth": {False: cont.smoothed_target_action, True: jax.jit(cont.smoothed_target_action)},
    "delayed": {False: cont.delayed_update,
                True: jax.jit(cont.delayed_update, static_argnames="period")},
}

floats = st.floats(-10, 10, width=32, allow_subnormal=False)
batch = hnp.arrays(np.float32, (B,), elements=floats)
# Discounts gamma^m (1 - terminated): zeros (terminal) mixed with n-step powers.
discounts = hnp.arrays(np.float32, (B,),
                       elements=st.sampled_from([0.0, 0.99, 0.99**3, 0.9, 1.0]))
alphas = st.floats(0.0009765625, 2.0, width=32)  # 2^-10: exact in float32


@JIT
@SETTINGS
@given(r=batch, d=discounts, q1=batch, q2=batch)
def test_clipped_double_q_target_matches_numpy(jit, r, d, q1, q2):
    expected = r.astype(np.float64) + d * np.minimum(q1, q2)
    np.testing.assert_allclose(FNS["clipped"][jit](r, d, q1, q2), expected, **TOL)
    # One transition at a time gives the same numbers.
    np.testing.assert_allclose(FNS["clipped"][jit](r[0], d[0], q1[0], q2[0]), expected[0],
                               **TOL)


@JIT
@SETTINGS
@given(r=batch, d=discounts, q1=batch, q2=batch, logp=batch, alpha=alphas)
def test_sac_critic_target_matches_numpy(jit, r, d, q1, q2, logp, alpha):
    expected = r + d * (np.minimum(q1, q2).astype(np.float64) - np.float64(alpha) * logp)
    np.testing.assert_allclose(FNS["sac_critic"][jit](r, d, q1, q2, logp, np.float32(alpha)),
                               expected, **TOL)


def test_terminal_transitions_do_not_bootstrap():
    r = np.array([1.0, 1.0], np.float32)
    d = np.array([0.0, 0.5], np.float32)
    q = np.array([100.0, 100.0], np.float32)
    np.testing.assert_allclose(cont.clipped_double_q_target(r, d, q, q + 1), [1.0, 51.0])
    np.testing.assert_allclose(cont.sac_critic_target(r, d, q, q + 1, np.full(2, -2.0), 0.5),
                               [1.0, 1.0 + 0.5 * (100.0 + 1.0)])


def test_targets_pass_no_gradient():
    args = [np.float32(x) for x in (1.0, 0.9, 2.0, 3.0, -1.5)]
    grads = jax.jit(jax.grad(lambda *a: cont.sac_critic_target(*a, 0.2), argnums=range(5)))(
        *args)
    np.testing.assert_array_equal(grads, 0.0)
    g_alpha = jax.jit(jax.grad(lambda alpha: cont.sac_critic_target(*args, alpha)))(0.2)
    assert g_alpha == 0.0
    grads = jax.jit(jax.grad(cont.clipped_double_q_target, argnums=range(4)))(*args[:4])
    np.testing.assert_array_equal(grads, 0.0)


@JIT
@SETTINGS
@given(q1=batch, q2=batch, logp=batch, alpha=alphas)
def test_sac_actor_loss_matches_numpy(jit, q1, q2, logp, alpha):
    expected = np.float64(alpha) * logp - np.minimum(q1, q2)
    np.testing.assert_allclose(FNS["sac_actor"][jit](q1, q2, logp, np.float32(alpha)),
                               expected, **TOL)


def test_sac_actor_loss_gradient_reaches_smaller_critic_and_log_prob_not_alpha():
    q1 = np.array([1.0, 5.0], np.float32)
    q2 = np.array([2.0, 3.0], np.float32)
    logp = np.array([-1.0, 0.5], np.float32)

    def loss(q1, q2, logp, alpha):
        return jnp.sum(cont.sac_actor_loss(q1, q2, logp, alpha))

    g_q1, g_q2, g_logp, g_alpha = jax.jit(jax.grad(loss, argnums=range(4)))(
        q1, q2, logp, np.float32(0.3))
    np.testing.assert_array_equal(g_q1, [-1.0, 0.0])
    np.testing.assert_array_equal(g_q2, [0.0, -1.0])
    np.testing.assert_allclose(g_logp, [0.3, 0.3])
    assert g_alpha == 0.0


@JIT
@SETTINGS
@given(log_alpha=st.floats(-5, 2, width=32, allow_subnormal=False), logp=batch,
       target=st.floats(-6, 2, width=32, allow_subnormal=False))
def test_temperature_loss_matches_numpy(jit, log_alpha, logp, target):
    expected = -np.float64(log_alpha) * (logp.astype(np.float64) + target)
    got = FNS["temperature"][jit](np.float32(log_alpha), logp, np.float32(target))
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("entropy_gap", [-1.0, 1.0], ids=["below_target", "above_target"])
def test_temperature_step_moves_alpha_toward_the_target_entropy(entropy_gap):
    target_entropy = -float(A)
    rng = np.random.default_rng(0)
    # log_prob samples whose entropy estimate -mean(log_prob) is target + entropy_gap.
    logp = rng.normal(size=B).astype(np.float32)
    logp = logp - logp.mean() - np.float32(target_entropy + entropy_gap)
    entropy = -float(np.mean(logp.astype(np.float64)))
    assert math.isclose(entropy - target_entropy, entropy_gap, abs_tol=1e-5)

    def mean_loss(log_alpha, logp):
        return jnp.mean(cont.temperature_loss(log_alpha, logp, target_entropy))

    g_log_alpha, g_logp = jax.jit(jax.grad(mean_loss, argnums=(0, 1)))(np.float32(0.0), logp)
    # d/dlog_alpha = -(mean log_prob + target) = H - target.
    np.testing.assert_allclose(g_log_alpha, entropy - target_entropy, rtol=1e-5)
    np.testing.assert_array_equal(g_logp, 0.0)
    new_alpha = math.exp(0.0 - 0.1 * float(g_log_alpha))  # one gradient-descent step
    if entropy_gap < 0:  # entropy below target: more entropy bonus
        assert new_alpha > 1.0
    else:
        assert new_alpha < 1.0


@JIT
def test_smoothed_target_action_matches_numpy(jit):
    key = jax.random.key(3)
    rng = np.random.default_rng(3)
    action = rng.uniform(-1.2, 1.2, size=(B, A)).astype(np.float32)
    low = np.array([-1.0, -0.5, -1.0], np.float32)
    high = np.array([1.0, 0.5, 1.0], np.float32)
    got = FNS["smooth"][jit](key, action, 0.4, 0.5, low, high)
    eps = 0.4 * np.asarray(jax.random.normal(key, (B, A), jnp.float32), np.float64)
    expected = np.clip(action + np.clip(eps, -0.5, 0.5), low, high)
    np.testing.assert_allclose(got, expected, **TOL)
    assert got.shape == action.shape and got.dtype == jnp.float32
    assert np.all(got >= low) and np.all(got <= high)
    # Both clips are active somewhere, so the comparison above covers them.
    assert np.any(np.abs(eps) > 0.5) and np.any(got == low) and np.any(got == high)


def test_smoothed_target_noise_has_the_clipped_normal_law():
    n, std, clip = 100_000, 0.2, 0.3
    action = jnp.zeros((n, 1), jnp.float32)
    noise = np.asarray(jax.jit(cont.smoothed_target_action)(
        jax.random.key(0), action, std, clip, -10.0, 10.0))[:, 0]
    # P(|eps| >= c) = 2 (1 - Phi(c / std)) = erfc(c / (std sqrt 2)); 5 standard errors.
    p_clipped = math.erfc(clip / (std * math.sqrt(2.0)))
    frac_clipped = np.mean(np.abs(noise) >= clip)
    assert abs(frac_clipped - p_clipped) < 5 * math.sqrt(p_clipped / n)
    assert np.max(np.abs(noise)) == np.float32(clip)
    assert abs(np.mean(noise)) < 5 * std / math.sqrt(n)
    # No noise, or no room for it: the action is only clipped to the bounds.
    a = np.array([[0.3, -2.0]], np.float32)
    clipped = np.array([[0.3, -1.0]], np.float32)
    np.testing.assert_array_equal(
        cont.smoothed_target_action(jax.random.key(1), a, 0.0, 0.5, -1.0, 1.0), clipped)
    np.testing.assert_array_equal(
        cont.smoothed_target_action(jax.random.key(1), a, 1.0, 0.0, -1.0, 1.0), clipped)


@pytest.mark.parametrize("period", [1, 2, 3, 5])
@JIT
def test_delayed_update_count_matches_python(jit, period):
    steps = 17
    due = np.array([bool(FNS["delayed"][jit](np.int32(s), period=period))
                    for s in range(steps)])
    python_count = 0
    for s in range(steps):
        if s % period == 0:
            python_count += 1
    assert due.sum() == python_count == math.ceil(steps / period)
    assert due[0]  # the first critic update also moves the actor
    # Counted inside a compiled scan as an agent would.
    def body(count, step):
        return count + cont.delayed_update(step, period).astype(jnp.int32), None

    count, _ = jax.jit(lambda: jax.lax.scan(body, jnp.int32(0), jnp.arange(steps)))()
    assert int(count) == python_count


@pytest.mark.parametrize("call, match", [
    (lambda: cont.clipped_double_q_target(np.zeros(B), np.zeros(B), np.zeros((B, 1)),
                                          np.zeros(B)),
     "must have the same shape .*q1_t \\(16, 1\\)"),
    (lambda: cont.sac_critic_target(np.zeros(B), np.zeros(B), np.zeros(B), np.zeros(B),
                                    np.zeros(B), np.ones(B)), "alpha must be a scalar"),
    (lambda: cont.sac_actor_loss(np.zeros(B), np.zeros(B), np.zeros(B + 1), 0.1),
     "log_prob \\(17,\\)"),
    (lambda: cont.temperature_loss(np.zeros(1), np.zeros(B), -1.0), "log_alpha must be a scalar"),
    (lambda: cont.smoothed_target_action(jax.random.key(0), np.zeros((B, A)), -0.1, 0.5, -1, 1),
     "noise_std must be >= 0"),
    (lambda: cont.smoothed_target_action(jax.random.key(0), np.zeros((B, A)), 0.1, 0.5,
                                         np.zeros(A + 1), 1.0), "low must be a scalar or \\[A\\]"),
    (lambda: cont.smoothed_target_action(jax.random.key(0), np.zeros((B, A)), 0.1, 0.5, 1.0,
                                         -1.0), "low must be <= high"),
    (lambda: cont.smoothed_target_action(jax.random.key(0), np.zeros((B, A), np.int32), 0.1,
                                         0.5, -1, 1), "action must be floating point"),
    (lambda: cont.delayed_update(3, 0), "period must be a positive integer"),
    (lambda: cont.delayed_update(3.0, 2), "step must be an integer"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()

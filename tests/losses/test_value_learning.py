"""Q-learning, double Q-learning, DDPG TD errors and losses against NumPy, jitted and not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rljax.losses import value_learning as vl

B, A = 16, 4
SETTINGS = settings(max_examples=25, deadline=None)
TOL = dict(rtol=1e-5, atol=1e-5)

q_learning = jax.vmap(vl.q_learning_td)
double_q = jax.vmap(vl.double_q_learning_td)
ddpg_td = jax.vmap(vl.ddpg_critic_td)
FNS = {
    "q": {False: q_learning, True: jax.jit(q_learning)},
    "double": {False: double_q, True: jax.jit(double_q)},
    "ddpg": {False: ddpg_td, True: jax.jit(ddpg_td)},
    "huber": {False: vl.huber_loss, True: jax.jit(vl.huber_loss, static_argnames="delta")},
    "weighted": {False: vl.weighted_td_loss,
                 True: jax.jit(vl.weighted_td_loss, static_argnames=("loss", "delta"))},
}
JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])

# No subnormals: XLA:CPU flushes them to zero, so argmax over [0, 1e-45] differs from NumPy's.
floats = st.floats(-10, 10, width=32, allow_subnormal=False)
q_values = hnp.arrays(np.float32, (B, A), elements=floats)
scalars = hnp.arrays(np.float32, (B,), elements=floats)
# Discounts gamma^m (1 - terminated): zeros (terminal) mixed with values in (0, 1].
discounts = hnp.arrays(np.float32, (B,), elements=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
actions = hnp.arrays(np.int32, (B,), elements=st.integers(0, A - 1))


def np_huber(x, delta):
    x = np.asarray(x, np.float64)
    return np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


@JIT
@SETTINGS
@given(q_tm1=q_values, a=actions, r=scalars, d=discounts, q_t=q_values)
def test_q_learning_matches_numpy(jit, q_tm1, a, r, d, q_t):
    expected = r + d * q_t.max(-1) - q_tm1[np.arange(B), a]
    np.testing.assert_allclose(FNS["q"][jit](q_tm1, a, r, d, q_t), expected, **TOL)


@JIT
@SETTINGS
@given(q_tm1=q_values, a=actions, r=scalars, d=discounts, q_online=q_values,
       q_target=q_values)
def test_double_q_learning_matches_numpy(jit, q_tm1, a, r, d, q_online, q_target):
    a_t = q_online.argmax(-1)  # NumPy's argmax also breaks ties to the lowest index
    expected = r + d * q_target[np.arange(B), a_t] - q_tm1[np.arange(B), a]
    np.testing.assert_allclose(FNS["double"][jit](q_tm1, a, r, d, q_online, q_target),
                               expected, **TOL)


@JIT
def test_double_q_selects_with_online_and_evaluates_with_target(jit):
    q_tm1 = np.zeros((1, 3), np.float32)
    online = np.array([[0.0, 5.0, 1.0]], np.float32)
    target = np.array([[10.0, 2.0, 7.0]], np.float32)
    td = FNS["double"][jit](q_tm1, np.array([0]), np.array([1.0], np.float32),
                            np.array([0.5], np.float32), online, target)
    np.testing.assert_allclose(td, [1.0 + 0.5 * 2.0])  # not max(target) = 10
    # Ties in the selector go to the lowest index.
    td = FNS["double"][jit](q_tm1, np.array([0]), np.array([0.0], np.float32),
                            np.array([1.0], np.float32), np.ones((1, 3), np.float32), target)
    np.testing.assert_allclose(td, [10.0])


@JIT
@SETTINGS
@given(q_tm1=scalars, r=scalars, d=discounts, q_t=scalars)
def test_ddpg_critic_td_matches_numpy(jit, q_tm1, r, d, q_t):
    np.testing.assert_allclose(FNS["ddpg"][jit](q_tm1, r, d, q_t), r + d * q_t - q_tm1, **TOL)


def test_ddpg_actor_loss():
    q = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(vl.ddpg_actor_loss(q), -q)
    np.testing.assert_array_equal(jax.jit(vl.ddpg_actor_loss)(q), -q)
    grad = jax.grad(lambda x: jnp.mean(vl.ddpg_actor_loss(x)))(q)
    np.testing.assert_allclose(grad, [-0.5, -0.5])


def test_gradients_only_reach_q_tm1():
    rng = np.random.default_rng(0)
    q_tm1, q_online, q_target = (rng.normal(size=A).astype(np.float32) for _ in range(3))

    def loss(q_tm1, q_online, q_target):
        return vl.double_q_learning_td(q_tm1, 2, 1.0, 0.9, q_online, q_target) ** 2 / 2

    td = vl.double_q_learning_td(q_tm1, 2, 1.0, 0.9, q_online, q_target)
    # Jitted: one compile instead of one per primitive (the eager path is tested above).
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    g_tm1, g_online, g_target = grad(q_tm1, q_online, q_target)
    np.testing.assert_allclose(g_tm1, -td * np.eye(A)[2], **TOL)
    np.testing.assert_array_equal(g_online, 0.0)
    np.testing.assert_array_equal(g_target, 0.0)
    g_q_t = jax.jit(jax.grad(lambda q_t: vl.q_learning_td(q_tm1, 0, 1.0, 0.9, q_t)))(q_target)
    np.testing.assert_array_equal(g_q_t, 0.0)
    g_ddpg = jax.jit(jax.grad(lambda q_t: vl.ddpg_critic_td(0.0, 1.0, 0.9, q_t)))(2.0)
    assert g_ddpg == 0.0


@JIT
@SETTINGS
@given(x=hnp.arrays(np.float32, (B,), elements=st.floats(-5, 5, width=32)),
       delta=st.sampled_from([0.5, 1.0, 2.0]))
def test_huber_and_l2_match_numpy(jit, x, delta):
    np.testing.assert_allclose(FNS["huber"][jit](x, delta=delta), np_huber(x, delta), **TOL)
    np.testing.assert_allclose(vl.l2_loss(x), 0.5 * x.astype(np.float64) ** 2, **TOL)


def test_huber_gradient_is_the_clipped_error():
    x = np.array([-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 4.0], np.float32)
    grad = jax.jit(jax.vmap(jax.grad(vl.huber_loss)))(x)
    np.testing.assert_allclose(grad, np.clip(x, -1.0, 1.0), **TOL)


@JIT
@pytest.mark.parametrize("loss", ["huber", "l2"])
def test_weighted_td_loss_matches_numpy(jit, loss):
    rng = np.random.default_rng(1)
    td = rng.normal(scale=2.0, size=B).astype(np.float32)
    w = rng.uniform(0.1, 1.0, size=B).astype(np.float32)
    per_item = np_huber(td, 1.5) if loss == "huber" else 0.5 * td.astype(np.float64) ** 2
    fn = FNS["weighted"][jit]
    np.testing.assert_allclose(fn(td, w, loss=loss, delta=1.5), np.mean(w * per_item), **TOL)
    np.testing.assert_allclose(fn(td, None, loss=loss, delta=1.5), np.mean(per_item), **TOL)
    # The importance weights are constants: no gradient reaches them.
    grad_w = jax.jit(jax.grad(lambda w: vl.weighted_td_loss(td, w, loss=loss)))(w)
    np.testing.assert_array_equal(grad_w, 0.0)


@pytest.mark.parametrize("call, match", [
    (lambda: vl.q_learning_td(np.zeros((2, A)), 0, 0.0, 1.0, np.zeros(A)),
     "q_tm1 must be rank 1 .*got shape \\(2, 4\\)"),
    (lambda: vl.q_learning_td(np.zeros(A), np.zeros(2, np.int32), 0.0, 1.0, np.zeros(A)),
     "a_tm1 must be a scalar"),
    (lambda: vl.double_q_learning_td(np.zeros(A), 0, 0.0, 1.0, np.zeros(A), np.zeros(A + 1)),
     "must have the same shape"),
    (lambda: vl.ddpg_critic_td(np.zeros(1), 0.0, 1.0, 0.0), "q_tm1 must be a scalar"),
    (lambda: vl.huber_loss(1.0, delta=0.0), "delta must be > 0, got 0.0"),
    (lambda: vl.weighted_td_loss(np.zeros(B), loss="l1"), "loss must be one of huber, l2"),
    (lambda: vl.weighted_td_loss(np.zeros(B), np.ones(B + 1)), "weights must have the shape"),
    (lambda: vl.weighted_td_loss(np.zeros((B, 1))), "td_errors must be rank 1"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()

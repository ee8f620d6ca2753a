"""Edges of the action-indexed losses and the categorical distribution: masked (-inf) Q-values
and logits against NumPy on the arrays with the masked actions deleted, integer-only actions,
and actions out of range."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax import losses
from rljax.losses import value_learning as vl
from rljax.networks import categorical_entropy, categorical_log_prob

B, A = 8, 6
SETTINGS = settings(max_examples=10, deadline=None)
JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
TOL = dict(rtol=1e-5, atol=1e-5)


def _maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


def _masked_batch(seed, fraction, keep_argmax_of=None):
    """``(values [3, B, A] float32, actions [B], mask [B, A])``: masked entries are never the
    action nor the argmax of ``values[keep_argmax_of]``; about ``fraction`` of the others."""
    rng = np.random.default_rng(seed)
    values = rng.normal(scale=3.0, size=(3, B, A)).astype(np.float32)
    actions = rng.integers(0, A, B).astype(np.int32)
    mask = rng.random((B, A)) < fraction
    mask[np.arange(B), actions] = False
    if keep_argmax_of is not None:
        mask[np.arange(B), values[keep_argmax_of].argmax(-1)] = False
    return values, actions, mask


def _kept_index(mask_row, a):
    return int(np.sum(~mask_row[:a]))  # position of action a once masked ones are deleted


fractions = st.sampled_from([0.3, 0.7, 1.0])


# ---------------------------------------------------------------------------------------------
# Masked Q-values: TD errors and their gradients.


def _td_and_grad(fn):
    def loss(q_tm1, *rest):
        td = jax.vmap(fn)(q_tm1, *rest)
        return 0.5 * jnp.sum(td**2), td

    grad = jax.value_and_grad(loss, has_aux=True)
    return {False: grad, True: jax.jit(grad)}  # compiled once for all examples


TD_GRADS = {"q": _td_and_grad(vl.q_learning_td), "double": _td_and_grad(vl.double_q_learning_td)}


@JIT
@SETTINGS
@given(seed=st.integers(0, 10_000), fraction=fractions)
def test_q_learning_with_masked_actions_matches_deleted_reference(jit, seed, fraction):
    (q_tm1, q_t, _), a, mask = _masked_batch(seed, fraction)
    r = np.linspace(-1, 1, B).astype(np.float32)
    d = np.full(B, 0.9, np.float32)
    q_tm1_m, q_t_m = np.where(mask, -np.inf, q_tm1), np.where(mask, -np.inf, q_t)
    (_, td), grad = TD_GRADS["q"][jit](q_tm1_m, a, r, d, q_t_m)
    expected_grad = np.zeros((B, A))
    for i in range(B):
        kept_tm1, kept_t = q_tm1[i][~mask[i]], q_t[i][~mask[i]]
        expected = r[i] + d[i] * kept_t.max() - kept_tm1[_kept_index(mask[i], a[i])]
        np.testing.assert_allclose(td[i], expected, **TOL)
        expected_grad[i, a[i]] = -expected  # d(td^2 / 2) / dq_tm1[a] = -td
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, expected_grad, **TOL)


@JIT
@SETTINGS
@given(seed=st.integers(0, 10_000), fraction=fractions)
def test_double_q_with_masked_actions_matches_deleted_reference(jit, seed, fraction):
    (q_tm1, q_online, q_target), a, mask = _masked_batch(seed, fraction, keep_argmax_of=1)
    r = np.linspace(-1, 1, B).astype(np.float32)
    d = np.full(B, 0.99, np.float32)
    masked = [np.where(mask, -np.inf, x) for x in (q_tm1, q_online, q_target)]
    (_, td), grads = TD_GRADS["double"][jit](
        masked[0], a, r, d, masked[1], masked[2])
    expected_grad = np.zeros((B, A))
    for i in range(B):
        kept = [x[i][~mask[i]] for x in (q_tm1, q_online, q_target)]
        expected = (r[i] + d[i] * kept[2][kept[1].argmax()]
                    - kept[0][_kept_index(mask[i], a[i])])
        np.testing.assert_allclose(td[i], expected, **TOL)
        expected_grad[i, a[i]] = -expected
    assert np.all(np.isfinite(grads))
    np.testing.assert_allclose(grads, expected_grad, **TOL)


# ---------------------------------------------------------------------------------------------
# Masked logits: log-probabilities, entropies, their losses and gradients.


def np_log_softmax(x):
    x = np.asarray(x, np.float64)
    z = x - x.max()
    return z - np.log(np.sum(np.exp(z)))


def _pg(logits, a, adv):
    per = losses.policy_gradient_loss(logits, a, adv)
    return jnp.sum(per), per


def _entropy(logits):
    per = losses.entropy_loss(logits)
    return jnp.sum(per), per


def _direct(logits, a):
    return categorical_log_prob(logits, a), categorical_entropy(logits)


POLICY_FNS = {
    False: (jax.value_and_grad(_pg, has_aux=True), jax.value_and_grad(_entropy, has_aux=True),
            _direct),
    True: (jax.jit(jax.value_and_grad(_pg, has_aux=True)),
           jax.jit(jax.value_and_grad(_entropy, has_aux=True)), jax.jit(_direct)),
}


@JIT
@SETTINGS
@given(seed=st.integers(0, 10_000), fraction=fractions)
def test_policy_losses_with_masked_logits_match_deleted_reference(jit, seed, fraction):
    (logits, adv, _), a, mask = _masked_batch(seed, fraction)
    adv = adv[:, 0]
    masked = np.where(mask, -np.inf, logits)
    pg, ent, direct = POLICY_FNS[jit]
    (_, pg_loss), pg_grad = pg(masked, a, adv)
    (_, ent_loss), ent_grad = ent(masked)
    logp_direct, entropy_direct = direct(masked, a)
    for out in (pg_loss, pg_grad, ent_loss, ent_grad, logp_direct, entropy_direct):
        assert np.all(np.isfinite(out))
    for i in range(B):
        keep = ~mask[i]
        logp = np_log_softmax(logits[i][keep])
        p = np.exp(logp)
        k = _kept_index(mask[i], a[i])
        entropy = -np.sum(p * logp)
        np.testing.assert_allclose(logp_direct[i], logp[k], **TOL)
        np.testing.assert_allclose(pg_loss[i], -logp[k] * adv[i], **TOL)
        np.testing.assert_allclose(entropy_direct[i], entropy, **TOL)
        np.testing.assert_allclose(ent_loss[i], -entropy, **TOL)
        # d(-log p_k A)/dl = -(e_k - p) A;  d(-H)/dl = p (log p + H). Masked logits: 0.
        expected_pg, expected_ent = np.zeros(A), np.zeros(A)
        expected_pg[keep] = -(np.eye(len(p))[k] - p) * adv[i]
        expected_ent[keep] = p * (logp + entropy)
        np.testing.assert_allclose(pg_grad[i], expected_pg, **TOL)
        np.testing.assert_allclose(ent_grad[i], expected_ent, **TOL)


def test_entropy_of_underflowing_and_single_action_distributions():
    """p log p counts as 0 where p rounds to 0 (a finite but very negative logit), and a single
    remaining action has entropy 0 with a zero gradient."""
    logits = jnp.array([[0.0, -200.0, 0.0], [3.0, -jnp.inf, -jnp.inf]])
    entropy = categorical_entropy(logits)
    np.testing.assert_allclose(entropy, [np.log(2.0), 0.0], atol=1e-6)
    grad = jax.grad(lambda x: jnp.sum(categorical_entropy(x)))(logits)
    np.testing.assert_allclose(grad, 0.0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Action dtype and range.


_Q = np.zeros(A, np.float32)
ACTION_TAKERS = {  # the function and argument named in the error -> a call taking the action
    "q_learning_td: a_tm1": lambda a: vl.q_learning_td(_Q, a, 0.0, 1.0, _Q),
    "double_q_learning_td: a_tm1": lambda a: vl.double_q_learning_td(_Q, a, 0.0, 1.0, _Q, _Q),
    "categorical_log_prob: action": lambda a: categorical_log_prob(_Q, a),
    "policy_gradient_loss: a_t": lambda a: losses.policy_gradient_loss(_Q, a, 1.0),
}


@JIT
@pytest.mark.parametrize("name", list(ACTION_TAKERS))
@pytest.mark.parametrize("action", [1.0, np.float32(2), jnp.array(0.0, jnp.bfloat16), True])
def test_non_integer_action_is_refused_by_dtype(jit, name, action):
    """Refused whether the action is concrete or traced (its dtype is static)."""
    call = _maybe_jit(ACTION_TAKERS[name], jit)
    with pytest.raises(TypeError, match=f"{name} must have an integer dtype .*got "):
        call(action)


@JIT
def test_categorical_log_prob_out_of_range_is_minus_inf(jit):
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)), jnp.float32)
    log_prob = _maybe_jit(categorical_log_prob, jit)
    got = log_prob(logits, jnp.array([0, 2, 3, -1, 1_000_000], jnp.int32))
    expected = [np_log_softmax(logits[0])[0], np_log_softmax(logits[1])[2]]
    np.testing.assert_allclose(got[:2], expected, **TOL)
    np.testing.assert_array_equal(got[2:], -np.inf)
    # Narrow and unsigned dtypes: 255 is out of range, not -1 nor wrapped.
    for dtype in (jnp.uint8, jnp.int8, jnp.uint32, jnp.int16):
        got = log_prob(logits[0], jnp.array([2, 3, 127], dtype))
        np.testing.assert_allclose(got[0], np_log_softmax(logits[0])[2], **TOL)
        np.testing.assert_array_equal(got[1:], -np.inf)
    got = log_prob(logits[0], jnp.array([1, 255], jnp.uint8))
    assert np.isfinite(got[0]) and got[1] == -np.inf
    # Out of range does not become "certain": no log-probability 0 for a uniform policy.
    assert log_prob(jnp.zeros(1), jnp.array(1)) == -np.inf
    np.testing.assert_allclose(
        _maybe_jit(losses.policy_gradient_loss, jit)(logits[:2], jnp.array([0, 3]), 1.0),
        [-expected[0], np.inf], **TOL)


@JIT
def test_q_selection_out_of_range_is_nan(jit):
    q = np.arange(A, dtype=np.float32)
    td = _maybe_jit(jax.vmap(vl.q_learning_td, in_axes=(None, 0, None, None, None)), jit)
    got = td(q, jnp.array([1, A, -1], jnp.int32), 0.0, 1.0, q)
    np.testing.assert_allclose(got[0], A - 1.0 - 1.0)
    assert np.all(np.isnan(got[1:]))
    got = _maybe_jit(vl.double_q_learning_td, jit)(q, jnp.int32(-2), 0.0, 1.0, q, q)
    assert np.isnan(got)


@JIT
def test_categorical_log_prob_broadcasts_like_numpy(jit):
    logits = np.random.default_rng(1).normal(size=(2, 1, 4)).astype(np.float32)
    actions = np.array([[0, 3, 1]], np.int32)  # [1, 3] against logits' batch [2, 1]
    got = _maybe_jit(categorical_log_prob, jit)(logits, actions)
    logp = np.stack([np_log_softmax(row) for row in logits[:, 0]])  # [2, 4]
    np.testing.assert_allclose(got, logp[:, actions[0]], **TOL)

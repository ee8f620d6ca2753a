"""Q(lambda) targets against a Python loop, with episode ends at every rollout position."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.losses.q_lambda import q_lambda_returns
from rljax.losses.returns import lambda_returns

T, A = 7, 3
GAMMA = 0.97


def ref_q_lambda(r, term, trunc, q_next, gamma, lam):
    """G_t = r_t + gamma * (0 if term, max q_t if trunc or last, else the lambda mix)."""
    g = np.zeros(len(r))
    for t in reversed(range(len(r))):
        v = q_next[t].max()
        if term[t]:
            g[t] = r[t]
        elif trunc[t] or t == len(r) - 1:
            g[t] = r[t] + gamma * v
        else:
            g[t] = r[t] + gamma * ((1 - lam) * v + lam * g[t + 1])
    return g


def _inputs(seed, term, trunc):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=T).astype(np.float32)
    q = rng.normal(size=(T, A)).astype(np.float32)
    term, trunc = np.asarray(term, bool), np.asarray(trunc, bool)
    return r, q, term, trunc, (GAMMA * (1.0 - term)).astype(np.float32), term | trunc


# lambda_ traced: one compilation serves every lambda.
_jit = jax.jit(q_lambda_returns)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("position", [0, T // 2, T - 1])
@pytest.mark.parametrize("kind", ["terminated", "truncated"])
def test_episode_end_at_each_position(kind, position, lam, jit):
    flags = np.zeros(T, bool)
    flags[position] = True
    none = np.zeros(T, bool)
    term, trunc = (flags, none) if kind == "terminated" else (none, flags)
    r, q, term, trunc, disc, end = _inputs(position, term, trunc)
    got = (_jit if jit else q_lambda_returns)(r, disc, end, q, lam)
    want = ref_q_lambda(r, term, trunc, q.astype(np.float64), GAMMA, lam)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # The step before the end never sees beyond it: its target is unchanged when every
    # later reward moves (the later steps belong to the next episode).
    if position > 0:
        moved = r.copy()
        moved[position + 1:] += 5.0
        again = q_lambda_returns(moved, disc, end, q, lam)
        np.testing.assert_allclose(again[:position + 1], got[:position + 1], rtol=1e-6)


episode_flags = st.lists(st.sampled_from(["none", "term", "trunc"]), min_size=T, max_size=T)


# Eagerly, each call compiles its scan anew: the eager case draws fewer examples (the
# compiled function is the same; the jitted case explores the episode ends).
@pytest.mark.parametrize("jit,examples", [(False, 5), (True, 20)])
def test_matches_reference(jit, examples):
    @settings(max_examples=examples, deadline=None)
    @given(flags=episode_flags, seed=st.integers(0, 1000),
           lam=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)))
    def check(flags, seed, lam):
        r, q, term, trunc, disc, end = _inputs(seed, [f == "term" for f in flags],
                                               [f == "trunc" for f in flags])
        got = (_jit if jit else q_lambda_returns)(r, disc, end, q, lam)
        np.testing.assert_allclose(got, ref_q_lambda(r, term, trunc, q.astype(np.float64),
                                                     GAMMA, lam), rtol=1e-5, atol=1e-5)

    check()


def test_lambda_zero_is_the_one_step_q_learning_target():
    r, q, _, _, disc, end = _inputs(1, np.arange(T) % 3 == 1, np.arange(T) % 3 == 2)
    got = q_lambda_returns(r, disc, end, q, 0.0)
    np.testing.assert_allclose(got, r + disc * q.max(axis=1), rtol=1e-6)


def test_lambda_one_sums_rewards_to_the_end_then_bootstraps():
    r = np.arange(1.0, T + 1, dtype=np.float32)
    q = np.zeros((T, A), np.float32)
    q[2, 1], q[-1, 0] = 10.0, 20.0
    trunc = np.arange(T) == 2
    got = q_lambda_returns(r, np.full(T, GAMMA, np.float32), trunc, q, 1.0)
    first = r[0] + GAMMA * r[1] + GAMMA**2 * (r[2] + GAMMA * 10.0)
    last_episode = sum(GAMMA**k * r[3 + k] for k in range(T - 3)) + GAMMA ** (T - 3) * 20.0
    np.testing.assert_allclose(np.asarray(got)[[0, 3]], [first, last_episode], rtol=1e-5)


def test_equals_lambda_returns_of_the_greedy_values():
    r, q, _, _, disc, end = _inputs(4, np.arange(T) == 2, np.arange(T) == 4)
    got = q_lambda_returns(r, disc, end, q, 0.8)
    want = lambda_returns(jnp.asarray(r), jnp.asarray(disc), jnp.asarray(q.max(axis=1)),
                          0.8 * (1.0 - end))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_valid_targets_ignore_envpool_reset_steps():
    # Episode ends at t = 2 (truncated) and t = 5 (terminated); envpool's reset steps
    # follow at t = 3 and t = 6 (valid False, reward 0, no flags). Whatever a reset step
    # holds, the targets of valid steps stay the same.
    r, q, term, trunc, disc, end = _inputs(5, np.arange(T) == 5, np.arange(T) == 2)
    valid = ~np.isin(np.arange(T), [3, 6])
    r[~valid] = 0.0
    got = q_lambda_returns(r, disc, end, q, 0.9)
    r2, q2 = r.copy(), q.copy()
    r2[~valid] = 7.0
    q2[~valid] = -9.0
    again = q_lambda_returns(r2, disc, end, q2, 0.9)
    np.testing.assert_allclose(np.asarray(again)[valid], np.asarray(got)[valid], rtol=1e-6)
    want = ref_q_lambda(r, term, trunc, q.astype(np.float64), GAMMA, 0.9)
    np.testing.assert_allclose(np.asarray(got)[valid], want[valid], rtol=1e-5, atol=1e-5)


def test_vmap_over_envs():
    rng = np.random.default_rng(6)
    b = 4
    r = rng.normal(size=(T, b)).astype(np.float32)
    q = rng.normal(size=(T, b, A)).astype(np.float32)
    term, trunc = rng.random((T, b)) < 0.2, rng.random((T, b)) < 0.2
    trunc &= ~term
    disc = (GAMMA * (1.0 - term)).astype(np.float32)
    fn = jax.vmap(q_lambda_returns, in_axes=(1, 1, 1, 1, None), out_axes=1)
    got = jax.jit(fn)(r, disc, term | trunc, q, 0.7)
    assert got.shape == (T, b)
    for i in range(b):
        np.testing.assert_allclose(got[:, i], ref_q_lambda(r[:, i], term[:, i], trunc[:, i],
                                                           q[:, i].astype(np.float64), GAMMA,
                                                           0.7), rtol=1e-5, atol=1e-5)


def test_targets_carry_no_gradient():
    r, q, _, _, disc, end = _inputs(7, np.zeros(T, bool), np.zeros(T, bool))
    grad = jax.grad(lambda q: jnp.sum(q_lambda_returns(r, disc, end, q, 0.5)))(jnp.asarray(q))
    np.testing.assert_array_equal(grad, 0.0)


def test_single_step_rollout():
    got = q_lambda_returns(jnp.array([1.0]), jnp.array([0.5]), jnp.array([False]),
                           jnp.array([[2.0, 4.0]]), 0.9)
    np.testing.assert_allclose(got, [3.0])


@pytest.mark.parametrize("args, match", [
    ((np.zeros((T, 2)), np.ones(T), np.zeros(T, bool), np.zeros((T, A)), 0.5), "r_t must be"),
    ((np.zeros(T), np.ones(T), np.zeros(T, bool), np.zeros(T), 0.5), r"q_t must be \[T, A\]"),
    ((np.zeros(T), np.ones(T - 1), np.zeros(T, bool), np.zeros((T, A)), 0.5), "share a length"),
    ((np.zeros(T), np.ones(T), np.zeros(T, bool), np.zeros((T, A)), 1.5), "lambda_ must be"),
])
def test_bad_inputs_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        q_lambda_returns(*args)

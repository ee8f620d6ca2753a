"""Rollout returns and GAE against plain Python loops, with episode ends anywhere."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.losses import gae_advantages, lambda_returns, n_step_returns

T = 7


def ref_n_step(r, term, trunc, v_next, gamma):
    """G_t = r_t + gamma * (0 if term, v_{t+1} if trunc or last step, else G_{t+1})."""
    g = np.zeros_like(r)
    for t in reversed(range(len(r))):
        if term[t]:
            g[t] = r[t]
        elif trunc[t] or t == len(r) - 1:
            g[t] = r[t] + gamma * v_next[t]
        else:
            g[t] = r[t] + gamma * g[t + 1]
    return g


def ref_gae(r, term, trunc, v, v_next, gamma, lam):
    adv = np.zeros_like(r)
    nxt = 0.0
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * (0.0 if term[t] else v_next[t]) - v[t]
        cont = 0.0 if (term[t] or trunc[t] or t == len(r) - 1) else 1.0
        adv[t] = delta + gamma * lam * cont * nxt
        nxt = adv[t]
    return adv


episode_flags = st.lists(st.sampled_from(["none", "term", "trunc"]), min_size=T, max_size=T)

_nstep_jit = jax.jit(n_step_returns)
_gae_jit = jax.jit(gae_advantages, static_argnames="lambda_")


def _inputs(flags, seed):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=T).astype(np.float32)
    v = rng.normal(size=T).astype(np.float32)
    v_next = rng.normal(size=T).astype(np.float32)
    term = np.array([f == "term" for f in flags])
    trunc = np.array([f == "trunc" for f in flags])
    return r, v, v_next, term, trunc


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=40, deadline=None)
@given(flags=episode_flags, seed=st.integers(0, 1000))
def test_n_step_returns_match_reference(jit, flags, seed):
    gamma = 0.97
    r, _, v_next, term, trunc = _inputs(flags, seed)
    fn = _nstep_jit if jit else n_step_returns
    got = fn(jnp.asarray(r), gamma * (1.0 - term), jnp.asarray(term | trunc), jnp.asarray(v_next))
    np.testing.assert_allclose(got, ref_n_step(r, term, trunc, v_next, gamma), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=40, deadline=None)
@given(flags=episode_flags, seed=st.integers(0, 1000))
def test_gae_matches_reference(jit, flags, seed):
    gamma, lam = 0.99, 0.9
    r, v, v_next, term, trunc = _inputs(flags, seed)
    fn = _gae_jit if jit else gae_advantages
    got = fn(jnp.asarray(r), jnp.asarray(gamma * (1.0 - term)), jnp.asarray(term | trunc),
             jnp.asarray(v), jnp.asarray(v_next), lambda_=lam)
    np.testing.assert_allclose(got, ref_gae(r, term, trunc, v, v_next, gamma, lam), rtol=1e-5,
                               atol=1e-5)


def test_gae_lambda_one_equals_n_step_advantage():
    rng = np.random.default_rng(0)
    r = jnp.asarray(rng.normal(size=T), jnp.float32)
    values = jnp.asarray(rng.normal(size=T + 1), jnp.float32)  # as in a rollout
    v, vn = values[:-1], values[1:]
    end = jnp.asarray(rng.random(T) < 0.3)
    disc = jnp.full((T,), 0.99)
    np.testing.assert_allclose(gae_advantages(r, disc, end, v, vn, 1.0),
                               n_step_returns(r, disc, end, vn) - v, rtol=1e-5, atol=1e-5)


def test_lambda_zero_is_one_step_td_target():
    r = jnp.arange(T, dtype=jnp.float32)
    v = jnp.ones(T) * 2.0
    np.testing.assert_allclose(lambda_returns(r, jnp.full((T,), 0.5), v, 0.0), r + 1.0)


def test_truncation_bootstraps_but_termination_does_not():
    r = jnp.zeros(3)
    v_next = jnp.array([10.0, 20.0, 30.0])
    disc_term = jnp.array([1.0, 0.0, 1.0])  # terminated at t=1
    got = n_step_returns(r, disc_term, jnp.array([False, True, False]), v_next)
    np.testing.assert_allclose(got, [0.0, 0.0, 30.0])
    disc_trunc = jnp.ones(3)  # truncated at t=1: bootstrap from the final obs value 20
    got = n_step_returns(r, disc_trunc, jnp.array([False, True, False]), v_next)
    np.testing.assert_allclose(got, [20.0, 20.0, 30.0])

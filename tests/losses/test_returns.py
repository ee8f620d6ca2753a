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


# Eagerly, each call compiles its scan anew: the eager cases draw fewer examples (the
# compiled function is the same; the jitted cases explore the episode ends).
EXAMPLES = pytest.mark.parametrize("jit,examples", [(False, 10), (True, 40)])


@EXAMPLES
def test_n_step_returns_match_reference(jit, examples):
    @settings(max_examples=examples, deadline=None)
    @given(flags=episode_flags, seed=st.integers(0, 1000))
    def check(flags, seed):
        gamma = 0.97
        r, _, v_next, term, trunc = _inputs(flags, seed)
        fn = _nstep_jit if jit else n_step_returns
        got = fn(jnp.asarray(r), gamma * (1.0 - term), jnp.asarray(term | trunc),
                 jnp.asarray(v_next))
        np.testing.assert_allclose(got, ref_n_step(r, term, trunc, v_next, gamma), rtol=1e-5,
                                   atol=1e-5)

    check()


@EXAMPLES
def test_gae_matches_reference(jit, examples):
    @settings(max_examples=examples, deadline=None)
    @given(flags=episode_flags, seed=st.integers(0, 1000))
    def check(flags, seed):
        gamma, lam = 0.99, 0.9
        r, v, v_next, term, trunc = _inputs(flags, seed)
        fn = _gae_jit if jit else gae_advantages
        got = fn(jnp.asarray(r), jnp.asarray(gamma * (1.0 - term)), jnp.asarray(term | trunc),
                 jnp.asarray(v), jnp.asarray(v_next), lambda_=lam)
        np.testing.assert_allclose(got, ref_gae(r, term, trunc, v, v_next, gamma, lam),
                                   rtol=1e-5, atol=1e-5)

    check()


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


def ref_lambda(r, discount, v_next, lam):
    """G_t = r_t + discount_t ((1 - lambda_t) v_t + lambda_t G_{t+1}); G_{T-1} bootstraps."""
    g = np.zeros(len(r))
    for t in reversed(range(len(r))):
        nxt = v_next[t] if t == len(r) - 1 else (1 - lam[t]) * v_next[t] + lam[t] * g[t + 1]
        g[t] = r[t] + discount[t] * nxt
    return g


def ref_gae_discounts(r, discount, end, v, v_next, lam):
    """ref_gae with the discounts given per step (as rounded to the input dtype)."""
    adv = np.zeros(len(r))
    nxt = 0.0
    for t in reversed(range(len(r))):
        cont = 0.0 if (end[t] or t == len(r) - 1) else 1.0
        adv[t] = r[t] + discount[t] * v_next[t] - v[t] + discount[t] * lam * cont * nxt
        nxt = adv[t]
    return adv


def _call_returns(name, r, disc, end, v, v_next, lam, jit=False):
    if name == "lambda":
        fn = jax.jit(lambda_returns) if jit else lambda_returns
        return fn(r, disc, v_next, lam)
    if name == "n_step":
        return (_nstep_jit if jit else n_step_returns)(r, disc, end, v_next)
    return (_gae_jit if jit else gae_advantages)(r, disc, end, v, v_next, lambda_=0.9)


RETURN_FNS = ["lambda", "n_step", "gae"]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("name", RETURN_FNS)
def test_empty_sequences_give_empty_results(name, jit):
    empty = jnp.zeros((0,), jnp.float32)
    got = _call_returns(name, empty, empty, jnp.zeros((0,), bool), empty, empty,
                        jnp.zeros((0,)), jit)
    assert got.shape == (0,) and got.dtype == jnp.float32
    # Batched over envs as the agents do: [T = 0, B] in, [0, B] out.
    batch = jnp.zeros((0, 3), jnp.bfloat16)
    fn = jax.vmap(lambda *xs: _call_returns(name, *xs, jit=jit), in_axes=(1, 1, 1, 1, 1, None),
                  out_axes=1)
    got = fn(batch, batch, jnp.zeros((0, 3), bool), batch, batch, 0.5)
    assert got.shape == (0, 3) and got.dtype == jnp.bfloat16


# Input dtypes in the order (r, discount, v_tm1, v_t, lambda); each tuple mixes at least two
# of float32 / bfloat16 / float16, or is all one half-precision dtype.
DTYPE_MIXES = [
    (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float32, jnp.bfloat16),
    (jnp.bfloat16, jnp.float16, jnp.bfloat16, jnp.bfloat16, jnp.float16),
    (jnp.float16, jnp.float32, jnp.float16, jnp.float16, jnp.float16),
    (jnp.bfloat16, jnp.bfloat16, jnp.float32, jnp.bfloat16, jnp.bfloat16),
    (jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, jnp.bfloat16),
    (jnp.float16, jnp.float16, jnp.float16, jnp.float16, jnp.float16),
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("name", RETURN_FNS)
@pytest.mark.parametrize("dtypes", DTYPE_MIXES, ids=lambda ds: "-".join(
    jnp.dtype(d).name for d in ds))
def test_mixed_float_dtypes_compute_in_the_promoted_dtype(name, dtypes, jit):
    """Against the float64 reference on the inputs as rounded to their dtypes, within a few
    epsilons of the result dtype times the magnitudes involved (a computation in any narrower
    dtype would be off by more)."""
    rng = np.random.default_rng(3)
    r, v, v_next = (rng.normal(size=T) for _ in range(3))
    lam = rng.uniform(0.0, 1.0, size=T)
    end = rng.random(T) < 0.3
    disc = 0.95 * (1.0 - (rng.random(T) < 0.5) * end)
    arrays = [jnp.asarray(x, d) for x, d in zip((r, disc, v, v_next, lam), dtypes, strict=True)]
    r, disc, v, v_next, lam = (np.asarray(x, np.float64) for x in arrays)  # as rounded
    if name == "lambda":
        expected = ref_lambda(r, disc, v_next, lam)
        used = [arrays[i] for i in (0, 1, 3, 4)]
    elif name == "n_step":
        expected = ref_lambda(r, disc, v_next, 1.0 - end)
        used = [arrays[i] for i in (0, 1, 3)]
    else:
        expected = ref_gae_discounts(r, disc, end, v, v_next, 0.9)
        used = [arrays[i] for i in (0, 1, 2, 3)]
    got = _call_returns(name, arrays[0], arrays[1], jnp.asarray(end), arrays[2], arrays[3],
                        arrays[4], jit)
    assert got.dtype == jnp.result_type(*used)
    scale = max(np.abs(expected).max(), np.abs(np.stack([r, v, v_next])).max())
    tol = 4 * float(jnp.finfo(got.dtype).eps) * scale
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=0, atol=tol)


def test_integer_rewards_promote_to_float():
    got = lambda_returns(jnp.arange(3), jnp.full(3, 0.5), jnp.ones(3), 0.0)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, [0.5, 1.5, 2.5])


@pytest.mark.parametrize("call, match", [
    (lambda: lambda_returns(jnp.zeros(3), jnp.zeros(4), jnp.zeros(3), 0.5),
     r"lambda_returns: discount_t must have the shape of r_t \(3,\), got \(4,\)"),
    (lambda: lambda_returns(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(2)),
     r"lambda_returns: lambda_t must be a scalar or of shape \(3,\), got \(2,\)"),
    (lambda: n_step_returns(jnp.zeros(()), jnp.zeros(()), jnp.zeros((), bool), jnp.zeros(())),
     "n_step_returns: r_t must be a sequence"),
    (lambda: gae_advantages(jnp.zeros(3), jnp.zeros(3), jnp.zeros(2, bool), jnp.zeros(3),
                            jnp.zeros(3), 0.9),
     r"gae_advantages: end_t must have the shape of r_t \(3,\), got \(2,\)"),
])
def test_bad_shapes_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()

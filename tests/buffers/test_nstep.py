"""n-step accumulator: hand-computed windows at terminations and truncations, and a
Python reference on random envpool-like streams."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from buffers_reference import nstep_windows
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.buffers import make_nstep
from rljax.types import Transition

EXAMPLE = Transition(
    obs=jnp.zeros(2, jnp.float32),
    action=jnp.zeros((), jnp.int32),
    reward=jnp.zeros((), jnp.float32),
    terminated=jnp.zeros((), bool),
    truncated=jnp.zeros((), bool),
    next_obs=jnp.zeros(2, jnp.float32),
)


def step_of(t, reward, terminated, truncated) -> Transition:
    """One step for ``B`` envs; obs encode (t, env), next_obs (t + 0.5, env)."""
    b = len(reward)
    env = np.arange(b, dtype=np.float32)
    return Transition(
        obs=jnp.asarray(np.stack([np.full(b, t, np.float32), env], -1)),
        action=jnp.asarray(10 * t + np.arange(b), jnp.int32),
        reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, bool),
        truncated=jnp.asarray(truncated, bool),
        next_obs=jnp.asarray(np.stack([np.full(b, t + 0.5, np.float32), env], -1)),
    )


@functools.cache
def compiled(n: int, gamma: float, jit: bool):
    acc = make_nstep(n, gamma)
    return acc, (jax.jit(acc.push) if jit else acc.push)


def run(n, gamma, rewards, terms, truncs, valids, jit=True):
    """Pushes a [T, B] stream; returns per-push emitted records (NumPy)."""
    acc, push = compiled(n, gamma, jit)
    state = acc.init(EXAMPLE, len(rewards[0]))
    out = []
    for t in range(len(rewards)):
        state, em, ok = push(state, step_of(t, rewards[t], terms[t], truncs[t]), valids[t])
        out.append((jax.tree.map(np.asarray, em), np.asarray(ok)))
    return out


# One env: termination at t=2, reset step t=3, truncation at t=5, reset step t=6.
R = [1, 2, 4, 0, 8, 16, 0, 32, 64, 128]
TERM = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
TRUNC = [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
VALID = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]


@pytest.mark.parametrize("jit", [True, False])
def test_three_step_hand_computed(jit):
    col = lambda x: [[v] for v in x]
    out = run(3, 0.5, col(R), col(TERM), col(TRUNC), col(VALID), jit)
    # start: (reward, discount, bootstrap obs time)
    expected = {
        0: (1 + 0.5 * 2 + 0.25 * 4, 0.0, 2.5),  # cut by the termination at t=2
        1: (2 + 0.5 * 4, 0.0, 2.5),
        2: (4.0, 0.0, 2.5),
        4: (8 + 0.5 * 16, 0.25, 5.5),  # cut by the truncation at t=5: gamma^2, bootstraps
        5: (16.0, 0.5, 5.5),
        7: (32 + 0.5 * 64 + 0.25 * 128, 0.125, 9.5),  # full window: gamma^3
    }
    for t, (em, ok) in enumerate(out):
        start = t - 2
        assert bool(ok[0]) == (start in expected), t
        if start in expected:
            reward, discount, boot = expected[start]
            assert em.reward[0] == pytest.approx(reward)
            assert em.discount[0] == pytest.approx(discount)
            assert em.next_obs[0, 0] == boot and em.obs[0, 0] == start
            assert em.action[0] == 10 * start


def test_one_step_is_the_plain_transition():
    col = lambda x: [[v] for v in x]
    out = run(1, 0.5, col(R), col(TERM), col(TRUNC), col(VALID))
    for t, (em, ok) in enumerate(out):
        assert bool(ok[0]) == bool(VALID[t])
        assert em.reward[0] == R[t] and em.obs[0, 0] == t and em.next_obs[0, 0] == t + 0.5
        assert em.discount[0] == pytest.approx(0.5 * (1 - TERM[t]))


def test_terminated_and_truncated_together_do_not_bootstrap():
    out = run(2, 0.9, [[1.0], [2.0], [3.0]], [[0], [1], [0]], [[0], [1], [0]], [[1], [1], [0]])
    em, ok = out[1]
    assert bool(ok[0]) and em.discount[0] == 0.0 and em.reward[0] == pytest.approx(1 + 0.9 * 2)


@settings(max_examples=25, deadline=None)
@given(
    n=st.sampled_from([1, 3]),
    data=st.lists(
        st.tuples(
            st.lists(st.integers(-3, 3), min_size=2, max_size=2),
            st.lists(st.sampled_from([0, 0, 0, 1, 2, 3]), min_size=2, max_size=2),
        ),
        min_size=1,
        max_size=14,
    ),
)
def test_random_streams_match_reference(n, data):
    """envpool-like streams: a reset step (valid False) follows every episode end."""
    gamma, b = 0.9, 2
    rewards = np.array([r for r, _ in data], np.float32)
    ends = np.array([e for _, e in data])  # 1 terminated, 2 truncated, 3 both
    term, trunc = (ends & 1) > 0, (ends & 2) > 0
    valid = np.ones_like(term)
    valid[1:] = ~(term[:-1] | trunc[:-1])
    out = run(n, gamma, rewards, term, trunc, valid)
    for e in range(b):
        windows = nstep_windows(rewards[:, e], term[:, e], trunc[:, e], valid[:, e], n, gamma)
        emitted = [t - n + 1 for t, (_, ok) in enumerate(out) if ok[e]]
        assert emitted == [w[0] for w in windows]
        for start, ret, disc, last in windows:
            em = out[start + n - 1][0]
            assert em.reward[e] == pytest.approx(ret, rel=1e-5, abs=1e-5)
            assert em.discount[e] == pytest.approx(disc, rel=1e-6)
            assert em.obs[e, 0] == start and em.next_obs[e, 0] == last + 0.5


def test_vmap_over_seeds():
    acc = make_nstep(2, 0.9)
    seeds, b = 2, 2
    states = jax.vmap(lambda _: acc.init(EXAMPLE, b))(jnp.arange(seeds))
    push, push1 = jax.jit(jax.vmap(acc.push)), jax.jit(acc.push)
    rng = np.random.default_rng(0)
    singles = [acc.init(EXAMPLE, b) for _ in range(seeds)]
    for t in range(3):
        steps = [step_of(t, rng.normal(size=b), rng.random(b) < 0.3, [0] * b) for _ in range(seeds)]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *steps)
        states, em, ok = push(states, stacked, jnp.ones((seeds, b), bool))
        for i in range(seeds):
            singles[i], em_i, ok_i = push1(singles[i], steps[i])
            np.testing.assert_allclose(np.asarray(em.reward[i]), np.asarray(em_i.reward))
            np.testing.assert_array_equal(np.asarray(ok[i]), np.asarray(ok_i))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n=0, gamma=0.9), "n must be an integer >= 1, got 0"),
        (dict(n=2, gamma=1.5), r"gamma must be in \[0.0, 1.0\], got 1.5"),
        (dict(n=2, gamma=-0.1), "gamma"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_nstep(**kwargs)

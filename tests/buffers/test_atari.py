"""Frame-stack replay: exact stacks against a real envpool Breakout run, eligibility,
sampling, priorities, memory."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from buffers_reference import assert_frequencies, nstep_windows

from rljax.buffers import atari, make_atari_replay
from rljax.types import Transition

GAMMA = 0.9


def example(obs_shape) -> Transition:
    return Transition(
        obs=jnp.zeros(obs_shape, jnp.uint8),
        action=jnp.zeros((), jnp.int32),
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), bool),
        truncated=jnp.zeros((), bool),
        next_obs=jnp.zeros(obs_shape, jnp.uint8),
    )


@pytest.fixture(scope="module")
def breakout():
    """700 steps of 2 Breakout envs with random actions, as the training loop sees them.

    ``episodic_life=True`` gives life losses (terminated, stack continues) and
    ``max_episode_steps=200`` truncations; game overs give fresh stacks.
    """
    envpool = pytest.importorskip("envpool")
    b, steps = 2, 700
    env = envpool.make(
        "Breakout-v5",
        env_type="gymnasium",
        num_envs=b,
        seed=0,
        max_episode_steps=200,
        episodic_life=True,
    )
    obs, _ = env.reset()
    rng = np.random.default_rng(0)
    rec = {k: [] for k in ("obs", "action", "reward", "term", "trunc", "next_obs", "valid", "hard")}
    valid = np.ones(b, bool)
    for _ in range(steps):
        action = rng.integers(0, 4, b).astype(np.int32)
        next_obs, reward, term, trunc, info = env.step(action)
        for k, v in zip(rec, (obs, action, reward, term, trunc, next_obs, valid), strict=False):
            rec[k].append(np.asarray(v))
        rec["hard"].append(info["terminated"].astype(bool) | trunc)  # game over or time limit
        valid = ~(term | trunc)  # the next step is envpool's reset step
        obs = next_obs
    data = {k: np.stack(v) for k, v in rec.items()}
    life_losses = data["term"] & ~data["hard"]
    assert life_losses.any() and data["trunc"].any() and (data["term"] & data["hard"]).any()
    return data


def explicit_first(data) -> np.ndarray:
    """``obs_t`` is a fresh stack iff step ``t - 2`` was a game over or truncation."""
    first = np.zeros_like(data["valid"])
    first[0] = True
    first[2:] = data["hard"][:-2]
    return first


@functools.cache
def compiled(n: int, alpha, rows: int, b: int, obs_shape: tuple):
    buf = make_atari_replay(rows * b, b, batch_size=16, n=n, gamma=GAMMA, alpha=alpha)
    return buf, buf.init(example(obs_shape)), jax.jit(buf.add), jax.jit(buf.get)


@pytest.mark.parametrize("n,alpha,detect", [(1, None, True), (3, 0.6, False)])
def test_returns_exactly_the_env_stacks(breakout, n, alpha, detect):
    d, b, rows = breakout, 2, 64
    buf, state, add, get = compiled(n, alpha, rows, b, d["obs"].shape[2:])
    first = explicit_first(d)
    windows = [
        {
            w[0]: w
            for w in nstep_windows(
                d["reward"][:, e], d["term"][:, e], d["trunc"][:, e], d["valid"][:, e], n, GAMMA
            )
        }
        for e in range(b)
    ]
    slots = jnp.arange(rows * b)
    checked = 0
    for t in range(len(d["obs"])):
        step = Transition(
            *(d[k][t] for k in ("obs", "action", "reward", "term", "trunc", "next_obs"))
        )
        state = add(state, step, d["valid"][t], None if detect else first[t])
        if t % 50 != 49:
            continue
        leaves = np.asarray(state.tree.leaves)
        got = jax.tree.map(np.asarray, get(state, slots))
        for p in range(max(0, t - rows + 1), t + 1):
            for e in range(b):
                s = (p % rows) * b + e
                eligible = bool(d["valid"][p, e]) and t - rows + 4 <= p <= t - n
                assert (leaves[s] > 0) == eligible, (t, p, e)
                if not eligible:
                    continue
                _, ret, disc, last = windows[e][p]
                np.testing.assert_array_equal(got.obs[s], d["obs"][p, e])
                np.testing.assert_array_equal(got.next_obs[s], d["next_obs"][last, e])
                assert got.action[s] == d["action"][p, e]
                assert got.reward[s] == pytest.approx(ret, rel=1e-6)
                assert got.discount[s] == pytest.approx(disc, rel=1e-6)
                checked += 1
        assert int(state.size) == int((leaves > 0).sum())
    assert checked > 1000


def synthetic_stream(steps: int, b: int, rng: np.random.Generator):
    """Tiny 4x2x2 frame stacks with envpool's stacking rules and random episode ends."""
    stack = np.zeros((b, 4, 2, 2), np.uint8)
    counter = 1
    valid = np.ones(b, bool)
    hard = np.zeros(b, bool)
    out = []
    for _ in range(steps):
        term = rng.random(b) < 0.1
        trunc = ~term & (rng.random(b) < 0.05)
        new = np.zeros_like(stack)
        for e in range(b):
            frame = np.full((2, 2), counter % 251, np.uint8)
            counter += 1
            if not valid[e] and hard[e]:  # reset step after a game over: fresh stack
                new[e] = frame
            else:
                new[e, :3], new[e, 3] = stack[e, 1:], frame
        out.append((stack, term, trunc, new, valid.copy()))
        hard = trunc | (term & (rng.random(b) < 0.5))
        valid = ~(term | trunc)
        stack = new
    return out


def test_samples_only_eligible_slots_uniformly_and_by_priority():
    b, rows = 3, 20
    rng = np.random.default_rng(0)
    stream = synthetic_stream(57, b, rng)
    for alpha in (None, 0.6):
        buf = make_atari_replay(rows * b, b, 20_000, n=2, gamma=GAMMA, alpha=alpha, min_size=1)
        state = buf.init(example((4, 2, 2)))
        add = jax.jit(buf.add)
        for t, (obs, term, trunc, nxt, valid) in enumerate(stream):
            action = np.full(b, t, np.int32)
            state = add(
                state, Transition(obs, action, np.ones(b, np.float32), term, trunc, nxt), valid
            )
        if alpha is not None:
            idx = jnp.arange(rows * b)
            state = jax.jit(buf.update_priorities)(state, idx, jnp.arange(rows * b) % 7)
        leaves = np.asarray(state.tree.leaves).astype(np.float64)
        assert bool(buf.can_sample(state)) and int(state.size) == int((leaves > 0).sum())
        s = jax.jit(buf.sample)(state, jax.random.key(1))
        assert_frequencies(np.asarray(s.indices), leaves)
        np.testing.assert_allclose(
            np.asarray(s.probabilities), (leaves / leaves.sum())[np.asarray(s.indices)], rtol=1e-5
        )
        if alpha is None:
            assert np.all(np.asarray(s.weights) == 1)


def test_update_priorities_skips_ineligible_slots_and_duplicates_last_win():
    b, rows = 2, 10
    buf = make_atari_replay(rows * b, b, batch_size=4, n=1, alpha=1.0, eps=0.0)
    state, add = buf.init(example((4, 2, 2))), jax.jit(buf.add)
    rng = np.random.default_rng(3)
    for obs, _, _, nxt, _ in synthetic_stream(5, b, rng):
        no_end = np.zeros(b, bool)
        step = Transition(obs, np.zeros(b, np.int32), np.zeros(b, np.float32), no_end, no_end, nxt)
        state = add(state, step)
    before = np.asarray(state.tree.leaves)
    eligible = np.nonzero(before > 0)[0]
    ineligible = np.nonzero(before == 0)[0]
    idx = jnp.array([eligible[0], ineligible[0], eligible[0], eligible[1]])
    state = buf.update_priorities(state, idx, jnp.array([5.0, 7.0, 3.0, 2.0]))
    after = np.asarray(state.tree.leaves)
    assert after[eligible[0]] == 3.0 and after[eligible[1]] == 2.0 and after[ineligible[0]] == 0


def test_size_counts_positive_leaves_as_the_ring_wraps_and_nan_keeps_priorities():
    """``size`` (kept from the flags) equals the number of positive leaves after every add,
    through three wraps of the ring with resets, life losses and truncations; a NaN TD error
    leaves a slot's priority as it was, so the two never part."""
    b, rows = 2, 10
    buf = make_atari_replay(rows * b, b, batch_size=2, n=2, alpha=0.6, min_size=2)
    state, add = buf.init(example((4, 2, 2))), jax.jit(buf.add)
    rng = np.random.default_rng(5)
    for obs, term, trunc, nxt, valid in synthetic_stream(37, b, rng):
        step = Transition(obs, np.zeros(b, np.int32), np.zeros(b, np.float32), term, trunc, nxt)
        state = add(state, step, valid)
        assert int(state.size) == int((np.asarray(state.tree.leaves) > 0).sum())
    before = np.asarray(state.tree.leaves)
    eligible = jnp.asarray(np.nonzero(before > 0)[0])
    state = buf.update_priorities(state, eligible, jnp.full(eligible.shape, jnp.nan))
    np.testing.assert_array_equal(np.asarray(state.tree.leaves), before)
    assert int(state.size) == len(eligible) and bool(buf.can_sample(state))


def test_vmap_over_seeds():
    b, rows, seeds = 2, 8, 2
    buf = make_atari_replay(rows * b, b, batch_size=8, n=2, alpha=0.6)
    states = jax.vmap(lambda _: buf.init(example((4, 2, 2))))(jnp.arange(seeds))
    streams = [synthetic_stream(11, b, np.random.default_rng(s)) for s in range(seeds)]
    add = jax.jit(jax.vmap(buf.add))
    for t in range(11):
        steps = [
            Transition(o, np.zeros(b, np.int32), np.ones(b, np.float32), te, tr, nx)
            for o, te, tr, nx, _ in (streams[s][t] for s in range(seeds))
        ]
        valid = jnp.stack([jnp.asarray(streams[s][t][4]) for s in range(seeds)])
        states = add(states, jax.tree.map(lambda *x: jnp.stack(x), *steps), valid)
    keys = jax.random.split(jax.random.key(0), seeds)
    out = jax.jit(jax.vmap(buf.sample, in_axes=(0, 0, None)))(states, keys, 0.5)
    add1, sample1 = jax.jit(buf.add), jax.jit(buf.sample)
    for s in range(seeds):
        single = buf.init(example((4, 2, 2)))
        for o, te, tr, nx, v in streams[s]:
            step = Transition(o, np.zeros(b, np.int32), np.ones(b, np.float32), te, tr, nx)
            single = add1(single, step, v)
        ref = sample1(single, keys[s], 0.5)
        np.testing.assert_array_equal(np.asarray(out.indices[s]), np.asarray(ref.indices))
        np.testing.assert_array_equal(
            np.asarray(out.transition.obs[s]), np.asarray(ref.transition.obs)
        )


def test_one_million_transitions_fit_in_8_gib():
    buf = make_atari_replay(1_000_000, 8, batch_size=32, n=3, alpha=0.6)
    shapes = jax.eval_shape(buf.init, example((4, 84, 84)))
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    assert total / 1e6 < 84 * 84 + 32  # about one frame per transition
    assert total < 8 * 2**30


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(capacity=0, num_envs=1, batch_size=1), "capacity must be an integer >= 1, got 0"),
        (dict(capacity=4, num_envs=8, batch_size=1), "capacity must be >= num_envs=8, got 4"),
        (dict(capacity=64, num_envs=0, batch_size=1), "num_envs"),
        (dict(capacity=64, num_envs=2, batch_size=1, n=0), "n must be an integer >= 1, got 0"),
        (dict(capacity=64, num_envs=2, batch_size=1, alpha=-1.0), "alpha"),
        (dict(capacity=64, num_envs=2, batch_size=1, gamma=2.0), "gamma"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_atari_replay(**kwargs)


def test_too_few_rows_and_wrong_obs_shape():
    with pytest.raises(ValueError, match="capacity // num_envs must be >= n \\+ stack = 7"):
        make_atari_replay(12, 2, batch_size=1, n=3).init(example((4, 2, 2)))
    buf = make_atari_replay(40, 2, batch_size=1)
    state = buf.init(example((4, 2, 2)))
    bad = Transition(*(jnp.zeros((3,) + x.shape, x.dtype) for x in example((4, 2, 2))))
    with pytest.raises(ValueError, match="obs must be"):
        atari.add(state, bad)

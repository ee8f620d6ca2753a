"""Running statistics, observation normalization and reward scaling against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.normalization import (
    RewardScalerState,
    RunningStats,
    init_reward_scaler,
    init_stats,
    normalize_obs,
    scale_rewards,
    update_stats,
)

B, OBS = 3, (2,)
_update_jit = jax.jit(update_stats)


def _batches(seed, rows, masked):
    """Batches ``[n, B, *OBS]`` of uneven sizes, their masks and the counted samples."""
    rng = np.random.default_rng(seed)
    batches, masks, counted = [], [], []
    for i, n in enumerate(rows):
        x = (rng.normal(size=(n, B) + OBS) * [1.0, 3.0] + [5.0, -2.0] + i).astype(np.float32)
        m = rng.random((n, B)) < 0.6 if masked else np.ones((n, B), bool)
        x[~m] = np.nan  # masked samples may be garbage
        batches.append(x)
        masks.append(m if masked else None)
        counted.append(x[m])
    return batches, masks, np.concatenate(counted).astype(np.float64)


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=20, deadline=None)
@given(rows=st.lists(st.sampled_from([1, 2, 5]), min_size=1, max_size=5),
       masked=st.booleans(), seed=st.integers(0, 1000))
def test_running_stats_equal_the_stats_of_all_batches(jit, rows, masked, seed):
    batches, masks, counted = _batches(seed, rows, masked)
    stats = init_stats(OBS)
    update = _update_jit if jit else update_stats
    for x, m in zip(batches, masks, strict=True):
        stats = update(stats, x, m)
    assert stats.mean.dtype == stats.var.dtype == stats.count.dtype == jnp.float32
    assert float(stats.count) == len(counted)
    if len(counted) == 0:
        np.testing.assert_array_equal(stats.mean, 0.0)
        np.testing.assert_array_equal(stats.var, 1.0)
        return
    np.testing.assert_allclose(stats.mean, counted.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.var, counted.var(axis=0), rtol=1e-4, atol=1e-5)


def test_scalar_stats_and_flat_batches():
    rng = np.random.default_rng(2)
    xs = [rng.normal(3.0, 2.0, size=n).astype(np.float32) for n in (1, 7, 4)]
    stats = init_stats(())
    for x in xs:
        stats = update_stats(stats, x)
    allx = np.concatenate(xs).astype(np.float64)
    np.testing.assert_allclose([stats.mean, stats.var], [allx.mean(), allx.var()], rtol=1e-5)


def test_merge_is_stable_for_a_large_offset():
    # Variance 1e-2 around 1e3: a one-pass E[x^2] - E[x]^2 in float32 would lose it.
    rng = np.random.default_rng(3)
    xs = [(1e3 + 0.1 * rng.normal(size=(64,) + OBS)).astype(np.float32) for _ in range(10)]
    stats = init_stats(OBS)
    for x in xs:
        stats = update_stats(stats, x)
    allx = np.concatenate(xs).astype(np.float64)
    np.testing.assert_allclose(stats.var, allx.var(axis=0), rtol=1e-3)


def test_fully_masked_batch_changes_nothing():
    stats = update_stats(init_stats(OBS), np.ones((4,) + OBS, np.float32) * [1.0, 2.0])
    stats = update_stats(stats, np.full((2, B) + OBS, 3.0, np.float32) * [1, -1])
    again = update_stats(stats, np.full((2, B) + OBS, np.nan, np.float32), np.zeros((2, B), bool))
    for a, b in zip(jax.tree.leaves(stats), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)


def test_large_float32_counts_keep_weighting_new_samples():
    # 1e8 samples of mean 0, then 1e6 of mean 1: the mean moves by about 1e6 / 1.01e8.
    stats = RunningStats(mean=jnp.zeros(()), var=jnp.ones(()), count=jnp.float32(1e8))
    stats = update_stats(stats, jnp.ones((1_000_000,)))
    np.testing.assert_allclose(stats.mean, 1e6 / (1e8 + 1e6), rtol=1e-5)
    np.testing.assert_allclose(stats.count, 1.01e8, rtol=1e-7)


def test_float64_count_under_x64_is_exact():
    with jax.enable_x64(True):
        stats = init_stats(OBS, count_dtype=jnp.float64)
        stats = stats.replace(count=jnp.float64(2.0**30))
        stats = update_stats(stats, np.zeros((1,) + OBS, np.float32))
        assert stats.count.dtype == jnp.float64 and stats.mean.dtype == jnp.float32
        assert float(stats.count) == 2.0**30 + 1


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("clip", [10.0, 1.5, None])
def test_normalize_obs_matches_numpy(jit, clip):
    rng = np.random.default_rng(4)
    stats = RunningStats(mean=jnp.array([1.0, -2.0]), var=jnp.array([4.0, 0.0]),
                         count=jnp.float32(10))
    obs = rng.normal(scale=3.0, size=(5, B) + OBS).astype(np.float32)
    fn = jax.jit(normalize_obs, static_argnames="clip") if jit else normalize_obs
    got = fn(stats, obs, clip=clip)
    want = (obs - np.array([1.0, -2.0])) / np.sqrt(np.array([4.0, 0.0]) + 1e-8)
    if clip is not None:
        want = np.clip(want, -clip, clip)
    assert got.dtype == jnp.float32 and got.shape == obs.shape
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_normalize_integer_observations():
    stats = update_stats(init_stats((3,)), np.arange(12, dtype=np.uint8).reshape(4, 3))
    got = normalize_obs(stats, np.arange(12, dtype=np.uint8).reshape(4, 3), clip=None)
    col = np.arange(12).reshape(4, 3).astype(np.float64)
    np.testing.assert_allclose(got, (col - col.mean(0)) / col.std(0), rtol=1e-5)


@pytest.mark.parametrize("fn, args, match", [
    (update_stats, (init_stats(OBS), np.zeros((4, 3))), r"batch must be \[\.\.\., \*\(2,\)\]"),
    (update_stats, (init_stats(OBS), np.zeros((4, 2)), np.ones(3, bool)), "mask must"),
    (normalize_obs, (init_stats((4, 4)), np.zeros((2, 4))), "obs must"),
])
def test_bad_shapes_are_refused(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def ref_scale_rewards(rewards, dones, masks, gamma, eps=1e-8):
    """Python loop: per-env discounted return, variance of every return seen so far."""
    ret = np.zeros(rewards.shape[1])
    seen, out = [], []
    for r, d, m in zip(rewards, dones, masks, strict=True):
        for i in range(len(r)):
            if m[i]:
                ret[i] = gamma * ret[i] + r[i]
                seen.append(ret[i])
        var = np.var(seen) if seen else 1.0
        out.append(r / np.sqrt(var + eps))
        ret[d] = 0.0
    return np.array(out), ret, np.array(seen)


def _reward_inputs(seed, steps=25):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(1.0, 2.0, size=(steps, B)).astype(np.float32)
    dones = rng.random((steps, B)) < 0.15
    masks = np.ones((steps, B), bool)
    # envpool: the step after an episode end is a reset step with reward 0.
    masks[1:] = ~dones[:-1]
    rewards[~masks] = 0.0
    return rewards, dones, masks


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_reward_scaling_matches_python_loop(jit, use_mask):
    gamma = 0.9
    rewards, dones, masks = _reward_inputs(5)
    if not use_mask:
        masks = np.ones_like(masks)

    def step(state, xs):
        r, d, m = xs
        return scale_rewards(state, r, d, gamma, mask=m if use_mask else None)

    if jit:
        state, scaled = jax.jit(lambda s, xs: jax.lax.scan(step, s, xs))(
            init_reward_scaler(B), (rewards, dones, masks))
    else:
        state, scaled = init_reward_scaler(B), []
        for xs in zip(rewards, dones, masks, strict=True):
            state, out = step(state, xs)
            scaled.append(out)
        scaled = np.stack(scaled)
    want, ret, seen = ref_scale_rewards(rewards.astype(np.float64), dones, masks, gamma)
    # The first steps, where few returns have been seen, scale by up to 1e4: compare
    # relative to each value.
    np.testing.assert_allclose(scaled, want, rtol=2e-4)
    np.testing.assert_allclose(state.ret, ret, rtol=1e-5, atol=1e-6)
    assert float(state.stats.count) == len(seen)
    np.testing.assert_allclose(state.stats.var, seen.var(), rtol=1e-4)


def test_reward_scaling_clip_and_done_reset():
    state = RewardScalerState(ret=jnp.array([2.0, -1.0]),
                              stats=RunningStats(mean=jnp.zeros(()), var=jnp.full((), 0.25),
                                                 count=jnp.float32(1e6)))
    state, scaled = scale_rewards(state, jnp.array([1.0, -3.0]), jnp.array([True, False]), 0.5,
                                  clip=4.0)
    # Returns 0.5 * 2 + 1 = 2 and 0.5 * -1 - 3 = -3.5 barely move a variance over 1e6 samples.
    np.testing.assert_allclose(scaled, [2.0, -4.0], rtol=1e-4)
    np.testing.assert_allclose(state.ret, [0.0, -3.5])


@pytest.mark.parametrize("kwargs, match", [
    ({"reward": jnp.zeros(2), "done": jnp.zeros(B, bool)}, "reward and done must"),
    ({"mask": jnp.ones(2, bool)}, "mask must"),
    ({"gamma": 1.5}, "gamma must"),
])
def test_reward_scaling_bad_inputs_are_refused(kwargs, match):
    args = {"reward": jnp.zeros(B), "done": jnp.zeros(B, bool), "gamma": 0.99} | kwargs
    with pytest.raises(ValueError, match=match):
        scale_rewards(init_reward_scaler(B), **args)

"""Members and data shards composed around either env backend (rljax.parallel.envs): member
k's envs and shard k's envs are the single run's, step for step."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs
from rljax.parallel import data_parallel
from rljax.parallel import envs as parallel_envs

STEPS, LIMIT = 24, 8  # short episodes: several end within the steps


def _actions(spec, members, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, spec.num_actions, (STEPS, members, spec.num_envs)).astype(np.int32)


@functools.cache
def _scanner(step):
    def body(state, action):
        state, out = step(state, action)
        return state, (state.obs, out)

    return jax.jit(lambda s, a: jax.lax.scan(body, s, a))


def _scan(step, state, actions):
    """``(final state, (obs, StepResult) [T, ...])`` of ``step`` over ``actions``; compiled
    once per step function (a JAX-native env's single runs share theirs)."""
    return jax.device_get(_scanner(step)(state, actions))


@pytest.mark.parametrize("task", ["CartPole-v1", "gymnax:CartPole-v1"])
def test_member_k_steps_the_single_runs_envs(task):
    seeds = [5, 6, 5]  # a sweep repeats seeds: members 0 and 2 step the same envs
    env = parallel_envs.members(task, 3, seeds, max_episode_steps=LIMIT)
    assert env.spec.num_envs == 3 and env.spec.num_seeds == 3
    assert env.spec.vmappable == task.startswith("gymnax:")
    actions = _actions(env.spec, len(seeds))
    actions[:, 2] = actions[:, 0]
    state = env.reset()
    shapes = env.state_shapes()
    assert jax.tree.map(lambda x: x.shape, state) == jax.tree.map(lambda x: x.shape, shapes)
    reset_obs = np.asarray(state.obs)
    final, (obs, out) = _scan(jax.vmap(env.step), state, actions)
    assert out.episode_end.sum() > 3
    for k, seed in enumerate(seeds):
        one = envs.make(task, 3, seed, max_episode_steps=LIMIT)
        if one.spec.vmappable:
            first = one.reset()
            one_final, (one_obs, one_out) = _scan(one.step, first, actions[:, k])
            np.testing.assert_array_equal(reset_obs[k], first.obs)
            np.testing.assert_array_equal(obs[:, k], one_obs)
            for a, b in zip(out, one_out, strict=True):
                np.testing.assert_array_equal(a[:, k], b)
            for a, b in zip(jax.tree.leaves(final.stats), jax.tree.leaves(one_final.stats),
                            strict=True):
                np.testing.assert_array_equal(a[k], b)
        else:  # a second XLA pool of the task is not stepped here: envpool's host step
            first, _ = one.pool.reset()
            np.testing.assert_array_equal(reset_obs[k], first)
            for t in range(STEPS):
                o, r, term, trunc, _ = one.host_step(actions[t, k])
                np.testing.assert_array_equal(obs[t, k], o)
                np.testing.assert_array_equal(out.reward[t, k], r)
                np.testing.assert_array_equal(out.terminated[t, k], term)
                np.testing.assert_array_equal(out.truncated[t, k], trunc)
            ends = out.episode_end[:, k]
            assert int(final.stats.episodes[k]) == int(ends.sum())
            np.testing.assert_array_equal(out.episode_return[:, k][ends],
                                          out.episode_length[:, k][ends])  # CartPole: 1/step
    np.testing.assert_array_equal(obs[:, 0], obs[:, 2])
    assert not np.array_equal(obs[:, 0], obs[:, 1])


def test_pooled_members_step_only_under_vmap():
    env = parallel_envs.members("CartPole-v1", 2, [0, 1])
    state = jax.tree.map(lambda x: x[0], env.reset())
    with pytest.raises(Exception, match="under jax.vmap"):
        jax.block_until_ready(jax.jit(env.step)(state, jnp.zeros(2, jnp.int32)))
    with pytest.raises(ValueError, match="member_seeds must hold num_seeds=2"):
        parallel_envs.members("CartPole-v1", 2, [0, 2**31])


def test_shards_step_the_single_runs_envs_and_count_its_episodes():
    """Two shards of gymnax CartPole's 4 envs, as on two devices (the shard axis here is a
    named vmap axis, which ``Split`` gathers over as over a mesh axis), against the run."""
    task, n, count = "gymnax:CartPole-v1", 2, 2
    split = data_parallel.split()
    shards = [parallel_envs.shard(task, n, 5, i, count, split, max_episode_steps=LIMIT)
              for i in range(count)]
    one = envs.make(task, n * count, 5, max_episode_steps=LIMIT)
    actions = _actions(one.spec, 1)[:, 0]
    state = jax.tree.map(lambda *x: jnp.stack(x), *[s.reset() for s in shards])
    step = jax.vmap(shards[0].step, axis_name=data_parallel.AXIS)
    final, (obs, out) = _scan(step, state, actions.reshape(STEPS, count, n))
    one_final, (one_obs, one_out) = _scan(one.step, one.reset(), actions)
    np.testing.assert_array_equal(obs.reshape(one_obs.shape), one_obs)
    for a, b in zip(out, one_out, strict=True):
        np.testing.assert_array_equal(np.asarray(a).reshape(b.shape), b)
    assert one_out.episode_end.sum() > 3
    for a, b in zip(jax.tree.leaves(final.stats), jax.tree.leaves(one_final.stats),
                    strict=True):
        for i in range(count):  # the whole run's statistics, on every shard
            np.testing.assert_array_equal(a[i], b)
    # envpool's shards are seeded alike: their first observations are the run's.
    pools = [parallel_envs.shard("CartPole-v1", n, 5, i, count, split) for i in range(count)]
    whole, _ = envs.make("CartPole-v1", n * count, 5).pool.reset()
    np.testing.assert_array_equal(np.concatenate([p.pool.reset()[0] for p in pools]), whole)

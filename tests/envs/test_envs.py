"""The envpool adapter on CartPole, Reacher (float64) and Breakout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs


def _scan_steps(env, actions):
    """Runs the XLA step over ``actions [T, B, ...]`` in one jitted scan."""
    def body(state, action):
        state, out = env.step(state, action)
        return state, out

    run = jax.jit(lambda s, a: jax.lax.scan(body, s, a))
    return run(env.reset(), jnp.asarray(actions))


def _random_actions(spec, steps, seed=0):
    rng = np.random.default_rng(seed)
    if spec.discrete:
        return rng.integers(0, spec.num_actions, (steps, spec.num_envs)).astype(np.int32)
    low, high = np.array(spec.action_low), np.array(spec.action_high)
    return rng.uniform(low, high, (steps, spec.num_envs) + spec.action_shape).astype(np.float32)


@pytest.mark.parametrize("task,obs_shape,obs_dtype,discrete", [
    ("CartPole-v1", (4,), np.float32, True),
    ("Reacher-v5", (10,), np.float32, False),
    ("Breakout-v5", (4, 84, 84), np.uint8, True),
])
def test_spec_and_xla_step_match_host_step(task, obs_shape, obs_dtype, discrete):
    steps = 60 if task != "Breakout-v5" else 20
    env = envs.make(task, num_envs=3, seed=7)
    spec = env.spec
    assert spec.obs_shape == obs_shape and spec.obs_dtype == obs_dtype
    assert spec.discrete == discrete
    if not discrete:
        assert spec.action_shape == (2,) and spec.action_low == (-1.0, -1.0)
    actions = _random_actions(spec, steps)
    final, out = _scan_steps(env, actions)
    assert out.obs.dtype == obs_dtype and out.obs.shape == (steps, 3) + obs_shape
    twin = envs.make(task, num_envs=3, seed=7)
    twin.pool.reset()
    for t in range(steps):
        obs, rew, term, trunc, _ = twin.host_step(actions[t])
        np.testing.assert_allclose(np.asarray(out.obs[t]), obs, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(out.reward[t]), rew, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(out.terminated[t]), term)
        np.testing.assert_array_equal(np.asarray(out.truncated[t]), trunc)
    assert jax.config.read("jax_enable_x64") is False


def test_truncation_is_not_termination_and_reset_steps_are_invalid():
    env = envs.make("Reacher-v5", num_envs=2, seed=0)  # 50-step episodes, never terminal
    _, out = _scan_steps(env, np.zeros((120, 2, 2), np.float32))
    trunc = np.asarray(out.truncated)
    assert not np.asarray(out.terminated).any()
    # Steps 0..49 are the first episode; step 50 is envpool's reset step.
    assert trunc[49].all() and not trunc[:49].any()
    valid = np.asarray(out.valid)
    assert not valid[50].any() and valid[:50].all() and valid[51:101].all()
    assert np.all(np.asarray(out.reward[50]) == 0.0)
    np.testing.assert_array_equal(np.asarray(out.episode_length[49]), [50, 50])


def test_cartpole_termination_flags():
    env = envs.make("CartPole-v1", num_envs=4, seed=1)
    _, out = _scan_steps(env, np.zeros((40, 4), np.int32))  # always push left: falls fast
    term = np.asarray(out.terminated)
    assert term.any() and not np.asarray(out.truncated).any()
    valid = np.asarray(out.valid)
    t, b = np.nonzero(term[:-1])
    assert len(t) and not valid[t + 1, b].any()


def test_bad_inputs_fail_before_building():
    with pytest.raises(ValueError, match="unknown task id 'CartPol-v1'.*'CartPole-v1'"):
        envs.make("CartPol-v1", 2)
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1, got 0"):
        envs.make("CartPole-v1", 0)
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("CartPole-v1", 2.5)
    with pytest.raises(ValueError, match="seed"):
        envs.make("CartPole-v1", 2, seed=-1)
    with pytest.raises(ValueError, match="unknown option 'max_episode_step'.*max_episode_steps"):
        envs.make("CartPole-v1", 2, max_episode_step=10)
    with pytest.raises(ValueError, match="set by rljax.envs.make"):
        envs.make("CartPole-v1", 2, batch_size=1)
    with pytest.raises(ValueError, match="max_episode_steps must be an integer >= 1"):
        envs.make("CartPole-v1", 2, max_episode_steps=0)


def test_seeds_are_disjoint_and_a_pool_of_runs_envs_matches_single_runs():
    assert not set(envs.env_seeds(0, 64)) & set(envs.env_seeds(1, 64))
    # Every env its own seed: one pool holding two runs' envs (rljax.parallel.envs).
    pool = envs.make("CartPole-v1", num_envs=6, seed=envs.env_seeds(5, 3) + envs.env_seeds(6, 3))
    assert pool.spec.num_envs == 6 and not pool.spec.vmappable
    obs, _ = pool.pool.reset()
    for k in range(2):
        single, _ = envs.make("CartPole-v1", num_envs=3, seed=5 + k).pool.reset()
        np.testing.assert_array_equal(obs[3 * k:3 * k + 3], single)


def test_atari_defaults_and_override():
    env = envs.make("Breakout-v5", 1, episodic_life=False)
    opts = dict(env.spec.options)
    assert opts["episodic_life"] is False and opts["reward_clip"] is True
    assert env.spec.is_atari and env.spec.num_actions == 4

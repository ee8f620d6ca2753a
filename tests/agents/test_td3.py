"""TD3: the clipped double-Q target with target policy smoothing against NumPy, the update's
losses, delayed actor and target updates, exploration and the random phase, bounds,
determinism, errors; and a short learning run on Reacher-v5 next to a corrupted critic."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _corruptible import assert_finite_once_learning, flagged_runs, with_negated_rewards

from rljax import envs
from rljax.agents import td3
from rljax.agents.base import Parallel
from rljax.buffers.nstep import NStepTransition
from rljax.buffers.prioritized import PrioritizedSample
from rljax.envs.spec import EnvSpec
from rljax.envs.stats import recent_mean_return
from rljax.loops.factory import off_policy
from rljax.records import configure

B, N, OBS, ACT = 4, 16, 5, 2
LOW, HIGH = (-1.0, -2.0), (1.0, 0.5)
HALF = (np.asarray(HIGH) - np.asarray(LOW)) / 2
SPEC = EnvSpec(task_id="Reacher-v5", num_envs=B, obs_shape=(OBS,), obs_dtype=np.float32,
               num_actions=None, action_shape=(ACT,), action_low=LOW, action_high=HIGH,
               max_episode_steps=50, reward_threshold=-3.75, is_atari=False)
SMALL = configure(td3.TD3Config, num_envs=B, actor_hidden=(8, 6), critic_hidden=(7, 5),
                  batch_size=N, learning_starts=N, buffer_size=64, random_steps=0)


# --- NumPy reference networks ----------------------------------------------------------


def np_mlp(params, x):
    x = np.asarray(x, np.float64)
    for name in ("hidden_0", "hidden_1"):
        x = np.maximum(x @ np.asarray(params[name]["kernel"], np.float64)
                       + np.asarray(params[name]["bias"]), 0.0)
    return x @ np.asarray(params["out"]["kernel"], np.float64) + np.asarray(
        params["out"]["bias"])


def np_actor(variables, obs):
    mid = (np.asarray(HIGH) + np.asarray(LOW)) / 2
    return mid + HALF * np.tanh(np_mlp(variables["params"], obs))


def np_critic(variables, j, obs, action):
    """Critic ``j`` of the twin critic."""
    params = jax.tree.map(lambda x: x[j], variables["params"])
    return np_mlp(params, np.concatenate([obs, action], axis=-1))[:, 0]


def np_target(state, tr, noise):
    """``r + discount * min_j Q'_j(s', clip(mu'(s') + noise, low, high))``."""
    a_t = np.clip(np_actor(state.target_actor, tr.next_obs) + noise, LOW, HIGH)
    q_t = np.minimum(np_critic(state.target_critic, 0, tr.next_obs, a_t),
                     np_critic(state.target_critic, 1, tr.next_obs, a_t))
    return np.asarray(tr.reward) + np.asarray(tr.discount) * q_t


# --- fixtures --------------------------------------------------------------------------


@functools.cache
def jitted(name, config=SMALL, spec=SPEC):
    """``td3.<name>`` bound to ``config`` and jitted, compiled once per config."""
    return jax.jit(functools.partial(getattr(td3, name), config, spec,
                                     td3.parts(config, spec)))


def perturb(tree, key, scale=0.3):
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [x + scale * jax.random.normal(k, x.shape)
                                        for x, k in zip(leaves, keys, strict=True)])


@functools.cache
def random_state(config=SMALL, seed=0):
    """A state whose four networks (and the two critics of each pair) all differ."""
    keys = jax.random.split(jax.random.key(seed), 5)
    state = jitted("init", config)(keys[0])
    return state.replace(**{name: {"params": perturb(getattr(state, name)["params"], k)}
                            for name, k in zip(("actor", "critic", "target_actor",
                                                "target_critic"), keys[1:], strict=True)})


def random_batch(seed=1):
    rng = np.random.default_rng(seed)
    tr = NStepTransition(
        obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32),
        action=jnp.asarray(rng.uniform(LOW, HIGH, size=(N, ACT)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=N), jnp.float32),
        discount=jnp.asarray(rng.choice([0.0, 0.99, 0.99**3], size=N), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32))
    weights = jnp.asarray(rng.uniform(0.1, 1.0, size=N), jnp.float32)
    return PrioritizedSample(jnp.arange(N), tr, jnp.full(N, 1.0 / N), weights)


def tree_equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                     strict=True))


OBS_B = jnp.asarray(np.random.default_rng(2).normal(size=(B, OBS)), jnp.float32)


# --- target ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_critic_target_matches_numpy(jit):
    """Smoothing noise ``0.2 h eps`` clipped to ``+-0.5 h`` per dimension (``h`` the
    half-range), the smaller target critic; no key, no noise."""
    state, tr = random_state(), random_batch().transition
    fn = jitted("critic_target") if jit else functools.partial(td3.critic_target, SMALL, SPEC,
                                                       td3.parts(SMALL, SPEC))
    key = jax.random.key(5)
    eps = np.asarray(jax.random.normal(key, (N, ACT)), np.float64)
    noise = np.clip(0.2 * HALF * eps, -0.5 * HALF, 0.5 * HALF)
    np.testing.assert_allclose(fn(state, tr, key), np_target(state, tr, noise), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(fn(state, tr, None), np_target(state, tr, 0.0), rtol=1e-5,
                               atol=1e-5)


def test_smoothing_noise_is_clipped_inside_the_target():
    """With a huge noise scale every component is clipped: the target action is
    ``mu'(s') +- c h``, the sign that of the draw."""
    config = dataclasses.replace(SMALL, target_noise=100.0, target_noise_clip=0.3)
    state, tr = random_state(config), random_batch().transition
    key = jax.random.key(7)
    sign = np.sign(np.asarray(jax.random.normal(key, (N, ACT))))
    y = jitted("critic_target", config)(state, tr, key)
    np.testing.assert_allclose(y, np_target(state, tr, 0.3 * HALF * sign), rtol=1e-5,
                               atol=1e-5)
    # Unclipped noise of this size would put every action on a bound.
    corner = np.where(sign > 0, np.inf, -np.inf)
    assert not np.allclose(y, np_target(state, tr, corner), rtol=1e-3)


def test_td_error_is_noise_free():
    state, tr = random_state(), random_batch().transition
    td = jitted("td_error")(state, tr)
    q1 = np_critic(state.critic, 0, np.asarray(tr.obs), np.asarray(tr.action))
    np.testing.assert_allclose(td, np_target(state, tr, 0.0) - q1, rtol=1e-5, atol=1e-5)


def test_init_two_distinct_critics_and_copied_targets():
    state = jitted("init")(jax.random.key(0))
    kernel = np.asarray(state.critic["params"]["out"]["kernel"])
    assert kernel.shape == (2, 5, 1) and not np.allclose(kernel[0], kernel[1])
    assert tree_equal(state.target_critic, state.critic)
    assert tree_equal(state.target_actor, state.actor)
    assert int(state.step) == 0


# --- update ----------------------------------------------------------------------------


def test_update_losses_and_td_errors_match_numpy():
    """One update: the weighted twin critic loss toward the smoothed target (noise from
    the update's key), the first critic's TD errors, then the actor's loss on the new
    critics, reported ``policy_delay``-fold."""
    state, batch = random_state(), random_batch()
    tr, w = batch.transition, np.asarray(batch.weights)
    key = jax.random.key(3)
    new, metrics, td = jitted("update")(state, batch, key)
    eps = np.asarray(jax.random.normal(key, (N, ACT)), np.float64)
    y = np_target(state, tr, np.clip(0.2 * HALF * eps, -0.5 * HALF, 0.5 * HALF))
    obs, action = np.asarray(tr.obs), np.asarray(tr.action)
    tds = [y - np_critic(state.critic, j, obs, action) for j in range(2)]
    np.testing.assert_allclose(metrics["critic_loss"],
                               sum(np.mean(w * 0.5 * d**2) for d in tds), rtol=1e-5)
    np.testing.assert_allclose(td, tds[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(metrics["q_mean"], np.mean(y - tds[0]), rtol=1e-5, atol=1e-6)
    actor_loss = -np.mean(np_critic(new.critic, 0, obs, np_actor(state.actor, obs)))
    np.testing.assert_allclose(metrics["actor_loss"], 2 * actor_loss, rtol=1e-5, atol=1e-6)
    assert int(new.step) == 1
    for name in ("actor", "critic"):
        assert not tree_equal(getattr(new, name), getattr(state, name)), name


def test_delayed_actor_and_target_updates():
    """Over 5 updates the critics move every time, the actor and the targets on updates
    0, 2 and 4 only (ceil(5 / 2) = 3 times), the targets by Polyak averaging."""
    state, batch, tau = random_state(), random_batch(), SMALL.tau
    update = jitted("update")
    moved = {name: [] for name in ("critic", "actor", "target_actor", "target_critic")}
    for i in range(5):
        new, metrics, _ = update(state, batch, jax.random.key(i))
        for name in moved:
            moved[name].append(not tree_equal(getattr(new, name), getattr(state, name)))
        if moved["actor"][-1]:
            for online, target in (("actor", "target_actor"), ("critic", "target_critic")):
                expected = jax.tree.map(lambda t, o: (1 - tau) * t + tau * o,
                                        getattr(state, target), getattr(new, online))
                jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-6,
                                               atol=1e-7), getattr(new, target), expected)
        else:
            assert float(metrics["actor_loss"]) == 0.0
        state = new
    assert moved["critic"] == [True] * 5
    for name in ("actor", "target_actor", "target_critic"):
        assert moved[name] == [True, False, True, False, True], name
    assert sum(moved["actor"]) == math.ceil(5 / SMALL.policy_delay)


def test_update_is_deterministic_in_its_key():
    state, batch = random_state(), random_batch()
    update = jitted("update")
    a = update(state, batch, jax.random.key(1))
    b = update(state, batch, jax.random.key(1))
    c = update(state, batch, jax.random.key(2))
    assert tree_equal(a, b)
    assert not np.allclose(a.metrics["critic_loss"], c.metrics["critic_loss"])


def test_grad_transform_comes_before_both_optimizers():
    """A grad_transform that zeroes the gradients leaves every network where it was."""
    state, batch = random_state(), random_batch()
    zeroed = td3.parts(SMALL, SPEC, Parallel(grad_transform=optax.scale(0.0)))
    init = jax.jit(functools.partial(td3.init, SMALL, SPEC, zeroed))
    fresh = init(jax.random.key(0))
    state = state.replace(actor_opt=fresh.actor_opt, critic_opt=fresh.critic_opt)
    update = jax.jit(functools.partial(td3.update, SMALL, SPEC, zeroed))
    new, metrics, _ = update(state, batch, jax.random.key(1))
    assert float(metrics["critic_grad_norm"]) > 0
    for name in ("actor", "critic"):
        assert tree_equal(getattr(new, name), getattr(state, name)), name


# --- acting ----------------------------------------------------------------------------


def act(config, state, obs, key, step, spec=SPEC):
    action, extras, new = jitted("act", config, spec)(state, obs, key, step,
                                                      jnp.zeros(obs.shape[0], bool))
    assert extras == {}
    assert tree_equal(new, state)
    return np.asarray(action)


def test_policy_matches_numpy_and_acting_is_deterministic_in_its_key():
    state = random_state()
    np.testing.assert_allclose(jitted("policy")(state.actor, OBS_B),
                               np_actor(state.actor, OBS_B), rtol=1e-5, atol=1e-6)
    a1 = act(SMALL, state, OBS_B, jax.random.key(1), 0)
    np.testing.assert_array_equal(a1, act(SMALL, state, OBS_B, jax.random.key(1), 0))
    assert not np.allclose(a1, act(SMALL, state, OBS_B, jax.random.key(2), 0))


def test_exploration_noise_is_gaussian_in_half_ranges():
    """Noise std ``0.1 h`` per dimension: 5 and 1 for half-ranges 50 and 10."""
    b = 8192
    spec = configure(SPEC, num_envs=b, action_low=(-50.0, -10.0),
                               action_high=(50.0, 10.0))
    config = configure(SMALL, num_envs=b)
    state = td3.init(config, spec, td3.parts(config, spec), jax.random.key(0))
    obs = jnp.zeros((b, OBS))
    noise = act(config, state, obs, jax.random.key(1), 0, spec) - np.asarray(
        td3.policy(config, spec, td3.parts(config, spec), state.actor, obs))
    np.testing.assert_allclose(noise.std(axis=0), [5.0, 1.0], rtol=0.05)
    assert np.all(np.abs(noise.mean(axis=0)) < 5 * np.array([5.0, 1.0]) / np.sqrt(b))


def test_actions_within_bounds():
    config = dataclasses.replace(SMALL, exploration_noise=100.0)
    state = random_state()
    action = act(config, state, OBS_B, jax.random.key(1), 0)
    assert np.all(action >= LOW) and np.all(action <= HIGH)
    assert np.any(action == LOW) and np.any(action == HIGH)
    greedy = np.asarray(jitted("policy")(state.actor, 100 * OBS_B))
    assert np.all(greedy >= LOW) and np.all(greedy <= HIGH)


def test_random_phase_covers_whole_updates_of_random_steps():
    """random_steps=10 with 4 envs x 1 step per update: updates 0-2 (env steps 0-11)
    act uniformly at random, update 3 with the actor."""
    config = configure(SMALL, random_steps=10, exploration_noise=0.0)
    state = random_state()
    greedy = np.asarray(jitted("policy")(state.actor, OBS_B))
    for step in (0, 2):
        action = act(config, state, OBS_B, jax.random.key(step), step)
        assert np.all(action >= LOW) and np.all(action <= HIGH)
        assert not np.allclose(action, greedy)
    # (The same network in two compiled programs: equal up to float32 rounding.)
    np.testing.assert_allclose(act(config, state, OBS_B, jax.random.key(3), 3), greedy,
                               rtol=1e-6, atol=1e-7)
    # Uniform over the box: mean (low + high) / 2, std (high - low) / sqrt(12).
    b = 8192
    config_b = configure(config, num_envs=b)
    spec = dataclasses.replace(SPEC, num_envs=b)
    state_b = td3.init(config_b, spec, td3.parts(config_b, spec), jax.random.key(0))
    uniform = act(config_b, state_b, jnp.zeros((b, OBS)),
                  jax.random.key(9), 0, spec)
    np.testing.assert_allclose(uniform.mean(0), (np.asarray(LOW) + HIGH) / 2, atol=0.05)
    np.testing.assert_allclose(uniform.std(0), 2 * HALF / np.sqrt(12), rtol=0.05)


# --- errors ----------------------------------------------------------------------------


def test_discrete_action_space_refused():
    spec = dataclasses.replace(SPEC, task_id="CartPole-v1", num_actions=2, action_shape=(),
                               action_low=None, action_high=None)
    with pytest.raises(ValueError, match=r"TD3 needs a continuous.*CartPole-v1"):
        td3.make_td3(SMALL, spec)


@pytest.mark.parametrize("field,value,match", [
    ("policy_delay", 0, r"policy_delay must be an integer >= 1, got 0"),
    ("tau", 1.5, r"tau must be a number in \[0.0, 1.0\], got 1.5"),
    ("target_noise", -0.1, r"target_noise must be a number in \[0.0, 1000000.0\]"),
    ("random_steps", -1, r"random_steps must be an integer in \[0, 2147483647\]"),
    ("learning_starts", 10, r"learning_starts must be an integer in \[256, 1000000\]"),
    ("activation", "sigmoid", r"activation must be one of relu, .*got 'sigmoid'"),
    ("beta", 0.4, r"beta must be a schedule"),
])
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        configure(td3.TD3Config, **{field: value})


def test_config_for_the_loop():
    config = configure(td3.TD3Config, num_envs=4, env_steps_per_update=3)
    assert config.loop.steps_per_update == 12 and config.replay.min_replay == 25_000
    assert configure(config, learning_starts=None).replay.min_replay == 1_000_000
    hash(config)


# --- learning --------------------------------------------------------------------------


LEARN = configure(td3.TD3Config, num_envs=10, env_steps_per_update=2, grad_steps=10, batch_size=128,
                      learning_starts=1_000, random_steps=1_000, buffer_size=50_000,
                      actor_hidden=(64, 64), critic_hidden=(64, 64), actor_lr=1e-3,
                      critic_lr=1e-3, gamma=0.97)
# Of 250 updates, 5,000 env steps each. The corrupted run is cut at 1: it is at -85 or
# below from the first chunk on (measured per chunk: -85, -100, -100, ..., -100 over 8),
# while the clean run passes -8 from its fifth (-21, -10.7, -8.9, -8.8, -8.0, -7.0, -7.1,
# -6.8).
LEARN_CHUNKS = {False: 6, True: 1}


@pytest.mark.optimized
@pytest.mark.slow
def test_td3_learns_reacher_and_a_corrupted_critic_does_not():
    env = envs.make("Reacher-v5", LEARN.loop.num_envs, seed=0)
    trainer = off_policy(with_negated_rewards(td3.make_td3(LEARN, env.spec)), env, LEARN,
                         250, threshold=None)
    returns = {}
    for corrupt, (state, metrics) in flagged_runs(trainer, 0, LEARN_CHUNKS).items():
        assert_finite_once_learning(metrics["critic_loss"], LEARN)
        returns[corrupt] = float(recent_mean_return(state.env.stats))
    # Random actions score about -43 per episode, an arm that stays put about -10.
    assert returns[False] > -8.0, returns
    assert returns[True] < -15.0, returns

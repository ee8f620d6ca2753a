"""The JAX-native backend (gymnax 1.x, Craftax): episode semantics, seeds, learners' bootstraps,
members and resume."""

from __future__ import annotations

import functools
import json
import os
import shutil

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs
from rljax.agents import ppo, pqn
from rljax.envs import native
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.records import configure
from rljax.types import Rollout

CARTPOLE = "gymnax:CartPole-v1"


def _cartpole_successor(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """gymnax's CartPole dynamics from an observation (which is the whole state)."""
    env, params = gymnax.make("CartPole-v1")

    def one(o, a):
        state = env.reset_env(jax.random.key(0), params)[1].replace(
            x=o[0], x_dot=o[1], theta=o[2], theta_dot=o[3])
        return env.step_env(jax.random.key(0), state, a, params)[0]

    return np.asarray(jax.vmap(one)(jnp.asarray(obs), jnp.asarray(action)))


def test_truncation_hands_over_the_final_and_the_first_observation():
    env = envs.make(CARTPOLE, 6, 3, max_episode_steps=5)
    assert env.spec.resets_in_step and env.spec.max_episode_steps == 5
    state, step = env.reset(), jax.jit(env.step)
    rng = np.random.default_rng(0)
    truncations = 0
    for t in range(12):
        action = jnp.asarray(rng.integers(0, 2, 6), jnp.int32)
        before = np.asarray(state.obs)
        state, out = step(state, action)
        np.testing.assert_allclose(out.obs, _cartpole_successor(before, np.asarray(action)),
                                   rtol=1e-5, atol=1e-6)
        assert bool(np.all(out.valid))  # no reset step: every step is a transition
        ended = np.asarray(out.terminated | out.truncated)
        np.testing.assert_array_equal(np.asarray(state.done), ended)
        if ended.any():  # the next obs is a fresh episode's, not the final one
            fresh = np.asarray(state.obs)[ended]
            assert np.all(np.abs(fresh) <= 0.05) and not np.allclose(fresh, out.obs[ended])
        np.testing.assert_array_equal(np.asarray(state.obs)[~ended], np.asarray(out.obs)[~ended])
        truncations += int(np.asarray(out.truncated & ~out.terminated).sum())
        if t == 4:  # the time limit: every env still running is truncated at step 5
            np.testing.assert_array_equal(out.truncated | out.terminated, np.ones(6, bool))
    assert truncations >= 6


def test_per_env_seeds_reproduce_the_single_runs_envs():
    one = [envs.make(CARTPOLE, 4, s).reset().obs for s in (5, 6, 7)]
    assert not np.allclose(one[0], one[1])
    # One env of every run's envs, each with its own seed (how members and shards are
    # built: tests/parallel/test_envs.py).
    many = envs.make(CARTPOLE, 12, [e for s in (5, 6, 7) for e in envs.env_seeds(s, 4)])
    np.testing.assert_array_equal(many.reset().obs, np.concatenate(one))
    half = envs.make(CARTPOLE, 2, envs.env_seeds(5, 4)[2:]).reset().obs
    np.testing.assert_array_equal(half, one[0][2:])
    with pytest.raises(ValueError, match="sequence of num_envs=2"):
        envs.make(CARTPOLE, 2, [1, 2, 3])


def test_bad_ids_and_options_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="gymnax:CartPole-v1"):
        envs.make("gymnax:CartPol-v1", 2)
    with pytest.raises(ValueError, match="allowed: gymnax, craftax"):
        envs.make("gymnx:CartPole-v1", 2)
    with pytest.raises(ValueError, match="max_episode_steps"):
        envs.make(CARTPOLE, 2, max_episode_step=5)
    with pytest.raises(ValueError, match="integer >= 1"):
        envs.make(CARTPOLE, 2, max_episode_steps=0)


def test_minatar_observations_are_flattened_unless_asked():
    assert envs.make("gymnax:Breakout-MinAtar", 2).spec.obs_shape == (400,)
    grid = envs.make("gymnax:Breakout-MinAtar", 2, flatten=False)
    assert grid.spec.obs_shape == (10, 10, 4) and grid.reset().obs.shape == (2, 10, 10, 4)


@pytest.mark.parametrize("task", [
    "Breakout-MinAtar", *[pytest.param(t, marks=pytest.mark.slow)
                          for t in native._BINARY_OBS if t != "Breakout-MinAtar"]])
def test_binary_tasks_observe_only_zeros_and_ones(task):
    """The tasks whose final observations a rollout keeps as bool: every entry of their
    observations, first and final, is 0 or 1 over a few hundred random steps (episodes cut
    at 100 steps, so that every task's envs reset)."""
    env = envs.make(f"gymnax:{task}", 16, 0, max_episode_steps=100)
    assert env.spec.compact_obs_dtype == np.dtype(bool)

    def step(state, key):
        action = jax.random.randint(key, (16,), 0, env.spec.num_actions)
        state, out = env.step(state, action)
        return state, (state.obs, out.obs, out.episode_end)

    _, (obs, final, ended) = jax.jit(lambda s: jax.lax.scan(
        step, s, jax.random.split(jax.random.key(1), 300)))(env.reset())
    assert np.asarray(ended).any()
    for x in (obs, final):
        assert np.isin(np.asarray(x), (0.0, 1.0)).all() and np.asarray(x).any()
    assert envs.make(CARTPOLE, 2).spec.compact_obs_dtype is None


def _rollout(agent_make, config, rollout_len=16):
    """One on-policy rollout of ``config`` on CartPole with a 5-step time limit, as the
    on-policy loop hands it to ``update``."""
    env = envs.make(CARTPOLE, 4, 0, max_episode_steps=5)
    agent = agent_make(config, env.spec)
    keep = agent._replace(update=lambda state, batch, key: (state, {"batch": batch}, None))
    trainer = make_on_policy_trainer(keep, env, rollout_len=rollout_len, updates_per_chunk=1)
    _, metrics = jax.jit(trainer.chunk_fn)(trainer.init(jax.random.key(0)))
    return agent, jax.tree.map(lambda x: x[0], metrics["batch"])


def _gae_targets(reward, terminated, ended, v, v_next, gamma, lam):
    adv, out = np.zeros(reward.shape[1]), np.zeros_like(reward)
    for t in reversed(range(len(reward))):
        delta = reward[t] + gamma * (1 - terminated[t]) * v_next[t] - v[t]
        adv = delta + gamma * lam * (1 - ended[t]) * adv
        out[t] = adv + v[t]
    return out


def _as_envpool_rollout(batch: Rollout) -> Rollout:
    """The same rollout as an env with a reset step would give the learner: obs[t + 1] is
    the final observation wherever an episode ended."""
    return batch._replace(obs=batch.obs.at[1:].set(batch.final_obs), final_obs=None)


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_on_policy_learners_bootstrap_from_the_final_observation(algo):
    """On a truncated step the target bootstraps from the real final observation (not the
    next episode's first), on a terminated one from nothing: the learner's values on a
    same-step-reset rollout equal those on the same rollout laid out with obs[t+1] = final
    observation, which the NumPy-checked envpool path computes."""
    make, config = {
        "ppo": (ppo.make_ppo, configure(ppo.PPOConfig, num_envs=4, rollout_len=16)),
        "pqn": (pqn.make_pqn, configure(pqn.PQNConfig, num_envs=4, rollout_len=16))}[algo]
    agent, batch = _rollout(make, config)
    assert batch.final_obs is not None
    ended = np.asarray(batch.terminated | batch.truncated)
    assert np.asarray(batch.truncated).any() and np.asarray(batch.terminated).any() or ended.any()
    assert not np.allclose(np.asarray(batch.obs[1:])[ended], np.asarray(batch.final_obs)[ended])
    spec = envs.make(CARTPOLE, 4, 0, max_episode_steps=5).spec
    state = agent.init(jax.random.key(1))
    flat = _as_envpool_rollout(batch)
    if algo == "pqn":
        net = pqn.network(config, spec)

        def acted(b):  # on-policy: the greedy values recorded when acting are this state's
            return b._replace(extras={"q_max": jnp.max(net.apply(state.params, b.obs[:-1]),
                                                       axis=-1)})

        limit = spec.max_episode_steps  # 5 of 16 steps: the critic on truncated rows only
        got = pqn.targets(config, net, state.params, acted(batch), limit)
        want = pqn.targets(config, net, state.params, acted(flat), limit)
        # ... equal to the network on every next observation (no values recorded).
        np.testing.assert_allclose(want, pqn.targets(config, net, state.params,
                                                     flat._replace(extras={})), rtol=1e-5,
                                   atol=1e-6)
        wrong = pqn.targets(config, net, state.params, acted(batch._replace(final_obs=None)),
                            limit)
    else:  # GAE in NumPy with the critic's values of the final observations
        parts = ppo.parts(config, spec)
        # On-policy: the values recorded when acting are this state's critic's.
        batch = batch._replace(extras={**batch.extras, "value": ppo.forward(
            parts, state.params, batch.obs[:-1])[1]})
        got = ppo.samples(config, spec, parts, state, batch)[0].target
        wrong = ppo.samples(config, spec, parts, state, batch._replace(final_obs=None))[0].target
        v_next = np.asarray(ppo.forward(parts, state.params, batch.final_obs)[1])
        want = _gae_targets(np.asarray(batch.reward), np.asarray(batch.terminated), ended,
                            np.asarray(batch.extras["value"]), v_next, config.gamma,
                            config.gae_lambda)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, wrong, rtol=1e-4)  # the test can tell the difference


def test_off_policy_replay_stores_the_final_observation_and_cuts_at_termination():
    """Every stored 1-step transition's next_obs is CartPole's successor of its obs (never
    a fresh episode's first observation), with discount 0 exactly where it terminated."""
    from rljax.agents.dqn import DQNConfig
    from rljax.run.build import build
    from rljax.run.config import RunConfig

    run = RunConfig(algo="dqn", env_id=CARTPOLE, env_options=(("max_episode_steps", 5),),
                    config=configure(DQNConfig, num_envs=4, env_steps_per_update=4, batch_size=8,
                                     buffer_size=256, learning_starts=64, n_step=1,
                                     prioritized=False, hidden_sizes=(16,),
                                     target_period=4),
                    total_steps=512, chunk_steps=128, seed=0, tensorboard=False)
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    state, _ = trainer.chunk(state)
    storage = jax.device_get(state.memory.replay.storage)
    size = int(jax.device_get(state.memory.replay.size))
    obs, action = np.asarray(storage.obs[:size]), np.asarray(storage.action[:size])
    np.testing.assert_allclose(storage.next_obs[:size], _cartpole_successor(obs, action),
                               rtol=1e-5, atol=1e-6)
    next_obs = np.asarray(storage.next_obs[:size])
    terminal = (np.abs(next_obs[:, 0]) > 2.4) | (np.abs(next_obs[:, 2]) > 0.2095)
    np.testing.assert_array_equal(np.asarray(storage.discount[:size]) == 0, terminal)
    assert (np.asarray(storage.discount[:size]) > 0).sum() > (~terminal).sum() // 2


@pytest.mark.slow
def test_member_of_a_four_seed_run_and_resume_continue_the_single_run(tmp_path):
    """Member 2 of a 4-seed gymnax run starts as the single run of its seed does (same envs,
    same first update); a run stopped after one chunk and resumed continues its episodes:
    its second chunk equals the uninterrupted run's (episode counts and returns)."""
    import rljax

    common = dict(chunk_steps=2048, tensorboard=False, checkpoint_every=2048)
    whole = rljax.train("gymnax-cartpole-ppo", run_dir=str(tmp_path / "whole"), seed=3,
                        total_steps=2 * 2048, **common)
    # The copy resumed from its first checkpoint: the state a run stopped there saved
    # (the newer one set aside).
    shutil.copytree(tmp_path / "whole", tmp_path / "part")
    resumed = rljax.train(resume=str(tmp_path / "part"), from_checkpoint=2048,
                          total_steps=2 * 2048)
    assert resumed.run_dir == str(tmp_path / "part")
    rows = [json.loads(x) for x in open(os.path.join(resumed.run_dir, "metrics.jsonl"))]
    keys = ("env_steps", "episodes", "episode_return_mean", "return_mean_100")
    assert [[r[k] for k in keys] for r in rows] == [[r[k] for k in keys]
                                                   for r in whole.metrics]
    many = rljax.train("gymnax-cartpole-ppo", run_dir=str(tmp_path / "many"), seed=1,
                       num_seeds=4, total_steps=2048, **common)
    seed3 = [json.loads(x) for x in open(os.path.join(many.run_dir, "seed_3",
                                                       "metrics.jsonl"))][0]
    first = whole.metrics[0]
    assert seed3["episodes"] == first["episodes"]
    np.testing.assert_allclose(seed3["episode_return_mean"], first["episode_return_mean"],
                               rtol=1e-6)


def test_craftax_steps_and_counts_achievements():
    pytest.importorskip("craftax")
    env = envs.make("craftax:Craftax-Classic-Symbolic-v1", 2, 0, max_episode_steps=3)
    assert env.spec.num_actions == 17 and env.achievement_names[0] == "collect_wood"
    # The three steps in one scanned program: XLA:CPU compiled Craftax's step (world
    # generation included) in 8.5 CPU-s as a loop body, 24 CPU-s as a program of its own.
    state, out = jax.jit(lambda s: jax.lax.scan(
        lambda s, a: env.step(s, a), s, jnp.zeros((3, 2), jnp.int32)))(env.reset())
    out = jax.tree.map(lambda x: x[-1], out)
    assert bool(np.all(out.truncated)) and not bool(np.any(out.terminated))
    assert float(state.extras["episodes"]) == 2.0
    assert state.extras["achieved"].shape == (len(env.achievement_names),)


def test_suite_registry_lists_every_offered_task():
    ids = envs.task_ids()
    assert "gymnax:Breakout-MinAtar" in ids["gymnax"]
    assert "craftax:Craftax-Classic-Symbolic-v1" in ids["craftax"]
    assert "CartPole-v1" in ids["envpool"]
    assert functools.reduce(lambda a, b: a and b, [envs.is_native(t) for t in native.task_ids()])


def test_hidden_velocities_wrap_a_jax_native_env_as_they_wrap_envpool():
    """``obs_indices`` keeps the same entries of gymnax's CartPole as of envpool's."""
    env = envs.make(CARTPOLE, 3, 2, obs_indices=(0, 2))
    full = envs.make(CARTPOLE, 3, 2)
    state, whole = env.reset(), full.reset()
    action = jnp.ones(3, jnp.int32)
    state, out = env.step(state, action)
    whole, whole_out = full.step(whole, action)
    assert env.spec.obs_shape == (2,) and dict(env.spec.options)["obs_indices"] == (0, 2)
    np.testing.assert_array_equal(state.obs, np.asarray(whole.obs)[:, [0, 2]])
    np.testing.assert_array_equal(out.obs, np.asarray(whole_out.obs)[:, [0, 2]])

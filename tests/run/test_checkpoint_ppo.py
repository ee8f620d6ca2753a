"""A PPO run's checkpoint carries its observation normalizer and reward scaler: the loaded
run has the trained statistics (not fresh ones) and acts as the trained policy does, and a
resumed run continues them."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.records import configure
from rljax.run.config import RunConfig

CONFIG = configure(PPOConfig, num_envs=4, rollout_len=16, num_epochs=1, num_minibatches=2,
                   hidden_sizes=(16,), normalize_obs=True, reward_scaling=True)


@pytest.mark.slow
def test_checkpoint_restores_the_normalizer_and_resume_continues_it(tmp_path):
    steps = 4 * CONFIG.loop.steps_per_update
    run = RunConfig(algo="ppo", env_id="Pendulum-v1", config=CONFIG, total_steps=steps,
                    chunk_steps=2 * CONFIG.loop.steps_per_update, logdir=str(tmp_path),
                    tensorboard=False)
    trained = rljax.train(run)
    stats = trained.state.agent.obs_stats
    assert float(stats.count) > 0 and not np.allclose(np.asarray(stats.var), 1.0)

    loaded = rljax.load(trained.run_dir)
    for a, b in zip(jax.tree.leaves((trained.state.agent.obs_stats,
                                     trained.state.agent.reward_scaler)),
                    jax.tree.leaves((loaded.state.agent.obs_stats,
                                     loaded.state.agent.reward_scaler)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32) * 3
    np.testing.assert_array_equal(loaded.policy(obs), trained.policy(obs))

    longer = rljax.train(dataclasses.replace(run, total_steps=2 * steps),
                         resume=trained.run_dir)
    assert int(longer.state.env_steps) == 2 * steps
    # Every env step after the resume adds one observation to the saved statistics.
    np.testing.assert_allclose(float(longer.state.agent.obs_stats.count),
                               float(stats.count) + steps, rtol=1e-6)

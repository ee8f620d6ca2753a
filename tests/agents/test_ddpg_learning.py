"""DDPG learns Reacher-v5 in a short run; the same run with a corrupted critic target
(rewards of the wrong sign) does not. Both runs share one compiled program: the
corruption is a flag in the train state."""

from __future__ import annotations

import pytest
from _corruptible import assert_finite_once_learning, flagged_runs, with_negated_rewards

from rljax import envs
from rljax.agents import ddpg
from rljax.envs.stats import recent_mean_return
from rljax.records import configure
from rljax.run.registry import get_algorithm

CONFIG = configure(ddpg.DDPGConfig, num_envs=10, env_steps_per_update=2, grad_steps=6,
                   batch_size=64,
                         learning_starts=1_000, buffer_size=50_000, actor_hidden=(64, 64),
                         critic_hidden=(64, 64), batch_norm=False, tau=5e-3,
                         target_critic_init="copy",
                         noise="gaussian", gaussian_sigma=0.3, noise_scale=1.0,
                         noise_decay=0.9, actor_weight_decay=0.0, critic_weight_decay=0.0)
UPDATES_PER_CHUNK = 250  # 5,000 env steps
# The corrupted run is cut at 1: measured per chunk, it is at -76 after its first and
# below -100 after its second and third, while the clean run reaches -8.3 after its third
# and -7.2 to -7.8 from its fifth to its eighth (-30.4, -9.4, -8.3, -8.3, -7.8, -7.2, -7.7,
# -7.8).
CHUNKS = {False: 8, True: 1}


@pytest.mark.optimized
@pytest.mark.slow
def test_ddpg_learns_reacher_and_a_corrupted_critic_does_not():
    env = envs.make("Reacher-v5", CONFIG.loop.num_envs, seed=0)
    agent = with_negated_rewards(ddpg.make_ddpg(CONFIG, env.spec))
    trainer = get_algorithm("ddpg").make_trainer(agent, env, CONFIG, UPDATES_PER_CHUNK, None)
    returns = {}
    for corrupt, (state, metrics) in flagged_runs(trainer, 0, CHUNKS).items():
        assert_finite_once_learning(metrics["critic_loss"], CONFIG)
        returns[corrupt] = float(recent_mean_return(state.env.stats))
    # An arm that does not move (the initial policy, or one whose critic learns nothing)
    # scores about -10 per episode; this run reaches about -7.8 after 40k env steps. The
    # sign-flipped critic drives the arm away from the target: -76 after 5k, about -100
    # after 10k.
    assert returns[False] > -8.0, returns
    assert returns[True] < -15.0, returns

"""Agent families beyond A2C through the run assembler: member k of a 4-seed program equals
the single run with seed k (parameters and metrics after a chunk), and the members differ.

Members are one ``vmap`` of the single trainer, whatever the agent; what can break it is
state an agent keeps beside its parameters, or randomness it draws in its update. Two cases
cover those: PPO on continuous actions (the observation normalizer's statistics, Gaussian
actions, shuffled minibatches) and SAC (the off-policy loop's replay, a learned temperature
and actions sampled in the update). A2C is tests/parallel/test_members.py's, DQN's
off-policy loop tests/parallel/test_sweep.py's.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _backend import MEMBER_ATOL, MEMBER_RTOL

from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.records import configure
from rljax.run.build import build
from rljax.run.config import RunConfig

CASES = {
    "ppo-continuous": ("ppo", "Pendulum-v1", configure(PPOConfig, num_envs=4, rollout_len=4,
                                                       num_minibatches=2, num_epochs=2,
                                                       hidden_sizes=(16,), normalize_obs=True)),
    "sac": ("sac", "Pendulum-v1", configure(SACConfig, num_envs=2, env_steps_per_update=2,
                                            grad_steps=2,
                                            batch_size=16, buffer_size=256, learning_starts=16,
                                            random_steps=8, actor_hidden=(16,),
                                            critic_hidden=(16,))),
}
FIRST, K = 3, 2


def _one_chunk(run: RunConfig):
    _, agent, trainer, _ = build(run)
    state = trainer.init(jax.random.key(run.seed))
    state, metrics = trainer.chunk(state)
    return jax.device_get((state, metrics)), agent


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_member_k_of_four_seeds_equals_the_single_run(case):
    algo, env_id, config = CASES[case]
    steps = 6 * config.loop.steps_per_update
    common = dict(algo=algo, env_id=env_id, config=config, total_steps=steps,
                  chunk_steps=steps)
    (many, many_metrics), agent = _one_chunk(RunConfig(seed=FIRST, num_seeds=4, **common))
    (one, one_metrics), _ = _one_chunk(RunConfig(seed=FIRST + K, **common))
    many_params, one_params = agent.params(many.agent), agent.params(one.agent)
    for a, b in zip(jax.tree.leaves(many_params), jax.tree.leaves(one_params), strict=True):
        assert a.shape == (4,) + b.shape
        np.testing.assert_allclose(a[K], b, rtol=MEMBER_RTOL, atol=MEMBER_ATOL)
    for name, value in one_metrics.items():
        np.testing.assert_allclose(many_metrics[name][K], value, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    assert int(many.env_steps[K]) == int(one.env_steps) == steps
    kernel = max(jax.tree.leaves(many_params), key=np.size)
    assert not np.allclose(kernel[0], kernel[1])

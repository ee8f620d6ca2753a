"""Off-policy loop: each gradient step's TD errors become priorities before the next
sample, and the last step's after the learning phase (the loop writes them at the top of
the next step, which is the same order of operations)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax import envs
from rljax.agents.base import Agent, Update
from rljax.loops.memory import make_memory
from rljax.loops.off_policy import make_off_policy_trainer

NUM_ENVS, ENV_STEPS, GRAD_STEPS, BATCH, ALPHA, EPS = 4, 40, 6, 8, 0.6, 1e-3


class Record(NamedTuple):
    step: jax.Array
    indices: jax.Array  # [GRAD_STEPS, BATCH]
    probabilities: jax.Array
    td: jax.Array


def td_of(indices, step):
    # Deterministic and below 1, so priorities stay under the initial max priority 1.
    return 0.01 + 0.9 * ((indices * 7 + step * 13) % 17) / 17.0


def recording_agent() -> Agent:
    def init(key):
        zeros = lambda dtype=jnp.float32: jnp.zeros((GRAD_STEPS, BATCH), dtype)  # noqa: E731
        return Record(jnp.zeros((), jnp.int32), zeros(jnp.int32), zeros(), zeros())

    def act(state, obs, key, step, new_episode):
        return jax.random.randint(key, (obs.shape[0],), 0, 2), {}, state

    def update(state, batch, key):
        td = td_of(batch.indices, state.step)
        state = Record(state.step + 1, state.indices.at[state.step].set(batch.indices),
                       state.probabilities.at[state.step].set(batch.probabilities),
                       state.td.at[state.step].set(td))
        return Update(state, {"loss": jnp.zeros(())}, td)

    return Agent(init, act, update, lambda p, o: o[:, 0].astype(jnp.int32), lambda s: None)


def test_priorities_written_before_each_next_sample_and_after_the_last():
    env = envs.make("CartPole-v1", NUM_ENVS, seed=0)
    memory = make_memory(capacity=1_000, num_envs=NUM_ENVS, batch_size=BATCH, n_step=1,
                         gamma=0.9, alpha=ALPHA, eps=EPS, min_size=50, frames=False)
    trainer = make_off_policy_trainer(recording_agent(), env, memory,
                                      env_steps_per_update=ENV_STEPS, grad_steps=GRAD_STEPS,
                                      updates_per_chunk=1)
    state, _ = trainer.chunk(trainer.init(jax.random.key(0)))
    rec = jax.device_get(state.agent)
    size = int(state.memory.replay.size)
    assert int(rec.step) == GRAD_STEPS and size >= 50

    # Sequential reference: every stored transition starts at priority 1 (the max).
    p = np.ones(size)
    for g in range(GRAD_STEPS):
        np.testing.assert_allclose(rec.probabilities[g], p[rec.indices[g]] / p.sum(), rtol=1e-5)
        for i, td in zip(rec.indices[g], rec.td[g], strict=True):  # the last duplicate wins
            p[i] = (abs(td) + EPS) ** ALPHA
    leaves = np.asarray(state.memory.replay.tree.nodes[:size])
    np.testing.assert_allclose(leaves, p, rtol=1e-5)

"""The compiled off-policy loop with DQN: no recompiles, learning starts, priorities,
frame replay's notion of full, chunk sizes, and a short CartPole run."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs
from rljax.agents.dqn import DQNConfig, make_dqn
from rljax.buffers import sum_tree
from rljax.envs.stats import last_episodes
from rljax.loops.memory import make_memory
from rljax.records import configure
from rljax.run.build import build
from rljax.run.presets import from_preset
from rljax.run.registry import get_algorithm
from rljax.types import Transition

ALPHA, EPS, MIN_SIZE = 0.6, 1e-6, 200
CONFIG = configure(DQNConfig, num_envs=4, env_steps_per_update=2, grad_steps=1, batch_size=16,
                   buffer_size=1024, learning_starts=MIN_SIZE, hidden_sizes=(32,),
                   alpha=ALPHA, priority_eps=EPS, epsilon=((0, 1.0), (100, 0.1)))


def _recording(agent):
    """The agent, with each gradient step's sampled indices and TD errors in its metrics."""

    def update(state, batch, key):
        state, metrics, td = agent.update(state, batch, key)
        return state, dict(metrics, idx=batch.indices.astype(jnp.float32), td=td), td

    return agent._replace(update=update)


@pytest.fixture(scope="module")
def loop():
    env = envs.make("CartPole-v1", num_envs=CONFIG.loop.num_envs, seed=0)
    agent = _recording(make_dqn(CONFIG, env.spec))
    trainer = get_algorithm("dqn").make_trainer(agent, env, CONFIG, 16, None)
    return env, trainer


def test_learning_waits_for_min_size_and_second_chunk_does_not_recompile(loop):
    _, trainer = loop
    state = trainer.init(jax.random.key(0))
    rows = []
    for _ in range(3):
        state, metrics = trainer.chunk(state)
        rows.append(jax.device_get(metrics))
        assert trainer.chunk._cache_size() == 1
    size = np.concatenate([r["replay_size"] for r in rows])
    learned = np.isfinite(np.concatenate([r["loss"] for r in rows]))
    # Learning happens in an update exactly when replay held MIN_SIZE transitions after
    # that update's env steps; not before.
    np.testing.assert_array_equal(learned, size >= MIN_SIZE)
    assert 0 < learned.sum() < len(learned)
    assert int(state.agent.step) == learned.sum() * CONFIG.loop.grad_steps
    assert int(state.batches) == learned.sum() * CONFIG.loop.grad_steps
    assert int(state.env_steps) == 3 * trainer.steps_per_chunk


def test_new_priorities_reach_the_buffer(loop):
    _, trainer = loop
    state = trainer.init(jax.random.key(1))
    for _ in range(3):
        state, metrics = trainer.chunk(state)
    idx = np.asarray(metrics["idx"][-1]).astype(np.int64)  # last update of the chunk
    td = np.asarray(metrics["td"][-1])
    leaves = np.asarray(sum_tree.get(state.memory.replay.tree, idx))
    np.testing.assert_allclose(leaves, (np.abs(td) + EPS) ** ALPHA, rtol=1e-5)
    assert np.ptp(leaves) > 0  # priorities are not all the initial maximum


def test_frame_replay_counts_as_full_once_every_row_is_written():
    """Frame storage never has all slots sampleable, so 'full' is every row written."""
    b, rows, s = 2, 16, 4
    memory = make_memory(capacity=b * rows, num_envs=b, batch_size=4, n_step=1, gamma=0.99,
                         alpha=0.6, eps=1e-6, min_size=b * rows, frames=True)
    frame = jnp.zeros((b, s, 6, 6), jnp.uint8)
    step = Transition(frame, jnp.zeros(b, jnp.int32), jnp.zeros(b), jnp.zeros(b, bool),
                      jnp.zeros(b, bool), frame)
    state = memory.init(jax.tree.map(lambda x: x[0], step))
    add = jax.jit(memory.add)
    ready = []
    for _ in range(rows + 2):
        state = add(state, step, jnp.ones(b, bool))
        ready.append(bool(memory.can_sample(state)))
    assert int(memory.size(state)) < b * rows
    assert ready == [False] * (rows - 1) + [True] * 3


def test_image_chunks_are_capped_without_compiling():
    env = envs.make("Breakout-v5", num_envs=2, seed=0)
    config = configure(DQNConfig, num_envs=2, buffer_size=256)
    algo = get_algorithm("dqn")
    agent = make_dqn(config, env.spec)
    assert algo.make_trainer(agent, env, config, 1000, None).updates_per_chunk == 32
    unrolled = configure(config, unroll=True)
    assert algo.make_trainer(agent, env, unrolled, 1000, None).updates_per_chunk == 2


@pytest.mark.parametrize("clip", [None, 1.0])
def test_priority_max_clip_bounds_the_priorities(monkeypatch, clip):
    """With replay.priority_max_clip = c a TD error of 100 sets the priority (c + eps)^alpha;
    without it, (100 + eps)^alpha. Initial priorities (td_fn) are clipped the same way."""
    from rljax.loops import factory

    env = envs.make("CartPole-v1", num_envs=2, seed=0)
    config = configure(DQNConfig, num_envs=2, batch_size=4, buffer_size=16, learning_starts=4,
                       alpha=0.5, priority_eps=0.0, priority_max_clip=clip)
    seen = {}
    monkeypatch.setattr(factory, "make_off_policy_trainer",
                        lambda agent, env, memory, **kw: seen.setdefault("memory", memory))
    factory.off_policy(make_dqn(config, env.spec), env, config, 10, None)
    memory = seen["memory"]
    obs = jnp.zeros((2, 4), jnp.float32)
    step = Transition(obs, jnp.zeros(2, jnp.int32), jnp.ones(2), jnp.zeros(2, bool),
                      jnp.zeros(2, bool), obs)
    example = jax.tree.map(lambda x: x[0], step)
    state = memory.add(memory.init(example), step, jnp.ones(2, bool),
                       lambda tr: jnp.full(tr.reward.shape, 100.0))
    expected = np.sqrt(100.0 if clip is None else clip)
    np.testing.assert_allclose(float(state.replay.max_priority), expected, rtol=1e-6)
    state = memory.update_priorities(state, jnp.array([0, 1]), jnp.array([-400.0, 0.25]))
    leaves = np.asarray(sum_tree.get(state.replay.tree, jnp.array([0, 1])))
    np.testing.assert_allclose(leaves, [np.sqrt(400.0 if clip is None else clip), 0.5],
                               rtol=1e-6)


@pytest.mark.optimized
@pytest.mark.slow
def test_cartpole_learns():
    """40k env steps of the cartpole-dqn preset must clearly beat a random policy (mean
    return about 22): a wrong target, sign or priority would not get there."""
    run = dataclasses.replace(from_preset("cartpole-dqn", seed=0, tensorboard=False),
                              chunk_steps=10_240, total_steps=40_960)
    _, _, trainer, num_chunks = build(run)
    state = trainer.init(jax.random.key(run.seed))
    for _ in range(num_chunks):
        state, metrics = trainer.chunk(state)
    returns, _ = last_episodes(jax.device_get(state.env.stats), 20)
    assert int(state.env_steps) == 40_960
    assert np.mean(returns) >= 150, returns

"""The compiled on-policy loop: no recompiles, determinism, env step counting."""

import jax
import numpy as np

from rljax import envs
from rljax.agents.a2c import A2CConfig, make_a2c
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.records import configure


def _trainer(seed=0, upc=10):
    # A short rollout, unrolled: quick to compile.
    cfg = configure(A2CConfig, num_envs=4, rollout_len=2)
    env = envs.make("CartPole-v1", num_envs=4, seed=seed)
    agent = make_a2c(cfg, env.spec)
    return make_on_policy_trainer(agent, env, rollout_len=cfg.loop.rollout_len,
                                  updates_per_chunk=upc, threshold=475.0)


def _run(seed, chunks=3):
    """``chunks`` chunks of a fresh trainer (a pool and a program of its own); checks that
    the chunks after the first reuse its compiled program and count their env steps."""
    trainer = _trainer(seed)
    state = trainer.init(jax.random.key(seed))
    for _ in range(chunks):
        state, metrics = trainer.chunk(state)
        assert trainer.chunk._cache_size() == 1
    assert int(state.env_steps) == chunks * trainer.steps_per_chunk
    assert metrics["loss"].shape == (trainer.updates_per_chunk,)
    return jax.device_get((state.agent.params, metrics["loss"]))


def test_chunks_do_not_recompile_same_seed_same_numbers_different_seed_different():
    # Each run builds its own pool, so each compiles: three programs in all.
    a, b, c = _run(1), _run(1), _run(2)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.allclose(a[1], c[1])

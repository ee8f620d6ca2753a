"""Checkpoints saved in an earlier layout restore into today's: the sum tree's fanout, and
optimizer moments kept as one flat vector where the state now has one array per parameter."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.run import checkpoint
from rljax.run.build import build
from rljax.run.presets import from_preset


@pytest.mark.parametrize("seeds", [1, 2])
def test_sum_tree_saved_in_another_layout_is_rebuilt(tmp_path, seeds):
    """A prioritized replay saved with the former 16-way sum tree (one per seed) restores
    into today's layout with the same leaves and consistent sums."""
    from rljax.buffers import sum_tree

    run = from_preset("cartpole-dqn", total_steps=10_000, logdir=str(tmp_path),
                      tensorboard=False, buffer_size=1_000, num_seeds=seeds)
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    is_tree = lambda x: isinstance(x, sum_tree.SumTreeState)
    find_tree = lambda memory: [x for x in jax.tree.leaves(memory, is_leaf=is_tree)
                                if is_tree(x)]
    (tree,) = find_tree(state.memory)
    assert tree.fanout == sum_tree.DEFAULT_FANOUT != 16
    rng = np.random.default_rng(0)
    leaves = rng.lognormal(0, 2, (seeds, tree.capacity)).astype(np.float32)
    old = np.stack([np.asarray(sum_tree.from_values(v, tree.capacity, fanout=16).nodes)
                    for v in leaves])
    saved = state.replace(memory=jax.tree.map(
        lambda x: x.replace(nodes=jnp.asarray(old.reshape(-1) if seeds == 1 else old))
        if is_tree(x) else x, state.memory, is_leaf=is_tree))
    checkpoint.save(str(tmp_path), saved, {"run": run.to_dict()})
    restored = checkpoint.restore(str(tmp_path), trainer.init(jax.random.key(1)))
    (tree,) = find_tree(restored.memory)
    assert tree.fanout == sum_tree.DEFAULT_FANOUT
    nodes = np.asarray(tree.nodes).reshape(seeds, -1)
    for member, values in zip(nodes, leaves, strict=True):
        rebuilt = tree.replace(nodes=jnp.asarray(member))
        np.testing.assert_array_equal(np.asarray(rebuilt.leaves), values)
        np.testing.assert_allclose(float(sum_tree.total(rebuilt)),
                                   values.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("seeds", [1, 2])
def test_flat_optimizer_moments_restore_per_parameter(tmp_path, monkeypatch, seeds):
    """A checkpoint whose optimizer kept its moments as one flat vector (``optax.flatten``,
    as PQN did) restores into today's per-parameter state: every moment lands on its own
    parameter, and one more update from either state gives the same parameters."""
    import optax

    from rljax.agents import pqn, pqn_core

    # annealed, as the preset was when PQN kept the flat vector
    run = from_preset("cartpole-pqn", total_steps=1_024, logdir=str(tmp_path),
                      tensorboard=False, num_seeds=seeds, anneal_lr=True)

    def flattened(config, parallel=pqn.ONE_DEVICE, run_length=None):
        return optax.flatten(optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                                         optax.radam(pqn_core.learning_rate(config, run_length),
                                                     eps=config.adam_eps)))

    with monkeypatch.context() as m:
        m.setattr(pqn, "optimizer", flattened)
        _, _, old_trainer, _ = build(run)
        old_state, _ = old_trainer.chunk(old_trainer.init(jax.random.key(0)))
        checkpoint.save(str(tmp_path), old_state, {"run": run.to_dict()})
        old_named, _ = checkpoint._named_leaves(jax.device_get(old_state.agent.opt_state))
        old_next, _ = old_trainer.chunk(old_state)
    _, _, trainer, _ = build(run)
    _assert_restores_per_parameter(tmp_path, trainer, old_named, old_next, seeds)


def _assert_restores_per_parameter(tmp_path, trainer, old_named, old_next, seeds):
    """The checkpoint in ``tmp_path`` (flat moments ``old_named``) restored into
    ``trainer``'s per-parameter state: each moment on its parameter, the counts kept, and
    the next chunk's parameters as the old program's (``old_next``)."""
    restored = checkpoint.restore(str(tmp_path), trainer.init(jax.random.key(1)))
    named, _ = checkpoint._named_leaves(jax.device_get(restored.agent.opt_state))
    flat = {k: v for k, v in old_named.items() if k.endswith((".mu", ".nu"))}
    assert len(flat) == 2 and all(v.shape[-1] > 1000 for v in flat.values())
    params = jax.tree.map(lambda x: x[0], restored.agent.params) if seeds > 1 else (
        restored.agent.params)
    unravel = jax.flatten_util.ravel_pytree(params)[1]
    for name, vector in flat.items():
        parts = {k: v for k, v in named.items() if k.startswith(name + ".")}
        expected = [unravel(v) for v in np.asarray(vector).reshape(seeds, -1)]
        expected = jax.tree.map(lambda *xs: np.stack(xs) if seeds > 1 else xs[0], *expected)
        got = jax.tree_util.tree_unflatten(jax.tree.structure(params), list(parts.values()))
        jax.tree.map(np.testing.assert_array_equal, got, expected)
    counts = [np.asarray(v) for k, v in named.items() if k.endswith("count")]
    old_counts = [np.asarray(v) for k, v in old_named.items() if k.endswith("count")]
    assert len(counts) == len(old_counts) > 0 and all(
        np.array_equal(a, b) and a.min() > 0 for a, b in zip(counts, old_counts, strict=True))
    new_next, _ = trainer.chunk(restored)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 jax.tree.map(np.asarray, new_next.agent.params),
                 jax.tree.map(np.asarray, old_next.agent.params))


def test_many_members_ppo_restores_its_flat_optimizer_per_parameter(tmp_path, monkeypatch):
    """PPO keeps one array per parameter from ``PER_ARRAY_MEMBERS`` members (lowered to 2
    here); a checkpoint those members saved with the flat vector restores into it."""
    from rljax.agents import ppo_networks
    from rljax.agents.base import ONE_DEVICE
    from rljax.gradients import Flattened

    config = from_preset("gymnax-cartpole-ppo").config
    assert isinstance(ppo_networks.optimizer(config, ONE_DEVICE, None, 15), Flattened)
    assert not isinstance(ppo_networks.optimizer(config, ONE_DEVICE, None, 16), Flattened)
    run = from_preset("gymnax-cartpole-ppo", num_envs=4, total_steps=1_024, num_seeds=2,
                      logdir=str(tmp_path), tensorboard=False)
    # Chunks of one update: over more, a rounding-sized difference flips a sampled action.
    run = dataclasses.replace(run, chunk_steps=4 * run.config.loop.rollout_len)
    with monkeypatch.context() as m:
        m.setattr(ppo_networks, "PER_ARRAY_MEMBERS", 10**9)
        _, _, old_trainer, _ = build(run)
        old_state, _ = old_trainer.chunk(old_trainer.init(jax.random.key(0)))
        checkpoint.save(str(tmp_path), old_state, {"run": run.to_dict()})
        old_named, _ = checkpoint._named_leaves(jax.device_get(old_state.agent.opt_state))
        old_next, _ = old_trainer.chunk(old_state)
    monkeypatch.setattr(ppo_networks, "PER_ARRAY_MEMBERS", 2)
    _, _, trainer, _ = build(run)
    _assert_restores_per_parameter(tmp_path, trainer, old_named, old_next, 2)


def test_checksums_of_another_device_split_match_even_when_as_many(monkeypatch):
    """An array saved over 2 devices and read on one (or the other way round) is checked
    in the saved layout even when both layouts give as many checksums: 80 bytes in pieces
    of 64 are 2 checksums, and so are two 40-byte shards. A flipped byte is still found."""
    import zlib

    from rljax.run import checksums

    monkeypatch.setattr(checksums, "CHUNK_BYTES", 64)
    x = np.arange(20, dtype=np.float32).reshape(2, 10)        # 80 bytes, 2 members
    raw = x.view(np.uint8).reshape(-1)
    as_one = [zlib.crc32(raw[:64]), zlib.crc32(raw[64:])]     # saved on one device
    as_two = [zlib.crc32(raw[:40]), zlib.crc32(raw[40:])]     # saved as two shards
    assert checksums.checksums_of({"x": jnp.asarray(x)}) == {"x": as_one}
    for saved in (as_one, as_two):
        assert checksums.unmatched({"x": jnp.asarray(x)}, {"x": saved}) == []
    flipped = x.copy()
    flipped.view(np.uint8).reshape(-1)[50] ^= 1
    for saved in (as_one, as_two):
        assert checksums.unmatched({"x": jnp.asarray(flipped)}, {"x": saved}) == ["x"]
    assert checksums.unmatched({"x": jnp.asarray(x)}, {}) == ["x"]    # none saved
    assert checksums.unmatched({"x": jnp.asarray(x)}, {"x": as_one[:1]}) == ["x"]

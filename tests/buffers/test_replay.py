"""Uniform replay against a Python reference; validity masks; vmap over seeds."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from buffers_reference import assert_frequencies
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax.buffers import make_replay, replay
from rljax.buffers.nstep import NStepTransition

B = 4
EXAMPLE = NStepTransition(
    obs=jnp.zeros(3, jnp.float32),
    action=jnp.zeros((), jnp.int32),
    reward=jnp.zeros((), jnp.float32),
    discount=jnp.zeros((), jnp.float32),
    next_obs=jnp.zeros(3, jnp.float32),
)


def batch_of(ids: np.ndarray) -> NStepTransition:
    """Transitions whose every field encodes a unique id, so rows can be checked exactly."""
    ids = np.asarray(ids, np.float32)
    return NStepTransition(
        obs=jnp.asarray(np.stack([ids, ids + 0.25, ids + 0.5], -1)),
        action=jnp.asarray(ids, jnp.int32),
        reward=jnp.asarray(ids),
        discount=jnp.asarray(-ids),
        next_obs=jnp.asarray(np.stack([ids, -ids, 2 * ids], -1)),
    )


@functools.cache
def compiled(capacity: int):
    buf = make_replay(capacity, batch_size=16)
    return buf, jax.jit(buf.add), jax.jit(buf.sample)


class Reference:
    """Plain-Python circular buffer that stores only valid transitions."""

    def __init__(self, capacity: int):
        self.capacity, self.slots, self.cursor = capacity, {}, 0

    def add(self, ids, valid):
        for i, v in zip(ids, valid, strict=True):
            if v:
                self.slots[self.cursor] = i
                self.cursor = (self.cursor + 1) % self.capacity


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.sampled_from([3, 10]),
    valids=st.lists(st.lists(st.booleans(), min_size=B, max_size=B), min_size=1, max_size=12),
)
def test_add_and_sample_match_reference(capacity, valids):
    """Jitted; capacity 3 < B exercises a batch larger than the buffer."""
    buf, add, sample = compiled(capacity)
    state, ref, next_id = buf.init(EXAMPLE), Reference(capacity), 1
    for valid in valids:
        ids = np.arange(next_id, next_id + B)
        next_id += B
        state = add(state, batch_of(ids), jnp.array(valid))
        ref.add(ids, valid)
    size = len(ref.slots)
    assert int(state.size) == size and int(state.cursor) == ref.cursor
    stored = np.asarray(state.storage.reward)
    for slot, i in ref.slots.items():
        assert stored[slot] == i
    assert bool(buf.can_sample(state)) == (size >= 16)
    if size:
        s = sample(state, jax.random.key(len(valids)))
        idx = np.asarray(s.indices)
        assert np.all(idx < size)
        np.testing.assert_array_equal(np.asarray(s.transition.reward), stored[idx])
        np.testing.assert_array_equal(
            np.asarray(s.transition.next_obs), np.asarray(state.storage.next_obs)[idx]
        )


def test_eager_matches_jitted():
    buf, add_j, sample_j = compiled(10)
    eager = jitted = buf.init(EXAMPLE)
    for step, valid in enumerate([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 1]]):
        batch, valid = batch_of(np.arange(4) + 4 * step), jnp.array(valid, bool)
        eager, jitted = buf.add(eager, batch, valid), add_j(jitted, batch, valid)
    key = jax.random.key(0)
    for a, b in zip(
        jax.tree.leaves((eager, buf.sample(eager, key))),
        jax.tree.leaves((jitted, sample_j(jitted, key))),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_invalid_transitions_are_never_stored_or_sampled():
    buf, add, _ = compiled(10)
    state = buf.init(EXAMPLE)
    rng = np.random.default_rng(0)
    valid_ids = set()
    for step in range(20):
        ids = np.arange(step * B, (step + 1) * B) + 1
        valid = rng.random(B) < 0.6
        valid_ids |= set(ids[valid].tolist())
        state = add(state, batch_of(ids), jnp.array(valid))
    draw = jax.jit(functools.partial(replay.sample, batch_size=20_000))(state, jax.random.key(0))
    drawn = np.asarray(draw.transition.reward).astype(int)
    assert set(drawn.tolist()) <= valid_ids
    assert_frequencies(np.asarray(draw.indices), np.ones(10))  # uniform over the 10 slots


def test_partly_filled_buffer_samples_only_written_slots():
    buf, add, _ = compiled(10)
    state = add(buf.init(EXAMPLE), batch_of([1, 2, 3, 4]), jnp.array([True, False, True, True]))
    draw = jax.jit(functools.partial(replay.sample, batch_size=30_000))(state, jax.random.key(1))
    assert_frequencies(np.asarray(draw.indices), np.array([1, 1, 1] + [0] * 7))
    assert set(np.asarray(draw.transition.action).tolist()) == {1, 3, 4}


def test_vmap_over_seeds_matches_per_seed_loop():
    buf = make_replay(6, batch_size=5)
    seeds = 2
    states = jax.vmap(lambda _: buf.init(EXAMPLE))(jnp.arange(seeds))
    add, sample = jax.jit(jax.vmap(buf.add)), jax.jit(jax.vmap(buf.sample))
    rng = np.random.default_rng(2)
    singles = [buf.init(EXAMPLE) for _ in range(seeds)]
    add1, sample1 = jax.jit(buf.add), jax.jit(buf.sample)
    for step in range(3):
        ids = np.arange(seeds * B).reshape(seeds, B) + 100 * step
        valid = rng.random((seeds, B)) < 0.7
        batches = jax.tree.map(lambda *x: jnp.stack(x), *[batch_of(i) for i in ids])
        states = add(states, batches, jnp.array(valid))
        singles = [
            add1(s, batch_of(i), jnp.array(v)) for s, i, v in zip(singles, ids, valid, strict=True)
        ]
    keys = jax.random.split(jax.random.key(3), seeds)
    out = sample(states, keys)
    for i in range(seeds):
        ref = sample1(singles[i], keys[i])
        np.testing.assert_array_equal(np.asarray(out.indices[i]), np.asarray(ref.indices))
        np.testing.assert_array_equal(
            np.asarray(out.transition.obs[i]), np.asarray(ref.transition.obs)
        )
    assert len({tuple(np.asarray(x).tolist()) for x in out.indices}) > 1  # seeds differ


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(capacity=0, batch_size=1), "capacity must be an integer >= 1, got 0"),
        (dict(capacity=5.0, batch_size=1), "capacity"),
        (dict(capacity=5, batch_size=0), "batch_size must be an integer >= 1, got 0"),
        (dict(capacity=5, batch_size=2, min_size=0), "min_size"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_replay(**kwargs)

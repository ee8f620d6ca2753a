"""Replay memory as the off-policy loop sees it: one-step transitions in, n-step
samples out, whatever the storage.

Two storages sit behind the same :class:`Memory` interface:

* flat: an n-step accumulator (:mod:`rljax.buffers.nstep`) feeding a uniform or
  prioritized replay of whole ``NStepTransition``s (small observations);
* frames: :mod:`rljax.buffers.atari`, which keeps each Atari frame once and
  rebuilds stacks and n-step returns at sample time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
from flax import struct

from rljax.buffers import make_atari_replay, make_nstep, make_prioritized, make_replay
from rljax.buffers.prioritized import PrioritizedSample
from rljax.types import Array, PRNGKey, Transition


class Memory(NamedTuple):
    """Replay memory functions.

    Attributes:
        init: ``init(example) -> state`` from one env's ``Transition`` (no batch axis).
        add: ``add(state, step, valid, td_fn=None) -> state``: one loop step of
            ``Transition [B]``; ``valid [B]`` False on reset steps; ``td_fn`` maps
            n-step transitions to initial TD errors (priorities), if given.
        sample: ``sample(state, key, beta) -> PrioritizedSample`` (uniform memories
            return weights of 1).
        update_priorities: ``update_priorities(state, indices, td_errors) -> state``
            (a no-op for uniform memories).
        can_sample: ``can_sample(state) -> bool``: enough transitions to learn.
        size: ``size(state) -> int``: transitions that can be sampled.
    """

    init: Callable[[Transition], Any]
    add: Callable[..., Any]
    sample: Callable[[Any, PRNGKey, Array], PrioritizedSample]
    update_priorities: Callable[[Any, Array, Array], Any]
    can_sample: Callable[[Any], Array]
    size: Callable[[Any], Array]


@struct.dataclass
class FlatState:
    nstep: Any
    replay: Any


def _flat_memory(capacity, num_envs, batch_size, n, gamma, alpha, eps, min_size) -> Memory:
    nstep = make_nstep(n, gamma)
    prioritized = alpha is not None
    if prioritized:
        buf = make_prioritized(capacity, batch_size, alpha=alpha, eps=eps, min_size=min_size)
    else:
        buf = make_replay(capacity, batch_size, min_size=min_size)

    def init(example: Transition) -> FlatState:
        from rljax.buffers.nstep import NStepTransition

        record = NStepTransition(example.obs, example.action, jnp.zeros((), jnp.float32),
                                 jnp.zeros((), jnp.float32), example.next_obs)
        return FlatState(nstep.init(example, num_envs), buf.init(record))

    def add(state: FlatState, step: Transition, valid: Array, td_fn=None) -> FlatState:
        nstate, emitted, emitted_valid = nstep.push(state.nstep, step, valid)
        if prioritized:
            td = None if td_fn is None else td_fn(emitted)
            replay = buf.add(state.replay, emitted, emitted_valid, td)
        else:
            replay = buf.add(state.replay, emitted, emitted_valid)
        return FlatState(nstate, replay)

    def sample(state: FlatState, key: PRNGKey, beta: Array) -> PrioritizedSample:
        if prioritized:
            return buf.sample(state.replay, key, beta)
        s = buf.sample(state.replay, key)
        ones = jnp.ones(s.indices.shape, jnp.float32)
        return PrioritizedSample(s.indices, s.transition, ones / jnp.maximum(
            state.replay.size, 1), ones)

    def update_priorities(state: FlatState, indices: Array, td: Array) -> FlatState:
        if not prioritized:
            return state
        return state.replace(replay=buf.update_priorities(state.replay, indices, td))

    return Memory(init, add, sample, update_priorities,
                  lambda s: buf.can_sample(s.replay), lambda s: s.replay.size)


def _frame_memory(capacity, num_envs, batch_size, n, gamma, alpha, eps, min_size) -> Memory:
    buf = make_atari_replay(capacity, num_envs, batch_size, n=n, gamma=gamma, alpha=alpha,
                            eps=eps, min_size=min_size)

    def add(state, step: Transition, valid: Array, td_fn=None):
        del td_fn  # frame storage computes n-step windows at sample time
        return buf.add(state, step, valid)

    def can_sample(state) -> Array:
        # Frame storage never has all `capacity` slots sampleable (the oldest S - 1 frames
        # of each env are stack history, the newest n - 1 steps await their window, reset
        # steps are not transitions), so a buffer whose every row is written counts as full.
        full = state.t >= state.rows
        return (buf.can_sample(state) | full) & (state.size >= batch_size)

    return Memory(buf.init, add, buf.sample, buf.update_priorities, can_sample,
                  lambda s: s.size)


def make_memory(*, capacity: int, num_envs: int, batch_size: int, n_step: int, gamma: float,
                alpha: float | None, eps: float, min_size: int, frames: bool) -> Memory:
    """Builds the replay memory for an off-policy loop.

    Args:
        capacity: transitions kept.
        num_envs: envs per loop step.
        batch_size: transitions per sample.
        n_step: n-step window (1: one-step transitions).
        gamma: discount for n-step sums.
        alpha: priority exponent; None for uniform replay.
        eps: priority offset.
        min_size: transitions needed before learning starts.
        frames: store Atari frame stacks once per frame.
    """
    make = _frame_memory if frames else _flat_memory
    return make(capacity, num_envs, batch_size, n_step, gamma, alpha, eps, min_size)

"""State of a training loop and the pieces every loop shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
from flax import struct

from rljax.envs import EnvState
from rljax.envs.stats import recent_mean_return
from rljax.types import Array


@struct.dataclass
class LoopState:
    """Everything a compiled training chunk carries from one call to the next.

    Attributes:
        agent: the agent's train state.
        env: the environment state (handle, current obs, episode statistics).
        key: PRNG key of the loop, split at each use.
        env_steps: env steps taken so far, over all envs (reset steps included).
        solved_at: first env step at which the mean return of the last
            ``window`` episodes reached the threshold, -1 while not yet.
        memory: replay memory of off-policy loops (None for on-policy ones).
        batches: replay batches sampled so far (off-policy loops; None otherwise).
    """

    agent: Any
    env: EnvState
    key: Array
    env_steps: Array
    solved_at: Array
    memory: Any = None
    batches: Any = None


class Trainer(NamedTuple):
    """A compiled training loop.

    Attributes:
        init: ``init(key) -> LoopState`` (resets the envs on the host).
        chunk: jitted ``chunk(state) -> (state, metrics)`` running
            ``updates_per_chunk`` updates; ``metrics`` hold one row per update.
        updates_per_chunk: updates in one chunk.
        steps_per_update: env steps (over all envs) in one update.
        init_state: pure ``init_state(key, env_state) -> LoopState``.
        chunk_fn: ``chunk`` before jit (for vmapping over seeds).
        num_seeds: independent runs in the program (leading axis of the state).
        member_values: ``[num_seeds]`` per-member hyperparameter values of a sweep
            (``chunk_fn(state, values)`` takes them; see rljax.parallel.members).
    """

    init: Callable[[Array], LoopState]
    chunk: Callable[[LoopState], tuple[LoopState, dict]]
    updates_per_chunk: int
    steps_per_update: int
    init_state: Callable[..., LoopState] | None = None
    chunk_fn: Callable[..., tuple[LoopState, dict]] | None = None
    num_seeds: int = 1
    member_values: Any = None

    @property
    def steps_per_chunk(self) -> int:
        return self.updates_per_chunk * self.steps_per_update


def check_solved(state: LoopState, threshold: float | None) -> Array:
    """Updated ``solved_at``: set once the windowed mean return reaches ``threshold``."""
    if threshold is None:
        return state.solved_at
    stats = state.env.stats
    reached = (stats.episodes >= stats.window) & (recent_mean_return(stats) >= threshold)
    return jnp.where((state.solved_at < 0) & reached, state.env_steps, state.solved_at)


def initial_counters() -> tuple[Array, Array]:
    return jnp.zeros((), jnp.int32), jnp.full((), -1, jnp.int32)



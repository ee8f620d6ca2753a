"""One trainer factory per kind of loop, reading the agent config's typed records.

Every agent config holds a loop record (``config.loop``, :mod:`rljax.records`), so that a
new agent needs no code of its own here:

* ``"on_policy"``: ``config.loop`` is an :class:`~rljax.records.OnPolicyLoop`.
* ``"off_policy"``: ``config.loop`` is an :class:`~rljax.records.OffPolicyLoop`,
  ``config.replay`` a :class:`~rljax.records.Replay`, and ``config.gamma`` the discount
  of n-step returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from rljax import exploration
from rljax.agents.base import Agent
from rljax.envs import Env
from rljax.loops.memory import Memory, make_memory
from rljax.loops.off_policy import make_off_policy_trainer
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.loops.state import Trainer
from rljax.types import WHOLE, Split

# Image-observation chunks stay short (a Breakout update takes about a second on a 2-core
# CPU) so that the host reports progress often; unrolled ones also compile quickly.
IMAGE_UPDATES_PER_CHUNK = 32
UNROLLED_UPDATES_PER_CHUNK = 2


def on_policy(agent: Agent, env: Env, config: Any, updates_per_chunk: int,
              threshold: float | None, split: Split = WHOLE) -> Trainer:
    """The on-policy trainer for ``agent`` (rollouts of ``config.loop.rollout_len`` steps)."""
    return make_on_policy_trainer(agent, env, rollout_len=config.loop.rollout_len,
                                  updates_per_chunk=updates_per_chunk, threshold=threshold,
                                  split=split)


def off_policy(agent: Agent, env: Env, config: Any, updates_per_chunk: int,
               threshold: float | None, split: Split = WHOLE) -> Trainer:
    """The off-policy trainer for ``agent``, with its replay memory.

    Raises:
        ValueError: ``initial_priorities`` with frame replay (Atari), which has no n-step
            transitions to score when they are added.
    """
    spec, loop, replay = env.spec, config.loop, config.replay
    frames = spec.is_atari if replay.frame_replay is None else replay.frame_replay
    initial = replay.prioritized and replay.initial_priorities
    if frames and initial:
        raise ValueError("initial_priorities needs flat replay, but frame replay is in use for "
                         f"{spec.task_id}; set initial_priorities=false or frame_replay=false")
    memory = make_memory(capacity=replay.buffer_size, num_envs=spec.num_envs,
                         batch_size=replay.batch_size, n_step=replay.n_step, gamma=config.gamma,
                         alpha=replay.alpha if replay.prioritized else None,
                         eps=replay.priority_eps, min_size=replay.min_replay, frames=frames)
    if replay.priority_max_clip is not None:
        memory = _clipped(memory, replay.priority_max_clip)
    if loop.unroll:
        updates_per_chunk = min(updates_per_chunk, UNROLLED_UPDATES_PER_CHUNK)
    elif spec.is_image:
        updates_per_chunk = min(updates_per_chunk, IMAGE_UPDATES_PER_CHUNK)
    return make_off_policy_trainer(
        agent, env, memory, env_steps_per_update=loop.env_steps_per_update,
        grad_steps=loop.grad_steps, updates_per_chunk=updates_per_chunk,
        # Uniform replay has no importance weights: beta is reported as 1.
        beta_fn=exploration.piecewise_linear(replay.beta) if replay.prioritized else None,
        initial_priorities=initial, unroll=loop.unroll, flush_every=replay.flush_every,
        threshold=threshold, split=split)


def _clipped(memory: Memory, clip: float) -> Memory:
    """``memory`` with the TD errors that set priorities clipped to ``[-clip, clip]``."""
    def add(state, step, valid, td_fn=None):
        clipped = None if td_fn is None else (lambda tr: jnp.clip(td_fn(tr), -clip, clip))
        return memory.add(state, step, valid, clipped)

    def update_priorities(state, indices, td):
        return memory.update_priorities(state, indices, jnp.clip(td, -clip, clip))

    return memory._replace(add=add, update_priorities=update_priorities)


LOOPS: dict[str, Callable[..., Trainer]] = {"on_policy": on_policy, "off_policy": off_policy}

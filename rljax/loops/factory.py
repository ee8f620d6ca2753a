"""One trainer factory per kind of loop, reading the agent's config by convention.

An agent's config names its loop's hyperparameters with the same fields in every agent,
so that a new agent needs no code of its own here:

* ``"on_policy"``: ``num_envs``, ``rollout_len``.
* ``"off_policy"``: ``num_envs``, ``env_steps_per_update``, ``grad_steps``, ``batch_size``,
  ``buffer_size``, ``min_replay`` (a property: ``learning_starts``, or the whole buffer),
  ``n_step``, ``gamma``, ``prioritized``, ``alpha``, ``priority_eps``, ``beta`` (a
  schedule over loop updates), ``initial_priorities``; optional ``frame_replay`` (None:
  for Atari tasks), ``unroll`` and ``flush_every``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rljax import exploration
from rljax.agents.base import Agent
from rljax.envs import Env
from rljax.loops.memory import make_memory
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
    """The on-policy trainer for ``agent`` (rollouts of ``config.rollout_len`` steps)."""
    return make_on_policy_trainer(agent, env, rollout_len=config.rollout_len,
                                  updates_per_chunk=updates_per_chunk, threshold=threshold,
                                  split=split)


def off_policy(agent: Agent, env: Env, config: Any, updates_per_chunk: int,
               threshold: float | None, split: Split = WHOLE) -> Trainer:
    """The off-policy trainer for ``agent``, with its replay memory.

    Raises:
        ValueError: ``initial_priorities`` with frame replay (Atari), which has no n-step
            transitions to score when they are added.
    """
    spec = env.spec
    frame_replay = getattr(config, "frame_replay", False)
    frames = spec.is_atari if frame_replay is None else frame_replay
    initial = config.prioritized and config.initial_priorities
    if frames and initial:
        raise ValueError("initial_priorities needs flat replay, but frame replay is in use for "
                         f"{spec.task_id}; set initial_priorities=false or frame_replay=false")
    memory = make_memory(capacity=config.buffer_size, num_envs=spec.num_envs,
                         batch_size=config.batch_size, n_step=config.n_step, gamma=config.gamma,
                         alpha=config.alpha if config.prioritized else None,
                         eps=config.priority_eps, min_size=config.min_replay, frames=frames)
    unroll = getattr(config, "unroll", False)
    if unroll:
        updates_per_chunk = min(updates_per_chunk, UNROLLED_UPDATES_PER_CHUNK)
    elif spec.is_image:
        updates_per_chunk = min(updates_per_chunk, IMAGE_UPDATES_PER_CHUNK)
    return make_off_policy_trainer(
        agent, env, memory, env_steps_per_update=config.env_steps_per_update,
        grad_steps=config.grad_steps, updates_per_chunk=updates_per_chunk,
        # Uniform replay has no importance weights: beta is reported as 1.
        beta_fn=exploration.piecewise_linear(config.beta) if config.prioritized else None,
        initial_priorities=initial, unroll=unroll,
        flush_every=getattr(config, "flush_every", None), threshold=threshold, split=split)


LOOPS: dict[str, Callable[..., Trainer]] = {"on_policy": on_policy, "off_policy": off_policy}

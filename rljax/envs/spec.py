"""Environment description and validation of user-facing options.

Everything here runs on the host before any pool is built, so a bad task id or
option fails fast with a message that names the problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any

import numpy as np

# Options the adapter owns; a user passes them through make()'s own arguments.
_MANAGED_OPTIONS = ("num_envs", "batch_size", "seed", "env_seed", "gym_reset_return_info",
                    "max_num_players", "base_path")

# Atari defaults follow the standard DQN preprocessing (Mnih et al. 2015): a life
# loss ends a training episode, rewards are clipped to their sign. Scores reported
# by rljax are always whole-game raw scores (see stats.py).
ATARI_DEFAULTS: dict[str, Any] = {"episodic_life": True, "reward_clip": True}


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static description of a batched environment.

    Attributes:
        task_id: envpool task id, e.g. ``"CartPole-v1"``.
        num_envs: number of environments stepped together (``B``).
        obs_shape: shape of one observation.
        obs_dtype: dtype of observations as rljax returns them (float64 tasks are
            returned as float32; uint8 frames stay uint8).
        num_actions: number of discrete actions, or ``None`` for continuous tasks.
        action_shape: shape of one action (``()`` for discrete).
        action_low: lower bounds of a continuous action (tuple), else ``None``.
        action_high: upper bounds of a continuous action (tuple), else ``None``.
        max_episode_steps: time limit after which an episode is truncated.
        reward_threshold: the task's "solved" mean return, when envpool defines one.
        is_atari: whether the task is an Atari game (frame stacks, lives).
        options: the envpool options in force (user options over rljax defaults).
        num_seeds: independent runs sharing the pool (``num_envs`` envs each).
    """

    task_id: str
    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int | None
    action_shape: tuple[int, ...]
    action_low: tuple[float, ...] | None
    action_high: tuple[float, ...] | None
    max_episode_steps: int
    reward_threshold: float | None
    is_atari: bool
    options: tuple[tuple[str, Any], ...] = ()
    num_seeds: int = 1

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def is_image(self) -> bool:
        return len(self.obs_shape) == 3


@functools.cache
def all_task_ids() -> tuple[str, ...]:
    import envpool

    return tuple(envpool.list_all_envs())


def check_task_id(task_id: str) -> None:
    """Raises ValueError for an unknown task id, suggesting close matches."""
    if not isinstance(task_id, str) or task_id not in all_task_ids():
        ids = all_task_ids()
        close = difflib.get_close_matches(str(task_id), ids, n=5, cutoff=0.5)
        if not close:
            lowered = str(task_id).lower()
            close = [t for t in ids if lowered and lowered.split("-")[0] in t.lower()][:5]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else (
            "; run `python -c 'import envpool; print(envpool.list_all_envs())'` for the list")
        raise ValueError(f"unknown task id {task_id!r}{hint}")


def is_atari_task(task_id: str) -> bool:
    import envpool

    spec = envpool.make_spec(task_id)
    return "episodic_life" in spec.config._fields and "stack_num" in spec.config._fields


def check_options(task_id: str, num_envs: Any, seed: Any, options: dict[str, Any]) -> dict:
    """Validates make() arguments and returns the full envpool option dict.

    Raises:
        ValueError: naming the bad argument, its value and what is allowed.
    """
    import envpool

    check_task_id(task_id)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**31:
        raise ValueError(f"seed must be an integer in [0, 2**31), got {seed!r}")
    fields = envpool.make_spec(task_id).config._fields
    allowed = sorted(f for f in fields if f not in _MANAGED_OPTIONS)
    for name in options:
        if name in _MANAGED_OPTIONS:
            raise ValueError(f"option {name!r} is set by rljax.envs.make itself; "
                             f"allowed options for {task_id}: {', '.join(allowed)}")
        if name not in fields:
            close = difflib.get_close_matches(name, allowed, n=3)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"unknown option {name!r} for {task_id}{hint}; "
                             f"allowed: {', '.join(allowed)}")
    merged = dict(ATARI_DEFAULTS) if is_atari_task(task_id) else {}
    merged.update(options)
    for name in ("max_episode_steps", "num_threads", "frame_skip", "stack_num", "noop_max"):
        if name in merged and (not isinstance(merged[name], int | np.integer) or merged[name] < (
                0 if name in ("num_threads", "noop_max") else 1)):
            low = 0 if name in ("num_threads", "noop_max") else 1
            raise ValueError(f"option {name} must be an integer >= {low}, got {merged[name]!r}")
    return merged

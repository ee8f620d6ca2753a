"""Environment description and validation of user-facing options.

Everything here runs on the host before any pool is built, so a bad task id or
option fails fast with a message that names the problem.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import warnings
from typing import Any

import numpy as np

from rljax.envs import envpool_import

# Options the adapter owns; a user passes them through make()'s own arguments.
_MANAGED_OPTIONS = ("num_envs", "batch_size", "seed", "env_seed", "gym_reset_return_info",
                    "max_num_players", "base_path")

# Options rljax applies itself, over whichever backend built the env
# (rljax.envs.wrappers): never passed to envpool.
WRAPPER_OPTIONS = ("obs_indices",)

# Atari defaults follow the standard DQN preprocessing (Mnih et al. 2015): a life
# loss ends a training episode, rewards are clipped to their sign. Scores reported
# by rljax are always whole-game raw scores (see stats.py).
ATARI_DEFAULTS: dict[str, Any] = {"episodic_life": True, "reward_clip": True}


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static description of a batched environment.

    Attributes:
        task_id: task id, e.g. ``"CartPole-v1"`` (envpool) or ``"gymnax:CartPole-v1"``.
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
        num_seeds: independent runs (members) the env holds, ``num_envs`` envs each, with
            a leading member axis on its states (composed by :mod:`rljax.parallel.envs`).
        resets_in_step: an env whose episode ends resets in the same step (JAX-native
            envs): no reset step follows, and the step's ``StepResult.obs`` (the final
            observation) differs from the state's next ``obs``.
        vmappable: ``reset``/``step`` are plain JAX functions (JAX-native envs): members
            vmap the env of one run; otherwise (envpool) one env holds every member's envs.
        compact_obs_dtype: a narrower dtype that holds every observation exactly (bool for
            MinAtar's 0/1 grids), or None: the on-policy loop keeps a rollout's final
            observations in it, and :func:`rljax.types.next_obs` widens them back.
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
    resets_in_step: bool = False
    vmappable: bool = False
    compact_obs_dtype: np.dtype | None = None

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def is_image(self) -> bool:
        return len(self.obs_shape) == 3


@functools.cache
def all_task_ids() -> tuple[str, ...]:
    return tuple(envpool_import.registry().list_all_envs())


def check_task_id(task_id: str) -> None:
    """Raises ValueError for an unknown task id, suggesting close matches."""
    if isinstance(task_id, str) and task_id in envpool_import.registry(task_id).list_all_envs():
        return  # without importing every family of envpool
    if not isinstance(task_id, str) or task_id not in all_task_ids():
        ids = all_task_ids()
        close = difflib.get_close_matches(str(task_id), ids, n=5, cutoff=0.5)
        if not close:
            lowered = str(task_id).lower()
            close = [t for t in ids if lowered and lowered.split("-")[0] in t.lower()][:5]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else (
            "; run `python -c 'import envpool; print(envpool.list_all_envs())'` for the list")
        raise ValueError(f"unknown task id {task_id!r}{hint}")


# Config fields every Atari (ALE) task has; ViZDoom tasks share the first two only.
_ATARI_FIELDS = ("episodic_life", "stack_num", "reward_clip", "noop_max")


def is_atari_config(fields: Any) -> bool:
    """Whether an envpool config with these field names is an Atari game's."""
    return all(name in fields for name in _ATARI_FIELDS)


def is_atari_task(task_id: str) -> bool:
    return is_atari_config(task_spec(task_id).config._fields)


def task_spec(task_id: str, options: dict[str, Any] | None = None) -> Any:
    """envpool's spec of ``task_id`` (with ``options``), without building a pool.

    Raises:
        ValueError: naming the task and envpool's reason where it cannot make the task
            here (a missing system library, a task that needs files of its own).
    """
    envpool = envpool_import.registry(task_id)
    try:
        with _quiet_spaces():
            return envpool.make_spec(task_id, **(options or {}))
    except Exception as e:  # noqa: BLE001 - envpool raises ImportError, RuntimeError, ...
        text = str(e).strip()
        first = text.splitlines()[0][:300] if text else type(e).__name__
        raise ValueError(f"task {task_id} cannot be made here: {first}") from None


SUPPORTED_TASKS = ("rljax agents take single-player tasks with one Box observation, a "
                   "vector (1-D) or channels-first uint8 frames (C, H, W) with H, W >= 36, "
                   "and Discrete or 1-D Box actions with finite float32 bounds (e.g. "
                   "CartPole-v1, Breakout-v5, Reacher-v5, HalfCheetah-v5)")
_MIN_FRAME = 36  # the Nature CNN's smallest input (8x8 stride 4, 4x4 stride 2, 3x3)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _describe_space(space: Any) -> str:
    kind = type(space).__name__
    if kind == "Dict":
        return f"dict observations (keys {', '.join(map(str, space.spaces))})"
    if kind == "Discrete":
        return f"discrete observations ({int(space.n)} states)"
    if kind == "Box":
        return f"observations of shape {tuple(space.shape)} and dtype {space.dtype}"
    return f"{kind} observations of shape {getattr(space, 'shape', None)}"


def _observation_problem(space: Any) -> str | None:
    if type(space).__name__ != "Box":
        return _describe_space(space)
    shape = tuple(int(d) for d in space.shape)
    if len(shape) == 1:
        return None
    if len(shape) == 3 and np.dtype(space.dtype) == np.uint8 and min(shape[1:]) >= _MIN_FRAME:
        return None
    return _describe_space(space)


def _action_problem(space: Any) -> str | None:
    kind = type(space).__name__
    if kind == "Discrete":
        return None
    if kind != "Box" or len(space.shape) != 1:
        return f"{kind} actions of shape {getattr(space, 'shape', None)}"
    low = np.asarray(space.low, np.float64)
    high = np.asarray(space.high, np.float64)
    if not (np.all(np.abs(low) <= _FLOAT32_MAX) and np.all(np.abs(high) <= _FLOAT32_MAX)
            and np.all(low < high)):
        return (f"Box actions with bounds [{low.min():g}, {high.max():g}] (not finite "
                f"float32 bounds with low < high)")
    return None


@contextlib.contextmanager
def _quiet_spaces():
    """gymnasium warns that float64 Box bounds are stored as float32: harmless here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        yield


def task_spaces(spec: Any) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of an envpool spec (built on first use)."""
    with _quiet_spaces():
        return spec.observation_space, spec.action_space


def check_spaces(task_id: str, spec: Any) -> None:
    """Refuses a task whose observations, actions or players no rljax agent takes.

    Raises:
        ValueError: naming the task, what it has and what is supported.
    """
    players = getattr(spec.config, "max_num_players", 1)
    observations, actions = task_spaces(spec)
    problem = f"{players} players" if players != 1 else (
        _observation_problem(observations) or _action_problem(actions))
    if problem is not None:
        raise ValueError(f"task {task_id} has {problem}; {SUPPORTED_TASKS}")


def check_task(task_id: str) -> None:
    """Refuses an unknown task id (suggesting close matches), a task envpool cannot make
    here, and one whose spaces no rljax agent takes."""
    check_task_id(task_id)
    check_spaces(task_id, task_spec(task_id))


def check_options(task_id: str, num_envs: Any, seed: Any, options: dict[str, Any]) -> dict:
    """Validates make() arguments and returns the full envpool option dict (without the
    options of :data:`WRAPPER_OPTIONS`, which are validated here and applied by
    :func:`rljax.envs.pool.make`: ``obs_indices``, a tuple of observation entries to keep).

    Raises:
        ValueError: naming the bad argument, its value and what is allowed.
    """
    check_task_id(task_id)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    from collections.abc import Sequence

    from rljax.envs.base import resolve_seeds

    if not isinstance(seed, Sequence):  # every env's seeds are checked once they are read
        resolve_seeds(seed, 1)
    spec = task_spec(task_id)
    check_spaces(task_id, spec)
    fields = spec.config._fields
    allowed = sorted(f for f in fields if f not in _MANAGED_OPTIONS)
    for name in options:
        if name in WRAPPER_OPTIONS:
            continue
        if name in _MANAGED_OPTIONS:
            raise ValueError(f"option {name!r} is set by rljax.envs.make itself; "
                             f"allowed options for {task_id}: {', '.join(allowed)}")
        if name not in fields:
            close = difflib.get_close_matches(name, allowed, n=3)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"unknown option {name!r} for {task_id}{hint}; "
                             f"allowed: {', '.join(allowed + list(WRAPPER_OPTIONS))}")
    if options.get("obs_indices") is not None:
        from rljax.envs.wrappers import check_obs_indices

        check_obs_indices(options["obs_indices"], task_spaces(spec)[0].shape)
    merged = dict(ATARI_DEFAULTS) if is_atari_config(fields) else {}
    merged.update({k: v for k, v in options.items() if k not in WRAPPER_OPTIONS})
    for name in ("max_episode_steps", "num_threads", "frame_skip", "stack_num", "noop_max"):
        if name in merged and (not isinstance(merged[name], int | np.integer) or merged[name] < (
                0 if name in ("num_threads", "noop_max") else 1)):
            low = 0 if name in ("num_threads", "noop_max") else 1
            raise ValueError(f"option {name} must be an integer >= {low}, got {merged[name]!r}")
    return merged

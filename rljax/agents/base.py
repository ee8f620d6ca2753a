"""What every agent provides, and shared config validation helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple


class Agent(NamedTuple):
    """An agent as a bundle of pure functions.

    Attributes:
        init: ``init(key) -> state``.
        act: ``act(params, obs, key, step) -> (action, extras)``: the exploring
            policy used while training (``obs [B, ...]``, ``action [B, ...]``).
        update: ``update(state, batch, key) -> (state, metrics)``.
        greedy_act: ``greedy_act(params, obs) -> action``: the evaluation policy
            (most likely action, or the noise-free one).
        params: ``params(state) -> params`` to hand to ``act``/``greedy_act``.
    """

    init: Callable[..., Any]
    act: Callable[..., Any]
    update: Callable[..., Any]
    greedy_act: Callable[..., Any]
    params: Callable[[Any], Any]


def check_positive(config: Any, *names: str, integer: bool = False) -> None:
    for name in names:
        value = getattr(config, name)
        ok = isinstance(value, int) and not isinstance(value, bool) if integer else (
            isinstance(value, int | float) and not isinstance(value, bool))
        if not ok or value <= 0:
            kind = "an integer" if integer else "a number"
            raise ValueError(f"{name} must be {kind} > 0, got {value!r}")


def check_range(config: Any, name: str, low: float, high: float, optional: bool = False) -> None:
    value = getattr(config, name)
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        none = " or None" if optional else ""
        raise ValueError(f"{name} must be a number in [{low}, {high}]{none}, got {value!r}")


def check_sizes(config: Any, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, tuple) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ValueError(f"{name} must be a non-empty tuple of positive integers, got {value!r}")


def config_fields(config_cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(config_cls)}


class OffPolicyAgent(NamedTuple):
    """An off-policy agent (DQN, DDPG) as a bundle of pure functions.

    Attributes:
        init: ``init(key) -> state``.
        act: ``act(state, obs, key, step, new_episode) -> (action, state)``: the
            exploring policy. ``step`` is the number of loop updates done so far
            (schedules such as epsilon use it); ``new_episode [B]`` is True where the
            previous step ended an episode (per-episode noise resets and decays).
            Exploration state (OU noise, noise scale) lives in ``state``.
        update: ``update(state, batch, key) -> (state, metrics, td_error)``: one
            gradient step on a replay sample (``batch.transition`` an
            ``NStepTransition [N]``, ``batch.weights [N]`` importance weights);
            ``td_error [N]`` feeds the new priorities. Target networks are updated
            here too.
        greedy_act: ``greedy_act(params, obs) -> action``: the noise-free policy.
        params: ``params(state) -> params`` for ``greedy_act``.
        td_error: optional ``td_error(state, transition) -> [N]``, used to give new
            transitions their initial TD error as priority (None: max priority).
    """

    init: Callable[..., Any]
    act: Callable[..., Any]
    update: Callable[..., Any]
    greedy_act: Callable[..., Any]
    params: Callable[[Any], Any]
    td_error: Callable[..., Any] | None = None

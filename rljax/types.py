"""Shared type aliases and records.

Records that flow through the compiled loop are ``NamedTuple``s so they are
pytrees without registration; shapes are given as ``[T, B, ...]`` where ``T``
is time and ``B`` the batch of environments.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PRNGKey = jax.Array
Params = Any  # a pytree of arrays
Metrics = dict[str, Array]


class Transition(NamedTuple):
    """One environment transition per env: ``obs_tm1 --action--> obs_t``.

    Attributes:
        obs: observation the action was taken in, ``[B, *obs_shape]``.
        action: action taken, ``[B]`` (discrete) or ``[B, A]`` (continuous).
        reward: reward received, ``[B]``.
        terminated: the episode reached a terminal state, ``[B]`` bool; no bootstrap.
        truncated: the episode was cut by a time limit, ``[B]`` bool; bootstrap from
            ``next_obs``, which is the real final observation.
        next_obs: observation after the action, ``[B, *obs_shape]``.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    next_obs: Array


class Rollout(NamedTuple):
    """A batch of on-policy experience from ``B`` envs over ``T`` steps.

    Attributes:
        obs: observations ``[T + 1, B, *obs_shape]``; ``obs[t + 1]`` follows
            ``action[t]`` (after an episode end it is the real final observation).
        action: actions ``[T, B]``.
        reward: rewards ``[T, B]``.
        terminated: ``[T, B]`` bool.
        truncated: ``[T, B]`` bool.
        valid: ``[T, B]`` bool, False on envpool reset steps (not transitions).
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    valid: Array

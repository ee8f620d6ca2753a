"""Shared type aliases and records.

Records that flow through the compiled loop are ``NamedTuple``s so they are
pytrees without registration; shapes are given as ``[T, B, ...]`` where ``T``
is time and ``B`` the batch of environments.
"""

from __future__ import annotations

from collections.abc import Callable
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
        extras: what ``act`` returned beside each action (log-probs, values, ...),
            every leaf ``[T, B, ...]``.
        final_obs: ``[T, B, *obs_shape]`` the observation each step ended in, for envs
            that reset in the same step (JAX-native envs): where ``terminated[t] |
            truncated[t]``, ``obs[t + 1]`` is already the next episode's first observation
            and a truncated step bootstraps from ``final_obs[t]`` instead; elsewhere the
            two are equal. None for envs with a separate reset step (envpool), where
            ``obs[t + 1]`` is always the real final observation. It may be kept in a
            narrower dtype that holds the observations exactly
            (``EnvSpec.compact_obs_dtype``); read it through :func:`next_obs` or
            :func:`next_values`, which widen it to ``obs``'s.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    valid: Array
    extras: Any = None
    final_obs: Array | None = None


def next_obs(rollout: Rollout) -> Array:
    """``[T, B, *obs_shape]``: the observation each step of ``rollout`` bootstraps from
    (the real final observation where an episode ended, the next one elsewhere), in the
    observations' dtype (``final_obs`` may be kept in a compact one)."""
    if rollout.final_obs is None:
        return rollout.obs[1:]
    return rollout.final_obs.astype(rollout.obs.dtype)


def next_values(rollout: Rollout, values: Array, value_fn: Callable[[Array], Array],
                time_limit: int) -> Array:
    """``[T, B]``: the value each step of ``rollout`` bootstraps from, given ``values
    [T, B]``, the values of ``obs[:-1]`` recorded when acting, and ``value_fn(obs [N, ...])
    -> [N]``, the value function (of the observation alone: no memory).

    Where an episode goes on that is ``values[t + 1]`` (``value_fn`` of the last
    observation for the last step). With a separate reset step (envpool) ``obs[t + 1]`` is
    the real final observation of an ended episode, so that holds everywhere. Envs that
    reset within the step (``final_obs`` kept) need the value of the real final
    observation where the episode was truncated: :func:`bootstrap_values` runs
    ``value_fn`` on those only.
    """
    if rollout.final_obs is None:
        last = value_fn(rollout.obs[-1])
        return jax.numpy.concatenate([values[1:], last[None]], axis=0)
    final = flat_steps(rollout.final_obs)
    return bootstrap_values(values, rollout.truncated, lambda index: value_fn(
        (final if index is None else final[index]).astype(rollout.obs.dtype)), time_limit)


def flat_steps(x: Array) -> Array:
    """``[T, B, ...]`` -> ``[T * B, ...]``: row ``t * B + b`` is step ``t`` of env ``b``."""
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def bootstrap_values(values: Array, truncated: Array,
                     value_at: Callable[[Array | None], Array], time_limit: int) -> Array:
    """``[T, B]``: ``values[t + 1]`` (the values of ``obs[1:]`` recorded when acting),
    except after the last step and at truncated steps, where ``value_at`` gives them.

    ``value_at(index)``: the values after the steps ``index`` (flat, ``t * B + b``;
    :func:`flat_steps`), or after every step for ``index=None``, ``-> [N]``: the value of
    the observation step ``t`` ended in (for a truncated step its real final one), from
    whatever state the step left (an agent with memory: its carry). Where an episode goes
    on the next step's recorded value is that value; where it terminated no value is used
    (the entry is left as ``values[t + 1]``). An episode is truncated only at its
    ``time_limit`` (steps >= 1), so an env truncates at most ``ceil(T / time_limit)``
    times in ``T`` steps and ``value_at`` runs on that many steps per env, gathered with a
    static size and written back with a dropped scatter for the padding. With no usable
    ``time_limit`` (< 1) or a bound of half the steps or more, ``value_at(None)`` gives
    every entry.
    """
    steps, envs = truncated.shape[:2]
    bound = envs * -(-steps // time_limit) if time_limit >= 1 else steps * envs
    if 2 * bound >= steps * envs:
        return value_at(None).reshape(steps, envs)
    last = value_at(jax.numpy.arange(envs) + (steps - 1) * envs)
    following = jax.numpy.concatenate([values[1:], last[None]], axis=0).reshape(-1)
    # The truncated steps' flat indices, padded with an out-of-range one whose row is
    # computed from a clamped index and whose write is dropped.
    (where,) = jax.numpy.nonzero(truncated.reshape(-1), size=bound, fill_value=steps * envs)
    truncated_values = value_at(jax.numpy.minimum(where, steps * envs - 1))
    return following.at[where].set(truncated_values, mode="drop").reshape(steps, envs)


def valid_mask(rollout: Rollout) -> Array | None:
    """``rollout.valid``, or None where every step is a transition: envs that reset within
    the step (those that keep ``final_obs``) have no reset steps. A loss may then take
    plain means, with the masked means' values and fewer kernels."""
    return None if rollout.final_obs is not None else rollout.valid


class NStepTransition(NamedTuple):
    """An n-step transition, the record stored in replay and consumed by off-policy agents.

    Attributes:
        obs: observation at the start of the window, ``[B, *obs_shape]``.
        action: first action of the window, ``[B]`` or ``[B, A]``.
        reward: discounted reward sum over the window, ``[B]`` float32.
        discount: ``gamma^m``, 0 if a termination ended the window, ``[B]`` float32.
        next_obs: bootstrap observation ``m`` steps ahead, ``[B, *obs_shape]``.
    """

    obs: Array
    action: Array
    reward: Array
    discount: Array
    next_obs: Array


class Sample(NamedTuple):
    """A replay sample, the batch an off-policy agent's ``update`` takes.

    Attributes:
        indices: ``[K]`` int32 slots drawn (priorities are written back to them).
        transition: the stored records, every leaf ``[K, ...]`` (an :class:`NStepTransition`).
        probabilities: ``[K]`` ``P(i) = p_i / sum_k p_k`` (prioritized replay).
        weights: ``[K]`` importance weights ``(N P(i))^-beta``, divided by the batch max
            (all 1 with uniform replay).
    """

    indices: Array
    transition: Any
    probabilities: Array
    weights: Array


class Split(NamedTuple):
    """How a loop running on one shard of a data-parallel run sees the whole batch.

    One agent learning over several devices steps a shard of the envs on each; the loops
    call these two functions where they need every shard's data (acting, storing) or
    their own part of it (stepping, learning). The parallel layer builds them
    (:mod:`rljax.parallel.data_parallel`); on one device both are the identity.

    Attributes:
        gather: a tree of ``[b, ...]`` arrays -> every shard's ``[b * shards, ...]``, in the
            one-device run's order.
        local: a tree of ``[b * shards, ...]`` arrays -> this shard's ``[b, ...]``.
    """

    gather: Callable[[Any], Any]
    local: Callable[[Any], Any]


def _identity(tree: Any) -> Any:
    return tree


WHOLE = Split(gather=_identity, local=_identity)

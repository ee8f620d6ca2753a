"""Streaming n-step transitions from per-env step streams (Sutton, 1988; Hessel et al., 2018).

The unified record that agents consume is :class:`NStepTransition`; the target is
``reward + discount * Q_target(next_obs)``. For a window of ``m <= n`` steps starting at ``t``:

    reward   = sum_{j < m} gamma^j r_{t+j}
    discount = gamma^m * (1 - terminated_{t+m-1})
    next_obs = next_obs_{t+m-1}

The window is cut at the first step with ``terminated`` or ``truncated``: a termination zeroes
the discount (no bootstrap); a truncation keeps ``gamma^m`` and bootstraps from the real final
observation (envpool's ``next_obs`` at a truncated step). For ``n = 1`` this is
``(r_t, gamma (1 - terminated_t), next_obs_t)``.

``push`` keeps a ring of the last ``n`` steps per env (``[n, B, ...]``) and emits, at step
``t``, the window that started at ``t - n + 1`` (a fixed delay of ``n - 1`` steps, so shapes are
fixed). ``emitted_valid`` is False during the first ``n - 1`` steps and when the start step was
an envpool reset step (``valid == False``). Each valid start step is emitted exactly once,
``n - 1`` steps later (the last ``n - 1`` steps of a run are never emitted). Steps inside a
window that follow its end are ignored, so a window never mixes episodes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.buffers._checks import float_in, positive_int
from rljax.types import Array, NStepTransition, Transition


@struct.dataclass
class NStepState:
    """Per-env ring of the last ``n`` steps.

    Attributes:
        ring: ``Transition`` with every leaf ``[n, B, ...]``; step ``t`` lives at ``t % n``.
        valid: ``[n, B]`` bool, the ``valid`` flag of each stored step.
        t: ``[]`` int32, number of steps pushed.
        n: window length (static).
        gamma: discount (static).
    """

    ring: Transition
    valid: Array
    t: Array
    n: int = struct.field(pytree_node=False)
    gamma: float = struct.field(pytree_node=False)


class NStep(NamedTuple):
    """Functions of the n-step accumulator; see the module-level functions of the same name."""

    init: Callable[[Transition, int], NStepState]
    push: Callable[..., tuple[NStepState, NStepTransition, Array]]


def window_returns(
    reward: Array, terminated: Array, truncated: Array, gamma: float
) -> tuple[Array, Array, Array]:
    """n-step reward, discount and window length from ``[n, ...]`` step arrays.

    Args:
        reward: ``[n, ...]`` rewards of the window's steps, oldest first.
        terminated: ``[n, ...]`` bool.
        truncated: ``[n, ...]`` bool.
        gamma: discount.

    Returns:
        ``reward [...]``, ``discount [...]`` (float32) and ``last [...]`` int32, the index of
        the window's last step (``m - 1``).
    """
    n = reward.shape[0]
    done = terminated | truncated
    # A step is inside the window iff no earlier step of the window ended the episode.
    ended_before = jnp.cumsum(done, axis=0) - done
    inside = ended_before == 0
    powers = (gamma ** jnp.arange(n, dtype=jnp.float32)).reshape((n,) + (1,) * (reward.ndim - 1))
    ret = jnp.sum(jnp.where(inside, reward.astype(jnp.float32) * powers, 0.0), axis=0)
    last = jnp.sum(inside, axis=0, dtype=jnp.int32) - 1
    term_last = jnp.take_along_axis(terminated, last[None], axis=0)[0]
    discount = jnp.where(term_last, 0.0, gamma ** (last + 1).astype(jnp.float32))
    return ret, discount.astype(jnp.float32), last


def init(example: Transition, num_envs: int, n: int, gamma: float) -> NStepState:
    """An empty accumulator.

    Args:
        example: one env's step (no batch axis), for shapes and dtypes.
        num_envs: ``B``.
        n: window length (bound by the factory).
        gamma: discount (bound by the factory).
    """
    num_envs = positive_int("num_envs", num_envs)
    ring = jax.tree.map(
        lambda x: jnp.zeros((n, num_envs, *jnp.shape(x)), jnp.result_type(x)), example
    )
    return NStepState(
        ring=Transition(*ring),
        valid=jnp.zeros((n, num_envs), bool),
        t=jnp.zeros((), jnp.int32),
        n=n,
        gamma=gamma,
    )


def push(
    state: NStepState, step: Transition, valid: Array | None = None
) -> tuple[NStepState, NStepTransition, Array]:
    """Adds one step per env and emits the window that started ``n - 1`` steps ago.

    Args:
        state: accumulator state.
        step: ``Transition`` with leaves ``[B, ...]`` (``terminated``/``truncated`` bool).
        valid: ``[B]`` bool, False on envpool reset steps; default all True.

    Returns:
        ``(state, emitted, emitted_valid)``: the new state, an ``NStepTransition`` ``[B, ...]``
        and ``[B]`` bool, True where ``emitted`` is a real transition to store.
    """
    n = state.n
    b = step.reward.shape[0]
    valid = jnp.ones(b, bool) if valid is None else jnp.asarray(valid, bool).reshape(b)
    slot = state.t % n
    step = step._replace(
        terminated=step.terminated.astype(bool), truncated=step.truncated.astype(bool)
    )
    ring = jax.tree.map(
        lambda r, x: jax.lax.dynamic_update_index_in_dim(r, x.astype(r.dtype), slot, 0),
        state.ring,
        step,
    )
    valid_ring = jax.lax.dynamic_update_index_in_dim(state.valid, valid, slot, 0)
    order = (state.t + 1 + jnp.arange(n)) % n  # ring slots of the window, oldest first
    reward, discount, last = window_returns(
        ring.reward[order], ring.terminated[order], ring.truncated[order], state.gamma
    )
    start = order[0]
    envs = jnp.arange(b)
    emitted = NStepTransition(
        obs=ring.obs[start],
        action=ring.action[start],
        reward=reward,
        discount=discount,
        next_obs=ring.next_obs[order[last], envs],
    )
    emitted_valid = valid_ring[start] & (state.t >= n - 1)
    new_state = state.replace(ring=ring, valid=valid_ring, t=state.t + 1)
    return new_state, emitted, emitted_valid


def make_nstep(n: int, gamma: float) -> NStep:
    """Builds an n-step accumulator.

    Args:
        n: window length, integer >= 1.
        gamma: discount in ``[0, 1]``.

    Returns:
        ``NStep(init(example, num_envs), push(state, step, valid=None))``.

    Raises:
        ValueError: on a bad argument.
    """
    n = positive_int("n", n)
    gamma = float_in("gamma", gamma, 0.0, 1.0)
    return NStep(
        init=functools.partial(init, n=n, gamma=gamma),
        push=push,
    )

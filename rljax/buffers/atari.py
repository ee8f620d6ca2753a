"""Frame-stack replay for Atari: each frame stored once, stacks rebuilt at sample time.

DQN (Mnih et al., 2015) feeds stacks of the last ``S = 4`` frames. envpool returns a stack per
step and consecutive stacks share ``S - 1`` frames, so storing ``obs`` and ``next_obs`` would
keep every frame ``2 S = 8`` times. Here each env step stores only the newest frame of its
``obs``; stacks for ``obs`` and the n-step bootstrap ``next_obs`` are gathered back at sample
time, and n-step returns (:func:`rljax.buffers.nstep.window_returns`) are computed there too,
so one store serves any ``n`` without a separate accumulator.

Layout (time-major, one row per loop step, ``T = capacity // num_envs`` rows):
``frames [T, B, H, W]`` uint8, ``flags [T, B]`` uint8 (first / terminated / truncated / valid
bits), ``action [T, B, ...]``, ``reward [T, B]`` float32, and a sum-tree over the ``T * B``
slots (slot = ``row * B + env``). That is ``H * W + 9`` bytes per transition plus about 4 for
the tree: 7,069 for 84x84, so 1M transitions take 6.6 GiB (against ``2 * 4 * 84 * 84 = 56,448``
for stored ``obs`` and ``next_obs``). A push writes one row of each array in place.

Stack boundaries. Position ``q`` of an env's stream holds the newest frame of ``obs_q``;
``obs_{q+1}`` is always ``next_obs_q`` (envpool feeds its output back). ``first[q]`` says that
``obs_q`` starts a fresh stack (``S`` copies of one frame): envpool does that after a game over or
a truncation, but *not* after a life loss with ``episodic_life`` (the game goes on and the stack
shifts although ``terminated`` is True), so boundaries are not ``terminated``. The stack of ``q``
is frames ``q-S+1 .. q``, each older than the latest ``first`` position ``f`` replaced by frame
``f``: exactly the env's stack, and no frame of an earlier game leaks in. ``first`` is given by
the caller or, by default, detected: ``next_obs`` is fresh iff its first ``S - 1`` frames differ
from the last ``S - 1`` of ``obs`` (if they are equal the shifted reconstruction is
pixel-identical anyway). The stream must start at ``env.reset()`` (position 0 is fresh).

Validity. A slot is sampleable ("eligible") iff its step was a real transition (``valid``), its
window of ``n`` steps is complete (position ``<= t - n``) and its ``obs`` history is still in
the ring (position ``>= t - T + S``). Its tree leaf is set on the push that completes it and
zeroed on the push that starts to overwrite its history, so sampling never sees anything else:
uniform mode (``alpha=None``) keeps exact 0/1 counts in an int32 tree, prioritized mode keeps
``(|delta| + eps)^alpha`` (Schaul et al., 2016) in a float32 tree; see
:mod:`rljax.buffers.sum_tree` for the float32 guarantee.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.buffers import sum_tree
from rljax.buffers._checks import float_in, positive_int
from rljax.buffers.nstep import NStepTransition, window_returns
from rljax.buffers.prioritized import PrioritizedSample, priority, proportional_draw
from rljax.types import Array, ArrayLike, PRNGKey, Transition


@struct.dataclass
class AtariState:
    """Frame-stack replay state (``T`` rows, ``B`` envs, ``S`` frames per stack).

    Attributes:
        frames: ``[T, B, H, W]`` newest frame of each step's ``obs``.
        flags: ``[T, B]`` uint8 bit field: ``FIRST`` (that ``obs`` starts a fresh stack),
            ``TERMINATED``, ``TRUNCATED``, ``VALID`` (False on reset steps).
        action: ``[T, B, ...]``.
        reward: ``[T, B]`` float32.
        next_first: ``[B]`` bool, the next push's ``obs`` is fresh (detected).
        t: ``[]`` int32, number of pushes (the next position).
        size: ``[]`` int32, number of eligible slots.
        tree: sum-tree over ``T * B`` slots (int32 0/1 or float32 priorities).
        max_priority: ``[]`` float32, largest priority set (prioritized mode).
        rows, num_envs, stack, n, gamma: static sizes.
    """

    frames: Array
    flags: Array
    action: Array
    reward: Array
    next_first: Array
    t: Array
    size: Array
    tree: sum_tree.SumTreeState
    max_priority: Array
    rows: int = struct.field(pytree_node=False)
    num_envs: int = struct.field(pytree_node=False)
    stack: int = struct.field(pytree_node=False)
    n: int = struct.field(pytree_node=False)
    gamma: float = struct.field(pytree_node=False)

    def slot(self, position: ArrayLike, env: ArrayLike) -> Array:
        """Slot index of an env's stream position (valid while the position is in the ring)."""
        return (jnp.asarray(position) % self.rows) * self.num_envs + jnp.asarray(env)


class AtariBuffer(NamedTuple):
    """Functions of the frame-stack buffer; see the module-level functions of the same name."""

    init: Callable[[Transition], AtariState]
    add: Callable[..., AtariState]
    sample: Callable[..., PrioritizedSample]
    update_priorities: Callable[[AtariState, Array, Array], AtariState]
    can_sample: Callable[[AtariState], Array]
    get: Callable[[AtariState, Array], NStepTransition]


def init(
    example: Transition, rows: int, num_envs: int, n: int, gamma: float, prioritized: bool
) -> AtariState:
    """An empty buffer; ``example`` is one env's transition (``obs [S, H, W]``, no batch)."""
    obs_shape = jnp.shape(example.obs)
    if len(obs_shape) < 2:
        raise ValueError(f"example.obs must be a frame stack [S, ...], got shape {obs_shape}")
    stack = obs_shape[0]
    if rows < n + stack:
        raise ValueError(
            f"capacity // num_envs must be >= n + stack = {n + stack}, got {rows} rows"
        )
    shape = (rows, num_envs)
    return AtariState(
        frames=jnp.zeros(shape + obs_shape[1:], jnp.result_type(example.obs)),
        flags=jnp.zeros(shape, jnp.uint8),
        action=jnp.zeros(shape + jnp.shape(example.action), jnp.result_type(example.action)),
        reward=jnp.zeros(shape, jnp.float32),
        next_first=jnp.ones(num_envs, bool),
        t=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        tree=sum_tree.init(rows * num_envs, jnp.float32 if prioritized else jnp.int32),
        max_priority=jnp.ones((), jnp.float32),
        rows=rows,
        num_envs=num_envs,
        stack=stack,
        n=n,
        gamma=gamma,
    )


FIRST, TERMINATED, TRUNCATED, VALID = 1, 2, 4, 8  # bits of AtariState.flags


def _has(flags: Array, bit: int) -> Array:
    return (flags & bit) != 0


def _same(a: Array, b: Array) -> Array:
    """``[B]`` bool: ``a[i]`` and ``b[i]`` are bitwise equal (uint8 compared 4 bytes at a time)."""
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    if a.dtype == jnp.uint8 and a.shape[1] % 4 == 0:
        to_words = lambda x: jax.lax.bitcast_convert_type(x.reshape(x.shape[0], -1, 4), jnp.uint32)
        return jnp.max(to_words(a) ^ to_words(b), axis=1) == 0
    return jnp.all(a == b, axis=1)


def _set_row(x: Array, row: Array, value: ArrayLike) -> Array:
    return jax.lax.dynamic_update_index_in_dim(x, jnp.asarray(value).astype(x.dtype), row, 0)


def add(
    state: AtariState,
    transition: Transition,
    valid: Array | None = None,
    first: Array | None = None,
) -> AtariState:
    """Stores one step per env and updates which slots are eligible.

    Args:
        state: buffer state.
        transition: ``Transition`` with ``obs [B, S, H, W]``, ``action``, ``reward``,
            ``terminated``, ``truncated`` ``[B]``; ``next_obs`` is only read to detect fresh
            stacks when ``first`` is None.
        valid: ``[B]`` bool, False on envpool reset steps; default all True.
        first: ``[B]`` bool, ``obs`` starts a fresh stack (after a game over or truncation, or
            at ``env.reset()``). Default: detected from the previous call's frames.

    Returns:
        The new state.
    """
    b, s, t = state.num_envs, state.stack, state.t
    if transition.obs.shape[:2] != (b, s):
        raise ValueError(f"obs must be [num_envs={b}, stack={s}, ...], got {transition.obs.shape}")
    valid = jnp.ones(b, bool) if valid is None else jnp.asarray(valid, bool).reshape(b)
    if first is None:
        first = state.next_first
        next_first = ~_same(transition.next_obs[:, :-1], transition.obs[:, 1:])
    else:
        first, next_first = jnp.asarray(first, bool).reshape(b), jnp.zeros(b, bool)
    row = t % state.rows
    bit = lambda x, b: jnp.where(jnp.asarray(x, bool).reshape(-1), b, 0).astype(jnp.uint8)
    flags = (
        bit(first | (t == 0), FIRST)
        | bit(transition.terminated, TERMINATED)
        | bit(transition.truncated, TRUNCATED)
        | bit(valid, VALID)
    )
    state = state.replace(
        frames=_set_row(state.frames, row, transition.obs[:, -1]),
        flags=_set_row(state.flags, row, flags),
        action=_set_row(state.action, row, transition.action),
        reward=_set_row(state.reward, row, transition.reward),
        next_first=next_first,
    )
    # Position t - n is now complete; position t - T + S - 1 just lost its oldest history frame.
    # Both are read from the flags: reading the tree's leaves before writing them would make
    # XLA copy the whole tree twice per call (the read must stay valid across the scatters).
    envs = jnp.arange(b)
    done_row = (t - state.n) % state.rows
    newly = _has(state.flags[done_row], VALID) & (t >= state.n)
    gone_position = t - state.rows + s - 1  # completed long ago, since T >= n + S
    gone_slots = state.slot(gone_position, envs)
    gone = _has(state.flags[gone_position % state.rows], VALID) & (gone_position >= 0)
    new_leaf = jnp.where(newly, state.max_priority, 0).astype(state.tree.nodes.dtype)
    tree = sum_tree.set(
        state.tree,
        jnp.concatenate([gone_slots, done_row * b + envs]),
        jnp.concatenate([jnp.zeros(b, new_leaf.dtype), new_leaf]),
        unique=True,  # distinct envs, and the two rows differ since T >= n + S
    )
    size = state.size + jnp.sum(newly, dtype=jnp.int32) - jnp.sum(gone, dtype=jnp.int32)
    return state.replace(tree=tree, size=size, t=t + 1)


def _stacks(state: AtariState, rows: Array, envs: Array) -> Array:
    """``[K, S, H, W]`` stacks of the positions at ``rows`` (``[K]``) of ``envs`` (``[K]``)."""
    s = state.stack
    # Frames may go back at most to the latest fresh-stack position.
    flags = state.flags[(rows[:, None] - jnp.arange(s - 1)) % state.rows, envs[:, None]]
    firsts = _has(flags, FIRST)
    reach = jnp.where(jnp.any(firsts, axis=1), jnp.argmax(firsts, axis=1), s - 1)
    offsets = jnp.minimum(jnp.arange(s - 1, -1, -1)[None, :], reach[:, None])
    return state.frames[(rows[:, None] - offsets) % state.rows, envs[:, None]]


def get(state: AtariState, slots: Array) -> NStepTransition:
    """The n-step transitions of ``slots`` ``[K]`` (meaningful for eligible slots only)."""
    rows, envs = slots // state.num_envs, slots % state.num_envs
    window = (rows[None, :] + jnp.arange(state.n)[:, None]) % state.rows  # [n, K]
    flags = state.flags[window, envs]
    reward, discount, last = window_returns(
        state.reward[window, envs], _has(flags, TERMINATED), _has(flags, TRUNCATED), state.gamma
    )
    return NStepTransition(
        obs=_stacks(state, rows, envs),
        action=state.action[rows, envs],
        reward=reward,
        discount=discount,
        next_obs=_stacks(state, (rows + last + 1) % state.rows, envs),
    )


def sample(
    state: AtariState, key: PRNGKey, beta: ArrayLike = 1.0, *, batch_size: int
) -> PrioritizedSample:
    """Draws ``batch_size`` eligible slots: uniformly (exact) or by priority (stratified).

    Returns:
        ``PrioritizedSample(indices, transition: NStepTransition, probabilities, weights)``;
        uniform mode gives ``weights = 1``.
    """
    if jnp.issubdtype(state.tree.nodes.dtype, jnp.floating):
        slots, probabilities, weights = proportional_draw(state.tree, key, batch_size, beta)
    else:
        slots = sum_tree.sample(state.tree, key, batch_size)
        probabilities = jnp.full(batch_size, 1.0) / jnp.maximum(state.size, 1)
        weights = jnp.ones(batch_size)
    return PrioritizedSample(slots, get(state, slots), probabilities, weights)


def update_priorities(
    state: AtariState, indices: Array, td_errors: Array, *, alpha: float, eps: float
) -> AtariState:
    """Prioritized mode: ``p = (|delta| + eps)^alpha`` for still-eligible ``indices`` ``[K]``.

    Duplicates keep the last value; slots that are no longer eligible stay at 0. A no-op in
    uniform mode.
    """
    if not jnp.issubdtype(state.tree.nodes.dtype, jnp.floating):
        return state
    indices = jnp.asarray(indices, jnp.int32).reshape(-1)
    p = priority(jnp.reshape(td_errors, indices.shape), alpha, eps)
    keep = (sum_tree.get(state.tree, indices) > 0) & ~jnp.isnan(p)
    tree, max_priority = sum_tree.set_and_max(
        state.tree, jnp.where(keep, indices, -1), p, running_max=state.max_priority)
    return state.replace(tree=tree, max_priority=max_priority)


def can_sample(state: AtariState, min_size: int) -> Array:
    """``[]`` bool: at least ``min_size`` eligible slots."""
    return state.size >= min_size


def make_atari_replay(
    capacity: int,
    num_envs: int,
    batch_size: int,
    n: int = 1,
    gamma: float = 0.99,
    alpha: float | None = None,
    eps: float = 1e-6,
    min_size: int | None = None,
) -> AtariBuffer:
    """Builds a frame-stack replay buffer returning n-step transitions.

    Args:
        capacity: transitions kept (rounded down to a multiple of ``num_envs``); needs
            ``capacity // num_envs >= n + S``.
        num_envs: envs per step ``B``, >= 1.
        batch_size: transitions per ``sample``, >= 1.
        n: n-step window, >= 1.
        gamma: discount in ``[0, 1]``.
        alpha: ``None`` for uniform sampling, else the priority exponent (>= 0).
        eps: priority offset, >= 0.
        min_size: ``can_sample`` threshold (default ``batch_size``), >= 1.

    Returns:
        ``AtariBuffer(init(example), add(state, transition, valid=None, first=None),
        sample(state, key, beta=1.0), update_priorities(state, indices, td_errors),
        can_sample(state), get(state, slots))``.

    Raises:
        ValueError: on a bad argument.
    """
    capacity = positive_int("capacity", capacity)
    num_envs = positive_int("num_envs", num_envs)
    if capacity < num_envs:
        raise ValueError(f"capacity must be >= num_envs={num_envs}, got {capacity}")
    batch_size = positive_int("batch_size", batch_size)
    n = positive_int("n", n)
    gamma = float_in("gamma", gamma, 0.0, 1.0)
    alpha = None if alpha is None else float_in("alpha", alpha, 0.0, 1e3)
    eps = float_in("eps", eps, 0.0, 1e3)
    min_size = batch_size if min_size is None else positive_int("min_size", min_size)
    return AtariBuffer(
        init=functools.partial(
            init,
            rows=capacity // num_envs,
            num_envs=num_envs,
            n=n,
            gamma=gamma,
            prioritized=alpha is not None,
        ),
        add=add,
        sample=functools.partial(sample, batch_size=batch_size),
        update_priorities=functools.partial(update_priorities, alpha=alpha or 0.0, eps=eps),
        can_sample=functools.partial(can_sample, min_size=min_size),
        get=get,
    )

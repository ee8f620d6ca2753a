"""Exploration: epsilon-greedy, piecewise-linear schedules, OU and Gaussian action noise.

All functions are pure and take their keys explicitly; noise processes keep their state
in an array (or pytree) the caller threads through.

Hyperparameters given as Python numbers are validated eagerly (``ValueError``); traced
values (inside ``jit``) are taken as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax.types import Array, ArrayLike, PRNGKey


def _concrete(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array, or None when it is traced (not known until run time)."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check(name: str, value: Any, ok: Any, allowed: str) -> None:
    array = _concrete(value)
    if array is None:
        return
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number) or not np.all(
            ok(array)):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


# --- epsilon-greedy -------------------------------------------------------------------


def epsilon_greedy(key: PRNGKey, q_values: Array, epsilon: ArrayLike) -> Array:
    """Epsilon-greedy actions (Sutton & Barto 2018, sec. 2.3; DQN, Mnih et al. 2015).

    With probability ``epsilon`` an action uniform over all ``A`` (the greedy one
    included), else ``argmax_a q[a]`` (ties to the lowest index); so the greedy action
    has probability ``1 - epsilon + epsilon / A``.

    Args:
        key: PRNG key.
        q_values: ``[B, A]`` (any leading dims ``[..., A]``).
        epsilon: scalar or ``[B]`` (broadcast against the leading dims), in [0, 1].

    Returns:
        Actions ``[B]`` int32.
    """
    _check("epsilon", epsilon, lambda e: (e >= 0) & (e <= 1), "in [0, 1]")
    q_values = jnp.asarray(q_values)
    if q_values.ndim < 1 or q_values.shape[-1] == 0:
        raise ValueError(f"q_values must be [..., A] with A >= 1, got shape {q_values.shape}")
    batch_shape, num_actions = q_values.shape[:-1], q_values.shape[-1]
    explore_key, action_key = jax.random.split(key)
    explore = jax.random.uniform(explore_key, batch_shape) < epsilon
    random_actions = jax.random.randint(action_key, batch_shape, 0, num_actions, jnp.int32)
    greedy_actions = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    return jnp.where(explore, random_actions, greedy_actions)


# --- schedules ------------------------------------------------------------------------


def _check_points(points: Any) -> list[tuple[int, float]]:
    try:
        pairs = [tuple(p) for p in points]
    except TypeError:
        pairs = None
    if not pairs:
        raise ValueError(f"points must be a non-empty sequence of (step, value) pairs, "
                         f"got {points!r}")
    checked = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"points must hold (step, value) pairs, got {pair!r}")
        step, value = pair
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise ValueError(f"points: each step must be an integer >= 0, got {step!r} in "
                             f"{points!r}")
        if isinstance(value, bool) or not isinstance(value, int | float | np.number) or (
                not math.isfinite(value)):
            raise ValueError(f"points: each value must be a finite number, got {value!r} in "
                             f"{points!r}")
        checked.append((int(step), float(value)))
    steps = [s for s, _ in checked]
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError(f"points: steps must be strictly increasing, got {steps}")
    return checked


def _segment(start: float, end: float, length: int) -> optax.Schedule:
    # start + (end - start) * frac, exact at the segment's start (frac = 0), unlike
    # optax.linear_schedule's (start - end) * 1 + end, which can be 1 ulp off there.
    def schedule(count: ArrayLike) -> Array:
        frac = jnp.clip(jnp.asarray(count) / length, 0.0, 1.0)
        return start + (end - start) * frac

    return schedule


def piecewise_linear(points: Sequence[tuple[int, float]]) -> optax.Schedule:
    """A schedule through ``(step, value)`` points, linear in between.

    ``points[0].value`` before the first step, ``points[-1].value`` from the last step
    on, and exactly ``value`` (as float32) at every point's step. Built with
    ``optax.join_schedules``.

    Examples:
        DQN's epsilon (reference: 1 -> 0.1 at update 25,000 -> 0.01 at half the
        training, ``T`` updates): ``piecewise_linear([(0, 1.0), (25_000, 0.1),
        (T // 2, 0.01)])``; prioritized replay's beta: ``piecewise_linear([(0, 0.4),
        (T, 1.0)])``.

    Args:
        points: ``(step, value)`` pairs, steps integers >= 0 strictly increasing, values
            finite.

    Returns:
        An ``optax.Schedule``: ``schedule(step) -> value`` (float32), jit-compatible
        (``step`` may be traced).
    """
    points = _check_points(points)
    steps = [s for s, _ in points]
    values = [v for _, v in points]
    constant = lambda v: (lambda count: jnp.full(jnp.shape(count), v, jnp.float32))
    schedules = [constant(values[0])]
    schedules += [_segment(v0, v1, s1 - s0) for (s0, v0), (s1, v1)
                  in zip(points, points[1:], strict=False)]
    schedules.append(constant(values[-1]))
    # join_schedules hands schedule k the count since boundary k - 1.
    return optax.join_schedules(schedules, steps)


def scaled_learning_rate(lr: float | optax.Schedule,
                         factor: Sequence[tuple[int, float]] | None,
                         steps_per_update: int = 1) -> float | optax.Schedule:
    """``lr``, or with ``factor`` (a piecewise-linear schedule in loop updates, see
    :func:`piecewise_linear`) the optax schedule ``count -> lr * factor(count //
    steps_per_update)`` of an optimizer that takes ``steps_per_update`` steps per loop
    update (its ``count``). ``lr`` may itself be a schedule of ``count`` (an annealed
    rate): then ``lr(count) * factor(count // steps_per_update)``."""
    if factor is None:
        return lr
    scale = piecewise_linear(factor)
    base = lr if callable(lr) else (lambda count: lr)
    return lambda count: base(count) * scale(count // steps_per_update)


# --- action noise ---------------------------------------------------------------------


def gaussian_noise(key: PRNGKey, shape: Sequence[int], sigma: ArrayLike,
                   dtype: Any = jnp.float32) -> Array:
    """Uncorrelated Gaussian action noise ``sigma * N(0, 1)`` of ``shape`` (the simpler
    alternative to OU noise, e.g. Fujimoto et al. 2018)."""
    _check("sigma", sigma, lambda s: s >= 0, "a number >= 0")
    return jnp.asarray(sigma, dtype) * jax.random.normal(key, tuple(shape), dtype)


def ou_init(shape: Sequence[int], mu: ArrayLike = 0.0, dtype: Any = jnp.float32) -> Array:
    """Initial Ornstein-Uhlenbeck state: ``mu`` everywhere, ``[*shape]``.

    For a pytree of processes (e.g. the noise tree of a noisy network) map over it:
    ``jax.tree.map(jnp.zeros_like, tree)``.
    """
    return jnp.full(tuple(shape), mu, dtype)


def ou_step(state: Any, key: PRNGKey, theta: ArrayLike, sigma: ArrayLike,
            mu: ArrayLike = 0.0, dt: ArrayLike = 1.0) -> tuple[Any, Any]:
    """One Euler-Maruyama step of an Ornstein-Uhlenbeck process (Uhlenbeck & Ornstein
    1930), DDPG's exploration noise (Lillicrap et al. 2016).

    ``x' = x + theta (mu - x) dt + sigma sqrt(dt) N(0, 1)``, independently per element.

    With ``a = 1 - theta dt`` (``0 <= a < 1``), exactly for this discrete update:

    * mean reversion: ``E[x_{t+k} | x_t] = mu + a^k (x_t - mu)``;
    * ``Var[x_{t+k} | x_t] = sigma^2 dt (1 - a^(2k)) / (1 - a^2)``;
    * stationary variance ``sigma^2 dt / (1 - a^2)``; with ``dt = 1``,
      ``sigma^2 / (1 - (1 - theta)^2)`` (reference theta 0.01, sigma 0.2: 2.01, std 1.42).

    Args:
        state: current values ``x``, an array or a pytree of arrays.
        key: PRNG key (split per leaf).
        theta: mean-reversion rate, >= 0 with ``theta * dt <= 1``.
        sigma: noise scale, >= 0.
        mu: long-run mean.
        dt: time step, > 0.

    Returns:
        ``(noise, state)``: the new values, twice (the process's output is its state).
    """
    _check("theta", theta, lambda t: t >= 0, "a number >= 0")
    _check("sigma", sigma, lambda s: s >= 0, "a number >= 0")
    _check("dt", dt, lambda d: d > 0, "a number > 0")
    product = _concrete(theta), _concrete(dt)
    if product[0] is not None and product[1] is not None and np.any(
            product[0] * product[1] > 1):
        raise ValueError(f"theta * dt must be <= 1 (beyond it the update overshoots the "
                         f"mean), got theta={theta!r}, dt={dt!r}")
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(key, len(leaves)) if leaves else []
    scale = jnp.sqrt(jnp.asarray(dt, jnp.float32))
    new = [x + theta * (mu - x) * dt + sigma * scale * jax.random.normal(k, x.shape, x.dtype)
           for x, k in zip(leaves, keys, strict=True)]
    new_state = jax.tree.unflatten(treedef, new)
    return new_state, new_state


def ou_reset(state: Any, started: ArrayLike, mu: ArrayLike = 0.0) -> Any:
    """Restarts the processes of the envs whose episode just started.

    Args:
        state: OU state, an array or pytree of arrays, each ``[B, ...]``.
        started: ``[B]`` bool, True where a new episode begins.
        mu: value to restart at.

    Returns:
        The state with ``mu`` where ``started``, unchanged elsewhere.
    """
    started = jnp.asarray(started)
    if started.ndim != 1:
        raise ValueError(f"started must be [B] bool, got shape {started.shape}")

    def reset(x: Array) -> Array:
        if x.shape[:1] != started.shape:
            raise ValueError(f"ou_reset: state leaves must be [B, ...] with B = "
                             f"{started.shape[0]} (from started), got shape {x.shape}")
        mask = started.reshape(started.shape + (1,) * (x.ndim - 1))
        return jnp.where(mask, jnp.asarray(mu, x.dtype), x)

    return jax.tree.map(reset, state)

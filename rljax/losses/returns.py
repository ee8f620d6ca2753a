"""Bootstrapped returns over a rollout, with episode boundaries.

All functions work on one env's sequence of length ``T`` (rlax naming: ``_t``
indexes the step, ``v_t`` the value of the state *after* step ``t``); batch them
over envs with ``jax.vmap(fn, in_axes=1, out_axes=1)``.

Episode ends are handled by two per-step inputs:

* ``discount_t = gamma * (1 - terminated_t)``: a terminal state contributes no
  future value.
* ``end_t = terminated_t | truncated_t``: the return of step ``t`` must not
  continue into the next step, which belongs to another episode; after a
  truncation it bootstraps from ``v_t``, the value of the real final observation.

Inputs of different float dtypes (float32, bfloat16, float16) are computed in their promoted
dtype (``jnp.result_type``; integers promote to the default float), which is also the dtype of
the result. An empty sequence (``T = 0``) gives an empty result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.losses.checks import sequences
from rljax.types import Array, ArrayLike


def _compute_dtype(*xs: ArrayLike) -> jnp.dtype:
    # The weak 0.0 turns an all-integer promotion into the default float, and leaves a float
    # one as it is (bfloat16 stays bfloat16).
    return jnp.result_type(*xs, 0.0)


def _per_step(fn: str, name: str, x: ArrayLike, shape: tuple[int, ...],
              dtype: jnp.dtype) -> Array:
    x = jnp.asarray(x, dtype)
    try:
        return jnp.broadcast_to(x, shape)
    except ValueError:
        raise ValueError(f"{fn}: {name} must be a scalar or of shape {shape}, "
                         f"got {x.shape}") from None


def lambda_returns(r_t: Array, discount_t: Array, v_t: Array, lambda_t: Array) -> Array:
    """Lambda-returns with a per-step lambda (Sutton & Barto 2018, eq. 12.18).

    ``G_t = r_t + discount_t * ((1 - lambda_t) * v_t + lambda_t * G_{t+1})``,
    with the last step bootstrapping fully from ``v_{T-1}``.

    Args:
        r_t: rewards ``[T]``.
        discount_t: discounts ``[T]``.
        v_t: values of the next states ``[T]``.
        lambda_t: mixing weights ``[T]`` (or a scalar).

    Returns:
        Returns ``[T]``.
    """
    dtype = _compute_dtype(r_t, discount_t, v_t, lambda_t)
    r_t, discount_t, v_t = sequences("lambda_returns", dtype, r_t=r_t, discount_t=discount_t,
                                      v_t=v_t)
    lambda_t = _per_step("lambda_returns", "lambda_t", lambda_t, r_t.shape, dtype)
    if r_t.shape[0] == 0:
        return jnp.zeros(r_t.shape, dtype)
    lambda_t = lambda_t.at[-1].set(0.0)

    def step(g_next, xs):
        r, d, v, lam = xs
        g = r + d * ((1.0 - lam) * v + lam * g_next)
        return g, g

    # Rollouts are short: unrolling avoids a loop per update on XLA:CPU.
    _, returns = jax.lax.scan(step, v_t[-1], (r_t, discount_t, v_t, lambda_t), reverse=True,
                              unroll=min(r_t.shape[0], 16))
    return returns


def n_step_returns(r_t: Array, discount_t: Array, end_t: Array, v_t: Array) -> Array:
    """Rollout returns as in A2C (Mnih et al. 2016): sum rewards until the episode
    ends or the rollout does, then bootstrap.

    ``G_t = r_t + discount_t * (v_t if end_t or t = T-1 else G_{t+1})``.

    Args:
        r_t: rewards ``[T]``.
        discount_t: ``gamma * (1 - terminated_t)``, ``[T]``.
        end_t: episode ended at step ``t`` (terminated or truncated), ``[T]`` bool.
        v_t: values of the next states ``[T]``.

    Returns:
        Returns ``[T]``.
    """
    dtype = _compute_dtype(r_t, discount_t, v_t)
    r_t, discount_t, end_t, v_t = sequences(
        "n_step_returns", dtype, r_t=r_t, discount_t=discount_t, end_t=end_t, v_t=v_t)
    return lambda_returns(r_t, discount_t, v_t, 1.0 - end_t)


def gae_advantages(r_t: Array, discount_t: Array, end_t: Array, v_tm1: Array, v_t: Array,
                   lambda_: float) -> Array:
    """Generalized advantage estimates (Schulman et al. 2016).

    ``A_t = delta_t + discount_t * lambda * (1 - end_t) * A_{t+1}`` with
    ``delta_t = r_t + discount_t * v_t - v_tm1``.

    Args:
        r_t: rewards ``[T]``.
        discount_t: ``gamma * (1 - terminated_t)``, ``[T]``.
        end_t: episode ended at step ``t``, ``[T]`` bool.
        v_tm1: values of the states acted in ``[T]``.
        v_t: values of the next states ``[T]``.
        lambda_: GAE lambda in [0, 1].

    Returns:
        Advantages ``[T]``; where ``v_tm1[t + 1] == v_t[t]`` within episodes (as in
        a rollout), ``advantages + v_tm1`` equal :func:`lambda_returns` with
        ``lambda_t = lambda * (1 - end_t)``.
    """
    dtype = _compute_dtype(r_t, discount_t, v_tm1, v_t, lambda_)
    r_t, discount_t, end_t, v_tm1, v_t = sequences(
        "gae_advantages", dtype, r_t=r_t, discount_t=discount_t, end_t=end_t, v_tm1=v_tm1,
        v_t=v_t)
    if r_t.shape[0] == 0:
        return jnp.zeros(r_t.shape, dtype)
    delta_t = r_t + discount_t * v_t - v_tm1
    decay_t = discount_t * jnp.asarray(lambda_, dtype) * (1.0 - end_t)

    def step(adv_next, xs):
        delta, decay = xs
        adv = delta + decay * adv_next
        return adv, adv

    _, adv = jax.lax.scan(step, jnp.zeros_like(r_t[-1]), (delta_t, decay_t), reverse=True,
                          unroll=min(r_t.shape[0], 16))
    return adv

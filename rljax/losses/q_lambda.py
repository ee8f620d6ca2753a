"""Q(lambda) targets over a rollout, the regression targets of PQN (Gallici et al. 2024,
"Simplifying Deep Temporal Difference Learning").

Conventions follow :mod:`rljax.losses.returns`: one env's sequence of length ``T``
(``q_t`` holds the Q-values of the state *after* step ``t``); batch over envs with
``jax.vmap(fn, in_axes=1, out_axes=1)``. Episode ends enter as

* ``discount_t = gamma * (1 - terminated_t)``: a terminal state contributes no future
  value;
* ``end_t = terminated_t | truncated_t``: the trace stops at step ``t``, since step
  ``t + 1`` belongs to another episode; after a truncation the target bootstraps from
  ``q_t``, the Q-values of the real final observation.

envpool's reset steps (``valid`` False) come right after an episode end, so no target
of a valid step reads past them; their own targets are meaningless and the caller's
``valid`` mask drops them from the loss.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.types import Array, ArrayLike


def q_lambda_returns(r_t: ArrayLike, discount_t: ArrayLike, end_t: ArrayLike,
                     q_t: ArrayLike, lambda_: float) -> Array:
    """Peng's Q(lambda) returns with greedy bootstraps (Peng & Williams 1996; PQN).

    ``G_t = r_t + discount_t * ((1 - lambda) max_a q_t[a] + lambda G_{t+1})``, where
    ``G_{t+1}`` is replaced by ``max_a q_t[a]`` when the episode ends at ``t``
    (``end_t``) or ``t = T - 1``. ``lambda = 0`` gives the one-step Q-learning target
    ``r_t + discount_t max_a q_t[a]``; ``lambda = 1`` sums the rewards to the end of the
    episode or rollout and bootstraps there.

    Args:
        r_t: rewards ``[T]``.
        discount_t: ``gamma * (1 - terminated_t)``, ``[T]``.
        end_t: episode ended at step ``t`` (terminated or truncated), ``[T]`` bool.
        q_t: Q-values of the next states ``[T, A]`` (at an episode end, of the real
            final observation).
        lambda_: trace decay in [0, 1].

    Returns:
        Targets ``[T]``, without gradient (``stop_gradient``).
    """
    r_t, discount_t, end_t, q_t = (jnp.asarray(x) for x in (r_t, discount_t, end_t, q_t))
    for name, x, rank in (("r_t", r_t, 1), ("discount_t", discount_t, 1),
                          ("end_t", end_t, 1), ("q_t", q_t, 2)):
        if x.ndim != rank:
            dims = "[T]" if rank == 1 else "[T, A]"
            raise ValueError(f"q_lambda_returns: {name} must be {dims} (one env's rollout; "
                             f"vmap over envs), got shape {x.shape}")
    lengths = {"r_t": r_t.shape[0], "discount_t": discount_t.shape[0],
               "end_t": end_t.shape[0], "q_t": q_t.shape[0]}
    if len(set(lengths.values())) != 1 or r_t.shape[0] == 0:
        raise ValueError("q_lambda_returns: r_t, discount_t, end_t and q_t must share a "
                         "length T >= 1, got " + ", ".join(f"{k} {v}" for k, v in
                                                           lengths.items()))
    if isinstance(lambda_, int | float) and not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"q_lambda_returns: lambda_ must be in [0, 1], got {lambda_!r}")

    dtype = r_t.dtype
    v_t = jnp.max(q_t, axis=-1).astype(dtype)
    lambda_t = jnp.asarray(lambda_, dtype) * (1.0 - end_t.astype(dtype))
    # G_T lies outside the rollout: the last step bootstraps fully from q_{T-1}.
    lambda_t = lambda_t.at[-1].set(0.0)

    def step(g_next, xs):
        r, d, v, lam = xs
        g = r + d * (v + lam * (g_next - v))
        return g, g

    # Rollouts are short: unrolling avoids a loop per update on XLA:CPU.
    _, returns = jax.lax.scan(step, jnp.zeros((), dtype),
                              (r_t, discount_t.astype(dtype), v_t, lambda_t), reverse=True,
                              unroll=min(r_t.shape[0], 16))
    return jax.lax.stop_gradient(returns)

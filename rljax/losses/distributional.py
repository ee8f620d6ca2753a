"""Categorical distributional value learning: C51 (Bellemare et al. 2017, "A
Distributional Perspective on Reinforcement Learning"), as used in Rainbow (Hessel et al.
2018).

Returns are distributions over a fixed support of ``K`` evenly spaced atoms
``z_k = v_min + k * dz`` (``jnp.linspace(v_min, v_max, K)``); a network gives logits
``[A, K]`` per state. Per-transition functions in the style of
:mod:`rljax.losses.value_learning` (batch with ``jax.vmap`` at the call site): the
discount already folds in the n-step window and termination, ``discount_t = gamma^m *
(1 - terminated)``, and targets are under ``stop_gradient``.

One double-Q (Rainbow) update, with ``vmap`` over the batch::

    target = categorical_double_q_target(support, r_t, discount_t, logits_t_online,
                                         logits_t_target)
    loss = categorical_td_loss(logits_tm1, a_tm1, target)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rljax.losses.checks import concrete, ranks
from rljax.types import Array, ArrayLike


def _check_support(fn: str, support: ArrayLike) -> Array:
    support = jnp.asarray(support)
    if support.ndim != 1 or support.shape[0] < 2:
        raise ValueError(f"{fn}: support must be [K] with K >= 2 atoms, got shape "
                         f"{support.shape}")
    values = concrete(support)
    if values is not None:
        steps = np.diff(values.astype(np.float64))
        if not (steps[0] > 0 and np.allclose(steps, steps[0], rtol=1e-3, atol=0.0)):
            raise ValueError(f"{fn}: support must be increasing and evenly spaced "
                             f"(jnp.linspace(v_min, v_max, K)), got {values!r}")
    return support


def _check_atoms(fn: str, name: str, x: Array, num_atoms: int) -> None:
    if x.shape[-1] != num_atoms:
        raise ValueError(f"{fn}: the last axis of {name} must have the K = {num_atoms} atoms "
                         f"of support, got shape {x.shape}")


def categorical_projection(support: ArrayLike, probs_t: ArrayLike, r_t: ArrayLike,
                           discount_t: ArrayLike) -> Array:
    """Projects the distribution of ``r_t + discount_t * Z`` onto ``support``
    (Bellemare et al. 2017, eq. 7 and algorithm 1).

    Each target atom ``r_t + discount_t * z_j`` is clipped to ``[v_min, v_max]`` and its
    probability split between the two nearest support atoms in proportion to closeness
    (all of it to one atom when it lands on it): the projection onto the support in the
    Cramer (L2 between CDFs) distance (Rowland et al. 2018). Written as a ``[K, K]``
    matrix of hat-function weights ``max(0, 1 - |b_j - k|)``, with ``b_j`` the target
    atom's position in units of the atom spacing, rather than a scatter: no
    duplicate-index adds, and cheap for the usual ``K = 51``. Only ``support[0]``,
    ``support[-1]`` and ``K`` are read; the support must be evenly spaced (checked when
    it is concrete). Differentiable in ``probs_t``; the target functions stop its
    gradient.

    Args:
        support: atoms ``[K]``, evenly spaced from ``v_min`` to ``v_max``.
        probs_t: probabilities of the next state's return distribution, ``[K]``.
        r_t: (n-step) reward, ``[]``.
        discount_t: ``gamma^m * (1 - terminated)``, ``[]``.

    Returns:
        Projected probabilities ``[K]``: nonnegative, summing to the sum of ``probs_t``.
    """
    fn = "categorical_projection"
    support = _check_support(fn, support)
    probs_t, r_t, discount_t = ranks(fn, probs_t=(probs_t, 1), r_t=(r_t, 0),
                                            discount_t=(discount_t, 0))
    _check_atoms(fn, "probs_t", probs_t, support.shape[0])
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    spacing = (v_max - v_min) / (num_atoms - 1)
    # Clip the position, not just the value: (v_max - v_min) / spacing may round past
    # K - 1, which would leak mass off the last atom.
    position = jnp.clip((r_t + discount_t * support - v_min) / spacing, 0, num_atoms - 1)
    atoms = jnp.arange(num_atoms, dtype=position.dtype)
    weights = jnp.clip(1.0 - jnp.abs(position[:, None] - atoms[None, :]), 0.0, 1.0)
    # An elementwise sum, not a matmul: exact float32 products on any backend.
    return jnp.sum(probs_t[:, None] * weights, axis=0)


def categorical_q_values(support: ArrayLike, logits: ArrayLike) -> Array:
    """Mean returns ``sum_k z_k softmax(logits)_k``: ``[..., A]`` from logits ``[..., A, K]``."""
    support = _check_support("categorical_q_values", support)
    logits = jnp.asarray(logits)
    if logits.ndim < 1:
        raise ValueError(f"categorical_q_values: logits must be [..., K], got shape "
                         f"{logits.shape}")
    _check_atoms("categorical_q_values", "logits", logits, support.shape[0])
    return jnp.sum(jax.nn.softmax(logits, axis=-1) * support, axis=-1)


def categorical_double_q_target(support: ArrayLike, r_t: ArrayLike, discount_t: ArrayLike,
                                logits_t_online: ArrayLike, logits_t_target: ArrayLike) -> Array:
    """Double-Q categorical target (Hessel et al. 2018, sec. 3, "Double Q-learning").

    The online network's mean returns select ``a* = argmax_a sum_k z_k p_online(s', a)_k``
    (ties to the lowest index); the target network's ``p_target(s', a*)`` is shifted by
    ``r_t + discount_t * z`` and projected with :func:`categorical_projection`. Plain C51
    (Bellemare et al. 2017, algorithm 1) selects with the target network: pass
    ``logits_t_target`` as both arguments.

    Args:
        support: atoms ``[K]``, evenly spaced.
        r_t: (n-step) reward, ``[]``.
        discount_t: ``gamma^m * (1 - terminated)``, ``[]``.
        logits_t_online: online-network logits of the next state (the selector), ``[A, K]``.
        logits_t_target: target-network logits of the next state (the evaluator),
            ``[A, K]``.

    Returns:
        Target probabilities ``[K]``, under ``stop_gradient``.
    """
    fn = "categorical_double_q_target"
    support = _check_support(fn, support)
    logits_t_online, logits_t_target = ranks(
        fn, logits_t_online=(logits_t_online, 2), logits_t_target=(logits_t_target, 2))
    if logits_t_online.shape != logits_t_target.shape:
        raise ValueError(f"{fn}: logits_t_online and logits_t_target must have the same shape "
                         f"[A, K], got {logits_t_online.shape} and {logits_t_target.shape}")
    _check_atoms(fn, "logits_t_target", logits_t_target, support.shape[0])
    a_star = jnp.argmax(categorical_q_values(support, logits_t_online))
    probs_t = jax.nn.softmax(logits_t_target[a_star])
    return jax.lax.stop_gradient(categorical_projection(support, probs_t, r_t, discount_t))


def categorical_td_loss(logits_tm1: ArrayLike, a_tm1: ArrayLike,
                        target_probs: ArrayLike) -> Array:
    """Cross-entropy of the taken action's distribution to the projected target
    (Bellemare et al. 2017, algorithm 1): ``-sum_k target_k log softmax(logits_tm1[a_tm1])_k``.

    The row is picked by index and atoms without target mass are left out of the sum, so
    ``-inf`` logits (masked actions or atoms) elsewhere give neither NaN nor inf, in the
    loss or its gradient. The cross-entropy differs from ``KL(target || p)`` by the
    target's entropy, a constant for the gradient; Rainbow's replay priority is the KL
    (Hessel et al. 2018, sec. 3), i.e. this loss plus ``sum_k target_k log target_k``.

    Args:
        logits_tm1: online logits of the state acted in, ``[A, K]``.
        a_tm1: action taken, ``[]`` int.
        target_probs: projected target probabilities, ``[K]`` (``stop_gradient`` applied).

    Returns:
        Loss ``[]``.
    """
    fn = "categorical_td_loss"
    logits_tm1, a_tm1, target_probs = ranks(
        fn, logits_tm1=(logits_tm1, 2), a_tm1=(a_tm1, 0), target_probs=(target_probs, 1))
    _check_atoms(fn, "logits_tm1", logits_tm1, target_probs.shape[0])
    if not jnp.issubdtype(a_tm1.dtype, jnp.integer):
        raise ValueError(f"{fn}: a_tm1 must be an integer, got dtype {a_tm1.dtype}")
    target_probs = jax.lax.stop_gradient(target_probs)
    log_p = jax.nn.log_softmax(logits_tm1[a_tm1])
    return -jnp.sum(jnp.where(target_probs > 0, target_probs * log_p, 0.0))

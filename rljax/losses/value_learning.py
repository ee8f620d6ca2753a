"""Per-transition value-learning TD errors and losses (rlax style).

Each TD function takes one transition; batch with ``jax.vmap`` at the call site. The
discount already folds in the n-step window and termination:
``discount_t = gamma^m * (1 - terminated)`` for a window of ``m`` rewards summed into
``r_t``, so a terminal transition does not bootstrap and a truncated one does.
Targets are wrapped in ``stop_gradient``: only ``q_tm1`` receives gradients.

Masked actions may carry Q-value ``-inf`` in ``q_tm1``, ``q_t`` and both next-state arrays:
values are picked by index, so the TD error and its gradient stay finite as long as neither the
taken action nor the next state's selected one is masked. Actions must have an integer dtype;
one outside ``[0, A)`` gives a NaN TD error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.losses.checks import ranks, same_shape
from rljax.networks.distributions import check_integer_action, take_action
from rljax.types import Array, ArrayLike

LOSSES = ("huber", "l2")


def _select(q: Array, a: Array) -> Array:
    # NaN, not 0, for an index out of range: a wrong action must not pass for Q = 0.
    return take_action(q, a, jnp.nan)


def q_learning_td(q_tm1: ArrayLike, a_tm1: ArrayLike, r_t: ArrayLike, discount_t: ArrayLike,
                  q_t: ArrayLike) -> Array:
    """Q-learning TD error (Watkins 1989; DQN, Mnih et al. 2015).

    ``delta = r_t + discount_t * max_a q_t[a] - q_tm1[a_tm1]``.

    Args:
        q_tm1: Q-values of the state acted in, ``[A]``.
        a_tm1: action taken, ``[]`` int.
        r_t: (n-step) reward, ``[]``.
        discount_t: ``gamma^m * (1 - terminated)``, ``[]``.
        q_t: target-network Q-values of the next state, ``[A]``.

    Returns:
        TD error ``[]``.
    """
    q_tm1, a_tm1, r_t, discount_t, q_t = ranks(
        "q_learning_td", q_tm1=(q_tm1, 1), a_tm1=(a_tm1, 0), r_t=(r_t, 0),
        discount_t=(discount_t, 0), q_t=(q_t, 1))
    same_shape("q_learning_td", " [A]", q_tm1=q_tm1, q_t=q_t)
    check_integer_action("q_learning_td", "a_tm1", a_tm1)
    target = jax.lax.stop_gradient(r_t + discount_t * jnp.max(q_t))
    return target - _select(q_tm1, a_tm1)


def double_q_learning_td(q_tm1: ArrayLike, a_tm1: ArrayLike, r_t: ArrayLike,
                         discount_t: ArrayLike, q_t_online: ArrayLike,
                         q_t_target: ArrayLike) -> Array:
    """Double Q-learning TD error (van Hasselt et al. 2016, "Deep Reinforcement Learning
    with Double Q-learning").

    ``delta = r_t + discount_t * q_t_target[argmax_a q_t_online[a]] - q_tm1[a_tm1]``:
    the online network selects the next action, the target network evaluates it. Ties
    in the argmax go to the lowest action index.

    Args:
        q_tm1: online Q-values of the state acted in, ``[A]``.
        a_tm1: action taken, ``[]`` int.
        r_t: (n-step) reward, ``[]``.
        discount_t: ``gamma^m * (1 - terminated)``, ``[]``.
        q_t_online: online-network Q-values of the next state (the selector), ``[A]``.
        q_t_target: target-network Q-values of the next state (the evaluator), ``[A]``.

    Returns:
        TD error ``[]``.
    """
    q_tm1, a_tm1, r_t, discount_t, q_t_online, q_t_target = ranks(
        "double_q_learning_td", q_tm1=(q_tm1, 1), a_tm1=(a_tm1, 0), r_t=(r_t, 0),
        discount_t=(discount_t, 0), q_t_online=(q_t_online, 1), q_t_target=(q_t_target, 1))
    same_shape("double_q_learning_td", " [A]", q_tm1=q_tm1, q_t_online=q_t_online,
                      q_t_target=q_t_target)
    check_integer_action("double_q_learning_td", "a_tm1", a_tm1)
    a_t = jnp.argmax(q_t_online)
    target = jax.lax.stop_gradient(r_t + discount_t * _select(q_t_target, a_t))
    return target - _select(q_tm1, a_tm1)


def ddpg_critic_td(q_tm1: ArrayLike, r_t: ArrayLike, discount_t: ArrayLike,
                   q_t: ArrayLike) -> Array:
    """DDPG critic TD error (Lillicrap et al. 2016, "Continuous Control with Deep
    Reinforcement Learning", eq. 5-6).

    ``delta = r_t + discount_t * Q'(s_t, mu'(s_t)) - Q(s_tm1, a_tm1)``.

    Args:
        q_tm1: critic value of the transition's state and action, ``[]``.
        r_t: (n-step) reward, ``[]``.
        discount_t: ``gamma^m * (1 - terminated)``, ``[]``.
        q_t: target critic at the next state and the target actor's action, ``[]``.

    Returns:
        TD error ``[]``.
    """
    q_tm1, r_t, discount_t, q_t = ranks(
        "ddpg_critic_td", q_tm1=(q_tm1, 0), r_t=(r_t, 0), discount_t=(discount_t, 0),
        q_t=(q_t, 0))
    return jax.lax.stop_gradient(r_t + discount_t * q_t) - q_tm1


def ddpg_actor_loss(q_of_policy_action: ArrayLike) -> Array:
    """DDPG actor loss (Lillicrap et al. 2016, eq. 6): ``-Q(s, mu(s))``.

    Its gradient with respect to the actor's parameters is the deterministic policy
    gradient ``-grad_a Q(s, a)|_{a = mu(s)} grad_theta mu(s)`` (Silver et al. 2014); the
    critic's parameters should be held fixed by the caller (differentiate with respect
    to the actor only).

    Args:
        q_of_policy_action: ``Q(s, mu(s))``, ``[]`` (or any shape: elementwise).

    Returns:
        Loss, same shape as the input.
    """
    return -jnp.asarray(q_of_policy_action)


def huber_loss(x: ArrayLike, delta: float = 1.0) -> Array:
    """Huber loss (Huber 1964), elementwise: quadratic near 0, linear beyond ``delta``.

    ``0.5 x^2`` if ``|x| <= delta`` else ``delta (|x| - 0.5 delta)``. Its gradient is
    ``x`` clipped to ``[-delta, delta]``: the error clipping of DQN (Mnih et al. 2015).

    Args:
        x: errors, any shape.
        delta: where the loss turns linear, > 0.

    Returns:
        Losses, same shape as ``x``.
    """
    _check_delta(delta)
    x = jnp.asarray(x)
    abs_x = jnp.abs(x)
    quadratic = jnp.minimum(abs_x, delta)
    # 0.5 q^2 + delta (|x| - q): both branches at once, with a gradient that is exact
    # (and finite) everywhere.
    return 0.5 * jnp.square(quadratic) + delta * (abs_x - quadratic)


def l2_loss(x: ArrayLike) -> Array:
    """``0.5 x^2``, elementwise (the 0.5 makes the gradient ``x``)."""
    return 0.5 * jnp.square(jnp.asarray(x))


def weighted_td_loss(td_errors: ArrayLike, weights: ArrayLike | None = None, *,
                     loss: str = "huber", delta: float = 1.0) -> Array:
    """Importance-weighted mean loss of a batch of TD errors.

    ``L = mean_i w_i * loss(delta_i)``, the prioritized-replay objective of Schaul et al.
    2016 (the weights ``w_i = (N P(i))^-beta / max_j w_j`` come from the buffer).

    Args:
        td_errors: TD errors ``[B]``.
        weights: importance weights ``[B]``; None: all ones (uniform replay).
        loss: "huber" (with ``delta``) or "l2".
        delta: Huber threshold, > 0.

    Returns:
        Scalar loss.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    (td_errors,) = ranks("weighted_td_loss", td_errors=(td_errors, 1))
    per_item = huber_loss(td_errors, delta) if loss == "huber" else l2_loss(td_errors)
    if weights is None:
        return jnp.mean(per_item)
    weights = jnp.asarray(weights)
    if weights.shape != td_errors.shape:
        raise ValueError(f"weighted_td_loss: weights must have the shape of td_errors "
                         f"{td_errors.shape}, got {weights.shape}")
    return jnp.mean(jax.lax.stop_gradient(weights) * per_item)


def _check_delta(delta: float) -> None:
    if isinstance(delta, int | float) and not isinstance(delta, bool) and not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta!r}")

"""The categorical (C51) head of :mod:`rljax.agents.dqn`: atoms, mean returns, projected
targets and the cross-entropy / KL losses (Bellemare et al. 2017; with the n-step discount
and double-Q selection of Hessel et al. 2018)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from rljax import losses
from rljax.networks import Network
from rljax.types import Array, Metrics, NStepTransition, Params, PRNGKey, Sample

if TYPE_CHECKING:
    from rljax.agents.dqn import DQNConfig


def support(config: DQNConfig) -> Array:
    """The categorical head's atoms ``z [K]``: ``num_atoms`` evenly spaced from ``v_min``
    to ``v_max`` (traced when a sweep varies them)."""
    return jnp.linspace(config.v_min, config.v_max, config.num_atoms, dtype=jnp.float32)


def mean_q(support: Array, logits: Array) -> Array:
    """Mean returns ``[..., A]`` of logits ``[..., A, K]``; ``-inf`` for an action whose
    logits are all ``-inf`` (masked), where the softmax would give NaN."""
    q = losses.categorical_q_values(support, logits)
    return jnp.where(jnp.all(logits == -jnp.inf, axis=-1), -jnp.inf, q)


def categorical_target(support: Array, r_t: Array, discount_t: Array,
                       logits_t_select: Array, logits_t_target: Array) -> Array:
    """One transition's target ``[K]``: the target network's distribution at ``a*``
    (the best mean return of ``logits_t_select [A, K]``) projected after ``r_t +
    discount_t * z``."""
    a_star = jnp.argmax(mean_q(support, logits_t_select))
    probs_t = jax.nn.softmax(logits_t_target[a_star])
    return jax.lax.stop_gradient(
        losses.categorical_projection(support, probs_t, r_t, discount_t))


def categorical_targets(config: DQNConfig, net: Network, params: Params,
                        target_params: Params, transition: NStepTransition,
                        key: PRNGKey | None = None) -> tuple[Array, Array]:
    """Projected target distributions ``[N, K]`` of a batch of transitions, and the
    online logits ``[N, A, K]`` of their states (Bellemare et al. 2017, algorithm 1,
    with the n-step discount and double-Q selection of Hessel et al. 2018).

    ``discount = gamma^m (1 - terminated)``: a terminated transition's target is its
    reward ``r`` projected; a truncated one bootstraps. Only ``params``' use on
    ``transition.obs`` is differentiable. ``key`` draws the NoisyNet noise as in
    :func:`rljax.agents.dqn.td_errors`; None: noise-free.
    """
    keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
    logits_tm1 = net.apply(params, transition.obs, noise_key=keys[0])
    logits_t_target = net.apply(target_params, transition.next_obs, noise_key=keys[1])
    if config.double_q:
        logits_t_select = net.apply(jax.lax.stop_gradient(params), transition.next_obs,
                                    noise_key=keys[2])
    else:
        logits_t_select = logits_t_target
    target = jax.vmap(functools.partial(categorical_target, support(config)))(
        transition.reward, transition.discount, logits_t_select, logits_t_target)
    return target, logits_tm1


def categorical_losses(logits_tm1: Array, a_tm1: Array, target: Array) -> tuple[Array, Array]:
    """Per-transition cross-entropy ``[N]`` (the loss) and ``KL(target || p) [N]`` (the
    priority), for logits ``[N, A, K]``, actions ``[N]`` and targets ``[N, K]``.

    The two differ by the target's entropy, which does not depend on the parameters, so
    they have the same gradient; the KL is 0 for a perfect prediction whatever the
    target's spread, which makes it the priority (Hessel et al. 2018, sec. 3). Atoms
    without target mass add nothing to either, ``-inf`` logits there included.
    """
    ce = jax.vmap(losses.categorical_td_loss)(logits_tm1, a_tm1, target)
    neg_entropy = jnp.sum(target * jnp.log(jnp.where(target > 0, target, 1.0)), axis=-1)
    # >= 0 in exact arithmetic; rounding may leave a few ulps below.
    return ce, jnp.maximum(ce + neg_entropy, 0.0)


def categorical_loss(config: DQNConfig, net: Network, params: Params, target_params: Params,
                      batch: Sample, key: PRNGKey | None) -> tuple[Array, tuple[Array, Metrics]]:
    target, logits_tm1 = categorical_targets(config, net, params, target_params,
                                             batch.transition, key)
    ce, kl = categorical_losses(logits_tm1, batch.transition.action, target)
    total = jnp.mean(batch.weights * ce)
    q_tm1 = mean_q(support(config), logits_tm1)
    metrics = {"loss": total, "q_mean": jnp.mean(q_tm1, where=q_tm1 > -jnp.inf),
               "td_abs_mean": jnp.mean(kl)}
    return total, (kl, metrics)

"""What PPO (feed-forward and recurrent) learns from a rollout: GAE advantages and value
targets, the running statistics that take in every shard's envs, and the loss terms.

Per minibatch, with the advantages standardized within it (``normalize_advantages``) and
envpool's reset steps masked out of every mean:

    policy loss  -min(r A, clip(r, 1 - eps, 1 + eps) A),  r = pi(a|s) / pi_old(a|s)
    value loss   (V(s) - G)^2, optionally clipped around the rollout's values
    entropy     -entropy_coef * H[pi(.|s)]

``loss = policy + value_coef * value - entropy_coef * entropy``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax import losses, normalization
from rljax.agents.ppo_networks import NORMALIZATION_CLIP
from rljax.types import WHOLE, Array, Metrics, Rollout, Split

if TYPE_CHECKING:
    from rljax.agents.ppo_core import PPOConfig


def advantages_and_returns(config: PPOConfig, reward: Array, batch: Rollout,
                           values: Array | tuple[Array, Array]) -> tuple[Array, Array]:
    """GAE advantages and value targets ``[T, B]`` from ``values [T + 1, B]``.

    Terminated episodes do not bootstrap, truncated ones bootstrap from the value of
    their real final observation, and no trace crosses an episode end; the targets of
    reset steps are meaningless (masked by ``batch.valid``).

    Args:
        config: hyperparameters (``gamma``, ``gae_lambda``).
        reward: rewards ``[T, B]`` (scaled or not).
        batch: the rollout (its episode-end flags).
        values: critic values of ``batch.obs``, ``[T + 1, B]``, or ``(v_tm1, v_t)``, both
            ``[T, B]``: those of the observations acted in and of the observations each
            step bootstraps from (:func:`rljax.types.next_obs`).
    """
    discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
    end = batch.terminated | batch.truncated
    v_tm1, v_t = values if isinstance(values, tuple) else (values[:-1], values[1:])
    gae = functools.partial(losses.gae_advantages, lambda_=config.gae_lambda)
    adv = jax.vmap(gae, in_axes=1, out_axes=1)(reward, discount, end, v_tm1, v_t)
    return jax.lax.stop_gradient(adv), jax.lax.stop_gradient(adv + v_tm1)


class Samples(NamedTuple):
    """The per-sample data of an update, every field ``[T, B, ...]`` (or one minibatch's
    ``[N, ...]``).

    Attributes:
        obs: prepared (normalized) observations the actions were taken in.
        action: actions as sampled (unclipped for continuous actions).
        log_prob: their log-probabilities under the rollout's policy.
        value: the rollout's values.
        advantage: GAE advantages.
        target: value targets.
        valid: False on reset steps; None where every step is a transition (envs that
            reset within the step, :func:`rljax.types.valid_mask`): plain means.
    """

    obs: Array
    action: Array
    log_prob: Array
    value: Array
    advantage: Array
    target: Array
    valid: Array | None


def loss_terms(config: PPOConfig, log_prob: Array, entropy: Array, value: Array,
               data: Samples) -> tuple[Array, Metrics]:
    """The clipped surrogate, clipped value loss and entropy bonus from the current
    policy's ``log_prob``, ``entropy`` and ``value`` (shaped like ``data``'s fields, masked
    by ``data.valid``); ``(loss, metrics)``. Shared by feed-forward and recurrent PPO."""
    mask = data.valid
    adv = data.advantage
    if config.normalize_advantages:
        adv = losses.normalize(adv, mask)
    mean = functools.partial(losses.masked_mean, mask=mask)
    policy_loss = mean(losses.clipped_surrogate_loss(log_prob, data.log_prob, adv,
                                                     config.clip_eps))
    value_loss = mean(losses.clipped_value_loss(value, data.value, data.target,
                                                config.value_clip_eps))
    entropy = mean(entropy)
    total = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    metrics = {
        "loss": total, "policy_loss": policy_loss, "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": mean(losses.approx_kl(log_prob, data.log_prob)),
        "clip_fraction": mean(losses.clip_fraction(log_prob, data.log_prob,
                                                   config.clip_eps)),
    }
    return total, metrics


def all_envs(split: Split, tree: Any) -> Any:
    """``[T, b, ...]`` rollout arrays of this shard's envs -> ``[T, B, ...]`` of all envs."""
    return jax.tree.map(lambda x: jnp.swapaxes(split.gather(jnp.swapaxes(x, 0, 1)), 0, 1),
                        tree)


def _own_envs(split: Split, x: Array) -> Array:
    """``[T, B, ...]`` of all envs -> ``[T, b, ...]`` of this shard's envs."""
    return jnp.swapaxes(split.local(jnp.swapaxes(x, 0, 1)), 0, 1)


def scale_rewards(config: PPOConfig, scaler: normalization.RewardScalerState,
                  batch: Rollout, split: Split = WHOLE
                  ) -> tuple[normalization.RewardScalerState, Array]:
    """The reward scaler after the rollout, and its rewards ``[T, b]`` scaled."""
    # The scaler tracks every env's return; on one shard of a data-parallel run it scales
    # all envs' rewards (the same on every device) and keeps its own envs' part.
    def step(scaler, xs):
        reward, done, valid = xs
        return normalization.scale_rewards(scaler, reward, done, config.gamma, mask=valid,
                                           clip=NORMALIZATION_CLIP)

    scaler, reward = jax.lax.scan(step, scaler, all_envs(
        split, (batch.reward, batch.terminated | batch.truncated, batch.valid)))
    return scaler, _own_envs(split, reward)


def updated_obs_stats(config: PPOConfig, obs_stats: normalization.RunningStats | None,
                      batch: Rollout, split: Split = WHOLE
                      ) -> normalization.RunningStats | None:
    """The observation statistics after taking in every shard's valid observations."""
    if not config.normalize_obs:
        return obs_stats
    return normalization.update_stats(obs_stats, *all_envs(split, (batch.obs[:-1],
                                                                   batch.valid)))

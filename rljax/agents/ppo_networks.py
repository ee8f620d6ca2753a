"""PPO's parts (feed-forward and recurrent alike): the optimizer, the observation
normalizer's use, and the policy heads for discrete and continuous actions.

Discrete actions use a categorical policy over the network's logits; continuous ones a
diagonal Gaussian whose mean the network outputs and whose state-independent log-std is a
learned parameter (``params["log_std"] [A]``). The env is stepped with the sampled action
clipped to its bounds; the unclipped action is kept (``extras["raw_action"]``) and its
log-probability used, so the ratio is that of the distribution actually sampled from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import optax

from rljax import normalization
from rljax.agents.base import Parallel, RunLength, annealed_learning_rate
from rljax.envs.spec import EnvSpec
from rljax.gradients import flattened
from rljax.networks.distributions import (
    categorical_entropy,
    categorical_log_prob,
    categorical_sample,
    greedy,
)
from rljax.networks.gaussian import gaussian_entropy, gaussian_log_prob, gaussian_sample
from rljax.types import Array, Params, PRNGKey

if TYPE_CHECKING:
    from rljax.agents.ppo_core import PPOConfig

# Bound on standardized observations and on scaled rewards.
NORMALIZATION_CLIP = 10.0


def num_outputs(spec: EnvSpec) -> int:
    """Logits (discrete) or means (continuous) per observation."""
    return spec.num_actions if spec.discrete else spec.action_shape[0]


def learning_rate(config: PPOConfig, run: RunLength | None) -> optax.Schedule:
    """The learning rate as a function of the optimizer's step count (minibatch steps)."""
    return annealed_learning_rate(config.lr, config.anneal_lr, run,
                                  config.num_epochs * config.num_minibatches)


# Members (seeds x sweep values) vmapped in one program from which the optimizer keeps one
# array per parameter. Below it, one flat vector: a handful of kernels per step instead of
# several per parameter array. With many members each kernel is already large, and the
# copies into and out of the flat vector were 5-6% of a 64-seed CartPole program on CPU
# (benchmarks/many_seeds.py measures both layouts).
PER_ARRAY_MEMBERS = 16


def optimizer(config: PPOConfig, parallel: Parallel, run: RunLength | None = None,
              members: int = 1) -> optax.GradientTransformation:
    """Adam (after global-norm clipping) with the parallel gradient transformation first;
    on one flat vector unless ``members`` (``spec.num_seeds``) reaches
    :data:`PER_ARRAY_MEMBERS`."""
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    adam = optax.chain(*clip, optax.adam(learning_rate(config, run), eps=config.adam_eps))
    return parallel.optimizer(adam if members >= PER_ARRAY_MEMBERS else flattened(adam))


def example_obs(config: PPOConfig, spec: EnvSpec) -> Array:
    """A batch of one zero observation as the network takes it (float when normalized)."""
    return jnp.zeros((1,) + spec.obs_shape,
                     jnp.float32 if config.normalize_obs else spec.obs_dtype)


def with_log_std(config: PPOConfig, spec: EnvSpec, params: dict) -> dict:
    """``params`` and, for continuous actions, the initial ``log_std [A]``."""
    if not spec.discrete:
        params["log_std"] = jnp.full(spec.action_shape, config.log_std_init, jnp.float32)
    return params


def init_statistics(config: PPOConfig, spec: EnvSpec) -> dict[str, Any]:
    """The initial ``obs_stats`` and ``reward_scaler`` of the state (None where off)."""
    return {"obs_stats": (normalization.init_stats(spec.obs_shape) if config.normalize_obs
                          else None),
            "reward_scaler": (normalization.init_reward_scaler(config.loop.num_envs)
                              if config.reward_scaling else None)}


def prepare(config: PPOConfig, obs_stats: normalization.RunningStats | None,
            obs: Array) -> Array:
    """Observations as the network takes them: standardized with ``normalize_obs``."""
    if config.normalize_obs:
        return normalization.normalize_obs(obs_stats, obs, clip=NORMALIZATION_CLIP)
    return obs


def bounds(spec: EnvSpec) -> tuple[Array, Array]:
    return (jnp.asarray(spec.action_low, jnp.float32),
            jnp.asarray(spec.action_high, jnp.float32))


def sample(spec: EnvSpec, params: Params, head: Array, key: PRNGKey) -> tuple[Array, dict]:
    """Actions ``[B]`` (discrete) or ``[B, A]`` (clipped to the bounds) sampled from the
    head, and extras ``log_prob [B]`` (and the unclipped ``raw_action [B, A]``)."""
    if spec.discrete:
        action = categorical_sample(key, head).astype(jnp.int32)
        return action, {"log_prob": categorical_log_prob(head, action)}
    raw = gaussian_sample(key, head, params["log_std"])
    low, high = bounds(spec)
    extras = {"log_prob": gaussian_log_prob(head, params["log_std"], raw), "raw_action": raw}
    return jnp.clip(raw, low, high), extras


def most_likely(spec: EnvSpec, head: Array) -> Array:
    """The most likely action (the mean, clipped to the bounds, for continuous actions)."""
    if spec.discrete:
        return greedy(head).astype(jnp.int32)
    low, high = bounds(spec)
    return jnp.clip(head, low, high)


def log_prob_and_entropy(spec: EnvSpec, params: Params, head: Array,
                         action: Array) -> tuple[Array, Array]:
    """``log pi(action)`` and the policy's entropy, both shaped like the head's batch."""
    if spec.discrete:
        return categorical_log_prob(head, action), categorical_entropy(head)
    return (gaussian_log_prob(head, params["log_std"], action),
            gaussian_entropy(params["log_std"], head.shape[:-1]))

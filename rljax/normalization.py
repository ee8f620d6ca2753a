"""Running observation normalization and reward scaling, as pytree state.

Both are the usual companions of PPO on continuous control (as in OpenAI Baselines'
``VecNormalize``): observations are standardized with the running mean and variance of
all observations seen so far, and rewards are divided by the running standard deviation
of the discounted return. The state lives inside the compiled loop; the caller updates
it with the rollout (masking envpool's reset steps with ``valid``).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rljax.types import Array, ArrayLike


@struct.dataclass
class RunningStats:
    """Mean and (population) variance of every sample seen so far.

    Attributes:
        mean: running mean ``[*shape]`` float32.
        var: running variance ``[*shape]`` float32 (1 before any sample, so normalizing
            is then only a shift by the zero mean).
        count: number of samples merged, scalar. float32 by default: beyond ``2^24``
            samples small increments are rounded away, which only slows the (already
            tiny) weight of new batches; pass ``count_dtype=jnp.float64`` to
            :func:`init_stats` under ``jax_enable_x64`` for an exact count.
    """

    mean: Array
    var: Array
    count: Array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.mean.shape


def init_stats(shape: tuple[int, ...] | int, count_dtype=jnp.float32) -> RunningStats:
    """Statistics of no samples, for samples of shape ``shape`` (``()``: scalars)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return RunningStats(mean=jnp.zeros(shape, jnp.float32), var=jnp.ones(shape, jnp.float32),
                        count=jnp.zeros((), count_dtype))


def _leading(fn: str, stats: RunningStats, x: Array, name: str) -> tuple[int, ...]:
    """The sample dimensions of ``x [..., *shape]``."""
    shape = stats.shape
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
        raise ValueError(f"{fn}: {name} must be [..., *{shape}] (samples of the statistics' "
                         f"shape), got shape {x.shape}")
    return x.shape[:x.ndim - len(shape)]


def update_stats(stats: RunningStats, batch: ArrayLike,
                 mask: ArrayLike | None = None) -> RunningStats:
    """Merges a batch into the running statistics (Chan, Golub & LeVeque 1979).

    With ``n_a`` samples so far, ``n_b`` in the batch, ``n = n_a + n_b`` and
    ``delta = mean_b - mean_a``: ``mean = mean_a + delta n_b / n`` and
    ``var = (var_a n_a + var_b n_b + delta^2 n_a n_b / n) / n``; the result equals
    the mean and variance of all samples at once. The batch's own moments are taken in
    two passes (mean first) to avoid cancellation.

    Args:
        stats: running statistics of shape ``[*shape]``.
        batch: samples ``[..., *shape]`` (e.g. ``[T, B, *obs_shape]``).
        mask: which samples count, ``[...]`` bool (e.g. ``valid``); None: all. Masked
            samples may hold anything, NaN included. A batch with no counted sample
            leaves the statistics unchanged.

    Returns:
        Updated statistics.
    """
    batch = jnp.asarray(batch)
    lead = _leading("update_stats", stats, batch, "batch")
    x = batch.astype(jnp.float32).reshape((-1,) + stats.shape)
    if mask is None:
        keep = jnp.ones(x.shape[:1], bool)
    else:
        mask = jnp.asarray(mask)
        if mask.shape != lead:
            raise ValueError(f"update_stats: mask must have batch's sample shape {lead}, got "
                             f"{mask.shape}")
        keep = mask.astype(bool).reshape(-1)
    keep = keep.reshape(keep.shape + (1,) * len(stats.shape))
    n_b = jnp.sum(keep, axis=0, dtype=jnp.float32).reshape(())
    x = jnp.where(keep, x, 0.0)
    mean_b = jnp.sum(x, axis=0) / jnp.maximum(n_b, 1.0)
    var_b = jnp.sum(jnp.where(keep, jnp.square(x - mean_b), 0.0), axis=0) / jnp.maximum(n_b, 1.0)

    count = stats.count + n_b.astype(stats.count.dtype)
    # Weights from the counts in their own dtype; they are fractions in [0, 1], so
    # float32 suffices from there on.
    w_b = jnp.where(count > 0, n_b.astype(count.dtype) / jnp.where(count > 0, count, 1), 0)
    w_b = w_b.astype(jnp.float32)
    w_a = 1.0 - w_b
    delta = mean_b - stats.mean
    mean = stats.mean + delta * w_b
    var = stats.var * w_a + var_b * w_b + jnp.square(delta) * w_a * w_b
    return RunningStats(mean=mean, var=var, count=count)


def normalize_obs(stats: RunningStats, obs: ArrayLike, clip: float | None = 10.0,
                  eps: float = 1e-8) -> Array:
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)``, in float32.

    Args:
        stats: running statistics of observations ``[*obs_shape]``.
        obs: observations ``[..., *obs_shape]``.
        clip: bound on the normalized values; None: no clipping.
        eps: added to the variance (constant features have variance 0).

    Returns:
        Normalized observations, ``obs``'s shape, float32.
    """
    obs = jnp.asarray(obs)
    _leading("normalize_obs", stats, obs, "obs")
    out = (obs.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + eps)
    return out if clip is None else jnp.clip(out, -clip, clip)


@struct.dataclass
class RewardScalerState:
    """Per-env discounted return and the running statistics of those returns.

    Attributes:
        ret: discounted return of each env's current episode so far, ``[B]`` float32.
        stats: running statistics (scalar shape) of every ``ret`` seen.
    """

    ret: Array
    stats: RunningStats


def init_reward_scaler(num_envs: int) -> RewardScalerState:
    return RewardScalerState(ret=jnp.zeros((num_envs,), jnp.float32), stats=init_stats(()))


def scale_rewards(state: RewardScalerState, reward: ArrayLike, done: ArrayLike,
                  gamma: float, *, mask: ArrayLike | None = None, eps: float = 1e-8,
                  clip: float | None = None) -> tuple[RewardScalerState, Array]:
    """Divides one step's rewards by the running std of the discounted return.

    As Baselines' ``VecNormalize`` ("reward scaling" in Engstrom et al. 2020,
    "Implementation Matters in Deep Policy Gradients"): ``ret = gamma ret + r``, merged
    into the statistics, then ``r / sqrt(var(ret) + eps)``; ``ret`` restarts at 0 after
    the episode ends. Rewards are not centered. Early on, when the returns seen have
    (nearly) no spread, the scale can be large; ``clip`` bounds the result.

    Args:
        state: scaler state for ``B`` envs.
        reward: this step's rewards ``[B]``.
        done: the episode ended at this step (terminated or truncated), ``[B]`` bool.
        gamma: discount of the tracked return, in [0, 1].
        mask: which envs' steps count, ``[B]`` bool (``valid``: False on envpool's reset
            steps); others neither change ``ret`` nor the statistics. None: all.
        eps: added to the variance.
        clip: bound on the scaled rewards; None: no clipping.

    Returns:
        ``(state, scaled_reward [B] float32)``.
    """
    reward = jnp.asarray(reward, jnp.float32)
    done = jnp.asarray(done)
    if not reward.shape == done.shape == state.ret.shape:
        raise ValueError(f"scale_rewards: reward and done must be [B] = {state.ret.shape}, "
                         f"got reward {reward.shape}, done {done.shape}")
    if isinstance(gamma, int | float) and not 0.0 <= gamma <= 1.0:
        raise ValueError(f"scale_rewards: gamma must be in [0, 1], got {gamma!r}")
    ret = state.ret * gamma + reward
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.shape != state.ret.shape:
            raise ValueError(f"scale_rewards: mask must be [B] = {state.ret.shape}, got "
                             f"{mask.shape}")
        ret = jnp.where(mask, ret, state.ret)
    stats = update_stats(state.stats, ret, mask)
    scaled = reward / jnp.sqrt(stats.var + eps)
    if clip is not None:
        scaled = jnp.clip(scaled, -clip, clip)
    ret = jnp.where(done.astype(bool), 0.0, ret)
    return RewardScalerState(ret=ret, stats=stats), scaled

"""Episode statistics carried as a pytree inside the compiled loop.

Returns are accumulated per env across envpool's automatic resets, and the
returns and lengths of finished episodes go into a ring of the most recent
``window`` episodes (pooled over envs), which the host reads once per chunk.

For Atari with ``episodic_life`` a life loss ends the *training* episode but not
the game: the statistics follow the game (raw, unclipped reward summed over all
lives, finished at game over or time limit), which is the score papers report.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rljax.types import Array

DEFAULT_WINDOW = 100


@struct.dataclass
class EpisodeStats:
    """Running and recent episode statistics.

    Attributes:
        running_return: return so far of each env's current episode, ``[B]``.
        running_length: steps so far of each env's current episode, ``[B]``.
        recent_returns: returns of the last ``window`` finished episodes (ring), ``[W]``.
        recent_lengths: lengths of the same episodes, ``[W]``.
        episodes: number of episodes finished since the start, scalar int32.
    """

    running_return: Array
    running_length: Array
    recent_returns: Array
    recent_lengths: Array
    episodes: Array

    @property
    def window(self) -> int:
        return self.recent_returns.shape[-1]


def init_stats(num_envs: int, window: int = DEFAULT_WINDOW) -> EpisodeStats:
    return EpisodeStats(
        running_return=jnp.zeros((num_envs,), jnp.float32),
        running_length=jnp.zeros((num_envs,), jnp.int32),
        recent_returns=jnp.zeros((window,), jnp.float32),
        recent_lengths=jnp.zeros((window,), jnp.int32),
        episodes=jnp.zeros((), jnp.int32),
    )


def update_stats(
    stats: EpisodeStats, reward: Array, counted: Array, episode_end: Array
) -> tuple[EpisodeStats, Array, Array]:
    """Adds one step's rewards and records the episodes that ended.

    Args:
        stats: current statistics.
        reward: raw reward of this step, ``[B]``.
        counted: whether this step counts towards the episode length (False on
            envpool's reset steps, whose action is ignored), ``[B]`` bool.
        episode_end: whether a whole episode (game) ended at this step, ``[B]`` bool.

    Returns:
        ``(stats, episode_return, episode_length)``: the finished episodes' return
        and length at this step, ``[B]`` (meaningful where ``episode_end``).
    """
    ret = stats.running_return + reward.astype(jnp.float32)
    length = stats.running_length + counted.astype(jnp.int32)
    window = stats.window
    # Several envs can finish in the same step: give each a consecutive ring slot.
    order = jnp.cumsum(episode_end.astype(jnp.int32)) - 1
    slot = jnp.where(episode_end, (stats.episodes + order) % window, window)
    recent_returns = stats.recent_returns.at[slot].set(ret, mode="drop")
    recent_lengths = stats.recent_lengths.at[slot].set(length, mode="drop")
    new = EpisodeStats(
        running_return=jnp.where(episode_end, 0.0, ret),
        running_length=jnp.where(episode_end, 0, length),
        recent_returns=recent_returns,
        recent_lengths=recent_lengths,
        episodes=stats.episodes + episode_end.sum(dtype=jnp.int32),
    )
    return new, ret, length


def recent_mean_return(stats: EpisodeStats) -> Array:
    """Mean return of the last ``min(episodes, window)`` episodes (NaN if none)."""
    n = jnp.minimum(stats.episodes, stats.window)
    mask = jnp.arange(stats.window) < n
    total = jnp.sum(jnp.where(mask, stats.recent_returns, 0.0))
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)


def last_episodes(stats, count: int):
    """Host helper: returns and lengths of the last ``count`` finished episodes,
    oldest first (at most ``window``). ``stats`` holds NumPy arrays.
    """
    import numpy as np

    episodes = int(stats.episodes)
    window = stats.recent_returns.shape[-1]
    count = max(0, min(count, episodes, window))
    idx = (episodes - count + np.arange(count)) % window
    return np.asarray(stats.recent_returns)[idx], np.asarray(stats.recent_lengths)[idx]



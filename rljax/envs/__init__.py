"""Batched envpool environments for rljax: spec, host and XLA steps, statistics."""

from rljax.envs.pool import Env
from rljax.envs.pool import EnvState
from rljax.envs.pool import StepResult
from rljax.envs.pool import env_seeds
from rljax.envs.pool import make
from rljax.envs.spec import EnvSpec
from rljax.envs.spec import all_task_ids
from rljax.envs.stats import EpisodeStats
from rljax.envs.stats import recent_mean_return

__all__ = [
    "Env",
    "EnvSpec",
    "EnvState",
    "EpisodeStats",
    "StepResult",
    "all_task_ids",
    "env_seeds",
    "make",
    "recent_mean_return",
]

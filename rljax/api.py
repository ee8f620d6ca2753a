"""The Python API: ``rljax.train(...)`` returns a :class:`Run`."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from rljax.config import RunConfig, from_preset
from rljax.presets import Preset
from rljax.training.driver import RunResult, train_run


@dataclasses.dataclass
class Run:
    """A finished training run.

    Attributes:
        run_dir: where config.json, metrics.jsonl and summary.json were written.
        config: the :class:`RunConfig` it ran with.
        state: final train state (``LoopState``: agent state, env state, counters).
        metrics: one dict per chunk, as in metrics.jsonl.
        summary: as in summary.json.
    """

    run_dir: str
    config: RunConfig
    state: Any
    metrics: list[dict]
    summary: dict
    _result: RunResult = dataclasses.field(repr=False)

    @functools.cached_property
    def _greedy(self):
        agent = self._result.agent
        return jax.jit(agent.greedy_act)

    def policy(self, obs: Any) -> np.ndarray:
        """Greedy (evaluation) actions for a batch of observations ``[N, *obs_shape]``."""
        spec = self._result.spec
        obs = np.asarray(obs)
        single = obs.shape == spec.obs_shape
        batch = obs[None] if single else obs
        action = np.asarray(self._greedy(self._result.agent.params(self.state.agent),
                                         batch.astype(spec.obs_dtype)))
        return action[0] if single else action


def train(preset_or_config: str | Preset | RunConfig, *, progress: bool = False,
          run_dir: str | None = None, **overrides: Any) -> Run:
    """Trains an agent and returns the :class:`Run`.

    Args:
        preset_or_config: a preset name (see ``rljax presets``), a Preset, or a
            RunConfig.
        progress: draw the progress line on stderr.
        run_dir: run directory (default: a new folder under ``logdir``).
        **overrides: ``env``, ``total_steps``, ``seed``, ``num_envs``, ``logdir``
            and any field of the agent's config (presets only).

    Example:
        >>> run = rljax.train("cartpole-a2c", total_steps=100_000, seed=1)
        >>> run.summary["final_return_mean"]
    """
    if isinstance(preset_or_config, RunConfig):
        if overrides:
            raise ValueError("overrides apply to presets; pass a complete RunConfig instead "
                             f"(got {', '.join(overrides)})")
        run = preset_or_config
    else:
        run = from_preset(preset_or_config, **overrides)
    result = train_run(run, run_dir=run_dir, progress=progress)
    return Run(result.run_dir, run, result.state, result.metrics, result.summary, result)

"""Named, reproducible training configurations."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from rljax.agents.a2c import A2CConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """A named run: algorithm, environment, hyperparameters and budget.

    Attributes:
        name: preset name (``rljax train NAME``).
        algo: algorithm name in :mod:`rljax.algorithms`.
        env_id: envpool task id.
        config: the agent's config.
        total_steps: default env-step budget (all envs together).
        threshold: mean return over the last 100 episodes that counts as solved
            (None: the task's own reward threshold, if any).
        env_options: extra envpool options.
        chunk_steps: env steps per compiled chunk (how often the host looks).
        stop_on_solve: end training once the threshold is reached.
        eval_every: evaluate the noise-free policy every this many env steps (0: never).
        key_params: config fields shown by ``rljax presets``.
        notes: anything a user should know about the preset.
    """

    name: str
    algo: str
    env_id: str
    config: Any
    total_steps: int
    threshold: float | None = None
    env_options: tuple[tuple[str, Any], ...] = ()
    chunk_steps: int = 20_000
    stop_on_solve: bool = False
    eval_every: int = 0
    key_params: tuple[str, ...] = ()
    notes: str = ""


_PRESETS: list[Preset] = [
    Preset(
        name="cartpole-a2c",
        algo="a2c",
        env_id="CartPole-v1",
        config=A2CConfig(gae_lambda=0.95),
        total_steps=500_000,
        threshold=475.0,
        key_params=("num_envs", "rollout_len", "gae_lambda", "actor_lr", "critic_lr",
                    "entropy_coef", "gamma"),
        notes="reference A2C (separate actor 2x128 / critic 2x64, 5-step rollouts) with "
              "GAE(0.95) advantages: 8 of 8 seeds solve within 500k steps here, against 7 "
              "of 8 with plain 5-step returns (--set gae_lambda=none)",
    ),
]

PRESETS: dict[str, Preset] = {p.name: p for p in _PRESETS}


def get_preset(name: str) -> Preset:
    """Returns the preset called ``name``; ValueError listing the choices otherwise."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown preset {name!r}{hint}; available: {', '.join(PRESETS)}")
    return PRESETS[name]

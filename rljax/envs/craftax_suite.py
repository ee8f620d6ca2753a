"""Craftax's side of :mod:`rljax.envs.native`: making its envs, splitting its ``done``,
the names of its achievements, and the achievement rates a run logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def make(name: str):
    """Craftax env ``name`` without its own auto-reset (rljax resets), and its params."""
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(name, auto_reset=False)
    return env, env.default_params


def split(env, params, state, done):
    """``(terminated, truncated)`` of Craftax's ``done``."""
    # Craftax's done mixes death and the time limit; the limit is a truncation.
    truncated = state.timestep >= params.max_timesteps
    return done & ~truncated, truncated


def achievement_names() -> tuple[str, ...]:
    """The achievements Craftax counts, lower-case, in its own order."""
    from craftax.craftax_classic.constants import Achievement

    return tuple(a.name.lower() for a in Achievement)


def achievement_rates(names: Sequence[str], extras: Any, before: Any) -> dict[str, float]:
    """``{"achievement/NAME": percent}``: the share of the episodes that ended between two
    readings of ``EnvState.extras`` (host arrays) that reached each achievement."""
    ended = float(extras["episodes"]) - (float(before["episodes"]) if before else 0.0)
    if ended <= 0:
        return {}
    got = np.asarray(extras["achieved"]) - (np.asarray(before["achieved"]) if before else 0.0)
    return {f"achievement/{n}": float(100.0 * g / ended) for n, g in zip(names, got,
                                                                         strict=True)}

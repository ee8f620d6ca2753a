"""Named, reproducible training configurations, one module per agent family.

Presets are built lazily: resolving one name imports only the module that holds it (and
so only that family's agent), and each family's module stays small however many presets
it gains. ``_INDEX`` says which module holds which names; a test checks it against the
modules themselves.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from rljax import cpu_threads
from rljax.run.config import RunConfig, override
from rljax.run.presets.base import Preset, preset

_INDEX: dict[str, tuple[str, ...]] = {
    "a2c": ("cartpole-a2c",),
    "dqn": ("cartpole-dqn", "breakout-dqn", "breakout-dqn-500k", "cartpole-rainbow",
            "breakout-rainbow", "breakout-rainbow-500k"),
    "ddpg": ("reacher-ddpg", "reacher-ddpg-reference"),
    "memory": ("cartpole-novel-ppo-rnn", "cartpole-novel-pqn-rnn", "cartpole-novel-ppo",
               "cartpole-novel-pqn"),
    "ppo": ("cartpole-ppo", "breakout-ppo", "reacher-ppo", "halfcheetah-ppo",
            "breakout-ppo-1m"),
    "pqn": ("cartpole-pqn", "breakout-pqn", "breakout-pqn-1m"),
    "twin_critic": ("reacher-td3", "reacher-sac", "halfcheetah-td3", "halfcheetah-sac",
                    "hopper-sac"),
    "physics": ("brax-inverted-pendulum-sac", "brax-inverted-pendulum-ppo",
                "brax-reacher-ppo-cpu", "brax-reacher-sac-cpu", "brax-reacher-ppo",
                "brax-halfcheetah-ppo", "brax-ant-ppo", "playground-cartpole-balance-sac-cpu",
                "playground-cartpole-balance-ppo",
                "playground-cartpole-balance-sac", "playground-reacher-easy-ppo",
                "playground-reacher-easy-sac", "playground-cheetah-run-ppo",
                "playground-cheetah-run-sac"),
    "native": ("gymnax-cartpole-ppo", "gymnax-cartpole-ppo-purejaxrl", "gymnax-cartpole-pqn",
               "minatar-breakout-ppo", "minatar-breakout-pqn", "minatar-space-invaders-ppo",
               "minatar-space-invaders-pqn", "minatar-asterix-ppo", "minatar-asterix-pqn",
               "minatar-freeway-ppo", "minatar-freeway-pqn", "gymnax-pendulum-sac",
               "gymnax-pendulum-td3", "craftax-classic-ppo", "craftax-classic-ppo-rnn",
               "craftax-classic-pqn-rnn", "craftax-classic-ppo-rnn-cpu",
               "craftax-classic-ppo-cpu"),
}
_MODULE_OF = {name: module for module, names in _INDEX.items() for name in names}


def family(module: str) -> dict[str, Preset]:
    """The presets of one family module (``rljax.run.presets.<module>``), by name."""
    presets = importlib.import_module(f"rljax.run.presets.{module}").PRESETS
    return {p.name: p for p in presets}


class _Presets(Mapping):
    """Name -> :class:`Preset`, importing a family's module on first use."""

    def __getitem__(self, name: str) -> Preset:
        if name not in _MODULE_OF:
            raise KeyError(name)
        return family(_MODULE_OF[name])[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULE_OF)

    def __len__(self) -> int:
        return len(_MODULE_OF)

    def __contains__(self, name: object) -> bool:
        return name in _MODULE_OF


PRESETS: Mapping[str, Preset] = _Presets()


def get_preset(name: str) -> Preset:
    """Returns the preset called ``name``; ValueError listing the choices otherwise."""
    if name not in PRESETS:
        close = difflib.get_close_matches(str(name), list(PRESETS), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown preset {name!r}{hint}; available: {', '.join(PRESETS)}")
    return PRESETS[name]


# A preset's one-thread CPU pool (``cpu_threads=1``) pays for a few members and JAX's
# default pool for many: gymnax-cartpole-ppo on 2 cores, alternating pairs, one thread won
# every pair at 2-8 seeds and the default pool every pair at 64-256 in some runs, with 16
# and 32 level within the pairs' noise; any bound from 8 to 63 fits all five runs
# (python -m benchmarks.scaling_docs, docs/scaling.md).
ONE_THREAD_MEMBERS = 16


def from_preset(preset: str | Preset, **changes: Any) -> RunConfig:
    """A preset's run (by name or as a :class:`Preset`) with run settings and agent fields
    changed as :func:`rljax.run.config.override` takes them.

    A preset that runs XLA's CPU pool with fewer threads than JAX's default keeps that
    for up to :data:`ONE_THREAD_MEMBERS` members (seeds x sweep values); with more, and
    no ``cpu_threads`` given, the run takes JAX's default (``cpu_threads=0``), and, with
    no ``cpu_devices`` or ``devices`` given, splits its members over one host CPU device
    per core (``cpu_devices``: the most cores, up to all this process may run on, that
    divide the members evenly), which ran 64 members of gymnax-cartpole-ppo 1.7x as
    fast as one device on 2 cores (docs/scaling.md). A preset with ``split_members`` (the
    off-policy Reacher presets) splits from 2 members on: 1.8-2.2x for reacher-td3 and
    reacher-ddpg, 1.2x for reacher-sac, on 2 cores (docs/scaling.md).
    """
    base = preset if isinstance(preset, Preset) else get_preset(preset)
    run = override(base.run, **changes)
    many = base.run.cpu_threads > 0 and run.num_members > ONE_THREAD_MEMBERS
    if many and changes.get("cpu_threads") in (None, ""):
        run = dataclasses.replace(run, cpu_threads=0)
    if ((many or base.split_members) and changes.get("cpu_devices") in (None, "")
            and changes.get("devices") in (None, "") and run.devices == 1):
        run = dataclasses.replace(run, cpu_devices=cpu_threads.member_split(run.num_members))
    return run


__all__ = ["PRESETS", "Preset", "family", "from_preset", "get_preset", "preset"]

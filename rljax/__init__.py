"""rljax: deep reinforcement-learning agents as pure JAX functions.

The package is layered, each layer importing only from those below it::

    run        rljax.run        config, presets, registry, build, driver, checkpoints, api, cli
    parallel   rljax.parallel   members (seeds x sweep values), devices, data-parallel, hosts
    loops      rljax.loops      the compiled on- and off-policy loops, replay memory, evaluation
    agents     rljax.agents     one Agent contract; A2C, DQN, DDPG
    core       rljax.envs, networks, losses, buffers, exploration, targets, types, validate

The names below load the run layer on first use only, so importing a core module (say
``rljax.buffers.sum_tree``) does not import the driver.
"""

from __future__ import annotations

import importlib
from typing import Any

from rljax._version import __version__

_LAZY = {
    "train": ("rljax.run.api", "train"),
    "load": ("rljax.run.api", "load"),
    "evaluate": ("rljax.run.api", "evaluate"),
    "report": ("rljax.run.report", "report"),
    "Run": ("rljax.run.api", "Run"),
    "RunConfig": ("rljax.run.config", "RunConfig"),
    "PRESETS": ("rljax.run.presets", "PRESETS"),
    "Preset": ("rljax.run.presets", "Preset"),
    "from_preset": ("rljax.run.presets", "from_preset"),
    "initialize_distributed": ("rljax.parallel.multihost", "initialize"),
    "set_cpu_threads": ("rljax.cpu_threads", "set_cpu_threads"),
    "set_cpu_devices": ("rljax.cpu_threads", "set_cpu_devices"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rljax' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

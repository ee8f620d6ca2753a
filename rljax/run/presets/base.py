"""The preset record: a named run with the hyperparameters ``rljax presets`` shows."""

from __future__ import annotations

import dataclasses
from typing import Any

from rljax import records
from rljax.run.config import RunConfig
from rljax.run.registry import ALGORITHMS

# Presets with small networks run XLA's CPU pool with one thread (rljax.cpu_threads): their
# kernels run faster on it than handed between cores (python -m benchmarks.cpu_threads,
# 2 CPU cores: gymnax CartPole PPO 1.27x, PureJaxRL's CartPole PPO settings 1.42x, PQN
# 1.31x, MinAtar Breakout PQN 1.15x, envpool CartPole PPO 1.20x and PQN 1.18x; MinAtar
# PPO's 1,024-sample minibatches and the 256-256 Pendulum agents run faster on two, and
# cartpole-dqn and cartpole-a2c gain nothing clear, so they keep JAX's default).
ONE_THREAD_NOTE = "one XLA CPU thread (--cpu-threads 1: faster for its small kernels on a CPU)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """A named run: algorithm, environment, hyperparameters and budget.

    Attributes:
        name: preset name (``rljax train NAME``).
        run: the run it stands for (with ``preset=name``); the command line and
            :func:`rljax.run.presets.from_preset` override parts of it.
        key_params: agent config fields shown by ``rljax presets`` (a record field by its
            name alone or dotted: ``batch_size``, ``replay.batch_size``).
        notes: anything a user should know about the preset.
        split_members: on a CPU, split several members (seeds x sweep values) over one
            host device per core unless ``cpu_devices`` or ``devices`` is given
            (:func:`rljax.run.presets.from_preset`): for presets measured faster so.
    """

    name: str
    run: RunConfig
    key_params: tuple[str, ...] = ()
    notes: str = ""
    split_members: bool = False

    def __post_init__(self):
        if self.run.preset != self.name:
            raise ValueError(f"preset {self.name!r} holds a run named {self.run.preset!r}")
        fields = records.names(type(self.run.config))
        unknown = [k for k in self.key_params if k not in fields]
        if unknown:
            raise ValueError(f"preset {self.name!r}: key_params {unknown} are not fields of "
                             f"{type(self.run.config).__name__}")


def algo_of(config: Any) -> str:
    """The registered algorithm whose config class ``config`` is (its module is loaded
    already, so no other agent is imported)."""
    for algo in ALGORITHMS.values():
        if algo.config_name == type(config).__name__ and algo.config_cls is type(config):
            return algo.name
    raise ValueError(f"{type(config).__name__} is the config of no registered algorithm")


def preset(*, name: str, key_params: tuple[str, ...], notes: str, config: Any,
           split_members: bool = False, **run: Any) -> Preset:
    """A Preset whose run is ``RunConfig(preset=name, config=config, **run)``; the
    algorithm is the one ``config`` belongs to, so a preset names it once."""
    return Preset(name=name, run=RunConfig(preset=name, algo=algo_of(config), config=config,
                                           **run),
                  key_params=key_params, notes=notes, split_members=split_members)

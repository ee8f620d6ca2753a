"""Registry of agents: how to build each one's agent and training loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rljax.agents.a2c import A2CConfig, make_a2c
from rljax.training.loop import Trainer
from rljax.training.on_policy import make_on_policy_trainer


class Algorithm(NamedTuple):
    """How the driver builds one kind of agent.

    Attributes:
        name: short name used by presets and the CLI.
        config_cls: the agent's frozen config dataclass.
        make_agent: ``make_agent(config, env_spec) -> Agent``.
        make_trainer: ``make_trainer(agent, env, config, updates_per_chunk,
            threshold) -> Trainer``.
        description: one line for ``rljax presets``.
    """

    name: str
    config_cls: type
    make_agent: Callable[..., Any]
    make_trainer: Callable[..., Trainer]
    description: str


def _a2c_trainer(agent, env, config: A2CConfig, updates_per_chunk: int, threshold):
    return make_on_policy_trainer(agent, env, rollout_len=config.rollout_len,
                                  updates_per_chunk=updates_per_chunk, threshold=threshold)


ALGORITHMS: dict[str, Algorithm] = {
    "a2c": Algorithm("a2c", A2CConfig, make_a2c, _a2c_trainer,
                     "synchronous advantage actor-critic (discrete actions)"),
}


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]

"""The registry of agents: each algorithm's name, config, factory and kind of loop.

Adding an agent is one file in :mod:`rljax.agents` and one line here (see
docs/adding-an-agent.md); everything else (seeds, sweeps, devices, data-parallel
learning, several hosts, checkpoints, logging, evaluation) comes from the layers that
read this table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rljax.agents.a2c import A2CConfig, make_a2c
from rljax.agents.ddpg import DDPGConfig, make_ddpg
from rljax.agents.dqn import DQNConfig, make_dqn
from rljax.agents.ppo import PPOConfig, make_ppo
from rljax.agents.pqn import PQNConfig, make_pqn
from rljax.agents.sac import SACConfig, make_sac
from rljax.agents.td3 import TD3Config, make_td3
from rljax.loops.factory import LOOPS
from rljax.loops.state import Trainer


class Algorithm(NamedTuple):
    """One kind of agent as the run layer builds it.

    Attributes:
        name: short name used by presets and the CLI.
        config_cls: the agent's frozen config dataclass.
        make_agent: ``make_agent(config, env_spec, *, grad_transform=None) -> Agent``.
        loop: ``"on_policy"`` or ``"off_policy"`` (:mod:`rljax.loops.factory`).
        description: one line for ``rljax presets``.
    """

    name: str
    config_cls: type
    make_agent: Callable[..., Any]
    loop: str
    description: str

    @property
    def make_trainer(self) -> Callable[..., Trainer]:
        """``make_trainer(agent, env, config, updates_per_chunk, threshold, split=WHOLE)``."""
        return LOOPS[self.loop]


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in [
    Algorithm("a2c", A2CConfig, make_a2c, "on_policy",
              "synchronous advantage actor-critic (discrete actions)"),
    Algorithm("dqn", DQNConfig, make_dqn, "off_policy",
              "double DQN with dueling / noisy / n-step / prioritized options "
              "(discrete actions)"),
    Algorithm("ddpg", DDPGConfig, make_ddpg, "off_policy",
              "deep deterministic policy gradient (continuous actions)"),
    Algorithm("ppo", PPOConfig, make_ppo, "on_policy",
              "proximal policy optimization, clipped surrogate (discrete or continuous)"),
    Algorithm("pqn", PQNConfig, make_pqn, "on_policy",
              "parallel Q-learning: LayerNorm Q-network, Q(lambda), no replay or target "
              "(discrete actions)"),
    Algorithm("td3", TD3Config, make_td3, "off_policy",
              "twin delayed DDPG: clipped double-Q, target smoothing, delayed actor "
              "(continuous actions)"),
    Algorithm("sac", SACConfig, make_sac, "off_policy",
              "soft actor-critic with a learned temperature (continuous actions)"),
]}


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm called ``name``; ValueError listing the choices otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]

"""The registry of agents: each algorithm's name, config, factory and kind of loop.

Adding an agent is one file in :mod:`rljax.agents` and one line here (see
docs/adding-an-agent.md); everything else (seeds, sweeps, devices, data-parallel
learning, several hosts, checkpoints, logging, evaluation) comes from the layers that
read this table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # only annotated: the command line reads this table without loading jax
    from rljax.loops.state import Trainer


class Algorithm(NamedTuple):
    """One kind of agent as the run layer builds it. The agent's module is imported on first
    use of ``config_cls`` or ``make_agent``, so resolving one preset loads one agent.

    Attributes:
        name: short name used by presets and the CLI.
        module: the agent's module (``rljax.agents.NAME``).
        config_name: its frozen config dataclass.
        factory_name: ``make_agent(config, env_spec, *, parallel=ONE_DEVICE, run=None) ->
            Agent`` (one signature for every agent; :class:`rljax.agents.base.Parallel`,
            :class:`rljax.agents.base.RunLength`).
        loop: ``"on_policy"`` or ``"off_policy"`` (:mod:`rljax.loops.factory`).
        description: one line for ``rljax presets``.
    """

    name: str
    module: str
    config_name: str
    factory_name: str
    loop: str
    description: str

    @property
    def config_cls(self) -> type:
        return getattr(importlib.import_module(self.module), self.config_name)

    @property
    def make_agent(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), self.factory_name)

    @property
    def check_run(self) -> Callable[..., None]:
        """``check_run(config, spec, run)``: the agent's checks of its settings against the
        run's length (:class:`rljax.agents.base.RunLength`), the module's own or none."""
        from rljax.agents import run_checks

        return getattr(importlib.import_module(self.module), "check_run", run_checks.nothing)

    def upgrade_record(self, data: dict) -> dict:
        """A saved run of this agent (config.json, a checkpoint manifest's ``run``) as an
        older rljax wrote it, in today's form: the agent module's ``upgrade_record(data)``,
        else ``data`` itself."""
        own = getattr(importlib.import_module(self.module), "upgrade_record", None)
        return data if own is None else own(data)

    def anneals(self, config: Any) -> bool:
        """Whether ``config`` has a schedule tied to the run's length (a learning rate
        annealed to 0), which the run setting ``schedule_steps`` sets: the agent module's
        ``anneals(config)``, else False."""
        own = getattr(importlib.import_module(self.module), "anneals", None)
        return own is not None and bool(own(config))

    def gradient_steps(self, config: Any) -> tuple[int, int, str]:
        """``(gradient steps per loop update, samples per step, the fields that set them)``
        of ``config``: the agent module's ``gradient_steps(config)``, else what its loop
        record says (off-policy: ``grad_steps`` of a replay batch; on-policy: one step on
        the whole rollout)."""
        own = getattr(importlib.import_module(self.module), "gradient_steps", None)
        if own is not None:
            return own(config)
        if self.loop == "off_policy":
            return config.loop.grad_steps, config.replay.batch_size, "grad_steps"
        return 1, config.loop.steps_per_update, ""

    @property
    def make_trainer(self) -> Callable[..., Trainer]:
        """``make_trainer(agent, env, config, updates_per_chunk, threshold, split=WHOLE)``."""
        from rljax.loops.factory import LOOPS

        return LOOPS[self.loop]


def _agent(name: str, config_name: str, loop: str, description: str) -> Algorithm:
    return Algorithm(name, f"rljax.agents.{name}", config_name, f"make_{name}", loop,
                     description)


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in [
    _agent("a2c", "A2CConfig", "on_policy",
           "synchronous advantage actor-critic (discrete actions)"),
    _agent("dqn", "DQNConfig", "off_policy",
           "double DQN with dueling / noisy / n-step / prioritized options "
           "(discrete actions)"),
    _agent("ddpg", "DDPGConfig", "off_policy",
           "deep deterministic policy gradient (continuous actions)"),
    _agent("ppo", "PPOConfig", "on_policy",
           "proximal policy optimization, clipped surrogate (discrete or continuous)"),
    _agent("pqn", "PQNConfig", "on_policy",
           "parallel Q-learning: LayerNorm Q-network, Q(lambda), no replay or target "
           "(discrete actions)"),
    _agent("td3", "TD3Config", "off_policy",
           "twin delayed DDPG: clipped double-Q, target smoothing, delayed actor "
           "(continuous actions)"),
    _agent("sac", "SACConfig", "off_policy",
           "soft actor-critic with a learned temperature (continuous actions)"),
]}


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm called ``name``; ValueError listing the choices otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]

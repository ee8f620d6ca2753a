"""Registry of agents: how to build each one's agent and training loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rljax.agents.a2c import A2CConfig, make_a2c
from rljax.agents.ddpg import DDPGConfig, make_ddpg
from rljax.agents.dqn import DQNConfig, beta_schedule, make_dqn
from rljax.loops.memory import make_memory
from rljax.loops.off_policy import make_off_policy_trainer
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.loops.state import Trainer
from rljax.parallel.data_parallel import gathered_act


class Algorithm(NamedTuple):
    """How the driver builds one kind of agent.

    Attributes:
        name: short name used by presets and the CLI.
        config_cls: the agent's frozen config dataclass.
        make_agent: ``make_agent(config, env_spec, axis_name=None) -> Agent``.
        make_trainer: ``make_trainer(agent, env, config, updates_per_chunk,
            threshold, axis_name=None) -> Trainer``; with ``axis_name`` (and an agent made
            with it) one agent learns data-parallel over that mesh axis
            (:mod:`rljax.parallel.data_parallel`).
        description: one line for ``rljax presets``.
    """

    name: str
    config_cls: type
    make_agent: Callable[..., Any]
    make_trainer: Callable[..., Trainer]
    description: str


def _a2c_trainer(agent, env, config: A2CConfig, updates_per_chunk: int, threshold,
                 axis_name: str | None = None):
    if axis_name is not None:
        agent = gathered_act(agent, axis_name)
    return make_on_policy_trainer(agent, env, rollout_len=config.rollout_len,
                                  updates_per_chunk=updates_per_chunk, threshold=threshold)


def _ddpg_trainer(agent, env, config: DDPGConfig, updates_per_chunk: int, threshold,
                  axis_name: str | None = None):
    memory = make_memory(capacity=config.replay_capacity, num_envs=env.spec.num_envs,
                         batch_size=config.batch_size, n_step=config.n_step, gamma=config.gamma,
                         alpha=config.alpha if config.prioritized else None,
                         eps=config.priority_eps, min_size=config.min_replay, frames=False)
    beta = config.beta
    return make_off_policy_trainer(
        agent, env, memory, env_steps_per_update=config.env_steps_per_update,
        grad_steps=config.grad_steps, updates_per_chunk=updates_per_chunk,
        beta_fn=lambda step: beta,
        initial_priorities=config.prioritized and config.initial_priorities,
        flush_every=config.flush_every, threshold=threshold, axis_name=axis_name)


# Image-observation chunks stay short (a Breakout update takes about a second on a 2-core
# CPU) so that the host reports progress often; unrolled ones also compile quickly.
_IMAGE_UPDATES_PER_CHUNK = 32
_UNROLLED_UPDATES_PER_CHUNK = 2


def _dqn_trainer(agent, env, config: DQNConfig, updates_per_chunk: int, threshold,
                 axis_name: str | None = None):
    spec = env.spec
    frames = spec.is_atari if config.frame_replay is None else config.frame_replay
    if frames and config.initial_priorities:
        raise ValueError("initial_priorities needs flat replay, but frame replay is in use for "
                         f"{spec.task_id}; set initial_priorities=false or frame_replay=false")
    memory = make_memory(capacity=config.buffer_size, num_envs=spec.num_envs,
                         batch_size=config.batch_size, n_step=config.n_step, gamma=config.gamma,
                         alpha=config.alpha if config.prioritized else None,
                         eps=config.priority_eps, min_size=config.min_replay, frames=frames)
    if config.unroll:
        updates_per_chunk = min(updates_per_chunk, _UNROLLED_UPDATES_PER_CHUNK)
    elif spec.is_image:
        updates_per_chunk = min(updates_per_chunk, _IMAGE_UPDATES_PER_CHUNK)
    return make_off_policy_trainer(
        agent, env, memory, env_steps_per_update=config.env_steps_per_update,
        grad_steps=config.grad_steps, updates_per_chunk=updates_per_chunk,
        beta_fn=beta_schedule(config) if config.prioritized else None,
        initial_priorities=config.prioritized and config.initial_priorities,
        unroll=config.unroll, threshold=threshold, axis_name=axis_name)


ALGORITHMS: dict[str, Algorithm] = {
    "a2c": Algorithm("a2c", A2CConfig, make_a2c, _a2c_trainer,
                     "synchronous advantage actor-critic (discrete actions)"),
    "ddpg": Algorithm("ddpg", DDPGConfig, make_ddpg, _ddpg_trainer,
                      "deep deterministic policy gradient (continuous actions)"),
    "dqn": Algorithm("dqn", DQNConfig, make_dqn, _dqn_trainer,
                     "double DQN with dueling / noisy / n-step / prioritized options "
                     "(discrete actions)"),
}


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]

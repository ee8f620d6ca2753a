"""The registry: each algorithm name gives its config class and factories that build an
agent and a trainer; an unknown name is refused with the list (small envpool pools only)."""

from __future__ import annotations

import dataclasses

import pytest

from rljax import envs
from rljax.agents.base import Agent
from rljax.loops.state import Trainer
from rljax.records import configure
from rljax.run.config import RunConfig
from rljax.run.presets import PRESETS
from rljax.run.registry import ALGORITHMS, get_algorithm

# A cheap task of the action space each algorithm needs.
TASKS = {"a2c": "CartPole-v1", "dqn": "CartPole-v1", "ddpg": "Pendulum-v1",
         "ppo": "CartPole-v1", "pqn": "CartPole-v1", "td3": "Pendulum-v1",
         "sac": "Pendulum-v1"}


def test_names_config_classes_and_descriptions():
    assert set(ALGORITHMS) == set(TASKS)
    for name, algo in ALGORITHMS.items():
        assert algo.name == name and get_algorithm(name) is algo
        assert dataclasses.is_dataclass(algo.config_cls)
        assert algo.config_cls.__dataclass_params__.frozen
        assert callable(algo.make_agent) and callable(algo.make_trainer)
        assert isinstance(algo.description, str) and algo.description
    # One algorithm per config class: a config names its algorithm unambiguously.
    assert len({a.config_cls for a in ALGORITHMS.values()}) == len(ALGORITHMS)
    assert {p.run.algo for p in PRESETS.values()} <= set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_factories_build_an_agent_and_a_trainer(name):
    algo = get_algorithm(name)
    config = configure(algo.config_cls, num_envs=4)
    env = envs.make(TASKS[name], config.loop.num_envs, seed=0)
    agent = algo.make_agent(config, env.spec)
    assert isinstance(agent, Agent)
    trainer = algo.make_trainer(agent, env, config, 3, None)
    assert isinstance(trainer, Trainer)
    assert 1 <= trainer.updates_per_chunk <= 3 and trainer.num_seeds == 1
    # The driver sizes its chunks from the config's steps per update.
    assert trainer.steps_per_update == config.loop.steps_per_update


def test_unknown_algorithm_is_refused_with_the_list():
    message = f"unknown algorithm 'nope'; allowed: {', '.join(ALGORITHMS)}"
    with pytest.raises(ValueError) as e:
        get_algorithm("nope")
    assert str(e.value) == message
    config = PRESETS["cartpole-a2c"].run.config
    with pytest.raises(ValueError) as e:
        RunConfig(algo="nope", env_id="CartPole-v1", config=config, total_steps=1_000)
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:
        RunConfig.from_dict({"algo": "nope", "env_id": "CartPole-v1", "total_steps": 1_000,
                             "config": {}})
    assert str(e.value) == message


def test_preset_index_matches_the_family_modules():
    """Each family module holds exactly the names the lazy index gives it."""
    from rljax.run import presets

    for module, names in presets._INDEX.items():
        assert tuple(presets.family(module)) == names, module


def test_resolving_one_preset_imports_only_its_family():
    """Only the family module holding the name is built (and checked), and only its agent
    (its module, the modules it is split into, ``ppo_*``, its variant with memory and the
    run checks every agent shares) is imported."""
    import subprocess
    import sys

    code = ("import sys; from rljax.run.presets import get_preset; get_preset('cartpole-ppo'); "
            "loaded = {m for m in sys.modules if m.startswith('rljax.run.presets.')}; "
            "assert loaded == {'rljax.run.presets.base', 'rljax.run.presets.ppo'}, loaded; "
            "agents = {m for m in sys.modules if m.startswith('rljax.agents.')}; "
            "assert agents == {'rljax.agents.base', 'rljax.agents.ppo', "
            "'rljax.agents.ppo_core', 'rljax.agents.ppo_networks', 'rljax.agents.ppo_loss', "
            "'rljax.agents.recurrent', 'rljax.agents.recurrent_ppo', "
            "'rljax.agents.run_checks'}, agents")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr

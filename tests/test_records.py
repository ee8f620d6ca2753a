"""Loop and replay settings as typed records (rljax.records): their checks, the names that
set them (flat and dotted), the fields marked as shapes, and each agent's defaults."""

import dataclasses
import re

import pytest

from rljax import records
from rljax.agents.a2c import A2CConfig
from rljax.agents.ddpg import DDPGConfig
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.agents.sac import SACConfig
from rljax.agents.td3 import TD3Config
from rljax.records import OffPolicyLoop, OnPolicyLoop, Replay, configure
from rljax.run.config import RunConfig

CONFIGS = (A2CConfig, DQNConfig, DDPGConfig, PPOConfig, PQNConfig, TD3Config, SACConfig)
OFF_POLICY = (DQNConfig, DDPGConfig, TD3Config, SACConfig)
INT32 = "(below 2**31: the training loop counts in int32)"


@pytest.mark.parametrize("record,values,message", [
    (OnPolicyLoop, dict(num_envs=0), "num_envs must be an integer >= 1, got 0"),
    (OnPolicyLoop, dict(rollout_len=2.5), "rollout_len must be an integer >= 1, got 2.5"),
    (OffPolicyLoop, dict(grad_steps=0), "grad_steps must be an integer >= 1, got 0"),
    (OffPolicyLoop, dict(env_steps_per_update=True),
     "env_steps_per_update must be an integer >= 1, got True"),
    (OffPolicyLoop, dict(random_steps=-1),
     f"random_steps must be an integer in [0, 2147483647] {INT32}, got -1"),
    (OffPolicyLoop, dict(unroll="yes"), "unroll must be true or false"),
    (Replay, dict(batch_size=0), "batch_size must be an integer >= 1, got 0"),
    (Replay, dict(buffer_size=2**31), f"buffer_size must be an integer in [1, 2147483647] "
                                      f"{INT32}, got 2147483648"),
    (Replay, dict(batch_size=64, learning_starts=32),
     "learning_starts must be an integer in [64, 1000000] or None (from batch_size to "
     "buffer_size; None: a full buffer), got 32"),
    (Replay, dict(n_step=0), "n_step must be an integer >= 1, got 0"),
    (Replay, dict(alpha=-0.5), "alpha must be a number in [0.0, 1000000.0], got -0.5"),
    (Replay, dict(priority_eps=float("nan")), "priority_eps must be a number in"),
    (Replay, dict(beta=((0, 1.5),)), "beta values must be numbers in [0.0, 1.0]"),
    (Replay, dict(prioritized=1), "prioritized must be true or false"),
    (Replay, dict(frame_replay="no"), "frame_replay must be true, false or None, got 'no'"),
    (Replay, dict(flush_every=0), f"flush_every must be an integer in [1, 2147483647] or "
                                  f"None {INT32}, got 0"),
])
def test_records_refuse_bad_values_naming_field_value_and_what_is_allowed(record, values,
                                                                          message):
    with pytest.raises(ValueError, match=re.escape(message)):
        record(**values)


def test_records_are_frozen_keyword_only_and_hashable():
    for record in records.RECORDS:
        params = dataclasses.fields(record)
        assert all(f.kw_only for f in params)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record(), params[0].name, 1)
        assert hash(record()) == hash(record())
    assert OffPolicyLoop(num_envs=4, env_steps_per_update=8).steps_per_update == 32
    assert OnPolicyLoop(num_envs=4, rollout_len=8).steps_per_update == 32
    assert Replay(buffer_size=500).min_replay == 500
    assert Replay(batch_size=32, learning_starts=100).min_replay == 100


def test_every_config_holds_a_loop_and_off_policy_ones_a_replay():
    for config_cls in CONFIGS:
        config = config_cls()
        assert isinstance(config.loop, OffPolicyLoop if config_cls in OFF_POLICY
                          else OnPolicyLoop)
        assert isinstance(getattr(config, "replay", None), Replay) == (config_cls in OFF_POLICY)
        hash(config)
    # No loop or replay field is left in an agent config itself.
    record_names = {f.name for r in records.RECORDS for f in dataclasses.fields(r)}
    for config_cls in CONFIGS:
        assert not record_names & {f.name for f in dataclasses.fields(config_cls)}


# Each agent's defaults as they were when the fields lived in the configs themselves.
OLD_DEFAULTS = {
    DQNConfig: dict(num_envs=8, env_steps_per_update=4, grad_steps=8, batch_size=32,
                    buffer_size=2**14, learning_starts=None, prioritized=True, alpha=0.6,
                    priority_eps=1e-6, beta=((0, 0.4), (1_000_000, 1.0)),
                    initial_priorities=False, n_step=1, frame_replay=None, unroll=False),
    DDPGConfig: dict(num_envs=20, env_steps_per_update=50, grad_steps=100, batch_size=128,
                     buffer_size=1_000_000, learning_starts=10_000, n_step=1, prioritized=True,
                     alpha=0.6, beta=((0, 1.0),), priority_eps=1e-5, initial_priorities=True,
                     flush_every=None),
    TD3Config: dict(num_envs=1, env_steps_per_update=1, grad_steps=1, batch_size=256,
                    buffer_size=1_000_000, learning_starts=25_000, random_steps=25_000,
                    n_step=1, prioritized=False, alpha=0.6, beta=((0, 0.4), (1_000_000, 1.0)),
                    priority_eps=1e-6, initial_priorities=False),
    SACConfig: dict(num_envs=1, env_steps_per_update=1, grad_steps=1, batch_size=256,
                    buffer_size=1_000_000, learning_starts=10_000, random_steps=10_000,
                    n_step=1, prioritized=False, alpha=0.6, beta=((0, 0.4), (1_000_000, 1.0)),
                    priority_eps=1e-6, initial_priorities=False),
    A2CConfig: dict(num_envs=16, rollout_len=5),
    PPOConfig: dict(num_envs=32, rollout_len=16),
    PQNConfig: dict(num_envs=32, rollout_len=16),
}


@pytest.mark.parametrize("config_cls", list(OLD_DEFAULTS))
def test_each_agent_keeps_its_own_defaults(config_cls):
    config = config_cls()
    for name, value in OLD_DEFAULTS[config_cls].items():
        assert records.get(config, records.canonical(config_cls, name)) == value, name


def test_names_flat_and_dotted():
    names = records.names(DQNConfig)
    assert names["batch_size"] == names["replay.batch_size"] == "replay.batch_size"
    assert names["num_envs"] == names["loop.num_envs"] == "loop.num_envs"
    assert names["lr"] == "lr" and "loop" not in names and "replay" not in names
    for config_cls in CONFIGS:  # a field name alone names one field only
        config_fields = {f.name for f in dataclasses.fields(config_cls)}
        for record in records.RECORDS:
            assert not config_fields & {f.name for f in dataclasses.fields(record)}


def test_configure_sets_flat_and_dotted_names_and_keeps_the_rest():
    config = configure(DQNConfig, batch_size=64, lr=1e-3, **{"loop.num_envs": 4})
    assert config.replay == dataclasses.replace(DQNConfig().replay, batch_size=64)
    assert config.loop == dataclasses.replace(DQNConfig().loop, num_envs=4)
    assert config.lr == 1e-3
    again = configure(config, {"replay.alpha": 0.5})
    assert again.replay.alpha == 0.5 and again.replay.batch_size == 64 and again.lr == 1e-3
    with pytest.raises(ValueError, match=re.escape("replay.batch_size is given twice")):
        configure(DQNConfig, {"batch_size": 64, "replay.batch_size": 32})
    with pytest.raises(ValueError, match=re.escape(
            "unknown field 'bach_size' for DQNConfig (did you mean 'batch_size'")):
        configure(DQNConfig, bach_size=64)
    with pytest.raises(ValueError, match=re.escape(
            "unknown field 'replay.alfa' for DQNConfig (did you mean 'replay.alpha'")):
        configure(DQNConfig, {"replay.alfa": 0.5})


def test_random_steps_only_for_agents_with_a_random_phase():
    assert configure(TD3Config, random_steps=10).loop.random_steps == 10
    assert configure(SACConfig, random_steps=0).loop.random_steps == 0
    for config_cls, algo in ((DQNConfig, "dqn"), (DDPGConfig, "ddpg")):
        with pytest.raises(ValueError, match=f"random_steps must be 0 for {algo}"):
            configure(config_cls, random_steps=100)


def test_shape_fields_are_marked_in_metadata():
    shapes = records.shape_names(DQNConfig)
    for name in ("loop.num_envs", "loop.env_steps_per_update", "loop.grad_steps",
                 "replay.batch_size", "replay.buffer_size", "replay.n_step", "num_atoms",
                 "hidden_sizes", "head_hidden_sizes"):
        assert name in shapes, name
    for name in ("lr", "gamma", "replay.alpha", "replay.learning_starts", "loop.random_steps"):
        assert name not in shapes, name
    assert {"loop.num_envs", "loop.rollout_len", "num_epochs", "num_minibatches",
            "memory.size"} <= set(records.shape_names(PPOConfig))


def test_network_sizes_state_the_widths_in_use():
    assert records.network_sizes(DQNConfig()) == {"hidden_sizes": (64, 64)}
    rainbow = configure(DQNConfig, num_atoms=51, head_hidden_sizes=(32,))
    assert records.network_sizes(rainbow) == {"hidden_sizes": (64, 64),
                                              "head_hidden_sizes": (32,), "num_atoms": 51}
    assert records.network_sizes(TD3Config()) == {"actor_hidden": (256, 256),
                                                  "critic_hidden": (256, 256)}
    assert records.network_sizes(PPOConfig()) == {"hidden_sizes": (64, 64)}


def test_with_value_sets_a_nested_field_without_validation():
    config = DQNConfig()
    changed = records.with_value(config, "replay.alpha", "traced")
    assert changed.replay.alpha == "traced" and config.replay.alpha == 0.6
    assert changed.replay.batch_size == config.replay.batch_size
    assert records.with_value(config, "lr", -1.0).lr == -1.0 and config.lr == 2.5e-4


def test_run_config_round_trips_the_records_through_json():
    run = RunConfig(algo="dqn", env_id="CartPole-v1", total_steps=1_000,
                    config=configure(DQNConfig, batch_size=64, n_step=3, num_envs=4))
    data = run.to_dict()
    assert data["config"]["replay"]["batch_size"] == 64
    assert data["config"]["loop"]["num_envs"] == 4
    assert RunConfig.from_dict(data) == run

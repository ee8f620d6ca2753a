"""RunConfig: to_dict/from_dict round trips, defaults, coercion of command-line strings,
unknown fields, sweeps and preset overrides (no training, no envpool pools)."""

from __future__ import annotations

import dataclasses
import json

import envpool
import pytest

from rljax.records import configure
from rljax.run.config import RunConfig, build_config, parse_assignments, parse_sweep
from rljax.run.presets import PRESETS, from_preset
from rljax.run.registry import get_algorithm


@dataclasses.dataclass(frozen=True)
class Fields:
    """A config with one field of each type the command line can set."""

    count: int = 1
    rate: float = 0.1
    flag: bool = False
    sizes: tuple[int, ...] = (64,)
    schedule: tuple[tuple[int, float], ...] = ((0, 1.0),)
    lam: float | None = None
    label: str = "x"


def _defaults() -> dict:
    return {f.name: f.default for f in dataclasses.fields(RunConfig)
            if f.default is not dataclasses.MISSING}


@pytest.mark.parametrize("name", list(PRESETS))
def test_round_trip_of_every_preset(name):
    run = PRESETS[name].run
    assert RunConfig.from_dict(run.to_dict()) == run
    # As a run directory stores it: JSON turns tuples (sizes, schedules) into lists.
    assert RunConfig.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_round_trip_with_every_run_field_changed():
    run = dataclasses.replace(
        from_preset("cartpole-a2c", sweep="actor_lr=1e-3,5e-4"), seed=7, num_seeds=3,
        threshold=100.0, env_options=(("frame_skip", 1), ("max_episode_steps", 200)),
        chunk_steps=1_000, logdir="elsewhere", checkpoint_every=5_000, stop_on_solve=True,
        eval_every=2_000, eval_episodes=3, tensorboard=False, wandb_project="proj")
    data = json.loads(json.dumps(run.to_dict()))
    assert data["sweep"] == {"actor_lr": [1e-3, 5e-4]}
    assert data["env_options"] == {"frame_skip": 1, "max_episode_steps": 200}
    assert RunConfig.from_dict(data) == run
    # Options come back sorted by name whatever order the dict has.
    data["env_options"] = {"max_episode_steps": 200, "frame_skip": 1}
    assert RunConfig.from_dict(data).env_options == run.env_options
    assert {f.name for f in dataclasses.fields(RunConfig)} == set(run.to_dict())


def test_from_dict_fills_missing_keys_with_the_defaults():
    run = RunConfig.from_dict({"algo": "a2c", "env_id": "CartPole-v1", "total_steps": 1_000,
                               "config": {"num_envs": 4}})
    config_cls = get_algorithm("a2c").config_cls
    assert run == RunConfig(algo="a2c", env_id="CartPole-v1", total_steps=1_000,
                            config=configure(config_cls, num_envs=4))
    defaults = _defaults()
    assert {k: getattr(run, k) for k in defaults} == defaults
    assert defaults["seed"] == 0 and defaults["num_seeds"] == 1 and defaults["sweep"] is None


def test_from_dict_ignores_keys_that_are_not_fields_and_needs_the_required_ones():
    data = PRESETS["cartpole-a2c"].run.to_dict()
    assert RunConfig.from_dict(dict(data, label="cartpole-a2c actor_lr=0.001")) == \
        PRESETS["cartpole-a2c"].run
    del data["total_steps"]
    with pytest.raises(TypeError, match="total_steps"):
        RunConfig.from_dict(data)


@pytest.mark.parametrize("name,text,value", [
    ("count", "16", 16), ("count", "1e3", 1000), ("count", "1_000", 1000), ("count", 7, 7),
    ("count", "-3", -3), ("rate", "3e-4", 3e-4), ("rate", "2", 2.0), ("rate", 1, 1.0),
    ("flag", "true", True), ("flag", "Yes", True), ("flag", "on", True), ("flag", "1", True),
    ("flag", "false", False), ("flag", "NO", False), ("flag", "off", False),
    ("flag", "0", False), ("flag", True, True),
    ("sizes", "64,64", (64, 64)), ("sizes", "(32, 16)", (32, 16)), ("sizes", "[8]", (8,)),
    ("sizes", [4, 2], (4, 2)), ("sizes", "", ()),
    ("schedule", "0:1.0,300:0.02", ((0, 1.0), (300, 0.02))),
    ("schedule", "0:1", ((0, 1.0),)), ("schedule", [[0, 0.4], [10, 1]], ((0, 0.4), (10, 1.0))),
    ("lam", "0.95", 0.95), ("lam", "none", None), ("lam", "null", None), ("lam", None, None),
    ("label", "tanh", "tanh"),
])
def test_command_line_strings_are_coerced_to_the_field_type(name, text, value):
    config = build_config(Fields, {name: text})
    assert getattr(config, name) == value
    assert type(getattr(config, name)) is type(value)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        assert [type(x) for x in config.schedule[0]] == [int, float]


@pytest.mark.parametrize("name,text,message", [
    ("count", "2.5", "bad value '2.5' for count: expected an integer"),
    ("count", "many", "bad value 'many' for count: expected an integer"),
    ("count", "inf", "bad value 'inf' for count: expected an integer"),
    ("rate", "fast", "bad value 'fast' for rate: expected a number"),
    ("flag", "maybe", "bad value 'maybe' for flag: expected true or false"),
    ("flag", 1, "bad value 1 for flag: expected true or false"),
    ("sizes", "64,x", "bad value 'x' for sizes: expected an integer"),
    ("schedule", "0:1:2", "bad value '0:1:2' for schedule: expected 2 values separated by ':'"),
    ("schedule", "0", "bad value '0' for schedule: expected 2 values separated by ':'"),
    ("lam", "high", "bad value 'high' for lam: expected float | None"),
])
def test_bad_strings_name_the_field_and_the_type(name, text, message):
    with pytest.raises(ValueError) as e:
        build_config(Fields, {name: text})
    assert str(e.value) == message


def test_build_config_updates_a_base_and_keeps_the_rest():
    base = Fields(count=5, label="y")
    assert build_config(Fields, {"rate": "0.5"}, base=base) == Fields(count=5, rate=0.5,
                                                                     label="y")
    assert build_config(Fields, {}) == Fields()


@pytest.mark.parametrize("name,hint", [
    ("cont", " (did you mean 'count'?)"),
    ("sizez", " (did you mean 'sizes'?)"),
    ("zzz", ""),
])
def test_unknown_field_with_close_matches_and_the_allowed_names(name, hint):
    with pytest.raises(ValueError) as e:
        build_config(Fields, {name: "1"})
    assert str(e.value) == (f"unknown field {name!r} for Fields{hint}; allowed: count, rate, "
                            "flag, sizes, schedule, lam, label")


def test_unknown_agent_field_through_a_preset():
    with pytest.raises(ValueError, match=r"unknown field 'actor_l' for A2CConfig \(did you "
                                         r"mean 'actor_lr'"):
        from_preset("cartpole-a2c", actor_l="1e-3")


def test_parse_assignments():
    assert parse_assignments(["gamma=0.9", " num_envs = 4 ", "hidden=64,64", "x=a=b"]) == {
        "gamma": "0.9", "num_envs": "4", "hidden": "64,64", "x": "a=b"}
    assert parse_assignments(None) == {} and parse_assignments([]) == {}
    for bad in ("gamma", "=3", " =3"):
        with pytest.raises(ValueError, match=f"--set expects field=value, got {bad!r}"):
            parse_assignments([bad])


def test_parse_sweep():
    assert parse_sweep("actor_lr=1e-4, 5e-4,1e-3,") == ("actor_lr", ("1e-4", "5e-4", "1e-3"))
    assert parse_sweep(None) is None
    for bad in ("actor_lr=1e-4", "actor_lr", "=1,2", "actor_lr=,", "actor_lr=1e-4,",
                "actor_lr=1e-4,,1e-3", "actor_lr=1e-4, ,1e-3"):
        with pytest.raises(ValueError) as e:
            parse_sweep(bad)
        assert str(e.value) == ("--sweep expects field=value1,value2[,...] (two values or "
                                f"more, none empty), got {bad!r}")


def test_sweep_values_take_the_field_type():
    run = from_preset("cartpole-a2c", sweep="actor_lr=1e-3,5e-4", num_seeds="2")
    assert run.sweep == ("actor_lr", (1e-3, 5e-4))
    assert run.num_members == 4
    assert run.members == [(0, 1e-3), (1, 1e-3), (0, 5e-4), (1, 5e-4)]
    run = from_preset("cartpole-dqn", sweep=("learning_starts", ["400", 800.0]))
    assert run.sweep == ("replay.learning_starts", (400, 800)) and all(
        type(v) is int for v in run.sweep[1])


@pytest.mark.parametrize("sweep,message", [
    ("shared_torso=true,false", "--sweep shared_torso: only numeric (int or float) "
                                "hyperparameters can be swept, and shared_torso is bool"),
    ("actor_hidden=64,32", "only numeric (int or float) hyperparameters can be swept"),
    ("actor_l=1,2", "unknown field 'actor_l' for A2CConfig (did you mean 'actor_lr'"),
    (("actor_lr", [1e-3]), "--sweep actor_lr: give two values or more, got [0.001]"),
    ("actor_lr=1e-3,fast", "bad value 'fast' for actor_lr: expected a number"),
    ("num_envs=4,8", "it sets the number of environments"),
    ("gamma=0.9,2", "gamma must be a number in [0.0, 1.0]"),
])
def test_sweep_refusals(sweep, message):
    with pytest.raises(ValueError) as e:
        from_preset("cartpole-a2c", sweep=sweep)
    assert message in str(e.value)


@pytest.mark.parametrize("name", list(PRESETS))
def test_from_preset_without_overrides_is_the_preset_run(name):
    assert from_preset(name) == PRESETS[name].run
    assert from_preset(PRESETS[name]) == PRESETS[name].run


def test_from_preset_overrides_from_command_line_strings():
    run = from_preset("cartpole-a2c", total_steps="1e5", seed="3", num_envs="4",
                      num_seeds="2", eval_every="1_000", eval_episodes="4", logdir="out",
                      tensorboard=False, wandb_project="proj", gamma="0.9",
                      actor_hidden="32,32")
    preset = PRESETS["cartpole-a2c"].run
    assert run == dataclasses.replace(
        preset, total_steps=100_000, seed=3, num_seeds=2, eval_every=1_000, eval_episodes=4,
        logdir="out", tensorboard=False, wandb_project="proj",
        config=configure(preset.config, num_envs=4, gamma=0.9,
                                   actor_hidden=(32, 32)))
    with pytest.raises(ValueError, match=r"--logdir \(logdir\) is empty"):
        from_preset("cartpole-a2c", logdir="")
    with pytest.raises(ValueError, match="bad value 'x' for seed: expected an integer"):
        from_preset("cartpole-a2c", seed="x")
    with pytest.raises(ValueError, match="total_steps must be an integer"):
        from_preset("cartpole-a2c", total_steps="-5")


def _task_threshold(task_id):
    return getattr(envpool.make_spec(task_id).config, "reward_threshold", None)


def test_another_env_brings_its_own_threshold_and_keeps_the_env_options():
    preset = dataclasses.replace(PRESETS["cartpole-a2c"],
                                 run=dataclasses.replace(PRESETS["cartpole-a2c"].run,
                                                         env_options=(("max_episode_steps",
                                                                       200),),
                                                         threshold=400.0))
    same = from_preset(preset, env="CartPole-v1")
    assert same.threshold == 400.0 and same.env_options == (("max_episode_steps", 200),)
    other = from_preset(preset, env="Acrobot-v1")
    assert other.env_id == "Acrobot-v1" and other.threshold == _task_threshold("Acrobot-v1")
    assert other.env_options == (("max_episode_steps", 200),)
    # A preset without a threshold takes the task's when its env is named; Breakout has none.
    assert from_preset("breakout-dqn", env="Breakout-v5").threshold is None
    with pytest.raises(ValueError, match="did you mean 'CartPole-v1'"):
        from_preset("cartpole-a2c", env="CartPol-v1")


def test_run_config_refuses_bad_run_fields():
    run = PRESETS["cartpole-a2c"].run
    with pytest.raises(ValueError, match="config for a2c must be a A2CConfig, got DQNConfig"):
        dataclasses.replace(run, config=PRESETS["cartpole-dqn"].run.config)
    for field, value in (("num_seeds", 0), ("num_seeds", 4097), ("seed", -1), ("eval_every", -1),
                         ("chunk_steps", 0), ("checkpoint_every", True), ("devices", 0)):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(run, **{field: value})

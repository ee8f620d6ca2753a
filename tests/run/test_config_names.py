"""One name per concept across the agent configs; run directories written under the old
names still load, and the old names are refused on the command line and in the API."""

import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import exploration, records
from rljax.agents.ddpg import DDPGConfig
from rljax.agents.dqn import DQNConfig
from rljax.records import configure
from rljax.run import checkpoint, cli, registry
from rljax.run.config import RENAMED, RunConfig, upgrade_fields
from rljax.run.presets import from_preset

SHARED = ("buffer_size", "learning_starts", "noisy_sigma0", "td_loss", "beta")
OLD = {"dqn": ("sigma0", "loss"), "ddpg": ("replay_capacity", "min_replay", "critic_loss")}


def _fields(config_cls) -> set[str]:
    return set(records.names(config_cls))


def test_off_policy_configs_share_the_names():
    for config_cls in (DQNConfig, DDPGConfig):
        assert set(SHARED) <= _fields(config_cls)
    assert not set(OLD["dqn"]) & _fields(DQNConfig)
    assert not set(OLD["ddpg"]) & _fields(DDPGConfig)
    assert {old for table in RENAMED.values() for old in table} == {*OLD["dqn"], *OLD["ddpg"]}
    assert DQNConfig().td_loss == "huber" and DDPGConfig().td_loss == "l2"
    assert DDPGConfig().replay.beta == ((0, 1.0),)


@pytest.mark.parametrize("config_cls", [DQNConfig, DDPGConfig])
def test_min_replay_is_learning_starts_or_a_full_buffer(config_cls):
    config = configure(config_cls, batch_size=32, buffer_size=1_000, learning_starts=None)
    assert config.replay.min_replay == 1_000
    assert configure(config, learning_starts=32).replay.min_replay == 32
    assert configure(config, learning_starts=1_000).replay.min_replay == 1_000
    with pytest.raises(ValueError, match=r"learning_starts must be an integer in \[32, 1000\] "
                                         r"or None \(from batch_size to buffer_size; None: a "
                                         r"full buffer\), got 31"):
        configure(config, learning_starts=31)


def test_presets_keep_their_replay_sizes():
    ddpg = from_preset("reacher-ddpg").config
    assert (ddpg.replay.buffer_size, ddpg.replay.learning_starts, ddpg.replay.min_replay) == (
        300_000, 5_000, 5_000)
    reference = from_preset("reacher-ddpg-reference").config
    assert (reference.replay.buffer_size, reference.replay.min_replay, reference.replay.beta) == (
        1_000_000, 10_000, ((0, 1.0),))
    dqn = from_preset("cartpole-dqn").config
    assert (dqn.replay.buffer_size, dqn.replay.min_replay) == (50_000, 1_000)


def test_reacher_ddpg_smooths_its_targets_near_the_exploration_it_stores():
    """Target-action smoothing of 0.2 over a replay of actions explored with noise 0.03 (the
    noise floor) queried the critic where no data held it once the early, wider-noise data
    had left the replay: the policy drifted down past its budget (docs/results.md)."""
    ddpg = from_preset("reacher-ddpg").config
    floor = ddpg.gaussian_sigma * ddpg.noise_scale_min
    assert ddpg.noise == "gaussian" and floor == pytest.approx(0.03)
    assert 0 < ddpg.target_noise <= 2 * floor


# --- DDPG's beta is a schedule, evaluated like DQN's ----------------------------------


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("value", [1.0, 0.4, 0.123456789, 0.0, 1])
def test_constant_beta_schedule_gives_the_constant_float32(jit, value):
    fn = exploration.piecewise_linear(((0, value),))
    fn = jax.jit(fn) if jit else fn
    steps = jnp.array([0, 1, 7, 10**6, 2**31 - 1], jnp.int32)
    got = np.asarray(jax.vmap(lambda s: jnp.asarray(fn(s), jnp.float32))(steps))
    # What the loop made of a constant beta before it was a schedule.
    expected = np.asarray(jnp.asarray((lambda step: value)(steps[0]), jnp.float32))
    assert got.dtype == np.float32 and np.array_equal(got, np.full(5, expected))


class _Captured(Exception):
    pass


def _trainer_arguments(monkeypatch, make_trainer, config) -> tuple[dict, dict]:
    """The replay and loop arguments ``make_trainer`` builds from ``config``."""
    seen = {}

    def trainer(agent, env, memory, **kw):
        seen["loop"] = kw
        raise _Captured

    # Wherever the trainers are assembled (the registry, or a loop factory it calls).
    for name in ("rljax.run.registry", "rljax.loops.factory"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "make_memory"):
            monkeypatch.setattr(module, "make_memory",
                                lambda **kw: seen.setdefault("memory", kw))
            monkeypatch.setattr(module, "make_off_policy_trainer", trainer)
    spec = type("Spec", (), {"num_envs": config.loop.num_envs, "is_atari": False,
                             "is_image": False, "task_id": "Test-v0"})()
    env = type("Env", (), {"spec": spec})()
    with pytest.raises(_Captured):
        make_trainer(None, env, config, 4, None)
    return seen["memory"], seen["loop"]


def test_ddpg_and_dqn_trainers_read_the_same_fields(monkeypatch):
    schedule = ((0, 0.4), (100, 1.0))
    for algo, config in [
            ("ddpg", configure(DDPGConfig, buffer_size=5_000, learning_starts=300, beta=schedule)),
            ("dqn", configure(DQNConfig, buffer_size=5_000, learning_starts=300, beta=schedule))]:
        make_trainer = registry.get_algorithm(algo).make_trainer
        memory, loop = _trainer_arguments(monkeypatch, make_trainer, config)
        assert (memory["capacity"], memory["min_size"]) == (5_000, 300)
        dqn_beta = exploration.piecewise_linear(configure(DQNConfig(), beta=schedule).replay.beta)
        steps = jnp.arange(0, 150, 7, dtype=jnp.int32)
        np.testing.assert_array_equal(np.asarray(jax.jit(loop["beta_fn"])(steps)),
                                      np.asarray(jax.jit(dqn_beta)(steps)))
        full = configure(config, learning_starts=None)
        assert _trainer_arguments(monkeypatch, make_trainer, full)[0]["min_size"] == 5_000


# --- old names ------------------------------------------------------------------------


def _as_saved_by_old_rljax(run: RunConfig) -> dict:
    """``run.to_dict()`` under the field names (and DDPG's float beta) of older versions."""
    data = run.to_dict()
    # Older versions wrote every field flat (no loop and replay records).
    config = {}
    for name, value in data["config"].items():
        config.update(value if name in ("loop", "replay") else {name: value})
    for old, new in RENAMED.get(run.algo, {}).items():
        config[old] = config.pop(new)
    if run.algo == "ddpg":
        (update, value), = run.config.replay.beta
        config["beta"] = value
    return dict(data, config=config)


@pytest.mark.parametrize("preset", ["reacher-ddpg", "reacher-ddpg-reference", "cartpole-dqn",
                                    "breakout-dqn", "cartpole-a2c"])
def test_from_dict_reads_old_names(preset):
    run = from_preset(preset, tensorboard=False)
    old = _as_saved_by_old_rljax(run)
    if run.algo in OLD:
        assert set(OLD[run.algo]) <= set(old["config"])
    loaded = RunConfig.from_dict(old)
    assert loaded == run and loaded.config == run.config
    assert RunConfig.from_dict(run.to_dict()) == run


def test_from_dict_reads_an_old_ddpg_config_json():
    # The agent part of a config.json written before the renames (reacher-ddpg).
    old = {"num_envs": 20, "env_steps_per_update": 1, "grad_steps": 10, "batch_size": 256,
           "min_replay": 5000, "replay_capacity": 300000, "beta": 1.0, "critic_loss": "l2",
           "noisy_sigma0": 0.5, "batch_norm": False, "actor_hidden": [150, 150]}
    config = RunConfig.from_dict({"algo": "ddpg", "env_id": "Reacher-v5", "total_steps": 1000,
                                  "seed": 0, "config": old}).config
    assert (config.replay.learning_starts, config.replay.buffer_size, config.replay.beta,
            config.td_loss) == (5000, 300000, ((0, 1.0),), "l2")
    assert config.actor_hidden == (150, 150) and config.batch_norm is False
    # An integer beta too; and a beta already written as a schedule is kept.
    assert upgrade_fields("ddpg", {"beta": 1}) == {"beta": ((0, 1),)}
    assert upgrade_fields("ddpg", {"beta": [[0, 0.4], [9, 1.0]]}) == {
        "beta": [[0, 0.4], [9, 1.0]]}
    assert upgrade_fields("dqn", {"sigma0": 0.3, "loss": "l2", "lr": 1e-3}) == {
        "noisy_sigma0": 0.3, "td_loss": "l2", "lr": 1e-3}


def test_from_dict_renames_a_swept_field_and_refuses_both_names():
    run = from_preset("reacher-ddpg", tensorboard=False, sweep="learning_starts=5000,6000")
    old = _as_saved_by_old_rljax(run)
    old["sweep"] = {"min_replay": [5000, 6000]}
    assert RunConfig.from_dict(old).sweep == ("replay.learning_starts", (5000, 6000))
    both = dict(old, config=dict(old["config"], buffer_size=1_000))
    with pytest.raises(ValueError, match="ddpg config has both 'replay_capacity' and "
                                         "'buffer_size', its new name"):
        RunConfig.from_dict(both)


def test_old_checkpoint_manifest_matches_the_run():
    run = from_preset("reacher-ddpg", tensorboard=False)
    checkpoint.check_compatible({"run": _as_saved_by_old_rljax(run)}, run.to_dict())
    other = from_preset("reacher-ddpg", tensorboard=False, buffer_size=200_000)
    with pytest.raises(checkpoint.CheckpointError, match="config.replay.buffer_size"):
        checkpoint.check_compatible({"run": _as_saved_by_old_rljax(run)}, other.to_dict())


@pytest.mark.parametrize("preset,old,new", [
    ("reacher-ddpg", "replay_capacity", "buffer_size"),
    ("reacher-ddpg", "min_replay", "learning_starts"),
    ("reacher-ddpg", "critic_loss", "td_loss"),
    ("cartpole-dqn", "sigma0", "noisy_sigma0"),
    ("cartpole-dqn", "loss", "td_loss"),
])
def test_old_names_refused_in_the_api(preset, old, new):
    config = "DDPGConfig" if "ddpg" in preset else "DQNConfig"
    with pytest.raises(ValueError) as exc:
        from_preset(preset, **{old: "1"})
    assert str(exc.value) == (f"{config} field {old!r} was renamed {new!r}; set {new} instead")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("args,message", [
    (["--set", "replay_capacity=1000"],
     "DDPGConfig field 'replay_capacity' was renamed 'buffer_size'; set buffer_size instead"),
    (["--sweep", "min_replay=1000,2000"],
     "DDPGConfig field 'min_replay' was renamed 'learning_starts'; set learning_starts instead"),
    (["--set", "beta=0.5"], "bad value '0.5' for beta: expected 2 values separated by ':'"),
])
def test_old_names_refused_on_the_command_line(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(["train", "reacher-ddpg", "--quiet", "--logdir",
                           "/tmp/rljax-test-never-written", *args]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == f"rljax: error: {message}\n"


def test_ddpg_beta_schedule_from_the_command_line():
    run = from_preset("reacher-ddpg", beta="0:0.4,1000:1.0")
    assert run.config.replay.beta == ((0, 0.4), (1000, 1.0))
    with pytest.raises(ValueError, match=r"beta must be a schedule whose updates"):
        from_preset("reacher-ddpg", beta="5:0.4")

"""Bad input of every kind is refused before anything compiles or allocates: one line
naming the value and what is allowed (``rljax: error: ...`` and exit status 2 on the
command line, a ``ValueError`` from the API), and no run directory left behind."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

import rljax
from rljax import resources
from rljax.run import cli, preflight
from rljax.run.build import build, run_length
from rljax.run.presets import PRESETS, from_preset

_FLAGS = ["--quiet", "--no-tensorboard"]


def _no_run_dir(logdir) -> None:
    assert not os.path.isdir(logdir) or not os.listdir(logdir), os.listdir(logdir)


def _cli_refuses(capsys, logdir, args, *fragments, code=2):
    """Runs ``rljax train ARGS --logdir LOGDIR`` in this process (``ARGS`` alone where they
    name a logdir); checks the one line and that no run directory was made."""
    where = [] if "--logdir" in args else ["--logdir", str(logdir)]
    try:
        rc = cli.main(["train", *args, *where, *_FLAGS])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == code, err
    assert err.startswith("rljax: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Tracer" not in err
    for fragment in fragments:
        assert fragment in err, err
    _no_run_dir(logdir)
    return err


def _api_refuses(logdir, *fragments, preset="cartpole-a2c", **kwargs):
    with pytest.raises(ValueError) as e:
        rljax.train(preset, logdir=str(logdir), **kwargs)
    message = str(e.value)
    assert "\n" not in message and "Tracer" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    _no_run_dir(logdir)
    return message


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "runs"


# --- non-finite numbers --------------------------------------------------------------


@pytest.mark.parametrize("preset,assignment,message", [
    ("cartpole-a2c", "actor_lr=nan", "actor_lr must be a finite number > 0.0, got nan"),
    ("cartpole-a2c", "critic_lr=inf", "critic_lr must be a finite number > 0.0, got inf"),
    ("cartpole-dqn", "huber_delta=1e400", "huber_delta must be a finite number > 0.0, got inf"),
    ("cartpole-dqn", "v_min=-inf", "v_min must be a finite number, got -inf"),
    ("cartpole-dqn", "epsilon=0:nan", "epsilon values must be numbers in [0.0, 1.0]"),
    ("cartpole-pqn", "lr_factor=0:1,100:nan", "lr_factor values must be numbers in [0.0, "),
    ("reacher-ddpg", "tau=nan", "tau must be a number in [0.0, 1.0], got nan"),
    ("cartpole-ppo", "clip_eps=inf", "clip_eps must be a number in (0.0, 1.0], got inf"),
])
def test_non_finite_numbers(capsys, logdir, preset, assignment, message):
    _cli_refuses(capsys, logdir, [preset, "--set", assignment], message)


def test_non_finite_numbers_through_the_api(logdir):
    _api_refuses(logdir, "actor_lr must be a finite number > 0.0, got nan",
                 actor_lr=float("nan"))
    _api_refuses(logdir, "lr must be a finite number > 0.0, got inf", preset="cartpole-pqn",
                 lr=float("inf"))
    _api_refuses(logdir, "actor_lr must be a finite number > 0.0, got nan",
                 sweep=("actor_lr", [float("nan"), 1e-3]))


# --- tasks no agent takes ------------------------------------------------------------


@pytest.mark.parametrize("preset,task,message", [
    ("cartpole-a2c", "CheetahRun-v1", "dict observations (keys position, velocity)"),
    ("reacher-ddpg", "CheetahRun-v1", "dict observations"),
    ("cartpole-dqn", "Taxi-v3", "discrete observations (500 states)"),
    ("cartpole-dqn", "Highway-v0", "observations of shape (5, 5) and dtype float32"),
    ("cartpole-ppo", "TwoWay-v0", "observations of shape (3, 3, 5)"),
    ("cartpole-dqn", "Go9x9-v1", "2 players"),
    ("reacher-ddpg", "D1Basic-v1", "Box actions with bounds"),
])
def test_tasks_no_agent_takes_name_what_is_supported(capsys, logdir, preset, task, message):
    err = _cli_refuses(capsys, logdir, [preset, "--env", task], f"task {task} has", message)
    assert "rljax agents take single-player tasks with one Box observation" in err


def test_a_task_envpool_cannot_make_here_is_one_line(capsys, logdir):
    # Procgen needs a system Qt; where it is installed its frames are channels-last.
    _cli_refuses(capsys, logdir, ["cartpole-dqn", "--env", "BigfishEasy-v0"],
                 "task BigfishEasy-v0 ")
    _api_refuses(logdir, "task CheetahRun-v1 has dict observations", env="CheetahRun-v1")


# --- the run directory ---------------------------------------------------------------


def test_logdir_that_is_a_file_or_under_one(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target in (afile, afile / "sub"):
        _cli_refuses(capsys, target, ["cartpole-a2c", "--total-steps", "100"],
                     f"cannot write the run directory under '{target}", "Not a directory")
    assert afile.read_text() == "x"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_unwritable_logdir_and_read_only_run_directory(capsys, tmp_path):
    # /proc refuses new files even to root, unlike a chmod-ed folder.
    _cli_refuses(capsys, tmp_path / "unused", ["cartpole-a2c", "--total-steps", "100",
                                               "--logdir", "/proc/rljax-runs"],
                 "cannot write the run directory under '/proc/rljax-runs'")
    with pytest.raises(ValueError, match="cannot write the run directory under '/proc/self'"):
        rljax.train("cartpole-a2c", total_steps=100, run_dir="/proc/self", tensorboard=False)


def test_long_logdir_name_leaves_no_folder(capsys, tmp_path):
    parent = tmp_path / "runs"
    long = parent / ("x" * 300)
    _cli_refuses(capsys, parent, ["cartpole-a2c", "--total-steps", "100", "--logdir",
                                  str(long)], "File name too long")
    assert not parent.exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_read_only_logdir(capsys, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        _cli_refuses(capsys, folder, ["cartpole-a2c", "--total-steps", "100"],
                     "Permission denied")
    finally:
        folder.chmod(0o755)


def test_api_logdir_of_another_type_or_with_a_nul(tmp_path):
    with pytest.raises(ValueError, match="logdir must be a str, got int 123"):
        rljax.train("cartpole-a2c", logdir=123)
    logdir = tmp_path / "runs"
    _api_refuses(logdir / "a\0b", "cannot write the run directory under", "embedded null byte",
                 total_steps=100)
    assert not logdir.exists()


# --- memory --------------------------------------------------------------------------


@pytest.mark.parametrize("preset,args,part,hint", [
    ("cartpole-dqn", ["--set", "hidden_sizes=1000000,1000000"], "parameters and optimizer",
     "hidden_sizes=(1000000, 1000000)"),
    ("cartpole-a2c", ["--num-envs", "1000000000"], "1,000,000,000 envpool envs",
     "lower num_envs"),
    ("cartpole-a2c", ["--set", "rollout_len=100000000"], "one update's data",
     "rollout_len"),
])
def test_impossible_sizes_are_refused_with_numbers(capsys, logdir, preset, args, part, hint):
    err = _cli_refuses(capsys, logdir, [preset, *args], "not enough memory: this run needs "
                       "at least ", part, "of host memory is available", hint)
    assert " TB" in err or " GB" in err


def test_replay_larger_than_the_memory_available(capsys, logdir, monkeypatch):
    monkeypatch.setattr(resources, "available_host_bytes", lambda: 10**9)
    _cli_refuses(capsys, logdir, ["cartpole-dqn", "--set", "buffer_size=50000000"],
                 "replay memory ", "but 1.0 GB of host memory is available",
                 "lower buffer_size (50,000,000)")
    _api_refuses(logdir, "lower buffer_size (50,000,000)", preset="cartpole-dqn",
                 buffer_size=50_000_000)
    _cli_refuses(capsys, logdir, ["cartpole-a2c", "--eval-every", "1000", "--eval-episodes",
                                  "1000000"], "evaluation envs", "lower eval_episodes")


def test_out_of_memory_later_is_one_line(capsys, logdir, monkeypatch):
    import rljax.run.driver as driver

    def exhausted(*args, **kwargs):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(driver, "train_run", exhausted)
    _cli_refuses(capsys, logdir, ["cartpole-a2c"], "out of memory (MemoryError: "
                 "std::bad_alloc); lower buffer_size", code=1)
    text = "RESOURCE_EXHAUSTED: Out of memory allocating 34359738352 bytes.\nmore"
    assert preflight.resource_message(RuntimeError(text)) == (
        "out of memory (RuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
        "34359738352 bytes.); lower buffer_size, num_envs, the network sizes or the number "
        "of seeds")
    assert preflight.resource_message(RuntimeError("something else")) is None


# --- sweeps --------------------------------------------------------------------------


@pytest.mark.parametrize("sweep,message", [
    ("actor_lr=1e-3,1e-3", "value 0.001 repeats"),
    ("actor_lr=1e-3,0.001,1e-4", "value 0.001 repeats"),
    ("actor_lr=1.0000001e-3,1.0000002e-3", "prints as 0.001 like"),
])
def test_sweeps_over_repeated_values(capsys, logdir, sweep, message):
    _cli_refuses(capsys, logdir, ["cartpole-a2c", "--sweep", sweep], "--sweep actor_lr: value ",
                 message, "give each member a value of its own")


@pytest.mark.parametrize("preset,field,values,name", [
    ("cartpole-dqn", "batch_size", "32,64", "replay.batch_size"),
    ("cartpole-dqn", "replay.buffer_size", "1000,2000", "replay.buffer_size"),
    ("cartpole-dqn", "n_step", "1,3", "replay.n_step"),
    ("cartpole-ppo", "num_minibatches", "2,4", "num_minibatches"),
    ("cartpole-a2c", "rollout_len", "4,8", "loop.rollout_len"),
    ("reacher-ddpg", "loop.env_steps_per_update", "10,20", "loop.env_steps_per_update"),
])
def test_sweeps_over_shape_fields_are_refused_by_name(capsys, logdir, preset, field, values,
                                                      name):
    _cli_refuses(capsys, logdir, [preset, "--sweep", f"{field}={values}"],
                 f"--sweep {name}: this hyperparameter sets a shape",
                 "run one training per value instead")


@pytest.mark.parametrize("preset,field,values", [
    ("cartpole-dqn", "target_period=100,200", "target_period"),
    ("reacher-ddpg", "policy_delay=1,2", "policy_delay"),
])
def test_sweeps_that_set_the_program_structure_are_refused_before_the_run_dir(
        capsys, logdir, preset, field, values):
    _cli_refuses(capsys, logdir, [preset, "--sweep", field], f"--sweep {values}: this "
                 "hyperparameter sets a shape or the structure of the program",
                 "run one training per value instead")


def test_sweep_values_through_the_api(logdir):
    _api_refuses(logdir, "value 0.001 repeats", sweep=("actor_lr", [1e-3, 1e-3]))
    _api_refuses(logdir, "sweep value of actor_lr must be a number (int or float), got str "
                 "'1e-3'", sweep=("actor_lr", ["1e-3", "1e-4"]))
    _api_refuses(logdir, "--sweep loop.rollout_len: this hyperparameter sets a shape",
                 sweep=("rollout_len", [4, 8]))


# --- replay that could never be learned from ------------------------------------------


@pytest.mark.parametrize("args,message", [
    (["--set", "learning_starts=none", "--set", "buffer_size=10"],
     "batch_size=64 is larger than buffer_size=10"),
    (["--set", "n_step=100000"], "n_step=100000 is larger than buffer_size=50000"),
    (["--set", "learning_starts=100000"],
     "learning_starts must be an integer in [64, 50000] or None"),
])
def test_replay_too_small_for_a_batch_or_an_n_step_transition(capsys, logdir, args, message):
    _cli_refuses(capsys, logdir, ["cartpole-dqn", *args], message)


def test_learning_that_never_starts_is_warned():
    run = from_preset("cartpole-dqn", total_steps=500, learning_starts=20_000)
    with pytest.warns(UserWarning, match="learning never starts in this run: the replay "
                                         "holds learning_starts=20,000 transitions"):
        preflight.warn_if_never_learning(run)


# --- files that cannot be read --------------------------------------------------------


def test_unreadable_config_and_metrics_name_the_file(capsys, tmp_path):
    run_dir, curve_dir = tmp_path / "run", tmp_path / "curve"
    run_dir.mkdir()
    curve_dir.mkdir()
    (run_dir / "config.json").write_text('{"algo": "a2c", ')
    (curve_dir / "metrics.jsonl").write_text('{"env_steps": 1}\n{"env_ste\n')
    cases = [(["eval", str(run_dir)], f"cannot read {run_dir}/config.json: Expecting"),
             (["plot", str(curve_dir), "--out", str(tmp_path / "c.png")],
              f"cannot read {curve_dir}/metrics.jsonl, line 2: ")]
    for args, message in cases:
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("rljax: error: ") and err.count("\n") == 1 and message in err
    (run_dir / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{run_dir}/config.json is not an rljax run config"):
        rljax.load(str(run_dir))


def test_plot_into_a_place_that_cannot_be_written(capsys, tmp_path):
    run_dir, afile = tmp_path / "run", tmp_path / "afile"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"env_steps": 1, "return_mean_100": 3.0}\n')
    afile.write_text("x")
    assert cli.main(["plot", str(run_dir), "--out", str(afile / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err == f"rljax: error: cannot write {afile}/c.png: File exists\n"


def test_eval_episodes_refused_before_loading(capsys, tmp_path):
    assert cli.main(["eval", str(tmp_path), "--episodes", "0"]) == 2
    assert "episodes must be an integer >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="episodes must be an integer >= 1, got 0"):
        rljax.evaluate(str(tmp_path), episodes=0)


# --- Python types in the API -----------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    (dict(shared_torso="true"), "shared_torso must be a bool (True or False), got str 'true'"),
    (dict(num_envs="3"), "num_envs must be an int, got str '3'"),
    (dict(total_steps="1000"), "total_steps must be an int, got str '1000'"),
    (dict(actor_lr="1e-3"), "actor_lr must be a number (int or float), got str '1e-3'"),
    (dict(actor_hidden="64,64"), "actor_hidden must be a tuple of ints, got str '64,64'"),
    (dict(actor_hidden=(64.5,)), "actor_hidden must be a tuple of ints, got tuple (64.5,)"),
    (dict(gae_lambda="none"), "gae_lambda must be a number (int or float) or None, got str"),
    (dict(num_seeds=True), "num_seeds must be an int, got bool True"),
    (dict(tensorboard="no"), "tensorboard must be a bool (True or False), got str 'no'"),
    (dict(eval_every="1e30"), "eval_every must be an int, got str '1e30'"),
    (dict(progress="yes"), "progress must be a bool (True or False), got str 'yes'"),
])
def test_api_refuses_strings_for_numbers_and_flags(logdir, kwargs, message):
    _api_refuses(logdir, message, **kwargs)


def test_api_refuses_what_is_no_preset():
    with pytest.raises(ValueError, match="train takes a preset name, a Preset or a RunConfig, "
                                         "got int 123"):
        rljax.train(123)


def test_api_takes_python_values_of_the_right_types(logdir, monkeypatch):
    calls = []
    monkeypatch.setattr("rljax.run.api.train_run", lambda run, **kw: calls.append(run) or 1/0)
    with pytest.raises(ZeroDivisionError):
        rljax.train("cartpole-a2c", logdir=str(logdir), total_steps=1e4, num_envs=4,
                    actor_lr=1e-3, gamma=1, actor_hidden=[32, 32], gae_lambda=None,
                    shared_torso=False, sweep="critic_lr=1e-3,3e-3")
    assert calls[0].total_steps == 10_000 and calls[0].config.actor_hidden == (32, 32)


# --- step counters ---------------------------------------------------------------------


def test_step_budgets_past_the_int32_counters(capsys, logdir):
    _cli_refuses(capsys, logdir, ["cartpole-a2c", "--total-steps", "1e30"],
                 "total_steps must be an integer in [1, 2147483647] (below 2**31")
    _cli_refuses(capsys, logdir, ["cartpole-a2c", "--total-steps", "2147483647"],
                 "total_steps=2,147,483,647 rounds up to 2,147,500,000 env steps (whole "
                 "chunks of 20,000)", "use total_steps <= 2,147,480,000")
    _cli_refuses(capsys, logdir, ["reacher-ddpg", "--total-steps", "2000000000", "--set",
                                  "num_envs=1", "--set", "env_steps_per_update=1"],
                 "x 10 gradient steps (grad_steps)", "past what the int32 optimizer and "
                 "batch counters hold (2,147,483,647)")


def test_largest_allowed_budget_fits_the_counters():
    base = PRESETS["cartpole-a2c"].run
    _, _, trainer, chunks = build(dataclasses.replace(base, total_steps=2_147_480_000))
    assert chunks * trainer.steps_per_chunk <= 2**31 - 1


# --- the command line's own mistakes ------------------------------------------------------


@pytest.mark.parametrize("args,message", [
    (["--set", "actor_lr=1e-3", "--set", "actor_lr=2e-3"], "--set actor_lr given 2 times"),
    (["--set", "total_steps=10"], "--set total_steps: total_steps is a run setting, not an "
                                  "agent field; use --total-steps"),
    (["--set", "num_envs=4", "--num-envs", "8"], "num_envs given twice (--num-envs 8 and "
                                                 "--set num_envs=4)"),
    (["--seed", "2147483647", "--seeds", "2"], "member_seeds must hold num_seeds=2 seeds "
                                               "in [0, 2**31)"),
    (["--num-envs", "4.5"], "bad value '4.5' for num_envs: expected an integer"),
])
def test_command_line_mistakes(capsys, logdir, args, message):
    _cli_refuses(capsys, logdir, ["cartpole-a2c", *args], message)


# --- values with which training would silently do nothing ------------------------------


@pytest.mark.parametrize("args,message", [
    (["reacher-sac", "--set", "target_entropy=5"], "target_entropy=5 is above the largest "
     "entropy a policy over Reacher-v5's actions can have (1.39, uniform over the action box)"),
    (["reacher-td3", "--set", "tau=0"], "tau=0 never moves the target networks"),
    (["reacher-sac", "--set", "tau=0"], "tau=0 never moves the target networks"),
    (["cartpole-dqn", "--total-steps", "1000", "--set", "target_period=500"],
     "target_period=500 updates is longer than the run (32 updates)"),
    (["reacher-td3", "--total-steps", "20", "--set", "policy_delay=100"],
     "policy_delay=100 critic updates is longer than the run (10)"),
    (["cartpole-a2c", "--sweep", "actor_lr=1e-4,1e-3", "--sweep", "critic_lr=1e-4,1e-3"],
     "--sweep given 2 times"),
    (["cartpole-a2c", "--sweep", "actor_lr=1e-4,1e-3", "--set", "actor_lr=5e-4"],
     "actor_lr is both swept and set"),
    (["cartpole-dqn", "--set", "prioritized=false", "--sweep", "alpha=0.3,0.6"],
     "replay.alpha only acts with prioritized replay, and this run's replay is uniform"),
    (["cartpole-dqn", "--set", "prioritized=false", "--set", "beta=0:0.4,100:1"],
     "replay.beta only acts with prioritized replay"),
])
def test_values_that_would_train_nothing_are_refused(capsys, logdir, args, message):
    _cli_refuses(capsys, logdir, args, message)


def test_wandb_without_wandb_is_refused_before_compiling(capsys, logdir, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    _cli_refuses(capsys, logdir, ["cartpole-a2c", "--wandb", "proj"],
                 "the wandb package is not installed")
    with pytest.raises(ValueError, match="wandb package is not installed"):
        build(from_preset("cartpole-a2c", wandb_project="proj"))


def test_an_annealed_rate_that_ends_before_the_run_is_warned():
    run = from_preset("cartpole-pqn", total_steps=51_200, schedule_steps=25_600,
                      anneal_lr=True)
    with pytest.warns(UserWarning, match="anneals to 0 by update 50 .schedule_steps. of the "
                                         "run's 100: the last 50 updates train with a "
                                         "learning rate of 0"):
        preflight.check_values(run, None, run_length(run))


@pytest.mark.parametrize("preset, changes", [
    ("cartpole-a2c", []), ("cartpole-dqn", []), ("cartpole-ppo", ["anneal_lr=false"])])
def test_schedule_steps_where_nothing_anneals_is_refused(capsys, logdir, preset, changes):
    """schedule_steps sets how long schedules tied to the run's length last: an agent with
    none (A2C, DQN; PPO without anneal_lr) refuses it, naming the value."""
    sets = [a for c in changes for a in ("--set", c)]
    _cli_refuses(capsys, logdir, [preset, *sets, "--schedule-steps", "5000"],
                 "schedule_steps=5000", "nothing anneals over the run")
    run = from_preset(preset, schedule_steps=5_000,
                      **{c.split("=")[0]: False for c in changes})
    with pytest.raises(ValueError, match="schedule_steps=5000 .* has none .nothing anneals"):
        preflight.check_values(run, None, run_length(run))
    # where the learning rate anneals, it is taken
    run = from_preset("cartpole-ppo", anneal_lr=True, schedule_steps=5_000, total_steps=5_000)
    preflight.check_values(run, None, run_length(run))


def test_a_nan_observation_is_refused_by_the_policy(tmp_path):
    run = rljax.train("cartpole-a2c", total_steps=2_000, logdir=str(tmp_path),
                      tensorboard=False)
    with pytest.raises(ValueError, match="observation holds NaN or infinite values"):
        run.policy([0.0, float("nan"), 0.0, 0.0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        run.policy(np.array([[0.0] * 4, [np.inf, 0, 0, 0]]))
    assert run.policy([0.0] * 4) in (0, 1)

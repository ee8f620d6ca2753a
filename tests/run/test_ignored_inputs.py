"""Inputs that were accepted and then changed nothing, or changed something silently: an
empty option value, env options dropped by ``--env``, agent settings that apply only
with other settings, and metrics a plot cannot draw. Each is refused in one line (or, for
a run named twice in a plot, said), before anything compiles."""

from __future__ import annotations

import json
import os

import pytest

import rljax
from rljax.run import cli, rundir
from rljax.run.presets import from_preset

_NOVEL = (("obs_indices", (0, 2)),)


def _refused(capsys, argv: list[str], *fragments: str) -> str:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rljax: error: ") and err.count("\n") == 1, (rc, err)
    for fragment in fragments:
        assert fragment in err, err
    return err


def _run_config(argv: list[str]):
    return cli._run_config(cli._build_parser().parse_args(["train", *argv]))


# --- empty option values ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--total-steps", "--env", "--seed", "--seeds",
                                  "--chunk-steps", "--checkpoint-every", "--keep-checkpoints",
                                  "--eval-every", "--devices", "--cpu-threads", "--sweep",
                                  "--wandb", "--logdir", "--eval-episodes"])
def test_an_empty_option_value_is_refused(capsys, tmp_path, flag):
    argv = ["train", "cartpole-a2c", flag, ""]
    argv += [] if flag == "--logdir" else ["--logdir", str(tmp_path / "runs")]
    _refused(capsys, argv, f"{flag} (", "is empty")
    assert not (tmp_path / "runs").exists()


def test_an_empty_value_is_refused_by_the_api_too():
    for keyword in ("total_steps", "env", "logdir", "wandb_project", "sweep"):
        with pytest.raises(ValueError, match=f"{keyword}\\) is empty"):
            from_preset("cartpole-a2c", **{keyword: " "})


# --- env options under another env ---------------------------------------------------------


@pytest.mark.parametrize("preset,env", [("cartpole-novel-ppo-rnn", "CartPole-v1"),
                                        ("cartpole-novel-pqn", "gymnax:CartPole-v1")])
def test_another_env_keeps_the_env_options_that_apply_to_it(preset, env):
    run = _run_config([preset, "--env", env])
    assert run.env_id == env and run.env_options == _NOVEL and run.threshold == 475.0
    assert from_preset("cartpole-novel-ppo", env="CartPole-v1").env_options == _NOVEL


def test_env_options_that_do_not_apply_to_another_env_are_refused(capsys, tmp_path):
    _refused(capsys, ["train", "cartpole-novel-ppo", "--env", "Breakout-v5", "--logdir",
                      str(tmp_path)],
             "env options {'obs_indices': (0, 2)} do not apply to Breakout-v5",
             "obs_indices selects entries of flat observations")
    # The API may replace them.
    run = from_preset("cartpole-novel-ppo", env="Acrobot-v1", env_options={})
    assert run.env_options == ()


def test_env_options_are_accepted_by_train(tmp_path):
    run = rljax.train("cartpole-a2c", env_options={"max_episode_steps": 20}, total_steps=640,
                      chunk_steps=320, num_envs=4, logdir=str(tmp_path), tensorboard=False)
    assert run.config.env_options == (("max_episode_steps", 20),)
    assert 0 < max(r["episode_length_mean"] for r in run.metrics) <= 20
    with pytest.raises(ValueError, match="unknown option 'max_steps' for CartPole-v1"):
        from_preset("cartpole-a2c", env_options={"max_steps": 20})
    with pytest.raises(ValueError, match="env_options must be a dict"):
        from_preset("cartpole-a2c", env_options=20)


# --- settings that apply only with others ---------------------------------------------------


@pytest.mark.parametrize("preset,changes,message", [
    # the memory settings are a Memory record's now: the old flat names are no fields
    ("cartpole-ppo", {"memory_size": "64"}, "unknown field 'memory_size' for PPOConfig"),
    ("cartpole-pqn", {"memory_reset_every_step": "true"},
     "unknown field 'memory_reset_every_step' for PQNConfig"),
    ("cartpole-ppo", {"clip_eps": "1e9"}, "clip_eps must be a number in (0.0, 1.0]"),
    # the schedules' length is the run's (schedule_steps), no agent field
    ("cartpole-ppo", {"total_updates": "10"}, "unknown field 'total_updates' for PPOConfig"),
    ("cartpole-ppo", {"sweep": "clip_eps=0.1,,0.2"}, "two values or more, none empty"),
])
def test_settings_that_would_change_nothing_are_refused(preset, changes, message):
    with pytest.raises(ValueError) as e:
        from_preset(preset, **changes)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_same_settings_are_taken_where_they_apply(capsys, tmp_path):
    assert from_preset("cartpole-novel-ppo-rnn",
                       **{"memory.size": 64}).config.memory.size == 64
    assert from_preset("cartpole-ppo", clip_eps=1.0).config.clip_eps == 1.0
    _refused(capsys, ["train", "cartpole-ppo", "--set", "memory_size=64", "--logdir",
                      str(tmp_path)], "unknown field 'memory_size'")


# --- rljax plot ----------------------------------------------------------------------------


def _run_dir(path, steps, seed=0):
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"algo": "a2c", "env_id": "CartPole-v1", "seed": seed}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for k, step in enumerate(steps):
            row = {"return_mean_100": 10.0 * k}
            if step != "missing":
                row["env_steps"] = step
            f.write(json.dumps(row) + "\n")
    return str(path)


def test_plot_draws_a_run_named_twice_once_and_says_so(capsys, tmp_path):
    run = _run_dir(tmp_path / "a", [100, 200, 300])
    assert cli.main(["plot", run, run, "--out", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert f"{run} was given twice" in err and "averaged" not in err, err
    assert os.path.getsize(tmp_path / "c.png") > 0


@pytest.mark.parametrize("steps,message", [
    ([100, None, 300], "row 2: env_steps is None, not a number"),
    ([100, True, 300], "row 2: env_steps is True, not a number"),
    ([100, "missing"], "row 2: env_steps is 'missing', not a number"),
    ([100, 300, 200], "row 3: env_steps go from 300 to 200"),
])
def test_plot_refuses_rows_it_cannot_place(capsys, tmp_path, steps, message):
    run = _run_dir(tmp_path / "a", steps)
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "c.png")], message)
    assert not (tmp_path / "c.png").exists()


# --- the env in names and help ------------------------------------------------------------


def test_a_run_on_another_env_is_named_with_it(tmp_path):
    run = from_preset("gymnax-cartpole-ppo", env="gymnax:Acrobot-v1", logdir=str(tmp_path))
    assert rundir.run_name(run) == "gymnax-cartpole-ppo-gymnax-Acrobot-v1"
    assert os.path.basename(rundir.make_run_dir(run)).startswith(
        "gymnax-cartpole-ppo-gymnax-Acrobot-v1-s0-")
    assert rundir.run_name(from_preset("gymnax-cartpole-ppo")) == "gymnax-cartpole-ppo"
    train = cli._build_parser()._subparsers._group_actions[0].choices["train"]
    help_text = " ".join(train.format_help().split())
    assert "envpool task id" not in help_text and "module:callable" in help_text

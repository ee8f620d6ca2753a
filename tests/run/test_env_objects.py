"""A user's own env objects, written only in tests/user_envs.py, trained through the API
(``env=OBJ``) and the command line (``--env module:callable``): agents reach the envs'
known optima, seeds, resume and evaluation work on them, and bad envs are refused in one
line before anything compiles."""

import json
import os
import signal
import sys

import numpy as np
import pytest
import user_envs
from _torsos import TinyTorso
from gymnax.environments import spaces

import rljax
from rljax.envs import objects
from rljax.run import cli, driver
from rljax.run.logging import read_jsonl

pytestmark = pytest.mark.slow
OPTIMUM = user_envs.MATCH_OPTIMUM  # both envs' best return: 10
# PPO and PQN on Match: 8 envs x 8 steps per update, 8k steps (125 updates).
MATCH = dict(num_envs=8, rollout_len=8, total_steps=8_000, chunk_steps=2_000)
TIMING = ("time", "sps", "_s")


def _learning_rows(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


@pytest.fixture(scope="module")
def ppo_match(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("ppo"))
    return rljax.train("gymnax-cartpole-ppo", env=user_envs.Match(), logdir=logdir, **MATCH)


def test_ppo_reaches_a_gymnax_subclass_optimum_through_the_api(ppo_match):
    assert ppo_match.config.env_id == "object:Match"
    assert ppo_match.summary["final_return_mean"] >= 0.9 * OPTIMUM  # random: about 0.5
    assert ppo_match.summary["threshold"] is None  # Match has none, and none was given
    assert float(ppo_match.policy(np.eye(3, dtype=np.float32)[2])) == 2


def test_an_interrupted_run_resumed_with_its_env_object_equals_the_whole_run(
        ppo_match, tmp_path, monkeypatch):
    due, sent = driver._Host.due, []

    def interrupt_after_the_first_chunk(self, last, stopping):
        if not sent:  # one SIGINT, as a user's Ctrl-C; the handler train() installed sees it
            sent.append(os.kill(os.getpid(), signal.SIGINT))
        return due(self, last, stopping)

    monkeypatch.setattr(driver._Host, "due", interrupt_after_the_first_chunk)
    with pytest.raises(driver.TrainingInterrupted) as stopped:
        rljax.train("gymnax-cartpole-ppo", env=user_envs.Match(), logdir=str(tmp_path),
                    **MATCH)
    monkeypatch.undo()
    run_dir = stopped.value.run_dir
    monkeypatch.setattr(objects, "_OBJECTS", {})  # as in a new process: the object is gone
    with pytest.raises(ValueError, match=r"env=OBJ\)$"):
        rljax.train(resume=run_dir)
    wider = type("Match", (user_envs.Match,),
                 {"observation_space": lambda self, p: spaces.Box(0.0, 1.0, (4,))})()
    with pytest.raises(ValueError, match="spaces: checkpoint has 'obs \\(3,\\), 3 actions', "
                                         "this run has 'obs \\(4,\\), 3 actions'"):
        rljax.train(resume=run_dir, env=wider)
    resumed = rljax.train(resume=run_dir, env=user_envs.Match())
    rows = read_jsonl(os.path.join(resumed.run_dir, "metrics.jsonl"))
    assert len(rows) == len(ppo_match.metrics) > len(resumed.metrics)
    assert _learning_rows(rows) == _learning_rows(ppo_match.metrics)


def test_sac_with_a_user_torso_trains_evaluates_and_resumes_on_a_brax_style_env(tmp_path):
    """The plumbing at a tiny budget (learning: the exhaustive test below): SAC on Reach
    with the time limit and threshold given, evaluated, resumed with the env object; the
    run record names the torso and the resume rebuilds it and trains it further."""
    small = dict(max_episode_steps=10, solve_threshold=5.0, network=TinyTorso,
                 random_steps=40, learning_starts=40, buffer_size=256, batch_size=16,
                 chunk_steps=80, checkpoint_every=80, eval_every=0, tensorboard=False)
    run = rljax.train("gymnax-pendulum-sac", env=user_envs.Reach(), total_steps=80,
                      run_dir=str(tmp_path / "sac"), **small)
    assert run.config.env_options == (("max_episode_steps", 10),
                                      ("spaces", "obs (2,), actions (2,) in [-1, 1]"))
    assert run.summary["threshold"] == 5.0 and run.config.config.network == "_torsos:TinyTorso"
    assert run.metrics[-1]["episodes"] == 8  # 4 envs x 20 steps in 10-step episodes
    evaluated = rljax.evaluate(run, episodes=2)["return_mean"]
    assert -20.0 <= evaluated <= OPTIMUM  # a reward in [1 - 4, 1] per step
    before = run.state.agent.critic["params"]["torso"]["Dense_0"]["kernel"]
    more = rljax.train(resume=run.run_dir, env=user_envs.Reach(), total_steps=160)
    assert more.config.config.network == "_torsos:TinyTorso"
    assert more.metrics[-1]["env_steps"] == 160
    assert not np.array_equal(before, more.state.agent.critic["params"]["torso"]["Dense_0"][
        "kernel"])


@pytest.mark.exhaustive  # several trainings; pytest -m exhaustive
def test_sac_reaches_a_brax_style_envs_optimum_through_the_api(tmp_path):
    run = rljax.train("gymnax-pendulum-sac", env=user_envs.Reach(), max_episode_steps=10,
                      solve_threshold=5.0, total_steps=3_000, chunk_steps=1_000,
                      logdir=str(tmp_path))
    assert run.config.env_options == (("max_episode_steps", 10),
                                      ("spaces", "obs (2,), actions (2,) in [-1, 1]"))
    assert run.summary["threshold"] == 5.0
    # the noise-free policy (8.999 here); random actions score about a third of the optimum
    assert rljax.evaluate(run, episodes=16)["return_mean"] >= 0.85 * OPTIMUM


def _cli(capsys, *args):
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_four_seeds_eval_and_continuous_ppo_run_through_the_cli(tmp_path, capsys):
    """The command-line paths at tiny budgets (learning: the exhaustive test below):
    ``--env module:callable`` with ``--seeds 4`` gives 4 runs, ``rljax eval`` rebuilds the
    env from the record's import string, PPO runs and evaluates on the brax-style env."""
    code, out, _ = _cli(capsys, "train", "gymnax-cartpole-pqn", "--env",
                        "user_envs:make_match", "--seeds", "4", "--num-envs", "8", "--set",
                        "rollout_len=8", "--total-steps", "128", "--chunk-steps", "64",
                        "--logdir", str(tmp_path / "pqn"), "--quiet", "--no-tensorboard")
    assert code == 0
    summary = json.loads(out)
    assert summary["num_seeds"] == 4 and summary["env_id"] == "user_envs:make_match"
    members = [d for d in os.listdir(summary["run_dir"]) if d.startswith("seed")]
    assert len(members) == 4
    code, out, _ = _cli(capsys, "eval", summary["run_dir"], "--episodes", "1")
    assert code == 0 and len(json.loads(out)["members"]) == 4
    code, out, _ = _cli(capsys, "train", "gymnax-cartpole-ppo", "--env", "user_envs:make_reach",
                        "--num-envs", "8", "--total-steps", "256", "--chunk-steps", "128",
                        "--eval-every", "256", "--logdir", str(tmp_path / "ppo"), "--quiet",
                        "--no-tensorboard")
    assert code == 0
    assert -20.0 <= json.loads(out)["eval_return_mean"] <= OPTIMUM


@pytest.mark.exhaustive  # several trainings; pytest -m exhaustive
def test_pqn_with_four_seeds_and_ppo_reach_the_optima_through_the_cli(tmp_path, capsys):
    code, out, _ = _cli(capsys, "train", "gymnax-cartpole-pqn", "--env",
                        "user_envs:make_match", "--seeds", "4", "--num-envs", "8", "--set",
                        "rollout_len=8", "--total-steps", "8000", "--chunk-steps", "2000",
                        "--logdir", str(tmp_path / "pqn"), "--quiet")
    assert code == 0
    summary = json.loads(out)
    assert summary["num_seeds"] == 4 and summary["env_id"] == "user_envs:make_match"
    members = [json.load(open(os.path.join(summary["run_dir"], d, "summary.json")))
               for d in sorted(os.listdir(summary["run_dir"])) if d.startswith("seed")]
    assert len(members) == 4
    assert all(m["final_return_mean"] >= 0.8 * OPTIMUM for m in members), members
    # the run record's import string rebuilds the env for evaluation
    code, out, _ = _cli(capsys, "eval", summary["run_dir"], "--episodes", "4")
    assert code == 0 and len(json.loads(out)["members"]) == 4
    code, out, _ = _cli(capsys, "train", "gymnax-cartpole-ppo", "--env", "user_envs:make_reach",
                        "--num-envs", "8", "--total-steps", "10000", "--chunk-steps", "2500",
                        "--eval-every", "10000", "--logdir", str(tmp_path / "ppo"), "--quiet")
    assert code == 0
    assert json.loads(out)["eval_return_mean"] >= 0.9 * OPTIMUM


@pytest.mark.parametrize("env, preset, message", [
    ("user_envs:not_an_env", "gymnax-cartpole-ppo", "env 42 is not an env rljax can adapt"),
    ("user_envs:broken_factory", "gymnax-cartpole-ppo",
     "env factory user_envs:broken_factory raised RuntimeError: no such simulator here"),
    ("user_envs:no_such_factory", "gymnax-cartpole-ppo", "has no callable 'no_such_factory'"),
    ("no_such_module.envs:make", "gymnax-cartpole-ppo", "unknown env backend"),
    ("user_envs:make_dict_obs", "gymnax-cartpole-ppo", "observation must be one array"),
    ("user_envs:make_reach", "gymnax-cartpole-pqn", "discrete"),
])
def test_bad_envs_are_refused_in_one_line(env, preset, message, tmp_path, capsys):
    code, out, err = _cli(capsys, "train", preset, "--env", env, "--total-steps", "64",
                          "--logdir", str(tmp_path), "--quiet")
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not os.listdir(tmp_path)


def test_bad_env_objects_are_refused_by_the_api(tmp_path):
    with pytest.raises(ValueError, match="is not an env rljax can adapt"):
        rljax.train("gymnax-cartpole-ppo", env=object(), logdir=str(tmp_path))
    with pytest.raises(ValueError, match="observation must be one array"):
        rljax.train("gymnax-cartpole-ppo", env=user_envs.DictObs(), logdir=str(tmp_path))
    with pytest.raises(ValueError, match="discrete"):
        rljax.train("gymnax-cartpole-pqn", env=user_envs.Reach(), logdir=str(tmp_path))
    with pytest.raises(ValueError, match="env_params applies to a gymnax Environment"):
        rljax.train("gymnax-cartpole-ppo", env=user_envs.Reach(), env_params=1,
                    logdir=str(tmp_path))
    assert sys.modules.get("user_envs") is user_envs

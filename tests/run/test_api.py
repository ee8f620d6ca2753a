"""Python API: train, policy in a plain gymnasium env, save / load / evaluate, eval CLI."""

import json

import gymnasium as gym
import jax
import numpy as np
import pytest

import rljax
from rljax.run import cli


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("api")
    return rljax.train("cartpole-a2c", total_steps=100_000, seed=0, logdir=str(logdir),
                       tensorboard=False, eval_every=50_000, eval_episodes=5)


def test_train_returns_run_with_metrics_and_eval(run):
    assert run.summary["env_steps"] == 100_000
    assert [r["env_steps"] for r in run.metrics] == [20_000 * i for i in range(1, 6)]
    assert run.metrics[2]["eval_return_mean"] is not None  # evaluated at 60k (>= 50k)
    assert run.summary["eval_return_mean"] == run.metrics[-1]["eval_return_mean"]
    assert len(run.summary["eval_returns"]) == 5


def test_policy_acts_in_plain_gymnasium_env(run):
    env = gym.make("CartPole-v1")
    returns, seen = [], []
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            seen.append(obs)
            obs, reward, terminated, truncated, _ = env.step(run.policy(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    # One observation at a time (float64 from gymnasium) acts as the batch of them does.
    seen = np.stack(seen)
    assert [int(run.policy(o)) for o in seen[:200]] == run.policy(seen[:200]).tolist()
    # A random policy scores about 22 and a constant action about 9; after 100k steps the
    # policy scores 40-360 depending on the backend's rounding (157.6 on an H100 against
    # envpool's 355.2), so only "it learned" is checked, over 20 episodes, not a ratio.
    assert np.mean(returns) >= 40, returns
    batch = np.stack([env.observation_space.sample() for _ in range(7)])
    assert run.policy(batch).shape == (7,)
    with pytest.raises(ValueError, match="observation shape"):
        run.policy(np.zeros(5))


def test_save_load_evaluate_roundtrip(run):
    run.save()
    loaded = rljax.load(run.run_dir)
    for a, b in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(run.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    first = rljax.evaluate(loaded, episodes=4)
    again = rljax.evaluate(run.run_dir, episodes=4)
    assert first["episodes"] == 4 and first["returns"] == again["returns"]


def test_eval_cli(run, capsys):
    assert cli.main(["eval", run.run_dir, "--episodes", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 3 and out["env_steps"] == 100_000 and out["return_mean"] > 0
    assert cli.main(["eval", run.run_dir, "--episodes", "zero"]) == 2
    assert "bad value 'zero' for episodes" in capsys.readouterr().err


def test_evaluate_and_eval_cli_give_each_member_of_a_many_seed_run(tmp_path, capsys):
    # Two seeds in one program: each member is evaluated on the envs the run's own final
    # evaluation used (seed + 10,000), so the results equal its per-seed eval rows.
    run = rljax.train("cartpole-a2c", total_steps=4_000, num_seeds=2, seed=3,
                      logdir=str(tmp_path), tensorboard=False, eval_every=4_000,
                      eval_episodes=3)
    result = rljax.evaluate(run, episodes=3)
    assert [m["seed"] for m in result["members"]] == [3, 4]
    for k, member in enumerate(result["members"]):
        rows = [json.loads(line) for line in open(f"{run.run_dir}/seed_{k + 3}/metrics.jsonl")]
        assert member["episodes"] == 3 and member["sweep_value"] is None
        np.testing.assert_allclose(member["return_mean"], rows[-1]["eval_return_mean"],
                                   rtol=1e-6)
    assert result["return_mean"] == np.mean([m["return_mean"] for m in result["members"]])
    assert cli.main(["eval", run.run_dir, "--episodes", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["env_steps"] == 4_000 and out["members"] == result["members"]
    with pytest.raises(ValueError, match="this run holds 2 members"):
        run.policy(np.zeros(4, np.float32))

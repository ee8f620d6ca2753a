"""Many seeds in one program: seed k equals a single run with seed k; seeds differ."""

import dataclasses
import json
import os

import jax
import numpy as np
from _backend import MEMBER_ATOL, MEMBER_RTOL

from rljax import envs
from rljax.agents.a2c import A2CConfig, make_a2c
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.parallel import envs as parallel_envs
from rljax.parallel.members import vectorize_seeds
from rljax.records import configure
from rljax.run import rundir
from rljax.run.driver import train_run
from rljax.run.presets import from_preset

CFG = configure(A2CConfig, num_envs=4, rollout_len=2)  # short rollouts: quick to compile


def _run_chunks(trainer, state, n=2):
    for _ in range(n):
        state, metrics = trainer.chunk(state)
    return jax.device_get((state, metrics))


def test_seed_k_of_many_equals_single_run_k_and_seeds_differ():
    num_seeds, first = 3, 5
    env = parallel_envs.members("CartPole-v1", CFG.loop.num_envs,
                                [first + k for k in range(num_seeds)])
    trainer = vectorize_seeds(make_on_policy_trainer(make_a2c(CFG, env.spec), env,
                                                     rollout_len=CFG.loop.rollout_len,
                                                     updates_per_chunk=20),
                              env, first)
    many, many_metrics = _run_chunks(trainer, trainer.init(None))
    assert many_metrics["loss"].shape == (num_seeds, 20)
    k = 2  # the last member: its seed, envs and slice are offset from the first
    one_env = envs.make("CartPole-v1", CFG.loop.num_envs, seed=first + k)
    single = make_on_policy_trainer(make_a2c(CFG, one_env.spec), one_env,
                                    rollout_len=CFG.loop.rollout_len, updates_per_chunk=20)
    one, one_metrics = _run_chunks(single, single.init(jax.random.key(first + k)))
    for a, b in zip(jax.tree.leaves(many.agent.params), jax.tree.leaves(one.agent.params),
                    strict=True):
        np.testing.assert_allclose(a[k], b, rtol=MEMBER_RTOL, atol=MEMBER_ATOL)
    np.testing.assert_allclose(many_metrics["loss"][k], one_metrics["loss"], rtol=MEMBER_RTOL)
    assert int(many.env.stats.episodes[k]) == int(one.env.stats.episodes)
    # Independent seeds: own init, exploration and envs.
    kernel = jax.tree.leaves(many.agent.params)[-1]
    assert not np.allclose(kernel[0], kernel[1])
    assert len({float(x) for x in many_metrics["loss"][:, -1]}) == num_seeds
    returns = many.env.stats.recent_returns
    assert not np.array_equal(returns[0], returns[1])


def test_driver_logs_each_seed_and_aggregates(tmp_path):
    run = from_preset("cartpole-a2c", total_steps=20_000, num_seeds=3, logdir=str(tmp_path),
                      tensorboard=False)
    result = train_run(run, progress=False)
    summary = result.summary
    assert summary["num_seeds"] == 3 and summary["total_env_steps"] == 60_000
    assert [s["seed"] for s in summary["seeds"]] == [0, 1, 2]
    assert summary["seeds_solved"] == 0 and summary["solved_at_step"] is None
    finals = [s["final_return_mean"] for s in summary["seeds"]]
    np.testing.assert_allclose(summary["final_return_mean"], np.mean(finals))
    lengths = [s["final_length_mean"] for s in summary["seeds"]]
    np.testing.assert_allclose(summary["final_length_mean"], np.mean(lengths))
    for k in range(3):
        folder = os.path.join(result.run_dir, f"seed_{k}")
        rows = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
        assert rows[-1]["env_steps"] == 20_000
        assert json.load(open(os.path.join(folder, "config.json")))["seed"] == k
        assert json.load(open(os.path.join(folder, "summary.json")))["seed"] == k
    top = [json.loads(line) for line in open(os.path.join(result.run_dir, "metrics.jsonl"))]
    assert "return_mean_100_std" in top[-1]
    assert os.path.isfile(os.path.join(result.run_dir, "curve.png"))


def test_aggregate_keeps_a_key_no_member_has_yet():
    base = {"env_steps": 8}
    rows = [dict(base, episodes=0, return_mean_100=None, loss=1.0),
            dict(base, episodes=0, return_mean_100=None, loss=3.0)]
    row = rundir.aggregate(rows, base)
    assert row["return_mean_100"] is None and "return_mean_100_std" not in row
    assert row["loss"] == 2.0
    rows[1]["return_mean_100"] = 20.0
    assert rundir.aggregate(rows, base)["return_mean_100"] == 20.0


def test_many_seeds_with_no_episode_ended_in_the_first_chunk_train_on(tmp_path):
    """The progress line of a many-seed run whose first chunk ends no episode (a long game:
    MinAtar Freeway's first chunk) has no return yet, and the run goes on."""
    run = dataclasses.replace(from_preset("cartpole-a2c", num_envs=2, rollout_len=2,
                                          total_steps=64, num_seeds=2, logdir=str(tmp_path),
                                          tensorboard=False), chunk_steps=4)
    result = train_run(run, progress=True)
    top = [json.loads(line) for line in open(os.path.join(result.run_dir, "metrics.jsonl"))]
    assert top[0]["episodes"] == 0 and top[0]["return_mean_100"] is None
    assert top[-1]["env_steps"] == 64 and top[-1]["episodes"] > 0

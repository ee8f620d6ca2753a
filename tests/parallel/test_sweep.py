"""Hyperparameter sweeps in one program: member (value v, seed s) equals a single run
with that value and seed; shape-changing or non-numeric fields are refused."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest
from _backend import MEMBER_ATOL, MEMBER_RTOL, ON_CPU

from rljax.parallel.sweep import SweepError
from rljax.records import configure
from rljax.run.build import build
from rljax.run.config import RunConfig, parse_sweep
from rljax.run.driver import train_run
from rljax.run.presets import from_preset


def _run(run: RunConfig, chunks: int = 2):
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(run.seed))
    for _ in range(chunks):
        state, metrics = trainer.chunk(state)
    return jax.device_get((state, metrics))


def _small(**kw) -> RunConfig:
    return from_preset("cartpole-a2c", num_envs=4, total_steps=8_000, tensorboard=False, **kw)


# Members are value-major: k = 1 is (value 0, seed 4), k = 2 is (value 1, seed 3). Either
# one tells value-major from seed-major order; k = 1 also checks that the seed advances
# within a value, k = 2 that it restarts at the next value. Each case compares the member
# whose value differs from the preset's (actor_lr 5e-4, gamma 0.99): an optimizer's
# hyperparameter and a loss's. (A sweep of entropy_coef is tests/parallel/test_devices.py's,
# sharded over 4 devices against the same sweep on one.)
@pytest.mark.parametrize("field,values,k", [("actor_lr", (1e-4, 3e-3), 2),
                                            ("gamma", (0.9, 0.99), 1)])
def test_sweep_member_equals_single_run_with_that_value(field, values, k):
    # 2-step rollouts (short to compile), 20 updates a chunk.
    run = dataclasses.replace(_small(seed=3, rollout_len=2), chunk_steps=160, num_seeds=2,
                              sweep=(field, values))
    assert run.members[1] == (4, values[0]) and run.members[2] == (3, values[1])
    many, many_metrics = _run(run)
    assert many_metrics["loss"].shape[0] == 4
    seed, value = run.members[k]
    assert value != getattr(run.config, field)
    single = dataclasses.replace(run, seed=seed, num_seeds=1, sweep=None,
                                 config=dataclasses.replace(run.config, **{field: value}))
    one, one_metrics = _run(single)
    for a, b in zip(jax.tree.leaves(many.agent), jax.tree.leaves(one.agent), strict=True):
        np.testing.assert_allclose(a[k], b, rtol=max(2e-5, MEMBER_RTOL), atol=MEMBER_ATOL)
    np.testing.assert_allclose(many_metrics["loss"][k], one_metrics["loss"], rtol=2e-5,
                               atol=1e-6)
    # Members with the same seed and different values share init and envs but not learning.
    assert any(not np.allclose(leaf[0], leaf[2]) for leaf in jax.tree.leaves(many.agent.params))


@pytest.mark.skipif(not ON_CPU, reason="on GPUs the rounding of vmapped TD errors moves a "
                    "prioritized draw within a few updates, and the runs part ways")
@pytest.mark.parametrize("prioritized,chunk_steps", [(False, 512), (True, 256)])
def test_dqn_learning_rate_sweep_matches_single_run(prioritized, chunk_steps):
    """A member of a vmapped sweep follows the single run with its value, to rounding.

    The vmapped matmuls round differently from the single ones (~1e-7 from the first
    gradient steps); with prioritized replay that rounding reaches the TD errors and
    priorities, and once it moves a stratified draw across a slot boundary the two runs learn
    from different samples (measured: after 900-1800 env steps, depending on the code's exact
    rounding). Uniform replay does not feed rounding into the draws: it is compared over
    1,024 env steps (768 of learning), prioritized replay over 512."""
    base = from_preset("cartpole-dqn", num_envs=4, total_steps=4_000, tensorboard=False,
                       learning_starts=256, batch_size=32)
    base = dataclasses.replace(
        base, chunk_steps=chunk_steps,
        config=configure(base.config, prioritized=prioritized))
    many, _ = _run(dataclasses.replace(base, sweep=("lr", (1e-4, 1e-3))))
    one, _ = _run(dataclasses.replace(base, config=dataclasses.replace(base.config, lr=1e-3)))
    for a, b in zip(jax.tree.leaves(many.agent), jax.tree.leaves(one.agent), strict=True):
        np.testing.assert_allclose(a[1], b, rtol=1e-4, atol=1e-5)


def test_shape_changing_and_bad_sweeps_are_refused_before_compiling():
    with pytest.raises(SweepError, match="rollout_len: this hyperparameter sets a shape"):
        build(_small(sweep="rollout_len=4,8"))[2].init(None)
    with pytest.raises(SweepError, match="number of environments"):
        _small(sweep="num_envs=4,8")
    with pytest.raises(ValueError, match="only numeric"):
        _small(sweep="activation=relu,tanh")
    with pytest.raises(ValueError, match="unknown field 'lr'.*actor_lr"):
        _small(sweep="lr=1,2")
    with pytest.raises(ValueError, match="gamma"):
        _small(sweep="gamma=0.9,1.5")  # the config's own validation names the bad value
    with pytest.raises(ValueError, match="two values or more"):
        parse_sweep("gamma=0.9")


def test_sweep_run_directory_and_summary(tmp_path):
    run = _small(num_seeds=2, sweep="critic_lr=1e-3,3e-3", logdir=str(tmp_path))
    result = train_run(run, progress=False)
    s = result.summary
    assert s["num_members"] == 4 and s["num_seeds"] == 2
    assert [(m["seed"], m["sweep"]["critic_lr"]) for m in s["seeds"]] == [
        (0, 1e-3), (1, 1e-3), (0, 3e-3), (1, 3e-3)]
    assert [g["critic_lr"] for g in s["sweep"]] == [1e-3, 3e-3]
    np.testing.assert_allclose(s["sweep"][0]["final_return_mean"],
                               np.mean([m["final_return_mean"] for m in s["seeds"][:2]]))
    folder = os.path.join(result.run_dir, "critic_lr=0.003_seed_1")
    with open(os.path.join(folder, "config.json")) as f:
        member = json.load(f)
    assert member["config"]["critic_lr"] == 3e-3 and member["seed"] == 1
    assert member["label"] == "cartpole-a2c critic_lr=0.003"
    assert os.path.isfile(os.path.join(folder, "metrics.jsonl"))
    assert os.path.isfile(os.path.join(result.run_dir, "curve.png"))
    # The sweep survives a round trip through config.json (resume, load).
    with open(os.path.join(result.run_dir, "config.json")) as f:
        assert RunConfig.from_dict(json.load(f)).sweep == ("critic_lr", (1e-3, 3e-3))

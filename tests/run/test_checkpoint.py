"""Checkpoints: bit-exact restore, resume, interruption, and every bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents import a2c
from rljax.run import checkpoint, cli
from rljax.run.build import build
from rljax.run.config import from_preset
from rljax.run.driver import NonFiniteError, train_run


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("runs")
    run = from_preset("cartpole-a2c", total_steps=20_000, logdir=str(logdir),
                      tensorboard=False)
    return run, train_run(run, progress=False)


def test_restore_is_bit_exact(saved_run):
    run, result = saved_run
    _, _, trainer, _ = build(run)
    template = trainer.init(jax.random.key(123))
    restored = checkpoint.restore(result.run_dir, template)
    for part in ("agent", "memory", "env_steps", "solved_at"):
        saved_leaves = jax.tree.leaves(getattr(result.state, part))
        for a, b in zip(saved_leaves, jax.tree.leaves(getattr(restored, part)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(jax.random.key_data(result.state.key),
                                  jax.random.key_data(restored.key))
    for a, b in zip(jax.tree.leaves(result.state.env.stats.recent_returns),
                    jax.tree.leaves(restored.env.stats.recent_returns), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(restored.env.stats.episodes) == int(result.state.env.stats.episodes)
    # Schedules continue: the optimizer's step count is restored too.
    assert int(restored.agent.step) == int(result.state.agent.step) > 0


def test_resume_continues_counters(saved_run, tmp_path):
    run, result = saved_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", result.run_dir, str(copy)], check=True)
    longer = from_preset("cartpole-a2c", total_steps=40_000, logdir=run.logdir,
                         tensorboard=False)
    resumed = train_run(longer, progress=False, resume=str(copy))
    assert resumed.summary["resumed_from_step"] == result.summary["env_steps"]
    assert resumed.summary["env_steps"] == 40_000
    assert int(resumed.state.agent.step) == 2 * int(result.state.agent.step)
    rows = [json.loads(line) for line in open(copy / "metrics.jsonl")]
    assert [r["env_steps"] for r in rows] == [20_000, 40_000]


@pytest.mark.parametrize("extra,message", [
    (["--set", "gamma=0.9"], "config.gamma: checkpoint has 0.99, this run has 0.9"),
    (["--env", "CartPole-v0"], "env_id: checkpoint has 'CartPole-v1', this run has"),
    (["--seed", "4"], "seed: checkpoint has 0, this run has 4"),
])
def test_resume_with_another_config_is_refused(saved_run, extra, message, capsys):
    _, result = saved_run
    code = cli.main(["train", "cartpole-a2c", "--resume", result.run_dir, "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_corrupted_and_missing_checkpoints(saved_run, tmp_path, capsys):
    _, result = saved_run
    bad = tmp_path / "bad"
    subprocess.run(["cp", "-r", result.run_dir, str(bad)], check=True)
    state_file = bad / "checkpoint" / "state.msgpack"
    state_file.write_bytes(state_file.read_bytes()[:1000])
    assert cli.main(["train", "cartpole-a2c", "--resume", str(bad), "--quiet"]) == 2
    assert "corrupted or truncated" in capsys.readouterr().err
    (bad / "checkpoint" / "manifest.json").write_text("{not json")
    assert cli.main(["train", "cartpole-a2c", "--resume", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint manifest" in err and "is unreadable" in err, err
    assert cli.main(["train", "cartpole-a2c", "--resume", str(tmp_path), "--quiet"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_nonfinite_loss_stops_with_clear_error(tmp_path, monkeypatch, capsys):
    original = a2c.losses.value_loss
    monkeypatch.setattr(a2c.losses, "value_loss", lambda v, t: original(v, t) * np.inf)
    code = cli.main(["train", "cartpole-a2c", "--total-steps", "60000", "--logdir",
                     str(tmp_path), "--quiet", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "non-finite" in err and "by env step 20,000" in err
    assert "no checkpoint had been saved yet" in err
    run = from_preset("cartpole-a2c", total_steps=60_000, logdir=str(tmp_path))
    with pytest.raises(NonFiniteError, match="non-finite parameter"):
        train_run(run, progress=False)


@pytest.mark.slow
def test_sigint_saves_and_resumed_run_solves(tmp_path):
    cmd = [sys.executable, "-m", "rljax.run.cli", "train", "cartpole-a2c", "--logdir",
           str(tmp_path), "--quiet", "--no-tensorboard"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    metrics = None
    while time.time() < deadline:
        found = list(tmp_path.glob("*/metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 6:  # 120k steps in
            metrics = found[0]
            break
        time.sleep(0.2)
    assert metrics is not None, "run did not start"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "resume with: rljax train cartpole-a2c" in err and "Traceback" not in err
    run_dir = metrics.parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True
    saved = checkpoint.read_manifest(str(run_dir))["env_steps"]
    assert saved == summary["env_steps"] < 500_000
    resumed = subprocess.run(cmd + ["--resume", str(run_dir)], capture_output=True, text=True,
                             timeout=400)
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["resumed_from_step"] == saved and final["env_steps"] == 500_000
    # Seed 0 uninterrupted solves at 287k steps; the resumed run must solve too.
    assert final["solved_at_step"] is not None and final["final_return_mean"] >= 475
    assert os.path.isfile(run_dir / "curve.png")


def test_manifest_from_json_matches_its_run():
    """A manifest read back from JSON (nested tuples as lists, fields added since it was
    written missing) is the same run; a changed hyperparameter is not."""
    import json

    from rljax.run.checkpoint import CheckpointError, check_compatible
    from rljax.run.config import from_preset

    run = from_preset("breakout-dqn-500k").to_dict()
    saved = json.loads(json.dumps(run))
    assert isinstance(saved["config"]["epsilon"][0], list)
    del saved["devices"]
    check_compatible({"run": saved}, run)
    saved["config"]["lr"] = 1.0
    with pytest.raises(CheckpointError, match=r"config.lr: checkpoint has 1.0"):
        check_compatible({"run": saved}, run)


@pytest.mark.parametrize("seeds", [1, 2])
def test_sum_tree_saved_in_another_layout_is_rebuilt(tmp_path, seeds):
    """A prioritized replay saved with the former 16-way sum tree (one per seed) restores
    into today's layout with the same leaves and consistent sums."""
    from rljax.buffers import sum_tree

    run = from_preset("cartpole-dqn", total_steps=10_000, logdir=str(tmp_path),
                      tensorboard=False, buffer_size=1_000, num_seeds=seeds)
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    is_tree = lambda x: isinstance(x, sum_tree.SumTreeState)
    find_tree = lambda memory: [x for x in jax.tree.leaves(memory, is_leaf=is_tree)
                                if is_tree(x)]
    (tree,) = find_tree(state.memory)
    assert tree.fanout == sum_tree.DEFAULT_FANOUT != 16
    rng = np.random.default_rng(0)
    leaves = rng.lognormal(0, 2, (seeds, tree.capacity)).astype(np.float32)
    old = np.stack([np.asarray(sum_tree.from_values(v, tree.capacity, fanout=16).nodes)
                    for v in leaves])
    saved = state.replace(memory=jax.tree.map(
        lambda x: x.replace(nodes=jnp.asarray(old.reshape(-1) if seeds == 1 else old))
        if is_tree(x) else x, state.memory, is_leaf=is_tree))
    checkpoint.save(str(tmp_path), saved, {"run": run.to_dict()})
    restored = checkpoint.restore(str(tmp_path), trainer.init(jax.random.key(1)))
    (tree,) = find_tree(restored.memory)
    assert tree.fanout == sum_tree.DEFAULT_FANOUT
    nodes = np.asarray(tree.nodes).reshape(seeds, -1)
    for member, values in zip(nodes, leaves, strict=True):
        rebuilt = tree.replace(nodes=jnp.asarray(member))
        np.testing.assert_array_equal(np.asarray(rebuilt.leaves), values)
        np.testing.assert_allclose(float(sum_tree.total(rebuilt)),
                                   values.astype(np.float64).sum(), rtol=1e-5)

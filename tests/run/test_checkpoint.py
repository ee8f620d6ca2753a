"""Checkpoints: bit-exact restore, resume, interruption, and every bad input."""

import hashlib
import json
import os
import pathlib
import shutil
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
from rljax.run.driver import NonFiniteError, train_run
from rljax.run.presets import from_preset


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
    # The restored state runs in the program a fresh state compiled: its arrays are placed
    # as a fresh run's (uncommitted on the one device; committed ones are another jit
    # signature, so the chunk would compile again).
    fresh = trainer.init(jax.random.key(0))
    placed = [(jax.tree_util.keystr(p), getattr(x, "_committed", None))
              for p, x in jax.tree_util.tree_flatten_with_path(fresh)[0]]
    assert placed == [(p, getattr(x, "_committed", None)) for (p, _), x in
                      zip(placed, jax.tree.leaves(restored), strict=True)]
    assert any(c is False for _, c in placed)  # (not a vacuous comparison)


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


def _biggest_data_file(run_dir) -> pathlib.Path:
    files = [p for p in (pathlib.Path(run_dir) / "checkpoint").glob("*/state/**/*")
             if p.is_file()]
    return max(files, key=lambda p: p.stat().st_size)


# A read still running after the error would touch a closed event loop (and a freed buffer).
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_corrupted_and_missing_checkpoints(saved_run, tmp_path, capsys):
    _, result = saved_run
    for damage, message in [
            (lambda f: f.write_bytes(f.read_bytes()[:1000]), "is corrupted or truncated"),
            (lambda f: f.write_bytes(_flip(f.read_bytes())), "do not match the checksums")]:
        bad = tmp_path / damage.__name__ / message[:6]
        shutil.copytree(result.run_dir, bad)
        damage(_biggest_data_file(bad))
        assert cli.main(["train", "cartpole-a2c", "--resume", str(bad), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    (manifest,) = (bad / "checkpoint").glob("*/manifest/metadata")
    manifest.write_text("{not json")
    assert cli.main(["train", "cartpole-a2c", "--resume", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint manifest" in err and "is unreadable" in err, err
    assert cli.main(["train", "cartpole-a2c", "--resume", str(tmp_path), "--quiet"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:]


def test_foreign_checkpoint_is_refused(tmp_path):
    from rljax.run import checkpoint_store

    checkpoint_store.write(str(tmp_path / "checkpoint"), 5, {"x": jnp.ones(3)}, {"a": 1}, keep=2)
    with pytest.raises(checkpoint.CheckpointError, match="is not an rljax checkpoint"):
        checkpoint.read_manifest(str(tmp_path))


def test_keeps_the_last_checkpoints_and_replaces_a_step(saved_run, tmp_path):
    run, result = saved_run
    state = result.state
    for steps in (100, 200, 300):
        checkpoint.save(str(tmp_path), state.replace(env_steps=jnp.int32(steps)),
                        {"run": run.to_dict()})
    folder = tmp_path / "checkpoint"
    assert sorted(os.listdir(folder)) == ["200", "300"]
    assert checkpoint.latest_step(str(tmp_path)) == 300
    assert checkpoint.read_manifest(str(tmp_path))["env_steps"] == 300
    again = checkpoint.save(str(tmp_path), state.replace(env_steps=jnp.int32(300)),
                            {"run": run.to_dict()})
    assert again == str(folder / "300") and sorted(os.listdir(folder)) == ["200", "300"]
    assert checkpoint.save(str(tmp_path), state, {"run": run.to_dict()}, keep=1)
    assert os.listdir(folder) == [str(int(state.env_steps))]


def test_a_save_that_cannot_fit_is_refused_before_writing(saved_run, tmp_path, monkeypatch):
    from rljax.run import checkpoint_store

    run, result = saved_run
    checkpoint.save(str(tmp_path), result.state, {"run": run.to_dict()})
    real = os.statvfs

    def nearly_full(path):
        stat = real(path)
        return os.statvfs_result((stat.f_bsize, stat.f_frsize, stat.f_blocks, 1, 1,
                                  *stat[5:]))

    monkeypatch.setattr(checkpoint_store.os, "statvfs", nearly_full)
    later = result.state.replace(env_steps=jnp.int32(40_000))
    with pytest.raises(checkpoint.SaveError) as exc:
        checkpoint.save(str(tmp_path), later, {"run": run.to_dict()})
    message = str(exc.value)
    assert message.startswith("could not save the checkpoint at env step 40,000 in ")
    assert "No space left on device [errno ENOSPC] (it needs " in message
    assert message.endswith("; the last complete checkpoint (env step 20,000) is kept")
    assert os.listdir(tmp_path / "checkpoint") == ["20000"]


def _save_legacy(run_dir, state, run) -> None:
    """A checkpoint as rljax wrote it before orbax: state.msgpack and manifest.json."""
    import flax.serialization

    folder = pathlib.Path(run_dir) / "checkpoint"
    data = flax.serialization.to_bytes(jax.device_get(checkpoint._payload(state)))
    (folder / "state.msgpack").write_bytes(data)
    manifest = {"rljax_version": "0.1.0", "preset": run.preset, "algo": run.algo,
                "env_id": run.env_id, "run": dict(run.to_dict(), checkpoint_steps=100_000),
                "env_steps": int(state.env_steps), "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data)}
    del manifest["run"]["checkpoint_every"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_legacy_run_directory_restores_and_resumes(saved_run, tmp_path):
    run, result = saved_run
    legacy = tmp_path / "legacy"
    shutil.copytree(result.run_dir, legacy)
    for step in (legacy / "checkpoint").iterdir():
        shutil.rmtree(step)
    _save_legacy(legacy, result.state, run)
    _, _, trainer, _ = build(run)
    restored = checkpoint.restore(str(legacy), trainer.init(jax.random.key(5)))
    for a, b in zip(jax.tree.leaves(result.state.agent), jax.tree.leaves(restored.agent),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The resumed run writes orbax checkpoints; the old files go once two newer exist.
    longer = from_preset("cartpole-a2c", total_steps=60_000, logdir=run.logdir,
                         tensorboard=False, checkpoint_every=20_000)
    resumed = train_run(longer, progress=False, resume=str(legacy))
    assert resumed.summary["resumed_from_step"] == 20_000
    assert sorted(os.listdir(legacy / "checkpoint")) == ["40000", "60000"]
    # A damaged legacy file is refused as before.
    damaged = tmp_path / "damaged"
    shutil.copytree(legacy, damaged)
    for step in (damaged / "checkpoint").iterdir():
        shutil.rmtree(step)
    _save_legacy(damaged, result.state, run)
    state_file = damaged / "checkpoint" / "state.msgpack"
    state_file.write_bytes(state_file.read_bytes()[:1000])
    with pytest.raises(checkpoint.CheckpointError, match="corrupted or truncated"):
        checkpoint.restore(str(damaged), trainer.init(jax.random.key(5)))


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


@pytest.mark.optimized
@pytest.mark.slow
def test_sigint_saves_and_resumed_run_solves(tmp_path, capsys):
    # cartpole-ppo, whose seeds solve within 100k env steps, trained to 160k (8 chunks).
    cmd = [sys.executable, "-m", "rljax.run.cli", "train", "cartpole-ppo", "--total-steps",
           "160000", "--logdir", str(tmp_path), "--quiet", "--no-tensorboard"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    metrics = None
    while time.time() < deadline:
        found = list(tmp_path.glob("*/metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 2:  # 40k steps in
            metrics = found[0]
            break
        time.sleep(0.2)
    assert metrics is not None, "run did not start"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    run_dir = metrics.parent
    assert f"resume with: rljax train --resume {run_dir}\n" in err and "Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True
    saved = checkpoint.read_manifest(str(run_dir))["env_steps"]
    assert saved == summary["env_steps"] < 160_000
    # The resume runs in this process (the signal above needed a process of its own).
    capsys.readouterr()
    code = cli.main(["train", "--resume", str(run_dir), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    final = json.loads(out)
    assert final["resumed_from_step"] == saved and final["env_steps"] >= 160_000
    # Seed 0 uninterrupted solves at ~100k steps (docs/results.md: 3 of 3 seeds within
    # 100k); the resumed run must solve too.
    assert final["solved_at_step"] is not None and final["final_return_mean"] >= 475
    assert os.path.isfile(run_dir / "curve.png")


def test_manifest_from_json_matches_its_run():
    """A manifest read back from JSON (nested tuples as lists, fields added since it was
    written missing) is the same run; a changed hyperparameter is not."""
    import json

    from rljax.run.checkpoint import CheckpointError, check_compatible
    from rljax.run.presets import from_preset

    run = from_preset("breakout-dqn-500k").to_dict()
    saved = json.loads(json.dumps(run))
    assert isinstance(saved["config"]["epsilon"][0], list)
    del saved["devices"]
    check_compatible({"run": saved}, run)
    saved["config"]["lr"] = 1.0
    with pytest.raises(CheckpointError, match=r"config.lr: checkpoint has 1.0"):
        check_compatible({"run": saved}, run)


def test_arrays_of_no_elements_are_saved_as_nothing_and_restored(tmp_path):
    """MJX's env state holds arrays of no elements (a model without contacts), which orbax
    refuses to save; a checkpoint leaves them out and restore makes them from the template."""
    run = from_preset("gymnax-cartpole-ppo", num_envs=4, total_steps=512, tensorboard=False)
    _, _, trainer, _ = build(run)

    def with_empty(state):
        extras = dict(state.env.extras or {}, contact_dist=jnp.zeros((4, 0), jnp.float32))
        return state.replace(env=state.env.replace(extras=extras))

    state = with_empty(trainer.init(jax.random.key(1)))
    checkpoint.save(str(tmp_path), state, {"run": run.to_dict()})
    assert not any("contact_dist" in k for k in checkpoint.read_manifest(str(tmp_path))["arrays"])
    restored = checkpoint.restore(str(tmp_path), with_empty(trainer.init(jax.random.key(2))))
    assert restored.env.extras["contact_dist"].shape == (4, 0)
    for a, b in zip(jax.tree.leaves(state.env), jax.tree.leaves(restored.env), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

"""Resuming: ``rljax train --resume RUN_DIR`` alone, what a resume may change, the run
directory's lock, metrics rows after a crash, and the checkpoint cadence."""

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rljax
from rljax.run import checkpoint, cli, driver, rundir
from rljax.run.config import RunConfig
from rljax.run.driver import train_run
from rljax.run.presets import from_preset


def _small_dqn(logdir, **changes) -> RunConfig:
    run = from_preset("cartpole-dqn", total_steps=4_096, logdir=str(logdir), tensorboard=False,
                      buffer_size=2_048, learning_starts=256, gamma=0.98)
    return dataclasses.replace(run, chunk_steps=1_024, checkpoint_every=2_048, **changes)


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    run = _small_dqn(tmp_path_factory.mktemp("runs"))
    return run, train_run(run, progress=False)


@pytest.fixture
def copy(dqn_run, tmp_path) -> str:
    path = str(tmp_path / "copy")
    shutil.copytree(dqn_run[1].run_dir, path)
    return path


def _steps(path) -> list[int]:
    return [json.loads(line)["env_steps"] for line in open(os.path.join(path, "metrics.jsonl"))]


def test_checkpoint_every_sets_the_cadence(dqn_run):
    _, result = dqn_run
    assert sorted(os.listdir(os.path.join(result.run_dir, "checkpoint"))) == ["2048", "4096"]
    assert checkpoint.read_manifest(result.run_dir)["run"]["checkpoint_every"] == 2_048


def test_resume_alone_continues_the_saved_configuration(copy, capsys):
    assert cli.main(["train", "--resume", copy, "--total-steps", "6144", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from_step"] == 4_096 and summary["env_steps"] == 6_144
    config = json.loads(open(os.path.join(copy, "config.json")).read())
    assert config["config"]["gamma"] == 0.98 and config["chunk_steps"] == 1_024
    assert config["total_steps"] == 6_144 and config["tensorboard"] is False
    assert _steps(copy) == [1_024, 2_048, 3_072, 4_096, 5_120, 6_144]


@pytest.mark.parametrize("extra,message", [
    (["--seed", "3"], "seed: checkpoint has 0, this run has 3"),
    (["--set", "gamma=0.9"], "config.gamma: checkpoint has 0.98, this run has 0.9"),
    (["--num-envs", "4", "--seeds", "2"], "config.loop.num_envs: checkpoint has 8, this run has 4; "
                                          "num_seeds: checkpoint has 1, this run has 2"),
])
def test_resume_refuses_what_a_resume_may_not_change(dqn_run, extra, message, capsys):
    code = cli.main(["train", "--resume", dqn_run[1].run_dir, "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert "(a resume may change only total_steps, threshold, chunk_steps, logdir" in err


def _flat(config: dict) -> dict:
    """An agent config dict as rljax wrote it before the loop and replay records."""
    out = {}
    for name, value in config.items():
        out.update(value if name in ("loop", "replay") else {name: value})
    return out


def _as_old_run_dir(path: str) -> list[str]:
    """Rewrites the run directory's config.json and checkpoint manifests with flat agent
    config fields, as older rljax wrote them; returns the files rewritten."""
    rewritten = []
    for root, _, files in os.walk(path):
        for name in files:
            file = os.path.join(root, name)
            try:
                data = json.load(open(file))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            run = data.get("run", data) if isinstance(data, dict) else None
            if isinstance(run, dict) and isinstance(run.get("config"), dict):
                run["config"] = _flat(run["config"])
                json.dump(data, open(file, "w"))
                rewritten.append(os.path.relpath(file, path))
    return rewritten


def test_a_run_directory_with_flat_config_fields_resumes_and_evaluates(copy, capsys):
    rewritten = _as_old_run_dir(copy)
    assert "config.json" in rewritten and any("checkpoint" in f for f in rewritten), rewritten
    assert "replay" not in json.load(open(os.path.join(copy, "config.json")))["config"]
    assert cli.main(["eval", copy, "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert cli.main(["train", "--resume", copy, "--total-steps", "6144", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from_step"] == 4_096 and summary["env_steps"] == 6_144
    config = json.load(open(os.path.join(copy, "config.json")))["config"]
    assert config["replay"]["buffer_size"] == 2_048 and config["gamma"] == 0.98


def test_resume_alone_in_the_api(copy):
    run = rljax.train(resume=copy, total_steps=5_120, eval_every=5_000, eval_episodes=2)
    assert run.summary["resumed_from_step"] == 4_096 and run.summary["env_steps"] == 5_120
    assert run.config.config.gamma == 0.98 and "eval_return_mean" in run.summary
    with pytest.raises(checkpoint.CheckpointError, match="config.lr: checkpoint has"):
        rljax.train(resume=copy, lr=1e-2)
    with pytest.raises(ValueError, match="train needs a preset or RunConfig, or resume"):
        rljax.train()


def test_a_run_directory_in_use_is_refused(dqn_run, capsys):
    run, result = dqn_run
    with rundir.lock(result.run_dir):
        assert cli.main(["train", "--resume", result.run_dir, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == (f"rljax: error: run directory {result.run_dir} is in use by process "
                       f"{os.getpid()} (its .lock is locked); wait for that run to end or "
                       "stop it\n")
        with pytest.raises(rundir.RunDirInUse):
            train_run(run, progress=False, resume=result.run_dir)


def test_a_run_directory_that_cannot_be_written_is_refused(copy, capsys):
    # (A read-only folder is writable by root, so the lock file is made unopenable.)
    lock = os.path.join(copy, rundir.LOCK_FILE)
    if os.path.exists(lock):
        os.remove(lock)
    os.mkdir(lock)
    assert cli.main(["train", "--resume", copy, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rljax: error: cannot write in run directory {copy} (.lock: ")
    assert err.count("\n") == 1
    with pytest.raises(ValueError, match="cannot write in run directory"):
        rljax.train(resume=copy)


def test_a_fresh_run_into_a_directory_with_a_checkpoint_is_refused(dqn_run):
    run, result = dqn_run
    with pytest.raises(ValueError, match="already holds a checkpoint .env step 4,096.; "
                                         "continue it with resume"):
        train_run(run, run_dir=result.run_dir, progress=False)


def test_metrics_logged_after_the_checkpoint_are_dropped(dqn_run, copy):
    path = os.path.join(copy, "metrics.jsonl")
    rows = [json.loads(line) for line in open(path)]
    with open(path, "w") as f:  # as if the first part had taken 10,000 s longer
        f.writelines(json.dumps(dict(r, wall_time_s=r["wall_time_s"] + 1e4)) + "\n"
                     for r in rows)
    with open(path, "a") as f:
        f.write('{"env_steps": 5120}\n{"env_steps": 6144}\n{"env_st')  # then it crashed
    train_run(dataclasses.replace(dqn_run[0], total_steps=5_120), progress=False, resume=copy)
    assert _steps(copy) == [1_024, 2_048, 3_072, 4_096, 5_120]
    # The resumed rows' clock goes on from the last row kept.
    wall = [json.loads(line)["wall_time_s"] for line in open(path)]
    assert wall == sorted(wall) and wall[-1] > wall[-2] > 1e4, wall
    assert json.load(open(os.path.join(copy, "summary.json")))["wall_time_s"] >= wall[-1]


KILLED_RUN = textwrap.dedent("""
    import dataclasses, sys
    from rljax.run.presets import from_preset
    from rljax.run.driver import train_run

    run = from_preset("cartpole-dqn", total_steps=500_000, logdir=sys.argv[1],
                      tensorboard=False, buffer_size=2_048, learning_starts=256)
    train_run(dataclasses.replace(run, chunk_steps=1_024, checkpoint_every=3_072),
              progress=False)
""")


def test_killed_between_saves_resumes_with_strictly_increasing_metrics(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(tmp_path)])
    try:
        deadline, run_dir = time.time() + 240, None
        while time.time() < deadline and run_dir is None:
            time.sleep(0.05)
            for path in tmp_path.glob("*/metrics.jsonl"):
                steps = [json.loads(line)["env_steps"] for line in
                         path.read_text().splitlines() if line.endswith("}")]
                # Rows logged since the last checkpoint (at a multiple of 3,072).
                if len(steps) >= 4 and steps[-1] % 3_072:
                    run_dir = path.parent
        assert run_dir is not None, "the run did not log"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    saved = checkpoint.latest_step(str(run_dir))
    assert saved % 3_072 == 0 and _steps(run_dir)[-1] > saved
    run = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    resumed = train_run(dataclasses.replace(run, total_steps=saved + 2_048), progress=False,
                        resume=str(run_dir))
    assert resumed.summary["resumed_from_step"] == saved
    steps = _steps(run_dir)
    assert steps == sorted(set(steps)) and steps[-1] == saved + 2_048, steps
    assert steps[:saved // 1_024] == list(range(1_024, saved + 1, 1_024))


def test_checkpoint_every_option_and_its_old_name(capsys):
    args = cli._build_parser().parse_args(["train", "cartpole-dqn", "--checkpoint-every", "3e3"])
    assert cli._run_config(args).checkpoint_every == 3_000
    old = dict(from_preset("cartpole-dqn").to_dict(), checkpoint_steps=5_000)
    del old["checkpoint_every"]
    assert RunConfig.from_dict(old).checkpoint_every == 5_000
    with pytest.raises(ValueError, match="has both 'checkpoint_steps' and 'checkpoint_every'"):
        RunConfig.from_dict(dict(old, checkpoint_every=5_000))
    with pytest.raises(ValueError) as exc:
        from_preset("cartpole-dqn", checkpoint_steps=5)
    assert str(exc.value) == ("run field 'checkpoint_steps' was renamed 'checkpoint_every'; "
                              "set checkpoint_every instead")
    assert cli.main(["train", "cartpole-dqn", "--set", "checkpoint_steps=5"]) == 2
    assert "was renamed 'checkpoint_every'" in capsys.readouterr().err


def test_keep_checkpoints_may_change_on_resume(copy):
    assert cli.main(["train", "--resume", copy, "--total-steps", "8192", "--keep-checkpoints",
                     "1", "--quiet"]) == 0
    assert os.listdir(os.path.join(copy, "checkpoint")) == ["8192"]
    assert checkpoint.read_manifest(copy)["run"]["keep_checkpoints"] == 1
    with pytest.raises(ValueError, match="keep_checkpoints must be"):
        from_preset("cartpole-dqn", keep_checkpoints=0)


def test_chunk_steps_option(capsys):
    args = cli._build_parser().parse_args(["train", "cartpole-dqn", "--chunk-steps", "4096"])
    assert cli._run_config(args).chunk_steps == 4_096
    assert from_preset("cartpole-dqn", chunk_steps=2_048).chunk_steps == 2_048
    assert cli.main(["train", "cartpole-dqn", "--chunk-steps", "0", "--quiet"]) == 2
    assert "chunk_steps" in capsys.readouterr().err
    assert cli.main(["train", "cartpole-dqn", "--set", "chunk_steps=5"]) == 2
    assert "use --chunk-steps" in capsys.readouterr().err


def test_interruption_prints_the_short_resume_command(monkeypatch, capsys):
    run_dir = "/tmp/a b/it's here"

    def interrupted(*args, **kwargs):
        raise driver.TrainingInterrupted(run_dir, 40_000)

    monkeypatch.setattr(driver, "train_run", interrupted)
    # no signal reached this process (as when another process of the run was stopped):
    # SIGTERM's status
    assert cli.main(["train", "cartpole-dqn", "--seed", "3", "--quiet"]) == 143
    err = capsys.readouterr().err
    assert err.endswith(f"rljax: resume with: rljax train --resume {shlex.quote(run_dir)}\n")
    assert shlex.split(err.splitlines()[-1].split(": ", 2)[2]) == [
        "rljax", "train", "--resume", run_dir]


def _files(path) -> dict:
    out = {}
    for root, _, names in os.walk(path):
        for name in names:
            if name != rundir.LOCK_FILE:
                full = os.path.join(root, name)
                out[full] = (os.path.getmtime(full), open(full, "rb").read())
    return out


def test_resume_of_a_finished_run_does_nothing_and_changes_no_file(copy, capsys):
    before = _files(copy)
    for extra in ([], ["--total-steps", "2048"]):
        assert cli.main(["train", "--resume", copy, "--quiet", *extra]) == 0
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("rljax: nothing to do: ") and captured.err.count(
            "\n") == 1, captured.err
        assert "has trained 4,096 env steps" in captured.err
    assert _files(copy) == before
    with pytest.raises(driver.NothingToDo, match="nothing was changed"):
        rljax.train(resume=copy)


def test_save_into_a_folder_with_a_newer_checkpoint_is_refused(copy):
    run = rljax.load(copy)
    folder = os.path.join(copy, checkpoint.CHECKPOINT_DIR)
    shutil.copytree(os.path.join(folder, "4096"), os.path.join(folder, "8192"))
    with pytest.raises(checkpoint.SaveError, match=r"newer checkpoint \(env step 8,192\)"):
        run.save()
    assert sorted(os.listdir(folder)) == ["2048", "4096", "8192"]


def test_a_fresh_run_into_a_directory_with_unreadable_checkpoints_is_refused(dqn_run, copy):
    run, _ = dqn_run
    shutil.rmtree(os.path.join(copy, checkpoint.CHECKPOINT_DIR, "4096", "manifest"))
    with pytest.raises(ValueError, match=r"already holds a checkpoint \(env step 4,096\)"):
        train_run(run, run_dir=copy, progress=False)


def _corrupt_newest(path) -> None:
    files = [os.path.join(root, name) for root, _, names in
             os.walk(os.path.join(path, checkpoint.CHECKPOINT_DIR, "4096", "state"))
             for name in names]
    biggest = max(files, key=os.path.getsize)
    data = bytearray(open(biggest, "rb").read())
    data[len(data) // 2] ^= 1
    open(biggest, "wb").write(bytes(data))


def test_a_corrupted_newest_checkpoint_names_the_intact_one_which_can_be_used(copy, capsys):
    _corrupt_newest(copy)
    hint = ("the checkpoint of env step 2,048 is intact: use it with --from-checkpoint 2048 "
            "(from_checkpoint=2048 in Python)")
    for args in (["eval", copy, "--episodes", "1"], ["train", "--resume", copy, "--quiet",
                                                     "--total-steps", "6144"]):
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("rljax: error: checkpoint ") and err.count("\n") == 1, err
        assert "do not match the checksums" in err and hint in err, err
    assert cli.main(["eval", copy, "--episodes", "1", "--from-checkpoint", "2048"]) == 0
    assert json.loads(capsys.readouterr().out)["env_steps"] == 2_048
    assert cli.main(["train", "--resume", copy, "--from-checkpoint", "2048", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["resumed_from_step"] == 2_048
    assert "moved the newer checkpoints to" in captured.err
    assert "(env step 4,096 as 4096)" in captured.err
    assert sorted(os.listdir(os.path.join(copy, "checkpoint.superseded"))) == [
        "4096", "metrics.after-2048.jsonl"]
    assert checkpoint.read_manifest(copy)["env_steps"] == 4_096  # written again, intact
    assert _steps(copy) == [1_024, 2_048, 3_072, 4_096]
    assert cli.main(["eval", copy, "--episodes", "1"]) == 0


@pytest.mark.slow
def test_a_resume_that_extends_the_budget_keeps_the_annealed_schedule(tmp_path, capsys):
    run = from_preset("cartpole-pqn", total_steps=4_096, logdir=str(tmp_path),
                      tensorboard=False, anneal_lr=True)  # 8 updates of 32 envs x 16 steps
    first = train_run(dataclasses.replace(run, chunk_steps=2_048), progress=False)
    args = ["train", "--resume", first.run_dir, "--total-steps", "8192", "--quiet"]
    with pytest.warns(UserWarning, match=r"the learning rate anneals to 0 by update 8 "
                      r"\(schedule_steps\) of the run's 16: the last 8 updates train with a "
                      "learning rate of 0"):
        assert cli.main(args) == 0
    assert checkpoint.read_manifest(first.run_dir)["run"]["schedule_steps"] == 4_096
    # resumed again, from the preset this time: the same schedule, no refusal
    assert cli.main(["train", "cartpole-pqn", "--set", "anneal_lr=true", "--resume",
                     first.run_dir, "--total-steps", "10240", "--chunk-steps", "2048",
                     "--no-tensorboard", "--logdir", str(tmp_path), "--quiet"]) == 0
    assert checkpoint.read_manifest(first.run_dir)["run"]["schedule_steps"] == 4_096

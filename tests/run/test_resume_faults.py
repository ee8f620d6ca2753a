"""Nothing of a run directory is lost to a resume: checkpoints set aside by one
``--from-checkpoint`` resume survive the next one, another run's checkpoint is refused
before any file changes, and a damaged newest checkpoint (its step folder a file or a
symbolic link loop, its manifest unreadable) is refused in one line that names the intact
earlier checkpoint."""

import dataclasses
import hashlib
import json
import os
import shutil

import pytest

from rljax.run import cli
from rljax.run.driver import train_run
from rljax.run.presets import from_preset

HINT = ("the checkpoint of env step 2,048 is intact: use it with --from-checkpoint 2048 "
        "(from_checkpoint=2048 in Python)")


@pytest.fixture(scope="module")
def dqn_dir(tmp_path_factory) -> str:
    """A DQN run with checkpoints at env steps 2,048 and 4,096 and a row every 1,024."""
    run = from_preset("cartpole-dqn", total_steps=4_096, tensorboard=False, buffer_size=2_048,
                      learning_starts=256, logdir=str(tmp_path_factory.mktemp("runs")))
    run = dataclasses.replace(run, chunk_steps=1_024, checkpoint_every=2_048)
    return train_run(run, progress=False).run_dir


@pytest.fixture
def copy(dqn_dir, tmp_path) -> str:
    path = str(tmp_path / "copy")
    shutil.copytree(dqn_dir, path, symlinks=True)
    return path


def _files(path: str) -> dict[str, str]:
    """Every file under ``path`` (links as links) with a digest of its contents."""
    out = {}
    for root, dirs, names in os.walk(path):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            out[rel] = (f"-> {os.readlink(full)}" if os.path.islink(full) else
                        hashlib.sha256(open(full, "rb").read()).hexdigest())
    return out


def _steps(path: str) -> list[int]:
    return [json.loads(line)["env_steps"] for line in open(os.path.join(path, "metrics.jsonl"))]


def test_a_second_resume_from_an_earlier_checkpoint_keeps_what_the_first_set_aside(
        dqn_dir, copy, capsys):
    original = {k: v for k, v in _files(dqn_dir).items() if k.startswith("checkpoint/4096/")}
    args = ["train", "--resume", copy, "--from-checkpoint", "2048", "--quiet"]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert (f"moved the newer checkpoints to {copy}/checkpoint.superseded/ (env step 4,096 "
            "as 4096)") in err, err
    assert "copied the 2 metrics row(s) after env step 2,048" in err, err
    first_resume = {k: v for k, v in _files(copy).items() if k.startswith("checkpoint/4096/")}
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "(env step 4,096 as 4096.2)" in err and "metrics.after-2048.jsonl.2" in err, err
    kept = _files(os.path.join(copy, "checkpoint.superseded"))
    # The original newest checkpoint and the first resume's, both whole.
    assert {k.replace("checkpoint/4096/", "4096/"): v for k, v in original.items()}.items() <= (
        kept.items())
    assert {k.replace("checkpoint/4096/", "4096.2/"): v for k, v in first_resume.items()
            }.items() <= kept.items()
    assert sorted(os.listdir(os.path.join(copy, "checkpoint.superseded"))) == [
        "4096", "4096.2", "metrics.after-2048.jsonl", "metrics.after-2048.jsonl.2"]
    assert _steps(copy) == [1_024, 2_048, 3_072, 4_096]


def test_resume_refuses_another_runs_checkpoint_before_changing_a_file(copy, tmp_path,
                                                                       capsys):
    ppo = from_preset("cartpole-ppo", total_steps=1_024, tensorboard=False, num_envs=8,
                      logdir=str(tmp_path / "ppo"))
    ppo_dir = train_run(dataclasses.replace(ppo, chunk_steps=1_024), progress=False).run_dir
    shutil.rmtree(os.path.join(copy, "checkpoint"))
    shutil.copytree(os.path.join(ppo_dir, "checkpoint"), os.path.join(copy, "checkpoint"))
    before = _files(copy)
    for args in (["train", "--resume", copy, "--quiet"],
                 ["train", "--resume", copy, "--quiet", "--total-steps", "8192"],
                 ["eval", copy, "--episodes", "1"]):
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("rljax: error: checkpoint was made for another run: algo: "
                              "checkpoint has 'ppo', this run has 'dqn'"), err
        assert err.count("\n") == 1, err
        assert {k: v for k, v in _files(copy).items() if k != ".lock"} == {
            k: v for k, v in before.items() if k != ".lock"}


def _as_file(step_dir: str) -> None:
    shutil.rmtree(step_dir)
    with open(step_dir, "w") as f:
        f.write("not a checkpoint\n")


def _as_link_loop(step_dir: str) -> None:
    shutil.rmtree(step_dir)
    os.symlink(os.path.basename(step_dir), step_dir)


@pytest.mark.parametrize("damage,what", [(_as_file, "a file"),
                                         (_as_link_loop, "a symbolic link loop")])
def test_a_newest_step_folder_replaced_by_a_file_or_a_link_loop_is_refused(
        copy, damage, what, capsys):
    damage(os.path.join(copy, "checkpoint", "4096"))
    before = _files(copy)
    for args in (["train", "--resume", copy, "--quiet", "--total-steps", "6144"],
                 ["eval", copy, "--episodes", "1"]):
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err
        assert err == (f"rljax: error: checkpoint {copy}/checkpoint/4096 is {what}, not a "
                       f"checkpoint folder; {HINT}\n"), err
        assert {k: v for k, v in _files(copy).items() if k != ".lock"} == {
            k: v for k, v in before.items() if k != ".lock"}
    assert cli.main(["train", "--resume", copy, "--from-checkpoint", "2048", "--quiet"]) == 0
    assert "(env step 4,096 as 4096) and copied the 2 metrics row(s)" in capsys.readouterr().err
    kept = os.path.join(copy, "checkpoint.superseded")
    assert _files(kept)["4096"] == before["checkpoint/4096"]
    assert [json.loads(line)["env_steps"] for line in open(
        os.path.join(kept, "metrics.after-2048.jsonl"))] == [3_072, 4_096]


def _zeroed(step_dir):
    for root, _, names in os.walk(os.path.join(step_dir, "manifest")):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "r+b") as f:
                f.write(bytes(os.path.getsize(path)))


def _random(step_dir):
    with open(os.path.join(step_dir, "manifest", "metadata"), "wb") as f:
        f.write(os.urandom(512))


def _emptied(step_dir):
    open(os.path.join(step_dir, "manifest", "metadata"), "w").close()


def _deleted(step_dir):
    shutil.rmtree(os.path.join(step_dir, "manifest"))


def _empty_folder(step_dir):
    shutil.rmtree(step_dir)
    os.mkdir(step_dir)


@pytest.mark.parametrize("damage", [_zeroed, _random, _emptied, _deleted, _empty_folder])
def test_an_unreadable_newest_manifest_names_the_intact_checkpoint(copy, damage, capsys):
    damage(os.path.join(copy, "checkpoint", "4096"))
    for args in (["train", "--resume", copy, "--quiet", "--total-steps", "6144"],
                 ["eval", copy, "--episodes", "1"]):
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(f"rljax: error: checkpoint manifest of {copy}/checkpoint/4096 "
                              "is unreadable: ") and err.endswith(f"; {HINT}\n"), err
        assert err.count("\n") == 1, err

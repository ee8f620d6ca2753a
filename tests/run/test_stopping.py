"""Ctrl-C at any moment of ``rljax train``, start-up and compiling included: exit status
130, one true message, no traceback or crash, and a run directory that is resumable or
gone."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rljax.run import stopping


def _interrupt(tmp_path, delay: float, twice: bool = False):
    env = dict(os.environ, RLJAX_COMPILE_CACHE="0")
    proc = subprocess.Popen([sys.executable, "-m", "rljax.run.cli", "train", "cartpole-dqn",
                             "--logdir", str(tmp_path), "--no-tensorboard",
                             "--chunk-steps", "2000", "--checkpoint-every", "2000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    if twice:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _left(tmp_path):
    """Each run directory left: True if it holds a checkpoint to resume."""
    return [bool(stopping.newest_step(str(tmp_path / d))) for d in os.listdir(tmp_path)]


@pytest.mark.slow
@pytest.mark.parametrize("delay,twice", [(0.6, False), (2.5, False), (5.0, False),
                                         (3.0, True)])
def test_sigint_at_any_moment_exits_130_cleanly(tmp_path, delay, twice):
    code, err = _interrupt(tmp_path, delay, twice)
    assert code == 130, err
    assert "Traceback" not in err and "Segmentation" not in err, err
    assert "metrics so far are in the run directory" not in err
    left = _left(tmp_path)
    assert all(left), (left, err)  # every run directory left can be resumed
    # (a signal once training runs saves a checkpoint: tests/run/test_resume.py)
    if left:
        assert "resume with: rljax train --resume" in err, err
    else:
        assert "nothing was saved" in err, err


def test_what_is_left_removes_an_empty_run_directory_it_created(tmp_path):
    made = tmp_path / "run"
    made.mkdir()
    (made / "config.json").write_text("{}")
    text, resumable = stopping.what_is_left(str(made), created=True)
    assert resumable is None and "was removed" in text and not made.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "metrics.jsonl").write_text('{"env_steps": 1}\n')
    text, resumable = stopping.what_is_left(str(kept), created=True)
    assert resumable is None and "cannot be resumed" in text and kept.exists()
    (kept / "checkpoint" / "2000").mkdir(parents=True)
    text, resumable = stopping.what_is_left(str(kept), created=True)
    assert resumable == str(kept) and "env step 2,000" in text

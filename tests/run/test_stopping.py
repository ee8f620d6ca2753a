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


_BUSY = """
import hashlib, sys, time
from rljax.run.stopping import StopSignals

with StopSignals(hard=True) as stop:
    stop.phase = "building envs and agent"
    print("ready", flush=True)
    # A long call that runs no Python, as an XLA compile or a C++ build does: Python's
    # signal handler waits for it to return (pbkdf2_hmac releases the GIL).
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 200_000_000)
    print("the call ended", flush=True)
"""


def test_a_second_sigint_stops_at_once_inside_a_long_call(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _BUSY], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        start = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "the call ended" not in out, (out, err)
    assert time.perf_counter() - start < 10, err
    assert err.count("stopped at once; nothing was saved") == 1, err
    assert "stopping once building envs and agent ends" in err, err


_TRAINING = """
import contextlib, hashlib, os, sys
from rljax.run.stopping import StopSignals

run_dir, saving = sys.argv[1], sys.argv[2] == "saving"
os.makedirs(os.path.join(run_dir, "checkpoint", "2000"))
with StopSignals(hard=True) as stop:
    stop.phase, stop.run_dir, stop.chunk_s = None, run_dir, 42.0  # training, as the driver sets
    print("ready", flush=True)
    try:
        # A chunk (or, with "saving", a checkpoint being written) that runs no Python.
        with stop.saving() if saving else contextlib.nullcontext():
            hashlib.pbkdf2_hmac("sha256", b"x", b"y", 20_000_000)
            print("the call ended", flush=True)
    except KeyboardInterrupt:
        print("interrupted after the call", flush=True)
"""


@pytest.mark.parametrize("saving", [False, True])
def test_a_second_signal_during_a_chunk_stops_at_once_but_never_inside_a_save(tmp_path,
                                                                            saving):
    """A chunk can take minutes: the first signal says so, the second stops at once and
    keeps the last complete checkpoint, unless a checkpoint is being written: that ends
    first."""
    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-c", _TRAINING, run_dir,
                             "saving" if saving else "chunk"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.8)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert ("stopping when the chunk in progress ends, after a checkpoint; chunks take 42 s "
            "(press Ctrl-C again to stop at once, keeping the checkpoint of env step 2,000)"
            in err), err
    if saving:
        assert proc.returncode == 0, err
        assert out.split("\n")[:2] == ["the call ended", "interrupted after the call"], out
    else:
        assert proc.returncode == 130 and "the call ended" not in out, (out, err)
        assert (f"stopped at once; the checkpoint of env step 2,000 and the metrics up to it "
                f"are in {run_dir}\nrljax: resume with: rljax train --resume {run_dir}\n"
                in err), err

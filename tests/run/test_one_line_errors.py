"""Inputs and faults that used to give a misleading message, a TypeError from inside the
run or a dozen lines: each now gets one line that says what is wrong."""

import dataclasses
import os
import subprocess
import sys

import pytest

import rljax
from rljax.envs.wrappers import check_obs_indices
from rljax.run import api, cli
from rljax.run.presets import from_preset


def test_ctrl_c_during_eval_does_not_claim_eval_had_not_begun(monkeypatch, capsys):
    def interrupted(*args, **kwargs):  # 3 s into a long evaluation
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "load", lambda run_dir, step=None, best=False: None)
    monkeypatch.setattr(api, "evaluate", interrupted)
    assert cli.main(["eval", "RUN_DIR", "--episodes", "200"]) == 130
    err = capsys.readouterr().err
    assert err == ("\nrljax: stopped; the evaluation did not finish (eval writes no file, so "
                   "nothing changed)\n"), err


def test_a_batch_larger_than_the_buffer_names_the_batch_size(capsys):
    assert cli.main(["train", "cartpole-dqn", "--set", "replay.batch_size=1e12"]) == 2
    err = capsys.readouterr().err
    assert err == ("rljax: error: batch_size must be at most buffer_size (50,000): learning "
                   "starts once a batch is in replay, got 1000000000000\n"), err


@pytest.mark.parametrize("indices", ["0,2", b"02", ("0", "x")])
def test_obs_indices_as_text_are_refused_in_one_line(indices):
    with pytest.raises(ValueError, match=r"obs_indices must be a non-empty sequence of "
                                         r"integers, such as \(0, 2\), got "):
        check_obs_indices(indices, (4,))


def test_run_directories_of_the_wrong_type_are_refused_at_the_call():
    with pytest.raises(ValueError, match=r"^run_dir must be a run directory's path \(a str or "
                                         r"os.PathLike\), got 5$"):
        rljax.load(5)
    with pytest.raises(ValueError, match=r"^resume must be a run directory's path \(a str or "
                                         r"os.PathLike\) or None, got 123$"):
        rljax.train(resume=123)
    with pytest.raises(ValueError, match=r"^from_checkpoint must be an integer >= 0 or None, "
                                         r"got '2048'$"):
        rljax.load("runs/x", from_checkpoint="2048")


def test_a_threshold_that_is_not_a_number_is_refused_before_compiling():
    run = from_preset("cartpole-dqn")
    with pytest.raises(ValueError, match=r"^threshold must be a finite number or None, "
                                         r"got 'high'$"):
        dataclasses.replace(run, threshold="high")


# Turns the compilation cache on in a temporary folder whose writes fail as on a full
# disk, and compiles three programs.
_FULL_CACHE = r"""
import errno, sys
import jax, jax.numpy as jnp
from jax._src import compilation_cache
from rljax.run import startup

def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

compilation_cache.put_executable_and_time = full
assert startup.enable_compile_cache() == sys.argv[1] + "/jax"
for k in range(3):
    jax.jit(lambda x: x * (k + 2))(jnp.ones(3)).block_until_ready()
print("done")
"""


def test_a_full_cache_disk_is_said_in_one_line(tmp_path):
    env = dict(os.environ, RLJAX_CACHE_DIR=str(tmp_path))
    env.pop("RLJAX_COMPILE_CACHE", None)
    out = subprocess.run([sys.executable, "-c", _FULL_CACHE, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [f"rljax: compiled programs cannot be kept in the compilation cache "
                     f"{tmp_path}/jax (OSError: [Errno 28] No space left on device); they "
                     f"are compiled again by the next run (--no-compile-cache turns the "
                     f"cache off)"], out.stderr

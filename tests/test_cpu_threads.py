"""XLA's CPU thread pool size (rljax.cpu_threads): the pool gets the asked-for number of
threads, every thread keeps all of the process's CPUs, training gives the same bits at
either size, and a request after JAX started warns instead of pretending."""

import json
import os
import subprocess
import sys
import warnings

import pytest

from rljax import cpu_threads

_LINUX = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")

# Trains two chunks of a small gymnax PPO run in a fresh process with the given
# --cpu-threads, then reports XLA's pool threads, every thread's CPUs and a digest of the
# parameters.
_CHILD = r"""
import hashlib, json, os, sys
import numpy as np
import jax
from rljax.run.cli import main
from rljax.run.api import load
threads, logdir = sys.argv[1], sys.argv[2]
assert not jax._src.xla_bridge.backends_are_initialized()
rc = main(["train", "gymnax-cartpole-ppo", "--total-steps", "1024", "--chunk-steps", "512",
           "--num-envs", "8", "--cpu-threads", threads, "--logdir", logdir, "--quiet",
           "--no-tensorboard", "--checkpoint-every", "1024"])
run_dir = os.path.join(logdir, os.listdir(logdir)[0])
params = load(run_dir).state.agent
digest = hashlib.sha256(b"".join(np.asarray(x).tobytes()
                                 for x in jax.tree.leaves(params))).hexdigest()
tasks = os.listdir("/proc/self/task")
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
cpus = [sorted(os.sched_getaffinity(int(t))) for t in tasks]
print(json.dumps({"rc": rc, "pool": names.count("tf_XLAEigen"), "digest": digest,
                  "cpus": cpus, "process": sorted(os.sched_getaffinity(0))}))
"""


def _child(threads: int, tmp_path) -> dict:
    logdir = tmp_path / f"threads{threads}"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(threads), str(logdir)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _LINUX or cpu_threads.available_cpus() < 2,
                    reason="needs Linux CPU affinity and two CPUs or more")
def test_pool_size_threads_free_and_same_training(tmp_path):
    one, default = _child(1, tmp_path), _child(0, tmp_path)
    assert one["rc"] == default["rc"] == 0
    # XLA names its pool's threads tf_XLAEigen: one thread, against one per CPU.
    assert one["pool"] == 1
    assert default["pool"] == cpu_threads.available_cpus()
    # No thread is left on the narrowed CPU set the pool was built under.
    assert all(c == one["process"] for c in one["cpus"]), one["cpus"]
    assert one["process"] == sorted(os.sched_getaffinity(0))
    # The pool size changes how kernels are run, not what they compute.
    assert one["digest"] == default["digest"]


def test_after_backends_started_warns_unless_same_size():
    import jax

    jax.devices()  # this process's backends are running with some pool
    built = cpu_threads._STATE["built"] or cpu_threads.available_cpus()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_threads.set_cpu_threads(built) is True
    other = 1 if built > 1 else 2
    if cpu_threads.pool_size(other) == built:
        pytest.skip("one CPU: every size is the same pool")
    with pytest.warns(RuntimeWarning, match=rf"cpu_threads={other} not applied.*"
                                            rf"set_cpu_threads\({other}\)"):
        assert cpu_threads.set_cpu_threads(other) is False


@pytest.mark.parametrize("bad", [-1, 1.5, "2", None, True])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError, match="cpu_threads"):
        cpu_threads.set_cpu_threads(bad)


def test_run_setting_bounds_and_cli_flag():
    from rljax.run.config import OPTIONS
    from rljax.run.presets import from_preset

    assert from_preset("gymnax-cartpole-ppo").cpu_threads == 1
    assert from_preset("minatar-breakout-ppo").cpu_threads == 0
    assert from_preset("gymnax-cartpole-ppo", cpu_threads=0).cpu_threads == 0
    with pytest.raises(ValueError, match="cpu_threads.*-2"):
        from_preset("gymnax-cartpole-ppo", cpu_threads=-2)
    assert [o.flag for o in OPTIONS if o.name == "cpu_threads"] == ["--cpu-threads"]
    # Many members make the matmuls large enough for every core: the preset's one thread
    # gives way to JAX's default, unless cpu_threads is given.
    assert from_preset("gymnax-cartpole-ppo", num_seeds=32).cpu_threads == 1
    assert from_preset("gymnax-cartpole-ppo", num_seeds=64).cpu_threads == 0
    assert from_preset("gymnax-cartpole-ppo", num_seeds=16,
                       sweep="lr=1e-3,2e-3,3e-3").cpu_threads == 0  # 48 members
    assert from_preset("gymnax-cartpole-ppo", num_seeds=256, cpu_threads=1).cpu_threads == 1
    assert from_preset("gymnax-cartpole-ppo", num_seeds=256, cpu_threads="1").cpu_threads == 1


def test_pool_size_counts():
    cpus = cpu_threads.available_cpus()
    assert cpu_threads.pool_size(0) == cpus
    assert cpu_threads.pool_size(cpus + 5) == cpus
    assert cpu_threads.pool_size(1) == 1

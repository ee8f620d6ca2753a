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
# --cpu-threads (none: the preset's, 1), then reports XLA's pool threads, every thread's
# CPUs and a digest of the parameters.
_CHILD = r"""
import hashlib, json, os, sys
import numpy as np
import jax
from rljax.run.cli import main
from rljax.run.api import load
logdir, threads = sys.argv[1], sys.argv[2:]
assert not jax._src.xla_bridge.backends_are_initialized()
rc = main(["train", "gymnax-cartpole-ppo", "--total-steps", "1024", "--chunk-steps", "512",
           "--num-envs", "8", *threads, "--logdir", logdir, "--quiet",
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


def _child(logdir, *threads: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(logdir), *threads],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr,
            "run_dir": os.path.join(logdir, os.listdir(logdir)[0])}


_TWO_CPUS = pytest.mark.skipif(not _LINUX or cpu_threads.available_cpus() < 2,
                               reason="needs Linux CPU affinity and two CPUs or more")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The child's run at the preset's one thread and at --cpu-threads 0 (every CPU)."""
    return {"one": _child(tmp_path_factory.mktemp("threads1")),
            "default": _child(tmp_path_factory.mktemp("threads0"), "--cpu-threads", "0")}


@_TWO_CPUS
def test_pool_size_threads_free_and_same_training(trained):
    one, default = trained["one"], trained["default"]
    assert one["rc"] == default["rc"] == 0
    # XLA names its pool's threads tf_XLAEigen: one thread, against one per CPU.
    assert one["pool"] == 1 and "not applied" not in one["stderr"], one["stderr"]
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
    assert from_preset("gymnax-cartpole-ppo", num_seeds=16).cpu_threads == 1
    assert from_preset("gymnax-cartpole-ppo", num_seeds=17).cpu_threads == 0
    assert from_preset("gymnax-cartpole-ppo", num_seeds=8,
                       sweep="lr=1e-3,2e-3,3e-3").cpu_threads == 0  # 24 members
    assert from_preset("gymnax-cartpole-ppo", num_seeds=256, cpu_threads=1).cpu_threads == 1
    assert from_preset("gymnax-cartpole-ppo", num_seeds=256, cpu_threads="1").cpu_threads == 1


def test_pool_size_counts():
    cpus = cpu_threads.available_cpus()
    assert cpu_threads.pool_size(0) == cpus
    assert cpu_threads.pool_size(cpus + 5) == cpus
    assert cpu_threads.pool_size(1) == 1


# Runs the command line in a fresh process, then reports its exit status and XLA's pool
# threads.
_CLI_CHILD = r"""
import json, os, sys
from rljax.run.cli import main
rc = main(sys.argv[1:])
names = []
for t in os.listdir("/proc/self/task"):
    try:
        names.append(open(f"/proc/self/task/{t}/comm").read().strip())
    except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
        pass
print(json.dumps({"rc": rc, "pool": names.count("tf_XLAEigen")}))
"""


def _cli_child(*args: str) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", _CLI_CHILD, *args], capture_output=True,
                         text=True, timeout=600)
    assert out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@_TWO_CPUS
def test_a_resumed_run_gets_the_pool_it_started_with_and_no_warning(trained):
    # The first run (the preset's one thread, no warning): test_pool_size_threads_free...
    run_dir = trained["one"]["run_dir"]
    resumed, err = _cli_child("train", "--resume", run_dir, "--total-steps", "2048",
                              "--quiet")
    assert resumed == {"rc": 0, "pool": 1} and "not applied" not in err, err
    # A refused resume says only why (before, the warning came first).
    refused, err = _cli_child("train", "--resume", run_dir, "--total-steps", "4096",
                              "--seed", "3", "--quiet")
    assert refused["rc"] == 2 and err.count("\n") == 1, err
    assert err.startswith("rljax: error: checkpoint was made for another run: seed"), err
    api = subprocess.run([sys.executable, "-c", (
        "import rljax, sys\n"
        "try:\n    rljax.train(resume=sys.argv[1], seed=3)\n"
        "except ValueError as e:\n    print(e)\n"), run_dir], capture_output=True, text=True,
        timeout=600)
    assert api.returncode == 0 and "not applied" not in api.stderr, api.stderr
    assert api.stdout.startswith("checkpoint was made for another run: seed"), api.stdout


@pytest.mark.slow
@_TWO_CPUS
def test_a_preset_given_a_jax_native_env_keeps_its_pool(tmp_path):
    # --env makes the run's env spec (starting JAX) while the settings are read.
    result, err = _cli_child("train", "cartpole-ppo", "--env", "gymnax:Acrobot-v1",
                             "--total-steps", "1024", "--logdir", str(tmp_path), "--quiet",
                             "--no-tensorboard")
    assert result == {"rc": 0, "pool": 1} and "not applied" not in err, err


def test_the_command_lines_warning_gives_the_options_advice():
    import jax

    jax.devices()
    built = cpu_threads._STATE["built"] or cpu_threads.available_cpus()
    other = 1 if built > 1 else 2
    if cpu_threads.pool_size(other) == built:
        pytest.skip("one CPU: every size is the same pool")
    with pytest.warns(RuntimeWarning) as caught:
        assert cpu_threads.set_cpu_threads(other, command_line=True) is False
    text = str(caught[0].message)
    assert f"so the run goes on with {built}; give --cpu-threads {other}" in text, text
    assert "set_cpu_threads(" not in text and "train from the command line" not in text

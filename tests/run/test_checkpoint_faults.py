"""A save killed (SIGKILL) at each of its file operations in turn, or failing on a full
disk (ENOSPC), leaves the last complete checkpoint resumable and no temporary files.

The faults come from ``fault_shim.c``, preloaded into a worker process: it counts the
calls that change files (in Python, orbax and tensorstore alike) and kills the process
at the N-th, or fails it and every later one that needs space. The worker builds a train
state once and forks one child per case, so each case costs one save, not one start-up;
one worker serves the kill and the full-disk cases of both tests below.
"""

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from rljax.run import checkpoint, checkpoint_store, cli
from rljax.run.build import build
from rljax.run.driver import train_run
from rljax.run.presets import from_preset

pytestmark = pytest.mark.skipif(sys.platform != "linux" or shutil.which("gcc") is None,
                                reason="fault injection needs Linux and gcc (LD_PRELOAD shim)")

WORKER = textwrap.dedent("""
    import ctypes, json, os, shutil, sys, warnings
    warnings.filterwarnings("ignore")  # os.fork() in a process that has run JAX
    import jax, jax.numpy as jnp
    from rljax.run import checkpoint, rundir
    from rljax.run.build import build
    from rljax.run.config import RunConfig

    spec = json.loads(sys.argv[1])
    lib = ctypes.CDLL(None)  # the preloaded shim's fault_arm, fault_disarm, fault_count
    run = RunConfig.from_dict(spec["run"])
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(spec["seed"]))
    state = state.replace(env_steps=jnp.int32(spec["step"]))
    manifest = rundir.manifest(run)
    # Everything a save needs before its first file operation is loaded and compiled
    # here, once, so that the children only save.
    from rljax.run import checkpoint_store
    jax.block_until_ready(checkpoint._named_leaves(checkpoint._payload(state)))

    def case(name, at, how, trigger=None):
        folder = os.path.join(spec["out"], name)
        shutil.copytree(spec["base"], folder)
        pid = os.fork()
        if pid == 0:
            lib.fault_arm(at, how, -1, trigger.encode() if trigger else None)
            try:
                checkpoint.save(folder, state, manifest)
                outcome = "saved"
            except checkpoint.SaveError as e:
                outcome = "error: " + str(e)
            lib.fault_disarm()
            with open(folder + ".json", "w") as f:
                json.dump({"outcome": outcome, "ops": lib.fault_count()}, f)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            return {"dir": folder, "at": at, "outcome": f"signal {os.WTERMSIG(status)}"}
        with open(folder + ".json") as f:
            return dict(json.load(f), dir=folder, at=at)

    results = [dict(case(f"enospc-{at}-{bool(trigger)}", at, 2, trigger), plan="enospc")
               for at, trigger in spec.get("cases", [])]
    for name, trigger, start, stride in spec.get("plans", []):
        # Kill at operation start, start + stride, ... until a save runs to its end.
        at = start
        while results[-1:] == [] or results[-1]["outcome"] == "signal 9" or (
                results[-1]["plan"] != name):
            results.append(dict(case(f"{name}-{at}", at, 1, trigger), plan=name))
            at += stride
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("shim") / "fault_shim.so"
    source = pathlib.Path(__file__).with_name("fault_shim.c")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(path), str(source), "-ldl"],
                   check=True)
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A short DQN run (prioritized replay) with complete checkpoints at 2,048 and 3,072."""
    logdir = tmp_path_factory.mktemp("base")
    run = dataclasses.replace(
        from_preset("cartpole-dqn", total_steps=3_072, logdir=str(logdir), tensorboard=False,
                    buffer_size=2_048, learning_starts=256),
        chunk_steps=1_024, checkpoint_every=1_024)
    result = train_run(run, progress=False)
    assert checkpoint_store.steps(os.path.join(result.run_dir, "checkpoint")) == [2_048, 3_072]
    return run, result


def _faults(shim, base, tmp_path, **spec) -> list[dict]:
    """Runs the worker: one save per case, faulted at the case's file operation."""
    run, result = base
    spec = dict(spec, run=run.to_dict(), base=result.run_dir, out=str(tmp_path), step=4_096,
                seed=7)
    env = dict(os.environ, LD_PRELOAD=shim)
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check_resumable(folder: str, template, expected: dict) -> int:
    """Restores ``folder``'s newest checkpoint into a copy of ``template``; checks it is
    one of the ``expected`` states, whole; returns its env step."""
    step = checkpoint.latest_step(folder)
    assert step in expected, (folder, step)
    copy = lambda tree: jax.tree.map(jax.numpy.copy, tree)  # restore frees the template's
    fresh = template.replace(agent=copy(template.agent), memory=copy(template.memory))
    restored = checkpoint.restore(folder, fresh)
    assert int(restored.env_steps) == step
    for a, b in zip(jax.tree.leaves(expected[step]), jax.tree.leaves(restored.agent),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    return step


# Counting from the marker orbax writes once the arrays are all written: the commit
# (markers and metadata, the renames into place, deleting the oldest checkpoint).
COMMIT = "state.orbax-checkpoint-tmp/commit_success.txt"


def _kill_cases(base, cases, plans):
    """Checks the cases of ``plans`` (killed saves); returns those not saved into since."""
    run, result = base
    cases = [c for c in cases if c["plan"] in {plan for plan, *_ in plans}]
    for plan, *_ in plans:
        mine = [c for c in cases if c["plan"] == plan]
        # The last case ran to its end: it made fewer operations than its ``at``.
        assert len(mine) > 3 and all(c["outcome"] == "signal 9" for c in mine[:-1]), mine
        assert mine[-1]["outcome"] == "saved" and mine[-1]["ops"] < mine[-1]["at"], mine[-1]
    _, _, trainer, _ = build(run)
    new_agent = jax.device_get(trainer.init(jax.random.key(7)).agent)
    expected = {3_072: jax.device_get(result.state.agent), 4_096: new_agent}
    template = trainer.init(jax.random.key(0))
    steps = {c["dir"]: _check_resumable(c["dir"], template, expected) for c in cases}
    # Killed before the commit: the old checkpoint; after it: the new one, never a mix
    # (where the commit falls varies a little from save to save).
    killed = {steps[c["dir"]] for c in cases if c["outcome"] == "signal 9"}
    assert killed == {3_072, 4_096}, steps
    assert {steps[c["dir"]] for c in cases if c["outcome"] == "saved"} == {4_096}
    # A killed save leaves a temporary folder at most; the next save removes it.
    for c in cases[::9]:
        checkpoint.save(c["dir"], result.state.replace(env_steps=jax.numpy.int32(5_120)),
                        {"run": run.to_dict()})
        left = os.listdir(os.path.join(c["dir"], "checkpoint"))
        assert not [n for n in left if "tmp" in n] and "5120" in left, left
    return run, [c for c in cases if c not in cases[::9]], steps


KILL_PLANS = [("head", None, 1, 32), ("commit", COMMIT, 1, 1)]
ENOSPC_CASES = [[1, None], [2, None], [9, None], [30, None], [1, COMMIT]]


@pytest.fixture(scope="module")
def fault_cases(shim, base, tmp_path_factory) -> list[dict]:
    """The two tests' cases, run by one worker: saves failed on a full disk (ENOSPC) at
    ENOSPC_CASES, and saves killed as KILL_PLANS say."""
    return _faults(shim, base, tmp_path_factory.mktemp("faults"), cases=ENOSPC_CASES,
                   plans=KILL_PLANS)


def test_save_killed_at_its_file_operations_leaves_a_resumable_checkpoint(base, fault_cases):
    """Kills a save at every 32nd file operation, and at every one from the moment its
    arrays are all written (the commit); the exhaustive test below (``pytest -m
    exhaustive``) kills at every operation."""
    run, cases, steps = _kill_cases(base, fault_cases, KILL_PLANS)
    # Such a directory resumes as a whole run, from its last complete checkpoint (a case
    # killed in the commit, not saved into since).
    case = cases[-len(cases) // 3]
    resumed = train_run(dataclasses.replace(run, total_steps=5_120), progress=False,
                        resume=case["dir"])
    assert resumed.summary["resumed_from_step"] == steps[case["dir"]]
    assert resumed.summary["env_steps"] >= 5_120


@pytest.mark.exhaustive
def test_save_killed_at_every_file_operation_leaves_a_resumable_checkpoint(
        shim, base, tmp_path):
    plans = [("all", None, 1, 1)]
    _kill_cases(base, _faults(shim, base, tmp_path, plans=plans), plans)


def test_full_disk_fails_with_one_line_and_keeps_the_last_checkpoint(base, fault_cases):
    run, result = base
    cases = [c for c in fault_cases if c["plan"] == "enospc"]
    assert len(cases) == len(ENOSPC_CASES)
    _, _, trainer, _ = build(run)
    expected, template = {3_072: jax.device_get(result.state.agent)}, trainer.init(
        jax.random.key(0))
    for c in cases:
        assert c["outcome"].startswith("error: could not save the checkpoint at env step "
                                       "4,096 in "), c
        assert c["outcome"].endswith(": No space left on device [errno ENOSPC]; the last "
                                     "complete checkpoint (env step 3,072) is kept"), c
        assert "\n" not in c["outcome"]
        left = os.listdir(os.path.join(c["dir"], "checkpoint"))
        assert sorted(left) == ["2048", "3072"], left  # no temporary folder holds space
        _check_resumable(c["dir"], template, expected)


CLI_ON_FULL_DISK = textwrap.dedent("""
    import ctypes, sys
    from rljax.run import checkpoint_store, cli
    lib, write, calls = ctypes.CDLL(None), checkpoint_store.write, []

    def full_disk_from_the_second_save(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            lib.fault_arm(1, 2, -1, None)
        try:
            return write(*args, **kwargs)
        finally:
            lib.fault_disarm()

    checkpoint_store.write = full_disk_from_the_second_save
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_cli_on_a_full_disk_prints_one_line(shim, tmp_path):
    # The run of the ``base`` fixture, so that its program comes from the session's cache.
    args = ["train", "cartpole-dqn", "--total-steps", "3072", "--checkpoint-every", "1024",
            "--chunk-steps", "1024", "--set", "buffer_size=2048", "--set", "learning_starts=256",
            "--logdir", str(tmp_path), "--quiet", "--no-tensorboard"]
    out = subprocess.run([sys.executable, "-c", CLI_ON_FULL_DISK, *args], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, LD_PRELOAD=shim))
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.startswith("rljax: error: could not save the checkpoint at env step "
                                 "2,048"), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "No space left on device" in out.stderr and "(env step 1,024) is kept" in out.stderr
    (run_dir,) = tmp_path.iterdir()
    assert os.listdir(run_dir / "checkpoint") == ["1024"]
    assert cli.main(["train", "--resume", str(run_dir), "--quiet"]) == 0
    rows = [json.loads(line)["env_steps"] for line in open(run_dir / "metrics.jsonl")]
    assert rows == [1_024, 2_048, 3_072]


def test_lock_is_released_when_its_process_is_killed(tmp_path):
    from rljax.run import rundir

    code = (f"from rljax.run import rundir; held = rundir.lock({str(tmp_path)!r}); "
            "print('locked', flush=True); import time; time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(rundir.RunDirInUse, match=f"is in use by process {proc.pid}"):
            rundir.lock(str(tmp_path))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    rundir.lock(str(tmp_path)).close()

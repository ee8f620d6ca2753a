"""Multi-process runs from the command line, as docs/scaling.md gives them: the 2-process x
2-device, 8-seed command (two members per device on envpool, the shape that used to hang);
start-up failures (a coordinator that never comes, a peer that never starts, a wrong
--num-processes) ending in one line with exit status 2; and a process killed mid-run: the
other stops within --peer-timeout with one line, and --resume continues from the last
checkpoint both wrote, then SIGTERM to one process stops both with a checkpoint (143).

Every process runs under a hard timeout, so a hang fails the test instead of stalling it.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

HARD = 480  # seconds any process here may live (start-up on a loaded 2-core machine)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], port: int, pid: int, count: int = 2, devices: int = 2):
    cmd = [sys.executable, "-m", "rljax.run.cli", "train", *args, "--distributed",
           "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(count),
           "--process-id", str(pid)]
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(procs, timeout=HARD) -> list[tuple[int, str, str]]:
    out = []
    try:
        for p in procs:
            so, se = p.communicate(timeout=timeout)
            out.append((p.returncode, so, se))
    finally:
        for p in procs:
            p.kill()
    return out


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.exhaustive  # minutes of two processes compiling; pytest -m exhaustive
def test_docs_two_process_eight_seed_command_finishes(tmp_path):
    """docs/scaling.md's command (cartpole-a2c --seeds 8 --devices 4 over two processes of
    two devices), with a small budget."""
    port = _port()
    args = ["cartpole-a2c", "--seeds", "8", "--devices", "4", "--total-steps", "1000",
            "--quiet", "--no-tensorboard", "--logdir", str(tmp_path)]
    (c0, out, e0), (c1, _, e1) = _finish([_start(args, port, i) for i in (0, 1)])
    assert c0 == 0 and c1 == 0, e0[-2000:] + e1[-2000:]
    summary = json.loads(out[out.index("{"):])
    assert len(summary["seeds"]) == 8 and summary["env_steps"] >= 1000
    assert all(s["episodes"] > 0 for s in summary["seeds"])


def test_start_up_failures_end_in_one_line(tmp_path):
    """No coordinator, no peer, a differing --num-processes: one line each, exit 2, within
    --init-timeout (plus the start of Python and JAX)."""
    args = ["cartpole-a2c", "--init-timeout", "5", "--logdir", str(tmp_path), "--quiet"]
    p_lonely, p_waiting, p_mixed = _port(), _port(), _port()
    start = time.monotonic()
    procs = [_start(args, p_lonely, 1),  # process 0, the coordinator, never comes
             _start(args, p_waiting, 0),  # process 1 never starts
             _start(args, p_mixed, 0, count=2), _start(args, p_mixed, 1, count=3)]
    results = _finish(procs, timeout=120)
    assert time.monotonic() - start < 120
    expected = [f"process 0 (the coordinator at 127.0.0.1:{p_lonely}) did not answer",
                "process 1 of 2 did not join the coordinator",
                "process 1 was started with --num-processes 3, process 0 with 2",
                "process 0 was started with --num-processes 2, process 1 with 3"]
    for (code, _, err), words in zip(results, expected, strict=True):
        assert code == 2, err[-2000:]
        line = _last_line(err)
        assert line.startswith("rljax: error:") and words in line, err[-2000:]
        assert "Traceback" not in err and "Check failure" not in err
    assert not os.listdir(tmp_path)


def _checkpoints(run_dir: str) -> list[int]:
    try:
        return sorted(int(d) for d in os.listdir(os.path.join(run_dir, "checkpoint"))
                      if d.isdigit())
    except OSError:
        return []


@pytest.mark.exhaustive  # minutes of two processes compiling; pytest -m exhaustive
def test_killed_process_stops_the_other_then_resume_and_sigterm(tmp_path):
    peer_timeout = 60  # x4 for a collective every process is in (compiling under load)
    common = ["--quiet", "--no-tensorboard", "--peer-timeout", str(peer_timeout)]
    args = ["cartpole-a2c", "--seeds", "8", "--devices", "4", "--num-envs", "4",
            "--total-steps", "200000", "--chunk-steps", "400", "--checkpoint-every", "400",
            "--logdir", str(tmp_path), *common]
    port = _port()
    procs = [_start(args, port, i) for i in (0, 1)]
    deadline = time.monotonic() + HARD
    run_dir = None
    while time.monotonic() < deadline:  # until two checkpoints are complete
        dirs = [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]
        run_dir = dirs[0] if dirs else None
        if run_dir and len(_checkpoints(run_dir)) >= 2:
            break
        assert all(p.poll() is None for p in procs), _finish(procs)
        time.sleep(0.5)
    assert run_dir and len(_checkpoints(run_dir)) >= 2, "no two checkpoints in time"
    procs[1].kill()  # SIGKILL
    killed = time.monotonic()
    (code, _, err), _ = _finish(procs)
    took = time.monotonic() - killed
    assert code == 1, err[-2000:]
    # --peer-timeout from the point where it next waits (after the chunk it is running,
    # slowed by a loaded machine)
    assert took < peer_timeout + 90, (took, err[-2000:])
    line = _last_line(err)
    assert "process 1 of 2 did not answer" in line and "--resume" in line, err[-2000:]
    saved = _checkpoints(run_dir)[-1]
    # Resume both from the last checkpoint both wrote, a little further.
    more = ["--resume", run_dir, "--total-steps", str(saved + 1600), *common]
    port = _port()
    procs = [_start(more, port, i) for i in (0, 1)]
    (c0, out, e0), (c1, _, e1) = _finish(procs)
    assert c0 == 0 and c1 == 0, e0[-2000:] + e1[-2000:]
    summary = json.loads(out[out.index("{"):])
    assert summary["resumed_from_step"] == saved and summary["env_steps"] == saved + 1600
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps = [r["env_steps"] for r in rows]
    assert steps == list(range(400, saved + 1601, 400)), steps  # nothing lost or repeated
    # SIGTERM to one process: both stop at the same chunk with a checkpoint, exit 143.
    more = ["--resume", run_dir, "--total-steps", str(saved + 200_000), *common]
    port = _port()
    procs = [_start(more, port, i) for i in (0, 1)]
    before = _checkpoints(run_dir)[-1]
    while _checkpoints(run_dir)[-1] == before and time.monotonic() < deadline + HARD:
        assert all(p.poll() is None for p in procs), _finish(procs)
        time.sleep(0.5)
    procs[1].send_signal(signal.SIGTERM)
    (c0, _, e0), (c1, _, e1) = _finish(procs, timeout=peer_timeout + 60)
    assert c0 == 143 and c1 == 143, e0[-2000:] + e1[-2000:]
    assert "resume with: rljax train --resume" in e0
    last = _checkpoints(run_dir)[-1]
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert rows[-1]["env_steps"] == last > before

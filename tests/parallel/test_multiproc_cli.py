"""Multi-process runs from the command line: start-up failures (a coordinator that never
comes, a peer that never starts, a wrong --num-processes) ending in one line with exit
status 2; and a process killed mid-run: the other stops within --peer-timeout with one
line, and --resume continues from the last checkpoint both wrote, then SIGTERM to one
process stops both with a checkpoint (143). (docs/scaling.md's 2 x 2-device, 8-seed
command is the first cell of benchmarks/scaling_matrix.py.)

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
    # (after the suite's own XLA flags: tests/conftest.py)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    env = dict(os.environ, XLA_FLAGS=flags.strip())
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(procs, timeout=HARD) -> list[tuple[int | None, str, str]]:
    """Each process's (exit status, stdout, stderr); a process still running ``timeout``
    seconds from now is killed and given the status None (a hang fails, with its log)."""
    end, out = time.monotonic() + timeout, []
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(0.1, end - time.monotonic()))
            out.append((p.returncode, so, se))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            out.append((None, so, se + "\n[killed: still running at the test's limit]"))
    return out


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


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


def _rows(run_dir: str) -> list[int]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["env_steps"] for line in f]


def _until(procs, ready, deadline: float, what: str) -> None:
    """Polls ``ready()`` while every process lives, up to ``deadline``."""
    while not ready():
        assert all(p.poll() is None for p in procs), _finish(procs)
        assert time.monotonic() < deadline, f"{what}: not in time"
        time.sleep(0.2)


def test_killed_process_stops_the_other_then_resume_and_sigterm(tmp_path):
    """Two processes of one device, two envpool members per device (a checkpoint every
    chunk): SIGKILL one process mid-run, the other ends within --peer-timeout of its next
    wait with one line naming the lost process and the checkpoint to resume; --resume in two
    new processes goes on from that checkpoint (rows after it dropped, none repeated), and
    SIGTERM to one of them stops both after the same chunk with a checkpoint, exit 143."""
    peer_timeout = 10
    common = ["--quiet", "--no-tensorboard", "--peer-timeout", str(peer_timeout)]
    args = ["cartpole-a2c", "--seeds", "4", "--devices", "2", "--num-envs", "4",
            "--total-steps", "400000", "--chunk-steps", "200", "--checkpoint-every", "200",
            "--logdir", str(tmp_path), *common]
    port = _port()
    procs = [_start(args, port, i, devices=1) for i in (0, 1)]
    deadline = time.monotonic() + HARD
    found = lambda: [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]  # noqa: E731
    _until(procs, lambda: found() and _checkpoints(found()[0]), deadline, "a checkpoint")
    run_dir = found()[0]
    procs[1].kill()  # SIGKILL
    killed = time.monotonic()
    (code, _, err), _ = _finish(procs, timeout=peer_timeout * 6)
    took = time.monotonic() - killed
    assert code == 1, err[-2000:]
    # within --peer-timeout of its next wait on the lost process (after its chunk)
    assert took < peer_timeout + 30, (took, err[-2000:])
    line = _last_line(err)
    saved = _checkpoints(run_dir)[-1]
    assert "process 1 of 2 did not answer" in line, err[-2000:]
    assert f"(env step {saved:,}) with --resume {run_dir}" in line, err[-2000:]
    assert "Traceback" not in err and "Check failure" not in err
    # Resume in two new processes (a budget they will not reach); SIGTERM to one once a
    # newer checkpoint is written.
    more = ["--resume", run_dir, "--total-steps", "400000", *common]
    port = _port()
    procs = [_start(more, port, i, devices=1) for i in (0, 1)]
    _until(procs, lambda: _checkpoints(run_dir)[-1] > saved, time.monotonic() + HARD,
           "a checkpoint after resuming")
    procs[1].send_signal(signal.SIGTERM)
    (c0, _, e0), (c1, _, e1) = _finish(procs, timeout=peer_timeout * 6)
    assert c0 == 143 and c1 == 143, e0[-2000:] + e1[-2000:]
    assert "resume with: rljax train --resume" in e0
    summary = json.loads(open(os.path.join(run_dir, "summary.json")).read())
    last = _checkpoints(run_dir)[-1]
    assert summary["resumed_from_step"] == saved and summary["env_steps"] == last > saved
    # Nothing lost or counted twice: one row per chunk from the first to the last checkpoint.
    assert _rows(run_dir) == list(range(200, last + 1, 200)), _rows(run_dir)
    assert len(summary["seeds"]) == 4

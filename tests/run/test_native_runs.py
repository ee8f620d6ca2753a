"""A JAX-native env run through the command line: Ctrl-C keeps its last checkpoint and the
resumed run continues its episodes; ``--distributed`` runs it."""

import json
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from rljax.run import checkpoint
from rljax.run.build import build
from rljax.run.config import RunConfig

PRESET = ["gymnax-cartpole-ppo", "--num-envs", "8", "--chunk-steps", "1024",
          "--no-tensorboard", "--quiet"]


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.endswith("}")]


@pytest.mark.slow
def test_sigint_during_a_gymnax_run_keeps_its_checkpoint_and_the_resume_continues(tmp_path):
    import rljax

    cmd = [sys.executable, "-m", "rljax.run.cli", "train", *PRESET, "--logdir", str(tmp_path),
           "--total-steps", "1000000", "--checkpoint-every", "1024"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, run_dir = time.time() + 240, None
        while time.time() < deadline and run_dir is None and proc.poll() is None:
            time.sleep(0.1)
            for path in tmp_path.glob("*/metrics.jsonl"):
                if len(path.read_text().splitlines()) >= 2:
                    run_dir = path.parent
        assert run_dir is not None, "the run did not log"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "resume with: rljax train --resume" in err and "Traceback" not in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    saved = checkpoint.read_manifest(str(run_dir))["env_steps"]
    assert summary["interrupted"] is True and saved == summary["env_steps"] >= 2048
    before = {r["env_steps"]: r for r in _rows(run_dir)}[saved]
    # The checkpoint holds the envs in the middle of their episodes, not a fresh reset.
    run = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    fresh = build(run)[2].init(jax.random.key(run.seed))
    restored = checkpoint.restore(str(run_dir), fresh)
    assert int(restored.env.stats.episodes) == before["episodes"] > 0
    assert int(restored.env.stats.running_length.max()) > 0
    assert not np.array_equal(restored.env.obs, fresh.env.obs)
    resumed = rljax.train(resume=str(run_dir), total_steps=saved + 2048)
    assert resumed.summary["resumed_from_step"] == saved
    rows = _rows(run_dir)
    assert [r["env_steps"] for r in rows] == list(range(1024, saved + 2049, 1024))
    assert rows[-2]["episodes"] > before["episodes"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_distributed_runs_a_gymnax_preset(tmp_path):
    cmd = [sys.executable, "-m", "rljax.run.cli", "train", *PRESET, "--logdir", str(tmp_path),
           "--total-steps", "2048", "--distributed", "--coordinator",
           f"127.0.0.1:{_free_port()}", "--num-processes", "1", "--process-id", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    assert [r["env_steps"] for r in _rows(run_dir)] == [1024, 2048]
    assert json.loads(proc.stdout)["episodes"] > 0

"""CLI: bad input gives one line and exit code 2; a short run writes its run directory."""

import errno
import json
import os
import subprocess
import sys

import pytest

from rljax.run import cli


def _rljax(*args):
    return subprocess.run([sys.executable, "-m", "rljax.run.cli", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("args,message", [
    (["train", "cartpole-ac"], "unknown preset 'cartpole-ac' (did you mean 'cartpole-a2c'"),
    (["train", "cartpole-a2c", "--set", "lr=3"], "unknown field 'lr' for A2CConfig"),
    (["train", "cartpole-a2c", "--set", "gamma=2"], "gamma must be a number in [0.0, 1.0]"),
    (["train", "cartpole-a2c", "--set", "gamma"], "--set expects field=value"),
    (["train", "cartpole-a2c", "--set", "actor_lr=fast"], "bad value 'fast' for actor_lr"),
    (["train", "cartpole-a2c", "--env", "CartPol-v1"], "did you mean 'CartPole-v1'"),
    (["train", "cartpole-a2c", "--env", "Reacher-v5"], "needs a discrete action space"),
    (["train", "cartpole-a2c", "--env", "Reacher-v5"], "agents for a continuous action space: "
     "ddpg, td3, sac, ppo"),
    (["train", "cartpole-a2c", "--num-envs", "0"], "num_envs must be an integer >= 1, got 0"),
    (["train", "cartpole-a2c", "--total-steps", "-5"],
     "total_steps must be an integer in [1, 2147483647]"),
    (["train", "cartpole-a2c", "--total-steps", str(2**31)], "(below 2**31: the training loop "
     "counts env steps in int32), got 2147483648"),
    (["train", "cartpole-a2c", "--seed", "x"], "bad value 'x' for seed"),
    (["train"], "give a preset (see `rljax presets`), or --resume RUN_DIR"),
    (["fly"], "invalid choice: 'fly'"),
    (["train", "cartpole-a2c", "--coordinator", "h:1"], "need --distributed"),
    (["train", "cartpole-a2c", "--distributed", "--num-processes", "2"],
     "give all of coordinator (host:port), num_processes and process_id, or none"),
    (["train", "cartpole-a2c", "--distributed", "--coordinator", "host", "--num-processes",
      "2", "--process-id", "0"], "coordinator must be host:port, got 'host'"),
    (["train", "cartpole-a2c", "--distributed", "--coordinator", "h:1", "--num-processes",
      "2", "--process-id", "2"], "process_id must be an integer in [0, 2), got 2"),
    (["train", "cartpole-a2c", "--distributed", "--num-processes", "two"],
     "argument --num-processes: invalid int value: 'two'"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(args))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.startswith("rljax: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_presets_lists_env_agent_and_hyperparameters(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "cartpole-a2c" in out and "CartPole-v1" in out and "actor_lr=0.0005" in out


def test_presets_wrap_to_the_terminal_and_skip_unused_epsilon(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) < 80
    def section(name):  # a preset's row and its indented lines, up to the next row
        lines = out.split(f"\n{name} ")[1].splitlines()
        return "\n".join([lines[0]] + [x for x in _indented(lines[1:])])

    assert "noisy=True" in section("cartpole-rainbow").replace("\n    ", " ")
    assert "epsilon=" not in section("cartpole-rainbow")
    assert "epsilon=" in section("cartpole-dqn")


def _indented(lines):
    for line in lines:
        if not line.startswith("    "):
            return
        yield line


def test_train_writes_run_directory(tmp_path):
    proc = _rljax("train", "cartpole-a2c", "--total-steps", "4000", "--logdir", str(tmp_path),
                  "--seed", "3", "--set", "gae_lambda=0.95", "--set", "shared_torso=true")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    run_dir = summary["run_dir"]
    assert os.path.basename(run_dir).startswith("cartpole-a2c-s3-")
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["config"]["gae_lambda"] == 0.95 and config["config"]["shared_torso"] is True
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    for key in ("env_steps", "wall_time_s", "sps", "episode_return_mean", "episode_length_mean",
                "episodes", "policy_loss", "value_loss", "entropy"):
        assert key in rows[-1]
    saved = json.load(open(os.path.join(run_dir, "summary.json")))
    for key in ("env_steps", "wall_time_s", "compile_time_s", "sps", "final_return_mean",
                "solved_at_step"):
        assert key in saved
    assert saved["env_steps"] >= 4000 and saved["solved_at_step"] is None
    assert "steps/s" in proc.stderr  # the progress display


@pytest.mark.slow
def test_distributed_with_an_unreachable_coordinator_gives_up_in_one_line(tmp_path):
    import signal
    import time

    args = [sys.executable, "-m", "rljax.run.cli", "train", "cartpole-a2c", "--distributed",
            "--coordinator", "127.0.0.1:9", "--num-processes", "2", "--process-id", "1",
            "--logdir", str(tmp_path)]
    proc = subprocess.run(args + ["--init-timeout", "3"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == ("rljax: error: process 0 (the coordinator at 127.0.0.1:9) did not "
                         "answer within 3 s; start every process with the same --coordinator "
                         "and --num-processes and a distinct --process-id (or raise "
                         "--init-timeout)"), proc.stderr
    assert "Traceback" not in proc.stderr and "Check failure" not in proc.stderr
    # Ctrl-C while it waits stops it at once
    waiting = subprocess.Popen(args + ["--init-timeout", "100"], stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True)
    for line in waiting.stderr:
        if "joining the coordinator" in line:
            break
    time.sleep(1.0)
    start = time.monotonic()
    waiting.send_signal(signal.SIGINT)
    err = waiting.stderr.read()
    assert waiting.wait(timeout=30) == 130, err
    assert time.monotonic() - start < 10
    assert "stopped while joining the cluster; nothing was started" in err
    assert not os.listdir(tmp_path)


class _Filling:
    """A metrics file whose disk fills after its second row."""

    def __init__(self, f):
        self.f, self.rows = f, 0

    def write(self, text):
        return self.f.write(text)

    def flush(self):
        self.rows += 1
        if self.rows > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.f.flush()

    def close(self):
        self.f.close()


def test_a_full_disk_under_the_metrics_names_the_file_and_what_is_kept(tmp_path, monkeypatch,
                                                                       capsys):
    from rljax.run import logging as sinks

    real = sinks.JsonlWriter.__init__

    def init(self, path):
        real(self, path)
        self._file = _Filling(self._file)

    monkeypatch.setattr(sinks.JsonlWriter, "__init__", init)
    code = cli.main(["train", "cartpole-a2c", "--total-steps", "8000", "--chunk-steps", "2000",
                     "--checkpoint-every", "2000", "--logdir", str(tmp_path), "--quiet",
                     "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 1, err[-2000:]
    (run_dir,) = tmp_path.iterdir()
    assert err == (f"rljax: error: could not write {run_dir}/metrics.jsonl: No space "
                   f"left on device [errno ENOSPC]; the checkpoint of env step 4,000 "
                   f"in {run_dir} is kept (resume with: rljax train --resume "
                   f"{run_dir})\n"), err

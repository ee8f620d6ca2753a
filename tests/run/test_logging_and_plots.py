"""TensorBoard event files read back with TensorBoard's own reader; plots from runs."""

import io
import json
import os

import numpy as np
import pytest

from rljax.run import cli
from rljax.run.logging import JsonlWriter, Progress, TensorBoardSink, to_jsonable
from rljax.run.plotting import aggregate, plot_runs


def test_tensorboard_scalars_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(str(tmp_path))
    rows = [{"env_steps": 1000 * (i + 1), "episode_return_mean": float(i) * 1.5,
             "policy_loss": -0.1 * i, "episode_length_mean": None} for i in range(5)]
    for row in rows:
        sink.write(row)
    sink.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert {"episode_return_mean", "policy_loss"} <= set(acc.Tags()["scalars"])
    events = acc.Scalars("episode_return_mean")
    assert [e.step for e in events] == [r["env_steps"] for r in rows]
    np.testing.assert_allclose([e.value for e in events], [r["episode_return_mean"] for r in rows])


def test_jsonl_nan_becomes_null(tmp_path):
    path = tmp_path / "m.jsonl"
    w = JsonlWriter(str(path))
    w.write({"a": float("nan"), "b": np.float32(2.5), "c": np.int64(3)})
    w.close()
    assert json.loads(path.read_text()) == {"a": None, "b": 2.5, "c": 3}
    assert to_jsonable(np.array([1.0, np.inf])) == [1.0, None]


def _fake_run(root, name, seed, offset):
    run_dir = root / f"{name}-s{seed}"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"preset": name, "threshold": 475.0}))
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(1, 11):
            f.write(json.dumps({"env_steps": i * 1000, "return_mean_100": i * 10.0 + offset})
                    + "\n")
    return str(run_dir)


def test_aggregate_mean_and_band():
    steps = np.array([0.0, 10.0])
    grid, mean, std = aggregate([(steps, np.array([0.0, 10.0])), (steps, np.array([2.0, 12.0]))],
                                points=3)
    np.testing.assert_allclose(grid, [0, 5, 10])
    np.testing.assert_allclose(mean, [1, 6, 11])
    np.testing.assert_allclose(std, [1, 1, 1])


def test_plot_cli_draws_png(tmp_path, capsys):
    runs = [_fake_run(tmp_path, "cartpole-a2c", s, s) for s in range(3)]
    runs.append(_fake_run(tmp_path, "other", 0, 5))
    out = tmp_path / "plot.png"
    assert cli.main(["plot", *runs, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out) > 10_000
    assert plot_runs(runs[:1], str(tmp_path / "one.png")).endswith("one.png")


@pytest.mark.parametrize("args,message", [
    (["plot", "/no/such/run"], "run directory '/no/such/run' does not exist"),
    (["plot", "."], "is not an rljax run directory"),
])
def test_plot_bad_input(args, message, capsys):
    assert cli.main(args) == 2
    assert message in capsys.readouterr().err


def _run_with_config(root, name, seed, config, rows):
    run_dir = root / name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(dict(config, seed=seed)))
    with open(run_dir / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(run_dir)


_ROWS = [{"env_steps": i * 1000, "return_mean_100": 10.0 * i} for i in range(1, 6)]


def test_plot_writes_into_the_run_directory_not_the_cwd(tmp_path, monkeypatch, capsys):
    run = _fake_run(tmp_path, "cartpole-a2c", 0, 0)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert cli.main(["plot", run]) == 0
    assert os.path.isfile(os.path.join(run, "curve.png"))
    assert not os.listdir(cwd)
    assert capsys.readouterr().out.strip() == os.path.join(run, "curve.png")


def test_plot_averages_only_runs_that_differ_in_the_seed(tmp_path, capsys):
    base = {"preset": "cartpole-a2c", "algo": "a2c", "config": {"actor_lr": 5e-4}}
    other = dict(base, config={"actor_lr": 1e-3})
    runs = [_run_with_config(tmp_path, "a0", 0, base, _ROWS),
            _run_with_config(tmp_path, "a1", 1, dict(base, logdir="x"), _ROWS),
            _run_with_config(tmp_path, "b0", 0, other, _ROWS)]
    assert cli.main(["plot", *runs, "--out", str(tmp_path / "p.png")]) == 0
    err = capsys.readouterr().err
    assert "averaged 2 runs as 'cartpole-a2c'" in err and runs[2] not in err.split(
        "averaged")[1].split("\n")[0]
    assert "not averaged with" in err and "config.actor_lr 0.0005 vs 0.001" in err, err
    from rljax.run.plotting import group_runs

    groups, _ = group_runs(runs)
    assert [dirs for _, dirs in groups] == [runs[:2], runs[2:]]
    assert groups[0][0] != groups[1][0]


def test_plot_refuses_rows_without_env_steps(tmp_path, capsys):
    rows = _ROWS + [{"return_mean_100": 70.0}, {"env_steps": None, "return_mean_100": 1.0}]
    run = _run_with_config(tmp_path, "r", 0, {"preset": "cartpole-a2c"}, rows)
    assert cli.main(["plot", run]) == 2
    assert "env_steps is 'missing', not a number" in capsys.readouterr().err


def test_plot_of_a_metric_no_row_has_is_refused(tmp_path, capsys):
    run = _run_with_config(tmp_path, "r", 0, {"preset": "cartpole-a2c"}, _ROWS)
    assert cli.main(["plot", run, "--key", "no_such_metric"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rljax: error: ") and err.count("\n") == 1
    assert "'no_such_metric'" in err and "return_mean_100" in err
    assert not os.path.exists(os.path.join(run, "curve-no_such_metric.png"))


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_writes_a_line_per_row_to_a_log_and_redraws_on_a_terminal():
    rows = [(1_024 * i, 5_000.0, 20.0 * i, 3.0 * (4 - i)) for i in range(1, 5)]
    log = _Stream(tty=False)
    progress = Progress(4_096, stream=log, label="[cartpole-dqn] ")
    for row in rows:  # a few rows a second, as a fast run logs them
        progress.update(*row)
    progress.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in log.getvalue(), lines
    assert lines[0].startswith("[cartpole-dqn]       1,024/4,096 steps ( 25.0%)")
    assert lines[-1].startswith("[cartpole-dqn]       4,096/4,096 steps (100.0%)")
    assert "return(100)    80.00" in lines[-1]
    terminal = _Stream(tty=True)
    progress = Progress(4_096, stream=terminal)
    for row in rows:
        progress.update(*row)
    progress.close()
    assert terminal.getvalue().count("\r") == 4 and terminal.getvalue().count("\n") == 1

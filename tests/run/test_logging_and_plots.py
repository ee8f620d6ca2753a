"""TensorBoard event files read back with TensorBoard's own reader; plots from runs."""

import json
import os

import numpy as np
import pytest

from rljax.run import cli
from rljax.run.logging import JsonlWriter, TensorBoardSink, to_jsonable
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

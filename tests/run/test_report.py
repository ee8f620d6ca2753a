"""``rljax report`` on run directories laid out as rljax writes them (configs from real
RunConfigs, member folders named by rljax.run.rundir), with made-up metrics."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from rljax import stats
from rljax.run import cli, rundir
from rljax.run.presets import from_preset
from rljax.run.report import build, report

PRESET = "gymnax-cartpole-ppo"
FINALS = [500.0, 480.0, 120.0, 500.0, 495.0, 30.0, 499.0, 350.0]


def _rows(final: float, evaluation: float | None = None, steps=(50_000, 100_000)) -> list:
    rows = [{"env_steps": s, "return_mean_100": final * (i + 1) / len(steps)}
            for i, s in enumerate(steps)]
    if evaluation is not None:
        rows[-1]["eval_return_mean"] = evaluation
    return rows


def _write(folder: str, config: dict, rows: list, summary: dict | None = None) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    if summary is not None:
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(summary, f)


def many_seed_run(path: str, finals=FINALS, preset=PRESET, evals=True, **changes) -> str:
    """A ``--seeds N`` run directory: the aggregate on top, each seed in its folder."""
    run = from_preset(preset, num_seeds=len(finals), **changes)
    _write(path, run.to_dict(), _rows(float(np.mean(finals))), {"wall_time_s": 60.0})
    for k in range(run.num_members):  # a sweep's values repeat the scores
        final = finals[k % len(finals)]
        member = rundir.member_dir(path, run, k)
        _write(member, rundir._member_config(run, k),
               _rows(final, final - 1 if evals else None))
    return path


def single_seed_runs(root: str, finals=FINALS, preset=PRESET) -> list[str]:
    paths = []
    for k, final in enumerate(finals):
        path = os.path.join(root, f"{preset}-s{k}")
        _write(path, from_preset(preset, seed=k).to_dict(), _rows(final, final - 1),
               {"wall_time_s": 10.0})
        paths.append(path)
    return paths


def _table(result: dict) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("runs", "wall_time_s")}
            for row in result["tasks"]]


def test_many_seed_run_and_single_seed_runs_give_the_same_table(tmp_path):
    together, _, _ = build([many_seed_run(str(tmp_path / "seeds8"))])
    apart, _, _ = build(single_seed_runs(str(tmp_path / "apart")))
    assert _table(together) == _table(apart)
    row = together["tasks"][0]
    scores = np.array(FINALS)[:, None]
    assert row["seeds"] == 8 and row["label"] == PRESET
    assert row["iqm"][0] == pytest.approx(float(stats.iqm(scores)), abs=1e-9)
    assert row["median"][0] == pytest.approx(float(np.median(FINALS)), abs=1e-9)
    assert row["iqm"][1] < row["iqm"][0] < row["iqm"][2]
    assert row["eval"]["mean"][0] == pytest.approx(np.mean(FINALS) - 1)
    assert together["tasks"][0]["wall_time_s"] == 60.0  # one program, counted once
    assert apart["tasks"][0]["wall_time_s"] == 80.0  # eight programs


def test_settings_that_differ_are_never_pooled(tmp_path):
    swept = many_seed_run(str(tmp_path / "sweep"), FINALS[:4], sweep="lr=1e-3,3e-4")
    assert {"lr=0.001_seed_3", "lr=0.0003_seed_0"} <= set(os.listdir(swept))
    result, configs, _ = build([swept])
    assert [row["seeds"] for row in result["tasks"]] == [4, 4]
    assert len({row["label"] for row in result["tasks"]}) == 2
    assert len(configs) == 2


def test_normalised_aggregates_and_comparison(tmp_path):
    a_cart = many_seed_run(str(tmp_path / "a1"), FINALS)
    a_acro = many_seed_run(str(tmp_path / "a2"), [-100.0, -90.0, -300.0, -80.0] * 2,
                           env="gymnax:Acrobot-v1")
    b_cart = many_seed_run(str(tmp_path / "b1"), [f - 200 for f in FINALS],
                           total_steps=400_000)
    b_acro = many_seed_run(str(tmp_path / "b2"), [-400.0] * 8, total_steps=400_000,
                           env="gymnax:Acrobot-v1")
    scores = {"gymnax:CartPole-v1": {"random": 20.0, "reference": 500.0},
              "gymnax:Acrobot-v1": {"random": -500.0, "reference": -100.0}}
    result = report([a_cart, a_acro, b_cart, b_acro], normalize=scores,
                    compare=(a_cart, b_acro), reps=500)
    labels = [row["label"] for row in result["normalized"]]
    assert labels == [PRESET + " (total_steps=500000)", PRESET + " (total_steps=400000)"]
    a = result["normalized"][0]
    assert a["tasks"] == ["gymnax:CartPole-v1", "gymnax:Acrobot-v1"] and a["seeds"] == 8
    norm = np.stack([(np.array(FINALS) - 20) / 480,
                     (np.array([-100.0, -90.0, -300.0, -80.0] * 2) + 500) / 400], 1)
    assert a["iqm"][0] == pytest.approx(float(stats.iqm(norm)), abs=1e-9)
    assert a["optimality_gap"][0] == pytest.approx(
        float(np.mean(1 - np.minimum(norm, 1))), abs=1e-9)
    poi = result["compare"]["probability_of_improvement"]
    assert poi[0] > 0.9 and poi[1] <= poi[0] <= poi[2]
    assert "Normalised scores" in result["markdown"]


def test_writes_markdown_json_and_plots(tmp_path, capsys):
    run = many_seed_run(str(tmp_path / "run"))
    out = str(tmp_path / "report.md")
    assert cli.main(["report", run, "--out", out, "--json", str(tmp_path / "r.json"),
                     "--reps", "200"]) == 0
    printed = capsys.readouterr().out
    assert "| gymnax-cartpole-ppo | gymnax:CartPole-v1 | 8 |" in printed
    assert open(out).read() == printed
    for name in ("report-curves.png", "report-profiles.png", "r.json"):
        assert os.path.getsize(tmp_path / name) > 0


def _bad(tmp_path, *argv):
    out = tmp_path / "out" / "report.md"
    out.parent.mkdir(exist_ok=True)
    code = cli.main(["report", *argv, "--out", str(out), "--json", str(out) + ".json"])
    assert code == cli.EXIT_USAGE
    assert list(out.parent.iterdir()) == []  # nothing written
    return code


@pytest.mark.parametrize("case,message", [
    ("empty", "holds no rljax runs"),
    ("no_episodes", "no episode finished"),
    ("one_seed", "has one seed"),
    ("mixed", "give --normalize"),
    ("metric", "no metrics row"),
    ("missing", "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case, message):
    paths, extra = [str(tmp_path / "runs")], []
    os.makedirs(paths[0])
    if case == "no_episodes":
        run = many_seed_run(paths[0] + "/r", FINALS[:2])
        _write(os.path.join(run, "seed_1"), json.load(open(run + "/seed_1/config.json")),
               [{"env_steps": 100, "episodes": 0}])
    elif case == "one_seed":
        single_seed_runs(paths[0], FINALS[:1])
    elif case == "mixed":
        many_seed_run(paths[0] + "/a", FINALS[:2])
        many_seed_run(paths[0] + "/b", FINALS[:2], env="gymnax:Acrobot-v1")
    elif case == "metric":
        many_seed_run(paths[0] + "/a", FINALS[:2])
        extra = ["--metric", "no_such_metric"]
    elif case == "missing":
        paths = [str(tmp_path / "nowhere")]
    _bad(tmp_path, *paths, *extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rljax: error:") and message in err[0]


def test_unknown_task_for_normalize_and_bad_compare(tmp_path, capsys):
    run = many_seed_run(str(tmp_path / "r"), FINALS[:3],
                        preset="gymnax-pendulum-sac")
    _bad(tmp_path, run, "--normalize")
    assert "no random and reference scores for gymnax:Pendulum-v1" in capsys.readouterr().err
    _bad(tmp_path, run, "--compare", "x", "y")
    assert "names no configuration" in capsys.readouterr().err


def test_shipped_random_scores_are_the_measured_ones():
    from rljax.run.reference_scores import _MEASURED, SCORES

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "benchmarks", "results", "random_scores.json")) as f:
        measured = json.load(f)
    checked = 0
    for task, scores in SCORES.items():
        if scores.random_source.startswith(_MEASURED):
            record = measured[task if task in measured else f"gymnax:{task}"]
            assert scores.random == pytest.approx(record["return_mean"], abs=0.005), task
            checked += 1
    assert checked >= 8


def test_results_table_rows_come_from_the_records(tmp_path, monkeypatch):
    from benchmarks import results_table

    many_seed_run(str(tmp_path / "table" / "x"))
    monkeypatch.setattr(results_table, "RESULTS", str(tmp_path))
    row = results_table.Row("CartPole PPO", "gymnax:CartPole-v1", "table/x", "rljax train x")
    cells = results_table.row_cells(row)
    want = build([str(tmp_path / "table" / "x")])[0]["tasks"][0]["iqm"]
    assert cells[2] == "8 x 100,000"
    assert cells[3] == f"**{want[0]:.1f}** [{want[1]:.1f}, {want[2]:.1f}]"
    assert cells[5] == "22.09" and cells[-2] == "60 s"
    missing = results_table.row_cells(row._replace(records="table/none"))
    assert missing[3] == "not run here" and missing[-1] == "`rljax train x`"
    why = results_table.row_cells(row._replace(records="table/none", why="too slow"))
    assert why[3] == "not run here: too slow"


def test_random_baseline_on_a_continuous_envpool_task_and_its_record(tmp_path, monkeypatch):
    from benchmarks import random_baseline

    got = random_baseline.random_episodes("Reacher-v5", num_envs=2, steps=128, chunk=64)
    assert got["episodes"] == 2 and got["length_mean"] == 50.0
    assert -100.0 < got["return_mean"] < 0.0  # distance and control costs only
    scores = tmp_path / "random_scores.json"
    scores.write_text(json.dumps({"gymnax:CartPole-v1": {"return_mean": 22.09}}))
    monkeypatch.setattr(random_baseline, "SCORES", str(scores))
    random_baseline.save(got, "python -m benchmarks.random_baseline Reacher-v5 --save")
    saved = json.loads(scores.read_text())
    assert saved["gymnax:CartPole-v1"] == {"return_mean": 22.09}
    assert saved["Reacher-v5"]["return_mean"] == got["return_mean"]
    assert saved["Reacher-v5"]["command"] == "python -m benchmarks.random_baseline Reacher-v5"

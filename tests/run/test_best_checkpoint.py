"""The best policy kept: checkpoint.best/ survives pruning, eval --best and load(best=True)
read it, the summary names it, and a resume continues from the last checkpoint."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

import rljax
from rljax.loops import evaluation
from rljax.run import best, checkpoint, cli

pytestmark = pytest.mark.slow  # two short trainings (a run and its resume), tens of seconds

# The scores the scripted evaluations report, in order: the best is the second (env step
# 4,000 of 10,000), so with one regular checkpoint kept it is long pruned from checkpoint/.
SCORES = [10.0, 50.0, 20.0, 30.0, 40.0, 45.0, 60.0]
RUN = dict(total_steps=10_000, chunk_steps=2_000, checkpoint_every=2_000, keep_checkpoints=1,
           eval_every=2_000, eval_episodes=2, tensorboard=False, seed=0)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """A cartpole-a2c run and its resume whose evaluations report SCORES in turn; returns
    the run, the resumed run and the parameters each evaluation saw."""
    real = evaluation.make_evaluator
    seen = []

    def make_evaluator(*args, **kwargs):
        evaluate = real(*args, **kwargs)

        def scripted_evaluate(params):
            seen.append(jax.tree.map(np.array, params))
            return dict(evaluate(params), return_mean=SCORES[len(seen) - 1])
        scripted_evaluate.compile_ahead = evaluate.compile_ahead
        return scripted_evaluate

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluation, "make_evaluator", make_evaluator)
        run = rljax.train("cartpole-a2c", logdir=str(tmp_path_factory.mktemp("best")), **RUN)
        folders = (checkpoint._store().steps(os.path.join(run.run_dir, "checkpoint")),
                   checkpoint._store().steps(os.path.join(run.run_dir, best.BEST_DIR)))
        copy = str(tmp_path_factory.mktemp("resumed") / "run")
        shutil.copytree(run.run_dir, copy, ignore=shutil.ignore_patterns(".lock"))
        resumed = rljax.train(resume=copy, total_steps=14_000)
    return run, folders, resumed, seen


def test_best_checkpoint_survives_pruning_and_summary_names_it(scripted):
    run, (regular, kept), _, _ = scripted
    assert [r["eval_return_mean"] for r in run.metrics] == SCORES[:5]
    assert regular == [10_000]  # keep_checkpoints=1 pruned 2,000 .. 8,000
    assert kept == [4_000]
    assert run.summary["best"] == {"env_steps": 4_000, "eval_return_mean": 50.0}
    with open(os.path.join(run.run_dir, "summary.json")) as f:
        assert json.load(f)["best"]["env_steps"] == 4_000


def test_load_best_restores_the_evaluated_parameters(scripted):
    run, _, _, seen = scripted
    loaded = rljax.load(run.run_dir, best=True)
    assert int(loaded.state.env_steps) == 4_000
    for a, b in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(seen[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert int(rljax.load(run.run_dir).state.env_steps) == 10_000


def test_eval_best_evaluates_the_best_checkpoint(scripted, capsys):
    run, _, _, _ = scripted
    assert cli.main(["eval", run.run_dir, "--best", "--episodes", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["env_steps"] == 4_000
    assert out["return_mean"] == rljax.evaluate(rljax.load(run.run_dir, best=True),
                                                episodes=3)["return_mean"]
    assert cli.main(["eval", run.run_dir, "--best", "--from-checkpoint", "4000"]) == 2
    assert "give one" in capsys.readouterr().err


def test_resume_continues_from_the_last_checkpoint_and_keeps_the_bar(scripted):
    _, _, resumed, _ = scripted
    # The resumed rows follow the last checkpoint (10,000), not the best (4,000).
    assert [r["env_steps"] for r in resumed.metrics] == [12_000, 14_000]
    # 45 did not beat the kept 50; 60 did and replaced it.
    assert resumed.summary["best"] == {"env_steps": 14_000, "eval_return_mean": 60.0}
    assert checkpoint._store().steps(os.path.join(resumed.run_dir, best.BEST_DIR)) == [14_000]


def test_no_best_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(checkpoint.CheckpointError, match="keeps no best checkpoint"):
        best.restore_args(str(tmp_path), True)
    assert best.restore_args(str(tmp_path), False) == {}


def test_best_of_several_members_is_the_best_mean():
    evals = [{"return_mean": 500.0}, {"return_mean": 100.0}]
    assert best.record(8, evals) == {"env_steps": 8, "eval_return_mean": 300.0,
                                     "members_eval_return_mean": [500.0, 100.0]}
    assert best.better(best.record(9, [{"return_mean": 301.0}] * 2), best.record(8, evals))
    assert not best.better(best.record(9, [{"return_mean": 500.0}, {"return_mean": None}]),
                           None)

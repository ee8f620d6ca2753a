"""Loop and replay fields by their flat names (``batch_size``) and their canonical dotted
names (``replay.batch_size``) on the command line, in the API and in sweeps; run records
written before the records existed (flat config.json) still load, and those written
since read back as written."""

import dataclasses
import glob
import json
import os

import pytest

from rljax import records
from rljax.parallel.sweep import SweepError
from rljax.records import Memory
from rljax.run import cli, preflight, rundir
from rljax.run.build import build
from rljax.run.config import RunConfig, upgrade_fields
from rljax.run.presets import from_preset
from rljax.run.registry import get_algorithm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORED = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "**", "config.json"),
                          recursive=True))


def _cli_run(*args) -> RunConfig:
    parsed = cli._build_parser().parse_args(["train", *args])
    return cli._run_config(parsed)


@pytest.mark.parametrize("flat,dotted", [
    (["--set", "batch_size=128"], ["--set", "replay.batch_size=128"]),
    (["--set", "alpha=0.5", "--set", "n_step=2"],
     ["--set", "replay.alpha=0.5", "--set", "replay.n_step=2"]),
    (["--num-envs", "4"], ["--set", "loop.num_envs=4"]),
    (["--set", "grad_steps=2"], ["--set", "loop.grad_steps=2"]),
])
def test_flat_and_dotted_names_on_the_command_line(flat, dotted):
    a, b = _cli_run("cartpole-dqn", *flat), _cli_run("cartpole-dqn", *dotted)
    assert a == b and a != from_preset("cartpole-dqn")


def test_the_command_line_changes_one_record_field_and_keeps_the_rest():
    run = _cli_run("cartpole-dqn", "--set", "replay.batch_size=128", "--set", "num_envs=2")
    preset = from_preset("cartpole-dqn").config
    assert run.config.replay == dataclasses.replace(preset.replay, batch_size=128)
    assert run.config.loop == dataclasses.replace(preset.loop, num_envs=2)


@pytest.mark.parametrize("args,message", [
    (["--set", "replay.bach_size=64"],
     "unknown field 'replay.bach_size' for DQNConfig (did you mean 'replay.batch_size'"),
    (["--set", "bach_size=64"],
     "unknown field 'bach_size' for DQNConfig (did you mean 'batch_size'"),
    (["--set", "batch_size=64", "--set", "replay.batch_size=32"],
     "replay.batch_size is given twice"),
    (["--set", "replay.learning_starts=10"],
     "learning_starts must be an integer in [64, 50000]"),
])
def test_bad_names_and_values_on_the_command_line(args, message, capsys):
    rc = cli.main(["train", "cartpole-dqn", "--quiet", "--no-tensorboard", "--logdir",
                   "/tmp/rljax-test-never-written", *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rljax: error: ") and message in err, err


def test_flat_and_dotted_names_in_the_api():
    a = from_preset("reacher-td3", batch_size=128, random_steps=1_000)
    b = from_preset("reacher-td3", **{"replay.batch_size": 128, "loop.random_steps": 1_000})
    assert a == b and a.config.replay.batch_size == 128 and a.config.loop.random_steps == 1_000
    preflight.check_python_values(type(a.config), {"replay.batch_size": 128, "num_envs": 4})
    for name in ("batch_size", "replay.batch_size"):
        with pytest.raises(ValueError, match=f"^{name} must be an int, got str '128'"):
            preflight.check_python_values(type(a.config), {name: "128"})


@pytest.mark.parametrize("sweep", ["alpha=0.4,0.7", "replay.alpha=0.4,0.7",
                                   ("alpha", [0.4, 0.7])])
def test_a_sweep_names_a_record_field_canonically(sweep):
    run = from_preset("cartpole-dqn", sweep=sweep)
    assert run.sweep == ("replay.alpha", (0.4, 0.7))
    # Member folders carry the field's own name, as before the records.
    assert rundir._member_name(run, 1) == "alpha=0.7_seed_0"
    member = rundir._member_config(run, 1)
    assert member["config"]["replay"]["alpha"] == 0.7 and "replay.alpha" not in member["config"]
    assert RunConfig.from_dict(member).config == records.configure(run.config, alpha=0.7)


@pytest.mark.parametrize("preset,sweep,name", [
    ("cartpole-dqn", "alpha=0.4,0.9", "replay.alpha"),
    ("cartpole-dqn", "learning_starts=256,512", "replay.learning_starts"),
    ("reacher-td3", "loop.random_steps=0,1000", "loop.random_steps"),
])
def test_a_replay_field_read_as_a_python_value_is_refused_by_its_canonical_name(
        preset, sweep, name):
    """Replay and loop settings that are not shapes are still Python values inside the
    program (the buffers check alpha, the memory compares learning_starts, TD3 branches on
    random_steps): sweeping them is refused when the run is assembled, before compiling."""
    run = from_preset(preset, num_envs=4, total_steps=4_000, tensorboard=False, sweep=sweep)
    assert run.sweep[0] == name
    with pytest.raises(SweepError, match=f"^--sweep {name}: this hyperparameter sets a shape "
                                         "or the structure of the program"):
        build(run)


# A run setting added since a record was written reads back as its default.
_RUN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)
                 if f.default is not dataclasses.MISSING}


def _same_or_new(got, want, where="run"):
    """``got`` (read back) equals ``want`` (as stored), apart from fields added since,
    which read back as None (a run setting: as its default)."""
    for key in set(got) | set(want):
        if key not in want:
            allowed = (None, _RUN_DEFAULTS.get(key)) if where == "run" else (None,)
            assert got[key] in allowed, f"{where}.{key}"
        elif isinstance(want[key], dict) and isinstance(got.get(key), dict):
            _same_or_new(got[key], want[key], f"{where}.{key}")
        else:
            assert got.get(key) == want[key], f"{where}.{key}"


@pytest.mark.parametrize("path", STORED, ids=lambda p: os.path.relpath(p, ROOT))
def test_stored_run_records_still_load(path):
    data = json.load(open(path))
    run = RunConfig.from_dict(data)
    config = run.config
    # memory as three fields and total_updates become the Memory record and schedule_steps
    upgraded = get_algorithm(data["algo"]).upgrade_record(data)
    if "loop" in data["config"]:  # written with the records: read back as written
        _same_or_new(json.loads(json.dumps(run.to_dict())), upgraded)
        return
    flat = records.from_dict(type(config), upgrade_fields(data["algo"], upgraded["config"]))
    for name, value in flat.items():
        got = records.get(config, records.canonical(type(config), name))
        assert json.loads(json.dumps(got)) == json.loads(json.dumps(value)), name


def test_old_memory_fields_and_total_updates_load_as_today_s_records():
    data = {"algo": "pqn", "env_id": "CartPole-v1", "total_steps": 8_192,
            "config": {"loop": {"num_envs": 8, "rollout_len": 16}, "memory": "lstm",
                       "memory_size": 32, "memory_reset_every_step": True, "total_updates": 4}}
    run = RunConfig.from_dict(data)
    assert run.config.memory == Memory(core="lstm", size=32, reset_every_step=True)
    assert run.schedule_steps == 4 * 8 * 16
    data["config"].update(memory=None, total_updates=None)
    run = RunConfig.from_dict(data)
    assert run.config.memory is None and run.schedule_steps is None


def test_stored_run_records_are_there():
    flat = [p for p in STORED if "loop" not in json.load(open(p))["config"]]
    assert len(flat) >= 10 and len(STORED) > len(flat)

"""Presets: each one is a valid, named RunConfig with real key parameters, notes and a
threshold where its task has one; ``rljax presets`` lists them all."""

from __future__ import annotations

import dataclasses
import math

import pytest

import rljax
from rljax import envs, records
from rljax.run import cli, presets
from rljax.run.config import RunConfig
from rljax.run.presets import PRESETS, Preset, get_preset
from rljax.run.registry import get_algorithm


def test_names_are_unique_and_index_the_presets():
    names = [name for module in presets._INDEX for name in presets.family(module)]
    assert len(names) == len(set(names)) >= 6
    assert list(PRESETS) == names
    assert all(PRESETS[name].name == name for name in PRESETS)
    assert rljax.PRESETS is PRESETS and rljax.Preset is Preset


def _skip_without_package(env_id: str) -> None:
    """Skips a preset whose env backend's optional package (brax, playground) is absent."""
    import importlib.util

    prefix = env_id.partition(":")[0] if ":" in env_id else ""
    package = envs.backends()[prefix].package
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{env_id} needs {package}")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_holds_a_valid_run_config(name):
    p = PRESETS[name]
    run = p.run
    assert isinstance(run, RunConfig) and run.preset == name
    assert isinstance(run.config, get_algorithm(run.algo).config_cls)
    _skip_without_package(run.env_id)
    envs.check_task(run.env_id)
    # Built again field by field, the run passes RunConfig's validation unchanged.
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(RunConfig)}
    assert RunConfig(**fields) == run
    assert run.num_members == 1 and run.devices == 1 and run.sweep is None
    assert run.chunk_steps <= run.total_steps


@pytest.mark.parametrize("name", list(PRESETS))
def test_key_params_are_config_fields_and_notes_are_given(name):
    p = PRESETS[name]
    fields = records.names(type(p.run.config))
    assert p.key_params and set(p.key_params) <= set(fields)
    assert len(set(p.key_params)) == len(p.key_params)
    assert "num_envs" in p.key_params
    assert isinstance(p.notes, str) and len(p.notes) > 40


@pytest.mark.parametrize("name", list(PRESETS))
def test_threshold_set_where_the_task_has_one(name):
    run = PRESETS[name].run
    _skip_without_package(run.env_id)
    task = envs.reward_threshold(run.env_id)
    if task is not None:
        assert run.threshold is not None
    if run.threshold is not None:
        assert isinstance(run.threshold, float) and math.isfinite(run.threshold)
    if run.stop_on_solve:
        assert run.threshold is not None


def test_preset_refuses_a_mismatched_name_or_unknown_key_params():
    run = PRESETS["cartpole-a2c"].run
    with pytest.raises(ValueError, match="preset 'other' holds a run named 'cartpole-a2c'"):
        Preset(name="other", run=run)
    with pytest.raises(ValueError, match=r"key_params \['lr'\] are not fields of A2CConfig"):
        Preset(name="cartpole-a2c", run=run, key_params=("gamma", "lr"))
    assert Preset(name="cartpole-a2c", run=run).key_params == ()


def test_get_preset_suggests_close_names_and_lists_the_rest():
    assert get_preset("cartpole-dqn") is PRESETS["cartpole-dqn"]
    with pytest.raises(ValueError) as e:
        get_preset("cartpole-ac")
    message = str(e.value)
    assert message.startswith("unknown preset 'cartpole-ac' (did you mean 'cartpole-a2c'")
    assert message.endswith(f"; available: {', '.join(PRESETS)}")


def test_presets_command_lists_every_preset(capsys):
    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    flat = lambda text: " ".join(text.split())
    for p in PRESETS.values():
        run = p.run
        row = [line for line in lines if line.startswith(f"{p.name} ")]
        assert len(row) == 1, p.name
        assert row[0].split() == [p.name, run.env_id, run.algo, f"{run.total_steps:,}"]
        below = []
        for line in lines[lines.index(row[0]) + 1:]:
            if not line.startswith("    "):
                break
            below.append(line)
        config = run.config
        keys = [k for k in p.key_params if not (k == "epsilon" and getattr(config, "noisy",
                                                                            False))]
        params = ", ".join(f"{k}={records.get(config, records.canonical(type(config), k))}"
                           for k in keys)
        assert flat(" ".join(below)) == flat(f"{params} ({p.notes})"), p.name
    from rljax.run.registry import ALGORITHMS

    text = flat("\n".join(lines))
    for algo in ALGORITHMS.values():
        assert flat(f"{algo.name}: {algo.description}") in text


def test_cartpole_pqn_note_and_the_presets_table_give_the_same_figures():
    import pathlib
    import re

    from rljax.run.presets import PRESETS

    readme = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "presets.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `cartpole-pqn` "))
    note = PRESETS["cartpole-pqn"].notes
    ranges = lambda text: set(re.findall(r"\d+-\d+k", text))
    assert ranges(row) and ranges(row) <= ranges(note), (row, note)
    assert "16 of 16" in row and "16 of 16" in note

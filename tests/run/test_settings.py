"""Run settings are declared once, in RunConfig's field metadata: the command line, the
Python API, coercion, bounds and the resumable set all follow from it."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import pytest
import test_layers

from rljax.run import cli, preflight, settings
from rljax.run.config import NOT_LEARNING, OPTIONS, RESUMABLE_CHANGES, RunConfig, override
from rljax.run.presets import PRESETS
from rljax.run.settings import setting


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Toy:
    budget: int = setting(5, help="steps to take (default {default})", metavar="N", low=1,
                          resumable=True)
    quiet_mode: bool = setting(False, help="say nothing", flag="--hush")
    tag: str | None = setting(None, help="a label", keyword="label", learning=False)
    internal: int = setting(3, low=0)  # declared, but no option: no help
    plain: int = 7


def test_options_come_from_the_field_metadata():
    budget, hush, tag = settings.options(_Toy)
    assert (budget.flag, budget.keyword, budget.help, budget.metavar, budget.type) == (
        "--budget", "budget", "steps to take (default 5)", "N", int)
    assert (hush.flag, hush.switch, hush.default) == ("--hush", True, False)
    assert (tag.flag, tag.keyword, tag.type) == ("--label", "label", str | None)
    assert settings.resumable(_Toy) == ("budget",)
    assert settings.not_learning(_Toy) == ("tag",)
    assert settings.api_types(_Toy) == {"budget": int, "quiet_mode": bool, "label": str | None}


def test_a_toy_field_list_builds_the_command_line():
    parser = argparse.ArgumentParser()
    cli._add_run_options(parser, settings.options(_Toy))
    args = parser.parse_args(["--budget", "9", "--hush"])
    assert (args.budget, args.quiet_mode, args.label) == ("9", True, None)
    assert "steps to take (default 5)" in parser.format_help()


def test_check_holds_declared_bounds_and_bools():
    settings.check(_Toy())
    with pytest.raises(ValueError, match="budget must be an integer >= 1, got 0"):
        settings.check(_Toy(budget=0))
    with pytest.raises(ValueError, match="internal must be an integer >= 0"):
        settings.check(_Toy(internal=-1))
    with pytest.raises(ValueError, match="quiet_mode must be true or false"):
        settings.check(_Toy(quiet_mode=1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _RunWithAKnob(RunConfig):
    knob: int = setting(4, help="a new run setting (default {default})", metavar="K", low=1,
                        resumable=True)


def test_a_new_run_config_field_is_a_flag_a_keyword_and_resumable_without_other_edits():
    base = _RunWithAKnob(**{f.name: getattr(PRESETS["cartpole-a2c"].run, f.name)
                            for f in dataclasses.fields(RunConfig)})
    parser = argparse.ArgumentParser()
    cli._add_run_options(parser, settings.options(_RunWithAKnob))
    args = parser.parse_args(["--knob", "9", "--keep-checkpoints", "3"])
    assert "a new run setting (default 4)" in parser.format_help()
    run = override(base, knob=args.knob, keep_checkpoints=args.keep_checkpoints)
    assert (run.knob, run.keep_checkpoints) == (9, 3)  # coerced from text
    assert override(base, knob=7.0).knob == 7
    with pytest.raises(ValueError, match="knob must be an integer >= 1, got 0"):
        override(base, knob="0")
    with pytest.raises(ValueError, match="bad value 'many' for knob: expected an integer"):
        override(base, knob="many")
    assert "knob" in settings.resumable(_RunWithAKnob)
    assert settings.api_types(_RunWithAKnob)["knob"] is int


def test_train_help_lists_the_same_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    flags = {w.rstrip(",") for line in out.splitlines() for w in line.split()
             if w.startswith("--")}
    assert flags >= {"--env", "--total-steps", "--seed", "--seeds", "--sweep", "--devices",
                     "--distributed", "--coordinator", "--num-processes", "--process-id",
                     "--num-envs", "--logdir", "--set", "--resume", "--from-checkpoint",
                     "--checkpoint-every", "--keep-checkpoints", "--chunk-steps",
                     "--eval-every", "--eval-episodes", "--quiet", "--no-tensorboard",
                     "--wandb", "--no-compile-cache", "--init-timeout"}
    assert "keep the N newest checkpoints (default 2)" in out
    assert "(default 100000; always at the end)" in " ".join(out.split())


def test_every_option_is_a_keyword_the_api_checks():
    assert {o.keyword for o in OPTIONS} | {"num_envs"} == set(preflight.RUN_TYPES)
    with pytest.raises(ValueError, match="keep_checkpoints must be an int, got str '3'"):
        preflight.check_python_values(None, {"keep_checkpoints": "3"})


def test_resumable_and_not_learning_sets():
    assert set(RESUMABLE_CHANGES) == {
        "total_steps", "logdir", "tensorboard", "wandb_project", "chunk_steps",
        "checkpoint_every", "keep_checkpoints", "stop_on_solve", "eval_every",
        "eval_episodes", "cpu_threads", "cpu_devices", "threshold"}
    assert set(NOT_LEARNING) == {"seed", "num_seeds", "logdir", "tensorboard",
                                 "wandb_project", "eval_every", "eval_episodes",
                                 "checkpoint_every", "keep_checkpoints", "cpu_threads",
                                 "cpu_devices", "threshold"}


def test_set_of_a_run_setting_names_its_option():
    args = cli._build_parser().parse_args(["train", "cartpole-a2c", "--set",
                                           "keep_checkpoints=3"])
    with pytest.raises(ValueError, match="keep_checkpoints is a run setting, not an agent "
                                         "field; use --keep-checkpoints"):
        cli._agent_assignments(args)


def _import_cycles(root: pathlib.Path, package: str) -> list[list[str]]:
    """Cycles among the modules under ``package``, function-level imports included."""
    graph = {}
    for path in sorted(root.rglob("*.py")):
        module = test_layers.module_name(path)
        if module.startswith(package):
            graph[module] = {t for _, t in test_layers.imported_modules(path.read_text(),
                                                                         module)}

    def known(target):  # "rljax.run.config.RunConfig" -> "rljax.run.config"
        while target and target not in graph:
            target = target.rpartition(".")[0]
        return target

    edges = {m: {known(t) for t in ts} - {"", m} for m, ts in graph.items()}
    cycles = []

    def walk(module, path):
        for nxt in sorted(edges[module]):
            if nxt == path[0]:
                cycles.append(path + [nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least module
                walk(nxt, path + [nxt])

    for module in sorted(edges):
        walk(module, [module])
    return cycles


def test_the_run_layer_has_no_import_cycle():
    """Not even through an import inside a function: rljax.run.config is below the
    presets, which build RunConfigs."""
    assert _import_cycles(test_layers.ROOT, "rljax.run") == []


def test_the_cycle_check_catches_a_planted_function_level_cycle(tmp_path):
    tree = tmp_path / "rljax"
    (tree / "run").mkdir(parents=True)
    for name in ("__init__.py", "run/__init__.py"):
        (tree / name).write_text("")
    (tree / "run" / "config.py").write_text("def f():\n    from rljax.run import presets\n")
    (tree / "run" / "presets.py").write_text("from rljax.run.config import f\n")
    saved, test_layers.ROOT = test_layers.ROOT, tree
    try:
        cycles = _import_cycles(tree, "rljax.run")
    finally:
        test_layers.ROOT = saved
    assert cycles == [["rljax.run.config", "rljax.run.presets", "rljax.run.config"]]


def test_parsing_the_command_line_loads_no_jax():
    import subprocess

    code = ("import sys; from rljax.run import cli; cli._build_parser(); "
            "assert 'jax' not in sys.modules, 'jax imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_readme_names_every_run_setting():
    """A new run setting shows up in the README's command-line synopsis and API keywords."""
    readme = (test_layers.ROOT.parent / "README.md").read_text()
    synopsis = readme.split("## Command line", 1)[1].split("```", 2)[1]
    api = readme.split("## Python API", 1)[1].split("## Command line", 1)[0]
    assert [o.flag for o in OPTIONS if o.flag not in synopsis] == []
    assert [o.keyword for o in OPTIONS if f"`{o.keyword}`" not in api] == []

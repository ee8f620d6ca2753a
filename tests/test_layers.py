"""The package's layers import only downward (core -> agents -> loops -> parallel -> run)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "rljax"
LAYERS = {"core": 0, "agents": 1, "loops": 2, "parallel": 3, "run": 4}


def layer_of(module: str) -> str:
    """The layer of a dotted module name inside rljax (``rljax`` itself is the top)."""
    parts = module.split(".")
    if parts[0] != "rljax":
        raise ValueError(module)
    if len(parts) == 1:
        return "top"
    return parts[1] if parts[1] in LAYERS else "core"


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every rljax import in ``source``, function-level ones too."""
    out = []
    package = module if module.count(".") == 0 else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("rljax")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if not base.startswith("rljax"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                # "from rljax.run import checkpoint" imports a module of rljax.run.
                out.append((node.lineno, full if (ROOT.parent / (full.replace(".", "/")
                                                                  + ".py")).exists()
                            or (ROOT.parent / full.replace(".", "/")).is_dir() else base))
    return out


def upward_imports(root: pathlib.Path = ROOT) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path)
        here = layer_of(module)
        if here == "top":
            continue
        for line, target in imported_modules(path.read_text(), module):
            there = layer_of(target)
            if there == "top" or LAYERS[there] > LAYERS[here]:
                problems.append(f"{path.relative_to(root.parent)}:{line}: {here} module "
                                f"imports {target} ({there})")
    return problems


def test_no_module_imports_a_higher_layer():
    assert upward_imports() == []


def test_the_check_catches_a_planted_upward_import(tmp_path):
    tree = tmp_path / "rljax"
    for sub in ("agents", "run", "buffers"):
        (tree / sub).mkdir(parents=True)
        (tree / sub / "__init__.py").write_text("")
    (tree / "__init__.py").write_text("")
    (tree / "run" / "driver.py").write_text("X = 1\n")
    (tree / "agents" / "dqn.py").write_text("def f():\n    from rljax.run import driver\n")
    (tree / "buffers" / "replay.py").write_text("import rljax\n")
    global ROOT
    saved, ROOT = ROOT, tree
    try:
        problems = upward_imports(tree)
    finally:
        ROOT = saved
    assert any("agents/dqn.py:2" in p and "rljax.run.driver" in p for p in problems), problems
    assert any("buffers/replay.py:1" in p for p in problems), problems


@pytest.mark.parametrize("module", ["rljax.buffers.sum_tree", "rljax.agents.dqn",
                                    "rljax.loops.off_policy", "rljax.parallel.members"])
def test_importing_a_lower_module_does_not_load_the_run_layer(module):
    code = (f"import sys, {module}; "
            "loaded = sorted(m for m in sys.modules if m.startswith('rljax.run')); "
            "print(loaded); assert not loaded")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_top_level_names_load_lazily():
    code = ("import sys, rljax; assert 'rljax.run.api' not in sys.modules; "
            "rljax.train; assert 'rljax.run.api' in sys.modules; "
            "assert set(rljax.__all__) >= {'train', 'load', 'evaluate', 'RunConfig', 'PRESETS'}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("layer", ["run", "parallel"])
def test_run_and_parallel_modules_stay_small(layer):
    """The layers that assemble and scale runs stay readable: modules of at most ~400
    lines, functions of at most ~80."""
    for path in sorted((ROOT / layer).rglob("*.py")):
        source = path.read_text()
        assert len(source.splitlines()) <= 400, f"{path.name}: {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= 80, f"{path.name}:{node.lineno} {node.name}: {length} lines"


def test_only_the_parallel_layer_names_mesh_axes():
    """Agents, loops, losses, networks and envs take no ``axis_name``; the one exception is
    flax's batch-norm axis, passed through as ``batch_norm_axis`` (see
    rljax/parallel/data_parallel.py)."""
    allowed = {"networks/ddpg.py"}
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("parallel/", "run/")) or rel in allowed:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "axis_name" in line or "lax.psum" in line or "lax.pmean" in line or (
                    "all_gather" in line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert offenders == []

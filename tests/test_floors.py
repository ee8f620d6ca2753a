"""The lowest dependency versions pyproject.toml declares are the ones CI installs and
tests (.ci/run's floor step, from .ci/floors.txt)."""

from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _floors() -> dict[str, str]:
    """``{package: lowest version}`` of pyproject.toml's dependencies that have one."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*(,.*)?", dep)
        if match:
            out[match.group(1).lower()] = match.group(2)
    return out


def _version(text: str | None) -> tuple[int, ...]:
    parts = [int(p) for p in (text or "").split(".") if p.isdigit()]
    return tuple(parts + [0] * (3 - len(parts)))


def _pins() -> dict[str, str]:
    lines = (ROOT / ".ci" / "floors.txt").read_text().splitlines()
    return {name.lower(): version for name, _, version in
            (line.partition("==") for line in lines if line and not line.startswith("#"))}


def test_ci_installs_each_declared_floor():
    floors, pins = _floors(), _pins()
    for name in ("jax", "jaxlib", "flax", "optax", "gymnasium", "envpool", "numpy",
                 "orbax-checkpoint", "tensorstore", "gymnax", "matplotlib"):
        assert name in floors, f"pyproject.toml declares no floor for {name}"
        assert _version(pins.get(name)) == _version(floors[name]), (
            f"{name}: pyproject.toml declares >={floors[name]}, .ci/floors.txt installs "
            f"{pins.get(name)}")
    script = (ROOT / ".ci" / "run").read_text()
    assert ".ci/floors.txt" in script and "FLOOR_TESTS" in script

"""The code blocks of README.md and docs/*.md run, and print what the docs say they print.

A ``python`` or ``bash`` block is run when it holds lines ``# -> TEXT``: each gives what
the line above it prints (``...`` stands for any text), and the program's output lines
must match them in order. A block that is not meant to run (an install, a skeleton, a
placeholder path) is marked just above its opening fence with
``<!-- not run: why -->``. Every other block fails the test, so a new example either
states its outcome or says why it is not run.

Blocks run in a fresh process in an empty folder, with the defaults a user gets (not the
test suite's compiler settings), so the numbers are the ones a reader would see.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
_EXPECT = "# -> "


def blocks(path: pathlib.Path) -> list[dict]:
    """The fenced blocks of a Markdown file: language, first line, code, why not run."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        above = " ".join(lines[max(0, start - 2):start])
        skip = _NOT_RUN.search(above)
        out.append({"lang": match.group(1), "line": start + 1,
                    "code": "\n".join(lines[start + 1:i]) + "\n",
                    "not_run": skip.group(1) if skip else None})
        i += 1
    return out


def expected_lines(code: str) -> list[str]:
    return [line.strip()[len(_EXPECT):] for line in code.splitlines()
            if line.strip().startswith(_EXPECT)]


def mismatch(expected: list[str], output: str) -> str | None:
    """None when the output's non-blank lines match ``expected`` in order, else why not."""
    got = [line.rstrip() for line in output.splitlines() if line.strip()]
    if len(got) != len(expected):
        return f"expected {len(expected)} printed lines {expected}, got {len(got)}: {got}"
    for want, line in zip(expected, got, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        if not re.fullmatch(pattern, line):
            return f"expected {want!r}, printed {line!r}"
    return None


def _runnable() -> list:
    cases = []
    for path in DOCS:
        for block in blocks(path):
            if block["lang"] in ("python", "bash") and not block["not_run"]:
                name = f"{path.relative_to(ROOT)}:{block['line']}"
                cases.append(pytest.param(block, id=name))
    return cases


def test_every_code_block_runs_or_says_why_not():
    unmarked = [f"{path.relative_to(ROOT)}:{b['line']}" for path in DOCS for b in blocks(path)
                if b["lang"] in ("python", "bash") and not b["not_run"]
                and not expected_lines(b["code"])]
    assert not unmarked, (f"code blocks with neither `# -> ` outcome lines nor a "
                          f"`<!-- not run: why -->` mark: {unmarked}")


def test_a_wrong_number_is_caught():
    readme = next(b for b in blocks(ROOT / "README.md") if expected_lines(b["code"]))
    expected = expected_lines(readme["code"])
    right = "\n".join(e.replace("...", "x") for e in expected)
    assert mismatch(expected, right) is None
    planted = [re.sub(r"\d", "7", e, count=1) if re.search(r"\d", e) else e
               for e in expected]
    assert planted != expected and mismatch(planted, right) is not None
    assert mismatch(expected, right + "\nextra line") is not None


def _user_environment(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["RLJAX_CACHE_DIR"] = str(tmp_path / "cache")
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", _runnable())
def test_code_block_prints_what_the_docs_say(block, tmp_path):
    command = [sys.executable, "-c", block["code"]] if block["lang"] == "python" else [
        "bash", "-euo", "pipefail", "-c", block["code"]]
    proc = subprocess.run(command, cwd=tmp_path, env=_user_environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    problem = mismatch(expected_lines(block["code"]), proc.stdout)
    assert problem is None, problem

"""The code blocks of README.md and docs/*.md run, and print what the docs say they print.

A ``python`` or ``bash`` block is run when it holds lines ``# -> TEXT``: each gives what
the line above it prints (``...`` stands for any text), and the program's output lines
must match them in order. ``{COND}`` in TEXT stands for one printed number ``x`` for which
the Python expression COND holds (``{0 < x <= 500_000}``): figures that depend on the
trajectory, such as the step a run solved at, differ between CPU models (XLA:CPU compiles
for the processor it runs on, and the rounding of a few operations changes), so a block
states what holds on every machine and the prose beside it gives one machine's figure.
A block that is not meant to run (an install, a skeleton, a placeholder path) is marked
just above its opening fence with ``<!-- not run: why -->``. Every other block fails the
test, so a new example either states its outcome or says why it is not run.

Blocks run in a fresh process in an empty folder with a compilation cache of its own (as a
reader's first run), under the test suite's compiler settings (tests/conftest.py: most
optimizations off, which compiles the blocks in three quarters of the CPU time), except
the by-hand training block of docs/design.md (:data:`LONG_RUNS`), which compiles at LLVM
-O1 like the suite's learning tests (19.9 CPU-s against 16.1): like the processor, those
change only the rounding, and the stated outcomes hold under any rounding. (README's API
block, compiled at -O1, ends its seed's run at a 100-episode mean of 498.9 where -O0 ends
at 500.0: hence its `{x >= 475}`.)
An ``--xla_cpu_max_isa`` in ``XLA_FLAGS`` is passed on, to try the blocks as on an older CPU.
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
_CONDITION = re.compile(r"\{([^{}]*)\}")
# Blocks that train for long enough to run faster compiled with optimizations: a line of
# the block, by file.
LONG_RUNS = {"docs/design.md": "make_on_policy_trainer(agent, env"}


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


def _line_matches(want: str, line: str) -> bool:
    """``want``'s text in order (``...``: any text), each ``{COND}`` one number meeting COND."""
    pieces = _CONDITION.split(want)  # text, condition, text, ...
    pattern = "".join(r"(\S+)" if k % 2 else ".*".join(map(re.escape, piece.split("...")))
                      for k, piece in enumerate(pieces))
    match = re.fullmatch(pattern, line)
    if not match:
        return False
    for condition, printed in zip(pieces[1::2], match.groups(), strict=True):
        try:
            x = float(printed)
        except ValueError:
            return False
        if not eval(condition, {"__builtins__": {}}, {"x": x}):  # the docs' own text
            return False
    return True


def mismatch(expected: list[str], output: str) -> str | None:
    """None when the output's non-blank lines match ``expected`` in order, else why not."""
    got = [line.rstrip() for line in output.splitlines() if line.strip()]
    if len(got) != len(expected):
        return f"expected {len(expected)} printed lines {expected}, got {len(got)}: {got}"
    for want, line in zip(expected, got, strict=True):
        if not _line_matches(want, line):
            return f"expected {want!r}, printed {line!r}"
    return None


def _runnable() -> list:
    cases = []
    for path in DOCS:
        for block in blocks(path):
            if block["lang"] in ("python", "bash") and not block["not_run"]:
                file = str(path.relative_to(ROOT))
                cases.append(pytest.param({**block, "file": file}, id=f"{file}:{block['line']}"))
    return cases


def test_each_long_run_names_one_runnable_block():
    for file, line in LONG_RUNS.items():
        found = [b for b in (p.values[0] for p in _runnable())
                 if b["file"] == file and line in b["code"]]
        assert len(found) == 1, (file, line, len(found))


def test_every_code_block_runs_or_says_why_not():
    unmarked = [f"{path.relative_to(ROOT)}:{b['line']}" for path in DOCS for b in blocks(path)
                if b["lang"] in ("python", "bash") and not b["not_run"]
                and not expected_lines(b["code"])]
    assert not unmarked, (f"code blocks with neither `# -> ` outcome lines nor a "
                          f"`<!-- not run: why -->` mark: {unmarked}")


def test_a_wrong_number_is_caught():
    readme = next(b for b in blocks(ROOT / "README.md") if expected_lines(b["code"]))
    expected = expected_lines(readme["code"])
    assert any(_CONDITION.search(e) for e in expected)
    def meets(condition: re.Match) -> str:  # a number for which the condition holds
        return next(str(v) for v in (1, 500) if eval(condition.group(1), {"x": v}))

    right = "\n".join(_CONDITION.sub(meets, e.replace("...", "x")) for e in expected)
    assert mismatch(expected, right) is None
    planted = [re.sub(r"\d", "7", e, count=1) if re.search(r"\d", e) else e
               for e in expected]
    assert planted != expected and mismatch(planted, right) is not None
    assert mismatch(expected, right + "\nextra line") is not None


def test_a_condition_holds_for_the_printed_number_only():
    expected = ["500.0 {0 < x <= 500_000}", "(4,) ... [True]"]
    assert mismatch(expected, "500.0 383040\n(4,) True [True]") is None
    assert mismatch(expected, "500.0 1.5e5\n(4,) True [True]") is None
    for wrong in ("499.0 383040", "500.0 -1", "500.0 600000", "500.0 solved",
                  "500.0 383040 more", "500.0"):
        assert mismatch(expected, f"{wrong}\n(4,) True [True]") is not None, wrong


def test_every_condition_in_the_docs_is_an_expression_of_x():
    for path in DOCS:
        for block in blocks(path):
            for line in expected_lines(block["code"]):
                for condition in _CONDITION.findall(line):
                    code = compile(condition, f"{path.name}:{block['line']}", "eval")
                    assert code.co_names == ("x",), (path.name, block["line"], condition)


def _user_environment(tmp_path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["RLJAX_CACHE_DIR"] = str(tmp_path / "cache")
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", _runnable())
def test_code_block_prints_what_the_docs_say(block, tmp_path):
    command = [sys.executable, "-c", block["code"]] if block["lang"] == "python" else [
        "bash", "-euo", "pipefail", "-c", block["code"]]
    env = _user_environment(tmp_path)
    if LONG_RUNS.get(block["file"], "\0") in block["code"]:
        env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "0"
    proc = subprocess.run(command, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    problem = mismatch(expected_lines(block["code"]), proc.stdout)
    assert problem is None, problem


def test_readme_fits_and_names_the_api_and_extras():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    api = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    assert "rljax.from_preset(" in api and "env_options" in api
    assert "`craftax`" in text and ".ci/floors.txt" in text

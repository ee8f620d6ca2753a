"""benchmarks/scaling_matrix.py without training: its cells are the whole matrix, the
command lines of docs/scaling.md are among them, and its table counts equal members."""

import json
import pathlib
import re
import shlex

from benchmarks import scaling_matrix as sm
from rljax.run.presets import get_preset

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "scaling.md"


def test_cells_are_the_whole_matrix_and_the_sweep():
    cells = sm.cells()
    assert len(cells) == len(set(cells)) == 23
    for preset in sm.PRESETS:
        for procs in (1, 2):
            for per in (1, 2):
                for members in {1, procs * per, 2 * procs * per}:
                    assert (preset, procs, per, members, ()) in cells
    assert ("cartpole-a2c", 2, 2, 4, sm.SWEEP[1:]) in cells


def _doc_commands() -> list[tuple[int, list[str]]]:
    """(CPU devices per process, rljax train arguments) of each bash block of the doc."""
    text = DOC.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        line = block.replace("\\\n", " ")
        if "rljax train" not in line:
            continue
        per = int(re.search(r"device_count=(\d+)", line).group(1))
        words = shlex.split(line.split("rljax train", 1)[1].split("&")[0].split(";")[0])
        out.append((per, words))
    return out


def test_every_training_command_of_the_doc_is_a_cell():
    commands = _doc_commands()
    assert len(commands) >= 2
    for per, words in commands:
        preset = words[0]
        procs = int(words[words.index("--num-processes") + 1]) if "--distributed" in words else 1
        members = int(words[words.index("--seeds") + 1])
        assert (preset, procs, per, members, ()) in sm.cells(), words
        env, argv = sm.command_lines(preset, procs, per, members, (),
                                     sm.SOLVE_STEPS[preset], "runs", 12355)
        assert env["XLA_FLAGS"] == f"--xla_force_host_platform_device_count={per}"
        assert len(argv) == procs
        for option in ("--seeds", "--devices", "--num-processes", "--coordinator"):
            if option in words:
                value = words[words.index(option) + 1]
                assert argv[-1][argv[-1].index(option) + 1] == value, option
        # --solve runs the doc's command at the preset's own budget
        assert sm.SOLVE_STEPS[preset] == get_preset(preset).run.total_steps


def _row(members, each, procs=2, per=2):
    return {"preset": "cartpole-a2c", "processes": procs, "devices_per_process": per,
            "members": members, "extra": [], "exit": [0] * procs, "wall_s": 1.0,
            "members_finished": members, "members_solved": 1, "each": each,
            "total_steps": 4096}


def test_compare_counts_members_equal_to_one_device():
    ref = [{"episodes": 10, "final_return_mean": 20.0},
           {"episodes": 11, "final_return_mean": 30.0}]
    near = [{"episodes": 10, "final_return_mean": 20.0 + 1e-5},
            {"episodes": 11, "final_return_mean": 30.0}]
    apart = [{"episodes": 10, "final_return_mean": 20.5},
             {"episodes": 12, "final_return_mean": 30.0}]
    rows = [_row(2, near), _row(2, apart), _row(1, ref[:1])]
    refs = {("cartpole-a2c", 2, ()): _row(2, ref, 1, 1),
            ("cartpole-a2c", 1, ()): _row(1, ref[:1], 1, 1)}
    sm.compare(rows, refs)
    assert [r["equal"] for r in rows] == [2, 0, None]
    lines = sm.table(rows).splitlines()
    assert len(lines) == 5
    assert "| 2/2 |" in lines[2] and "| 0/2 |" in lines[3]
    assert "| data-parallel |" in lines[4] and "| 1/1 |" in lines[4]  # solved 1 of 1


def test_cells_resume_keeps_the_other_cells_in_order(tmp_path, monkeypatch):
    ran = []

    def fake(preset, procs, per, members, extra, steps, limit, logdir):
        ran.append((preset, procs, per, members, tuple(extra)))
        each = [{"episodes": 5, "final_return_mean": 9.0, "solved_at_step": None}] * members
        return dict(_row(members, each, procs, per), preset=preset, extra=list(extra),
                    total_steps=steps, load=[1.0, 1.0, 1.0], cpu_s=1.0)

    monkeypatch.setattr(sm, "run_cell", fake)
    monkeypatch.setattr(sm, "RESULTS_DIR", str(tmp_path))
    assert sm.main(["--total-steps", "8", "--cells", "3,0"]) == 0
    # cell 3 (2 x 2, 4 members) ran after its one-device reference; cell 0 needs another
    assert ran == [("cartpole-a2c", 1, 1, 4, ()), ("cartpole-a2c", 2, 2, 4, ()),
                   ("cartpole-a2c", 1, 1, 8, ()), ("cartpole-a2c", 2, 2, 8, ())]
    ran.clear()
    assert sm.main(["--solve", "--cells", "1"]) == 0
    assert ran == [("gymnax-cartpole-ppo", 2, 2, 8, ())]  # no reference with --solve
    assert sm.main(["--total-steps", "8", "--cells", "1"]) == 0
    kept = json.loads((tmp_path / "scaling_matrix.json").read_text())
    assert [(r["preset"], r["members"]) for r in kept["cells"]] == [
        ("cartpole-a2c", 8), ("gymnax-cartpole-ppo", 8), ("cartpole-a2c", 4)]
    assert [r["equal"] for r in kept["cells"]] == [8, 8, 4]
    solve = json.loads((tmp_path / "scaling_matrix_solve.json").read_text())
    assert [(r["total_steps"], r["equal"]) for r in solve["cells"]] == [(150_000,
                                                                         "not compared")]


def _doc_tables() -> list[str]:
    """The markdown tables of docs/scaling.md's matrix section, in order."""
    section = DOC.read_text().split("### The matrix", 1)[1].split("\n## ", 1)[0]
    return ["\n".join(t.strip().splitlines()) for t in
            re.findall(r"\n(\| preset \|.*?)\n(?!\|)", section + "\n", re.S)]


def test_doc_tables_are_the_results_files(capsys):
    """The page's tables are what its `--table` commands print of the results files."""
    lines = [line for line in DOC.read_text().splitlines() if "--table" in line
             and line.startswith("python -m benchmarks.scaling_matrix")]
    commands = [shlex.split(c)[3:] for line in lines for c in line.split("&&")]
    assert commands == [["--table"], ["--table", "--solve"]]
    printed = []
    for args in commands:
        assert sm.main(args) == 0
        printed.append(capsys.readouterr().out.strip())
    assert _doc_tables() == printed


def test_thread_pool_check_takes_the_pages_command_and_names_winners_by_sign_test():
    from benchmarks import scaling_docs
    from rljax.run.presets import ONE_THREAD_MEMBERS

    found = re.search(r"`python -m benchmarks\.scaling_docs ([^`]*)`", DOC.read_text())
    args = scaling_docs.parser().parse_args(shlex.split(found.group(1)))
    assert args.pairs >= 5 and min(args.seeds) <= ONE_THREAD_MEMBERS < max(args.seeds)
    # the binomial tail: 5 of 5 fair tosses 1/32, 8 or more of 9 10/512
    assert scaling_docs.sign_test(5, 5) == 1 / 32 and scaling_docs.sign_test(8, 9) == 10 / 512
    assert scaling_docs.sign_test(0, 7) == 1.0
    # one thread / default pool per pair: above 1 one thread won the pair
    ratios = {"4": [1.2, 1.1, 1.3, 1.05, 1.01], "16": [1.2, 0.9, 1.1, 1.05, 0.95],
              "64": [0.8, 0.99, 0.9, 0.7, 0.95], "256": [0.7, 0.8, 1.75, 0.6, 0.9]}
    summary, wrong = scaling_docs.verdict(ratios, 16)
    assert wrong == []
    assert summary["16"] == {"median": 1.05, "low": 0.9, "high": 1.2, "winner": "level",
                             "sign_test_p": 0.5}
    assert summary["4"]["winner"] == "one thread" and summary["64"]["winner"] == "default pool"
    # 4 of 5 pairs is not a winner, however far the median lies from 1
    assert summary["256"]["winner"] == "level" and summary["256"]["median"] == 0.8
    assert [w.split(":")[0] for w in scaling_docs.verdict(ratios, 64)[1]] == ["64 seeds"]
    assert [w.split(":")[0] for w in scaling_docs.verdict(ratios, 2)[1]] == ["4 seeds"]
    assert scaling_docs.verdict(ratios, 32)[1] == []


def test_stored_thread_pool_runs_fit_the_bound(capsys):
    """Every run of the check that docs/scaling.md reports fits ONE_THREAD_MEMBERS."""
    from benchmarks import scaling_docs

    files = list(dict.fromkeys(
        re.findall(r"`(benchmarks/results/cpu_threads_seeds\w*\.json)`", DOC.read_text())))
    assert len(files) >= 5
    assert scaling_docs.main(["--analyze", *files]) == 0
    assert capsys.readouterr().out.count("as docs/scaling.md says") == len(files)

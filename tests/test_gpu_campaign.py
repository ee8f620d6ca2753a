"""benchmarks/gpu_campaign.py: every stage at toy sizes, the budget, and kills mid-stage."""

import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import campaign_render

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _campaign(out, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_campaign", "--out", str(out),
                             *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _read(out) -> dict:
    with open(os.path.join(out, "campaign.json")) as f:
        return json.load(f)


@pytest.mark.slow
def test_smoke_runs_every_stage_and_renders_them(tmp_path):
    proc = _campaign(tmp_path, "--smoke", "--budget-s", "400")
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log
    stages = _read(tmp_path)["stages"]
    assert {k: s["status"] for k, s in stages.items()} == dict.fromkeys(
        ("machine", "tests", "throughput", "members", "learning"), "done")
    assert stages["machine"]["result"]["backend"] == "cpu"
    tests = stages["tests"]["result"]
    assert tests["passed"] > 0 and tests["failures"] == tests["errors"] == 0, tests
    for family in stages["throughput"]["result"]["families"].values():
        assert family["train_sps"] > 0 and family["env_only_sps"] > 0, family
    members = stages["members"]["result"]["presets"]["gymnax-cartpole-ppo"]
    assert set(members["total_sps_by_seeds"]) == {"1", "4"} and members["ratio_4_to_1"] > 0
    learning = stages["learning"]["result"]
    runs = learning["runs"]
    assert len(runs) == 2
    assert learning["report"].endswith("report.md"), learning["report"]  # the 2-seed run only
    for run in runs.values():
        assert run["exit_code"] == 0 and run["summary"]["env_steps"] > 0, run
    page = (tmp_path / "campaign.md").read_text()
    assert "**CPU** (not a GPU run)" in page and "#### Learning runs" in page
    assert campaign_render.render_markdown(_read(tmp_path)) == page

    # A second campaign into the same folder resumes the learning runs it finds.
    proc = _campaign(tmp_path, "--smoke", "--stages", "learning", "--budget-s", "200")
    log, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, log
    again = _read(tmp_path)["stages"]["learning"]["result"]["runs"]
    assert all(r["resumed"] and r["run_dir"] == runs[k]["run_dir"] for k, r in again.items())


def test_a_budget_too_small_for_a_stage_skips_it_by_name(tmp_path):
    proc = _campaign(tmp_path, "--smoke", "--stages", "machine,tests", "--budget-s", "45")
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    stages = _read(tmp_path)["stages"]
    assert stages["machine"]["status"] == "done"
    assert stages["machine"]["result"]["versions"]["jax"]
    assert stages["tests"]["status"].startswith("skipped for time: needs 30 s")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_kill_mid_stage_keeps_the_finished_stages(tmp_path, signum, code):
    proc = _campaign(tmp_path, "--smoke", "--stages", "machine,tests", "--budget-s", "300")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (tmp_path / "campaign.json").exists():
            stages = _read(tmp_path)["stages"]
            started = subprocess.run(["pgrep", "-f", f"junitxml={tmp_path}/tests.xml"],
                                     capture_output=True, text=True).stdout.strip()
            if stages["tests"]["status"] == "running" and started:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the tests stage never started")
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode == code
    stages = _read(tmp_path)["stages"]
    assert stages["machine"]["status"] == "done"
    assert stages["machine"]["result"]["backend"] == "cpu"
    assert stages["tests"]["status"] == ("interrupted" if signum == signal.SIGTERM else "running")
    # the stage's child and its pytest went with the campaign (SIGKILL included:
    # PR_SET_PDEATHSIG)
    for _ in range(100):
        left = [subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
                for pattern in (f"campaign_stages tests --out {tmp_path}",
                                f"junitxml={tmp_path}/tests.xml")]
        if not any(x.strip() for x in left):
            break
        time.sleep(0.2)
    else:
        ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True)
        pytest.fail(f"processes left behind: "
                    f"{[line for line in ps.stdout.splitlines() if str(tmp_path) in line]}")


def test_render_replaces_only_the_campaign_block(tmp_path):
    campaign = {"budget_s": 10, "smoke": True, "started": "then", "stages": {
        "machine": {"status": "done", "result": {"backend": "gpu", "devices": ["H100"]}},
        "members": {"status": "skipped for time: needs 30 s, 2 s of the budget left"}}}
    tables = campaign_render.render_markdown(campaign)
    assert "| members | skipped for time" in tables and "on gpu" in tables
    page = f"intro\n{campaign_render.BEGIN}\nold\n{campaign_render.END}\noutro\n"
    new = campaign_render.into_page(page, tables)
    assert new.startswith("intro\n") and new.endswith("\noutro\n") and "old" not in new
    with pytest.raises(ValueError, match="no <!-- campaign:begin -->"):
        campaign_render.into_page("no block", tables)


def test_the_physics_presets_are_found_where_their_packages_are():
    from benchmarks import campaign_stages
    from rljax.run.presets import PRESETS

    found = campaign_stages._jax_physics_presets()
    for family, preset, chunk in found:
        prefix = family.split()[0] + ":"
        assert str(PRESETS[preset].run.env_id).startswith(prefix) and chunk is None
    if importlib.util.find_spec("brax") is not None:
        assert any(family.startswith("brax ") for family, _, _ in found)


def test_learning_rows_give_the_iqm_over_the_seeds_finals():
    from rljax import stats

    finals = [3.0, 9.0, 1.0, 7.0, 5.0, 2.0, 8.0, 40.0]
    summary = {"num_seeds": 8, "env_steps": 100, "sps": 10.0, "final_return_mean": 9.4,
               "solved_at_step": None, "seeds": [{"final_return_mean": f} for f in finals]}
    campaign = {"budget_s": 10, "smoke": False, "started": "then", "stages": {"learning": {
        "status": "done", "note": "a note", "result": {"runs": {
            "many": {"command": "rljax train many", "wall_s": 1.0, "summary": summary},
            "one": {"command": "rljax train one", "wall_s": 1.0,
                    "summary": {**summary, "num_seeds": 1, "seeds": summary["seeds"][:1]}}}}}}}
    page = campaign_render.render_markdown(campaign)
    est = stats.interval(np.asarray(finals)[:, None], stats.iqm)
    assert float(est.point) == pytest.approx(np.mean(sorted(finals)[2:6]))
    many, one = (line for line in page.splitlines() if line.startswith("| `rljax train"))
    assert f"| {float(est.point):.1f} [{float(est.low):.1f}, {float(est.high):.1f}] |" in many
    assert many.endswith("|  |") and one.endswith("|  |  |")  # no solve step; one seed: no IQM
    assert "_a note_" in page

"""Everything accelerator-bound, measured by one command within a fixed time budget.

    python -m benchmarks.gpu_campaign --budget-s 540 --out DIR [--smoke] [--stages a,b]

Stages run in priority order (:data:`STAGES`), each in a child process with its own time cap;
a stage the remaining budget cannot hold is skipped and named as such. After every stage,
``DIR/campaign.json`` and ``DIR/campaign.md`` are rewritten (write and rename), so a campaign
killed at any moment keeps every finished stage. A stage's child also saves its partial
results as it goes (``DIR/stages/NAME.json``), so a stage cut at its cap keeps what it
measured. SIGTERM or Ctrl-C stops the running stage, records it as interrupted and exits
(143 / 130). Learning runs keep their checkpoints in ``DIR/runs``; a later campaign with the
same ``DIR`` resumes them.

``--smoke`` runs every stage at toy sizes (on a CPU in under a minute); the test suite runs
it. ``python -m benchmarks.campaign_render DIR/campaign.json --docs docs/gpu.md`` puts the
tables into docs/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

from benchmarks import campaign_stages
from benchmarks.campaign_render import render_markdown


class Stage(NamedTuple):
    """A stage: its name, the cap on its time (full, smoke), and the least time worth
    starting it with (a stage given less is skipped for time)."""

    name: str
    cap_s: float
    smoke_cap_s: float
    min_s: float
    what: str


# Smoke caps are safety nets for a loaded CPU; at toy sizes the stages take seconds.
STAGES = (
    Stage("machine", 60, 60, 5, "device, driver, versions, CPU count, matmul precision"),
    Stage("tests", 180, 120, 30, "the tests marked backend (tests/conftest.py)"),
    Stage("throughput", 150, 120, 30, "env-only ceiling and training steps/s per preset family"),
    Stage("members", 120, 120, 30, "total steps/s of 1 ... 1024 seeds in one program"),
    Stage("learning", 10_000, 180, 40, "MinAtar Breakout PPO and PQN x 16 seeds, then "
                                       "breakout-pqn, with checkpoints in DIR/runs"),
)
# After a stage's cap it gets SIGINT (a training run then saves its checkpoint), and this
# long to exit before SIGKILL.
GRACE_S = 20.0


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(out: str, campaign: dict) -> None:
    """``campaign.json`` and ``campaign.md``, each replaced whole."""
    _write_atomic(os.path.join(out, "campaign.json"), json.dumps(campaign, indent=2) + "\n")
    _write_atomic(os.path.join(out, "campaign.md"), render_markdown(campaign))


def _read_stage(out: str, name: str) -> dict | None:
    try:
        with open(os.path.join(out, "stages", f"{name}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class _Stopped(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def _run_child(stage: Stage, args, cap: float) -> tuple[str, int | None]:
    """Runs ``stage`` in a child process for at most ``cap`` seconds (then SIGINT, then
    SIGKILL after :data:`GRACE_S`); returns (status, exit code)."""
    deadline = time.time() + cap
    cmd = [sys.executable, "-m", "benchmarks.campaign_stages", stage.name, "--out", args.out,
           "--deadline", f"{deadline:.3f}"] + (["--smoke"] if args.smoke else [])
    log = open(os.path.join(args.out, "stages", f"{stage.name}.log"), "w")
    child = subprocess.Popen(cmd, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=campaign_stages.die_with_parent())
    _CURRENT["child"] = child
    try:
        try:
            code = child.wait(timeout=cap + 1.0)
            if code == campaign_stages.PARTIAL:
                return ("partly done: cut at its cap", code)
            return ("done" if code == 0 else "failed", code)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGINT)
            try:
                code = child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                code = child.wait()
            return ("timed out", code)
    finally:
        _CURRENT["child"] = None
        log.close()


def _log_tail(out: str, name: str, lines: int = 8) -> list[str]:
    try:
        with open(os.path.join(out, "stages", f"{name}.log")) as f:
            return f.read().strip().splitlines()[-lines:]
    except OSError:
        return []


_CURRENT: dict = {"child": None}


def _stop(signum, frame):
    child = _CURRENT["child"]
    if child is not None and child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise _Stopped(signum)


def run_campaign(args) -> int:
    os.makedirs(os.path.join(args.out, "stages"), exist_ok=True)
    chosen = [s for s in STAGES if not args.stages or s.name in args.stages]
    campaign = {"budget_s": args.budget_s, "smoke": args.smoke,
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "finished": None,
                "stages": {s.name: {"status": "pending", "what": s.what} for s in chosen}}
    save(args.out, campaign)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    start, began, current = time.monotonic(), time.monotonic(), None
    try:
        for stage in chosen:
            current, began = stage, time.monotonic()
            _run_stage(stage, args, campaign, args.budget_s - (began - start))
    except _Stopped as stop:
        campaign["stages"][current.name].update(
            status="interrupted", wall_s=round(time.monotonic() - began, 1),
            result=_read_stage(args.out, current.name))
        save(args.out, campaign)
        return 130 if stop.signum == signal.SIGINT else 143
    campaign["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    campaign["wall_s"] = round(time.monotonic() - start, 1)
    save(args.out, campaign)
    return 0


def _run_stage(stage: Stage, args, campaign: dict, left: float) -> None:
    """Runs one stage within ``left`` seconds of budget (or skips it) and saves the
    campaign with its record."""
    cap = min(stage.smoke_cap_s if args.smoke else stage.cap_s, left - GRACE_S)
    record = campaign["stages"][stage.name]
    if cap < stage.min_s:
        record["status"] = (f"skipped for time: needs {stage.min_s:.0f} s, "
                            f"{max(left, 0.0):.0f} s of the budget left")
        save(args.out, campaign)
        return
    began = time.monotonic()
    record.update(status="running", cap_s=round(cap, 1))
    save(args.out, campaign)
    status, code = _run_child(stage, args, cap)
    record.update(status=status, exit_code=code, wall_s=round(time.monotonic() - began, 1),
                  result=_read_stage(args.out, stage.name))
    if status == "failed":
        record["log_tail"] = _log_tail(args.out, stage.name)
    save(args.out, campaign)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=540.0,
                        help="the whole campaign's time, in seconds (default 540)")
    parser.add_argument("--out", required=True, help="folder for campaign.json, "
                        "campaign.md, the stages' files and the learning runs")
    parser.add_argument("--smoke", action="store_true",
                        help="every stage at toy sizes (a CPU check of the campaign itself)")
    parser.add_argument("--stages", type=lambda s: s.split(","), default=None,
                        help="a comma-separated subset of: "
                             + ", ".join(s.name for s in STAGES))
    args = parser.parse_args(argv)
    unknown = set(args.stages or ()) - {s.name for s in STAGES}
    if unknown:
        parser.error(f"unknown stage(s) {sorted(unknown)}; the stages are "
                     + ", ".join(s.name for s in STAGES))
    if args.budget_s <= 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    return run_campaign(args)


# The stage functions live in campaign_stages.py (run there as ``python -m
# benchmarks.campaign_stages NAME``); named here so that the one list above stays the
# order and the caps, and a stage without a function fails at import, not mid-campaign.
assert all(s.name in campaign_stages.FUNCTIONS for s in STAGES)

if __name__ == "__main__":
    sys.exit(main())

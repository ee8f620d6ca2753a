"""The scaling matrix: processes {1, 2} x CPU devices per process {1, 2} x members {1, one
per device, two per device}, for an envpool preset and a JAX-native one, plus a --sweep
across processes; each cell is an ``rljax train`` command line (two processes on
localhost for the two-process cells) under a hard time limit, so a hang shows as
``timeout`` rather than stalling the table.

    python -m benchmarks.scaling_matrix [--total-steps N] [--limit SECONDS] [--only PRESET]

Writes ``benchmarks/results/scaling_matrix.json`` and prints the markdown table of
docs/scaling.md (cell, exit, wall time, members finished and solved, and whether each
member equals the same member in one process on one device). One member on several
devices is one agent learning data-parallel (docs/scaling.md), which an on-policy agent
does not promise to equal; more members are seeds (or sweep values x seeds), and each
member's episode count and final return (mean of its last 100 episodes) are compared with
the one-device run of the same members, run here too where no cell is that run. Exits 1
unless every command exits 0.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks.common import RESULTS_DIR, machine

PRESETS = ("cartpole-a2c", "gymnax-cartpole-ppo")
SWEEP = ("cartpole-a2c", "--sweep", "actor_lr=3e-4,1e-3")


def cells() -> list[tuple[str, int, int, int, tuple]]:
    """(preset, processes, devices per process, members, extra args), each shape once."""
    out = []
    for preset in PRESETS:
        for procs in (1, 2):
            for per in (1, 2):
                devices = procs * per
                for members in sorted({1, devices, 2 * devices}):
                    out.append((preset, procs, per, members, ()))
    out.append((SWEEP[0], 2, 2, 4, SWEEP[1:]))  # 2 values x 2 seeds over 4 devices
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cell(preset: str, procs: int, per: int, members: int, extra: tuple,
             total_steps: int, limit: float, logdir: str) -> dict:
    seeds = members // (2 if extra else 1)
    args = [sys.executable, "-m", "rljax.run.cli", "train", preset, "--seeds", str(seeds),
            "--devices", str(procs * per), "--total-steps", str(total_steps), "--quiet",
            "--no-tensorboard", "--logdir", logdir, *extra]
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={per}")
    port = _port()
    commands = [args + (["--distributed", "--coordinator", f"127.0.0.1:{port}",
                         "--num-processes", str(procs), "--process-id", str(i)]
                        if procs > 1 else []) for i in range(procs)]
    start = time.perf_counter()
    running = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for c in commands]
    codes = []
    for p in running:
        try:
            p.communicate(timeout=max(1.0, limit - (time.perf_counter() - start)))
            codes.append(p.returncode)
        except subprocess.TimeoutExpired:
            codes.append("timeout")
    for p in running:
        p.kill()
    wall = time.perf_counter() - start
    summaries = glob.glob(os.path.join(logdir, "*", "summary.json"))
    each = []
    if summaries:
        summary = json.load(open(summaries[0]))
        done = summary["env_steps"] >= total_steps
        each = [dict(m, finished=done) for m in summary.get("seeds", [summary])]
    return {"preset": preset, "processes": procs, "devices_per_process": per,
            "members": members, "extra": list(extra), "exit": codes, "wall_s": wall,
            "members_finished": sum(m["finished"] for m in each),
            "members_solved": sum(m["solved_at_step"] is not None for m in each),
            "each": [{k: m.get(k) for k in ("episodes", "final_return_mean")} for m in each],
            "total_steps": total_steps}


def _same(a: dict, b: dict) -> bool:
    """One member's episode count equal and final return within rounding of another's."""
    ra, rb = a["final_return_mean"], b["final_return_mean"]
    return a["episodes"] == b["episodes"] and (ra == rb or (
        ra is not None and rb is not None and abs(ra - rb) <= 1e-3 * max(1.0, abs(rb))))


def compare(rows: list[dict], references: dict) -> None:
    """Sets each row's ``equal``: how many members equal the one-device run's (None where
    nothing is promised: one agent learning data-parallel, or no reference)."""
    for r in rows:
        ref = references.get((r["preset"], r["members"], tuple(r["extra"])))
        devices = r["processes"] * r["devices_per_process"]
        if (devices == 1 or r["members"] == 1 or ref is None or not r["each"]
                or len(ref["each"]) != len(r["each"])):
            r["equal"] = None
            continue
        r["equal"] = sum(_same(a, b) for a, b in zip(r["each"], ref["each"], strict=True))


def table(rows: list[dict]) -> str:
    lines = ["| preset | processes x devices | members | exit | wall s | finished | solved "
             "| equal to one device |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = r["preset"] + (" " + " ".join(r["extra"]) if r["extra"] else "")
        exits = ",".join(str(c) for c in r["exit"])
        n = r["members"]
        equal = r.get("equal")
        equal = ("data-parallel" if r["members"] == 1 and r["processes"]
                 * r["devices_per_process"] > 1 else "-") if equal is None else f"{equal}/{n}"
        lines.append(f"| {name} | {r['processes']} x {r['devices_per_process']} | {n} | "
                     f"{exits} | {r['wall_s']:.0f} | {r['members_finished']}/{n} | "
                     f"{r['members_solved']}/{n} | {equal} |")
    return "\n".join(lines)


def _one_device(preset: str, members: int, extra: tuple, args) -> dict:
    with tempfile.TemporaryDirectory() as logdir:
        return run_cell(preset, 1, 1, members, extra, args.total_steps, args.limit, logdir)


def _write(rows: list[dict], references: dict) -> None:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    extra = [r for r in references.values() if r not in rows]
    with open(os.path.join(RESULTS_DIR, "scaling_matrix.json"), "w") as f:
        json.dump({"machine": machine(), "load": os.getloadavg(), "cells": rows,
                   "one_device_references": extra}, f, indent=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds a cell may take before it counts as hung")
    parser.add_argument("--only", help="run the cells of this preset only")
    parser.add_argument("--start", type=int, default=0,
                        help="go on from this cell (in the order run), keeping the results "
                        "file's earlier cells")
    args = parser.parse_args(argv)
    # The two-process cells first (the docs' 2 x 2 x 8 command leads), each followed by
    # its result in the JSON file and on stdout, so a stopped run keeps what it measured.
    def order(cell):  # two processes first, two devices each, two members per device
        preset, procs, per, members, extra = cell
        return -procs, -per, members != 2 * procs * per, preset != PRESETS[0], bool(extra)

    todo = sorted((c for c in cells() if not args.only or c[0] == args.only), key=order)
    rows, references = [], {}
    if args.start:
        with open(os.path.join(RESULTS_DIR, "scaling_matrix.json")) as f:
            kept = json.load(f)
        rows = kept["cells"][:args.start]
        for r in rows + kept["one_device_references"]:
            if r["processes"] * r["devices_per_process"] == 1:
                references[(r["preset"], r["members"], tuple(r["extra"]))] = r
    for preset, procs, per, members, extra in todo[args.start:]:
        key = (preset, members, tuple(extra))
        if procs * per > 1 and members > 1 and key not in references:
            references[key] = _one_device(*key, args)  # the same members on one device
        with tempfile.TemporaryDirectory() as logdir:
            rows.append(run_cell(preset, procs, per, members, extra, args.total_steps,
                                 args.limit, logdir))
        if procs * per == 1:
            references.setdefault(key, rows[-1])
        compare(rows[-1:], references)
        _write(rows, references)
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    everything = rows + list(references.values())
    return 0 if all(c == 0 for r in everything for c in r["exit"]) else 1


if __name__ == "__main__":
    sys.exit(main())

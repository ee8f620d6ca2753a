"""The scaling matrix: processes {1, 2} x CPU devices per process {1, 2} x members {1, one
per device, two per device}, for an envpool preset and a JAX-native one, plus a --sweep
across processes; each cell is an ``rljax train`` command line (two processes on
localhost for the two-process cells) under a hard time limit, so a hang shows as
``timeout`` rather than stalling the table.

    python -m benchmarks.scaling_matrix [--total-steps N] [--limit SECONDS] [--only PRESET]

Writes ``benchmarks/results/scaling_matrix.json`` and prints the markdown table of
docs/scaling.md (cell, exit, wall time, members solved). One member on several devices is
one agent learning data-parallel (docs/scaling.md); more members are seeds.
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
    solved = None
    summaries = glob.glob(os.path.join(logdir, "*", "summary.json"))
    if summaries:
        summary = json.load(open(summaries[0]))
        solved = summary.get("seeds_solved", int(summary.get("solved_at_step") is not None))
    return {"preset": preset, "processes": procs, "devices_per_process": per,
            "members": members, "extra": list(extra), "exit": codes, "wall_s": wall,
            "members_solved": solved, "total_steps": total_steps}


def table(rows: list[dict]) -> str:
    lines = ["| preset | processes x devices | members | exit | wall s | members solved |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = r["preset"] + (" " + " ".join(r["extra"]) if r["extra"] else "")
        exits = ",".join(str(c) for c in r["exit"])
        solved = "-" if r["members_solved"] is None else f"{r['members_solved']}/{r['members']}"
        lines.append(f"| {name} | {r['processes']} x {r['devices_per_process']} | "
                     f"{r['members']} | {exits} | {r['wall_s']:.0f} | {solved} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds a cell may take before it counts as hung")
    parser.add_argument("--only", help="run the cells of this preset only")
    args = parser.parse_args(argv)
    rows = []
    for preset, procs, per, members, extra in cells():
        if args.only and preset != args.only:
            continue
        with tempfile.TemporaryDirectory() as logdir:
            rows.append(run_cell(preset, procs, per, members, extra, args.total_steps,
                                 args.limit, logdir))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "scaling_matrix.json"), "w") as f:
        json.dump({"machine": machine(), "load": os.getloadavg(), "cells": rows}, f, indent=1)
    print(table(rows))
    return 0 if all(c == 0 for r in rows for c in r["exit"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The scaling matrix: processes {1, 2} x CPU devices per process {1, 2} x members {1, one
per device, two per device}, for an envpool preset and a JAX-native one, plus a --sweep
across processes; each cell is an ``rljax train`` command line (two processes on
localhost for the two-process cells) under a hard time limit, so a hang shows as
``timeout`` rather than stalling the table.

    python -m benchmarks.scaling_matrix [--total-steps N | --solve] [--limit SECONDS]
        [--only PRESET] [--start K | --cells I,J] [--stop-after S] [--table]

Writes ``benchmarks/results/scaling_matrix.json`` (``scaling_matrix_solve.json`` with
``--solve``) and prints the markdown tables of docs/scaling.md (cell, exit, wall time,
members finished and solved, and whether each member equals the same member in one
process on one device). A member has solved when the mean return of its last 100
episodes reached the preset's threshold (``solved_at_step`` of its summary); ``--solve``
gives each preset the budget its members solve within (:data:`SOLVE_STEPS`). One member
on several devices is one agent learning data-parallel (docs/scaling.md), which an
on-policy agent does not promise to equal; more members are seeds (or sweep values x
seeds), and each member's episode count and final return (mean of its last 100 episodes)
are compared with the one-device run of the same members, run here too where no cell is
that run. Not with ``--solve``: over a long run float rounding makes the layouts'
trajectories part (docs/scaling.md), so only the solved counts are compared there. Exits
1 unless every command exits 0.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks.common import RESULTS_DIR, machine

PRESETS = ("cartpole-a2c", "gymnax-cartpole-ppo")
SWEEP = ("cartpole-a2c", "--sweep", "actor_lr=3e-4,1e-3")
# Env steps per member within which the presets' seeds solve in docs/results.md
# (gymnax-cartpole-ppo at 62k-113k, cartpole-a2c at 195k-496k: its own budget).
SOLVE_STEPS = {"cartpole-a2c": 500_000, "gymnax-cartpole-ppo": 150_000}


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


def command_lines(preset: str, procs: int, per: int, members: int, extra: tuple,
                  total_steps: int, logdir: str, port: int) -> tuple[dict, list[list[str]]]:
    """The environment and the ``rljax train`` argv of each process of one cell."""
    seeds = members // (2 if extra else 1)
    args = [sys.executable, "-m", "rljax.run.cli", "train", preset, "--seeds", str(seeds),
            "--devices", str(procs * per), "--total-steps", str(total_steps), "--quiet",
            "--no-tensorboard", "--logdir", logdir, *extra]
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={per}")
    return env, [args + (["--distributed", "--coordinator", f"127.0.0.1:{port}",
                          "--num-processes", str(procs), "--process-id", str(i)]
                         if procs > 1 else []) for i in range(procs)]


def _children_cpu() -> float:
    """CPU seconds of this process's finished children: a cell that ran out of time
    with little CPU was starved or hung, with much, slow."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def run_cell(preset: str, procs: int, per: int, members: int, extra: tuple,
             total_steps: int, limit: float, logdir: str) -> dict:
    env, commands = command_lines(preset, procs, per, members, extra, total_steps, logdir,
                                  _port())
    start, cpu = time.perf_counter(), _children_cpu()
    running = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for c in commands]
    codes, errors = [], []
    for p in running:
        try:
            _, err = p.communicate(timeout=max(1.0, limit - (time.perf_counter() - start)))
            codes.append(p.returncode)
            if p.returncode:  # the last lines of a failed process, for its row
                errors.append("\n".join(err.strip().splitlines()[-3:]))
        except subprocess.TimeoutExpired:
            codes.append("timeout")
    for p in running:
        p.kill()
        p.wait()
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    summaries = glob.glob(os.path.join(logdir, "*", "summary.json"))
    each = []
    if summaries:
        summary = json.load(open(summaries[0]))
        done = summary["env_steps"] >= total_steps
        each = [dict(m, finished=done) for m in summary.get("seeds", [summary])]
    return {"preset": preset, "processes": procs, "devices_per_process": per,
            "members": members, "extra": list(extra), "exit": codes, "wall_s": wall,
            "cpu_s": cpu,
            "members_finished": sum(m["finished"] for m in each),
            "members_solved": sum(m["solved_at_step"] is not None for m in each),
            "each": [{k: m.get(k) for k in ("episodes", "final_return_mean", "solved_at_step")}
                     for m in each],
            "total_steps": total_steps, "load": list(os.getloadavg()), "errors": errors}


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
    lines = ["| preset | env steps per member | processes x devices | members | exit | wall s "
             "| CPU s | finished | solved | equal to one device | load (1 min) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = r["preset"] + (" " + " ".join(r["extra"]) if r["extra"] else "") + (
            " (one-device reference)" if r.get("reference") else "")
        exits = ",".join(str(c) for c in r["exit"])
        n = r["members"]
        equal = r.get("equal")
        equal = ("data-parallel" if r["members"] == 1 and r["processes"]
                 * r["devices_per_process"] > 1 else "-") if equal is None else (
                     f"{equal}/{n}" if isinstance(equal, int) else equal)
        load = f"{r['load'][0]:.1f}" if "load" in r else "-"
        cpu = f"{r['cpu_s']:.0f}" if "cpu_s" in r else "-"
        lines.append(f"| {name} | {r['total_steps']:,} | {r['processes']} x "
                     f"{r['devices_per_process']} | {n} | {exits} | {r['wall_s']:.0f} | {cpu} | "
                     f"{r['members_finished']}/{n} | {r['members_solved']}/{n} | {equal} "
                     f"| {load} |")
    return "\n".join(lines)


def _one_device(preset: str, members: int, extra: tuple, args) -> dict:
    with tempfile.TemporaryDirectory() as logdir:
        return run_cell(preset, 1, 1, members, extra, args.total_steps, args.limit, logdir)


def _path(solve: bool) -> str:
    return os.path.join(RESULTS_DIR, f"scaling_matrix{'_solve' if solve else ''}.json")


def _write(rows: list[dict], references: dict, solve: bool) -> None:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    extra = [r for r in references.values() if r not in rows]
    with open(_path(solve), "w") as f:
        json.dump({"machine": machine(), "load": os.getloadavg(), "cells": rows,
                   "one_device_references": extra}, f, indent=1)


def _key(cell: dict | tuple) -> tuple:
    """A cell's shape, from a row of the results file or a cell of :func:`cells`."""
    if isinstance(cell, dict):
        return (cell["preset"], cell["processes"], cell["devices_per_process"],
                cell["members"], tuple(cell["extra"]))
    return tuple(cell)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--solve", action="store_true",
                        help="each preset at the env steps its members solve within "
                        f"({', '.join(f'{k} {v:,}' for k, v in SOLVE_STEPS.items())}), "
                        "without the one-device comparison")
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds a cell may take before it counts as hung")
    parser.add_argument("--only", help="run the cells of this preset only")
    parser.add_argument("--start", type=int, default=0,
                        help="go on from this cell (in the order run), keeping the results "
                        "file's earlier cells")
    parser.add_argument("--cells", type=lambda v: [int(i) for i in v.split(",")],
                        help="run these cells only (their numbers in the order run, as "
                        "I,J,...), keeping the results file's other cells")
    parser.add_argument("--stop-after", type=float, default=float("inf"),
                        help="start no cell after this many seconds")
    parser.add_argument("--table", action="store_true",
                        help="print the results file's table (its cells, then the one-device "
                        "references no cell is) and run nothing")
    args = parser.parse_args(argv)
    if args.table:
        with open(_path(args.solve)) as f:
            kept = json.load(f)
        print(table(kept["cells"] + [dict(r, reference=True)
                                     for r in kept["one_device_references"]]))
        return 0
    # The two-process cells first (the docs' 2 x 2 x 8 command leads), each followed by
    # its result in the JSON file and on stdout, so a stopped run keeps what it measured.
    def order(cell):  # two processes first, two devices each, two members per device
        preset, procs, per, members, extra = cell
        return -procs, -per, members != 2 * procs * per, preset != PRESETS[0], bool(extra)

    todo = sorted((c for c in cells() if not args.only or c[0] == args.only), key=order)
    rows, references = [], {}
    if (args.start or args.cells) and os.path.exists(_path(args.solve)):
        with open(_path(args.solve)) as f:
            kept = json.load(f)
        rerun = {_key(c) for c in (todo[args.start:] if args.start else
                                   [todo[i] for i in args.cells])}
        rows = [r for r in kept["cells"] if _key(r) not in rerun]
        for r in rows + kept["one_device_references"]:
            if r["processes"] * r["devices_per_process"] == 1 and not any(r["exit"]):
                references[(r["preset"], r["members"], tuple(r["extra"]))] = r
    began = time.perf_counter()
    for preset, procs, per, members, extra in (todo[args.start:] if not args.cells
                                               else [todo[i] for i in args.cells]):
        if time.perf_counter() - began > args.stop_after:
            break
        key = (preset, members, tuple(extra))
        if (procs * per > 1 and members > 1 and key not in references
                and not args.solve):
            references[key] = _one_device(*key, args)  # the same members on one device
        steps = SOLVE_STEPS[preset] if args.solve else args.total_steps
        with tempfile.TemporaryDirectory() as logdir:
            row = run_cell(preset, procs, per, members, extra, steps, args.limit, logdir)
        if procs * per == 1:
            references.setdefault(key, row)
        compare([row], references)
        if args.solve and procs * per > 1 and members > 1:
            row["equal"] = "not compared"
        rows = sorted(rows + [row], key=lambda r: order(_key(r)))
        _write(rows, references, args.solve)
        print(table([row]).splitlines()[-1], flush=True)
    print(table(rows))
    everything = rows + list(references.values())
    return 0 if all(c == 0 for r in everything for c in r["exit"]) else 1


if __name__ == "__main__":
    sys.exit(main())

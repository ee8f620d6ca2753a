"""Start-up time of ``rljax train PRESET``: from the command to the first progress row.

Each trial starts the CLI in a fresh process, reads its stderr until the first progress
row (the line that shows steps/s) and stops the process there. A "cold" trial runs with
an empty JAX compilation cache, a "warm" one right after it with the cache the cold one
left (``RLJAX_COMPILE_CACHE=0`` measures a run without the cache).

    python benchmarks/startup.py cartpole-a2c cartpole-dqn cartpole-ppo cartpole-pqn
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

_ROW = re.compile(r"steps/s")


def first_row_s(preset: str, env: dict, logdir: str, timeout: float = 300.0) -> dict:
    """Seconds from starting ``rljax train PRESET`` to its first progress row, and the
    phase lines it printed before that row."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rljax.run.cli", "train", preset,
                             "--logdir", logdir, "--no-tensorboard"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env, cwd=os.path.dirname(logdir))  # rljax from PYTHONPATH
    phases: list[str] = []
    try:
        for line in proc.stderr:
            if _ROW.search(line):
                return {"first_row_s": time.perf_counter() - start, "phases": phases}
            phases.append(line.strip())
            if time.perf_counter() - start > timeout:
                break
        raise RuntimeError(f"{preset}: no progress row; stderr: {phases[-5:]}")
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="+")
    parser.add_argument("--no-cache", action="store_true",
                        help="measure without the compilation cache (RLJAX_COMPILE_CACHE=0)")
    args = parser.parse_args(argv)
    out = {}
    for preset in args.presets:
        tmp = tempfile.mkdtemp(prefix="rljax-startup-")
        env = dict(os.environ, RLJAX_CACHE_DIR=os.path.join(tmp, "cache"))
        if args.no_cache:
            env["RLJAX_COMPILE_CACHE"] = "0"
        try:
            cold = first_row_s(preset, env, os.path.join(tmp, "runs"))
            warm = first_row_s(preset, env, os.path.join(tmp, "runs"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        out[preset] = {"cold_s": round(cold["first_row_s"], 2),
                       "warm_s": round(warm["first_row_s"], 2), "warm_phases": warm["phases"]}
        print(json.dumps({preset: out[preset]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

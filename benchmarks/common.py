"""Helpers shared by the benchmarks: timing, env-only ceilings, result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import jax

from rljax.run.bench import make_random_rollout  # noqa: F401 (re-exported for the benchmarks)
from rljax.run.build import build
from rljax.run.logging import to_jsonable

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    return {
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def timed_wall_cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, process CPU) seconds of ``fn()``; CPU / wall is the cores it kept busy."""
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - wall, time.process_time() - cpu




def interleaved(measure: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Runs each measurement ``rounds`` times, interleaved, so that machine noise
    hits all of them alike; returns steps/s per round."""
    out: dict[str, list[float]] = {name: [] for name in measure}
    for _ in range(rounds):
        for name, fn in measure.items():
            out[name].append(fn())
    return out


def compiled_chunk(run, tracing: Callable[[], contextlib.AbstractContextManager] =
                   contextlib.nullcontext) -> dict:
    """A run's training chunk built, compiled with ``tracing()`` active while it is traced,
    and called once to warm up: ``{"chunk", "state", "steps"}`` for :func:`chunk_seconds`
    (and ``"env"``: an envpool pool lives as long as its env object, which the chunk steps
    through a handle)."""
    env, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    with tracing():
        chunk = trainer.chunk.lower(state).compile()
    state, _ = chunk(state)
    return {"chunk": chunk, "state": jax.block_until_ready(state),
            "steps": trainer.steps_per_chunk, "env": env}


def chunk_call(run) -> tuple[Callable[[], object], int]:
    """A run's :func:`compiled_chunk` as a call that carries its state on, and the env steps
    one call makes over all members."""
    program = compiled_chunk(run)

    def call():
        program["state"], _ = program["chunk"](program["state"])
        return program["state"]
    return call, run.num_members * program["steps"]


def chunk_seconds(programs: dict[str, dict], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each :func:`compiled_chunk`, ``rounds`` calls each, interleaved,
    every program carrying its own state on."""
    def call(program: dict) -> Callable[[], float]:
        def step():
            program["state"], _ = program["chunk"](program["state"])
            return program["state"]
        return lambda: timed(step)

    return interleaved({name: call(p) for name, p in programs.items()}, rounds)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def write_results(name: str, data: dict) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    with open(path, "w") as f:
        json.dump(to_jsonable(data), f, indent=2)
        f.write("\n")
    return path


def add_result(path: str, key: str, entry: dict) -> None:
    """Sets ``key`` of the JSON table at ``path`` to ``entry`` and this machine, keeping the
    other keys (the tables that gather runs over time: stability, frozen_policy)."""
    data = {}
    if os.path.isfile(path):
        with open(path) as f:
            data = json.load(f)
    data[key] = dict(entry, machine=machine())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)

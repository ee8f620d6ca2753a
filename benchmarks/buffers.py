"""Replay-buffer micro-benchmarks: rljax buffers vs flashbax's prioritised buffer (if installed).

Run ``python -m benchmarks.buffers`` (or ``python benchmarks/buffers.py``); writes
``benchmarks/results/buffers.json`` and prints a table. Every operation is jitted on CPU and
timed per call with ``block_until_ready``; the median of ``--reps`` calls is reported (the
minimum too), warmup excluded. ``add`` and ``update`` donate the buffer state so they run in
place. All operations of a transition kind are timed round-robin, one call each per round,
so that load from other processes on the machine hits rljax and flashbax alike.

Cases, at capacity 100k: CartPole-sized n-step transitions (obs float32 [4]) in the uniform and
the prioritized flat buffers, and Atari 4x84x84 transitions in the frame-stack buffer (uniform
and prioritized, n = 3). Operations: add 8 transitions (one per env), sample 32 and 128, update
32 and 128 priorities. flashbax (optional ``bench`` extra) runs the same operations on
``make_prioritised_flat_buffer`` with the same shapes; its items are single timesteps
(obs, action, reward, done), sampled as (first, second) pairs, so its Atari item stores one
4-frame stack.

Three timings per operation: ``call`` (one jitted call each, dispatch included, as the
reference figures for flashbax were taken), ``scan`` (a 1024-operation compiled
``lax.scan``, as in a training loop's chunk, where dispatch disappears; its time / 1024) and
``marginal`` (the cost of each further operation in a compiled scan, from 128- and
1024-operation scans: what a training loop pays per operation once its fixed per-program
cost is amortized). A ``no-op (dispatch)`` row times a jitted call that takes the
prioritized CartPole state (donated) and an update's arguments and returns the state: the
per-call floor that JAX's dispatch sets for any buffer.
Samples read the state as a program argument, adds and updates carry it donated, so none
times a copy of the buffer.
Atari sampling is not timed in a scan: keeping
megabytes of sampled frames alive per op would time the checksum, not the buffer.

On CPU rljax's sum-tree, prioritized draw and row gather run as native kernels
(:mod:`rljax.buffers._native`); ``RLJAX_NATIVE=0 python -m benchmarks.buffers`` times the
pure-JAX version that other backends run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from rljax.buffers import make_atari_replay, make_prioritized, make_replay
from rljax.buffers.nstep import NStepTransition
from rljax.types import Transition

CAPACITY = 100_000
NUM_ENVS = 8
SAMPLE_SIZES = (32, 128)
ATARI_OBS = (4, 84, 84)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "buffers.json")


@dataclass
class Case:
    """One timed operation: ``out = fn(chain["state"], *inputs[i])``."""

    buffer: str
    transition: str
    op: str
    fn: Callable
    chain: dict
    inputs: list[tuple]
    stateful: bool
    times: list[float] = field(default_factory=list)

    def call(self, i: int, record: bool) -> None:
        args = (self.chain["state"], *self.inputs[i % len(self.inputs)])
        start = time.perf_counter()
        out = self.fn(*args)
        jax.block_until_ready(out)
        if record:
            self.times.append(time.perf_counter() - start)
        if self.stateful:
            self.chain["state"] = out


def run_round_robin(cases: list[Case], reps: int, warmup: int = 20) -> list[dict]:
    for i in range(warmup + reps):
        for case in cases:
            case.call(i, record=i >= warmup)
    return [
        dict(
            buffer=c.buffer,
            transition=c.transition,
            op=c.op,
            us=float(np.median(c.times) * 1e6),
            min_us=float(np.min(c.times) * 1e6),
        )
        for c in cases
    ]


SCAN_LENGTHS = (128, 1024)  # marginal from both, the per-op figure from the longer


def scan_program(case: Case, length: int) -> tuple[Callable, Any]:
    """``length`` operations of ``case`` in one compiled ``lax.scan``, and its input.

    ``add`` and ``update`` carry the (donated) state through the scan, as a loop does.
    ``sample`` reads a state passed to the compiled program as an argument: carrying it
    unchanged would make the program return a fresh copy of the whole buffer each call
    (megabytes), which is no part of sampling and would be charged to it."""
    if case.stateful and sum(x.size for x in jax.tree.leaves(case.inputs[0])) > 2**16:
        # Atari adds: slicing a stacked input of megabytes per step would time the slice
        # (in a loop the step's frames come straight from the env); add one batch each time.
        def add_scan(state, batch, fn=case.fn):
            return jax.lax.scan(lambda s, _: (fn(s, *batch), None), state, None, length)

        return jax.jit(add_scan, donate_argnums=0), case.inputs[0]
    xs = [case.inputs[i % len(case.inputs)] for i in range(length)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *xs)
    if case.stateful:
        def carry_scan(state, xs, fn=case.fn):
            return jax.lax.scan(lambda s, args: (fn(s, *args), None), state, xs)

        return jax.jit(carry_scan, donate_argnums=0), stacked

    def read_scan(state, xs, fn=case.fn):
        def body(total, args):
            # Consume every sampled array so that nothing is dead code.
            out = fn(state, *args)
            return total + sum(jnp.sum(y.astype(jnp.float32)) for y in jax.tree.leaves(out)), None

        return jax.lax.scan(body, jnp.zeros(()), xs)[0]

    return jax.jit(read_scan), stacked


def run_in_scan(cases: list[Case], reps: int) -> dict[tuple, tuple[float, float] | None]:
    """Per operation inside compiled scans, as in a training loop, where per-call dispatch
    disappears: ``(median time of a 1024-op scan / 1024, marginal cost)``, in microseconds.

    The marginal cost is ``(T_1024 - T_128) / 896`` from the medians of a 1024-op and a
    128-op scan of the same operation: what each further operation adds once the program
    runs. Every program also carries a fixed cost per execution (dispatch, launch, first
    touches of the state: 40-750 us here, for rljax and flashbax alike); a training chunk of
    thousands of operations amortizes it, and so does the 1024-op figure (earlier versions
    timed 64-op scans, where it was most of an update's "per-op" time)."""
    runs = []  # (case index, length, program, input)
    for j, case in enumerate(cases):
        if not case.stateful:
            out = jax.eval_shape(case.fn, case.chain["state"], *case.inputs[0])
            if max(x.size for x in jax.tree.leaves(out)) > 2**16:
                continue  # consuming megabytes of sampled frames per op would time the checksum
        for length in SCAN_LENGTHS:
            runs.append((j, length, *scan_program(case, length)))
    times: dict[tuple[int, int], list[float]] = {}
    for i in range(reps + 2):
        for j, length, program, xs in runs:
            case = cases[j]
            start = time.perf_counter()
            out = jax.block_until_ready(program(case.chain["state"], xs))
            if i >= 2:
                times.setdefault((j, length), []).append(time.perf_counter() - start)
            if case.stateful:
                case.chain["state"] = out[0]
    short, long = SCAN_LENGTHS
    result = {}
    for j, c in enumerate(cases):
        if (j, short) not in times:
            result[(c.buffer, c.transition, c.op)] = None
            continue
        t_short, t_long = (float(np.median(times[(j, n)])) for n in SCAN_LENGTHS)
        result[(c.buffer, c.transition, c.op)] = (
            t_long * 1e6 / long, (t_long - t_short) * 1e6 / (long - short))
    return result


def cartpole_batch(rng: np.random.Generator, b: int) -> NStepTransition:
    return NStepTransition(
        obs=jnp.asarray(rng.normal(size=(b, 4)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, b), jnp.int32),
        reward=jnp.ones(b, jnp.float32),
        discount=jnp.full(b, 0.99, jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(b, 4)), jnp.float32),
    )


def atari_step(rng: np.random.Generator, b: int) -> Transition:
    obs = jnp.asarray(rng.integers(0, 255, (b, *ATARI_OBS)), jnp.uint8)
    return Transition(
        obs=obs,
        action=jnp.asarray(rng.integers(0, 4, b), jnp.int32),
        reward=jnp.zeros(b, jnp.float32),
        terminated=jnp.zeros(b, bool),
        truncated=jnp.zeros(b, bool),
        next_obs=jnp.concatenate([obs[:, 1:], obs[:, :1]], axis=1),  # a shifted stack
    )


def filled(add: Callable, state: Any, batch: Any) -> Any:
    """The state after enough adds to wrap the ring (setup, not timed)."""
    steps = CAPACITY // NUM_ENVS + 10

    def fill(state, batch):
        return jax.lax.fori_loop(0, steps, lambda _, s: add(s, batch), state)

    return jax.jit(fill, donate_argnums=0)(state, batch)


def copy_state(state: Any) -> Any:
    return jax.tree.map(lambda x: x.copy(), state)


def rljax_cases(kind: str, rng: np.random.Generator) -> list[Case]:
    """Add / sample / update cases of rljax's buffers; one state chain per buffer and role."""
    if kind == "cartpole":
        example = jax.tree.map(lambda x: x[0], cartpole_batch(rng, 1))
        batches = [(cartpole_batch(rng, NUM_ENVS),) for _ in range(16)]
        makers = {
            "uniform": lambda k: make_replay(CAPACITY, k),
            "prioritized": lambda k: make_prioritized(CAPACITY, k, alpha=0.6),
        }
    else:
        example = jax.tree.map(lambda x: x[0], atari_step(rng, 1))
        batches = [(atari_step(rng, NUM_ENVS),) for _ in range(4)]
        makers = {
            "uniform": lambda k: make_atari_replay(CAPACITY, NUM_ENVS, k, n=3),
            "prioritized": lambda k: make_atari_replay(CAPACITY, NUM_ENVS, k, n=3, alpha=0.6),
        }
    keys = [(k,) for k in jax.random.split(jax.random.key(0), 64)]
    cases = []
    for name, make in makers.items():
        buf = make(SAMPLE_SIZES[0])
        main = {"state": filled(buf.add, buf.init(example), batches[0][0])}
        adding = {"state": copy_state(main["state"])}
        add = jax.jit(buf.add, donate_argnums=0)
        cases.append(Case(name, kind, f"add {NUM_ENVS}", add, adding, batches, True))
        if kind == "atari":  # the loop may pass `first` instead of having it detected
            given = [(b, None, jnp.zeros(NUM_ENVS, bool)) for (b,) in batches]
            op = f"add {NUM_ENVS}, first given"
            cases.append(Case(name, kind, op, add, adding, given, True))
        for k in SAMPLE_SIZES:
            buf = make(k)
            sample = (
                buf.sample if name == "uniform" else lambda s, key, b=buf: b.sample(s, key, 0.4)
            )
            cases.append(Case(name, kind, f"sample {k}", jax.jit(sample), main, keys, False))
        if name == "prioritized":
            for k in SAMPLE_SIZES:
                buf = make(k)
                td = [jnp.asarray(rng.normal(size=k), jnp.float32) for _ in range(8)]
                inputs = [
                    (buf.sample(main["state"], key).indices, d)
                    for (key,), d in zip(keys[:8], td, strict=True)
                ]
                update = jax.jit(buf.update_priorities, donate_argnums=0)
                cases.append(Case(name, kind, f"update {k}", update, main, inputs, True))
            if kind == "cartpole":
                # The per-call floor: a jitted call that takes the same donated state and
                # arguments and does nothing. Per-call figures above it are dispatch.
                noop = jax.jit(lambda state, *args: state, donate_argnums=0)
                floor = {"state": copy_state(main["state"])}
                cases.append(Case(name, kind, "no-op (dispatch)", noop, floor, inputs, True))
    return cases


def flashbax_cases(kind: str, rng: np.random.Generator) -> list[Case] | str:
    try:
        import flashbax as fbx
    except Exception as e:  # optional `bench` extra
        return f"flashbax not importable ({type(e).__name__}: {e}); install the bench extra"
    if kind == "cartpole":
        obs = lambda b: jnp.asarray(rng.normal(size=(b, 4)), jnp.float32)
    else:
        obs = lambda b: jnp.asarray(rng.integers(0, 255, (b, *ATARI_OBS)), jnp.uint8)

    def timestep(b):
        return dict(
            obs=obs(b),
            action=jnp.asarray(rng.integers(0, 2, b), jnp.int32),
            reward=jnp.ones(b, jnp.float32),
            done=jnp.zeros(b, bool),
        )

    def make(k):
        return fbx.make_prioritised_flat_buffer(
            max_length=CAPACITY,
            min_length=k,
            sample_batch_size=k,
            add_batch_size=NUM_ENVS,
            priority_exponent=0.6,
            device="cpu",
        )

    keys = [(k,) for k in jax.random.split(jax.random.key(1), 64)]
    batches = [(timestep(NUM_ENVS),) for _ in range(4)]
    buf = make(SAMPLE_SIZES[0])
    example = jax.tree.map(lambda x: x[0], batches[0][0])
    main = {"state": filled(buf.add, buf.init(example), batches[0][0])}
    adding = {"state": copy_state(main["state"])}
    add = jax.jit(buf.add, donate_argnums=0)
    cases = [Case("flashbax", kind, f"add {NUM_ENVS}", add, adding, batches, True)]
    for k in SAMPLE_SIZES:
        cases.append(
            Case("flashbax", kind, f"sample {k}", jax.jit(make(k).sample), main, keys, False)
        )
    for k in SAMPLE_SIZES:
        b = make(k)
        p = [jnp.abs(jnp.asarray(rng.normal(size=k), jnp.float32)) for _ in range(8)]
        inputs = [
            (b.sample(main["state"], key).indices, q) for (key,), q in zip(keys[:8], p, strict=True)
        ]
        update = jax.jit(b.set_priorities, donate_argnums=0)
        cases.append(Case("flashbax", kind, f"update {k}", update, main, inputs, True))
    return cases


def atari_memory(capacity: int) -> dict:
    """Bytes of every array of a prioritized frame-stack buffer, without allocating it."""
    buf = make_atari_replay(capacity, NUM_ENVS, 32, n=3, alpha=0.6)
    example = Transition(
        obs=jax.ShapeDtypeStruct(ATARI_OBS, jnp.uint8),
        action=jax.ShapeDtypeStruct((), jnp.int32),
        reward=jax.ShapeDtypeStruct((), jnp.float32),
        terminated=jax.ShapeDtypeStruct((), bool),
        truncated=jax.ShapeDtypeStruct((), bool),
        next_obs=jax.ShapeDtypeStruct(ATARI_OBS, jnp.uint8),
    )
    shapes = jax.eval_shape(buf.init, example)
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    return dict(capacity=capacity, bytes=int(total), bytes_per_transition=total / capacity)


def table(rows: list[dict]) -> str:
    """rljax's timings with flashbax's for the same transition kind and operation."""
    fbx = {(r["transition"], r["op"]): r for r in rows if r["buffer"] == "flashbax"}
    short, long = SCAN_LENGTHS
    lines = [
        f"us per op: per call (jitted, median; min), in a {long}-op compiled scan "
        f"(median / {long}), and marginal in a compiled scan ((T{long} - T{short}) / "
        f"{long - short}); x = flashbax / rljax",
        f"{'transition':<9} {'op':<20} {'buffer':<11} {'call':>7} {'(min)':>7} "
        f"{'fbx':>7} {'x':>5} {'scan':>6} {'fbx':>6} {'x':>5} {'marg.':>6} {'fbx':>6} {'x':>5}",
    ]
    cell = lambda x, w, f=".1f": f"{x:{w}{f}}" if x is not None else f"{'-':>{w}}"
    ratio = lambda a, b: a / b if a is not None and b else None
    for r in rows:
        if r["buffer"] == "flashbax":
            continue
        ref = fbx.get((r["transition"], r["op"]), {})
        cols = [f"{r['transition']:<9} {r['op']:<20} {r['buffer']:<11} {r['us']:7.1f}",
                cell(r["min_us"], 7)]
        for key, w in (("us", 7), ("in_scan_us", 6), ("marginal_us", 6)):
            if key != "us":
                cols.append(cell(r.get(key), w))
            cols += [cell(ref.get(key), w), cell(ratio(ref.get(key), r.get(key)), 5, ".1f") + "x"]
        lines.append(" ".join(cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500, help="timed calls per operation")
    parser.add_argument("--no-flashbax", action="store_true", help="skip the flashbax runs")
    parser.add_argument("--out", default=RESULTS, help="JSON output path")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    notes: list[str] = []
    for kind in ("cartpole", "atari"):
        cases = rljax_cases(kind, rng)
        if not args.no_flashbax:
            fbx_cases = flashbax_cases(kind, rng)
            if isinstance(fbx_cases, str):
                notes.append(fbx_cases)
                print(fbx_cases)
                args.no_flashbax = True
            else:
                cases += fbx_cases
        kind_rows = run_round_robin(cases, args.reps)
        in_scan = run_in_scan(cases, max(5, args.reps // 10))
        for r in kind_rows:
            scan = in_scan[(r["buffer"], r["transition"], r["op"])]
            r["in_scan_us"], r["marginal_us"] = scan if scan else (None, None)
        rows += kind_rows
        del cases
    memory = atari_memory(CAPACITY)
    projected = atari_memory(1_000_000)
    result = dict(
        config=dict(capacity=CAPACITY, num_envs=NUM_ENVS, reps=args.reps, atari_obs=ATARI_OBS),
        machine=dict(
            platform=platform.platform(),
            python=platform.python_version(),
            jax=jax.__version__,
            device=str(jax.devices()[0]),
            cpu_count=os.cpu_count(),
            load_average=os.getloadavg(),
        ),
        results=rows,
        atari_memory=dict(
            bytes_per_transition=memory["bytes_per_transition"],
            capacity_100k_bytes=memory["bytes"],
            projected_1m_bytes=projected["bytes"],
            projected_1m_gib=projected["bytes"] / 2**30,
        ),
        notes=notes,
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(table(rows))
    print(
        f"\nAtari frame-stack buffer: {memory['bytes_per_transition']:.0f} bytes/transition; "
        f"1M transitions: {projected['bytes'] / 2**30:.2f} GiB (load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()

"""Training speed of presets with a one-thread XLA CPU pool against JAX's default (one
thread per CPU), in alternating rounds of two processes.

The pool is sized once per process, when JAX starts its CPU backend
(:mod:`rljax.cpu_threads`), so the two sizes cannot share a process: each runs in a
worker process that compiles the preset's training chunk (same seed, same state) and times
one call per round; the rounds alternate between the two workers, and the figure is the
median of the per-round ratios (one thread / default).

    python -m benchmarks.cpu_threads [--presets gymnax-cartpole-ppo ...] [--rounds 5]
    python -m benchmarks.cpu_threads --threads 1 2   # any two sizes

Writes benchmarks/results/cpu_threads.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

DEFAULT_PRESETS = ("gymnax-cartpole-ppo", "gymnax-cartpole-pqn", "minatar-breakout-ppo",
                   "minatar-breakout-pqn", "gymnax-pendulum-sac", "cartpole-ppo",
                   "cartpole-pqn")


def worker(preset: str, threads: int) -> None:
    """Compiles ``preset``'s chunk with a pool of ``threads`` threads (0: JAX's default),
    runs it until its losses are finite (off-policy loops learn after a warm-up), prints
    the steps per call, then times one call per line read from stdin."""
    import dataclasses

    import jax

    from rljax.cpu_threads import pool_size, set_cpu_threads

    if not set_cpu_threads(threads):
        raise SystemExit(f"could not size the pool to {threads}")
    from benchmarks.throughput import _compiled, _until_learning
    from rljax.run.build import build
    from rljax.run.presets import from_preset

    run = from_preset(preset, tensorboard=False)
    run = dataclasses.replace(run, total_steps=run.chunk_steps * 1000, cpu_threads=threads)
    _, _, trainer, _ = build(run)
    chunk, state, metrics = _compiled(trainer)
    for field in ("loss", "critic_loss", "q_loss"):
        if field in metrics:
            state = _until_learning(chunk, state, metrics, field)
    print(json.dumps({"steps": trainer.steps_per_chunk, "pool": pool_size(threads)}),
          flush=True)
    for _ in sys.stdin:
        started = time.perf_counter()
        state, metrics = chunk(state)
        jax.block_until_ready((state, metrics))
        print(json.dumps({"seconds": time.perf_counter() - started}), flush=True)


def compare(preset: str, threads: tuple[int, int], rounds: int) -> dict:
    """Steps/s of ``preset`` at the two pool sizes, alternating; ratio second / first."""
    from benchmarks.common import median

    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.cpu_threads", "--worker",
                               preset, "--threads", str(t)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for t in threads]
    ready = [json.loads(p.stdout.readline()) for p in procs]
    sps: list[list[float]] = [[], []]
    for _ in range(rounds):
        for k, p in enumerate(procs):
            p.stdin.write("go\n")
            p.stdin.flush()
            sps[k].append(ready[k]["steps"] / json.loads(p.stdout.readline())["seconds"])
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)
    ratios = [b / a for a, b in zip(*sps, strict=True)]
    return {"preset": preset, "threads": list(threads), "pool": [r["pool"] for r in ready],
            "sps": sps, "median_sps": [median(s) for s in sps], "ratio": median(ratios),
            "ratios": ratios}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    parser.add_argument("--threads", nargs="+", type=int, default=[0, 1],
                        help="the two pool sizes to compare (0: one thread per CPU)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.threads[0])
    if len(args.threads) != 2:
        parser.error(f"--threads takes two sizes, got {args.threads}")
    from benchmarks.common import machine, write_results

    results = []
    for preset in args.presets:
        r = compare(preset, tuple(args.threads), args.rounds)
        results.append(r)
        print(f"{preset}: pool {r['pool'][0]} {r['median_sps'][0]:,.0f} env steps/s, pool "
              f"{r['pool'][1]} {r['median_sps'][1]:,.0f}; ratio {r['ratio']:.2f} (rounds "
              f"{', '.join(f'{x:.2f}' for x in r['ratios'])})", flush=True)
    path = write_results("cpu_threads", {"machine": machine(), "results": results})
    print(f"-> {path}")


if __name__ == "__main__":
    main()

"""Checkpoint save and restore of a large train state: wall time and peak host memory.

    python -m benchmarks.checkpoint_io save DIR [--preset breakout-dqn-500k] [--buffer 524288]
    python -m benchmarks.checkpoint_io restore DIR [same options]

Each call is one process: it builds the preset's initial train state (a replay of
``--buffer`` transitions, filled with a byte pattern), then times one
``rljax.run.checkpoint.save`` into DIR, or one ``restore`` from DIR into a fresh state, and
samples the process's resident memory every 2 ms meanwhile. It prints one JSON line:
the state's size, the resident memory before the operation, its peak during it, and
the seconds it took. The script uses only ``save(run_dir, state, manifest)`` and
``restore(run_dir, template)``, so pointing ``PYTHONPATH`` at another checkout measures
that version's checkpoints the same way. Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import threading
import time

import jax
import jax.numpy as jnp
from jax import lax

from rljax.run import checkpoint
from rljax.run.build import build
from rljax.run.presets import from_preset

GIB = 2**30


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class _PeakRss:
    """Samples the resident set size every 2 ms on a thread; ``peak`` is the largest seen."""

    def __init__(self):
        self.peak, self._stop = _rss(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


@functools.partial(jax.jit, donate_argnums=0)
def _fill(memory):
    """The replay's uint8 arrays filled with a hashed byte pattern (not zeros, which
    some filesystems and page handling treat specially); other leaves as they are."""
    def fill(x):
        if x.dtype != jnp.uint8:
            return x
        i = lax.iota(jnp.uint32, x.size).reshape(x.shape)
        return ((i * jnp.uint32(2654435761)) >> 13).astype(jnp.uint8)
    return jax.tree.map(fill, memory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=["save", "restore"])
    parser.add_argument("run_dir")
    parser.add_argument("--preset", default="breakout-dqn-500k")
    parser.add_argument("--buffer", type=int, default=2**19)
    args = parser.parse_args()

    run = from_preset(args.preset, buffer_size=args.buffer, tensorboard=False)
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    state = state.replace(memory=_fill(state.memory))
    jax.block_until_ready(state)
    size = sum(x.nbytes for x in jax.tree.leaves((state.agent, state.memory)))
    gc.collect()
    time.sleep(0.5)
    before = _rss()
    start = time.perf_counter()
    with _PeakRss() as rss:
        if args.op == "save":
            checkpoint.save(args.run_dir, state, {"run": run.to_dict()})
        else:
            jax.block_until_ready(checkpoint.restore(args.run_dir, state))
    seconds = time.perf_counter() - start
    print(json.dumps({"op": args.op, "state_gib": round(size / GIB, 3),
                      "rss_before_gib": round(before / GIB, 3),
                      "rss_peak_gib": round(rss.peak / GIB, 3),
                      "peak_extra_gib": round((rss.peak - before) / GIB, 3),
                      "seconds": round(seconds, 2), "checkpoint": checkpoint.__file__}))


if __name__ == "__main__":
    main()

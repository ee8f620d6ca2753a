"""Many seeds in one program against one seed, and against a many-seeds reference: the
single-file PPO of benchmarks/reference_native.py vmapped over seeds, as PureJaxRL runs
many seeds. gymnax-cartpole-ppo's configuration on both sides (gymnax CartPole-v1, 32 envs
x 16 steps, 4 epochs x 4 minibatches, tanh 64-64). For each XLA CPU pool size (one worker
process each, since the pool is sized once per process): rljax and the reference at 1 and
at ``--seeds`` members, each a compiled chunk of the same updates per member, and the
large-GEMM rate (2048^3 float32 matmul) and the rate of the update's hidden-layer matmul
shape ([128 x 64] @ [64 x 64]) for one member and batched over the members, in the same
process, in interleaved rounds. rljax at ``--seeds`` members runs as ``rljax train --seeds
N`` runs it, its members split over one host CPU device per core (``cpu_devices``; each
worker asks JAX for them), and also on one device, with its per-array optimizer and with
the flat vector (the layout below ``rljax.agents.ppo_networks.PER_ARRAY_MEMBERS``): the
A/Bs of those two choices. The reference runs on one device, as PureJaxRL vmaps seeds.

    python -m benchmarks.many_seeds [--seeds 64] [--threads 1,0] [--rounds 5]

Figures: total env steps/s (all members), ``many / one`` for each library, ``rljax /
reference`` at many seeds (medians of per-round ratios); ``uptime``'s load is recorded.
Writes benchmarks/results/many_seeds.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable

from benchmarks.common import chunk_call, median, timed_wall_cpu, write_results

PRESET = "gymnax-cartpole-ppo"


def _rljax(count: int, updates: int, flat: bool = False, one_device: bool = False):
    """rljax's chunk at ``count`` members, as ``rljax train --seeds count`` runs it (many
    members split over one host CPU device per core, ``cpu_devices``); ``flat``: its
    optimizer on one flat vector whatever the count (the layout below
    ``PER_ARRAY_MEMBERS``); ``one_device``: all members on one device."""
    from rljax.agents import ppo_networks
    from rljax.run.presets import from_preset

    run = from_preset(PRESET, num_seeds=count, cpu_threads=0,
                      **({"cpu_devices": 1} if one_device else {}))
    steps = updates * run.config.loop.num_envs * run.config.loop.rollout_len
    run = dataclasses.replace(run, chunk_steps=steps, total_steps=steps * 1000)
    bound = ppo_networks.PER_ARRAY_MEMBERS
    ppo_networks.PER_ARRAY_MEMBERS = 10**9 if flat else bound
    try:
        return chunk_call(run)  # built, compiled and warmed up
    finally:
        ppo_networks.PER_ARRAY_MEMBERS = bound


def _reference(count: int, updates: int):
    import jax

    from benchmarks.reference_native import Sizes, make_ppo
    from rljax.run.presets import from_preset

    c = from_preset(PRESET).config
    sizes = Sizes(c.loop.num_envs, c.loop.rollout_len, c.num_epochs, c.num_minibatches,
                  c.lr, c.hidden_sizes)
    init, run = make_ppo("gymnax:CartPole-v1", sizes)
    keys = jax.random.split(jax.random.key(0), count)
    box = {"carry": jax.jit(jax.vmap(init))(keys)}
    step = jax.jit(jax.vmap(lambda carry: run(carry, updates)), donate_argnums=0)

    def call():
        box["carry"] = step(box["carry"])
        return box["carry"]
    call()  # compile + warm up
    return call, count * updates * sizes.num_envs * sizes.rollout_len


def dot_rate(members: int, rows: int = 128, width: int = 64, reps: int = 200) -> Callable:
    """A callable returning GFLOP/s of a chain of ``[rows, width] @ [width, width]`` float32
    matmuls (the update's hidden layer at a 128-sample minibatch), batched over
    ``members`` (0: one, unbatched), each product the next one's input."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((width, width)))
    shape = (members,) if members else ()
    w = jnp.asarray(np.broadcast_to(q, shape + q.shape), jnp.float32)
    x = jnp.ones(shape + (rows, width), jnp.float32)

    @jax.jit
    def chain(x):
        return jax.lax.scan(lambda x, _: (x @ w, None), x, None, reps)[0]

    chain(x).block_until_ready()
    flop = 2 * max(members, 1) * rows * width * width * reps
    return lambda: flop / timed_wall_cpu(lambda: chain(x))[0] / 1e9


def worker(threads: int, seeds: int, rounds: int, updates: int) -> dict:
    from rljax.cpu_threads import available_cpus, pool_size, set_cpu_devices, set_cpu_threads

    set_cpu_threads(threads)  # before JAX starts its CPU client
    set_cpu_devices(available_cpus())  # for the members' split (cpu_devices)
    from benchmarks import profiling

    programs = {}
    for count in (1, seeds):
        programs[f"rljax_{count}"] = _rljax(count, updates)
        programs[f"reference_{count}"] = _reference(count, updates)
    programs[f"rljax_{seeds}_one_device"] = _rljax(seeds, updates, one_device=True)
    programs[f"rljax_{seeds}_flat"] = _rljax(seeds, updates, flat=True, one_device=True)
    gemm_rate = profiling.gemm_rate(2048)
    dots = {"dot_1": dot_rate(0), f"dot_{seeds}": dot_rate(seeds)}
    dot_samples = {k: [] for k in dots}
    load_before = os.getloadavg()
    sps = {name: [] for name in programs}
    cpu = {name: [] for name in programs}
    gemm = []
    for _ in range(rounds):
        for name, (call, steps) in programs.items():
            wall, used = timed_wall_cpu(call)
            sps[name].append(steps / wall)
            cpu[name].append(used / wall)
        gemm.append(gemm_rate())
        for name, rate in dots.items():
            dot_samples[name].append(rate())

    def ratio(a: str, b: str) -> float:
        return median([x / y for x, y in zip(sps[a], sps[b], strict=True)])

    return {"threads": threads, "pool_threads": pool_size(threads), "seeds": seeds,
            "updates_per_chunk": updates,
            "total_sps": {k: median(v) for k, v in sps.items()},
            "cores_busy": {k: median(v) for k, v in cpu.items()},
            "rljax_many_over_one": ratio(f"rljax_{seeds}", "rljax_1"),
            "reference_many_over_one": ratio(f"reference_{seeds}", "reference_1"),
            "rljax_over_reference_many": ratio(f"rljax_{seeds}", f"reference_{seeds}"),
            "rljax_over_reference_one": ratio("rljax_1", "reference_1"),
            "rljax_one_device_over_reference_many": ratio(f"rljax_{seeds}_one_device",
                                                          f"reference_{seeds}"),
            "rljax_many_over_one_device": ratio(f"rljax_{seeds}", f"rljax_{seeds}_one_device"),
            "rljax_many_over_flat_optimizer": ratio(f"rljax_{seeds}_one_device",
                                                    f"rljax_{seeds}_flat"),
            "gemm_2048_gflops": median(gemm), "rounds": sps,
            "dot_128x64x64_gflops": {k: median(v) for k, v in dot_samples.items()},
            "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--threads", default="1,0",
                        help="XLA CPU pool sizes, one worker process each (0: JAX's default)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=8, help="updates per member per chunk")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.seeds, args.rounds, args.updates)))
        return
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.many_seeds", "--worker",
                               str(threads), "--seeds", str(args.seeds), "--rounds",
                               str(args.rounds), "--updates", str(args.updates)],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"pool {r['pool_threads']} thread(s): " + ", ".join(
            f"{k} {v:,.0f}" for k, v in r["total_sps"].items()) +
            f" env steps/s; {args.seeds} / 1 seed: rljax {r['rljax_many_over_one']:.2f}, "
            f"reference {r['reference_many_over_one']:.2f}; rljax / reference at "
            f"{args.seeds}: {r['rljax_over_reference_many']:.2f}, at 1: "
            f"{r['rljax_over_reference_one']:.2f}; rljax on one device / reference at "
            f"{args.seeds}: {r['rljax_one_device_over_reference_many']:.2f}; rljax at "
            f"{args.seeds} over one device: {r['rljax_many_over_one_device']:.2f}, one device "
            f"over its flat optimizer: {r['rljax_many_over_flat_optimizer']:.2f}; GFLOP/s: "
            f"GEMM 2048^3 "
            f"{r['gemm_2048_gflops']:.0f}, [128x64]@[64x64] one / {args.seeds} members " +
            " / ".join(f"{v:.0f}" for v in r["dot_128x64x64_gflops"].values()) + "; "
            f"load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}")
    path = write_results("many_seeds" + (f"_{args.tag}" if args.tag else ""), results)
    print(path)


if __name__ == "__main__":
    main()

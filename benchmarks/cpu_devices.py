"""Members split over host CPU devices (``cpu_devices``) against the same members on one
device, in the same process, in interleaved rounds.

For each preset and count of seeds: the preset's run at that count as ``from_preset`` makes
it (the pool and the split its rule picks), built twice, with its members on one device
and split over ``--devices`` host devices (one per core by default); each is a compiled
chunk of the same updates per member, timed in turn (ABAB...), and the figure is the
median of the per-round ratios (split / one device, total env steps/s). XLA's pool is
sized once per process, so each pool the counts need (one thread up to
``rljax.run.presets.ONE_THREAD_MEMBERS`` members for a one-thread preset, JAX's default
above) gets a worker process of its own.

    python -m benchmarks.cpu_devices [--presets gymnax-cartpole-ppo ...] [--seeds 8 16 64]
        [--rounds 7]

Writes benchmarks/results/cpu_devices.json (``--tag``: a suffix) and prints one line per
preset and count, with the load average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys

from benchmarks.common import chunk_call, machine, median, timed_wall_cpu, write_results

MIN_STEPS = 65_536  # env steps per member and chunk, at least: calls of 0.3 s or more


def _program(preset: str, seeds: int, split: int):
    from rljax.run.presets import from_preset

    run = from_preset(preset, num_seeds=seeds, cpu_devices=split)
    per_update = run.config.loop.num_envs * (getattr(run.config.loop, "rollout_len", None)
                                             or run.config.loop.env_steps_per_update)
    steps = max(1, MIN_STEPS // seeds // per_update) * per_update
    return chunk_call(dataclasses.replace(run, chunk_steps=steps, total_steps=steps * 1000))


def worker(threads: int, devices: int, jobs: list[tuple[str, int]], rounds: int) -> list[dict]:
    from rljax.cpu_threads import member_split, pool_size, set_cpu_devices, set_cpu_threads

    set_cpu_threads(threads)  # before JAX starts its CPU client
    set_cpu_devices(devices)
    out = []
    for preset, seeds in jobs:
        split = member_split(seeds, devices)
        programs = {"one_device": _program(preset, seeds, 1)}
        programs["split"] = _program(preset, seeds, split) if split > 1 else programs[
            "one_device"]  # one seed: nothing to split
        load = os.getloadavg()[0]
        sps = {k: [] for k in programs}
        busy = {k: [] for k in programs}
        for _ in range(rounds):
            for name, (call, steps) in programs.items():
                wall, cpu = timed_wall_cpu(call)
                sps[name].append(steps / wall)
                busy[name].append(cpu / wall)
        out.append({"preset": preset, "seeds": seeds, "pool_threads": pool_size(threads),
                    "devices": split, "total_sps": {k: median(v) for k, v in sps.items()},
                    "cores_busy": {k: median(v) for k, v in busy.items()},
                    "split_over_one_device": median([a / b for a, b in zip(
                        sps["split"], sps["one_device"], strict=True)]),
                    "rounds": sps, "load_before": load, "load_after": os.getloadavg()[0]})
    return out


def main() -> None:
    from rljax.cpu_threads import available_cpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["gymnax-cartpole-ppo"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[8, 16, 64])
    parser.add_argument("--devices", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tag", default="")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        threads, jobs = json.loads(args.worker)
        print(json.dumps(worker(threads, args.devices, [tuple(j) for j in jobs], args.rounds)))
        return
    from rljax.run.presets import from_preset

    by_pool: dict[int, list] = {}
    for preset in args.presets:
        for seeds in args.seeds:
            threads = from_preset(preset, num_seeds=seeds).cpu_threads
            by_pool.setdefault(threads, []).append((preset, seeds))
    results = []
    for threads, jobs in by_pool.items():
        proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu_devices", "--worker",
                               json.dumps([threads, jobs]), "--devices", str(args.devices),
                               "--rounds", str(args.rounds)], capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr)
        for r in json.loads(proc.stdout.strip().splitlines()[-1]):
            results.append(r)
            print(f"{r['preset']}, {r['seeds']} seeds, pool {r['pool_threads']}: one device "
                  f"{r['total_sps']['one_device']:,.0f}, {r['devices']} devices "
                  f"{r['total_sps']['split']:,.0f} env steps/s (cores busy "
                  f"{r['cores_busy']['one_device']:.2f} / {r['cores_busy']['split']:.2f}); "
                  f"split / one device {r['split_over_one_device']:.2f}; load "
                  f"{r['load_before']:.1f} -> {r['load_after']:.1f}")
    path = write_results("cpu_devices" + (f"_{args.tag}" if args.tag else ""),
                         {"machine": machine(), "rounds": args.rounds, "results": results})
    print(path)


if __name__ == "__main__":
    main()

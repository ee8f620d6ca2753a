"""The benchmark suite: ``rljax bench`` (or ``python -m benchmarks.run``).

For each preset, in a fresh process (so peak memory is that preset's own):

* the env-only ceiling: random actions through envpool's XLA step in a jitted
  scan, same task and num_envs;
* training steps/s of the preset's compiled chunk (after warm-up, with learning
  active), compile time, and peak memory (host RSS; device bytes where the
  backend reports them);

and, for the sweep presets, training steps/s against num_envs and against the
number of seeds in one program. Ceiling and training rounds are interleaved and
medians taken, so machine noise hits both alike. Results go to ``results.json``,
``results.md`` (a table the README includes) and PNG plots, naming the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rljax.run import bench_peers
from rljax.run.bench_peers import SB3_PRESETS, SBX_PRESETS

DEFAULT_PRESETS = ("cartpole-a2c", "cartpole-dqn", "breakout-dqn", "reacher-ddpg")
SWEEP_VALUES = (1, 2, 4, 8, 16, 32, 64)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The device and software the figures were measured on."""
    return {"device": str(jax.devices()[0].device_kind), "platform": jax.default_backend(),
            "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
            "cpu_model": _cpu_model(), "python": platform.python_version(),
            "jax": jax.__version__}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def make_random_rollout(env, steps: int):
    """A jitted scan of ``steps`` env steps with uniformly random actions."""
    spec = env.spec

    def body(state, key):
        if spec.discrete:
            action = jax.random.randint(key, (spec.num_envs,), 0, spec.num_actions)
        else:
            action = jax.random.uniform(key, (spec.num_envs,) + spec.action_shape,
                                        minval=jnp.asarray(spec.action_low),
                                        maxval=jnp.asarray(spec.action_high))
        state, _ = env.step(state, action)
        return state, None

    def run(state, key):
        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    return jax.jit(run, donate_argnums=0)


def interleaved(measure: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Runs each measurement ``rounds`` times, interleaved; returns the samples."""
    out: dict[str, list[float]] = {name: [] for name in measure}
    for _ in range(rounds):
        for name, fn in measure.items():
            out[name].append(fn())
    return out


def peak_memory() -> dict:
    """Peak host RSS of this process, and device peak bytes where reported."""
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peak_host_mb": rss_kb / 1024.0}
    stats = jax.devices()[0].memory_stats() if hasattr(jax.devices()[0], "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        out["peak_device_mb"] = stats["peak_bytes_in_use"] / 2**20
    return out


def measure_preset(preset: str, *, num_envs: int | None = None, num_seeds: int = 1,
                   rounds: int = 3, target_seconds: float = 2.0,
                   with_ceiling: bool = True, chunk_steps: int | None = None) -> dict:
    """Training (and env-only) steps/s of one preset configuration; ``chunk_steps``: env
    steps per compiled chunk (None: the preset's), shorter for slow learners."""
    from rljax.cpu_threads import pool_size, set_cpu_threads
    from rljax.run.build import build, make_env
    from rljax.run.presets import from_preset

    run = from_preset(preset, num_envs=num_envs, num_seeds=num_seeds, tensorboard=False)
    set_cpu_threads(run.cpu_threads)  # each preset is measured in a process of its own
    run = dataclasses.replace(run, total_steps=10**9,
                              chunk_steps=chunk_steps or run.chunk_steps)
    _, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(run.seed))
    start = time.perf_counter()
    chunk = trainer.chunk.lower(state).compile()
    compile_time = time.perf_counter() - start
    box = {"state": state}
    total_steps = num_seeds * trainer.steps_per_chunk

    def one_chunk():
        box["state"], metrics = chunk(box["state"])
        return metrics

    timed(one_chunk)  # warm-up
    # Off-policy presets learn only once the replay holds min_size transitions:
    # fill it first so the figure is the learning loop's.
    deadline = time.perf_counter() + 600
    while not _learning(jax.device_get(one_chunk())) and time.perf_counter() < deadline:
        pass
    # Chunks per timing from a learning chunk's time (one before learning runs faster).
    chunks = max(1, round(target_seconds / max(timed(one_chunk), 1e-3)))

    def train_sps():
        return chunks * total_steps / timed(lambda: [one_chunk() for _ in range(chunks)][-1])

    measure = {"train": train_sps}
    if with_ceiling:
        ceiling_envs = run.config.loop.num_envs * num_seeds
        pool = make_env(run.env_id, ceiling_envs, run.seed + 1, run.env_options)
        steps = max(1, total_steps // ceiling_envs)
        rollout = make_random_rollout(pool, steps)
        ebox = {"state": rollout(pool.reset(), jax.random.key(1))}

        def env_sps():
            def go():
                ebox["state"] = rollout(ebox["state"], jax.random.key(2))
                return ebox["state"]
            return chunks * steps * ceiling_envs / timed(lambda: [go() for _ in range(chunks)][-1])

        measure["env_only"] = env_sps
    load = [os.getloadavg()[0]]
    samples = interleaved(measure, rounds)
    load.append(os.getloadavg()[0])
    out = {"preset": preset, "env_id": run.env_id, "num_envs": run.config.loop.num_envs,
           "num_seeds": num_seeds, "cpu_threads": pool_size(run.cpu_threads),
           "compile_time_s": compile_time,
           "train_sps": statistics.median(samples["train"]), "samples": samples,
           "loadavg_1min": load}
    if with_ceiling:
        out["env_only_sps"] = statistics.median(samples["env_only"])
        out["ratio"] = out["train_sps"] / out["env_only_sps"]
    out.update(peak_memory())
    return out


def _learning(metrics: dict) -> bool:
    """Whether the last update of a chunk learned (off-policy loops report NaN losses
    until the replay holds enough transitions)."""
    import numpy as np

    learned = [np.ravel(v)[-1] for k, v in metrics.items() if k not in ("replay_size", "beta")]
    return all(np.isfinite(x) for x in learned)


def _in_subprocess(kwargs: dict, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "rljax.run.bench", "--one", json.dumps(kwargs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return {**kwargs, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else
                f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_suite(presets=DEFAULT_PRESETS, out_dir: str = "benchmarks/results/suite",
              sweep_presets=("cartpole-a2c",), sweep_values=SWEEP_VALUES, rounds: int = 3,
              timeout: float = 1200, chunk_steps: int | None = None) -> dict:
    """Runs the whole suite and writes results.json, results.md and PNG plots;
    ``chunk_steps`` shortens the measured presets' chunks (None: each preset's own)."""
    os.makedirs(out_dir, exist_ok=True)
    results = {"machine": machine(), "rounds": rounds, "presets": [], "num_envs_sweep": [],
               "seeds_sweep": [], "peers": []}
    chunk = {"chunk_steps": chunk_steps} if chunk_steps else {}
    for preset in presets:
        results["presets"].append(_in_subprocess({"preset": preset, "rounds": rounds, **chunk},
                                                 timeout))
        print(_row(results["presets"][-1]), flush=True)
        peers = bench_peers.peers(preset)
        results["peers"] += peers
        for p in peers:
            print(_peer_row(p, results["presets"][-1]), flush=True)
    for preset in sweep_presets:
        for n in sweep_values:
            results["num_envs_sweep"].append(_in_subprocess(
                {"preset": preset, "num_envs": n, "rounds": rounds}, timeout))
            print(_row(results["num_envs_sweep"][-1]), flush=True)
        for s in sweep_values:
            results["seeds_sweep"].append(_in_subprocess(
                {"preset": preset, "num_seeds": s, "rounds": rounds}, timeout))
            print(_row(results["seeds_sweep"][-1]), flush=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown(results))
    plot_sweeps(results, out_dir)
    return results


def _row(r: dict) -> str:
    if "error" in r:
        return f"{r.get('preset')}: error: {r['error']}"
    return (f"{r['preset']:<16} envs={r['num_envs']:<3} seeds={r['num_seeds']:<3} "
            f"train {r['train_sps']:>10,.0f}/s  env-only {r.get('env_only_sps', 0):>10,.0f}/s"
            f"  compile {r['compile_time_s']:5.1f}s  peak {r['peak_host_mb']:,.0f} MB")


def _peer_row(p: dict, ours: dict) -> str:
    if "missing" in p:
        return f"{p['preset']:<16} peer: {p['missing']}"
    if "error" in p:
        return f"{p['preset']:<16} peer {p['library']} failed: {p['error']}"
    mine = ours.get("train_sps")
    ratio = f"  rljax / peer {mine / p['train_sps']:.1f}x" if mine else ""
    return f"{p['preset']:<16} peer {p['library']}: train {p['train_sps']:>10,.0f}/s{ratio}"


def markdown(results: dict) -> str:
    """The suite's tables as markdown."""
    m = results["machine"]
    host = f"{m.get('cpu_model', 'unknown CPU')}, {m['cpu_count']} cores"
    lines = [f"Measured on {m['device']} ({m['platform']}; host {host}), jax {m['jax']}, "
             f"medians of {results.get('rounds', 3)} interleaved rounds.", "",
             "| preset | env | envs | env-only steps/s | training steps/s | ratio | compile s "
             "| peak host MB |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    loads = [x for key in ("presets", "num_envs_sweep", "seeds_sweep")
             for r in results[key] for x in r.get("loadavg_1min", ())]
    if loads:  # other processes' load moves the figures; say how busy the machine was
        lines[0] += (f" 1-minute load average during the timed rounds: {min(loads):.1f} to "
                     f"{max(loads):.1f} on {m['cpu_count']} cores.")
    for r in results["presets"]:
        if "error" in r:
            lines.append(f"| {r['preset']} | error: {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['preset']} | {r['env_id']} | {r['num_envs']} | "
                     f"{r['env_only_sps']:,.0f} | {r['train_sps']:,.0f} | {r['ratio']:.2f} | "
                     f"{r['compile_time_s']:.1f} | {r['peak_host_mb']:,.0f} |")
    for key, label in (("num_envs_sweep", "num_envs"), ("seeds_sweep", "seeds")):
        rows = [r for r in results[key] if "error" not in r]
        if not rows:
            continue
        lines += ["", f"{rows[0]['preset']}: training steps/s (all seeds) against {label}", "",
                  f"| {label} | training steps/s | env-only steps/s | vs 1 |",
                  "| --- | --- | --- | --- |"]
        base = rows[0]["train_sps"]
        for r in rows:
            n = r["num_envs"] if label == "num_envs" else r["num_seeds"]
            lines.append(f"| {n} | {r['train_sps']:,.0f} | {r.get('env_only_sps', 0):,.0f} | "
                         f"{r['train_sps'] / base:.1f}x |")
    peers = [p for p in results["peers"] if "error" not in p and "missing" not in p]
    if peers:
        ours = {r["preset"]: r.get("train_sps") for r in results["presets"]}
        lines += ["", "Peers: the same env, sizes and gradient work, steps/s while learning", "",
                  "| preset | library | peer steps/s | rljax steps/s | rljax / peer | differs |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for p in peers:
            mine = ours.get(p["preset"])
            ratio = f"{mine / p['train_sps']:.1f}x" if mine else ""
            lines.append(f"| {p['preset']} | {p['library']} | {p['train_sps']:,.0f} | "
                         f"{mine or 0:,.0f} | {ratio} | {p.get('differs', '')} |")
    for p in results["peers"]:
        if "error" in p:
            lines.append(f"\nPeer {p['library']} on {p['preset']} failed: {p['error']}")
        elif "missing" in p:
            lines.append(f"\n{p['preset']}: {p['missing']}.")
    return "\n".join(lines) + "\n"


def plot_sweeps(results: dict, out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, label in (("num_envs_sweep", "num_envs"), ("seeds_sweep", "seeds in one program")):
        rows = [r for r in results[key] if "error" not in r]
        if not rows:
            continue
        xs = [r["num_envs"] if key == "num_envs_sweep" else r["num_seeds"] for r in rows]
        fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
        ax.plot(xs, [r["train_sps"] for r in rows], "o-", label="training")
        ax.plot(xs, [r.get("env_only_sps", float("nan")) for r in rows], "s--",
                label="env only (random actions)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("env steps / s (all seeds)")
        m = results["machine"]
        where = m["device"] if m["platform"] != "cpu" else (
            f"{m.get('cpu_model', 'CPU')} ({m['cpu_count']} cores)")
        ax.set_title(f"{rows[0]['preset']} on {where}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"{key}.png"))
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rljax bench", description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="*", default=list(DEFAULT_PRESETS),
                        help=f"presets to measure (default: {' '.join(DEFAULT_PRESETS)}); "
                             f"with a Stable-Baselines3 peer: {' '.join(SB3_PRESETS)}; with "
                             f"an sbx peer: {' '.join(SBX_PRESETS)}")
    parser.add_argument("--sweep", nargs="*", default=["cartpole-a2c"],
                        help="presets to sweep over num_envs and seeds")
    parser.add_argument("--values", nargs="*", type=int, default=list(SWEEP_VALUES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-steps", type=int, default=None,
                        help="env steps per compiled chunk of the measured presets (default: "
                             "each preset's; e.g. 1000 for reacher-td3 and reacher-sac, whose "
                             "20,000-step chunks take minutes each on 2 cores)")
    parser.add_argument("--out", default="benchmarks/results/suite")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_preset(**json.loads(args.one))))
        return 0
    from rljax.run.presets import get_preset

    for name in args.presets + args.sweep:
        get_preset(name)
    run_suite(args.presets, args.out, args.sweep, tuple(args.values), args.rounds,
              chunk_steps=args.chunk_steps)
    print(f"wrote {args.out}/results.json, results.md and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())

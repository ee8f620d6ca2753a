"""rljax against rejax (a JAX-native RL library) on gymnax CartPole PPO, interleaved rounds.

rejax 0.1.3 (the newest release) unpacks gymnax's step as a 5-tuple and fails on gymnax 1.x
(``ValueError: too many values to unpack (expected 5)`` in rejax/evaluate.py), so it runs
in a virtual environment of its own with gymnax 0.0.9, whose CartPole has the same dynamics:

    python -m venv /work/rejaxvenv
    /work/rejaxvenv/bin/pip install rejax six "gymnax<1"
    python -m benchmarks.rejax_peer --python /work/rejaxvenv/bin/python [--rounds 5]

Both loops are compiled once, then timed in the same rounds, back to back: rljax's
training chunk of the ``gymnax-cartpole-ppo`` preset against rejax's PPO
``train_iteration`` repeated in a jitted ``fori_loop`` over the same env steps, with the
preset's sizes (32 envs x 16 steps, 4 epochs x 4 minibatches, separate tanh 64-64 actor and
critic, Adam 2.5e-3, clip 0.2). rejax runs in two worker processes that this script drives
over pipes, one with XLA's CPU pool at JAX's default size (one thread per CPU) and one at
the size rljax runs with (the preset's ``cpu_threads``, :mod:`rljax.cpu_threads`), so rejax
is measured at both runtime settings and rljax is compared with the faster; the ratio is
the median of per-round ratios. Writes benchmarks/results/rejax_peer.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# rljax's gymnax-cartpole-ppo sizes, in rejax's PPO field names.
REJAX_PPO = {"num_envs": 32, "num_steps": 16, "num_epochs": 4, "num_minibatches": 4,
             "learning_rate": 2.5e-3, "max_grad_norm": 0.5, "gamma": 0.99,
             "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
             "normalize_observations": False,
             "agent_kwargs": {"activation": "tanh", "hidden_layer_sizes": [64, 64]}}


def worker(chunk_steps: int, cpu_threads: int) -> None:
    """Runs in rejax's environment: compiles ``chunk_steps`` env steps of rejax's PPO with
    a CPU pool of ``cpu_threads`` threads (0: JAX's default), says so, then times one call
    per line read from stdin."""
    from rljax.cpu_threads import pool_size, set_cpu_threads

    set_cpu_threads(cpu_threads)
    import jax
    from rejax import PPO

    algo = PPO.create(env="CartPole-v1", total_timesteps=chunk_steps, eval_freq=chunk_steps,
                      skip_initial_evaluation=True, **REJAX_PPO)
    iterations = chunk_steps // (algo.num_envs * algo.num_steps)

    @jax.jit
    def run(ts):
        return jax.lax.fori_loop(0, iterations, lambda _, t: algo.train_iteration(t), ts)

    started = time.perf_counter()
    ts = jax.block_until_ready(run(algo.init_state(jax.random.PRNGKey(0))))
    print(json.dumps({"compile_s": time.perf_counter() - started,
                      "rejax_steps": iterations * algo.num_envs * algo.num_steps,
                      "jax": jax.__version__, "cpu_threads": pool_size(cpu_threads)}),
          flush=True)
    for _ in sys.stdin:
        started = time.perf_counter()
        ts = jax.block_until_ready(run(ts))
        print(json.dumps({"seconds": time.perf_counter() - started}), flush=True)


def compare(python: str, rounds: int, chunk_steps: int) -> dict:
    import dataclasses

    from rljax.cpu_threads import pool_size, set_cpu_threads
    from rljax.run.presets import from_preset

    run = from_preset("gymnax-cartpole-ppo", tensorboard=False)
    set_cpu_threads(run.cpu_threads)  # before anything starts JAX's backends
    from benchmarks.common import machine, median, timed, write_results
    from benchmarks.throughput import _compiled
    from rljax.run.build import build

    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    _, _, trainer, _ = build(run)
    chunk, state, _ = _compiled(trainer)
    steps = trainer.steps_per_chunk
    sizes = {"rejax": 0, "rejax_same_pool": run.cpu_threads}
    peers = {name: subprocess.Popen([python, "-m", "benchmarks.rejax_peer", "--worker",
                                     "--chunk-steps", str(steps), "--cpu-threads", str(t)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name, t in sizes.items()}
    ready = {name: json.loads(p.stdout.readline()) for name, p in peers.items()}
    for r in ready.values():
        if r["rejax_steps"] != steps:
            raise RuntimeError(f"rejax steps {r['rejax_steps']} per call, rljax {steps}")
    box = {"state": state}

    def rljax_once() -> float:
        def go():
            box["state"], metrics = chunk(box["state"])
            return box["state"], metrics
        return steps / timed(go)

    def rejax_once(peer) -> float:
        peer.stdin.write("go\n")
        peer.stdin.flush()
        return steps / json.loads(peer.stdout.readline())["seconds"]

    samples: dict[str, list[float]] = {"rljax": [], **{name: [] for name in peers}}
    for _ in range(rounds):
        samples["rljax"].append(rljax_once())
        for name, peer in peers.items():
            samples[name].append(rejax_once(peer))
    for peer in peers.values():
        peer.stdin.close()
        peer.wait(timeout=60)
    # rljax against the faster of rejax's two runtime settings, round by round.
    best = [max(xs) for xs in zip(*(samples[name] for name in peers), strict=True)]
    ratios = [a / b for a, b in zip(samples["rljax"], best, strict=True)]
    result = {"machine": machine(), "preset": "gymnax-cartpole-ppo", "steps_per_call": steps,
              "rljax_cpu_threads": pool_size(run.cpu_threads),
              "rejax": {"settings": REJAX_PPO, "workers": ready}, "sps": samples,
              "rljax_sps": median(samples["rljax"]),
              "rejax_sps": {name: median(samples[name]) for name in peers},
              "ratio": median(ratios), "ratios": ratios}
    result["path"] = write_results("rejax_peer", result)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/work/rejaxvenv/bin/python",
                        help="the Python of an environment where rejax is installed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk-steps", type=int, default=16_384)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.chunk_steps, args.cpu_threads)
    r = compare(args.python, args.rounds, args.chunk_steps)
    workers = r["rejax"]["workers"]
    rejax = ", ".join(f"{r['rejax_sps'][name]:,.0f} with {workers[name]['cpu_threads']} "
                      f"CPU thread(s)" for name in workers)
    print(f"gymnax CartPole PPO, {r['steps_per_call']} env steps per call: rljax "
          f"{r['rljax_sps']:,.0f} env steps/s with {r['rljax_cpu_threads']} CPU thread(s), "
          f"rejax {rejax}; rljax / faster rejax {r['ratio']:.2f}x "
          f"(rounds: {', '.join(f'{x:.2f}' for x in r['ratios'])}) -> {r['path']}")


if __name__ == "__main__":
    main()

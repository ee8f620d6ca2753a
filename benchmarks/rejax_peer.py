"""rljax against rejax (a JAX-native RL library) on gymnax CartPole PPO or PQN, interleaved
rounds.

rejax 0.1.3 (the newest release) unpacks gymnax's step as a 5-tuple and fails on gymnax 1.x
(``ValueError: too many values to unpack (expected 5)`` in rejax/evaluate.py), so it runs
in a virtual environment of its own with gymnax 0.0.9, whose CartPole has the same dynamics:

    python -m venv /work/rejaxvenv
    /work/rejaxvenv/bin/pip install rejax six "gymnax<1"
    python -m benchmarks.rejax_peer --python /work/rejaxvenv/bin/python [--rounds 5] [--algo pqn]

Both loops are compiled once, then timed in the same rounds, back to back (``--algo pqn``:
rljax's ``gymnax-cartpole-pqn`` at rejax's fixed LayerNorm 64-64 network against rejax's
PQN, 32 envs x 16 steps, 4 x 4 minibatches; writes rejax_peer_pqn.json). PPO: rljax's
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
# rljax's gymnax-cartpole-pqn sizes, in rejax's PQN field names. rejax's PQN network is
# fixed at LayerNorm ReLU 64-64, so rljax's preset runs with hidden_sizes 64-64 beside it.
REJAX_PQN = {"num_envs": 32, "num_steps": 16, "num_epochs": 2, "num_minibatches": 4,
             "learning_rate": 1e-3, "max_grad_norm": 10.0, "gamma": 0.99,
             "td_lambda": 0.95, "normalize_observations": False}
# What each comparison runs: rljax's preset (with overrides) and rejax's algorithm.
ALGOS = {"ppo": ("gymnax-cartpole-ppo", {}, "PPO", REJAX_PPO),
         "pqn": ("gymnax-cartpole-pqn", {"hidden_sizes": (64, 64)}, "PQN", REJAX_PQN)}


def worker(algo_name: str, chunk_steps: int, cpu_threads: int) -> None:
    """Runs in rejax's environment: compiles ``chunk_steps`` env steps of rejax's
    ``algo_name`` with a CPU pool of ``cpu_threads`` threads (0: JAX's default), says so,
    then times one call per line read from stdin."""
    from rljax.cpu_threads import pool_size, set_cpu_threads

    set_cpu_threads(cpu_threads)
    import jax
    import rejax

    _, _, cls, settings = ALGOS[algo_name]
    algo = getattr(rejax, cls).create(env="CartPole-v1", total_timesteps=chunk_steps,
                                      eval_freq=chunk_steps, skip_initial_evaluation=True,
                                      **settings)
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


def compare(python: str, rounds: int, chunk_steps: int, algo_name: str = "ppo") -> dict:
    import dataclasses

    from rljax.cpu_threads import pool_size, set_cpu_threads
    from rljax.run.presets import from_preset

    preset, overrides, _, settings = ALGOS[algo_name]
    run = from_preset(preset, tensorboard=False, **overrides)
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
                                     "--algo", algo_name, "--chunk-steps", str(steps),
                                     "--cpu-threads", str(t)],
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
    result = {"machine": machine(), "preset": preset,
              "overrides": {k: str(v) for k, v in overrides.items()}, "steps_per_call": steps,
              "rljax_cpu_threads": pool_size(run.cpu_threads),
              "rejax": {"settings": settings, "workers": ready}, "sps": samples,
              "rljax_sps": median(samples["rljax"]),
              "rejax_sps": {name: median(samples[name]) for name in peers},
              "ratio": median(ratios), "ratios": ratios}
    result["path"] = write_results("rejax_peer" if algo_name == "ppo" else
                                   f"rejax_peer_{algo_name}", result)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/work/rejaxvenv/bin/python",
                        help="the Python of an environment where rejax is installed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk-steps", type=int, default=16_384)
    parser.add_argument("--algo", choices=sorted(ALGOS), default="ppo",
                        help="PPO (gymnax-cartpole-ppo) or PQN (gymnax-cartpole-pqn at "
                             "rejax's 64-64 network)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.algo, args.chunk_steps, args.cpu_threads)
    r = compare(args.python, args.rounds, args.chunk_steps, args.algo)
    workers = r["rejax"]["workers"]
    rejax = ", ".join(f"{r['rejax_sps'][name]:,.0f} with {workers[name]['cpu_threads']} "
                      f"CPU thread(s)" for name in workers)
    print(f"gymnax CartPole {args.algo.upper()}, {r['steps_per_call']} env steps per call: rljax "
          f"{r['rljax_sps']:,.0f} env steps/s with {r['rljax_cpu_threads']} CPU thread(s), "
          f"rejax {rejax}; rljax / faster rejax {r['ratio']:.2f}x "
          f"(rounds: {', '.join(f'{x:.2f}' for x in r['ratios'])}) -> {r['path']}")


if __name__ == "__main__":
    main()

"""rljax against sbx (Stable-Baselines3 in JAX) in one process, interleaved rounds.

``rljax bench`` times a peer after rljax's own measurement, in another process, so load
from other processes between the two moves their ratio. Here both run in the same rounds,
back to back, at the same gradient work, and the ratio is the median of per-round ratios:

* ``loop``: rljax's compiled chunk against sbx's ``learn`` over the same env steps (sbx
  steps gymnasium's envs from Python and learns in jitted steps);
* ``learner`` (TD3, SAC): the gradient steps alone, rljax's ``agent.update`` in a compiled
  scan on replay batches against sbx's ``train`` (host-sampled batches, jitted steps).

    python -m benchmarks.sbx_peer [--algo td3 sac ppo] [--rounds 5]

Needs sbx (``pip install sbx-rl``); without it, says so and exits. Writes
benchmarks/results/sbx_peer.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp

from benchmarks.common import interleaved, machine, median, timed_wall_cpu, write_results
from benchmarks.throughput import _TWIN_CRITIC_WORK

# TD3 and SAC at the gradient work of benchmarks.throughput's "td3" and "sac" (one step of
# 256 per env step, 256x256 networks); PPO as its CartPole preset.
PRESETS = {"td3": ("reacher-td3", _TWIN_CRITIC_WORK, 400),
           "sac": ("reacher-sac", _TWIN_CRITIC_WORK, 400),
           "ppo": ("cartpole-ppo", {}, 10_240)}


def compare(algo: str, rounds: int) -> dict:
    import sbx

    from benchmarks import profiling
    from benchmarks.throughput import _compiled, _until_learning
    from rljax.run.bench_peers import _sbx_model
    from rljax.run.build import build
    from rljax.run.presets import from_preset

    preset, overrides, chunk_steps = PRESETS[algo]
    run = from_preset(preset, tensorboard=False, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    env, agent, trainer, _ = build(run)
    chunk, state, metrics = _compiled(trainer)
    if algo != "ppo":
        state = _until_learning(chunk, state, metrics, "critic_loss")
    steps = trainer.steps_per_chunk
    model = _sbx_model(preset, run)[0]
    model.learn(max(steps, getattr(model, "learning_starts", 0) + steps))  # fill, compile
    box = {"state": state}

    def rljax_loop():
        def go():
            box["state"], m = chunk(box["state"])
            return box["state"], m
        return steps / timed_wall_cpu(go)[0]

    def sbx_loop():
        return steps / timed_wall_cpu(lambda: model.learn(steps, reset_num_timesteps=False))[0]

    measure = {"rljax_loop": rljax_loop, "sbx_loop": sbx_loop}
    cpu: dict[str, list] = {"rljax_learner": [], "sbx_learner": []}
    if algo != "ppo":
        g, batch_size = run.config.loop.grad_steps, run.config.replay.batch_size
        learner = profiling.learner_steps(agent)
        batches = profiling.replay_batches(run.config, env.spec, state.memory,
                                           jax.random.key(3), g)
        lbox = {"state": learner(jax.tree.map(jnp.copy, state.agent), batches)}

        def rljax_learner():
            def go():
                lbox["state"] = learner(lbox["state"], batches)
                return lbox["state"]
            wall, c = timed_wall_cpu(go)
            cpu["rljax_learner"].append(c / g * 1e3)
            return g / wall

        def sbx_learner():
            def go():
                model.train(gradient_steps=g, batch_size=batch_size)
                return model.policy.actor_state.params
            wall, c = timed_wall_cpu(go)
            cpu["sbx_learner"].append(c / g * 1e3)
            return g / wall

        measure.update(rljax_learner=rljax_learner, sbx_learner=sbx_learner)
    load_before = os.getloadavg()[0]
    samples = interleaved(measure, rounds)
    out = {
        "preset": preset, "overrides": {k: str(v) for k, v in overrides.items()},
        "env_id": run.env_id, "sbx": sbx.__version__,
        "loop_sps": {"rljax": median(samples["rljax_loop"]),
                     "sbx": median(samples["sbx_loop"])},
        "rljax_vs_sbx_loop": median([a / b for a, b in zip(
            samples["rljax_loop"], samples["sbx_loop"], strict=True)]),
        "loadavg_1min_before_timing": load_before,
        "loadavg_1min_after_timing": os.getloadavg()[0],
        "rounds": samples,
    }
    if algo != "ppo":
        out["learner_ms_per_grad_step"] = {
            "rljax": 1e3 / median(samples["rljax_learner"]),
            "sbx": 1e3 / median(samples["sbx_learner"])}
        out["learner_cpu_ms_per_grad_step"] = {k.split("_")[0]: median(v)
                                               for k, v in cpu.items()}
        out["rljax_vs_sbx_learner"] = median([a / b for a, b in zip(
            samples["rljax_learner"], samples["sbx_learner"], strict=True)])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", nargs="*", choices=sorted(PRESETS), default=sorted(PRESETS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if not importlib.util.find_spec("sbx"):
        print("sbx-rl is not installed (pip install sbx-rl): nothing to compare")
        return 0
    results = {"machine": machine(), "results": {}}
    for algo in args.algo:
        r = results["results"][algo] = compare(algo, args.rounds)
        loop = r["loop_sps"]
        print(f"{algo:<4} {r['preset']:<14} loop: rljax {loop['rljax']:,.0f} steps/s, sbx "
              f"{loop['sbx']:,.0f} steps/s, rljax/sbx x{r['rljax_vs_sbx_loop']:.2f} (median of "
              f"per-round ratios); load {r['loadavg_1min_before_timing']:.1f} -> "
              f"{r['loadavg_1min_after_timing']:.1f}")
        if "learner_ms_per_grad_step" in r:
            ms, cpu = r["learner_ms_per_grad_step"], r["learner_cpu_ms_per_grad_step"]
            print(f"{'':<19} learner: ms per gradient step rljax {ms['rljax']:.2f}, sbx "
                  f"{ms['sbx']:.2f} (CPU {cpu['rljax']:.2f} / {cpu['sbx']:.2f}); rljax/sbx "
                  f"speed x{r['rljax_vs_sbx_learner']:.2f}")
    print(f"wrote {write_results('sbx_peer', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Is the Breakout DQN learner at full speed inside the compiled loop?

XLA:CPU runs a conv-net gradient step about 10x slower inside a rolled ``lax.scan`` than
jitted on its own, because the gradient convolutions are not rewritten to the canonical
form its fast kernel needs (see :mod:`rljax.networks.conv`). This benchmark times, with
learning active and in interleaved rounds (medians):

* ``standalone``: ``jax.jit(agent.update)`` called ``grad_steps`` times on one batch
  (donated state), the ideal;
* ``chunk_rolled`` / ``chunk_unrolled``: one compiled chunk of one loop update (act and
  env step ``env_steps_per_update`` times, store, sample, ``grad_steps`` gradient steps,
  priorities, target update), with the gradient steps in a rolled or unrolled scan;
* ``act_env_store``: the same chunk before learning starts (the loop's non-learning part),
  so ``chunk - act_env_store`` is the in-loop learner.

``--conv`` picks the Nature CNN's convolution: ``matmul`` (the default, im2col with no
conv op), ``xla`` (XLA's conv with the canonical-form custom VJP) or ``lax`` (plain
``lax.conv`` with JAX's own gradient, to show the slowdown both rewrites remove).

    python -m benchmarks.dqn_learner [--preset breakout-dqn] [--conv matmul|xla|lax]
                                     [--rounds 5] [--set FIELD=VALUE ...] [--out NAME]

Writes benchmarks/results/dqn_learner[_xla|_lax].json (or NAME.json). (Results written
before the ``matmul`` method existed say ``"conv": "ours"``: that was ``xla``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import rljax.networks.conv as conv_module
from benchmarks.common import machine, timed_wall_cpu, write_results
from rljax.loops.memory import make_memory
from rljax.run.build import build
from rljax.run.config import parse_assignments
from rljax.run.presets import from_preset


def _trainer(preset: str, unroll: bool, learning_starts: int, overrides: dict):
    # Learning starts early (16 batches stored): a step costs the same however full the
    # replay is, and the timed rounds start sooner.
    run = from_preset(preset, tensorboard=False, **dict(overrides, unroll=unroll,
                                                         learning_starts=learning_starts))
    run = dataclasses.replace(run, chunk_steps=run.config.loop.steps_per_update,
                              total_steps=10**8)
    env, agent, trainer, _ = build(run)
    assert trainer.updates_per_chunk == 1
    state = trainer.init(jax.random.key(0))
    start = time.perf_counter()
    chunk = trainer.chunk.lower(state).compile()
    return run, env, agent, chunk, state, time.perf_counter() - start


def _measure(preset: str, unroll: bool, rounds: int, overrides: dict):
    """Warm-up timings (no learning yet) and ``rounds`` interleaved (standalone, chunk)
    timing pairs with learning active."""
    batch_size = int(overrides.get("batch_size", from_preset(preset).config.replay.batch_size))
    run, env, agent, chunk, state, compile_time = _trainer(preset, unroll, 16 * batch_size,
                                                           overrides)
    cfg, warm_up = run.config, []
    box = {"loop": state}

    def in_loop():
        box["loop"], box["metrics"] = chunk(box["loop"])
        return box["metrics"]

    while True:  # until every update of a chunk learns; keep the warm-up's timings
        t = timed_wall_cpu(in_loop)
        if bool(np.isfinite(np.asarray(box["metrics"]["loss"])).all()):
            break
        warm_up.append(t)
    state = box["loop"]
    spec = env.spec
    memory = make_memory(capacity=cfg.replay.buffer_size, num_envs=spec.num_envs,
                         batch_size=cfg.replay.batch_size, n_step=cfg.replay.n_step,
                         gamma=cfg.gamma,
                         alpha=cfg.replay.alpha if cfg.replay.prioritized else None,
                         eps=cfg.replay.priority_eps,
                         min_size=cfg.replay.min_replay, frames=spec.is_atari)
    batch = jax.jit(memory.sample)(state.memory, jax.random.key(3), 0.5)
    update = jax.jit(agent.update, donate_argnums=0)
    box["agent"] = update(jax.tree.map(jnp.copy, state.agent), batch, jax.random.key(0))[0]

    def standalone():
        agent_state = box["agent"]
        for i in range(cfg.loop.grad_steps):
            agent_state, _, _ = update(agent_state, batch, jax.random.key(i))
        box["agent"] = agent_state
        return agent_state

    pairs = [(timed_wall_cpu(standalone), timed_wall_cpu(in_loop)) for _ in range(rounds)]
    return cfg, compile_time, warm_up, pairs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="breakout-dqn")
    parser.add_argument("--conv", choices=["matmul", "xla", "lax"], default="matmul")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field of the preset")
    parser.add_argument("--out", default=None, help="results name (default dqn_learner)")
    args = parser.parse_args(argv)
    overrides = parse_assignments(args.set)
    # conv.Conv looks its functions up by module name when it is traced, so replacing them
    # switches every Nature CNN the trainer builds (the default method is "matmul").
    if args.conv == "xla":
        conv_module.conv2d_matmul = conv_module.conv2d
    elif args.conv == "lax":  # JAX's own conv gradient
        conv_module.conv2d_matmul = conv_module.conv2d = conv_module._conv
    # The two loop variants are timed one after the other (each interleaved with the
    # standalone steps), each with its own env pool built just before it runs: two pools
    # built and reset before either steps make the second one's first XLA step fail.
    samples: dict[str, list] = {"standalone": []}
    act_env_store, compile_s, load = [], {}, [os.getloadavg()[0]]
    for unroll in (False, True):
        name = "chunk_unrolled" if unroll else "chunk_rolled"
        cfg, compile_s[name], warm_up, pairs = _measure(args.preset, unroll, args.rounds,
                                                        overrides)
        if not unroll:
            act_env_store = warm_up[len(warm_up) // 2:]  # steady part of the warm-up
        samples["standalone"] += [a for a, _ in pairs]
        samples[name] = [b for _, b in pairs]
    load.append(os.getloadavg()[0])
    med = lambda xs, i: float(np.median([x[i] for x in xs]))
    result = {"machine": machine(), "preset": args.preset, "conv": args.conv,
              "grad_steps": cfg.loop.grad_steps, "batch_size": cfg.replay.batch_size,
              "env_steps_per_loop_update": cfg.loop.steps_per_update,
              "compile_s": compile_s, "loadavg_1min": load}
    for unit, i in (("wall_s", 0), ("cpu_s", 1)):
        out = {name: med(xs, i) for name, xs in samples.items()}
        out["act_env_store"] = med(act_env_store, i)
        for name in ("chunk_rolled", "chunk_unrolled"):
            out[f"{name}_learner"] = out[name] - out["act_env_store"]
            out[f"{name}_learner_vs_standalone"] = out[f"{name}_learner"] / out["standalone"]
        result[unit] = out
    result["samples"] = {k: [[float(a), float(b)] for a, b in v] for k, v in samples.items()}
    result["samples"]["act_env_store"] = [[float(a), float(b)] for a, b in act_env_store]
    suffix = "" if args.conv == "matmul" else f"_{args.conv}"
    result["overrides"] = overrides
    print(f"{args.preset} ({args.conv} conv): per loop update of {cfg.loop.grad_steps} gradient "
          f"steps of {cfg.replay.batch_size} and {cfg.loop.steps_per_update} env steps")
    for unit in ("wall_s", "cpu_s"):
        r = result[unit]
        print(f"  {unit:<6} standalone x{cfg.loop.grad_steps} {r['standalone']:.3f}  "
              f"rolled chunk {r['chunk_rolled']:.3f} (learner {r['chunk_rolled_learner']:.3f}, "
              f"{r['chunk_rolled_learner_vs_standalone']:.2f}x standalone)  unrolled chunk "
              f"{r['chunk_unrolled']:.3f} (learner {r['chunk_unrolled_learner']:.3f}, "
              f"{r['chunk_unrolled_learner_vs_standalone']:.2f}x)  act+env+store "
              f"{r['act_env_store']:.3f}")
    print(f"  compile rolled {compile_s['chunk_rolled']:.1f} s, unrolled "
          f"{compile_s['chunk_unrolled']:.1f} s; load "
          f"{result['loadavg_1min'][0]:.1f} -> {result['loadavg_1min'][1]:.1f}")
    print(f"wrote {write_results(args.out or 'dqn_learner' + suffix, result)}")
    return result


if __name__ == "__main__":
    main()

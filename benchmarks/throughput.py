"""Training throughput against the raw envpool XLA ceiling, in one process.

For each agent the env-only ceiling (random actions in a jitted scan, same task
and num_envs) and the training loop (the preset's compiled chunk) are timed in
interleaved rounds; the figure of merit is the ratio of their medians.

    python -m benchmarks.throughput [--only a2c] [--rounds 5]

Writes benchmarks/results/throughput.json (throughput_gpu.json, ... on an accelerator, so
figures from different machines never overwrite each other).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import jax

from benchmarks.common import (
    RESULTS_DIR,
    interleaved,
    machine,
    make_random_rollout,
    median,
    timed,
    write_results,
)
from rljax import envs
from rljax.run.build import build
from rljax.run.config import from_preset


def _rounds(run, trainer, chunk, state, rounds: int, extra: dict | None = None) -> dict:
    """Interleaved rounds of the compiled training chunk and of the env-only ceiling
    (random actions in a jitted scan, same task and num_envs), in env steps/s; ``extra``
    adds more measurements (name -> steps/s callable) to the same rounds."""
    box = {"train": state}

    def train_sps():
        def go():
            box["train"], metrics = chunk(box["train"])
            return metrics
        return trainer.steps_per_chunk / timed(go)

    num_envs = run.config.num_envs
    ceiling_env = envs.make(run.env_id, num_envs, run.seed + 1, **dict(run.env_options))
    steps = max(1, trainer.steps_per_chunk // num_envs)
    rollout = make_random_rollout(ceiling_env, steps)
    ebox = {"state": rollout(ceiling_env.reset(), jax.random.key(1))}

    def env_sps():
        def go():
            ebox["state"] = rollout(ebox["state"], jax.random.key(2))
            return ebox["state"]
        return steps * num_envs / timed(go)

    return interleaved({"env_only": env_sps, "train": train_sps, **(extra or {})}, rounds)


def _reference_loop(env_id: str) -> dict:
    """The same-process single-file-style reference for ``env_id``, warmed up to its steady
    state, as an extra measurement for :func:`_rounds` (``{}`` if there is none)."""
    if env_id in ("CartPole-v1", "Breakout-v5"):
        from benchmarks.reference_dqn import steady_state

        loop, steps = steady_state(env_id), 5_000 if env_id == "CartPole-v1" else 300
    elif env_id == "Reacher-v5":
        from benchmarks.reference_ddpg import LEARNING_STARTS, ReferenceDDPG

        loop, steps = ReferenceDDPG(), 600
        loop.run(LEARNING_STARTS + 200)
    else:
        return {}
    return {"reference": lambda: loop.steps_per_second(steps)}


def _reference_figures(samples: dict) -> dict:
    """The reference loop's median steps/s and rljax's median per-round ratio to it: both
    ran back to back in each round, so load from other processes largely cancels."""
    if "reference" not in samples:
        return {"reference_loop_sps": None, "vs_reference_loop": None}
    ratios = [t / r for t, r in zip(samples["train"], samples["reference"], strict=True)]
    return {"reference_loop_sps": median(samples["reference"]),
            "vs_reference_loop": median(ratios)}


def bench_preset(preset: str, rounds: int, chunk_steps: int, reference: bool = False,
                 **overrides) -> dict:
    """Ceiling and training steps/s for a preset at its num_envs; ``reference``: also time
    the same-process single-file-style loop for its env (:func:`_reference_loop`)."""
    run = from_preset(preset, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    env, _, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))
    chunk = trainer.chunk.lower(state).compile()
    state, _ = chunk(state)  # warm up (learning may start later in off-policy loops)
    extra = _reference_loop(run.env_id) if reference else {}
    samples = _rounds(run, trainer, chunk, state, rounds, extra)
    env_m, train_m = median(samples["env_only"]), median(samples["train"])
    return {
        **_reference_figures(samples),
        "preset": preset,
        "overrides": {k: str(v) for k, v in overrides.items()},
        "env_id": run.env_id,
        "num_envs": run.config.num_envs,
        "env_steps_per_update": trainer.steps_per_update,
        "env_only_sps": env_m,
        "train_sps": train_m,
        "ratio": train_m / env_m,
        "rounds": samples,
    }


# A widely used single-file JAX DQN measured on the 2-core reference machine, while learning,
# with its defaults: 1 env; CartPole: one gradient step of batch 128 per 10 env steps on a
# 4-120-84-2 MLP; Breakout: one gradient step of batch 32 per 4 env steps on the Nature CNN.
# Both are plain DQN with uniform replay and one-step targets (less work per gradient step
# than rljax's double-Q, prioritized, n-step learner).
SINGLE_FILE_JAX_DQN = {
    "CartPole-v1": dict(sps=4_500, grad_steps_per_env_step=0.1, batch_size=128),
    "Breakout-v5": dict(sps=100, grad_steps_per_env_step=0.25, batch_size=32),
}


def bench_dqn(preset: str, rounds: int, chunk_steps: int, reference: bool = False,
              **overrides) -> dict:
    """Like :func:`bench_preset`, timed only once learning is active (replay filled to
    ``learning_starts``), with the gradient work per env step stated.

    ``reference``: also time :mod:`benchmarks.reference_dqn` (a single-file-style JAX DQN)
    in the same rounds, learning, with epsilon at its final value."""

    import numpy as np

    run = from_preset(preset, tensorboard=False, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    env, _, trainer, _ = build(run)
    cfg = run.config
    state = trainer.init(jax.random.key(0))
    compile_start = time.perf_counter()
    chunk = trainer.chunk.lower(state).compile()
    compile_time = time.perf_counter() - compile_start
    warm_start, learning = time.perf_counter(), False
    while not learning:  # fill the replay: every update of the last chunk learned
        state, metrics = chunk(state)
        learning = bool(np.all(np.isfinite(np.asarray(metrics["loss"]))))
    warm_up_time = time.perf_counter() - warm_start
    extra = _reference_loop(run.env_id) if reference else {}
    load_before = os.getloadavg()[0]
    samples = _rounds(run, trainer, chunk, state, rounds, extra)
    env_m, train_m = median(samples["env_only"]), median(samples["train"])
    per_step = cfg.grad_steps * cfg.batch_size / cfg.steps_per_update
    ref = SINGLE_FILE_JAX_DQN.get(run.env_id)
    # The fixed single-file figures were measured on the 2-core CPU machine: compare with them
    # on a CPU only (the same-process reference loop serves every backend).
    reference = ref["sps"] if ref and jax.default_backend() == "cpu" else None
    # Exact when this configuration does the reference's gradient work (same gradient steps
    # per env step, same batch); otherwise train_sps scaled linearly in samples per env step.
    exact = bool(ref) and (cfg.grad_steps / cfg.steps_per_update == ref["grad_steps_per_env_step"]
                           and cfg.batch_size == ref["batch_size"])
    ref_samples = ref["grad_steps_per_env_step"] * ref["batch_size"] if ref else per_step
    equal_work = train_m * per_step / ref_samples
    return {
        "preset": preset,
        "overrides": {k: str(v) for k, v in overrides.items()},
        "env_id": run.env_id,
        "num_envs": cfg.num_envs,
        "env_steps_per_update": trainer.steps_per_update,
        "grad_steps_per_update": cfg.grad_steps,
        "batch_size": cfg.batch_size,
        "grad_steps_per_env_step": cfg.grad_steps / cfg.steps_per_update,
        "samples_per_env_step": per_step,
        "env_only_sps": env_m,
        "train_sps": train_m,
        "ratio": train_m / env_m,
        "network": {"hidden_sizes": list(cfg.hidden_sizes), "dueling": cfg.dueling,
                    "double_q": cfg.double_q, "prioritized": cfg.prioritized,
                    "n_step": cfg.n_step},
        "reference_gradient_work": ref,
        "equal_work_exact": exact,
        "train_sps_at_equal_gradient_work": equal_work,
        "single_file_jax_dqn_sps": reference,
        "vs_single_file_jax_dqn_at_equal_work": equal_work / reference if reference else None,
        **_reference_figures(samples),
        "compile_time_s": compile_time,
        "warm_up_s": warm_up_time,
        "updates_per_chunk": trainer.updates_per_chunk,
        "loadavg_1min_before_timing": load_before,
        "loadavg_1min_after_timing": os.getloadavg()[0],
        "rounds": samples,
    }


# A widely used single-file JAX DDPG (1 env, one gradient step of batch 256 per env step)
# runs at about this many env steps/s, steady, on the 2-core reference machine.
SINGLE_FILE_JAX_DDPG_SPS = 300
_DDPG_EQUAL_WORK = dict(num_envs=20, env_steps_per_update=1, grad_steps=20, batch_size=256,
                        policy_delay=2, learning_starts=2_000)

BENCHES = {
    "a2c": lambda rounds: bench_preset("cartpole-a2c", rounds, chunk_steps=40_000),
    # DDPG: each preset's own figure, and the single-file JAX DDPG's gradient work: per env
    # step one critic step of batch 256, and an actor step with soft target updates every
    # other env step (its policy_frequency=2). Learning is active from the first timed
    # chunk (learning_starts is reached in the warm-up chunk). Variants: 1 env, the actor
    # every step (policy_delay=1), and its 256x256 networks instead of the presets' 150x150.
    "ddpg": lambda rounds: bench_preset("reacher-ddpg", rounds, chunk_steps=20_000),
    "ddpg-reference": lambda rounds: bench_preset("reacher-ddpg-reference", rounds,
                                                  chunk_steps=20_000),
    "ddpg-equal-work": lambda rounds: bench_preset(
        "reacher-ddpg", rounds, chunk_steps=8_000, **_DDPG_EQUAL_WORK),
    "ddpg-equal-work-1env": lambda rounds: bench_preset(
        "reacher-ddpg", rounds, chunk_steps=4_000, **{**_DDPG_EQUAL_WORK, "num_envs": 1,
                                                      "grad_steps": 1}),
    "ddpg-equal-work-delay1": lambda rounds: bench_preset(
        "reacher-ddpg", rounds, chunk_steps=8_000, **{**_DDPG_EQUAL_WORK, "policy_delay": 1}),
    "ddpg-equal-work-256": lambda rounds: bench_preset(
        "reacher-ddpg", rounds, chunk_steps=8_000, reference=True, **{**_DDPG_EQUAL_WORK,
                                                      "actor_hidden": (256, 256),
                                                      "critic_hidden": (256, 256)}),
    # DQN, timed with learning active. The Breakout preset already does 8 gradient steps of
    # 32 per 32 env steps (the reference's work); CartPole is timed as preset and at the
    # reference's gradient work and network size (16 steps of 128 per 32 envs x 5 steps,
    # hidden 120-84, no dueling head; double Q, prioritized replay and 3-step targets kept).
    "dqn-cartpole": lambda rounds: bench_dqn("cartpole-dqn", rounds, chunk_steps=40_000),
    "dqn-cartpole-equal-work": lambda rounds: bench_dqn(
        "cartpole-dqn", rounds, chunk_steps=32_000, reference=True, num_envs=32,
        env_steps_per_update=5, grad_steps=16, batch_size=128, hidden_sizes=(120, 84),
        dueling=False),
    "dqn-breakout": lambda rounds: bench_dqn("breakout-dqn", rounds, chunk_steps=1_024,
                                             reference=True),
    # The reference's algorithm too: plain one-step DQN, uniform replay, no dueling head.
    "dqn-breakout-plain": lambda rounds: bench_dqn(
        "breakout-dqn", rounds, chunk_steps=1_024, reference=True, double_q=False,
        dueling=False, prioritized=False, td_loss="l2"),
    # Both with XLA's convolutions instead of the im2col matmuls (the reference uses XLA's).
    "dqn-breakout-xla": lambda rounds: bench_dqn(
        "breakout-dqn", rounds, chunk_steps=1_024, reference=True, conv_method="xla"),
    "dqn-breakout-plain-xla": lambda rounds: bench_dqn(
        "breakout-dqn", rounds, chunk_steps=1_024, reference=True, double_q=False,
        dueling=False, prioritized=False, td_loss="l2", conv_method="xla"),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), help="benchmarks to run")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = {"machine": machine(), "results": {}}
    for name in args.only or BENCHES:
        r = BENCHES[name](args.rounds)
        results["results"][name] = r
        print(f"{name:<14} {r['env_id']:<12} envs={r['num_envs']:<3} env-only "
              f"{r['env_only_sps']:>10,.0f} steps/s   train {r['train_sps']:>10,.0f} steps/s   "
              f"ratio {r['ratio']:.2f}")
        if name.startswith("dqn"):
            ref = r["vs_single_file_jax_dqn_at_equal_work"]
            work = r["reference_gradient_work"] or {}
            print(f"{'':<14} {r['grad_steps_per_env_step']:.3g} grad steps of "
                  f"{r['batch_size']} per env step; at the reference's gradient work "
                  f"({work.get('grad_steps_per_env_step')} of {work.get('batch_size')} per env "
                  f"step{'' if r['equal_work_exact'] else ', scaled'}) "
                  f"{r['train_sps_at_equal_gradient_work']:,.0f} steps/s"
                  + (f" = {ref:.2f}x a single-file JAX DQN" if ref else ""))
        if name.startswith("ddpg-equal-work") and jax.default_backend() == "cpu":
            r["vs_single_file_jax_ddpg"] = r["train_sps"] / SINGLE_FILE_JAX_DDPG_SPS
            print(f"{'':<14} 1 critic step of batch 256 per env step: "
                  f"{r['vs_single_file_jax_ddpg']:.1f}x the ~{SINGLE_FILE_JAX_DDPG_SPS} steps/s "
                  "of a single-file JAX DDPG (1 env, its gradient work) on this machine")
        if r.get("reference_loop_sps"):
            algo = "dqn" if name.startswith("dqn") else "ddpg"
            print(f"{'':<14} same-process single-file-style loop (benchmarks/reference_{algo}"
                  f".py): {r['reference_loop_sps']:,.0f} steps/s; rljax "
                  f"{r['vs_reference_loop']:.2f}x (median of per-round ratios)")
    backend = jax.default_backend()
    results_name = "throughput" if backend == "cpu" else f"throughput_{backend}"
    if args.only:  # keep the other benchmarks' last figures
        previous = os.path.join(RESULTS_DIR, f"{results_name}.json")
        if os.path.isfile(previous):
            with open(previous) as f:
                kept = json.load(f).get("results", {})
            results["results"] = {**kept, **results["results"]}
    path = write_results(results_name, results)
    print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()

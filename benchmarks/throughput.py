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
from collections.abc import Callable

import jax
import jax.numpy as jnp

from benchmarks.common import (
    RESULTS_DIR,
    interleaved,
    machine,
    make_random_rollout,
    median,
    timed,
    timed_wall_cpu,
    write_results,
)
from rljax import envs
from rljax.cpu_threads import pool_size, set_cpu_threads
from rljax.records import Memory
from rljax.run.build import build
from rljax.run.presets import from_preset


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

    num_envs = run.config.loop.num_envs
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


def _describe(preset: str, overrides: dict, run, trainer) -> dict:
    """The fields every result starts with: what ran, on which task, at which sizes."""
    return {"preset": preset, "overrides": {k: str(v) for k, v in overrides.items()},
            "env_id": run.env_id, "num_envs": run.config.loop.num_envs,
            "env_steps_per_update": trainer.steps_per_update}


# How the same-process references lower threefry on CPU: "jax" (JAX's own rolled loop, what
# a hand-written loop gets) or "rljax" (the unrolled form rljax installs, rljax.threefry).
REFERENCE_THREEFRY = {"lowering": "jax"}


def _reference_loop(env_id: str, run=None, trainer=None) -> dict:
    """The same-process single-file-style reference for ``env_id`` (for JAX-native envs:
    PPO or PQN at ``run``'s sizes, as many updates per round as ``trainer``'s chunk), warmed
    up to its steady state, as an extra measurement for :func:`_rounds` (``{}`` if there is
    none). It is compiled and run with the threefry lowering of ``REFERENCE_THREEFRY``."""
    from rljax import threefry

    unrolled = REFERENCE_THREEFRY["lowering"] == "rljax"
    with threefry.lowering(unrolled):
        measure = _build_reference(env_id, run, trainer)

    def timed_reference() -> float:
        with threefry.lowering(unrolled):  # a program first compiled here lowers alike
            return measure["reference"]()

    return {"reference": timed_reference} if measure else {}


def _build_reference(env_id: str, run=None, trainer=None) -> dict:
    if envs.is_native(env_id) and run is not None and run.algo in ("ppo", "pqn"):
        from benchmarks.reference_native import ReferenceLoop, Sizes

        c = run.config
        loop = ReferenceLoop(run.algo, env_id, Sizes(c.loop.num_envs, c.loop.rollout_len,
                                                     c.num_epochs,
                                                     c.num_minibatches, c.lr, c.hidden_sizes),
                             updates=trainer.updates_per_chunk)
        return {"reference": loop.steps_per_second}
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
    extra = _reference_loop(run.env_id, run, trainer) if reference else {}
    samples = _rounds(run, trainer, chunk, state, rounds, extra)
    env_m, train_m = median(samples["env_only"]), median(samples["train"])
    return {
        **_reference_figures(samples),
        **_describe(preset, overrides, run, trainer),
        "env_only_sps": env_m,
        "train_sps": train_m,
        "ratio": train_m / env_m,
        "rounds": samples,
    }


def _compiled(trainer, key: int = 0):
    """``(chunk, state)``: the trainer's chunk compiled, and its state after one chunk."""
    state = trainer.init(jax.random.key(key))
    chunk = trainer.chunk.lower(state).compile()
    state, metrics = chunk(state)
    return chunk, state, metrics


def _until_learning(chunk, state, metrics, field: str):
    """Runs chunks until every update of the last one learned (off-policy loops report NaN
    losses until the replay holds ``learning_starts`` transitions)."""
    import numpy as np

    while not bool(np.all(np.isfinite(np.asarray(metrics[field])))):
        state, metrics = chunk(state)
    return state


def _chunk_rate(chunk, box: dict, steps: float) -> Callable[[], float]:
    """``steps`` per second of one call of ``chunk`` on ``box["state"]`` (donated, kept);
    waits for the state, not only the metrics (which may be empty)."""
    def rate():
        def go():
            box["state"], metrics = chunk(box["state"])
            return box["state"], metrics
        return steps / timed(go)
    return rate


def bench_on_policy(preset: str, rounds: int, chunk_steps: int, **overrides) -> dict:
    """:func:`bench_preset` for a rollout-then-learn agent (PPO, PQN), with a profile in the
    same rounds: the same loop with a no-op update (act + env step + record:
    ``rollout_sps``) and the update alone, in a compiled scan on one recorded rollout
    (``update_sps``, env steps learned per second). Per loop update of ``S`` env steps the
    times are ``S / sps``; ``act`` is the rollout's time above the env-only ceiling's."""
    from benchmarks import profiling
    from rljax.run.registry import get_algorithm

    run = from_preset(preset, tensorboard=False, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    _, agent, trainer, _ = build(run)
    chunk, state, _ = _compiled(trainer)
    cfg, algo = run.config, get_algorithm(run.algo)
    per_update, updates = trainer.steps_per_update, trainer.updates_per_chunk
    # The loop without learning, on a pool of its own (stepped as soon as it is reset).
    pool = envs.make(run.env_id, cfg.loop.num_envs, run.seed + 2, **dict(run.env_options))
    acting = algo.make_trainer(profiling.without_update(agent), pool, cfg, updates, None)
    act_chunk, act_state, _ = _compiled(acting, 1)
    rollout, env_state = profiling.collect_rollout(agent, pool, act_state.agent, act_state.env,
                                                   cfg.loop.rollout_len, jax.random.key(5))
    act_box = {"state": act_state.replace(env=env_state)}
    learn = profiling.update_only(agent, updates)
    learn_box = {"state": learn(jax.tree.map(jnp.copy, state.agent), rollout)}

    def update_sps():
        def go():
            learn_box["state"] = learn(learn_box["state"], rollout)
            return learn_box["state"]
        return updates * per_update / timed(go)

    load_before = os.getloadavg()[0]
    samples = _rounds(run, trainer, chunk, state, rounds, {
        "rollout": _chunk_rate(act_chunk, act_box, acting.steps_per_chunk),
        "update": update_sps,
        "gemm_2048": profiling.gemm_rate(2048)})
    med = {k: median(v) for k, v in samples.items()}
    gemm = med.pop("gemm_2048")  # GFLOP/s, not env steps/s
    ms = {k: per_update / v * 1e3 for k, v in med.items()}  # milliseconds per loop update
    flops = profiling.on_policy_update_flops(run.algo, cfg, pool.spec)
    budget_ms = ms["env_only"] / 0.85 - ms["env_only"]
    # The update's matmul work, the rate it ran at, the rate it would need to fit (with acting
    # free) in the time 0.85 of the ceiling leaves, and the best this loop could do here with
    # acting free and every matmul at the large-GEMM rate.
    flop_figures = dict.fromkeys(("mflop_per_update", "update_gflops", "gflops_needed_at_0_85",
                                  "needed_vs_gemm_2048", "ratio_with_update_at_gemm_2048"))
    if flops:
        needed = flops / budget_ms / 1e6
        flop_figures.update(
            mflop_per_update=flops / 1e6, update_gflops=flops / ms["update"] / 1e6,
            gflops_needed_at_0_85=needed, needed_vs_gemm_2048=needed / gemm,
            ratio_with_update_at_gemm_2048=ms["env_only"] / (ms["env_only"] + flops / gemm / 1e6))
    return {
        **_describe(preset, overrides, run, trainer),
        "minibatch_steps_per_update": cfg.num_epochs * cfg.num_minibatches,
        "env_only_sps": med["env_only"],
        "train_sps": med["train"],
        "ratio": med["train"] / med["env_only"],
        "rollout_sps": med["rollout"],
        "update_sps": med["update"],
        "ms_per_update": {"train": ms["train"], "env_only": ms["env_only"],
                          "act": ms["rollout"] - ms["env_only"], "update": ms["update"]},
        # What the loop would reach if the update cost nothing.
        "ratio_without_update": med["rollout"] / med["env_only"],
        "update_budget_ms_at_0_85": budget_ms,
        **flop_figures,
        "gemm_2048_gflops": gemm,
        "loadavg_1min_before_timing": load_before,
        "loadavg_1min_after_timing": os.getloadavg()[0],
        "rounds": samples,
    }


def bench_continuous(preset: str, rounds: int, chunk_steps: int, **overrides) -> dict:
    """A twin-critic agent (TD3, SAC) timed with learning active, against the env-only
    ceiling and against this CPU's matmul rate, all in the same interleaved rounds.

    The gradient steps' matmul FLOPs are counted analytically
    (:func:`benchmarks.profiling.td3_step_flops`, :func:`~benchmarks.profiling.sac_step_flops`);
    achieved GFLOP/s = FLOPs per gradient step x gradient steps per env step x training
    steps/s (everything else the loop does counted as overhead). Two ceilings: a chained
    2048x2048 matmul (the CPU's large-GEMM rate) and a chained 256x256x256 one (the shape
    of the hidden layers at batch 256: the realistic ceiling for these networks); and the
    learner alone (``agent.update`` in a compiled scan on replay batches), to separate
    the learner from acting, storing and sampling."""
    from benchmarks import profiling

    run = from_preset(preset, tensorboard=False, **overrides)
    run = dataclasses.replace(run, chunk_steps=chunk_steps, total_steps=chunk_steps * 1000)
    env, agent, trainer, _ = build(run)
    cfg, spec = run.config, env.spec
    chunk, state, metrics = _compiled(trainer)
    state = _until_learning(chunk, state, metrics, "critic_loss")
    obs_dim, action_dim = spec.obs_shape[0], spec.action_shape[0]
    if run.algo == "td3":
        flops = profiling.td3_step_flops(cfg.replay.batch_size, obs_dim, action_dim,
                                         cfg.actor_hidden,
                                         cfg.critic_hidden, cfg.policy_delay)
    else:
        flops = profiling.sac_step_flops(cfg.replay.batch_size, obs_dim, action_dim,
                                         cfg.actor_hidden,
                                         cfg.critic_hidden)
    steps = 50
    learner = profiling.learner_steps(agent)
    batches = profiling.replay_batches(cfg, spec, state.memory, jax.random.key(3), steps)
    learn_box = {"state": learner(jax.tree.map(jnp.copy, state.agent), batches)}

    per_cpu_s: dict[str, list] = {"learner": [], "gemm_2048": [], "gemm_256": []}

    def learner_gflops():
        def go():
            learn_box["state"] = learner(learn_box["state"], batches)
            return learn_box["state"]
        wall, cpu = timed_wall_cpu(go)
        per_cpu_s["learner"].append(steps * flops["total"] / cpu / 1e9)
        return steps * flops["total"] / wall / 1e9

    load_before = os.getloadavg()[0]
    samples = _rounds(run, trainer, chunk, state, rounds, {
        "gemm_2048": profiling.gemm_rate(2048, per_cpu_second=per_cpu_s["gemm_2048"]),
        "gemm_256": profiling.gemm_rate(256, per_cpu_second=per_cpu_s["gemm_256"]),
        "learner_gflops": learner_gflops})
    med = {k: median(v) for k, v in samples.items()}
    cpu_med = {k: median(v) for k, v in per_cpu_s.items()}
    grad_per_env_step = cfg.loop.grad_steps / cfg.loop.steps_per_update
    achieved = med["train"] * grad_per_env_step * flops["total"] / 1e9
    return {
        **_describe(preset, overrides, run, trainer),
        "grad_steps_per_env_step": grad_per_env_step,
        "batch_size": cfg.replay.batch_size,
        "actor_hidden": list(cfg.actor_hidden),
        "critic_hidden": list(cfg.critic_hidden),
        "obs_dim": obs_dim,
        "action_dim": action_dim,
        "mflop_per_grad_step": {k: v / 1e6 for k, v in flops.items()},
        "env_only_sps": med["env_only"],
        "train_sps": med["train"],
        "ratio": med["train"] / med["env_only"],
        "train_gflops": achieved,
        "learner_only_gflops": med["learner_gflops"],
        "gemm_2048_gflops": med["gemm_2048"],
        "gemm_256_gflops": med["gemm_256"],
        "train_vs_gemm_2048": achieved / med["gemm_2048"],
        "train_vs_gemm_256": achieved / med["gemm_256"],
        "learner_only_vs_gemm_256": med["learner_gflops"] / med["gemm_256"],
        # The same per second of process CPU time (all threads): other processes' load
        # moves these less than the wall-clock figures.
        "gflop_per_cpu_second": cpu_med,
        "learner_only_vs_gemm_2048_per_cpu_second": cpu_med["learner"] / cpu_med["gemm_2048"],
        "learner_only_vs_gemm_256_per_cpu_second": cpu_med["learner"] / cpu_med["gemm_256"],
        "loadavg_1min_before_timing": load_before,
        "loadavg_1min_after_timing": os.getloadavg()[0],
        "rounds": samples,
    }


def _learner_rate(run_steps, state, batches, steps: int, cpu_ms: list) -> Callable[[], float]:
    """Gradient steps per second of ``run_steps`` (:func:`benchmarks.profiling.learner_steps`)
    from a copy of ``state``; appends each call's process CPU ms per step to ``cpu_ms``."""
    box = {"state": run_steps(jax.tree.map(jnp.copy, state), batches)}

    def rate():
        def go():
            box["state"] = run_steps(box["state"], batches)
            return box["state"]
        wall, cpu = timed_wall_cpu(go)
        cpu_ms.append(cpu / steps * 1e3)
        return steps / wall

    return rate


def bench_rainbow(dqn_preset: str, rainbow_preset: str, rounds: int, chunk_steps: int,
                  learner_steps: int, variants: bool = False, **shared) -> dict:
    """Time per gradient step of a Rainbow preset beside its DQN preset at equal gradient
    work (same envs, env steps per update, gradient steps, batch and network; ``shared``
    overrides both), with learning active, in interleaved rounds:

    * ``train``: the whole compiled loop (act, env step, store, sample, learn, priorities),
      chunk time / gradient steps in the chunk;
    * ``learner``: ``agent.update`` alone, ``learner_steps`` steps in a compiled scan on as
      many replay batches.

    n-step returns may differ (Breakout's DQN preset is one-step): they change what replay
    sums when sampling, not the gradient step.

    ``variants``: also the learner of DQN with each of Rainbow's two costly parts alone
    (the 51-atom categorical head and projection; NoisyNet layers), for a breakdown."""
    from benchmarks import profiling
    from rljax.agents.dqn import make_dqn

    runs = {}
    for name, preset in (("dqn", dqn_preset), ("rainbow", rainbow_preset)):
        run = from_preset(preset, tensorboard=False, **shared)
        runs[name] = dataclasses.replace(run, chunk_steps=chunk_steps,
                                         total_steps=chunk_steps * 1000)
    same = ("num_envs", "env_steps_per_update", "grad_steps", "batch_size", "hidden_sizes",
            "head_hidden_sizes", "dueling", "double_q", "prioritized")
    differ = {f: [getattr(runs["dqn"].config, f), getattr(runs["rainbow"].config, f)]
              for f in same if getattr(runs["dqn"].config, f) != getattr(
                  runs["rainbow"].config, f)}
    if differ:
        raise ValueError(f"not equal gradient work: {differ}")
    built = {}
    for name, run in runs.items():
        env, agent, trainer, _ = build(run)  # built and stepped before the next pool is made
        chunk, state, metrics = _compiled(trainer)
        state = _until_learning(chunk, state, metrics, "loss")
        built[name] = (run, env, agent, trainer, chunk, state)
    runs = {k: v[0].config for k, v in built.items()}
    dqn_run, env, _, _, _, dqn_state = built["dqn"]
    batches = profiling.replay_batches(runs["dqn"], env.spec, dqn_state.memory,
                                       jax.random.key(3), learner_steps)
    learners = {"dqn": runs["dqn"], "rainbow": runs["rainbow"]}
    if variants:
        rb = runs["rainbow"]
        learners["dqn+categorical"] = dataclasses.replace(
            runs["dqn"], num_atoms=rb.num_atoms, v_min=rb.v_min, v_max=rb.v_max)
        learners["dqn+noisy"] = dataclasses.replace(runs["dqn"], noisy=True,
                                                    noisy_sigma0=rb.noisy_sigma0)
    measure, cpu_ms = {}, {}
    grad_steps_per_chunk = {}
    for name in ("dqn", "rainbow"):
        run, _, _, trainer, chunk, state = built[name]
        grad_steps_per_chunk[name] = trainer.updates_per_chunk * run.config.loop.grad_steps
        # Seconds per gradient step, as a rate: gradient steps per second.
        measure[f"{name}_train"] = _chunk_rate(chunk, {"state": state},
                                               grad_steps_per_chunk[name])
    for name, config in learners.items():
        # Each learner starts from its loop's trained state where there is one (a fresh
        # network's first steps can differ in cost from a trained one's).
        agent = make_dqn(config, env.spec)
        start = built[name][5].agent if name in built else agent.init(jax.random.key(0))
        cpu_ms[name] = []
        measure[f"{name}_learner"] = _learner_rate(profiling.learner_steps(agent), start,
                                                   batches, learner_steps, cpu_ms[name])
    load_before = os.getloadavg()[0]
    samples = interleaved(measure, rounds)
    ms = {k: 1e3 / median(v) for k, v in samples.items()}  # ms per gradient step
    # rainbow's time / dqn's = dqn's rate / rainbow's, per round.
    ratios = {k: median([d / r for d, r in zip(samples[f"dqn_{k}"], samples[f"rainbow_{k}"],
                                               strict=True)]) for k in ("train", "learner")}
    cfg = runs["dqn"]
    return {
        "presets": [dqn_preset, rainbow_preset],
        "overrides": {k: str(v) for k, v in shared.items()},
        "env_id": dqn_run.env_id,
        "num_envs": cfg.loop.num_envs,
        "env_steps_per_update": cfg.loop.steps_per_update,
        "grad_steps_per_update": cfg.loop.grad_steps,
        "batch_size": cfg.replay.batch_size,
        "network": {"hidden_sizes": list(cfg.hidden_sizes), "dueling": cfg.dueling,
                    "double_q": cfg.double_q, "n_step": cfg.replay.n_step,
                    "prioritized": cfg.replay.prioritized},
        "rainbow": {"num_atoms": runs["rainbow"].num_atoms, "noisy": runs["rainbow"].noisy,
                    "n_step": runs["rainbow"].n_step},
        "grad_steps_per_chunk": grad_steps_per_chunk,
        "ms_per_grad_step": ms,
        # Process CPU time of the learners alone (all threads): steadier than wall time
        # on a loaded machine, where a multi-threaded step waits for descheduled threads.
        "learner_cpu_ms_per_grad_step": {k: median(v) for k, v in cpu_ms.items()},
        # Median of the per-round ratios rainbow / dqn (both ran back to back in each round).
        "rainbow_vs_dqn_train": ratios["train"],
        "rainbow_vs_dqn_learner": ratios["learner"],
        "train_sps": {k: median(samples[f"{k}_train"]) * built[k][0].config.loop.steps_per_update
                      / built[k][0].config.loop.grad_steps for k in ("dqn", "rainbow")},
        "loadavg_1min_before_timing": load_before,
        "loadavg_1min_after_timing": os.getloadavg()[0],
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
    extra = _reference_loop(run.env_id, run, trainer) if reference else {}
    load_before = os.getloadavg()[0]
    samples = _rounds(run, trainer, chunk, state, rounds, extra)
    env_m, train_m = median(samples["env_only"]), median(samples["train"])
    per_step = cfg.loop.grad_steps * cfg.replay.batch_size / cfg.loop.steps_per_update
    ref = SINGLE_FILE_JAX_DQN.get(run.env_id)
    # The fixed single-file figures were measured on the 2-core CPU machine: compare with them
    # on a CPU only (the same-process reference loop serves every backend).
    reference = ref["sps"] if ref and jax.default_backend() == "cpu" else None
    # Exact when this configuration does the reference's gradient work (same gradient steps
    # per env step, same batch); otherwise train_sps scaled linearly in samples per env step.
    per_env_step = cfg.loop.grad_steps / cfg.loop.steps_per_update
    exact = bool(ref) and (per_env_step == ref["grad_steps_per_env_step"]
                           and cfg.replay.batch_size == ref["batch_size"])
    ref_samples = ref["grad_steps_per_env_step"] * ref["batch_size"] if ref else per_step
    equal_work = train_m * per_step / ref_samples
    return {
        **_describe(preset, overrides, run, trainer),
        "grad_steps_per_update": cfg.loop.grad_steps,
        "batch_size": cfg.replay.batch_size,
        "grad_steps_per_env_step": cfg.loop.grad_steps / cfg.loop.steps_per_update,
        "samples_per_env_step": per_step,
        "env_only_sps": env_m,
        "train_sps": train_m,
        "ratio": train_m / env_m,
        "network": {"hidden_sizes": list(cfg.hidden_sizes), "dueling": cfg.dueling,
                    "double_q": cfg.double_q, "prioritized": cfg.replay.prioritized,
                    "n_step": cfg.replay.n_step},
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

_TWIN_CRITIC_WORK = dict(num_envs=20, env_steps_per_update=1, grad_steps=20, batch_size=256,
                         actor_hidden=(256, 256), critic_hidden=(256, 256),
                         learning_starts=256, random_steps=256)

# The many-seeds benchmark's preset and env steps per member per chunk (seeds-gymnax; the
# thread-pool check of docs/scaling.md, benchmarks/scaling_docs.py, times the same programs).
SEEDS_PRESET, SEEDS_CHUNK_STEPS = "gymnax-cartpole-ppo", 16_384


def seed_rates(preset: str, chunk_steps: int,
               counts: tuple[int, ...]) -> tuple[dict[str, Callable[[], float]], dict]:
    """``count`` seeds of ``preset`` in one program (vmapped members), compiled and warmed
    up for each count: ``({str(count): total env steps/s of one chunk call}, description)``."""
    measure, info = {}, {}
    for count in counts:
        run = dataclasses.replace(from_preset(preset, num_seeds=count), chunk_steps=chunk_steps,
                                  total_steps=chunk_steps * 1000)
        _, _, trainer, _ = build(run)
        chunk, state, _ = _compiled(trainer)
        measure[str(count)] = _chunk_rate(chunk, {"state": state},
                                          count * trainer.steps_per_chunk)
        info = _describe(preset, {}, run, trainer)
    return measure, info


def bench_seeds(preset: str, rounds: int, chunk_steps: int,
                counts: tuple[int, ...] = (1, 16, 64, 256)) -> dict:
    """Total env steps/s of ``count`` seeds of ``preset`` in one program (vmapped members),
    for each count, in interleaved rounds; ``vs_one_seed``: the total over one seed's."""
    measure, info = seed_rates(preset, chunk_steps, counts)
    from benchmarks import profiling

    measure["gemm_2048"] = profiling.gemm_rate(2048)
    samples = interleaved(measure, rounds)
    gemm = median(samples.pop("gemm_2048"))
    totals = {k: median(v) for k, v in samples.items()}
    # The ceiling: the update's matmul FLOPs per env step at this CPU's large-GEMM rate.
    run = from_preset(preset)
    flops = profiling.on_policy_update_flops(run.algo, run.config, envs.make(
        run.env_id, run.config.loop.num_envs, 0).spec) / info["env_steps_per_update"]
    return {**info, "env_only_sps": None, "train_sps": totals[str(counts[0])], "ratio": None,
            "total_sps_by_seeds": totals,
            "vs_one_seed": {k: v / totals[str(counts[0])] for k, v in totals.items()},
            "update_flop_per_env_step": flops, "gemm_2048_gflops": gemm,
            "update_gflops_by_seeds": {k: v * flops / 1e9 for k, v in totals.items()},
            "ceiling_sps_at_gemm_2048": gemm * 1e9 / flops,
            "rounds": samples}


# JAX physics beside envpool's MuJoCo Reacher (host CPU physics) at the same num_envs.
PHYSICS_TASKS = ("Reacher-v5", "brax:reacher", "brax:inverted_pendulum",
                 "playground:CartpoleBalance", "playground:ReacherEasy")


def bench_physics(rounds: int, num_envs: tuple[int, ...] = (256, 16), steps: int = 64,
                  tasks: tuple[str, ...] = PHYSICS_TASKS) -> dict:
    """Env-only steps/s (random actions within the bounds, a jitted scan of ``steps`` steps)
    of each task at each ``num_envs``, in interleaved rounds, with the compile time of each
    scan and every task's ratio to envpool's ``Reacher-v5`` at the same num_envs."""
    measure, compile_s = {}, {}
    for n in num_envs:
        for task in tasks:
            env = envs.make(task, n, 0)
            rollout = make_random_rollout(env, steps)
            box = {"state": env.reset()}
            start = time.perf_counter()
            box["state"] = jax.block_until_ready(rollout(box["state"], jax.random.key(0)))
            compile_s[f"{task}@{n}"] = time.perf_counter() - start

            def go(box=box, rollout=rollout, n=n):
                def once():
                    box["state"] = rollout(box["state"], jax.random.key(1))
                    return box["state"]
                return steps * n / timed(once)

            measure[f"{task}@{n}"] = go
    load_before = os.getloadavg()[0]
    samples = interleaved(measure, rounds)
    sps = {k: median(v) for k, v in samples.items()}
    ratio = {k: v / sps[f"{tasks[0]}@{k.rsplit('@', 1)[1]}"] for k, v in sps.items()}
    return {"env_id": ",".join(tasks), "num_envs": list(num_envs), "steps_per_scan": steps,
            "env_only_sps": sps, "vs_envpool_reacher": ratio,
            "first_call_seconds_incl_compile": compile_s,
            "loadavg_1min_before_timing": load_before,
            "loadavg_1min_after_timing": os.getloadavg()[0], "rounds": samples}


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
    # PPO and PQN: training against the env-only ceiling at the same num_envs, with the
    # loop's time split into acting (the loop without its update) and the update alone.
    "ppo": lambda rounds: bench_on_policy("cartpole-ppo", rounds, chunk_steps=40_960),
    "pqn": lambda rounds: bench_on_policy("cartpole-pqn", rounds, chunk_steps=40_960),
    # Their recurrent variants at the same sizes: cartpole-ppo's 64-64 networks become a 64-unit
    # torso -> GRU 64 -> 64-unit actor and critic heads, cartpole-pqn's LayerNorm 128-128 torso
    # feeds a GRU 128; minibatches of whole env sequences (4 of 8 envs x 16 steps).
    "ppo-rnn": lambda rounds: bench_on_policy("cartpole-ppo", rounds, chunk_steps=40_960,
                                              memory=Memory(core="gru", size=64)),
    "pqn-rnn": lambda rounds: bench_on_policy("cartpole-pqn", rounds, chunk_steps=40_960,
                                              memory=Memory(core="gru", size=128)),
    # TD3 and SAC on Reacher at the papers' gradient work (one gradient step of 256 per env
    # step, 256x256 networks: 20 envs, 20 gradient steps per 20 env steps), learning from
    # the second warm-up chunk on, against this CPU's matmul rate in the same rounds.
    "td3": lambda rounds: bench_continuous("reacher-td3", rounds, chunk_steps=400,
                                           **_TWIN_CRITIC_WORK),
    "sac": lambda rounds: bench_continuous("reacher-sac", rounds, chunk_steps=400,
                                           **_TWIN_CRITIC_WORK),
    # Rainbow beside DQN at equal gradient work: the presets share envs, env steps per
    # update, gradient steps, batch and network; replay size and learning start are set
    # alike so that learning is active within seconds.
    # JAX-native envs against the PureJaxRL-style single-file loop at the same sizes.
    "ppo-gymnax": lambda rounds: bench_preset("gymnax-cartpole-ppo", rounds, 16_384,
                                              reference=True),
    "pqn-gymnax": lambda rounds: bench_preset("gymnax-cartpole-pqn", rounds, 16_384,
                                              reference=True),
    "ppo-minatar": lambda rounds: bench_preset("minatar-breakout-ppo", rounds, 81_920,
                                               reference=True),
    "pqn-minatar": lambda rounds: bench_preset("minatar-breakout-pqn", rounds, 40_960,
                                               reference=True),
    "seeds-gymnax": lambda rounds: bench_seeds(SEEDS_PRESET, rounds, SEEDS_CHUNK_STEPS),
    # Brax's and Playground's JAX physics against envpool's Reacher-v5, env only.
    "physics": bench_physics,
    "physics-brax": lambda rounds: bench_physics(rounds, num_envs=(256,),
                                                 tasks=PHYSICS_TASKS[:3]),
    # MJX's CartpoleBalance at the small num_envs a CPU preset can use.
    "physics-cartpole-balance": lambda rounds: bench_physics(
        rounds, num_envs=(8, 32, 128), tasks=("Reacher-v5", "playground:CartpoleBalance")),
    "rainbow-cartpole": lambda rounds: bench_rainbow(
        "cartpole-dqn", "cartpole-rainbow", rounds, chunk_steps=3_200, learner_steps=200,
        variants=True, learning_starts=1_000),
    "rainbow-breakout": lambda rounds: bench_rainbow(
        "breakout-dqn", "breakout-rainbow", rounds, chunk_steps=128, learner_steps=8,
        buffer_size=2**14, learning_starts=1_024),
}


def _print_rainbow(name: str, r: dict) -> None:
    ms = r["ms_per_grad_step"]
    print(f"{name:<14} {r['env_id']:<12} envs={r['num_envs']:<3} {r['grad_steps_per_update']} "
          f"gradient steps of {r['batch_size']} per {r['env_steps_per_update']} env steps; ms per "
          f"gradient step: loop dqn {ms['dqn_train']:.3f}, rainbow {ms['rainbow_train']:.3f} "
          f"(x{r['rainbow_vs_dqn_train']:.2f}); learner alone dqn {ms['dqn_learner']:.3f}, "
          f"rainbow {ms['rainbow_learner']:.3f} (x{r['rainbow_vs_dqn_learner']:.2f})")
    parts = [f"{k[:-len('_learner')]} {v:.3f}" for k, v in ms.items()
             if k.endswith("_learner") and k.startswith("dqn+")]
    if parts:
        print(f"{'':<14} learner alone, ms per gradient step: " + ", ".join(parts))
    cpu = r["learner_cpu_ms_per_grad_step"]
    print(f"{'':<14} learner alone, CPU ms per gradient step: "
          + ", ".join(f"{k} {v:.3f}" for k, v in cpu.items())
          + f" (rainbow / dqn x{cpu['rainbow'] / cpu['dqn']:.2f})")
    print(f"{'':<14} load average (1 min) {r['loadavg_1min_before_timing']:.1f} before, "
          f"{r['loadavg_1min_after_timing']:.1f} after timing")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), help="benchmarks to run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference-threefry", choices=("jax", "rljax"), default="jax",
                        help="threefry lowering of the same-process reference loops on CPU: "
                             "JAX's own (a hand-written loop's) or the unrolled one rljax "
                             "installs (rljax.threefry)")
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="threads of XLA's CPU pool for everything this process times, "
                             "rljax and the references alike (0: one per CPU, JAX's default; "
                             "python -m benchmarks.cpu_threads compares sizes)")
    args = parser.parse_args(argv)
    set_cpu_threads(args.cpu_threads)
    REFERENCE_THREEFRY["lowering"] = args.reference_threefry
    results = {"machine": machine(), "reference_threefry": args.reference_threefry,
               "cpu_threads": pool_size(args.cpu_threads), "results": {}}
    for name in args.only or BENCHES:
        r = BENCHES[name](args.rounds)
        results["results"][name] = r
        if name.startswith("rainbow"):
            _print_rainbow(name, r)
            continue
        if name.startswith("physics"):
            for k, v in r["env_only_sps"].items():
                first = r["first_call_seconds_incl_compile"][k]
                print(f"{k:<34} env-only {v:>10,.0f} steps/s   x{r['vs_envpool_reacher'][k]:.2f} "
                      f"envpool Reacher-v5; first call {first:.0f} s with compile")
            print(f"load average (1 min) {r['loadavg_1min_before_timing']:.1f} before, "
                  f"{r['loadavg_1min_after_timing']:.1f} after timing")
            continue
        if "total_sps_by_seeds" in r:
            print(f"{name:<14} {r['env_id']:<12} total env steps/s by seeds in one program: "
                  + ", ".join(f"{k}: {v:,.0f} ({r['vs_one_seed'][k]:.1f}x)"
                              for k, v in r["total_sps_by_seeds"].items()))
            print(f"{'':<14} update {r['update_flop_per_env_step'] / 1e3:.0f} kFLOP per env "
                  "step: " + ", ".join(f"{k} seeds {v:.1f}" for k, v in
                                       r["update_gflops_by_seeds"].items())
                  + f" GFLOP/s; GEMM 2048^3 {r['gemm_2048_gflops']:.0f} GFLOP/s (same rounds) "
                  f"= a ceiling of {r['ceiling_sps_at_gemm_2048']:,.0f} env steps/s")
            continue
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
        if "ms_per_update" in r:
            m = r["ms_per_update"]
            print(f"{'':<14} per loop update of {r['env_steps_per_update']} env steps: train "
                  f"{m['train']:.2f} ms = env {m['env_only']:.2f} + act {m['act']:.2f} + update "
                  f"{m['update']:.2f} ({r['minibatch_steps_per_update']} minibatch steps; "
                  f"{m['train'] - m['env_only'] - m['act'] - m['update']:+.2f} unaccounted); "
                  f"0.85 of the ceiling leaves {r['update_budget_ms_at_0_85']:.2f} ms for act "
                  f"+ update; without the update the ratio is {r['ratio_without_update']:.2f}")
            if r.get("mflop_per_update"):
                print(f"{'':<14} update: {r['mflop_per_update']:.0f} MFLOP of matmuls at "
                      f"{r['update_gflops']:.1f} GFLOP/s; fitting it in that budget needs "
                      f"{r['gflops_needed_at_0_85']:.0f} GFLOP/s = "
                      f"{r['needed_vs_gemm_2048']:.1f}x this CPU's GEMM 2048^3 rate "
                      f"({r['gemm_2048_gflops']:.0f} GFLOP/s, same rounds); with acting free "
                      f"and the update at that rate the ratio would be "
                      f"{r['ratio_with_update_at_gemm_2048']:.2f}")
        if "train_gflops" in r:
            f = r["mflop_per_grad_step"]
            print(f"{'':<14} {f['total']:.0f} MFLOP per gradient step (target {f['target']:.0f}, "
                  f"critics {f['critics']:.0f}, actor {f['actor']:.0f}); "
                  f"{r['grad_steps_per_env_step']:.3g} steps of {r['batch_size']} per env step: "
                  f"{r['train_gflops']:.1f} GFLOP/s training, {r['learner_only_gflops']:.1f} "
                  f"learner alone; GEMM 2048^3 {r['gemm_2048_gflops']:.1f}, 256^3 "
                  f"{r['gemm_256_gflops']:.1f} GFLOP/s: training at "
                  f"{r['train_vs_gemm_2048']:.2f} / {r['train_vs_gemm_256']:.2f} of them, "
                  f"learner alone at {r['learner_only_vs_gemm_256']:.2f} of 256^3")
            c = r["gflop_per_cpu_second"]
            print(f"{'':<14} per CPU second: learner {c['learner']:.1f}, GEMM 2048^3 "
                  f"{c['gemm_2048']:.1f}, 256^3 {c['gemm_256']:.1f} GFLOP: learner at "
                  f"{r['learner_only_vs_gemm_2048_per_cpu_second']:.2f} / "
                  f"{r['learner_only_vs_gemm_256_per_cpu_second']:.2f} of them")
        if r.get("loadavg_1min_before_timing") is not None:
            print(f"{'':<14} load average (1 min) {r['loadavg_1min_before_timing']:.1f} before, "
                  f"{r['loadavg_1min_after_timing']:.1f} after timing")
        if r.get("reference_loop_sps"):
            algo = "dqn" if name.startswith("dqn") else "ddpg"
            algo = "native" if envs.is_native(r["env_id"]) else algo
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

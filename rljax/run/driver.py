"""The host driver: runs compiled chunks until the step budget is spent.

Between chunks it reads a few scalars (episode statistics, mean losses), draws
the progress line and appends a row to ``metrics.jsonl``. At the end it writes
``summary.json``. A run directory holds::

    config.json     the RunConfig
    metrics.jsonl   one row per ``chunk_steps`` env steps
    summary.json    totals, timing, final return, solved_at_step
    curve.png       the learning curve
    events.out.tfevents.*   the same metrics for TensorBoard
"""

from __future__ import annotations

import datetime
import math
import os
import signal
import threading
import time
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

from rljax import envs
from rljax._version import __version__
from rljax.envs.stats import last_episodes
from rljax.loops.state import LoopState, Trainer
from rljax.parallel import data_parallel, devices, multihost, sweep
from rljax.parallel.members import vectorize_members, vectorize_seeds
from rljax.run import checkpoint
from rljax.run.config import RunConfig
from rljax.run.logging import JsonlWriter, Progress, Sinks, TensorBoardSink, WandbSink, write_json
from rljax.run.registry import get_algorithm


class RunResult(NamedTuple):
    """What a finished (or interrupted) run leaves behind.

    Attributes:
        run_dir: the run directory.
        state: the final :class:`LoopState` (on the device).
        summary: the summary dict written to ``summary.json``.
        metrics: the rows written to ``metrics.jsonl``.
        agent: the agent the run trained.
        spec: the environment's spec.
    """

    run_dir: str
    state: LoopState
    summary: dict
    metrics: list[dict]
    agent: Any
    spec: envs.EnvSpec


def make_run_dir(run: RunConfig) -> str:
    name = run.preset or f"{run.algo}-{run.env_id}"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(run.logdir, f"{name}-s{run.seed}-{stamp}")
    path, i = base, 1
    while os.path.exists(path):
        i += 1
        path = f"{base}-{i}"
    os.makedirs(path)
    return path


def build(run: RunConfig) -> tuple[envs.Env, Any, Trainer, int]:
    """Builds env, agent and trainer for ``run``; returns them and the chunk count.

    With several members (seeds, sweep values) the trainer runs them all in one
    program over one envpool pool; ``agent`` is the base config's agent.

    Raises:
        rljax.parallel.sweep.SweepError: the swept hyperparameter changes shapes.
    """
    algo = get_algorithm(run.algo)
    members = run.members
    mesh = None
    if run.devices > 1:
        available = jax.devices()
        if run.devices > len(available):
            raise ValueError(f"devices={run.devices} but JAX sees {len(available)} "
                             f"({available[0].platform}); on CPU, set XLA_FLAGS="
                             f"--xla_force_host_platform_device_count={run.devices}")
        if len(members) == 1:
            return _build_data_parallel(run, algo, available[:run.devices])
        mesh = devices.device_mesh(available[:run.devices])
        env = devices.make_sharded_env(run.env_id, run.config.num_envs,
                                        [s for s, _ in members], mesh, **dict(run.env_options))
    else:
        env = envs.make(run.env_id, run.config.num_envs, run.seed, num_seeds=len(members),
                        member_seeds=[s for s, _ in members], **dict(run.env_options))
    agent = algo.make_agent(run.config, env.spec)

    def make_trainer(config):
        member_agent = agent if config is run.config else algo.make_agent(config, env.spec)
        return algo.make_trainer(member_agent, env, config, _updates_per_chunk(run),
                                 run.threshold)

    trainer = make_trainer(run.config)
    num_chunks = _num_chunks(run, trainer)
    if run.sweep is not None:
        field, values = run.sweep
        builder = sweep.sweep_builder(make_trainer, run.config, field)
        trainer = vectorize_members(builder, env, [s for s, _ in members],
                                    sweep.sweep_values(run.config, field, values,
                                                       run.num_seeds))
    elif len(members) > 1 or mesh is not None:
        trainer = vectorize_seeds(trainer, env, run.seed)
    if mesh is not None:
        trainer = devices.shard_trainer(trainer, env, [s for s, _ in members], mesh)
    if run.sweep is not None:
        trainer = sweep.checked_init(trainer, run.sweep[0])
    return env, agent, trainer, num_chunks


def _total_updates(run: RunConfig) -> int:
    return max(1, math.ceil(run.total_steps / run.config.steps_per_update))


def _updates_per_chunk(run: RunConfig) -> int:
    """Updates per chunk asked of the trainer: ``chunk_steps`` worth, evened out over the
    run's chunks."""
    total = _total_updates(run)
    chunks = max(1, math.ceil(total / max(1, run.chunk_steps // run.config.steps_per_update)))
    return math.ceil(total / chunks)


def _num_chunks(run: RunConfig, trainer: Trainer) -> int:
    # A trainer may compile fewer updates per chunk than asked (e.g. conv learners on
    # XLA:CPU, which are slow inside rolled loops); the chunk count follows.
    return max(1, math.ceil(_total_updates(run) / trainer.updates_per_chunk))


def _build_data_parallel(run: RunConfig, algo, device_list) -> tuple[envs.Env, Any, Trainer, int]:
    """One agent learning data-parallel over ``devices`` (rljax.parallel.data_parallel)."""
    mesh = devices.device_mesh(device_list, data_parallel.AXIS)
    env = data_parallel.make_env(run.env_id, run.config.num_envs, run.seed, mesh,
                                 **dict(run.env_options))
    agent = algo.make_agent(run.config, env.spec, axis_name=data_parallel.AXIS)
    trainer = algo.make_trainer(agent, env, run.config, _updates_per_chunk(run), run.threshold,
                                axis_name=data_parallel.AXIS)
    return (env, agent, data_parallel.shard_trainer(trainer, env, mesh),
            _num_chunks(run, trainer))


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training; a checkpoint was saved."""

    def __init__(self, run_dir: str, env_steps: int):
        super().__init__(f"training interrupted at env step {env_steps:,}; checkpoint and "
                         f"metrics saved in {run_dir}")
        self.run_dir = run_dir
        self.env_steps = env_steps


class NonFiniteError(RuntimeError):
    """A loss or parameter became NaN or infinite."""


class _StopSignals:
    """Turns SIGINT/SIGTERM into a flag checked between chunks (main thread only)."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received is not None:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@jax.jit
def _finite(tree) -> jax.Array:
    leaves = [jax.numpy.all(jax.numpy.isfinite(x)) for x in jax.tree.leaves(tree)
              if jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)]
    return jax.numpy.all(jax.numpy.stack(leaves)) if leaves else jax.numpy.array(True)


def _nonfinite_metric(row: dict) -> str | None:
    for name, value in row.items():
        if isinstance(value, float) and math.isinf(value):
            return name
    return None


def _chunk_row(metrics: list[dict], stats: Any, prev_episodes: int) -> dict:
    row = {k: float(np.nanmean(np.concatenate([np.ravel(m[k]) for m in metrics])))
           for k in metrics[0]} if metrics else {}
    new = int(stats.episodes) - prev_episodes
    rets, lens = last_episodes(stats, new)
    rets100, _ = last_episodes(stats, 100)
    row["episodes"] = int(stats.episodes)
    row["episode_return_mean"] = float(np.mean(rets)) if len(rets) else None
    row["episode_length_mean"] = float(np.mean(lens)) if len(lens) else None
    row["return_mean_100"] = float(np.mean(rets100)) if len(rets100) else None
    return row


def _seed(tree: Any, k: int, num_seeds: int) -> Any:
    """Seed ``k``'s slice of a state or metrics tree (the tree itself for one seed)."""
    return tree if num_seeds == 1 else jax.tree.map(lambda x: x[k], tree)


_SPREAD_KEYS = ("episode_return_mean", "return_mean_100", "eval_return_mean")


def _aggregate(rows: list[dict], base: dict) -> dict:
    """Mean over seeds of each numeric key, with the std of the return keys."""
    out = dict(base)
    for key in rows[0]:
        if key in base:
            continue
        values = [r.get(key) for r in rows if isinstance(r.get(key), int | float)]
        if values:
            out[key] = float(np.mean(values))
            if key in _SPREAD_KEYS:
                out[f"{key}_std"] = float(np.std(values))
    return out


def _manifest(run: RunConfig) -> dict:
    return {"rljax_version": __version__, "preset": run.preset, "algo": run.algo,
            "env_id": run.env_id, "run": run.to_dict()}


def train_run(run: RunConfig, *, run_dir: str | None = None, progress: bool = True,
              resume: str | None = None) -> RunResult:
    """Trains as ``run`` says, writing the run directory; returns a :class:`RunResult`.

    Args:
        run: the run configuration.
        run_dir: run directory (default: a new folder under ``run.logdir``).
        progress: draw the progress line.
        resume: a run directory whose checkpoint to continue from (its config must
            match ``run`` except for the step budget and logging options).

    Raises:
        TrainingInterrupted: SIGINT/SIGTERM arrived; a checkpoint was saved first.
        NonFiniteError: a loss or parameter became non-finite; the last finite
            checkpoint is kept.
        rljax.run.checkpoint.CheckpointError: ``resume`` does not hold a usable checkpoint.
    """
    start = time.perf_counter()
    manifest = _manifest(run)
    if resume is not None:
        checkpoint.check_compatible(checkpoint.read_manifest(resume), manifest["run"])
        run_dir = resume
    env, agent, trainer, num_chunks = build(run)
    # Across processes the first one writes the run directory; all take part in the
    # collectives that fetch the state (multihost.fetch).
    writer = multihost.is_writer()
    if writer:
        run_dir = run_dir or make_run_dir(run)
        os.makedirs(run_dir, exist_ok=True)
        write_json(os.path.join(run_dir, "config.json"), run.to_dict())
    state = trainer.init(jax.random.key(run.seed))
    if resume is not None:
        # Restored arrays go where the fresh state lives (sharded over devices or not).
        state = jax.tree.map(multihost.place, checkpoint.restore(resume, state), state)
    compile_start = time.perf_counter()
    chunk = trainer.chunk.lower(state).compile()
    compile_time = time.perf_counter() - compile_start
    evaluate = None
    if run.eval_every:
        from rljax.loops.evaluation import make_evaluator

        evaluate = make_evaluator(agent.greedy_act, run.env_id, run.eval_episodes,
                                  run.seed + 10_000, dict(run.env_options))
    num_seeds = trainer.num_seeds
    first_steps = int(np.ravel(multihost.fetch(state.env_steps))[0])
    next_eval = (first_steps // run.eval_every + 1) * run.eval_every if evaluate else 0
    final_evals: list[dict] | None = None
    total = num_chunks * trainer.steps_per_chunk
    log_every = max(1, round(run.chunk_steps / trainer.steps_per_chunk))
    save_every = max(1, round(run.checkpoint_steps / trainer.steps_per_chunk))
    display = Progress(total, enabled=progress and writer, label=f"[{run.preset or run.algo}] ")
    sinks = _open_sinks(run, run_dir) if writer else Sinks([])
    seed_sinks = [JsonlWriter(os.path.join(_member_dir(run_dir, run, k), "metrics.jsonl"))
                  for k in range(num_seeds)] if num_seeds > 1 and writer else []
    rows: list[dict] = []
    pending: list[dict] = []
    prev_episodes = np.ravel(multihost.fetch(state.env.stats.episodes)).tolist()
    interrupted = False
    done_chunks = first_steps // trainer.steps_per_chunk
    train_start = period_start = time.perf_counter()
    try:
        with _StopSignals() as stop:
            for i in range(done_chunks, num_chunks):
                state, metrics = chunk(state)
                pending.append(metrics)
                last = i == num_chunks - 1 or (run.stop_on_solve and bool(
                    np.all(multihost.fetch(state.solved_at) >= 0)))
                if not (len(pending) >= log_every or last or stop.received):
                    continue
                if not bool(multihost.fetch(_finite(state.agent))):
                    raise NonFiniteError(_nonfinite_message(run_dir, state, "parameter"))
                metrics, stats, steps = multihost.fetch((pending, state.env.stats,
                                                         state.env_steps))
                env_steps = int(np.ravel(steps)[0])
                now = time.perf_counter()
                base = {"env_steps": env_steps, "wall_time_s": now - start,
                        "sps": num_seeds * len(pending) * trainer.steps_per_chunk / max(
                            now - period_start, 1e-9)}
                per_seed = [dict(base, **_chunk_row([_seed(m, k, num_seeds) for m in metrics],
                                                    _seed(stats, k, num_seeds),
                                                    prev_episodes[k]))
                            for k in range(num_seeds)]
                for name in [_nonfinite_metric(r) for r in per_seed]:
                    if name is not None:
                        raise NonFiniteError(_nonfinite_message(run_dir, state, name))
                if evaluate is not None and (last or env_steps >= next_eval):
                    params = multihost.fetch(agent.params(state.agent))
                    final_evals = [evaluate(_seed(params, k, num_seeds))
                                   for k in range(num_seeds)]
                    for r, ev in zip(per_seed, final_evals, strict=True):
                        r["eval_return_mean"] = ev["return_mean"]
                        r["eval_episodes"] = ev["episodes"]
                    next_eval = (env_steps // run.eval_every + 1) * run.eval_every
                row = per_seed[0] if num_seeds == 1 else _aggregate(per_seed, base)
                prev_episodes = [r["episodes"] for r in per_seed]
                pending, period_start = [], now
                rows.append(row)
                sinks.write(row)
                for sink, r in zip(seed_sinks, per_seed[:len(seed_sinks)], strict=True):
                    sink.write(r)
                avg_sps = num_seeds * (env_steps - first_steps) / max(now - train_start, 1e-9)
                display.update(env_steps, avg_sps, row["return_mean_100"],
                               num_seeds * (total - env_steps) / max(avg_sps, 1e-9))
                if last or stop.received or (i + 1) % save_every == 0:
                    checkpoint.save(run_dir, state, manifest)
                if stop.received and not last:
                    interrupted = True
                    raise TrainingInterrupted(run_dir, env_steps)
                if last:
                    break
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        display.close()
        sinks.close()
        for sink in seed_sinks:
            sink.close()
        summary = _summary(run, state, start, train_start, compile_time, interrupted,
                           first_steps, final_evals)
        if writer:
            write_json(os.path.join(run_dir, "summary.json"), summary)
            for k, seed_summary in enumerate(summary.get("seeds", [])):
                folder = _member_dir(run_dir, run, k)
                write_json(os.path.join(folder, "summary.json"), seed_summary)
                write_json(os.path.join(folder, "config.json"), _member_config(run, k))
            _plot_curve(run_dir)
    return RunResult(run_dir, state, summary, rows, agent, env.spec)


def _member_name(run: RunConfig, k: int) -> str:
    seed, value = run.members[k]
    return f"seed_{seed}" if run.sweep is None else f"{run.sweep[0]}={value:g}_seed_{seed}"


def _member_dir(run_dir: str, run: RunConfig, k: int) -> str:
    """Member ``k``'s folder: ``seed_S`` (seeds) or ``FIELD=VALUE_seed_S`` (sweeps)."""
    path = os.path.join(run_dir, _member_name(run, k))
    os.makedirs(path, exist_ok=True)
    return path


def _member_config(run: RunConfig, k: int) -> dict:
    """Member ``k`` as a single run's config.json (plus a plot label for sweeps)."""
    seed, value = run.members[k]
    out = dict(run.to_dict(), seed=seed, num_seeds=1, sweep=None)
    if run.sweep is not None:
        field = run.sweep[0]
        out["config"] = dict(out["config"], **{field: value})
        out["label"] = f"{run.preset or run.algo} {field}={value:g}"
    return out


def _nonfinite_message(run_dir: str, state, quantity: str) -> str:
    steps = int(np.ravel(multihost.fetch(state.env_steps))[0])
    try:
        if run_dir is None:  # a process that does not write the run directory
            raise checkpoint.CheckpointError("not written here")
        saved = checkpoint.read_manifest(run_dir).get("env_steps")
        where = f"the last finite checkpoint (env step {saved:,}) is in {run_dir}"
    except checkpoint.CheckpointError:
        where = "no checkpoint had been saved yet"
    return f"non-finite {quantity} by env step {steps:,}; training stopped; {where}"


def _open_sinks(run: RunConfig, run_dir: str) -> Sinks:
    sinks: list = [JsonlWriter(os.path.join(run_dir, "metrics.jsonl"))]
    if run.tensorboard:
        sinks.append(TensorBoardSink(run_dir))
    if run.wandb_project:
        sinks.append(WandbSink(run.wandb_project, run.to_dict(), os.path.basename(run_dir)))
    return Sinks(sinks)


def _plot_curve(run_dir: str) -> None:
    """Writes curve.png; a plotting failure must never cost the run its results."""
    from rljax.run.plotting import load_curve, plot_runs

    try:
        if len(load_curve(run_dir)[0]):
            plot_runs([run_dir], os.path.join(run_dir, "curve.png"))
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"could not draw {run_dir}/curve.png: {e}", stacklevel=2)


def _seed_summary(stats: Any, solved_at: Any) -> dict:
    rets, lens = last_episodes(stats, 100)
    return {
        "episodes": int(stats.episodes),
        "final_return_mean": float(np.mean(rets)) if len(rets) else None,
        "final_length_mean": float(np.mean(lens)) if len(lens) else None,
        "solved_at_step": int(solved_at) if int(solved_at) >= 0 else None,
    }


def _sweep_summary(run: RunConfig, members: list[dict]) -> list[dict]:
    """Per sweep value: the mean and std over its seeds, and how many solved."""
    field, values = run.sweep
    out = []
    for value in values:
        group = [m for m in members if m["sweep"][field] == value]
        finals = [m["final_return_mean"] for m in group if m["final_return_mean"] is not None]
        solved = [m["solved_at_step"] for m in group if m["solved_at_step"] is not None]
        out.append({field: value, "final_return_mean": float(np.mean(finals)) if finals else None,
                    "final_return_std": float(np.std(finals)) if finals else None,
                    "seeds_solved": len(solved),
                    "solved_at_step_mean": float(np.mean(solved)) if solved else None})
    return out


def _summary(run: RunConfig, state: LoopState, start: float, train_start: float,
             compile_time: float, interrupted: bool, first_steps: int = 0,
             evals: list[dict] | None = None) -> dict:
    """The run's summary; with several seeds the single-run keys aggregate them
    (returns: mean over seeds; ``solved_at_step``: when the last seed solved, null
    unless all did; ``sps``: all seeds' env steps) and ``seeds`` lists each one."""
    stats, steps, solved_at = multihost.fetch((state.env.stats, state.env_steps,
                                               state.solved_at))
    num_seeds = run.num_members
    env_steps = int(np.ravel(steps)[0])
    seeds = []
    for k, (seed, value) in enumerate(run.members):
        one = dict(seed=seed, **_seed_summary(_seed(stats, k, num_seeds),
                                              np.ravel(solved_at)[k]))
        if value is not None:
            one["sweep"] = {run.sweep[0]: value}
        if evals is not None:
            one["eval_return_mean"] = evals[k]["return_mean"]
            one["eval_returns"] = evals[k]["returns"]
        seeds.append(one)
    train_time = time.perf_counter() - train_start
    solved = [s["solved_at_step"] for s in seeds if s["solved_at_step"] is not None]
    finals = [s["final_return_mean"] for s in seeds if s["final_return_mean"] is not None]
    summary = {
        "preset": run.preset,
        "algo": run.algo,
        "env_id": run.env_id,
        "seed": run.seed,
        "env_steps": env_steps,
        "wall_time_s": time.perf_counter() - start,
        "compile_time_s": compile_time,
        "sps": num_seeds * (env_steps - first_steps) / max(train_time, 1e-9),
        "episodes": sum(s["episodes"] for s in seeds),
        "final_return_mean": float(np.mean(finals)) if finals else None,
        "final_length_mean": seeds[0]["final_length_mean"] if num_seeds == 1 else None,
        "threshold": run.threshold,
        "solved_at_step": max(solved) if len(solved) == num_seeds else None,
        "device": str(jax.devices()[0].device_kind),
    }
    if evals is not None:
        means = [s["eval_return_mean"] for s in seeds if s["eval_return_mean"] is not None]
        summary["eval_return_mean"] = float(np.mean(means)) if means else None
        if num_seeds == 1:
            summary["eval_returns"] = seeds[0]["eval_returns"]
    if num_seeds > 1:
        summary["num_seeds"] = num_seeds
        summary["total_env_steps"] = num_seeds * env_steps
        summary["final_return_std"] = float(np.std(finals)) if finals else None
        summary["seeds_solved"] = len(solved)
        summary["seeds"] = seeds
    if run.sweep is not None:
        summary["num_members"] = run.num_members
        summary["num_seeds"] = run.num_seeds
        summary["sweep"] = _sweep_summary(run, seeds)
    if interrupted:
        summary["interrupted"] = True
    if first_steps:
        summary["resumed_from_step"] = first_steps
    return summary

"""The host driver: runs compiled chunks until the step budget is spent.

Between chunks it reads a few scalars (episode statistics, mean losses), draws the progress
line, appends a row to ``metrics.jsonl``, evaluates and checkpoints on their cadences, and
stops on SIGINT/SIGTERM or a non-finite value. At the end it writes the summaries
(:mod:`rljax.run.build` assembles the run, :mod:`rljax.run.rundir` lays out its directory).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

from rljax import cpu_threads, envs
from rljax.envs import native
from rljax.envs.stats import last_episodes
from rljax.loops.state import LoopState, Trainer
from rljax.parallel import multihost
from rljax.run import best, checkpoint, resuming, rundir, startup, stopping
from rljax.run.build import build, make_env
from rljax.run.config import RunConfig
from rljax.run.logging import JsonlWriter, Progress, Sinks, TensorBoardSink, WandbSink


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


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training; a checkpoint was saved."""

    def __init__(self, run_dir: str, env_steps: int):
        super().__init__(f"training interrupted at env step {env_steps:,}; checkpoint and "
                         f"metrics saved in {run_dir}")
        self.run_dir = run_dir
        self.env_steps = env_steps


NothingToDo = resuming.NothingToDo


class NonFiniteError(RuntimeError):
    """A loss or parameter became NaN or infinite."""


def _nonfinite_metric(row: dict) -> str | None:
    return next((k for k, v in row.items() if isinstance(v, float) and math.isinf(v)), None)


def _nonfinite_message(run_dir: str | None, state, quantity: str, saved: int | None) -> str:
    steps = int(np.ravel(multihost.fetch(state.env_steps))[0])
    where = ("no checkpoint had been saved yet" if saved is None else
             f"the last finite checkpoint (env step {saved:,}) is in {run_dir}")
    return f"non-finite {quantity} by env step {steps:,}; training stopped; {where}"


def _mean_of_logged(values: list[Any]) -> float:
    """Mean over the chunk's updates of a metric, skipping NaN (an update that did not
    learn); NaN when none did (no "mean of empty slice" warning)."""
    x = np.concatenate([np.ravel(v) for v in values])
    return float(np.nanmean(x)) if not np.all(np.isnan(x)) else float("nan")


def _chunk_row(metrics: list[dict], stats: Any, prev_episodes: int) -> dict:
    row = {k: _mean_of_logged([m[k] for m in metrics]) for k in metrics[0]} if metrics else {}
    new = int(stats.episodes) - prev_episodes
    rets, lens = last_episodes(stats, new)
    rets100, _ = last_episodes(stats, 100)
    row["episodes"] = int(stats.episodes)
    row["episode_return_mean"] = float(np.mean(rets)) if len(rets) else None
    row["episode_length_mean"] = float(np.mean(lens)) if len(lens) else None
    row["return_mean_100"] = float(np.mean(rets100)) if len(rets100) else None
    return row


def _open_sinks(run: RunConfig, run_dir: str) -> Sinks:
    sinks: list = [JsonlWriter(os.path.join(run_dir, "metrics.jsonl"))]
    if run.tensorboard:
        sinks.append(TensorBoardSink(run_dir))
    if run.wandb_project:
        sinks.append(WandbSink(run.wandb_project, run.to_dict(), os.path.basename(run_dir)))
    return Sinks(sinks)


class _Host:
    """What the host keeps between chunks: the chunks' metrics not yet logged, the rows,
    the sinks, the progress line and the evaluation cadence.

    Constructing it opens the sinks; :meth:`close` closes them.
    """

    def __init__(self, run: RunConfig, run_dir: str | None, agent: Any, trainer: Trainer,
                 num_chunks: int, state: LoopState, start: float, writer: bool,
                 progress: bool):
        self.run, self.run_dir, self.agent, self.start = run, run_dir, agent, start
        self.evaluate = None
        if run.eval_every:
            from rljax.loops.evaluation import make_evaluator

            self.evaluate = make_evaluator(
                agent.policy, make_env(run.env_id, run.eval_episodes, run.seed + 10_000,
                                       run.env_options), policy_init=agent.policy_init)
            self.evaluate.compile_ahead(rundir.member_slice(
                multihost.fetch(agent.params(state.agent)), 0, trainer.num_seeds))
        self.num_seeds = trainer.num_seeds
        self.steps_per_chunk = trainer.steps_per_chunk
        self.first_steps = int(np.ravel(multihost.fetch(state.env_steps))[0])
        self.saved_at = self.first_steps or None  # env step of the last checkpoint
        self.next_eval = self._eval_after(self.first_steps) if self.evaluate else 0
        self.final_evals: list[dict] | None = None
        self.best = best.Keeper(run_dir if self.evaluate else None)
        # A resumed run runs the chunks its budget still needs (its chunk may be of
        # another size than the checkpointed run's when the budget changed).
        budget = num_chunks * trainer.steps_per_chunk
        self.chunks_left = max(0, -(-(budget - self.first_steps) // trainer.steps_per_chunk))
        self.total = max(budget, self.first_steps + self.chunks_left * trainer.steps_per_chunk)
        self.log_every = max(1, round(run.chunk_steps / trainer.steps_per_chunk))
        self.save_every = max(1, round(run.checkpoint_every / trainer.steps_per_chunk))
        self.display = Progress(self.total, enabled=progress and writer,
                                label=f"[{rundir.run_name(run)}] ")
        self.sinks = _open_sinks(run, run_dir) if writer else Sinks([])
        self.seed_sinks = [
            JsonlWriter(os.path.join(rundir.member_dir(run_dir, run, k), "metrics.jsonl"))
            for k in range(self.num_seeds)] if self.num_seeds > 1 and writer else []
        self.rows: list[dict] = []
        self.pending: list[dict] = []
        self.prev_episodes = np.ravel(multihost.fetch(state.env.stats.episodes)).tolist()
        self.achievements = native.achievement_names(run.env_id)  # Craftax: logged as %
        extras = multihost.fetch(state.env.extras)
        self.prev_extras = [None if extras is None else rundir.member_slice(
            extras, k, self.num_seeds) for k in range(self.num_seeds)]
        # train_end: when the last row was logged (what follows it is the summary's finish_s)
        self.train_start = self.period_start = self.train_end = time.perf_counter()
        self.started, self.finite = start, startup.all_finite  # compiled ahead (below)
        self.first_row_at: float | None = None

    def _eval_after(self, env_steps: int) -> int:
        return (env_steps // self.run.eval_every + 1) * self.run.eval_every

    def due(self, last: bool, stopping: bool) -> bool:
        """Whether to log now: ``chunk_steps`` worth of chunks are pending, or the run ends."""
        return len(self.pending) >= self.log_every or last or stopping

    def log(self, state: LoopState, last: bool) -> int:
        """Logs the pending chunks as one metrics row (evaluating first when due);
        returns the env step count.

        Raises:
            NonFiniteError: a parameter or a logged metric is non-finite.
        """
        if not bool(multihost.fetch(self.finite(state.agent))):
            raise NonFiniteError(_nonfinite_message(self.run_dir, state, "parameter",
                                                     self.saved_at))
        got = (self.pending, state.env.stats, state.env_steps, state.env.extras)
        metrics, stats, steps, extras = multihost.fetch(got, "gathering the metrics")
        env_steps = int(np.ravel(steps)[0])
        now = time.perf_counter()
        if self.first_row_at is None:
            self.first_row_at = now
        n = self.num_seeds
        base = {"env_steps": env_steps, "wall_time_s": now - self.start,
                "sps": n * len(self.pending) * self.steps_per_chunk / max(
                    now - self.period_start, 1e-9)}
        per_seed = [dict(base, **_chunk_row([rundir.member_slice(m, k, n) for m in metrics],
                                            rundir.member_slice(stats, k, n),
                                            self.prev_episodes[k]))
                    for k in range(n)]
        if self.achievements and extras is not None:
            for k, r in enumerate(per_seed):
                now_k = rundir.member_slice(extras, k, n)
                r.update(native.achievement_rates(self.achievements, now_k,
                                                  self.prev_extras[k]))
                self.prev_extras[k] = now_k
        for name in [_nonfinite_metric(r) for r in per_seed]:
            if name is not None:
                raise NonFiniteError(_nonfinite_message(self.run_dir, state, name,
                                                         self.saved_at))
        if self.evaluate is not None and (last or env_steps >= self.next_eval):
            self._add_evaluation(state, per_seed, env_steps)
        row = per_seed[0] if n == 1 else rundir.aggregate(per_seed, base)
        self.prev_episodes = [r["episodes"] for r in per_seed]
        self.chunk_s = (now - self.period_start) / len(self.pending)  # for a stop's message
        self.pending, self.period_start = [], now
        self.rows.append(row)
        self.sinks.write(row)
        for sink, r in zip(self.seed_sinks, per_seed[:len(self.seed_sinks)], strict=True):
            sink.write(r)
        avg_sps = n * (env_steps - self.first_steps) / max(now - self.train_start, 1e-9)
        self.display.update(env_steps, avg_sps, row["return_mean_100"],
                            n * (self.total - env_steps) / max(avg_sps, 1e-9))
        return env_steps

    def _add_evaluation(self, state: LoopState, per_seed: list[dict], env_steps: int) -> None:
        params = multihost.fetch(self.agent.params(state.agent))
        self.final_evals = [self.evaluate(rundir.member_slice(params, k, self.num_seeds))
                            for k in range(self.num_seeds)]
        for r, ev in zip(per_seed, self.final_evals, strict=True):
            r["eval_return_mean"] = ev["return_mean"]
            r["eval_episodes"] = ev["episodes"]
        self.next_eval = self._eval_after(env_steps)
        self.best.offer(env_steps, self.final_evals)

    def close(self) -> None:
        self.display.close()
        self.sinks.close()
        for sink in self.seed_sinks:
            sink.close()


def train_run(run: RunConfig, *, run_dir: str | None = None, progress: bool = True,
              resume: str | None = None, started: float | None = None,
              signals: stopping.StopSignals | None = None,
              from_checkpoint: int | None = None, command_line: bool = False) -> RunResult:
    """Trains as ``run`` says, writing the run directory; returns a :class:`RunResult`.

    The run directory is locked while the run trains in it (``RUN_DIR/.lock``).

    Args:
        run: the run configuration.
        run_dir: run directory (default: a new folder under ``run.logdir``).
        progress: draw the progress line.
        resume: a run directory whose newest checkpoint to continue from (its config
            must match ``run`` except for the fields of
            :data:`rljax.run.config.RESUMABLE_CHANGES`). Metrics rows logged after
            that checkpoint are dropped, so the resumed rows follow on.
        started: ``time.perf_counter()`` when the command started (default: now); the
            summary's ``wall_time_s``, ``startup_s`` (to the first row), ``setup_s`` count
            from it.
        from_checkpoint: with ``resume``, the env step of the checkpoint to continue from
            (default: the newest); newer ones are moved to ``RUN_DIR/checkpoint.superseded``.
        command_line: called by ``rljax train``, which sized XLA's CPU pool before
            reading the run's settings (a pool of another size is then reported with the
            option's advice).
        signals: the SIGINT/SIGTERM handler to use, already entered (the command line
            enters one first; see :mod:`rljax.run.stopping`); default: its own.

    Raises:
        TrainingInterrupted: SIGINT/SIGTERM arrived; a checkpoint was saved first.
        rljax.run.stopping.Stopped: SIGINT/SIGTERM arrived during start-up, or twice.
        NonFiniteError: a loss or parameter became non-finite; the last finite
            checkpoint is kept.
        rljax.run.checkpoint.CheckpointError: ``resume`` does not hold a usable checkpoint.
        rljax.run.checkpoint.SaveError: a checkpoint could not be written (full disk).
        rljax.run.rundir.RunDirInUse: another process trains in the run directory.
    """
    start = started = time.perf_counter() if started is None else started
    with warnings.catch_warnings(record=True) as unapplied:  # said after the refusals
        warnings.simplefilter("always")  # (below: before anything starts JAX's backends)
        cpu_threads.set_cpu_threads(run.cpu_threads, command_line=command_line)
        cpu_threads.set_cpu_devices(run.cpu_devices)
    # Across processes the first one writes the run directory; all take part in the
    # collectives that fetch the state (multihost.fetch) and write their own shards of
    # each checkpoint into the first one's run directory.
    writer = multihost.is_writer()
    phases = startup.Phases(f"[{rundir.run_name(run)}] ", enabled=progress and writer)
    with contextlib.ExitStack() as stack:
        stop = signals or stack.enter_context(stopping.StopSignals())
        stop.check()
        try:
            return _start_and_train(run, run_dir, (resume, from_checkpoint, unapplied),
                                    writer, phases, stop, stack, start, started, progress)
        except KeyboardInterrupt:  # a second signal (the Python API)
            left, resumable = stopping.what_is_left(stop.run_dir, stop.created)
            raise stopping.Stopped(f"stopped at once; {left}", resumable) from None
        except stopping.Stopped:
            raise
        except BaseException:
            if stop.phase is not None:  # failed during start-up: remove an empty run dir
                stopping.what_is_left(stop.run_dir, stop.created)
            raise


def _start_and_train(run: RunConfig, run_dir: str | None, resume_from: tuple, writer: bool,
                     phases: startup.Phases, stop: stopping.StopSignals,
                     stack: contextlib.ExitStack, start: float, started: float,
                     progress: bool) -> RunResult:
    stack.enter_context(phases.clock)
    resume, step, unapplied = resume_from
    run, run_dir = resuming.claim_run_dir(run, run_dir, resume, writer, stack, step)
    for w in unapplied:
        warnings.warn(w.message, w.category, stacklevel=3)
    with _phase(phases, stop, "building envs and agent"):
        env, agent, trainer, num_chunks = build(run)
    if writer:
        stop.created = resume is None and (run_dir is None or not os.path.isdir(run_dir))
        run_dir = rundir.open_run_dir(run, run_dir)
        stop.run_dir = run_dir
        if resume is None:
            stack.enter_context(rundir.lock(run_dir))
    shared_dir = rundir.share_path(run_dir)
    with _phase(phases, stop, "initializing" if resume is None else "restoring the checkpoint"):
        def fresh():
            return trainer.init(jax.random.key(run.seed))

        state = fresh() if resume is None else resuming.restore(resume, fresh, step)
        if resume is not None:
            if writer and step is not None:
                resuming.set_aside(run_dir, step)
            if writer:
                # wall_time_s goes on from the last row kept, not from zero.
                start -= rundir.drop_rows_after(
                    run_dir, run, int(multihost.first_local(state.env_steps)))
        jax.block_until_ready(state)
    with _phase(phases, stop, "compiling"):  # every program the chunks' loop runs
        chunk = trainer.chunk.lower(state).compile()
        finite = startup.all_finite.lower(state.agent).compile()
    host = _Host(run, shared_dir, agent, trainer, num_chunks, state, start, writer, progress)
    host.started, host.finite = started, finite
    host.setup_s = host.train_start - started - phases.clock.seconds  # not compiling
    multihost.on_lost(shared_dir, lambda: stopping.newest_step(shared_dir))  # its line's end
    stop.phase, stop.one_process = None, jax.process_count() == 1  # training
    state, summary = _train(run, shared_dir, host, chunk, state, phases.clock, writer, stop)
    return RunResult(run_dir if writer else None, state, summary, host.rows, agent, env.spec)


@contextlib.contextmanager
def _phase(phases: startup.Phases, stop: stopping.StopSignals, name: str):
    """A start-up phase: drawn with its time; a signal that arrived during it stops the
    run once it ends."""
    stop.phase = name
    with phases.phase(name):
        yield
    stop.check()


def _train(run: RunConfig, run_dir: str, host: _Host, chunk: Any, state: LoopState,
           clock: startup.CompileClock, writer: bool,
           stop: stopping.StopSignals) -> tuple[LoopState, dict]:
    """Runs the chunks; returns the final state and the summary (written even when
    training stops early)."""
    manifest = rundir.manifest(run)
    interrupted = failed = False
    try:
        for i in range(host.chunks_left):
            state, metrics = chunk(state)
            signal = multihost.agreed_signal(stop.received)  # all processes stop alike
            host.pending.append(metrics)
            last = i == host.chunks_left - 1 or (run.stop_on_solve and bool(
                np.all(multihost.fetch(state.solved_at) >= 0)))
            if not host.due(last, signal is not None):
                continue
            env_steps = host.log(state, last)
            host.train_end, stop.chunk_s = time.perf_counter(), host.chunk_s
            # The checkpoint follows the row, so a saved state is always logged.
            if last or signal or (i + 1) % host.save_every == 0:
                with stop.saving():
                    checkpoint.save(run_dir, state, manifest, keep=run.keep_checkpoints)
                host.saved_at = env_steps
            host.best.save(run_dir, state, manifest, stop.saving)
            if signal and not last:
                stop.received, interrupted = signal, True
                raise TrainingInterrupted(run_dir, env_steps)
            if last:
                break
    except KeyboardInterrupt:
        interrupted = failed = True
        raise
    except BaseException:
        failed = True
        raise
    finally:
        times = (host.start, host.train_start, host.train_end if host.rows else time.perf_counter())
        host.close()
        summary = rundir.run_summary(run, state, times, clock.seconds, interrupted,
                                     host.first_steps, host.final_evals)
        summary["startup_s"] = (None if host.first_row_at is None
                                else host.first_row_at - host.started)
        summary["setup_s"] = host.setup_s
        summary.update(host.best.summary())
        rundir.stamp_finish(summary, times)
        if writer:
            try:
                rundir.write_summaries(run_dir, run, summary, times)
            except OSError:
                if not failed:  # else the error in flight says what went wrong (full disk)
                    raise
    return state, summary

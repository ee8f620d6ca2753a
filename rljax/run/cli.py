"""Command line: ``rljax train | eval | presets | plot | report``.

Mistakes in what the user typed (unknown preset, field or value, bad task id)
print one line ``rljax: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from rljax.run import cli_extras

EXIT_USAGE = 2


def _process_start() -> float:
    """The ``time.perf_counter()`` reading of when this process started (Linux: its
    start time in /proc, so the interpreter's own start and the imports before this
    module count too); elsewhere now."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 600 else now


_STARTED = _process_start()  # the command's start, for the summary's times


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, status 2, like every other usage error
        self.exit(EXIT_USAGE, f"rljax: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rljax", description="Deep RL agents as pure JAX functions.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="train an agent from a preset, or resume a run")
    train.add_argument("preset", nargs="?",
                       help="preset name (see `rljax presets`); left out with --resume, the "
                            "run continues with the configuration it was saved with")
    _add_run_options(train)
    train.add_argument("--distributed", action="store_true",
                       help="join a multi-process run (jax.distributed) before training; "
                            "without the three options below, JAX detects the cluster "
                            "(SLURM, Cloud TPU, ...). Run the same command in every process")
    train.add_argument("--coordinator", metavar="HOST:PORT",
                       help="with --distributed: address of process 0's coordinator")
    train.add_argument("--num-processes", metavar="N", type=int,
                       help="with --distributed: number of processes")
    train.add_argument("--process-id", metavar="I", type=int,
                       help="with --distributed: this process's id, 0 .. N-1")
    train.add_argument("--num-envs", help="number of parallel envs")
    train.add_argument("--set", action="append", metavar="FIELD=VALUE", default=[],
                       help="override an agent config field; repeatable")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue the run saved in RUN_DIR from its newest checkpoint; "
                            "other options may change only the step budget, logging, "
                            "evaluation and checkpoint cadence, and the CPU threads and "
                            "devices")
    train.add_argument("--from-checkpoint", metavar="STEP", type=int,
                       help="with --resume: continue from the checkpoint of this env step "
                            "instead of the newest (newer ones are moved to "
                            "RUN_DIR/checkpoint.superseded/)")
    train.add_argument("--quiet", action="store_true", help="no progress display")
    train.add_argument("--no-compile-cache", action="store_true",
                       help="do not use JAX's persistent compilation cache (default: on, in "
                            "~/.cache/rljax/jax; also RLJAX_COMPILE_CACHE=0)")

    train.add_argument("--init-timeout", metavar="SECONDS", type=float, default=60.0,
                       help="with --distributed: give up joining the cluster after this "
                            "long (default 60)")
    train.add_argument("--peer-timeout", metavar="SECONDS", type=float, default=300.0,
                       help="with --distributed: stop with one line when another process "
                            "does not answer for this long once joined (default 300)")
    _add_other_commands(sub)
    return parser


def _add_run_options(train: argparse.ArgumentParser, options=None) -> None:
    """One option per run setting (:data:`rljax.run.config.OPTIONS`, from RunConfig's field
    metadata); the value is kept as typed (None when not given) and converted by
    :func:`rljax.run.config.override`, so the command line and the API say the same."""
    from rljax.run.config import OPTIONS

    group = train.add_argument_group("run settings (also keyword arguments of rljax.train)")
    for o in OPTIONS if options is None else options:
        if o.switch:
            group.add_argument(o.flag, dest=o.keyword, action="store_const",
                               const=not o.default, default=None, help=o.help)
        else:
            group.add_argument(o.flag, dest=o.keyword, metavar=o.metavar, help=o.help,
                               action="append" if o.once else "store")


def _add_other_commands(sub) -> None:
    sub.add_parser("bench", help="benchmark suite (rljax bench --help for its options)",
                   add_help=False)

    ev = sub.add_parser("eval", help="evaluate a run's saved policy on fresh envs")
    ev.add_argument("run_dir", metavar="RUN_DIR")
    ev.add_argument("--episodes", default="10", help="number of episodes (default 10)")
    ev.add_argument("--seed", help="seed of the evaluation envs")
    ev.add_argument("--from-checkpoint", metavar="STEP", type=int,
                    help="evaluate the checkpoint of this env step instead of the newest")
    ev.add_argument("--best", action="store_true",
                    help="evaluate the checkpoint of the run's best evaluation (kept by "
                         "runs trained with --eval-every)")

    plot = sub.add_parser("plot", help="plot return against env steps for run directories")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", help="output PNG (default: RUN_DIR/curve.png for one run, "
                                     "curve.png in the runs' common folder for several)")
    plot.add_argument("--key", default="return_mean_100", help="metric to plot")
    plot.add_argument("--title", help="plot title")

    cli_extras.add_report_parser(sub)
    sub.add_parser("presets", help="list presets with their env, agent and key hyperparameters")
    envs_cmd = sub.add_parser("envs", help="list the task ids of each env backend")
    envs_cmd.add_argument("--all", action="store_true",
                          help="list every envpool task too (default: a count)")


def _cmd_envs(args: argparse.Namespace) -> int:
    import importlib.util

    from rljax.envs import backends
    from rljax.envs.registry import install_command

    for prefix, backend in backends().items():
        ids = [f"{prefix}:{t}" if prefix else t for t in backend.task_ids()]
        missing = backend.package is not None and importlib.util.find_spec(
            backend.package) is None
        state = f" [not installed: {install_command(backend)}]" if missing else ""
        label = prefix or f"{backend.package or 'bare ids'}"
        about = f" ({backend.description})" if backend.description else ""
        if len(ids) > 20 and not args.all:
            print(f"{label}{about}{state}: {len(ids)} tasks (--all lists them)")
            continue
        print(f"{label}{about}{state}:")
        for tid in ids:
            print(f"  {tid}")
    return 0


def _resume_command(args: argparse.Namespace, run_dir: str) -> str:
    """The short command that continues ``run_dir``, shell-quoted."""
    words = ["rljax", "train", "--resume", run_dir]
    if args.distributed:
        words.append("--distributed")
        for flag, value in (("--coordinator", args.coordinator),
                            ("--num-processes", args.num_processes),
                            ("--process-id", args.process_id)):
            if value is not None:
                words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


def _agent_assignments(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` as ``{field: text}``, refusing run settings and a second num_envs."""
    from rljax.run.config import OPTIONS, parse_assignments

    sets = parse_assignments(args.set)
    names = [item.partition("=")[0].strip() for item in args.set]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"--set {name} given {names.count(name)} times; give each field "
                             "once")
    flags = {o.keyword: o.flag for o in OPTIONS} | {o.name: o.flag for o in OPTIONS}
    for name in sets:
        if name in flags:
            raise ValueError(f"--set {name}: {name} is a run setting, not an agent field; "
                             f"use {flags[name]}")
    if "num_envs" in sets and args.num_envs is not None:
        raise ValueError(f"num_envs given twice (--num-envs {args.num_envs} and --set "
                         f"num_envs={sets['num_envs']}); give it once")
    return sets


def _run_config(args: argparse.Namespace):
    """The run the options describe: a preset with overrides, or (``--resume`` without a
    preset) the configuration the checkpoint was saved with, with the options' changes."""
    from rljax.run import resuming
    from rljax.run.config import OPTIONS, override
    from rljax.run.presets import from_preset

    sets = _agent_assignments(args)
    changes = {o.keyword: _given(args, o) for o in OPTIONS}
    changes = dict(changes, num_envs=sets.pop("num_envs", args.num_envs), **sets)
    if args.preset is not None:
        return from_preset(args.preset, **changes)
    if args.resume is None:
        raise ValueError("give a preset (see `rljax presets`), or --resume RUN_DIR")
    return override(resuming.saved_run(args.resume, args.from_checkpoint), **changes)


def _given(args: argparse.Namespace, option) -> object:
    """The option's value as typed (None: not given); an option allowed once is refused
    when repeated."""
    value = getattr(args, option.keyword)
    if option.once and value is not None:
        if len(value) > 1:
            raise ValueError(f"{option.flag} given {len(value)} times ({', '.join(value)}); "
                             f"{option.once}")
        value = value[0]
    return value


def _compile_cache(args: argparse.Namespace) -> None:
    import os

    from rljax.run import startup

    if getattr(args, "no_compile_cache", False):
        os.environ[startup.ENV_FLAG] = "0"
    startup.enable_compile_cache()


def _cmd_train(args: argparse.Namespace) -> int:
    from rljax.parallel import multihost
    from rljax.parallel.peers import EXIT_PEER, PeerLost
    from rljax.run.checkpoint import SaveError
    from rljax.run.driver import NonFiniteError, NothingToDo, TrainingInterrupted, train_run
    from rljax.run.stopping import Stopped

    if args.from_checkpoint is not None and args.resume is None:
        raise ValueError("--from-checkpoint needs --resume RUN_DIR")
    cluster = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in cluster) and not args.distributed:
        raise ValueError("--coordinator, --num-processes and --process-id need --distributed")
    cli_extras.early_cpu_threads(args)
    if args.distributed:
        cli_extras.join_cluster(args, cluster)
    run = _run_config(args)
    _compile_cache(args)
    try:
        result = train_run(run, progress=not args.quiet, resume=args.resume,
                           started=_STARTED, signals=args.signals,
                           from_checkpoint=args.from_checkpoint, command_line=True)
    except NothingToDo as e:
        print(f"rljax: nothing to do: {e}", file=sys.stderr)
        return 0
    except TrainingInterrupted as e:
        print(f"rljax: {e}\nrljax: resume with: {_resume_command(args, e.run_dir)}",
              file=sys.stderr)
        return cli_extras.signal_status(args.signals.received)
    except Stopped as e:
        resume = (f"\nrljax: resume with: {_resume_command(args, e.resumable)}"
                  if e.resumable else "")
        print(f"rljax: {e}{resume}", file=sys.stderr)
        return cli_extras.signal_status(args.signals.received)
    except PeerLost as e:  # leave at once: JAX's shutdown would wait for the lost process
        print(f"rljax: error: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_PEER)
    except (NonFiniteError, SaveError) as e:
        print(f"rljax: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # writing the run directory failed (a full disk, ...)
        print(f"rljax: error: {cli_extras.write_failure(e, args.signals.run_dir)}", file=sys.stderr)
        return 1
    if multihost.is_writer():
        print(json.dumps({"run_dir": result.run_dir, **result.summary}, indent=2))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from rljax.run.plotting import check_run_dir, default_out, plot_runs

    if args.out is not None and not args.out.lower().endswith(".png"):
        raise ValueError(f"--out must name a .png file, got {args.out!r}")
    for run_dir in args.run_dirs:
        check_run_dir(run_dir)
    notes: list[str] = []
    out = plot_runs(args.run_dirs, args.out or default_out(args.run_dirs, args.key),
                    key=args.key, title=args.title, notes=notes)
    for line in notes:
        print(f"rljax: {line}", file=sys.stderr)
    print(out)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from rljax import validate
    from rljax.run.api import evaluate, load
    from rljax.run.settings import coerce

    episodes = coerce("episodes", int, args.episodes)
    seed = None if args.seed is None else coerce("seed", int, args.seed)
    validate.integer("episodes", episodes, low=1)
    validate.integer("seed", seed, low=0, high=validate.INT32_LIMIT - 1, optional=True)
    _compile_cache(args)
    if args.best and args.from_checkpoint is not None:
        raise ValueError("--best and --from-checkpoint choose a checkpoint each; give one")
    run = load(args.run_dir, args.from_checkpoint, best=args.best)
    result = evaluate(run, episodes=episodes, seed=seed)
    print(json.dumps({"run_dir": args.run_dir, "env_id": run.config.env_id,
                      "env_steps": int(np.ravel(run.state.env_steps)[0]), **result},
                     indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the command in ``argv`` (default: this process's command line) and returns its
    exit status. Without ``argv``, as the ``rljax`` command runs it, a finished ``train``
    ends the process right after its summary (see :func:`_end_process`)."""
    if argv is None and sys.argv[1:2] == ["train"]:
        _end_process(_main(sys.argv[1:]))
    return _main(sys.argv[1:] if argv is None else argv)


def _end_process(code: int) -> None:
    """Ends the process with ``code`` once its output is flushed, other threads have ended
    and the exit handlers have run (JAX's among them), without the interpreter's teardown:
    freeing every module, compiled program and env pool one by one took 1.4-1.7 s after a
    CartPole run's summary on a loaded 2-core machine (0.2-0.3 s this way), time a user
    waits for and the summary could not count."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["bench"]:
        from rljax.run import bench

        return bench.main(argv[1:])
    args = _build_parser().parse_args(argv)
    try:
        if args.command != "train":
            return _dispatch(args)
        from rljax.run.stopping import StopSignals

        # From here on a Ctrl-C is a flag that the run checks between its phases and
        # chunks, never an exception inside an import, a compile or an XLA call.
        with StopSignals(hard=True) as args.signals:
            return _dispatch(args)
    except KeyboardInterrupt:  # before a run installed its own handler: nothing started
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: we are leaving
        print(f"\nrljax: stopped; {cli_extras.stopped_before(args.command)}", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "presets":
            return cli_extras.list_presets()
        if args.command == "envs":
            return _cmd_envs(args)
        if args.command == "plot":
            return _cmd_plot(args)
        if args.command == "report":
            return cli_extras.report_command(args)
        if args.command == "eval":
            return _cmd_eval(args)
        return _cmd_train(args)
    except ValueError as e:  # user input rejected at the boundary
        print(f"rljax: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # out of memory once running: one line too
        from rljax.run.preflight import resource_message

        message = resource_message(e)
        if message is None:
            raise
        print(f"rljax: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

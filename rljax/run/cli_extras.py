"""Parts of the command line kept out of :mod:`rljax.run.cli`: the preset listing,
joining a multi-process run, and the one line for a failed write of a run directory.

Imported by the CLI before anything heavy: this module imports only the standard library
at its top.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shlex
import sys
import time


def _preset_params(preset) -> str:
    from rljax import records

    config = preset.run.config
    keys = preset.key_params or tuple(f.name for f in dataclasses.fields(config))
    return ", ".join(f"{k}={records.get(config, records.canonical(type(config), k))}"
                     for k in keys)


def list_presets() -> int:
    import shutil
    import textwrap

    from rljax.run.presets import PRESETS
    from rljax.run.registry import ALGORITHMS

    width = max(60, shutil.get_terminal_size((100, 24)).columns - 1)
    wrap = functools.partial(textwrap.fill, width=width, initial_indent="    ",
                             subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False)
    rows = [(p.name, p.run.env_id, p.run.algo, f"{p.run.total_steps:,}") for p in
            PRESETS.values()]
    w = [max(len(r[i]) for r in rows + [("preset", "env", "agent")]) + 2 for i in range(3)]
    header = f"{'preset':<{w[0]}}{'env':<{w[1]}}{'agent':<{w[2]}}{'steps':>12}"
    print(header if len(header) <= width else "preset env agent steps")
    print(wrap("key hyperparameters, then notes"))
    for (name, env, algo, steps), p in zip(rows, PRESETS.values(), strict=True):
        row = f"{name:<{w[0]}}{env:<{w[1]}}{algo:<{w[2]}}{steps:>12}"
        print(row if len(row) <= width else f"{name} {env} {algo} {steps}")  # long env ids
        print(wrap(_preset_params(p)))
        if p.notes:
            print(wrap(f"({p.notes})"))
    print()
    for a in ALGORITHMS.values():
        print(textwrap.fill(f"{a.name}: {a.description}", width=width, subsequent_indent="  "))
    return 0


def signal_status(received: int | None) -> int:
    """The exit status of a run stopped by a signal: 128 + its number, as a shell reports
    a process the signal ended (130 for Ctrl-C, 143 for SIGTERM); SIGTERM's where the
    signal reached another process of the run only."""
    import signal

    return 128 + (received or signal.SIGTERM)


def join_cluster(args: argparse.Namespace, cluster: tuple) -> None:
    """Joins the multi-process run, giving up after ``--init-timeout`` seconds with one line
    naming who did not answer, exit status 2. JAX waits in C++ (where no Python signal
    handler runs, and it aborts the process when its own deadline passes), so it waits in
    a thread while this one watches the clock and Ctrl-C."""
    import os
    import threading

    from rljax.parallel import multihost
    from rljax.parallel.peers import EXIT_START

    multihost.check_cluster(*cluster)
    timeout, peer_timeout = args.init_timeout, args.peer_timeout
    for flag, value in (("--init-timeout", timeout), ("--peer-timeout", peer_timeout)):
        if not value > 0:
            raise ValueError(f"{flag} must be a number of seconds > 0, got {value}")
    where = f"the coordinator {cluster[0]}" if cluster[0] else "the cluster JAX detects"
    print(f"rljax: joining {where} (giving up after {timeout:g} s)", file=sys.stderr)
    done, failed = threading.Event(), []

    def join():
        try:  # JAX's own deadline comes after ours, so ours says what happened
            multihost.initialize(*cluster, timeout=timeout + 60, peer_timeout=peer_timeout)
        except BaseException as e:  # noqa: BLE001 - said in the main thread
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=join, daemon=True).start()
    phase, args.signals.phase = args.signals.phase, None
    deadline = time.monotonic() + timeout
    while not done.wait(0.1):
        stopped = args.signals.received is not None
        if stopped or time.monotonic() > deadline:
            print("rljax: stopped while joining the cluster; nothing was started" if stopped
                  else f"rljax: error: {_not_joined(cluster, where, timeout)}",
                  file=sys.stderr, flush=True)
            os._exit(signal_status(args.signals.received) if stopped else EXIT_START)
    args.signals.phase = phase
    if failed:
        first = str(failed[0]).strip().splitlines() or [type(failed[0]).__name__]
        print(f"rljax: error: could not join {where}: {first[0]}", file=sys.stderr, flush=True)
        os._exit(EXIT_START)


def _not_joined(cluster: tuple, where: str, timeout: float) -> str:
    """Who did not answer a join that timed out, and what to do."""
    coordinator, count, pid = cluster
    if pid is None:
        who = f"{where} did not gather every process"
    elif pid == 0:
        others = ", ".join(str(p) for p in range(1, count))
        who = (f"process{'es' if count > 2 else ''} {others} of {count} did not join "
               f"{where} (this process, 0, runs it)")
    else:
        who = f"process 0 (the coordinator at {coordinator}) did not answer"
    return (f"{who} within {timeout:g} s; start every process with the same --coordinator "
            "and --num-processes and a distinct --process-id (or raise --init-timeout)")


def write_failure(error: OSError, run_dir: str | None) -> str:
    """One line for a failed write of the run directory: what, why, and what is kept."""
    import errno

    from rljax.run.stopping import newest_step

    what = error.filename or (f"the run directory {run_dir}" if run_dir else
                              "the run directory")
    code = errno.errorcode.get(error.errno or 0)
    why = f"{error.strerror or error}" + (f" [errno {code}]" if code else "")
    step = newest_step(run_dir) if run_dir else None
    kept = (f"the checkpoint of env step {step:,} in {run_dir} is kept (resume with: "
            f"rljax train --resume {shlex.quote(run_dir)})" if step is not None else
            "no checkpoint had been saved")
    return f"could not write {what}: {why}; {kept}"


def add_report_parser(sub) -> None:
    """``rljax report``'s options."""
    rep = sub.add_parser("report", help="scores over seeds and tasks: mean, median and IQM "
                                        "with stratified bootstrap intervals")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                     help="run directories, many-seed run directories or folders of runs")
    rep.add_argument("--out", help="write the Markdown report here, and its plots beside it "
                                   "(NAME-curves.png, NAME-profiles.png)")
    rep.add_argument("--json", dest="json_out", metavar="PATH",
                     help="write the report as JSON here")
    rep.add_argument("--metric", default="return_mean_100",
                     help="metrics.jsonl key whose last value is a run's score (default "
                          "return_mean_100, the mean return of the last 100 episodes)")
    rep.add_argument("--normalize", action="store_true",
                     help="normalise per task (0: random policy, 1: reference score; "
                          "rljax's table, rljax/run/reference_scores.py) and aggregate "
                          "across each configuration's tasks")
    rep.add_argument("--scores", metavar="SCORES.json",
                     help='with --normalize: {task: {"random": R, "reference": S}} to use '
                          "instead of rljax's table")
    rep.add_argument("--compare", nargs=2, metavar=("A", "B"),
                     help="probability that configuration A scores above B (labels as the "
                          "report prints them, or run directories)")
    rep.add_argument("--reps", default="2000", help="bootstrap resamples (default 2000)")
    rep.add_argument("--seed", default="0", help="seed of the resampling (default 0)")


def report_command(args: argparse.Namespace) -> int:
    from rljax.run.report import report
    from rljax.run.settings import coerce

    reps, seed = coerce("reps", int, args.reps), coerce("seed", int, args.seed)
    if args.scores is not None and not args.normalize:
        raise ValueError("--scores needs --normalize")
    if args.out is not None and not args.out.lower().endswith(".md"):
        raise ValueError(f"--out must name a .md file, got {args.out!r}")
    result = report(args.run_dirs, metric=args.metric,
                    normalize=(args.scores or True) if args.normalize else None,
                    compare=tuple(args.compare) if args.compare else None, reps=reps,
                    seed=seed, out=args.out, json_out=args.json_out)
    for note in result["notes"]:
        print(f"rljax: {note}", file=sys.stderr)
    print(result["markdown"], end="")
    for path in [args.out, *result.get("plots", []), args.json_out]:
        if path is not None:
            print(f"rljax: wrote {path}", file=sys.stderr)
    return 0


def early_cpu_threads(args: argparse.Namespace) -> None:
    """Sizes XLA's CPU thread pool and asks for the run's host CPU devices before reading
    its settings starts JAX (an env given with ``--env``, a checkpoint's manifest):
    ``--cpu-threads`` / ``--cpu-devices``, else the preset's (for the members asked for),
    else the run directory's (``--resume``), so a resumed run gets the pool and devices it
    started with. A value that cannot be read here is left to the run's own checks."""
    import json
    import os

    from rljax import cpu_threads

    def given(name: str):
        value = getattr(args, name, None)
        return value[-1] if isinstance(value, list) else value

    values: dict = {}
    try:
        if args.preset is not None:
            from rljax.run.presets import from_preset

            members = {k: given(k) for k in ("num_seeds", "sweep", "cpu_threads",
                                             "cpu_devices", "devices")}
            run = from_preset(args.preset, **{k: v for k, v in members.items()
                                              if v is not None})
            values = {"cpu_threads": run.cpu_threads, "cpu_devices": run.cpu_devices}
        elif args.resume is not None:
            with open(os.path.join(args.resume, "config.json")) as f:
                saved = json.load(f)
            values = {k: saved.get(k, 1 if k == "cpu_devices" else 0)
                      for k in ("cpu_threads", "cpu_devices")}
        for k in ("cpu_threads", "cpu_devices"):
            if given(k) is not None:
                values[k] = int(given(k))
    except Exception:  # noqa: BLE001 - the run's own checks say what is wrong
        return
    if isinstance(values.get("cpu_threads"), int) and values["cpu_threads"] >= 0:
        cpu_threads.set_cpu_threads(values["cpu_threads"])
    if isinstance(values.get("cpu_devices"), int) and values["cpu_devices"] >= 1:
        cpu_threads.set_cpu_devices(values["cpu_devices"])


def stopped_before(command: str) -> str:
    """What a Ctrl-C that stopped ``command`` left undone (``train`` gets here only before
    its run started)."""
    if command == "train":
        return "train had not begun, nothing was saved"
    if command == "eval":
        return "the evaluation did not finish (eval writes no file, so nothing changed)"
    return f"{command} did not finish"

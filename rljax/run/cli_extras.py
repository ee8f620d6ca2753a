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
    if getattr(config, "noisy", False):  # NoisyNet explores: its epsilon schedule is unused
        keys = [k for k in keys if k != "epsilon"]
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


def join_cluster(args: argparse.Namespace, cluster: tuple) -> None:
    """Joins the multi-process run, giving up after ``--init-timeout`` seconds with one line.
    JAX waits in C++ (where no Python signal handler runs, and it aborts the process when its
    own deadline passes), so it waits in a thread while this one watches the clock and
    Ctrl-C."""
    import os
    import threading

    from rljax.parallel import multihost

    multihost.check_cluster(*cluster)
    timeout = args.init_timeout
    if not timeout > 0:
        raise ValueError(f"--init-timeout must be a number of seconds > 0, got {timeout}")
    where = f"the coordinator {cluster[0]}" if cluster[0] else "the cluster JAX detects"
    print(f"rljax: joining {where} (giving up after {timeout:g} s)", file=sys.stderr)
    done, failed = threading.Event(), []

    def join():
        try:  # JAX's own deadline comes after ours, so ours says what happened
            multihost.initialize(*cluster, timeout=timeout + 60)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
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
                  else f"rljax: error: could not join {where} within {timeout:g} s (is every "
                  "process started, and the coordinator's address reachable?)",
                  file=sys.stderr, flush=True)
            os._exit(130 if stopped else 1)
    args.signals.phase = phase
    if failed:
        raise failed[0]


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

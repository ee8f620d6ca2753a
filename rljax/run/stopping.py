"""Stopping a run with SIGINT (Ctrl-C) or SIGTERM, at any moment, start-up included.

The signals are turned into a flag for the whole run, so none of them lands inside a
compile or an XLA call:

* during training, the first signal finishes the chunk, saves a checkpoint and stops
  (:class:`rljax.run.driver.TrainingInterrupted`);
* during start-up (building, initializing, compiling), the first signal says it was heard
  and stops once the phase ends, before training begins (:class:`Stopped`);
* a second signal stops at once: on the command line the process exits with status 130,
  after one line saying what is left (during start-up nothing is running that could be
  saved; during training the last complete checkpoint is kept and the chunk in progress
  is dropped), from the signal handler or, while the main thread is inside a long call
  that runs no Python (an XLA compile or a training chunk), from a thread that the signal
  wakes (:func:`signal.set_wakeup_fd`); a checkpoint being written is finished first.
  Otherwise (the Python API, or several processes) KeyboardInterrupt is raised, which
  :func:`rljax.run.driver.train_run` turns into :class:`Stopped` once the summary is
  written.

A run directory that a stopped run created and that holds nothing (no checkpoint, no
metrics row) is removed; one that holds metrics but no checkpoint is named as not
resumable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time

CHECKPOINT_DIR = "checkpoint"  # rljax.run.checkpoint's; not imported, it imports jax


class Stopped(Exception):
    """The run stopped before its end without saving a checkpoint of its own.

    Attributes:
        resumable: the run directory, when it holds a checkpoint to resume; else None.
    """

    def __init__(self, message: str, resumable: str | None = None):
        super().__init__(message)
        self.resumable = resumable


def newest_step(run_dir: str) -> int | None:
    """The newest step folder under ``RUN_DIR/checkpoint`` (None: none), read without
    orbax."""
    try:
        steps = [int(d) for d in os.listdir(os.path.join(run_dir, CHECKPOINT_DIR))
                 if d.isdigit()]
    except OSError:
        return None
    return max(steps) if steps else None


def _has_rows(run_dir: str) -> bool:
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return any(isinstance(json.loads(line), dict) for line in f if line.strip())
    except (OSError, ValueError):
        return False


def what_is_left(run_dir: str | None, created: bool) -> tuple[str, str | None]:
    """What a stopped run leaves, in words, and the run directory if it can be resumed.
    A directory this run ``created`` that holds neither a checkpoint nor a metrics row is
    removed."""
    if run_dir is None or not os.path.isdir(run_dir):
        return "nothing was saved", None
    step = newest_step(run_dir)
    if step is not None:
        return (f"the checkpoint of env step {step:,} and the metrics up to it are in "
                f"{run_dir}", run_dir)
    if created and not _has_rows(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        return f"nothing was saved; its run directory {run_dir} was removed", None
    return (f"{run_dir} holds the metrics so far but no checkpoint, so it cannot be "
            "resumed", None)


class StopSignals:
    """SIGINT/SIGTERM as a flag, checked between phases and chunks (main thread only).

    Attributes:
        received: the first signal's number, None until one arrives.
        phase: the start-up phase running now ("compiling", ...), None once training runs.
        run_dir, created: the run directory and whether this run created it, for a stop
            at once.
        chunk_s: seconds a training chunk took lately (None: not timed yet), for the
            stop message.
        one_process: whether a second signal during training may stop this process at
            once (False where other processes train with it, so they stop alike).
    """

    def __init__(self, hard: bool = False):
        self.hard = hard
        self.received: int | None = None
        self.phase: str | None = "preparing the run"
        self.run_dir: str | None = None
        self.created = False
        self.chunk_s: float | None = None
        self.one_process = True
        self._previous: dict = {}
        self._saving = 0  # depth of saving() contexts
        self._raised = False
        self._deferred = False
        self._leaving = threading.RLock()
        self._told = False
        self._wakeup: tuple | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
            if self.hard:
                self._watch()
        return self

    def _watch(self) -> None:
        """A thread that the C-level signal handler wakes at once, even while the main
        thread is inside a call that runs no Python, so a second signal during start-up
        stops then too."""
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        previous = signal.set_wakeup_fd(theirs.fileno(), warn_on_full_buffer=False)
        self._wakeup = (ours, theirs, previous)
        threading.Thread(target=self._watchdog, args=(ours,), daemon=True,
                         name="rljax-stop").start()

    def _watchdog(self, ours: socket.socket) -> None:
        count = 0
        while True:
            try:
                data = ours.recv(64)
            except OSError:
                return
            if not data:
                return
            count += sum(b in (signal.SIGINT, signal.SIGTERM) for b in data)
            time.sleep(0.5)  # the main thread's handler goes first where it can run
            if count == 1 and self.received is None:
                self._say_stopping()
            elif count >= 2 and self._may_stop_at_once() and not self._raised:
                self._stop_at_once()
            elif count >= 2 and self._saving:  # two signals inside a C call are one there
                self._deferred = True

    def _may_stop_at_once(self) -> bool:
        return not self._saving and (self.phase is not None or self.one_process)

    def _say_stopping(self) -> None:
        with self._leaving:
            if self._told or not (self.hard or self.phase is not None):
                return
            self._told = True
            if self.phase is not None:
                line = (f"stopping once {self.phase} ends, before training begins (press "
                        "Ctrl-C again to stop at once)")
            else:
                took = ("" if self.chunk_s is None else
                        f"; chunks take {self.chunk_s:.{0 if self.chunk_s >= 10 else 1}f} s")
                step = None if self.run_dir is None else newest_step(self.run_dir)
                kept = ("nothing saved yet" if step is None
                        else f"keeping the checkpoint of env step {step:,}")
                line = (f"stopping when the chunk in progress ends, after a checkpoint{took} "
                        f"(press Ctrl-C again to stop at once, {kept})")
            sys.stderr.write(f"\nrljax: {line}\n")
            sys.stderr.flush()

    def _stop_at_once(self) -> None:
        """The command line's stop during start-up: one line, exit status 130."""
        with self._leaving:  # once, from the main thread's handler or the watchdog
            left, resumable = what_is_left(self.run_dir, self.created)
            resume = (f"\nrljax: resume with: rljax train --resume {resumable}"
                      if resumable else "")
            sys.stderr.write(f"\nrljax: stopped at once; {left}{resume}\n")
            sys.stderr.flush()
            os._exit(130)

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
            self._say_stopping()
            return
        if self._saving:  # a second signal waits for the checkpoint being written
            self._deferred = True
            return
        if self.hard and self.phase is not None:  # the command line, during start-up
            self._stop_at_once()
        self._raised = True  # the watchdog leaves the stop to this exception
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def saving(self):
        """A checkpoint save that a second signal does not cut short: the signal takes
        effect (KeyboardInterrupt, stop at once) as soon as the save is complete."""
        self._saving += 1
        try:
            yield
        finally:
            self._saving -= 1
        if self._deferred and not self._saving:
            self._deferred = False
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raises :class:`Stopped` when a signal arrived during start-up."""
        if self.received is not None and self.phase is not None:
            left, resumable = what_is_left(self.run_dir, self.created)
            raise Stopped(f"stopped during start-up ({self.phase}), before training began; "
                          f"{left}", resumable)

    def __exit__(self, *exc):
        if self._wakeup is not None:
            ours, theirs, previous = self._wakeup
            signal.set_wakeup_fd(previous)
            theirs.close()
            ours.close()
        for sig, handler in self._previous.items():
            if self.hard and self.received is not None and sig == signal.SIGINT:
                # The command line is leaving after a signal: a second Ctrl-C arriving now
                # (after the message, during interpreter shutdown) must not turn the exit
                # status 130 into a death by SIGINT.
                handler = signal.SIG_IGN
            signal.signal(sig, handler)

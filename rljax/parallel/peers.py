"""Bounded waits on the other processes of a multi-process run.

JAX's runtime waits on other processes without a deadline a user can read: a collective
whose peer hangs blocks in C++, and a peer that dies is noticed only when its heartbeats
stop, after which JAX aborts every process with a page of C++ log. Here every wait on
another process has a deadline (``timeout`` seconds, ``--peer-timeout``) and ends in one
line naming the processes that did not answer:

* :meth:`Peers.wait` guards a call that waits on the others (a gather of the state, a
  checkpoint save, the first program), which begins once every process has come: a
  watchdog thread ends the process with
  :data:`EXIT_PEER` and one line when the call has not returned by the deadline (a call
  blocked in C++ cannot be interrupted from Python), and a collective that fails because
  a peer's connection closed ends the process the same way once a roll call has named the
  missing processes;
* :meth:`Peers.agree` is a barrier through the coordinator's key-value store that also
  carries one number (a stop signal that reached only some processes stops all of them at
  the same chunk);
* :meth:`Peers.same` checks that every process was started with the same value (the
  number of processes).

Each process posts how many guarded points it has reached, so whoever times out can name
the processes still behind it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

EXIT_PEER = 1  # a peer stopped answering mid-run
EXIT_START = 2  # the run could not start: a peer never came, or disagrees
PATIENCE = 4  # a wait on a process that is alive but does not come lasts this many timeouts
# Seconds (at most the peer timeout) a signal may wait for the main thread inside a call
# every process is in (a chunk being computed, a checkpoint being written) before the
# process leaves without a checkpoint.
SIGNAL_GRACE = 60.0
# Seconds the coordinator waits, after the others have said they are going, before it
# leaves a run that cannot start (they have one line to print and then exit).
LEAVE_GRACE = 2.0


class PeerLost(RuntimeError):
    """Another process stopped answering (died, hung or was killed)."""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class Peers:
    """The other processes of this run, reached through JAX's coordination client.

    Args:
        client: ``jax._src.distributed.global_state.client`` (key-value store).
        process_id, num_processes: this process and the run's count.
        timeout: seconds a wait on a silent process may last.

    A process is *silent* when its heartbeat (posted by a thread every half second) has
    not moved for ``timeout`` seconds: it died, or is stopped. A wait ends with one line
    when the processes it waits for are silent, or when it has lasted :data:`PATIENCE`
    times ``timeout`` in all (a process that is alive but stuck, or a collective that
    never completes).
    ``epilogue()`` ends every line (the driver sets it to say what is left to resume).
    """

    def __init__(self, client, process_id: int, num_processes: int, timeout: float):
        self.client, self.pid, self.count = client, process_id, num_processes
        self.timeout = float(timeout)
        self.reached = self.agreed = 0
        self.epilogue: Callable[[], str] = lambda: ""
        self._armed: tuple[float, str] | None = None
        self._beats: dict[int, tuple[str | None, float]] = {
            p: (None, time.monotonic()) for p in self.others()}
        self._lock = threading.Lock()
        self._looked = time.monotonic()
        self._closed, self._pipe, self._forward = False, None, -1
        self._thread = threading.Thread(target=self._watch, name="rljax-peers", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # after JAX's own atexit, so it runs before it

    def others(self) -> list[int]:
        return [p for p in range(self.count) if p != self.pid]

    def _names(self, pids: list[int]) -> str:
        which = ", ".join(str(p) for p in pids)
        return f"process{'es' if len(pids) > 1 else ''} {which} of {self.count}"

    def message(self, pids: list[int], what: str) -> str:
        """The one line: who did not answer, where, and what to do."""
        who = (f"{self._names(pids)} did not answer within {self.timeout:g} s" if pids else
               f"every process reached the wait, which did not end within "
               f"{PATIENCE * self.timeout:g} s")
        return (f"{who} while {what} (stopped, hung or killed: see the log of each process);"
                f" stopping this process too{self.epilogue()}")

    def silent(self, p: int) -> float:
        """Seconds since process ``p``'s heartbeat last moved."""
        with self._lock:
            return time.monotonic() - self._beats[p][1]

    def _beat(self, n: int) -> None:
        with contextlib.suppress(Exception):
            self.client.key_value_set(f"rljax/beat/{self.pid}", str(n), allow_overwrite=True)
        self._look()

    def _look(self) -> None:
        """Reads the others' heartbeats, noting when each last moved."""
        now = time.monotonic()
        if now - self._looked > 2.0:  # this process could not look (busy): no silence seen
            with self._lock:
                self._beats = {p: (v, now) for p, (v, _) in self._beats.items()}
        self._looked = now
        for p in self.others():
            try:
                seen = self.client.key_value_try_get(f"rljax/beat/{p}")
            except Exception:  # noqa: BLE001 - not posted yet
                seen = None
            with self._lock:
                if seen is not None and seen != self._beats[p][0]:
                    self._beats[p] = (seen, now)

    def behind(self) -> list[int]:
        """The processes whose last guarded point is before this one's."""
        late = []
        for p in self.others():
            try:
                n = int(self.client.key_value_try_get(f"rljax/reached/{p}"))
            except Exception:  # noqa: BLE001 - never posted: behind
                n = 0
            if n < self.reached:
                late.append(p)
        return late

    def _expired(self, since: float, late: list[int]) -> list[int] | None:
        """Who to name when a wait begun at ``since`` on the ``late`` processes should end
        now, else None. A late process is waited for while its heartbeat moves (it may be
        compiling, slowed by load); a wait with nobody behind (every process inside the
        same call, which may compile first) ends after PATIENCE x timeout."""
        # Any silent process, behind or not: a process killed inside the same collective
        # is at this point too.
        silent = [p for p in self.others() if self.silent(p) > self.timeout]
        if silent:
            return silent
        if not late and time.monotonic() - since > PATIENCE * self.timeout:
            return []
        return None

    def _watch(self) -> None:
        n, signalled = 0, None
        while not self._closed:
            time.sleep(0.5)
            n += 1
            self._beat(n)
            with self._lock:
                armed = self._armed
            got = self._signals()
            if armed is None:
                signalled = None
                continue
            if signalled and signalled[2] is not armed:
                signalled = None  # the main thread ran between two waits: it took the signal
            if got and signalled is None:
                signalled = (got[-1], time.monotonic(), armed)
            late = self.behind() if signalled else []
            grace = 5.0 if late else min(self.timeout, SIGNAL_GRACE)
            if signalled and time.monotonic() - signalled[1] > grace:
                # A signal the main thread cannot take: it is blocked in this wait (on a
                # process behind it, or in a call every process is in that does not end).
                self._leave(f"stopped by signal {signalled[0]} while {armed[1]}, waiting on "
                            f"{self._names(late) if late else 'the other processes'}"
                            f"{self.epilogue()}", 128 + signalled[0], error=False)
            self._look()  # fresh before judging
            named = self._expired(armed[0], self.behind())
            if named is not None:
                self._leave(self.message(named, armed[1]), EXIT_PEER)

    def _leave(self, line: str, status: int, error: bool = True) -> None:
        sys.stderr.write(f"\nrljax: {'error: ' if error else ''}{line}\n")
        sys.stderr.flush()
        os._exit(status)

    def _signals(self) -> bytes:
        """The signals that arrived since the last look (through ``signal.set_wakeup_fd``,
        which :meth:`wait` installs from the main thread)."""
        if self._pipe is None:
            return b""
        try:
            got = os.read(self._pipe, 64)
        except OSError:  # nothing arrived
            return b""
        if self._forward >= 0:  # to whoever watched them before (rljax.run.stopping)
            with contextlib.suppress(OSError):
                os.write(self._forward, got)
        return got

    def close(self) -> None:
        """Stops the heartbeat before JAX's runtime shuts down (atexit runs it first)."""
        self._closed = True
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    @contextlib.contextmanager
    def wait(self, what: str):
        """Guards a call that waits on the other processes (see the module docstring).
        The call begins once every process has come (:meth:`agree`): the first
        collective over a set of devices sets up its gloo communicator, and XLA gives
        the other processes a fixed 30 s to join it, so a process still compiling or
        starting (slowed by load) would fail the run with ``DEADLINE_EXCEEDED``; here a
        late process is waited for while its heartbeat moves."""
        if self._pipe is None and threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._forward = signal.set_wakeup_fd(write)
            self._pipe = read
        if self._armed is not None:  # inside a guarded wait already (a save's gathers)
            yield
            return
        self.agree(0, what)
        self.reached += 1
        self.client.key_value_set(f"rljax/reached/{self.pid}", str(self.reached),
                                  allow_overwrite=True)
        with self._lock:
            self._armed = (time.monotonic(), what)
        try:
            yield
        except Exception as e:  # a collective failed: a peer's connection closed
            if not _peer_failure(e):
                raise
            with self._lock:
                self._armed = None
            roll = self._gather(f"rljax/roll/{self.reached}", "1", what, strict=False)
            # Leave at once: the run's summary and JAX's shutdown would wait on the lost
            # process again, and JAX would abort with a page of C++ log.
            lost = [p for p in self.others() if p not in roll]
            self._leave(self.message(lost, what) if lost else
                        f"a collective failed while {what}, every process still answering "
                        f"({str(e).strip().splitlines()[0][:300]}); stopping this process "
                        f"too{self.epilogue()}", EXIT_PEER)
        finally:
            with self._lock:
                self._armed = None

    def _gather(self, key: str, value: str, what: str, strict: bool = True
                ) -> dict[int, str]:
        """Every process's ``value`` posted under ``key``. A process that does not post
        is waited for while its heartbeat moves (up to PATIENCE x timeout); then
        the process ends with one line naming it (``strict``) or it is left out."""
        self.client.key_value_set(f"{key}/{self.pid}", value, allow_overwrite=True)
        since, values = time.monotonic(), {self.pid: value}
        while True:
            for p in self.others():
                if p not in values:
                    got = self._get(f"{key}/{p}", time.monotonic() + 0.5)
                    if got is not None:
                        values[p] = got
            late = [p for p in self.others() if p not in values]
            if not late:
                return values
            self._look()
            named = self._expired(since, late)
            if named:
                if strict:
                    self._leave(self.message(named, what), EXIT_PEER)
                return values

    def agree(self, value: int, what: str = "agreeing to go on") -> int:
        """A barrier (every process calls it the same number of times) that returns the
        first nonzero ``value`` of any process (by process id), else 0: a stop signal
        that reached some of them."""
        self.agreed += 1
        values = self._gather(f"rljax/agree/{self.agreed}", str(int(value)), what)
        if self.agreed > 2:  # nobody reads a point two behind any more
            with contextlib.suppress(Exception):
                self.client.key_value_delete(f"rljax/agree/{self.agreed - 2}/{self.pid}")
        return next((int(v) for _, v in sorted(values.items()) if int(v)), 0)

    def same(self, name: str, value: str) -> str | None:
        """None when this process was started with process 0's ``value`` for ``name``
        (process 0: when every process was), else the disagreement as words. Process 0
        runs the coordinator: it returns only once the others have read its value, or
        JAX would abort them with the coordinator gone, and once they have gone; they
        return once it has read their values."""
        key, what = f"rljax/same/{name}", f"comparing {name}"
        self.client.key_value_set(f"{key}/{self.pid}", value, allow_overwrite=True)
        if self.pid != 0:
            first = self._get(f"{key}/0", time.monotonic() + self.timeout)
            if first is None:
                raise PeerLost(self.message([0], what))
            self.client.key_value_set(f"{key}/read/{self.pid}", "1", allow_overwrite=True)
            # Stay until process 0 has read every value (a process that leaves closes its
            # connection, and the coordinator's reads fail after that), then say so and
            # go: process 0 leaves last.
            self._get(f"{key}/done", time.monotonic() + self.timeout)
            self.client.key_value_set(f"{key}/gone/{self.pid}", "1", allow_overwrite=True)
            values = {0: first}
        else:
            values = self._gather(key, value, what)
            self._gather(f"{key}/read", "1", what)
            self.client.key_value_set(f"{key}/done", "1", allow_overwrite=True)
            with contextlib.suppress(Exception):  # a process gone may close the connection
                self._gather(f"{key}/gone", "1", what, strict=False)
        differ = [(p, v) for p, v in sorted(values.items()) if v != value]
        if not differ:
            return None
        if self.pid == 0:
            # The others are leaving too: a process still connected when the coordinator
            # goes is aborted by JAX before its own line is out (exit -6, a page of C++
            # log), so the coordinator leaves last, a moment after "gone".
            time.sleep(LEAVE_GRACE)
        p, v = differ[0]
        return (f"process {p} was started with {name} {v}, process {self.pid} with {value}; "
                f"start every process with the same {name}")

    def _get(self, key: str, deadline: float) -> str | None:
        try:
            return self.client.blocking_key_value_get(
                key, _ms(max(0.001, deadline - time.monotonic())))
        except Exception:  # noqa: BLE001 - no answer by the deadline
            return None


def _peer_failure(error: BaseException) -> bool:
    text = str(error)
    return any(s in text for s in ("Gloo", "Connection closed", "Connection reset",
                                   "heartbeat", "UNAVAILABLE"))

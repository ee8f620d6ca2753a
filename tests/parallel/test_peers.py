"""The bounded waits of a multi-process run (rljax/parallel/peers.py), over an in-memory
key-value store in place of JAX's coordination client: the stop agreement, a silent
process named in one line, nested waits counted once. (Two real processes, one of them
killed, are tests/parallel/test_multiproc_cli.py's.)"""

import threading
import time

import pytest

from rljax.parallel import peers


class FakeClient:
    """The part of JAX's coordination client that Peers uses."""

    def __init__(self):
        self.kv, self.lock = {}, threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            assert allow_overwrite or key not in self.kv, key
            self.kv[key] = value

    def key_value_try_get(self, key):
        with self.lock:
            if key not in self.kv:
                raise KeyError(key)
            return self.kv[key]

    def blocking_key_value_get(self, key, timeout_ms):
        end = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < end:
            try:
                return self.key_value_try_get(key)
            except KeyError:
                time.sleep(0.01)
        raise TimeoutError(key)

    def key_value_delete(self, key):
        with self.lock:
            self.kv.pop(key, None)


class Left(Exception):
    pass


@pytest.fixture
def pair(monkeypatch):
    """Processes 0 and 1 of two, sharing one store; leaving raises Left(line, status)."""
    monkeypatch.setattr(peers.Peers, "_leave",
                        lambda self, line, status, error=True: (_ for _ in ()).throw(
                            Left(line, status)))
    client = FakeClient()
    made = [peers.Peers(client, p, 2, timeout=1.0) for p in (0, 1)]
    yield made
    for p in made:
        p.close()


def _both(calls):
    out = [None, None]

    def run(i):
        out[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    return out


def test_a_signal_that_reached_one_process_is_agreed_by_both(pair):
    a, b = pair
    assert _both([lambda: a.agree(0), lambda: b.agree(0)]) == [0, 0]
    assert _both([lambda: a.agree(0), lambda: b.agree(15)]) == [15, 15]  # SIGTERM in one
    assert _both([lambda: a.agree(2), lambda: b.agree(15)]) == [2, 2]  # the first process's
    assert _both([lambda: a.agree(0), lambda: b.agree(0)]) == [0, 0]


def test_a_silent_process_is_named_in_one_line(pair):
    a, b = pair
    a.epilogue = lambda: "; resume from the last checkpoint"
    b.close()  # its heartbeat stops: killed
    start = time.monotonic()
    with pytest.raises(Left) as left:
        a.agree(0, "agreeing whether to stop")
    line, status = left.value.args
    assert status == peers.EXIT_PEER == 1
    assert line.startswith("process 1 of 2 did not answer within 1 s while agreeing whether "
                           "to stop") and line.endswith("; resume from the last checkpoint")
    assert "\n" not in line
    assert 1.0 <= time.monotonic() - start < 5.0


def test_a_wait_inside_a_wait_is_one_wait(pair):
    a, b = pair
    b.client.key_value_set("rljax/agree/1/1", "0")  # process 1 came to the wait's barrier

    with a.wait("saving a checkpoint"):
        with a.wait("gathering the state"):
            assert a._armed[1] == "saving a checkpoint"
        assert a._armed[1] == "saving a checkpoint"  # still guarded after the inner one
    assert a._armed is None and a.reached == 1 and a.agreed == 1
    assert a.client.key_value_try_get("rljax/reached/0") == "1"
    assert a.behind() == [1]  # process 1 has reached no guarded point yet


def test_a_wait_begins_once_every_process_came(pair):
    """A process later than the timeout (alive: compiling under load) is waited for, so
    the call inside (a first collective, which gloo gives 30 s) begins together."""
    a, b = pair
    began = []

    def guarded(p, delay):
        time.sleep(delay)
        with p.wait("gathering the state"):
            began.append((p.pid, time.monotonic()))
        return p.reached

    assert _both([lambda: guarded(a, 0.0), lambda: guarded(b, 2.5)]) == [1, 1]
    (_, first), (_, second) = sorted(began, key=lambda x: x[1])
    assert second - first < 1.0  # not 2.5 s apart: process 0 waited 2.5 x its timeout


def test_a_collective_that_fails_with_every_process_answering_says_so(pair):
    a, b = pair
    a.epilogue = lambda: "; no checkpoint had been saved"
    b.client.key_value_set("rljax/agree/1/1", "0")  # process 1 came to the wait's barrier
    b.client.key_value_set("rljax/roll/1/1", "1")  # and answers the roll call
    error = RuntimeError("UNKNOWN: Gloo context initialization failed: DEADLINE_EXCEEDED\nmore")
    with pytest.raises(Left) as left:
        with a.wait("gathering the state"):
            raise error
    line, status = left.value.args
    assert status == peers.EXIT_PEER
    assert line == ("a collective failed while gathering the state, every process still "
                    "answering (UNKNOWN: Gloo context initialization failed: "
                    "DEADLINE_EXCEEDED); stopping this process too; no checkpoint had been "
                    "saved")


def test_the_coordinator_leaves_last_when_the_processes_disagree(pair, monkeypatch):
    """Processes started with different counts each return the disagreement; process 0,
    which runs the coordinator, returns LEAVE_GRACE after process 1 (a process still
    connected when the coordinator goes is aborted by JAX before its line is out). When
    they agree, nobody waits."""
    monkeypatch.setattr(peers, "LEAVE_GRACE", 0.5)
    a, b = pair
    returned = {}

    def timed(p, value):
        out = p.same("--num-processes", value)
        returned[p.pid] = time.monotonic()
        return out

    got = _both([lambda: timed(a, "2"), lambda: timed(b, "3")])
    assert got == ["process 1 was started with --num-processes 3, process 0 with 2; start "
                   "every process with the same --num-processes",
                   "process 0 was started with --num-processes 2, process 1 with 3; start "
                   "every process with the same --num-processes"]
    assert returned[0] - returned[1] >= 0.5
    start = time.monotonic()
    assert _both([lambda: a.same("--seeds", "4"), lambda: b.same("--seeds", "4")]) == [None,
                                                                                     None]
    assert time.monotonic() - start < 0.5

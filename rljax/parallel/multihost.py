"""Runs that span several processes (hosts), on JAX's own distributed runtime.

Every process runs the same program (``jax.distributed.initialize`` first, then the same
``train_run``): the device mesh spans all processes' devices, each process steps the
envpool pools of its own devices, and the compiled chunk is one SPMD program. Between
chunks the host looks at the state: :func:`fetch` gathers the other processes' shards
(a collective, so every process calls it at the same point), and only the first process
(:func:`is_writer`) writes the run directory, which it expects on a filesystem the
others can read when resuming.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import jax
import numpy as np

from rljax.parallel import peers

PEER_TIMEOUT = 60.0  # seconds a process waits on the others at any one point


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, timeout: float | None = None,
               peer_timeout: float = PEER_TIMEOUT) -> None:
    """Joins a multi-process run: ``jax.distributed.initialize`` with the given
    coordinator ``host:port``, process count and this process's id, or, all None, the
    values JAX detects from the cluster environment (SLURM, Cloud TPU, ...). On CPU the
    cross-process collectives use gloo. Call before any other JAX call. ``timeout``: JAX's
    ``initialization_timeout`` in seconds (default: JAX's, 300), after which JAX aborts
    the process. ``peer_timeout``: seconds any later wait on the other processes may last
    (:mod:`rljax.parallel.peers`); JAX's own heartbeat deadline is set well after it, so
    a process that dies is named by rljax's line, not by JAX's abort.

    JAX's preemption service is left off: it takes SIGTERM for itself, and rljax stops on
    SIGTERM as on Ctrl-C (a checkpoint, then exit), agreed between the processes.

    Raises:
        ValueError: only some of the three values are given, or they are out of range,
            or the processes were started with different process counts.
    """
    check_cluster(coordinator, num_processes, process_id)
    if not peer_timeout > 0:
        raise ValueError(f"peer_timeout must be a number of seconds > 0, got {peer_timeout}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_preemption_service", False)
    options = {} if timeout is None else {"initialization_timeout": max(1, math.ceil(timeout))}
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id,
                               heartbeat_timeout_seconds=math.ceil(
                                   (peers.PATIENCE + 1) * peer_timeout + 30),
                               **options)
    from jax._src import distributed

    state = distributed.global_state
    _PEERS[0] = peers.Peers(state.client, state.process_id, state.num_processes, peer_timeout)
    if num_processes is not None:
        differs = _PEERS[0].same("--num-processes", str(num_processes))
        if differs:
            raise ValueError(differs)


# The run's Peers once initialize() has joined (one per process, like JAX's own state).
_PEERS: list[peers.Peers | None] = [None]


def current_peers() -> peers.Peers | None:
    """This process's :class:`rljax.parallel.peers.Peers`, None outside a multi-process run."""
    return _PEERS[0]


def on_lost(run_dir: str, saved_at) -> None:
    """The line that says another process was lost ends with what is left to resume:
    ``saved_at()``, the env step of the last checkpoint every process wrote, in
    ``run_dir``."""
    def epilogue() -> str:
        step = saved_at()
        return ("; no checkpoint had been saved" if step is None else
                f"; resume from the last checkpoint all processes wrote (env step {step:,}) "
                f"with --resume {run_dir}")

    if _PEERS[0] is not None:
        _PEERS[0].epilogue = epilogue


def agreed_signal(received: int | None) -> int | None:
    """The stop signal any process received (``received`` in a one-process run): a
    barrier across processes, so a signal that reached some of them stops all of them
    after the same chunk."""
    if _PEERS[0] is None:
        return received
    return _PEERS[0].agree(received or 0, "agreeing whether to stop") or None


def waiting(what: str):
    """A context guarding a wait on the other processes (:meth:`Peers.wait`); nothing in a
    one-process run."""
    p = _PEERS[0]
    return contextlib.nullcontext() if p is None else p.wait(what)


def check_cluster(coordinator: str | None, num_processes: int | None,
                  process_id: int | None) -> None:
    """Raises ValueError unless all three are given and in range, or none is."""
    given = [v is not None for v in (coordinator, num_processes, process_id)]
    if any(given) and not all(given):
        raise ValueError("give all of coordinator (host:port), num_processes and process_id, "
                         "or none of them (detected from the cluster environment)")
    if all(given):
        host, sep, port = str(coordinator).rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"coordinator must be host:port, got {coordinator!r}")
        if not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes must be an integer >= 1, got {num_processes!r}")
        if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
            raise ValueError(f"process_id must be an integer in [0, {num_processes}), "
                             f"got {process_id!r}")


def is_writer() -> bool:
    """Whether this process writes the run directory (the first one does)."""
    return jax.process_index() == 0


def _fetch_one(x: Any) -> Any:
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return jax.device_get(x)
    if x.is_fully_replicated:
        return jax.device_get(x.addressable_data(0))
    from jax.experimental import multihost_utils

    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = multihost_utils.process_allgather(jax.random.key_data(x), tiled=True)
        return jax.random.wrap_key_data(np.asarray(data), impl=jax.random.key_impl(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def fetch(tree: Any, what: str = "gathering the state") -> Any:
    """Host copies of ``tree``'s arrays, whole: shards held by other processes are
    gathered (every process must call this at the same point). Across processes this is
    a guarded wait (:func:`waiting`, ``what`` names it): it also waits for the program
    that computes ``tree``, which may wait on the other processes."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    with waiting(what):
        return jax.tree.map(_fetch_one, tree)


def first_local(x: jax.Array) -> Any:
    """The first element of ``x`` as this process holds it (no collective: one process
    alone may call it)."""
    if isinstance(x, jax.Array):
        x = x.addressable_shards[0].data
    return np.ravel(jax.device_get(x))[0]


def init_on(init_state: Any, shardings: Any, mesh: Any) -> Any:
    """``init_state(key, env_state)`` as a function whose result lands on ``shardings``
    (a prefix tree) over ``mesh``; ``key`` is a host value, ``env_state`` already placed.

    One jitted program writes each shard where it lives, so no process holds another's
    part and replicated leaves are the same everywhere by construction.
    """
    placed = jax.jit(init_state, out_shardings=shardings)
    return lambda key, env_state: placed(replicate(key, mesh), env_state)


def put(value: Any, sharding: Any) -> jax.Array:
    """``value`` (the same host array on every process) laid out by ``sharding``, which
    may span several processes' devices (each process fills its own shards)."""
    if jax.process_count() == 1:
        return jax.device_put(value, sharding)
    if jax.dtypes.issubdtype(getattr(value, "dtype", np.float32), jax.dtypes.prng_key):
        return jax.random.wrap_key_data(put(jax.random.key_data(value), sharding),
                                        impl=jax.random.key_impl(value))
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def placement(x: Any) -> Any:
    """Where a copy of array ``x`` goes: its sharding, or None (the default device,
    uncommitted) for an uncommitted array, which jit places freely, or for a host value.
    A fresh one-device run's arrays are uncommitted; committed copies of them would be
    another jit signature, and the training chunk would compile again (a resume did,
    ~12 s on a brax SAC run)."""
    return None if getattr(x, "_committed", True) is False else getattr(x, "sharding", None)


def replicate(tree: Any, mesh: Any) -> Any:
    """``tree``'s arrays (the same values on every process) replicated over every device
    of ``mesh``."""
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda x: put(x, sharding), tree)


def place(value: Any, like: jax.Array) -> jax.Array:
    """``value`` (the same host array on every process) laid out as ``like``."""
    return put(value, like.sharding)

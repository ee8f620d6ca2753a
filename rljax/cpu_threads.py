"""The size of XLA's CPU thread pool: one thread per CPU by default, fewer where that is faster.

A compiled program runs its kernels on XLA's CPU thread pool, which JAX sizes when its CPU
backend starts: one thread per CPU the process may run on (``os.sched_getaffinity``). A
small network's kernels take microseconds, and handing them between threads then costs
more than running them on one: on 2 CPU cores, gymnax CartPole PPO trains 1.27x faster with
a one-thread pool and gymnax CartPole PQN 1.31x, while matmul-heavy runs (MinAtar PPO's
1,024-sample minibatches, SAC's 256-256 networks) run 0.76-0.82x as fast
(``python -m benchmarks.cpu_threads``, docs/benchmarks.md). The run setting ``cpu_threads``
(``rljax train --cpu-threads N``) picks the size; presets set it where it was measured to
pay.

:func:`set_cpu_threads` takes effect only before JAX starts its backends (the pool is built
once, with the CPU client): it wraps JAX's CPU backend factory so that the client is built
while the calling thread may run on ``n`` CPUs only, then gives every thread started
meanwhile (the pool's among them) back all of the process's CPUs, so the pool has ``n``
threads that run anywhere. Other backends (a GPU's) are built as before. It touches one
JAX internal (``jax._src.xla_bridge._backend_factories``) and warns, changing nothing,
where that has moved or the system has no CPU affinity (macOS, Windows).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings

from rljax import validate

# What this module asked for and what the CPU client was built with (None: not built by it).
_STATE: dict[str, int | None] = {"requested": 0, "built": None}


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where the
    system has none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pool_size(n: int) -> int:
    """The threads a pool asked to have ``n`` gets: all CPUs for 0 or more than there are."""
    cpus = available_cpus()
    return cpus if n <= 0 or n > cpus else n


def set_cpu_threads(n: int, *, command_line: bool = False) -> bool:
    """Asks for XLA's CPU thread pool to have ``n`` threads (0: one per CPU, JAX's default;
    more than the CPUs there are: one per CPU).

    Returns True when the pool will have (or has) that size; False, with a warning naming
    what to do, when JAX's backends were already started with another size or the system
    cannot size it. ``command_line``: the caller is ``rljax train``, which sized the pool
    before reading the run's settings (the warning then gives the option's advice).

    Raises:
        ValueError: ``n`` is not an integer >= 0.
    """
    validate.integer("cpu_threads", n, low=0)
    wanted = pool_size(n)
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        built = _STATE["built"] if _STATE["built"] is not None else available_cpus()
        if built == wanted:
            return True
        advice = (f"give --cpu-threads {n} to start with it" if command_line
                  else f"call rljax.set_cpu_threads({n}) before the process's first JAX "
                  f"computation, or train from the command line (rljax train --cpu-threads "
                  f"{n})")
        warnings.warn(f"cpu_threads={n} not applied: JAX's CPU backend already runs with "
                      f"{built} thread(s), sized once per process when JAX starts, so the run "
                      f"goes on with {built}; {advice}", RuntimeWarning, stacklevel=2)
        return False
    _STATE["requested"] = n
    if wanted == available_cpus():
        return True  # JAX's own sizing
    if not hasattr(os, "sched_setaffinity"):
        warnings.warn(f"cpu_threads={n} not applied: this system has no CPU affinity "
                      f"(os.sched_setaffinity), which sizes XLA's CPU thread pool",
                      RuntimeWarning, stacklevel=2)
        return False
    return _wrap_cpu_factory(xla_bridge)


def _wrap_cpu_factory(xla_bridge) -> bool:
    registrations = getattr(xla_bridge, "_backend_factories", None)
    registration = registrations.get("cpu") if isinstance(registrations, dict) else None
    if registration is None or not dataclasses.is_dataclass(registration):
        warnings.warn("cpu_threads not applied: this JAX version registers its CPU backend "
                      "differently (jax._src.xla_bridge._backend_factories['cpu'])",
                      RuntimeWarning, stacklevel=3)
        return False
    if getattr(registration.factory, "_rljax_sized", False):
        return True
    original = registration.factory

    def sized_cpu_client():
        cpus = os.sched_getaffinity(0)
        size = pool_size(_STATE["requested"] or 0)
        if size >= len(cpus):
            _STATE["built"] = len(cpus)
            return original()
        before = set(os.listdir("/proc/self/task"))
        os.sched_setaffinity(0, sorted(cpus)[:size])
        try:
            client = original()
        finally:
            os.sched_setaffinity(0, cpus)
            for tid in set(os.listdir("/proc/self/task")) - before:
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except OSError:  # a thread that has ended since
                    pass
        _STATE["built"] = size
        return client

    sized_cpu_client._rljax_sized = True
    registrations["cpu"] = dataclasses.replace(registration, factory=sized_cpu_client)
    return True


def member_split(members: int, cores: int | None = None) -> int:
    """The host CPU devices to split ``members`` over: the most of ``cores`` (default: the
    CPUs this process may run on) that divide the members evenly."""
    cores = available_cpus() if cores is None else cores
    return max(d for d in range(1, max(cores, 1) + 1) if members % d == 0)


def set_cpu_devices(n: int) -> bool:
    """Asks JAX for at least ``n`` host CPU devices (``jax_num_cpu_devices``), over which a
    run splits its members (the run setting ``cpu_devices``); the CPU backend makes them
    when it starts, so this applies before the process's first JAX computation only.

    Returns True when JAX has (or will have) ``n`` CPU devices or more; False, with a
    warning, when its CPU backend already runs with fewer. ``XLA_FLAGS``'
    ``--xla_force_host_platform_device_count``, when set, is left as it is.

    Raises:
        ValueError: ``n`` is not an integer >= 1.
    """
    validate.integer("cpu_devices", n, low=1)
    if n == 1:
        return True
    import jax
    from jax._src import xla_bridge

    forced = re.search(r"--xla_force_host_platform_device_count=(\d+)",
                       os.environ.get("XLA_FLAGS", ""))
    if xla_bridge.backends_are_initialized():
        have, why = len(jax.devices("cpu")), ("JAX's CPU backend already runs with {have} "
                                              "device(s), made once per process when it starts")
    elif forced is not None:
        have, why = int(forced.group(1)), ("XLA_FLAGS sets "
                                           "--xla_force_host_platform_device_count={have}")
    else:
        if n > max(1, jax.config.jax_num_cpu_devices):
            jax.config.update("jax_num_cpu_devices", n)
        return True
    if have >= n:
        return True
    warnings.warn(f"cpu_devices={n} not applied: {why.format(have=have)}, so the members stay "
                  f"on one device; ask before the process's first JAX computation "
                  f"(rljax.set_cpu_devices({n}), or rljax train)", RuntimeWarning, stacklevel=2)
    return False

"""Memory a run may use, and memory it would need, measured before anything is built.

:func:`available_host_bytes` reads what the machine and its limits leave free (Linux
``/proc/meminfo``, the cgroup memory limit of a container, ``RLIMIT_AS``);
:func:`check_fits` compares an estimate, made of named parts, with it and refuses a run
that cannot fit with one line that names the parts, their sizes and what to lower.
Estimates are lower bounds (what the arrays alone take), so a refused run could never
have run, and a run that passes may still meet an allocation failure later.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Host memory of one envpool env beyond its observation buffers (measured: CartPole
# about 7 KB, Reacher 240 KB, Breakout 1.3 MB); a lower bound for any task.
ENV_OVERHEAD_BYTES = 4096
# envpool keeps a few copies of each env's observation (state queue, batch buffers).
ENV_OBS_COPIES = 8


def format_bytes(n: float) -> str:
    """``"34.4 GB"``, ``"512 B"`` (decimal units)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_available() -> int | None:
    """What the container's memory limit leaves (cgroup v2, then v1); None: no limit."""
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and limit < 2**60:
            return max(0, limit - (usage or 0))
    return None


def _address_space_available() -> int | None:
    """What ``RLIMIT_AS`` leaves of this process's address space; None: no limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(0, soft - used)


def available_host_bytes() -> int | None:
    """Host memory this process can still take: the least of the free memory, the
    container's limit and the address-space limit; None where none can be read."""
    found = [b for b in (_meminfo_available(), _cgroup_available(), _address_space_available())
             if b is not None]
    return min(found) if found else None


def available_device_bytes(device: Any) -> int | None:
    """Free memory of an accelerator (None on CPU, or where the backend does not say)."""
    if getattr(device, "platform", "cpu") == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics
        return None
    limit = stats.get("bytes_limit")
    return None if limit is None else max(0, int(limit) - int(stats.get("bytes_in_use", 0)))


def array_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of an array of ``shape`` and ``dtype`` (8 per element where the dtype has no
    NumPy itemsize, such as PRNG keys)."""
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        itemsize = 8
    return math.prod(int(d) for d in shape) * itemsize


def tree_bytes(tree: Any) -> int:
    """Bytes of every array (or ``jax.ShapeDtypeStruct``) in a pytree."""
    import jax

    return sum(array_bytes(x.shape, x.dtype) for x in jax.tree.leaves(tree)
               if hasattr(x, "shape") and hasattr(x, "dtype"))


def env_pool_bytes(num_envs: int, obs_shape: Sequence[int], obs_dtype: Any) -> int:
    """A lower bound on the host memory of an envpool pool of ``num_envs`` envs."""
    return num_envs * (ENV_OVERHEAD_BYTES + ENV_OBS_COPIES * array_bytes(obs_shape, obs_dtype))


def check_fits(parts: Mapping[str, int], hints: Mapping[str, str], *,
               available: int | None = None, where: str = "host memory") -> None:
    """Refuses an estimate that exceeds the memory available.

    Args:
        parts: ``{description: bytes}``, e.g. ``{"replay memory": 34_359_738_352}``.
        hints: ``{description: what to lower}`` for the parts (the largest part's hint
            ends the message).
        available: bytes free (default: :func:`available_host_bytes`; None: unknown,
            nothing is refused).
        where: the memory named in the message.

    Raises:
        ValueError: one line with the total, the parts, the memory available and what
            to lower.
    """
    if available is None:
        available = available_host_bytes()
    need = sum(parts.values())
    if available is None or need <= available:
        return
    ordered = sorted(parts.items(), key=lambda kv: -kv[1])
    listed = ", ".join(f"{name} {format_bytes(size)}" for name, size in ordered if size)
    hint = hints.get(ordered[0][0])
    advice = f"; lower {hint}" if hint else ""
    raise ValueError(f"not enough memory: this run needs at least {format_bytes(need)} "
                     f"({listed}) but {format_bytes(available)} of {where} is available"
                     f"{advice}")

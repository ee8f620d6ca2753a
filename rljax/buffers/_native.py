"""Native CPU kernels of the replay buffers (``kernels.cc``), built on first use.

On XLA:CPU a sum-tree search or update in JAX is a chain of small gathers, reductions and
scatters per level, each paying a fixed cost and split over the thread pool; the C++ handlers
do a whole search or update in one call, in place (see ``benchmarks/buffers.py`` for the
figures). They are XLA FFI handlers, called with :func:`jax.ffi.ffi_call` inside any jitted,
scanned or vmapped program, and selected by :func:`jax.lax.platform_dependent` for the CPU
only: other backends (GPU, TPU) run the JAX version in ``sum_tree.py``.

Build: the first time a sum-tree operation is traced in a process, ``kernels.cc`` is compiled
with the C++ compiler (``$CXX``, else ``c++``/``g++``/``clang++``) against the FFI headers of
the installed jaxlib (``jax.ffi.include_dir()``, so the headers always match the runtime) into
a shared library cached under ``$RLJAX_CACHE_DIR`` (default ``~/.cache/rljax``), keyed by the
source, the jaxlib version and the flags: a few seconds once per machine and jaxlib version.
Beside it, ``NAME.so.sha256`` records its size and SHA-256; a cached library that does not
match (cut short, emptied, overwritten) is built again before it is loaded.
If no compiler is found or the build fails, a warning says why and the JAX version is used
everywhere; results are the same up to float32 rounding at segment boundaries.

``RLJAX_NATIVE=0`` turns the kernels off (read when an operation is traced, so set it before
compiling the programs that use the tree, or call ``jax.clear_caches()`` after changing it).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.cc")
FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-w")
_TARGETS = {
    ("find", "float32"): "rljax_sum_tree_find_f32",
    ("find", "int32"): "rljax_sum_tree_find_s32",
    ("set", "float32"): "rljax_sum_tree_set_f32",
    ("set", "int32"): "rljax_sum_tree_set_s32",
    ("gather", None): "rljax_gather_rows",
    ("draw", "float32"): "rljax_stratified_draw_f32",
}


class BuildError(RuntimeError):
    """The native kernels could not be compiled or loaded."""


def enabled() -> bool:
    """Whether ``RLJAX_NATIVE`` allows the kernels (anything but ``0``, ``false``, ``off``)."""
    return os.environ.get("RLJAX_NATIVE", "1").strip().lower() not in ("0", "false", "off", "no")


def cache_dir() -> str:
    """Where built libraries are kept: ``$RLJAX_CACHE_DIR``, else ``~/.cache/rljax``."""
    explicit = os.environ.get("RLJAX_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rljax")


def find_compiler() -> str | None:
    """``$CXX`` if set, else the first of ``c++``, ``g++``, ``clang++`` on the PATH."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    return None


def library_path(directory: str, source: str = SOURCE, stem: str = "kernels") -> str:
    """The cached library's path for ``source``, the jaxlib version, platform and flags."""
    import jaxlib

    digest = hashlib.sha256()
    with open(source, "rb") as f:
        digest.update(f.read())
    digest.update(" ".join((jaxlib.__version__, sys.platform, *FLAGS)).encode())
    return os.path.join(directory, f"{stem}_{digest.hexdigest()[:16]}.so")


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def intact(path: str) -> bool:
    """Whether the library at ``path`` is the one its build wrote: its size and SHA-256
    match the record written beside it (``PATH.sha256``). A library cut short (a full
    disk, a crash before the data reached the disk), emptied or overwritten fails this,
    and loading it could kill the process (SIGBUS) or fail on every run."""
    try:
        with open(path + ".sha256") as f:
            digest, size = f.read().split()
        return os.path.getsize(path) == int(size) and _digest(path) == digest
    except (OSError, ValueError):
        return False


def _write_synced(path: str, data: bytes | None = None) -> None:
    """Writes ``data`` to ``path`` (None: leaves it as it is) and flushes it to the disk."""
    with open(path, "r+b" if data is None else "wb") as f:
        if data is not None:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())


def build(directory: str | None = None, compiler: str | None = None, source: str = SOURCE,
          stem: str = "kernels") -> str:
    """Compiles ``source`` (default ``kernels.cc``) against the FFI headers of the installed
    jaxlib into ``directory`` unless an intact build is there already (:func:`intact`: a
    damaged or unrecorded one is built again); returns the path.

    Raises:
        BuildError: no compiler, or the compiler failed (its message included).
    """
    directory = directory or cache_dir()
    path = library_path(directory, source, stem)
    if os.path.exists(path) and intact(path):
        return path
    compiler = compiler or find_compiler()
    if compiler is None:
        raise BuildError("no C++ compiler found (set CXX, or install g++ or clang++)")
    os.makedirs(directory, exist_ok=True)
    # One build at a time per folder: processes started together (the processes of a
    # multi-process run, test workers) wait for the first one's build, then load it.
    with _build_lock(directory):
        if os.path.exists(path) and intact(path):
            return path
        _compile(compiler, source, directory, path)
    return path


@contextlib.contextmanager
def _build_lock(directory: str):
    """An exclusive lock on the folder itself (it leaves no file behind), where ``fcntl``
    exists; elsewhere none, and processes building at once each write their own file."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def _compile(compiler: str, source: str, directory: str, path: str) -> None:
    """Compiles ``source`` into ``path`` with its record beside it."""
    # Build under unique names, flush them to the disk, then rename: the record first,
    # then the library, so a library in place is whole and a reader that finds the
    # record of another build in between builds again rather than load a mismatch.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    record = f"{tmp}.sha256"
    cmd = [compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", source, "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise BuildError(
                f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
            )
        _write_synced(tmp)
        _write_synced(record, f"{_digest(tmp)} {os.path.getsize(tmp)}\n".encode())
        os.replace(record, path + ".sha256")
        os.replace(tmp, path)
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"`{' '.join(cmd)}` could not run: {e}") from e
    finally:
        for leftover in (tmp, record):
            if os.path.exists(leftover):
                os.remove(leftover)


@functools.cache
def _load() -> bool:
    """Builds (or finds) and registers the kernels once per process; False if unavailable."""
    try:
        try:
            path = build()
        except (BuildError, OSError) as first:
            if os.environ.get("RLJAX_CACHE_DIR"):
                raise
            # e.g. a read-only home directory: fall back to a per-user temporary folder
            fallback = os.path.join(tempfile.gettempdir(), f"rljax-{os.getuid()}")
            try:
                path = build(fallback)
            except (BuildError, OSError):
                raise first from None
        library = ctypes.cdll.LoadLibrary(path)
        for name in _TARGETS.values():
            jax.ffi.register_ffi_target(
                name, jax.ffi.pycapsule(getattr(library, name)), platform="cpu"
            )
    except (BuildError, OSError, AttributeError) as e:
        warnings.warn(
            f"rljax: native sum-tree kernels unavailable, using the JAX version on CPU ({e})",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def available() -> bool:
    """True if the kernels are enabled and built (builds them on the first call)."""
    return enabled() and _load()


def dispatch(native, fallback, *args, supported: bool = True):
    """``native(*args)`` when lowered for the CPU and the kernels are built (and ``supported``),
    else ``fallback(*args)``: the JAX version, which every other backend lowers. The choice is
    made when the program is traced and lowered, never at run time."""
    if not (supported and available()):
        return fallback(*args)
    return jax.lax.platform_dependent(*args, cpu=native, default=fallback)


def _attrs(capacity: int, fanout: int) -> dict:
    return dict(capacity=np.int64(capacity), fanout=np.int64(fanout))


def find(nodes: jax.Array, queries: jax.Array, capacity: int, fanout: int) -> jax.Array:
    """``[K]`` int32 leaves for ``[K]`` queries of the same dtype as ``nodes`` (CPU only)."""
    target = _TARGETS["find", jnp.dtype(nodes.dtype).name]
    call = jax.ffi.ffi_call(
        target, jax.ShapeDtypeStruct(queries.shape, jnp.int32), vmap_method="broadcast_all"
    )
    return call(nodes, queries, **_attrs(capacity, fanout))


def set_leaves(
    nodes: jax.Array, indices: jax.Array, values: jax.Array, capacity: int, fanout: int,
    limit: jax.Array | int | None = None, floor: jax.Array | float = 0,
) -> tuple[jax.Array, jax.Array]:
    """``nodes`` with leaves ``indices`` set to sanitized ``values`` and their ancestors
    recomputed, and ``max(floor, largest value written)`` (``[]``).

    The output aliases ``nodes``: with a donated or loop-carried tree the update is in place.
    Indices outside ``[0, limit)`` (default ``capacity``) are ignored; duplicates keep the
    last value."""
    target = _TARGETS["set", jnp.dtype(nodes.dtype).name]
    call = jax.ffi.ffi_call(
        target,
        (jax.ShapeDtypeStruct(nodes.shape, nodes.dtype),
         jax.ShapeDtypeStruct(nodes.shape[:-1], nodes.dtype)),
        vmap_method="broadcast_all",
        input_output_aliases={0: 0},
    )
    limit = jnp.asarray(capacity if limit is None else limit, jnp.int32)
    return call(nodes, indices, values, limit, jnp.asarray(floor, nodes.dtype),
                **_attrs(capacity, fanout))


def stratified_draw(
    nodes: jax.Array, uniforms: jax.Array, capacity: int, fanout: int
) -> tuple[jax.Array, jax.Array]:
    """Stratified proportional draw from a float32 tree, ``[K]`` ``U[0, 1)`` draws in:
    ``(indices, leaf values)``, each ``[K]``, as ``sum_tree.stratified_draw`` defines."""
    k = uniforms.shape
    call = jax.ffi.ffi_call(
        _TARGETS["draw", "float32"],
        (jax.ShapeDtypeStruct(k, jnp.int32), jax.ShapeDtypeStruct(k, jnp.float32)),
        vmap_method="broadcast_all",
    )
    return call(nodes, uniforms, **_attrs(capacity, fanout))


def gather_rows(arrays: list[jax.Array], indices: jax.Array) -> list[jax.Array]:
    """``[a[indices] for a in arrays]`` in one call (rows clamped to each array's range).

    ``indices`` ``[K]`` int32; each array ``[rows, ...]``, any dtype; outputs ``[K, ...]``."""
    if not arrays:
        return []
    outs = [jax.ShapeDtypeStruct(indices.shape + a.shape[1:], a.dtype) for a in arrays]
    call = jax.ffi.ffi_call(_TARGETS["gather", None], outs, vmap_method="broadcast_all")
    return list(call(indices, *arrays))


def supports(dtype) -> bool:
    """Whether a tree of ``dtype`` has a kernel (float32 and int32)."""
    return jnp.dtype(dtype).name in ("float32", "int32")

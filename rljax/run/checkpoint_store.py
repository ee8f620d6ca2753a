"""The checkpoint folder on disk, written and read with orbax-checkpoint.

``RUN_DIR/checkpoint/`` holds one folder per save, named by its env step::

    checkpoint/
        120000/              a complete checkpoint
            state/           the train state's arrays (OCDBT; one data folder per process)
            manifest/        the manifest (JSON)
        140000/
        160000.orbax-checkpoint-tmp-.../   only while a save is under way

A save writes everything into the ``*.orbax-checkpoint-tmp-*`` folder and then renames
it to ``STEP/`` (an atomic rename on a POSIX filesystem), so a step folder is complete
or absent; then the oldest steps beyond the last ``keep`` are deleted. A save that fails
(a full disk, ...) removes its temporary folder; one left by a killed process is removed
when the next save of that run starts.

Every process of a multi-process run calls :func:`write` and :func:`read` with the same
folder: each writes and reads only the shards of its own devices (orbax merges the
processes' OCDBT indexes when a save completes), so nothing is gathered to one process.

The manifest records each array's shape and dtype and a CRC-32 of every 64 MiB of it
(computed by the process holding it); a read checks them, so a damaged file is refused
rather than loaded.

Arrays are written uncompressed, straight from the device buffers (on CPU these are host
memory already, so a save makes no copy of the state). Reading fills each shard of a CPU
device in place, a few chunks at a time, so a restore holds the state once, not twice
(orbax's own reader reads every shard into a host buffer and copies it to the device);
on an accelerator each shard goes through a host buffer, one shard at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import glob
import logging
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts

from rljax.run.checksums import CHUNK_BYTES, checksums_of, unmatched

_TMP_MARK = ".orbax-checkpoint-tmp"


class Corrupted(ValueError):
    """Arrays read back do not match the checksums saved with them."""


class Target(NamedTuple):
    """How to read one saved array: its shape and dtype, and the sharding to place it on
    (None: a host NumPy array)."""

    shape: tuple[int, ...]
    dtype: Any
    sharding: Any = None


def _buffer_of(x: jax.Array) -> np.ndarray:
    """A writable NumPy view of the buffer of ``x``, a single-device CPU array, so that it
    can be filled in place (the array stays XLA's own, so a jitted call can reuse it when
    it is donated; a buffer adopted from NumPy would be copied instead)."""
    if x.nbytes == 0:
        return np.empty(x.shape, x.dtype)
    raw = (ctypes.c_char * x.nbytes).from_address(x.unsafe_buffer_pointer())
    return np.frombuffer(raw, np.uint8).view(x.dtype).reshape(x.shape)


async def _read_into(buf: np.ndarray, piece: Any) -> None:
    """Fills ``buf`` with the tensorstore view ``piece``, a few chunks at a time along the
    first axis, so that tensorstore's own read buffers stay small."""
    dest = ts.array(buf)[ts.d[:].translate_to[piece.domain.origin]]
    if buf.ndim == 0 or buf.size == 0:
        await dest.write(piece)
        return
    chunk_rows = piece.chunk_layout.read_chunk.shape[0] or buf.shape[0]
    rows = chunk_rows * max(1, CHUNK_BYTES // max(1, chunk_rows * buf[:1].nbytes))
    first, last = piece.domain.origin[0], piece.domain.exclusive_max[0]
    for start in range(first, last, rows):
        part = ts.d[0][start:min(start + rows, last)]
        await dest[part].write(piece[part])


async def _read_sharded(store: Any, shape: tuple[int, ...], sharding: Any) -> jax.Array:
    """The array in ``store`` as a jax.Array on ``sharding``. Each of this process's
    shards is read straight into a CPU device's buffer, or, on an accelerator, into a host
    buffer that is then copied over and dropped."""
    shards = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        piece = store[index] if shape else store
        dtype = piece.dtype.numpy_dtype
        if device.platform == "cpu":
            shard = jax.block_until_ready(jnp.zeros(piece.shape, dtype, device=device))
            await _read_into(_buffer_of(shard), piece)
        else:
            buf = np.empty(piece.shape, dtype)
            await _read_into(buf, piece)
            shard = jax.block_until_ready(jax.device_put(buf, device))
        shards.append(shard)
    return jax.make_array_from_single_device_arrays(shape, sharding, shards)


class _AdoptingArrayHandler(ocp.type_handlers.ArrayHandler):
    """orbax's jax.Array handler with the reader of :func:`_read_sharded` (writing is
    orbax's own). Small arrays are read concurrently, large ones one after another, so
    that at most one large shard is in flight."""

    async def deserialize(self, infos, args=None):
        async def one(info, arg):
            await info.await_path_creation()
            spec = ocp.type_handlers.get_json_tspec_read(
                info, use_ocdbt=bool(info.is_ocdbt_checkpoint))
            store = await ts.open(spec, open=True, context=info.ts_context)
            shape = tuple(store.shape)
            if arg.global_shape is not None and tuple(arg.global_shape) != shape:
                raise ValueError(f"{info.name} is saved with shape {shape}, "
                                 f"expected {tuple(arg.global_shape)}")
            return await _read_sharded(store, shape, arg.sharding)

        pairs = list(zip(infos, args, strict=True))
        large = {i for i, (_, arg) in enumerate(pairs) if arg.global_shape is not None and
                 np.prod(arg.global_shape) * np.dtype(arg.dtype).itemsize > CHUNK_BYTES}
        small = [i for i in range(len(pairs)) if i not in large]
        # Every read finishes before an error is raised: a read left running would write
        # into a device buffer that is freed once the failed restore is dropped.
        done = await asyncio.gather(*[one(*pairs[i]) for i in small], return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result
        out = dict(zip(small, done, strict=True))
        for i in sorted(large):
            out[i] = await one(*pairs[i])
        return [out[i] for i in range(len(pairs))]


@functools.cache
def _registry() -> Any:
    return ocp.type_handlers.create_type_handler_registry(
        (jax.Array, _AdoptingArrayHandler()), (np.ndarray, ocp.type_handlers.NumpyHandler()))


@contextlib.contextmanager
def _manager(folder: str, keep: int | None = None, write: bool = False) -> Iterator[Any]:
    """An orbax CheckpointManager of ``folder``; only a ``write`` one creates the folder,
    removes unfinished saves' temporary folders when it starts, and deletes old steps
    (so reading a run directory while its run saves is safe). orbax's log lines (a step
    folder left half-deleted by a crash, a write that failed, ...) are silenced: failures
    surface as exceptions, which the callers report in one line."""
    state = ocp.PyTreeCheckpointHandler(use_compression=False,
                                        type_handler_registry=_registry())
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep if write else None, create=write,
        cleanup_tmp_directories=write, enable_async_checkpointing=False,
        save_root_metadata=False,
        atomicity_options=ocp.options.AtomicityOptions(
            mode=ocp.options.AtomicityMode.ATOMIC_RENAME))
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.CRITICAL)
    try:
        with ocp.CheckpointManager(os.path.abspath(folder), options=options, item_handlers={
                "state": state, "manifest": ocp.JsonCheckpointHandler()}) as manager:
            yield manager
    finally:
        absl.setLevel(level)


def steps(folder: str) -> list[int]:
    """The env steps of the complete checkpoints in ``folder``, oldest first."""
    if not os.path.isdir(folder):
        return []
    with _manager(folder) as manager:
        return sorted(manager.all_steps())


def step_dir(folder: str, step: int) -> str:
    return os.path.join(folder, str(step))


def remove_unfinished(folder: str, step: int) -> None:
    """Deletes the temporary folder(s) of an unfinished save of ``step``."""
    for path in glob.glob(os.path.join(glob.escape(folder), f"{step}{_TMP_MARK}*")):
        shutil.rmtree(path, ignore_errors=True)


def not_a_checkpoint(folder: str, newest: int) -> tuple[str, int, str] | None:
    """The newest entry of ``folder`` named as a step above ``newest`` (the newest complete
    checkpoint) that is no folder (a file, a symbolic link loop or to nothing), which
    orbax leaves out of its steps: ``(path, step, what it is)``; None if there is none."""
    try:
        names = [n for n in os.listdir(folder) if n.isdigit() and int(n) > newest]
    except OSError:
        return None
    for name in sorted(names, key=int, reverse=True):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            continue  # a folder orbax does not list: an unfinished save's or a removal's
        try:
            os.stat(path)
            what = "a symbolic link" if os.path.islink(path) else "a file"
        except OSError as e:
            what = ("a symbolic link loop" if e.errno == errno.ELOOP else
                    "a symbolic link to nothing" if os.path.islink(path) else
                    f"unreadable ({os.strerror(e.errno or 0)})")
        return path, int(name), what
    return None


class NewerCheckpoint(ValueError):
    """A save that would not be the folder's newest checkpoint (orbax skips those)."""


class NoSpace(OSError):
    """The filesystem has less free space than a checkpoint needs."""

    def __init__(self, needed: int, free: int):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.detail = f"it needs {needed / 2**20:,.1f} MiB, {free / 2**20:,.1f} MiB are free"


def _check_space(folder: str, arrays: dict[str, jax.Array]) -> None:
    """Raises NoSpace, on every process, unless each process's filesystem has room for
    the shards it writes (plus 1% and 1 MiB for metadata): a full disk is refused before
    anything is written."""
    needed = sum(s.data.nbytes for x in arrays.values() for s in x.addressable_shards
                 if s.replica_id == 0)
    needed += needed // 100 + (1 << 20)
    parent = folder
    while not os.path.isdir(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    stat = os.statvfs(parent)
    free = stat.f_bavail * stat.f_frsize
    room = np.asarray([needed <= free], np.int32)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        room = np.asarray(multihost_utils.process_allgather(room))
    if not room.all():
        raise NoSpace(needed, free)


@contextlib.contextmanager
def _quiet_teardown() -> Iterator[None]:
    """Drops what a failed save's leftovers print (the failure itself is raised and
    reported in one line): the "Event loop is closed" errors of tensorstore's callbacks
    under writes still in flight, and the tracebacks asyncio logs for orbax's tasks that
    failed or were dropped. After a failure they stay dropped for the rest of the
    process, since those leftovers print later (when collected, at exit); everything else
    goes to the usual hooks."""
    previous, previous_thread = sys.excepthook, threading.excepthook
    closed = lambda kind, value: kind is RuntimeError and str(value) == "Event loop is closed"

    def hook(kind, value, tb):
        if not closed(kind, value):
            previous(kind, value, tb)

    def thread_hook(args):
        if not closed(args.exc_type, args.exc_value):
            previous_thread(args)

    sys.excepthook, threading.excepthook = hook, thread_hook
    asyncio_log = logging.getLogger("asyncio")
    level = asyncio_log.level
    asyncio_log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    except BaseException:
        raise  # leave the hooks and the asyncio logger quiet
    else:
        sys.excepthook, threading.excepthook = previous, previous_thread
        asyncio_log.setLevel(level)


def write(folder: str, step: int, arrays: dict[str, jax.Array], manifest: dict,
          keep: int) -> str:
    """Saves ``arrays`` and ``manifest`` as checkpoint ``step`` of ``folder`` (replacing
    one of the same step), keeps the last ``keep`` checkpoints, and returns its folder.
    Every process calls this. On failure the temporary folder is removed and the
    exception propagates; :class:`NoSpace` before anything is written."""
    _check_space(folder, arrays)
    with _manager(folder, keep, write=True) as manager, _quiet_teardown():
        newer = [s for s in manager.all_steps() if s > step]
        if newer:  # orbax would skip the save without a word
            raise NewerCheckpoint(f"the folder already holds a newer checkpoint (env step "
                                  f"{max(newer):,}), so this one would not be the newest")
        if step in manager.all_steps():
            manager.delete(step)
        manifest = dict(manifest, checksums=checksums_of(arrays), arrays={
            name: [list(x.shape), str(x.dtype)] for name, x in arrays.items()})
        try:
            chunks = {name: ocp.SaveArgs(chunk_byte_size=CHUNK_BYTES) for name in arrays}
            saved = manager.save(step, args=ocp.args.Composite(
                state=ocp.args.PyTreeSave(arrays, save_args=chunks),
                manifest=ocp.args.JsonSave(manifest)))
            manager.wait_until_finished()
            if not saved:
                raise NewerCheckpoint(f"orbax-checkpoint declined to save env step {step:,}")
        except BaseException:
            if jax.process_index() == 0:
                remove_unfinished(folder, step)
            raise
    return step_dir(folder, step)


def read_manifest(folder: str, step: int) -> dict:
    with _manager(folder) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(
            manifest=ocp.args.JsonRestore()))
    return dict(restored["manifest"])


def read(folder: str, step: int, targets: dict[str, Target],
         checksums: dict[str, list[int]], unchecked: set[str] = frozenset()) -> dict[str, Any]:
    """Reads checkpoint ``step``'s arrays as ``targets`` says (every process calls this and
    reads its own shards) and checks them against ``checksums`` (its manifest's), all but
    those named in ``unchecked``.

    Raises:
        Corrupted: an array does not match its checksums.
    """
    item, restore_args = {}, {}
    for name, t in targets.items():
        item[name] = jax.ShapeDtypeStruct(t.shape, t.dtype, sharding=t.sharding)
        restore_args[name] = (ocp.RestoreArgs(restore_type=np.ndarray) if t.sharding is None
                              else ocp.ArrayRestoreArgs(sharding=t.sharding,
                                                        global_shape=t.shape, dtype=t.dtype))
    with _manager(folder) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(item=item, restore_args=restore_args)))
    arrays = dict(restored["state"])
    # Host arrays (read with another shape, to be rebuilt) are checked by their rebuild.
    bad = unmatched({k: v for k, v in arrays.items()
                     if isinstance(v, jax.Array) and k not in unchecked}, checksums)
    if bad:
        raise Corrupted(f"{len(bad)} array(s) do not match the checksums saved with them: "
                        + ", ".join(bad[:3]))
    return arrays

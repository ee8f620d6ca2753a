"""The checksums of a checkpoint's arrays: a CRC-32 of every ``CHUNK_BYTES`` piece of
every shard, computed where the shard lives (:func:`checksums_of`), and the check of arrays read
back in another layout than they were saved in (:func:`matches_as_saved`: a run split over
several devices, evaluated or loaded on one, or resumed over another number of devices);
:func:`unmatched` is the check of a read."""

from __future__ import annotations

import concurrent.futures
import os
import zlib
from typing import Any

import jax
import numpy as np

# Arrays are stored in chunks of at most this many bytes; reading goes chunk by chunk, so
# this bounds the transient buffers of a read.
CHUNK_BYTES = 64 << 20


def _shard_starts(sharding: Any, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The start of every distinct shard of an array, in a fixed order."""
    starts = {tuple(sl.indices(n)[0] for sl, n in zip(index, shape, strict=True))
              for index in sharding.devices_indices_map(shape).values()}
    return sorted(starts)


def _pieces(nbytes: int) -> range:
    return range(0, max(nbytes, 1), CHUNK_BYTES)


def checksums_of(arrays: dict[str, jax.Array]) -> dict[str, list[int]]:
    """For each array, the CRC-32 of each ``CHUNK_BYTES`` piece of each shard (shards in
    the order of :func:`_shard_starts`). Each process hashes the shards it holds (its
    replica 0), one shard at a time (on an accelerator each is copied to the host for
    it); the values are combined across processes, so every process returns the whole
    table."""
    out: dict[str, list[int]] = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        for name, x in arrays.items():
            mine = {tuple(sl.indices(n)[0] for sl, n in zip(s.index, x.shape, strict=True)): s
                    for s in x.addressable_shards if s.replica_id == 0}
            shard_bytes = int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
            out[name] = []
            for start in _shard_starts(x.sharding, x.shape):
                if start not in mine:
                    out[name] += [0] * len(_pieces(shard_bytes))
                    continue
                data = np.ascontiguousarray(np.asarray(mine[start].data)).reshape(-1)
                data = data.view(np.uint8)
                out[name] += pool.map(zlib.crc32, [data[i:i + CHUNK_BYTES]
                                                   for i in _pieces(data.nbytes)])
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        names = list(out)
        table = np.asarray([c for n in names for c in out[n]], np.uint32)
        table = np.asarray(multihost_utils.process_allgather(table)).max(axis=0).tolist()
        for n in names:
            out[n], table = table[:len(out[n])], table[len(out[n]):]
    return out


def matches_as_saved(x: jax.Array, sums: list[int]) -> bool:
    """Whether ``x`` matches checksums ``sums`` saved in another layout: rljax shards
    arrays over devices along their leading (members) axis only, so a save over ``k``
    devices hashed ``k`` equal blocks of it. False when no ``k`` matches or ``x`` is not
    all on this process."""
    if not x.is_fully_addressable or not x.ndim:
        return False
    nbytes = x.size * x.dtype.itemsize
    for k in [k for k in range(1, x.shape[0] + 1) if x.shape[0] % k == 0]:
        if k * len(_pieces(nbytes // k)) == len(sums):
            blocks = np.ascontiguousarray(np.asarray(x)).reshape(k, -1).view(np.uint8)
            if sums == [zlib.crc32(b[i:i + CHUNK_BYTES]) for b in blocks
                        for i in _pieces(b.nbytes)]:
                return True
    return False


def unmatched(arrays: dict[str, jax.Array], saved: dict[str, list[int]]) -> list[str]:
    """The names of ``arrays`` that match neither their ``saved`` checksums as read nor in
    any other layout they may have been saved in. The number of checksums does not tell
    the layout apart: 80 MB saved on one device and read as two 40 MB shards is two
    checksums either way, so every array that differs as read is checked in the others."""
    found = checksums_of(arrays)
    return [k for k, sums in found.items() if sums != saved.get(k)
            and not (saved.get(k) and matches_as_saved(arrays[k], saved[k]))]

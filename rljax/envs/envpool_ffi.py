"""envpool's XLA step under custom-call names that are the same in every process.

Why: envpool's XLA interface (``pool.xla()``) registers each custom call under a name made
of the pool object's ``id`` and passes the pool's address as a static attribute
(``{handle = <address> : i64}``). Both change from process to process, so every program
that steps an envpool pool differs between runs and JAX's persistent compilation cache
(:mod:`rljax.run.startup`) never hits for them: a second run of an envpool preset compiled
its training chunk again (seconds) instead of loading it.

Here each envpool handler is reached through a small forwarder (``envpool_ffi.cc``),
registered once per process under ``rljax_envpool_<EnvType>_<method>`` (for example
``rljax_envpool_CartPoleGymnasiumEnvPool_send``) and called without attributes. At run time
it reads the pool's address from operand 0, the ``uint8[8]`` handle buffer that envpool
threads through every call, and calls envpool's own handler (the function in the capsule of
``pool._xla()``) with a copy of the call frame whose attributes are envpool's
``handle``. Operands, results, layouts and aliasing are envpool's, so the results are the
same; the programs of two pools of the same task and size are the same text, in one
process or in two. Every pool of an env type shares one handler, so one name serves them
all.

Build: as the replay-buffer kernels (:mod:`rljax.buffers._native`): compiled on first use
with the C++ compiler against the FFI headers of the installed jaxlib, cached under
``$RLJAX_CACHE_DIR`` (default ``~/.cache/rljax``). Without a compiler, or if the build
fails, a warning says why and envpool's own ``pool.xla()`` is used (correct, only not
cacheable). The forwarder is for XLA:CPU; on other default backends envpool's own calls
are used. ``RLJAX_NATIVE=0`` turns it off as well.
"""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rljax.buffers import _native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "envpool_ffi.cc")
FLAGS = _native.FLAGS
PREFIX = "rljax_envpool_"

_lock = threading.Lock()
# (env type name, method) -> [(envpool handler address, target name, slot)]
_bound: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
_slots_used = 0


def library_path(directory: str) -> str:
    """The cached library's path for this source, jaxlib version, platform and flags."""
    return _native.library_path(directory, SOURCE, "envpool_ffi")


def build(directory: str | None = None, compiler: str | None = None) -> str:
    """Compiles ``envpool_ffi.cc`` into ``directory`` unless already there; returns the path
    (the build of the sum-tree kernels, :func:`rljax.buffers._native.build`).

    Raises:
        rljax.buffers._native.BuildError: no compiler, or the compiler failed.
    """
    return _native.build(directory, compiler, SOURCE, "envpool_ffi")


@functools.cache
def _library() -> ctypes.CDLL:
    """Builds (or finds) and loads the forwarder library once per process."""
    try:
        path = build()
    except (_native.BuildError, OSError) as first:
        if os.environ.get("RLJAX_CACHE_DIR"):
            raise
        fallback = os.path.join(tempfile.gettempdir(), f"rljax-{os.getuid()}")
        try:
            path = build(fallback)
        except (_native.BuildError, OSError):
            raise first from None
    library = ctypes.cdll.LoadLibrary(path)
    library.rljax_envpool_slots.restype = ctypes.c_int
    library.rljax_envpool_forwarder.restype = ctypes.c_void_p
    library.rljax_envpool_forwarder.argtypes = (ctypes.c_int,)
    library.rljax_envpool_bind.restype = ctypes.c_int
    library.rljax_envpool_bind.argtypes = (ctypes.c_int, ctypes.c_void_p)
    return library


def _capsule_pointer(capsule: Any) -> int:
    """The address a PyCapsule holds (envpool's XLA_FFI_Handler*)."""
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = (ctypes.py_object,)
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    address = get_pointer(capsule, get_name(capsule))
    if not address:
        raise ValueError("empty envpool capsule")
    return int(address)


def target_name(type_name: str, method: str) -> str:
    """The custom-call name of ``method`` of envpool env type ``type_name``."""
    return f"{PREFIX}{type_name}_{method}"


def _register(type_name: str, method: str, handler: int) -> str:
    """The stable target that forwards to ``handler``, registered on first use."""
    global _slots_used
    library = _library()
    with _lock:
        entries = _bound.setdefault((type_name, method), [])
        for address, name, _ in entries:
            if address == handler:
                return name
        slot = _slots_used
        if slot >= library.rljax_envpool_slots():
            raise _native.BuildError("all envpool forwarder slots are in use")
        forwarder = library.rljax_envpool_forwarder(slot)
        if not forwarder or library.rljax_envpool_bind(slot, handler) != 0:
            raise _native.BuildError(f"envpool forwarder slot {slot} unavailable")
        # Envpool gives every pool of a type the same handler; should a second one appear,
        # it gets its own (still deterministic) name rather than a wrong handler.
        name = target_name(type_name, method) + (f"_{len(entries)}" if entries else "")
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(forwarder), platform="cpu",
                                    api_version=1)
        _slots_used += 1
        entries.append((handler, name, slot))
        return name


def _specs(specs: tuple) -> tuple:
    return tuple((tuple(int(d) for d in shape), jax.dtypes.canonicalize_dtype(dtype))
                 for dtype, shape in specs)


def _layout(shape: tuple) -> tuple:
    return tuple(range(len(shape)))


def _make_call(name: str, specs: tuple) -> Callable:
    """An ffi_call of ``name`` with envpool's signature, layouts and aliasing, no attributes."""
    in_specs, out_specs = (_specs(s) for s in specs)
    results = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in out_specs)
    return jax.ffi.ffi_call(
        name,
        results if len(results) > 1 else results[0],
        has_side_effect=True,
        input_layouts=tuple(_layout(shape) for shape, _ in in_specs),
        output_layouts=(tuple(_layout(shape) for shape, _ in out_specs)
                        if len(out_specs) > 1 else _layout(out_specs[0][0])),
        input_output_aliases={0: 0},
    )


def make_xla(pool: Any) -> tuple[np.ndarray, Callable, Callable, Callable]:
    """``(handle, recv, send, step)`` as ``pool.xla()`` returns them, through the stable
    forwarder.

    Raises:
        rljax.buffers._native.BuildError, OSError: the forwarder is unavailable.
    """
    type_name = type(pool).__name__
    native = pool._xla()
    calls = {method: _make_call(_register(type_name, method, _capsule_pointer(capsules[0])),
                                specs)
             for method, (_, specs, capsules) in native}
    handle = native[0][1][0]  # the same bytes for every method
    raw_recv, raw_send = calls["recv"], calls["send"]

    # As envpool's XlaMixin.xla, with the calls above.
    def recv(handle: Any) -> Any:
        out = raw_recv(handle)
        return out[0], pool._to(out[1:], reset=False, return_info=True)

    def send(handle: Any, action: Any, env_id: Any = None) -> Any:
        action = pool._from(action, env_id)
        pool._check_action(action)
        return raw_send(handle, *action)

    def step(handle: Any, action: Any, env_id: Any = None) -> Any:
        return recv(send(handle, action, env_id))

    return np.frombuffer(handle, dtype=np.uint8), recv, send, step


def xla(pool: Any) -> tuple[Any, Callable, Callable, Callable]:
    """``make_xla(pool)`` on XLA:CPU; else, or if the forwarder cannot be built (a warning
    says why), envpool's own ``pool.xla()``."""
    if not _native.enabled() or jax.default_backend() != "cpu":
        return pool.xla()
    try:
        return make_xla(pool)
    except (_native.BuildError, OSError, AttributeError, ValueError, KeyError) as e:
        warnings.warn(
            f"rljax: stable envpool custom calls unavailable, using envpool's own (programs "
            f"that step the pool will not be reused from the compilation cache): {e}",
            RuntimeWarning, stacklevel=2)
        return pool.xla()

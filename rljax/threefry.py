"""Threefry without a loop on CPU.

Every ``jax.random`` call hashes with threefry2x32 (20 rounds). On CPU, JAX lowers that
hash as a ``fori_loop`` of 5 iterations of 4 rounds, to keep programs small; XLA:CPU runs
it as a while loop of small kernels, which costs the same 10-25 us on these cores whether
it hashes 2 keys or 400 (the loop's kernel launches, not the arithmetic). rljax's programs
hash several times per env step (the policy's sample, every env's key, the env's own
``randint`` of a reset), so on JAX-native envs those loops were most of an env step:
gymnax's CartPole stepped at 2.1M env steps/s at 32 envs with the loop, 4.3-5.3M without
it, and the gymnax presets trained 2-13% faster (docs/benchmarks.md, "Threefry on CPU").

:func:`install` registers, for the CPU backend only, the lowering JAX itself uses on GPU:
the same 20 rounds written out. It computes the same bits (tested); only the compiled
program differs, and XLA may fuse the arithmetic around a draw differently, so a run can
differ from before at float rounding (of 23 short reference runs, TD3's two did, by about
1e-4 from their second row; the other 21 were identical). Compile times measured the
same. rljax's loops install it when they are imported; ``RLJAX_UNROLLED_THREEFRY=0`` keeps
JAX's own lowering. It relies on JAX internals (``jax._src``): where they are not as
expected, JAX's lowering stays and rljax runs as before, only slower.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

ENV_FLAG = "RLJAX_UNROLLED_THREEFRY"
_OFF = ("0", "false", "no", "off")
_installed = False


def _internals():
    """``(threefry2x32_p, unrolled rule, JAX's CPU rule, register_lowering)`` or None."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as t

        return (t.threefry2x32_p, t._threefry2x32_lowering_rule,
                t._threefry2x32_cpu_lowering_rule, mlir.register_lowering)
    except (ImportError, AttributeError):
        return None


def _register(unrolled: bool) -> bool:
    parts = _internals()
    if parts is None:
        return False
    primitive, unrolled_rule, cpu_rule, register = parts
    register(primitive, unrolled_rule if unrolled else cpu_rule, platform="cpu")
    return True


def enabled() -> bool:
    """Whether rljax should install the unrolled lowering (``RLJAX_UNROLLED_THREEFRY``)."""
    return os.environ.get(ENV_FLAG, "1").strip().lower() not in _OFF


def install() -> bool:
    """Lowers threefry2x32 on CPU without a loop from now on (programs compiled before
    keep theirs), unless ``RLJAX_UNROLLED_THREEFRY=0``; returns whether it is installed."""
    global _installed
    _installed = enabled() and _register(True)
    return _installed


@contextlib.contextmanager
def lowering(unrolled: bool) -> Iterator[None]:
    """Programs first compiled inside use the unrolled (True) or JAX's own rolled (False)
    CPU lowering; on leaving, the lowering before is back."""
    _register(unrolled)
    try:
        yield
    finally:
        _register(_installed)

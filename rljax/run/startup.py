"""Start-up of a run: JAX's persistent compilation cache and the phase lines.

Between the command and the first chunk a run builds its envs and agent, initializes the
train state and compiles the training chunk. Each phase is drawn on the progress display
with its time, so that a run that is still compiling says so.

The compiled programs are kept in JAX's persistent compilation cache, in
``$RLJAX_CACHE_DIR/jax`` (default ``~/.cache/rljax/jax``), so a second run of the same
configuration loads them instead of compiling again. ``RLJAX_COMPILE_CACHE=0`` (or
``rljax train --no-compile-cache``) turns the cache off; a cache folder set through JAX's
own ``jax_compilation_cache_dir`` is used as it is. With jaxlib 0.9 or older the cache is
off unless ``RLJAX_COMPILE_CACHE=1`` (its XLA:CPU warns on stderr at every load).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import TextIO

import jax

ENV_FLAG = "RLJAX_COMPILE_CACHE"
_OFF = ("0", "false", "no", "off")


def cache_dir() -> str:
    """``$RLJAX_CACHE_DIR/jax``, else ``$XDG_CACHE_HOME/rljax/jax``, else
    ``~/.cache/rljax/jax``."""
    base = os.environ.get("RLJAX_CACHE_DIR")
    if not base:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                  ".cache")
        base = os.path.join(home, "rljax")
    return os.path.join(base, "jax")


def cache_enabled() -> bool:
    """Whether rljax should turn the compilation cache on (``RLJAX_COMPILE_CACHE``; unset:
    on, except with jaxlib 0.9 or older, whose XLA:CPU writes a page of C++ warnings to
    stderr each time it loads a program from the cache: ``RLJAX_COMPILE_CACHE=1`` turns
    it on there)."""
    flag = os.environ.get(ENV_FLAG)
    if flag is None:
        return _jaxlib_version() >= (0, 10)
    return flag.strip().lower() not in _OFF


def _jaxlib_version() -> tuple[int, ...]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return tuple(int(p) for p in version("jaxlib").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return (0, 0)


def enable_compile_cache() -> str | None:
    """Turns on JAX's persistent compilation cache (unless ``RLJAX_COMPILE_CACHE=0``);
    returns its folder, or None when it is off or its folder cannot be made."""
    own = jax.config.jax_compilation_cache_dir
    if own:
        return own
    if not cache_enabled():
        return None
    path = cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # a read-only home: run without the cache
        return None
    if not os.access(path, os.W_OK):
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    # Cache every program, the small ones too: most of a run's start-up is the many
    # programs of a second or less (init, the chunk of a small net, evaluation).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _one_line_for_write_errors(path)
    return path


_WRITE_ERROR = "Error writing persistent compilation cache entry"


def _one_line_for_write_errors(path: str) -> None:
    """JAX warns once per program it cannot write into the cache (a full disk: a dozen
    two-line warnings at a run's start); rljax says it in one line, once per process."""
    show = warnings.showwarning
    if getattr(show, "_rljax_cache", False):
        return
    said = []

    def showwarning(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if not text.startswith(_WRITE_ERROR):
            return show(message, category, filename, lineno, file, line)
        if not said:
            said.append(text)
            reason = text.split("': ", 1)[-1]
            print(f"rljax: compiled programs cannot be kept in the compilation cache {path} "
                  f"({reason}); they are compiled again by the next run "
                  f"(--no-compile-cache turns the cache off)", file=sys.stderr)
        return None

    showwarning._rljax_cache = True
    warnings.showwarning = showwarning


@jax.jit
def all_finite(tree) -> jax.Array:
    """Whether every float of ``tree`` is finite: the driver's check of the parameters
    after each logged chunk, compiled ahead with the chunk."""
    leaves = [jax.numpy.all(jax.numpy.isfinite(x)) for x in jax.tree.leaves(tree)
              if jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)]
    return jax.numpy.all(jax.numpy.stack(leaves)) if leaves else jax.numpy.array(True)


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


class CompileClock:
    """Listens to JAX's compile events while registered: ``seconds`` is the time spent
    tracing, lowering and compiling programs (or loading them from the compilation cache),
    overlapping spans counted once; ``cache_hits`` counts programs loaded from the cache."""

    def __init__(self):
        self.spans: list[tuple[float, float]] = []
        self.cache_hits = 0

    def _span(self, event: str, start: float, end: float, **kwargs) -> None:
        if event in _COMPILE_EVENTS:
            self.spans.append((start, end))

    def _event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    @property
    def seconds(self) -> float:
        total, reach = 0.0, -math.inf
        for start, end in sorted(self.spans):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total

    def __enter__(self) -> CompileClock:
        jax.monitoring.register_event_time_span_listener(self._span)
        jax.monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(Exception):
            jax.monitoring.unregister_event_time_span_listener(self._span)
        with contextlib.suppress(Exception):
            jax.monitoring.unregister_event_listener(self._event)


class Phases:
    """The start-up phases on the progress display: ``[label] compiling ...``, then the
    phase's time once it ends. On a terminal the line is redrawn in place; elsewhere one
    line per finished phase is written."""

    def __init__(self, label: str = "", enabled: bool = True, stream: TextIO | None = None,
                 clock: CompileClock | None = None):
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.times: dict[str, float] = {}
        self.clock = clock or CompileClock()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        if self.tty:
            self.stream.write(f"\r{self.label}{name} ...")
            self.stream.flush()
        hits = self.clock.cache_hits
        yield
        seconds = time.perf_counter() - start
        self.times[name] = seconds
        if self.enabled:
            loaded = self.clock.cache_hits - hits
            note = f" ({loaded} compiled program{'s' * (loaded > 1)} from the cache)" if (
                loaded) else ""
            self.stream.write(f"{chr(13) if self.tty else ''}{self.label}{name}: "
                              f"{seconds:.1f} s{note}\n")
            self.stream.flush()

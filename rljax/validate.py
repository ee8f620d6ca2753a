"""Checks of config values (agent hyperparameters, run settings).

Each check returns the value unchanged when it is allowed and otherwise raises
``ValueError`` naming the field, the value it got and what is allowed. Values are taken
as Python objects (configs are frozen, hashable and written to JSON): integers are
``int`` (``bool`` refused), numbers ``int`` or ``float`` and finite (NaN and inf refused),
flags ``bool`` (strings such as ``"yes"`` refused: text from the command line is
converted before it gets here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# Counters inside the compiled loops (env steps, updates, gradient steps, replay slots)
# are int32: a count that must fit one stays below 2**31.
INT32_LIMIT = 2**31
INT32_NOTE = "below 2**31: the training loop counts in int32"

# Piecewise-linear schedule points ``((update, value), ...)``, see
# :func:`rljax.exploration.piecewise_linear`.
Schedule = tuple[tuple[int, float], ...]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounds(low: Any, high: Any, low_open: bool = False, high_open: bool = False) -> str:
    """``" in [low, high]"``, ``" > low"``, ... ("" when unbounded)."""
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low!r}, {high!r}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low!r}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high!r}"
    return ""


def _fail(name: str, allowed: str, value: Any, optional: bool, note: str | None) -> None:
    none = " or None" if optional else ""
    why = f" ({note})" if note else ""
    raise ValueError(f"{name} must be {allowed}{none}{why}, got {value!r}")


def integer(name: str, value: Any, *, low: int | None = None, high: int | None = None,
            optional: bool = False, note: str | None = None) -> int | None:
    """An ``int`` in ``[low, high]`` (either bound may be left out); None too if
    ``optional``. ``note`` says why a bound is there (e.g. :data:`INT32_NOTE`)."""
    if optional and value is None:
        return None
    if not _is_int(value) or (low is not None and value < low) or (
            high is not None and value > high):
        _fail(name, "an integer" + _bounds(low, high), value, optional, note)
    return value


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, optional: bool = False,
           note: str | None = None) -> float | None:
    """A finite ``int`` or ``float`` in the interval from ``low`` to ``high`` (closed
    unless ``low_open`` / ``high_open``; either bound may be left out); None too if
    ``optional``."""
    if optional and value is None:
        return None
    ok = _is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        # Two finite bounds already rule out NaN and inf; say "finite" where they do not.
        kind = "a number" if low is not None and high is not None else "a finite number"
        _fail(name, kind + _bounds(low, high, low_open, high_open), value, optional, note)
    return value


def boolean(name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``True`` or ``False``; None too if ``optional``."""
    if optional and value is None:
        return None
    if not isinstance(value, bool):
        allowed = "true, false or None" if optional else "true or false"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return value


def sizes(name: str, value: Any, *, allow_empty: bool = False) -> tuple[int, ...]:
    """A tuple of positive ``int`` s, such as hidden layer sizes; ``()`` only if
    ``allow_empty``."""
    if not isinstance(value, tuple) or (not value and not allow_empty) or not all(
            _is_int(v) and v > 0 for v in value):
        what = "a tuple" if allow_empty else "a non-empty tuple"
        empty = " (possibly empty)" if allow_empty else ""
        raise ValueError(f"{name} must be {what} of positive integers{empty}, got {value!r}")
    return value


def choice(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """One of ``allowed``."""
    allowed = tuple(allowed)
    if not any(isinstance(value, type(a)) and value == a for a in allowed):
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, "
                         f"got {value!r}")
    return value


def schedule(name: str, value: Any, *, low: float | None = None,
             high: float | None = None) -> Schedule:
    """A piecewise-linear schedule ``((update, value), ...)``: a non-empty tuple of
    pairs, updates ``int`` s strictly increasing from 0 (and below 2**31, the loop's
    update counter being int32), values finite numbers in ``[low, high]`` (either bound
    may be left out)."""
    example = "e.g. ((0, 1.0), (25000, 0.1)), '0:1.0,25000:0.1' on the command line"
    if not isinstance(value, tuple) or not value or not all(
            isinstance(p, tuple) and len(p) == 2 for p in value):
        raise ValueError(f"{name} must be a schedule ((update, value), ...), a non-empty "
                         f"tuple of pairs ({example}), got {value!r}")
    updates = [u for u, _ in value]
    if not all(_is_int(u) for u in updates) or updates[0] != 0 or any(
            b <= a for a, b in zip(updates, updates[1:], strict=False)) or (
            updates[-1] >= INT32_LIMIT):
        raise ValueError(f"{name} must be a schedule whose updates are integers strictly "
                         f"increasing from 0 ({INT32_NOTE}; {example}), got {value!r}")
    for _, v in value:
        if not _is_number(v) or not math.isfinite(v) or (low is not None and v < low) or (
                high is not None and v > high):
            kind = "numbers" if low is not None and high is not None else "finite numbers"
            raise ValueError(f"{name} values must be {kind}{_bounds(low, high)}, "
                             f"got {value!r}")
    return value

"""Argument checks shared by the buffer factories (raised before anything is traced)."""

from __future__ import annotations

from typing import Any


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """Returns ``value`` as an int, or raises ``ValueError`` if it is not an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def float_in(
    name: str, value: Any, low: float, high: float = float("inf"), low_open: bool = False
) -> float:
    """Returns ``value`` as a float, or raises ``ValueError`` if it is outside the interval."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    bad_low = x <= low if low_open else x < low
    if bad_low or x > high or x != x:
        left = "(" if low_open else "["
        raise ValueError(f"{name} must be in {left}{low}, {high}], got {value!r}")
    return x

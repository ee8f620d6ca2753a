"""Run settings declared once, in the metadata of a :class:`~rljax.run.config.RunConfig`
field.

A field made with :func:`setting` carries everything the rest of the run layer needs to
know about it:

* with ``help``, it is an *option*: a command-line option of ``rljax train`` (flag, help
  text, metavar; the default is written into the help from the field's own default) and a
  keyword argument of :func:`rljax.train` and :func:`rljax.run.config.override`, whose
  values (command-line text, or Python values) are converted to the field's type;
* ``low`` / ``high`` / ``note``: the integer bounds :func:`check` holds it to (a ``bool``
  field is checked to be a bool);
* ``resumable``: a resume may change it (:func:`resumable`);
* ``learning=False``: it does not change what is learned (:func:`not_learning`), so
  ``rljax plot`` averages runs that differ only in such settings.

Adding a field with :func:`setting` adds all of these; no other module lists run settings.
:func:`coerce` converts command-line text (or a Python value) to a field's type, for run
settings and agent fields alike. This module imports nothing from the run layer: it reads
any dataclass's fields.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from rljax import validate

_KEY = "rljax.setting"


@dataclasses.dataclass(frozen=True)
class Option:
    """A run setting as users give it.

    Attributes:
        name: the field's name.
        keyword: keyword argument of ``rljax.train`` (usually ``name``).
        flag: command-line option of ``rljax train``.
        help: help text with the default filled in.
        metavar: the value's name in the help, or None.
        type: the field's type (``X | None`` where None is allowed).
        once: on the command line, refused when given twice, saying this (None: the last
            of several wins).
        switch: a bool given by its flag alone: the flag sets ``not default``.
        default: the field's default.
    """

    name: str
    keyword: str
    flag: str
    help: str
    metavar: str | None
    type: Any
    once: str | None
    switch: bool
    default: Any


def setting(default: Any = dataclasses.MISSING, *, help: str | None = None,  # noqa: A002
            flag: str | None = None, keyword: str | None = None, metavar: str | None = None,
            low: int | None = None, high: int | None = None, note: str | None = None,
            resumable: bool = False, learning: bool = True, once: str | None = None) -> Any:
    """A dataclass field declaring a run setting (see the module docstring); ``help`` may
    hold ``{default}``, replaced by the field's default."""
    metadata = {_KEY: {"help": help, "flag": flag, "keyword": keyword, "metavar": metavar,
                       "low": low, "high": high, "note": note, "resumable": resumable,
                       "learning": learning, "once": once}}
    return dataclasses.field(default=default, metadata=metadata)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _declared(cls: type) -> list[tuple[dataclasses.Field, dict]]:
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def options(cls: type) -> tuple[Option, ...]:
    """The settings of ``cls`` that users set by flag or keyword, in field order."""
    hints = _hints(cls)
    out = []
    for f, m in _declared(cls):
        if m["help"] is None:
            continue
        keyword = m["keyword"] or f.name
        out.append(Option(name=f.name, keyword=keyword,
                          flag=m["flag"] or "--" + keyword.replace("_", "-"),
                          help=m["help"].format(default=f.default), metavar=m["metavar"],
                          type=hints[f.name], once=m["once"],
                          switch=hints[f.name] is bool, default=f.default))
    return tuple(out)


def without_none(tp: Any) -> Any:
    """``X`` for ``X | None``; ``tp`` itself otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def resumable(cls: type) -> tuple[str, ...]:
    """Fields a resume may change (all others must match the checkpoint's run)."""
    return tuple(f.name for f, m in _declared(cls) if m["resumable"])


def not_learning(cls: type) -> tuple[str, ...]:
    """Fields that do not change what is learned (seeds, logging, evaluation, checkpoints)."""
    return tuple(f.name for f, m in _declared(cls) if not m["learning"])


def api_types(cls: type) -> dict[str, Any]:
    """``{keyword: type}`` of the options, as the Python API checks them."""
    return {o.keyword: o.type for o in options(cls)}


def check(obj: Any) -> None:
    """Holds each declared integer of ``obj`` to its bounds and each bool to True/False.

    Raises:
        ValueError: naming the first field out of bounds, its value and what is allowed.
    """
    hints = _hints(type(obj))
    for f, m in _declared(type(obj)):
        value = getattr(obj, f.name)
        if hints[f.name] is bool:
            validate.boolean(f.name, value)
        elif m["low"] is not None or m["high"] is not None:
            validate.integer(f.name, value, low=m["low"], high=m["high"], note=m["note"],
                             optional=type(None) in typing.get_args(hints[f.name]))


def describe(tp: Any) -> str:
    """A type as an error message names it (``int``, ``float | None``)."""
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(name: str, tp: Any, value: Any) -> Any:
    """Converts ``value`` (a string from the command line, or a Python value) to ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(name, arg, value)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(f"bad value {value!r} for {name}: expected {describe(tp)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"bad value {value!r} for {name}: expected true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            number = float(str(value).replace("_", ""))
        except ValueError:
            number = float("nan")
        if number.is_integer():
            return int(number)
        raise ValueError(f"bad value {value!r} for {name}: expected an integer")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return float(str(value).replace("_", ""))
        except ValueError:
            raise ValueError(f"bad value {value!r} for {name}: expected a number") from None
    if tp is str:
        return str(value)
    if origin is tuple and args and args[-1] is not Ellipsis:
        # A fixed-size tuple such as a schedule point tuple[int, float]: "0:1.0" or [0, 1.0].
        parts = value.strip("()[] ").split(":") if isinstance(value, str) else list(value)
        if len(parts) != len(args):
            raise ValueError(f"bad value {value!r} for {name}: expected "
                             f"{len(args)} values separated by ':'")
        return tuple(coerce(name, tp_i, p.strip() if isinstance(p, str) else p)
                     for tp_i, p in zip(args, parts, strict=True))
    if origin is tuple:
        item = args[0] if args else str
        if isinstance(value, str):
            parts = [p for p in value.strip("()[] ").split(",") if p.strip()]
        else:
            parts = list(value)
        return tuple(coerce(name, item, p.strip() if isinstance(p, str) else p) for p in parts)
    return value

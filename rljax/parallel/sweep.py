"""Hyperparameter sweeps in one compiled program.

``--sweep lr=1e-4,3e-4,1e-3`` runs one member per value (times the number of
seeds). All members share one program, so a swept hyperparameter must not change
any shape or the program's structure: inside the program the member's value is a
traced scalar in place of the config's Python number, and the agent is built
from that config. Learning rates, discounts, loss coefficients, exploration
scales and the like qualify. A field that sizes arrays or loops (batch size,
network widths, n-step length, num_envs, ...) or steers Python control flow is
refused with :class:`SweepError` before anything is compiled or allocated: the
fields marked as shapes in their metadata (:func:`rljax.records.shape_names`) at once,
any other one when the run is assembled, by tracing the program from abstract inputs
(:func:`refusing`). Fields are named canonically (``lr``, ``replay.alpha``). Values
that repeat (or that print the same, naming the same member folder) are refused too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rljax import records

_SEPARATE_RUNS = ("so its values cannot share one program; run one training per value "
                  "instead")


class SweepError(ValueError):
    """A hyperparameter that cannot take one value per member of one program."""


def check_sweep(config: Any, field: str, values: Sequence[float]) -> None:
    """Validates each value as the config's own validation does, and refuses
    fields that are not numbers or that size the environment pool.

    Raises:
        SweepError: a non-numeric or structural field, or fewer than two values.
        ValueError: a value the config rejects (naming the field and what is allowed).
    """
    try:
        field = records.canonical(type(config), field)
    except ValueError as e:
        raise SweepError(str(e)) from None
    if field == "loop.num_envs":
        raise SweepError(f"--sweep {field}: it sets the number of environments, a shape "
                         f"shared by all members, {_SEPARATE_RUNS}")
    if field in records.shape_names(config):
        raise SweepError(f"--sweep {field}: this hyperparameter sets a shape of the program "
                         f"(an array size or a loop length), {_SEPARATE_RUNS}")
    current = records.get(config, field)
    if isinstance(current, bool) or not isinstance(current, int | float):
        raise SweepError(f"--sweep {field}: only numeric hyperparameters can be swept, and "
                         f"{field} is {current!r}")
    if len(values) < 2:
        raise SweepError(f"--sweep {field}: give two values or more, got {list(values)!r}")
    for value in values:
        records.configure(config, {field: value})
    _check_distinct(field, values)


def _check_distinct(field: str, values: Sequence[float]) -> None:
    """Refuses repeated values, and values that print alike (``{value:g}`` names each
    member's folder, ``FIELD=VALUE_seed_S``)."""
    seen: dict[str, float] = {}
    for value in values:
        name = f"{value:g}"
        if name in seen:
            same = "repeats" if seen[name] == value else f"prints as {name} like {seen[name]!r}"
            raise SweepError(f"--sweep {field}: value {value!r} {same}; give each member a "
                             f"value of its own (distinct in 6 significant digits), got "
                             f"{list(values)!r}")
        seen[name] = value


def sweep_values(config: Any, field: str, values: Sequence[float], num_seeds: int
                 ) -> jax.Array:
    """``[len(values) * num_seeds]`` member values, value-major, in the field's dtype."""
    dtype = jnp.int32 if isinstance(records.get(config, field), int) else jnp.float32
    return jnp.repeat(jnp.asarray(values, dtype), num_seeds)


def sweep_builder(make_trainer: Callable[[Any], Any], config: Any, field: str
                  ) -> Callable[[Any], Any]:
    """``value -> Trainer``: the base config's trainer for None, else one built from
    the config with ``field`` replaced by the (traced) value."""

    def build(value):
        if value is None:
            return make_trainer(config)
        return make_trainer(records.with_value(config, field, value))

    return build


@contextlib.contextmanager
def refusing(field: str):
    """Turns a tracing failure caused by the swept hyperparameter (a traced value
    where a Python number is needed, or a check refusing a tracer) into a
    :class:`SweepError` naming it."""
    try:
        yield
    except (TypeError, jax.errors.UnexpectedTracerError, ValueError) as e:
        if isinstance(e, ValueError) and "Tracer" not in str(e):
            raise
        raise SweepError(
            f"--sweep {field}: this hyperparameter sets a shape or the structure of the "
            f"program (for example a batch or network size, a loop length, or a Python "
            f"branch), {_SEPARATE_RUNS}") from None


def checked_init(trainer: Any, field: str) -> Any:
    """The sweep trainer with an ``init`` that also traces (without compiling) one
    chunk, so that a shape-changing hyperparameter fails there with a clear error.
    (The env is reset once, as in a single run, so members reproduce single runs.)"""
    inner = trainer.init

    def init(key=None):
        with refusing(field):
            state = inner(key)
            jax.eval_shape(trainer.chunk, state)
        return state

    return trainer._replace(init=init)

"""The shape and rank checks of the loss and return functions, in one place.

Each check runs while a function is traced (shapes are static), so a wrong shape is
refused before anything compiles, in one line that names the function, the arguments and
what they should be: broadcasting ``[N]`` against ``[N, 1]`` would otherwise give an
``[N, N]`` loss without a word. Values are checked only where they are concrete
(:func:`concrete`); inside a compiled program they are not known until it runs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import Array, ArrayLike


def concrete(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array, or None when it is traced (not known until run time)."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def same_shape(fn: str, hint: str = "", **arrays: ArrayLike) -> list[Array]:
    """The ``arrays`` as jax arrays; ValueError unless they all have one shape (``hint``
    says which, e.g. ``" [A]"``)."""
    out = [jnp.asarray(x) for x in arrays.values()]
    shapes = {name: x.shape for name, x in zip(arrays, out, strict=True)}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"{fn}: {', '.join(shapes)} must have the same shape{hint}, got "
                         + ", ".join(f"{k} {v}" for k, v in shapes.items()))
    return out


def ranks(fn: str, **arrays_and_ranks: tuple[ArrayLike, int]) -> list[Array]:
    """The arrays of ``name=(array, rank)`` as jax arrays; ValueError unless each has its
    rank (the functions take one transition and are vmapped over a batch)."""
    out = []
    for name, (x, rank) in arrays_and_ranks.items():
        x = jnp.asarray(x)
        if x.ndim != rank:
            what = "a scalar" if rank == 0 else f"rank {rank}"
            raise ValueError(f"{fn}: {name} must be {what} (one transition; vmap over the "
                             f"batch), got shape {x.shape}")
        out.append(x)
    return out


def sequences(fn: str, dtype: jnp.dtype, **arrays: ArrayLike) -> list[Array]:
    """The arrays as ``dtype``; the first is the reference, a sequence (rank >= 1, time
    first), and every other must have its shape."""
    out = []
    shape = first = None
    for name, x in arrays.items():
        x = jnp.asarray(x)
        if shape is None:
            if x.ndim == 0:
                raise ValueError(f"{fn}: {name} must be a sequence [T], got a scalar")
            shape, first = x.shape, name
        elif x.shape != shape:
            raise ValueError(f"{fn}: {name} must have the shape of {first} {shape}, "
                             f"got {x.shape}")
        out.append(x.astype(dtype))
    return out

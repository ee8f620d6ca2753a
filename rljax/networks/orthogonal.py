"""Orthogonal weight initialization computed with XLA's own operations, not LAPACK.

``jax.nn.initializers.orthogonal`` (Saxe et al. 2014) orthogonalizes a Gaussian matrix with
``jnp.linalg.qr``, which on CPU is a LAPACK custom call (jaxlib's ``geqrf``/``orgqr`` on
scipy's OpenBLAS). Under ``vmap`` over members that call gets a batch of matrices, and
jaxlib then splits the batch over XLA's CPU thread pool and blocks the pool thread that
runs it until every piece is done. When as many such calls run at once as the pool has
threads (one per device of a process, on a pool as large as the CPUs), every pool thread
waits for pieces that no thread is left to run, and the program never finishes: the hang
of several members per device across processes (docs/scaling.md, "Why multi-member
inits used to hang"). The pieces that do run call OpenBLAS from several threads at
once, which hung too in a one-device program of four 128 x 128 matrices.

:func:`orthogonal` draws the same Gaussian matrix and takes the Q factor of its QR
decomposition by Householder reflections written as XLA operations (a ``lax.fori_loop``
of rank-one updates), with R's diagonal made positive as JAX's initializer does. So it is
the same distribution and, for the same key, the same matrix as JAX's to float rounding
(tests/networks/test_orthogonal.py checks it against NumPy's QR and JAX's initializer);
it vmaps and shards like the rest of a program and holds no thread of the pool.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import Array, PRNGKey


def householder_q(a: Array) -> Array:
    """The Q factor ``[m, n]`` of the QR decomposition of ``a [m, n]`` (``m >= n``) whose R
    has a non-negative diagonal: Householder reflections (Golub and Van Loan, "Matrix
    Computations", 5.2.1) as XLA operations."""
    m, n = a.shape
    if m < n:
        raise ValueError(f"householder_q needs rows >= columns, got shape {a.shape}")
    rows = jnp.arange(m)

    def reflect(j, carry):
        r, vs = carry
        x = jnp.where(rows >= j, r[:, j], 0.0)
        norm = jnp.linalg.norm(x)
        alpha = jnp.where(x[j] >= 0, -norm, norm)  # away from x[j]: no cancellation
        v = x - alpha * (rows == j)
        v_norm = jnp.linalg.norm(v)
        v = jnp.where(v_norm > 0, v / jnp.where(v_norm > 0, v_norm, 1.0), 0.0)
        r = r - 2.0 * jnp.outer(v, v @ r)
        return r, vs.at[j].set(v)

    r, vs = jax.lax.fori_loop(0, n, reflect, (a, jnp.zeros((n, m), a.dtype)))

    def apply(i, q):  # Q = H_0 ... H_{n-1} [I_n; 0], the last reflection first
        v = vs[n - 1 - i]
        return q - 2.0 * jnp.outer(v, v @ q)

    q = jax.lax.fori_loop(0, n, apply, jnp.eye(m, n, dtype=a.dtype))
    return q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(a.dtype)


def orthogonal(scale: float = 1.0, column_axis: int = -1,
               dtype: jnp.dtype = jnp.float32) -> Callable[..., Array]:
    """An initializer ``init(key, shape, dtype)`` of ``scale`` times a (semi-)orthogonal
    matrix, drawn as ``jax.nn.initializers.orthogonal(scale, column_axis)`` draws it
    (same Gaussian draw, same sign convention) without a LAPACK call."""

    def init(key: PRNGKey, shape, dtype=dtype) -> Array:
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs at least 2 dimensions, got {shape}")
        return _draw(key, shape, jnp.dtype(dtype), float(scale), int(column_axis))

    return init


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _draw(key: PRNGKey, shape: tuple[int, ...], dtype, scale: float, column_axis: int) -> Array:
    # One jitted program per shape: flax's ``apply`` traces every parameter's initializer
    # again (``jax.eval_shape``, to check the stored shape), so each forward pass in a
    # traced update would otherwise trace the reflections anew (0.7 s of a PPO chunk's
    # 1.7 s trace); jit's cache traces them once per shape.
    n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
    wide = n_rows < n_cols
    a = jax.random.normal(key, (n_cols, n_rows) if wide else (n_rows, n_cols), dtype)
    q = householder_q(a)
    if wide:
        q = q.T
    q = jnp.reshape(q, tuple(np.delete(shape, column_axis)) + (shape[column_axis],))
    return scale * jnp.moveaxis(q, -1, column_axis)

"""Comparing parameter trees leaf by leaf."""

import jax
import numpy as np


def assert_trees_close(a, b, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Every leaf of ``a`` equal to ``b``'s (exactly with the default tolerances)."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)

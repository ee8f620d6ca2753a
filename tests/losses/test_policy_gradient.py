"""Masked means and normalization against NumPy."""

import jax.numpy as jnp
import numpy as np

from rljax import losses


def _batch(seed=0, n=24):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).astype(np.float32)
    mask = rng.random(n) < 0.6
    mask[: n // 4] = False
    return x, mask


def test_masked_mean_and_normalize_match_numpy():
    x, mask = _batch()
    np.testing.assert_allclose(losses.masked_mean(jnp.asarray(x), jnp.asarray(mask)),
                               x[mask].mean(), rtol=1e-6)
    z = np.asarray(losses.normalize(jnp.asarray(x), jnp.asarray(mask)))
    np.testing.assert_allclose(z[mask], (x[mask] - x[mask].mean()) / x[mask].std(), rtol=1e-5)
    assert float(losses.masked_mean(jnp.ones(3), jnp.zeros(3, bool))) == 0.0


def test_normalize_with_a_std_floor_matches_numpy():
    x, mask = _batch(seed=1)
    for scale, floor in ((0.05, 1.0), (5.0, 1.0), (0.05, 0.0)):
        y = scale * x
        z = np.asarray(losses.normalize(jnp.asarray(y), jnp.asarray(mask), min_std=floor))
        centred = y[mask] - y[mask].mean()
        # Spread below the floor is centred, not scaled up; above it, standardized.
        np.testing.assert_allclose(z[mask], centred / max(y[mask].std(), floor), rtol=1e-5)

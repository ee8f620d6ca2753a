"""Masked means and normalization, whole-batch and split into shards along a named axis
(the data-parallel form), against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np

from rljax import losses

SHARDS = 4


def _batch(seed=0, n=24):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).astype(np.float32)
    mask = rng.random(n) < 0.6
    mask[: n // SHARDS] = False  # one shard entirely masked: counts differ across shards
    return x, mask


def test_masked_mean_and_normalize_match_numpy():
    x, mask = _batch()
    np.testing.assert_allclose(losses.masked_mean(jnp.asarray(x), jnp.asarray(mask)),
                               x[mask].mean(), rtol=1e-6)
    z = np.asarray(losses.normalize(jnp.asarray(x), jnp.asarray(mask)))
    np.testing.assert_allclose(z[mask], (x[mask] - x[mask].mean()) / x[mask].std(), rtol=1e-5)
    assert float(losses.masked_mean(jnp.ones(3), jnp.zeros(3, bool))) == 0.0


def test_sharded_means_and_their_gradients_sum_to_the_whole_batch():
    x, mask = _batch(1)
    w = jnp.float32(1.7)
    loss = lambda w, x, m: losses.masked_mean_share(jnp.square(w * x - 1.0), m, None)
    whole, whole_grad = jax.value_and_grad(loss)(w, jnp.asarray(x), jnp.asarray(mask))

    def shard(x, m):
        share = lambda w: losses.masked_mean_share(jnp.square(w * x - 1.0), m, "data")
        value, grad = jax.value_and_grad(share)(w)
        return (jax.lax.psum(value, "data"), jax.lax.psum(grad, "data"),
                losses.masked_mean(x, m, "data"), losses.normalize(x, m, axis_name="data"))

    xs, ms = jnp.asarray(x).reshape(SHARDS, -1), jnp.asarray(mask).reshape(SHARDS, -1)
    value, grad, mean, z = jax.vmap(shard, axis_name="data")(xs, ms)
    np.testing.assert_allclose(value, whole, rtol=1e-6)
    np.testing.assert_allclose(grad, whole_grad, rtol=1e-5)
    np.testing.assert_allclose(mean, x[mask].mean(), rtol=1e-6)
    expected = (x - x[mask].mean()) / x[mask].std()
    np.testing.assert_allclose(np.asarray(z).reshape(-1)[mask], expected[mask], rtol=1e-5)

"""Shuffled minibatches: shapes, every sample exactly once per epoch, key-dependent order."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.minibatches import shuffled_minibatches

T, B = 6, 4


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    extra: dict


def _batch():
    ids = jnp.arange(T * B).reshape(T, B)
    return Batch(obs=jnp.stack([ids, -ids], axis=-1).astype(jnp.float32)[..., None],
                 action=ids, extra={"valid": ids % 3 != 0})


_jit = jax.jit(shuffled_minibatches, static_argnums=2)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("num_minibatches", [1, 4, 6, 24])
def test_every_sample_once_with_its_fields(jit, num_minibatches):
    out = (_jit if jit else shuffled_minibatches)(jax.random.key(0), _batch(), num_minibatches)
    size = T * B // num_minibatches
    assert out.obs.shape == (num_minibatches, size, 2, 1)
    assert out.action.shape == (num_minibatches, size)
    assert out.extra["valid"].shape == (num_minibatches, size)
    ids = np.asarray(out.action).reshape(-1)
    np.testing.assert_array_equal(np.sort(ids), np.arange(T * B))
    # One permutation for all leaves: each sample's fields stay together.
    np.testing.assert_array_equal(out.obs[..., 0, 0], out.action.astype(np.float32))
    np.testing.assert_array_equal(out.obs[..., 1, 0], -out.action.astype(np.float32))
    np.testing.assert_array_equal(out.extra["valid"], out.action % 3 != 0)


def test_flattening_follows_the_t_b_layout():
    # Sample (t, b) is ids[t, b] = t * B + b: the flattened order is row-major [T, B].
    x = jnp.arange(T * B * 2).reshape(T, B, 2)
    out = shuffled_minibatches(jax.random.key(5), {"ids": x[..., 0] // 2, "x": x}, 3)
    np.testing.assert_array_equal(out["x"][..., 0], 2 * out["ids"])
    np.testing.assert_array_equal(out["x"][..., 1], 2 * out["ids"] + 1)


def test_the_order_depends_on_the_key_and_is_shuffled():
    orders = [np.asarray(shuffled_minibatches(jax.random.key(k), _batch(), 4).action).ravel()
              for k in range(5)]
    assert len({tuple(o) for o in orders}) == 5
    assert all(not np.array_equal(o, np.arange(T * B)) for o in orders)
    again = shuffled_minibatches(jax.random.key(0), _batch(), 4).action
    np.testing.assert_array_equal(np.asarray(again).ravel(), orders[0])


def test_refuses_a_batch_that_does_not_split_evenly():
    with pytest.raises(ValueError, match=r"T \* B = 6 \* 4 = 24 .* num_minibatches = 5"):
        shuffled_minibatches(jax.random.key(0), _batch(), 5)


@pytest.mark.parametrize("n", [0, -2, 2.0, True])
def test_refuses_a_bad_minibatch_count(n):
    with pytest.raises(ValueError, match="num_minibatches must be a positive int"):
        shuffled_minibatches(jax.random.key(0), _batch(), n)


def test_accepts_numpy_counts_and_leaves():
    out = shuffled_minibatches(jax.random.key(0), _batch(), np.int64(8))
    assert out.action.shape == (8, 3)
    ids = np.arange(T * B).reshape(T, B)
    out = shuffled_minibatches(jax.random.key(0), {"ids": ids}, 2)
    np.testing.assert_array_equal(np.sort(np.asarray(out["ids"]).ravel()), np.arange(T * B))


@pytest.mark.parametrize("tree", [
    {"a": jnp.zeros((T, B)), "b": jnp.zeros((T + 1, B))},
    {"a": jnp.zeros((T,))},
    {},
])
def test_refuses_leaves_without_a_common_t_b(tree):
    with pytest.raises(ValueError, match="every leaf must start|no arrays"):
        shuffled_minibatches(jax.random.key(0), tree, 2)

"""conv2d: values and gradients of lax.conv, nn.Conv's parameters, canonical XLA:CPU form."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.networks.conv import Conv, conv2d

DN = ("NHWC", "HWIO", "NHWC")


def _reference(x, kernel, stride):
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                        dimension_numbers=DN)


@pytest.mark.parametrize("shape,kernel,stride,jit", [
    ((2, 84, 84, 4), (8, 8, 4, 8), 4, True),    # Nature CNN layer 1
    ((3, 20, 20, 5), (4, 4, 5, 6), 2, True),    # layer 2
    ((2, 9, 9, 3), (3, 3, 3, 4), 1, False),     # layer 3
    ((2, 11, 13, 3), (3, 2, 3, 4), 2, True),    # sizes that strides do not divide
    ((1, 7, 7, 2), (7, 7, 2, 3), 3, False),     # kernel covers the input
])
def test_values_and_gradients_match_lax_conv(shape, kernel, stride, jit):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=shape), jnp.float32)
    k = jnp.asarray(rng.normal(size=kernel), jnp.float32)
    out_shape = _reference(x, k, stride).shape
    cotangent = jnp.asarray(rng.normal(size=out_shape), jnp.float32)

    def loss(fn, x, k):
        return jnp.sum(fn(x, k, stride) * cotangent)

    grad = lambda fn: jax.grad(lambda x, k: loss(fn, x, k), argnums=(0, 1))
    ours, ref = grad(conv2d), grad(_reference)
    if jit:
        ours, ref = jax.jit(ours), jax.jit(ref)
    np.testing.assert_allclose(conv2d(x, k, stride), _reference(x, k, stride), rtol=1e-5,
                               atol=1e-5)
    for a, b in zip(ours(x, k), ref(x, k), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_conv_module_has_nn_conv_parameters():
    x = jnp.ones((1, 12, 12, 3))
    ours = Conv(5, (4, 4), 2).init(jax.random.key(0), x)
    theirs = nn.Conv(5, (4, 4), (2, 2), padding="VALID").init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, ours) == jax.tree.map(jnp.shape, theirs)
    np.testing.assert_allclose(Conv(5, (4, 4), 2).apply(theirs, x),
                               nn.Conv(5, (4, 4), (2, 2), padding="VALID").apply(theirs, x),
                               rtol=1e-5, atol=1e-5)


def test_gradients_in_a_rolled_loop_use_only_canonical_convolutions():
    """Inside a rolled scan every convolution of the gradient step must be NHWC x HWIO ->
    NHWC, the form XLA:CPU runs through its fast kernel (others run ~10x slower)."""
    x = jnp.ones((4, 20, 20, 3))

    def step(k, _):
        g = jax.grad(lambda k: jnp.sum(conv2d(x, k, 4) ** 2))(k)
        return k - 0.1 * g, None

    k0 = jnp.ones((8, 8, 3, 5))
    text = jax.jit(lambda k: jax.lax.scan(step, k, None, length=3)[0]).lower(k0).compile(
    ).as_text()
    labels = re.findall(r"convolution\(.*?dim_labels=([\w>-]+)", text)
    assert labels, "no convolution found in the compiled program"
    assert set(labels) == {"b01f_01io->b01f"}, labels

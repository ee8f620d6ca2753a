"""conv2d and conv2d_matmul: values and gradients of lax.conv, nn.Conv's parameters,
canonical XLA:CPU form (conv2d), no convolution op at all (conv2d_matmul)."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.networks.conv import Conv, conv2d, conv2d_matmul
from rljax.networks.core import NatureCNN

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


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="checks XLA:CPU's compiled convolutions; GPUs lower them to cuDNN calls")
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


# (input shape, kernel shape, stride): the Nature CNN's three layers at batch 2, a
# divisible kernel on sizes the stride does not divide (cropped), two fallbacks to conv2d.
MATMUL_CASES = [
    ((2, 84, 84, 4), (8, 8, 4, 32), 4),
    ((2, 20, 20, 32), (4, 4, 32, 64), 2),
    ((2, 9, 9, 64), (3, 3, 64, 64), 1),
    ((2, 11, 14, 3), (4, 2, 3, 5), 2),
    ((2, 11, 13, 3), (3, 2, 3, 4), 2),   # kh % stride != 0: falls back
    ((1, 7, 7, 2), (7, 7, 2, 3), 3),     # kernel covers the input, 7 % 3 != 0: falls back
]
MATMUL_IDS = ["nature1", "nature2", "nature3", "cropped", "fallback", "fallback_cover"]


def _falls_back(kernel, stride):
    return kernel[0] % stride != 0 or kernel[1] % stride != 0


def _case(shape, kernel, stride, seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=shape), jnp.float32)
    k = jnp.asarray(rng.normal(size=kernel), jnp.float32)
    cotangent = jnp.asarray(rng.normal(size=_reference(x, k, stride).shape), jnp.float32)
    return x, k, cotangent


def _grads(fn, stride):
    """(x, k, cotangent) -> the gradients of <fn(x, k), cotangent> w.r.t. x and k."""
    def loss(x, k, cotangent):
        return jnp.sum(fn(x, k, stride) * cotangent)
    return jax.grad(loss, argnums=(0, 1))


def _assert_close(a, b, rtol):
    """Elementwise close up to ``rtol`` of the largest reference entry (sums of hundreds
    of products in another order: float32 rounding scales with the sums' size)."""
    scale = float(jnp.max(jnp.abs(b)))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("shape,kernel,stride", MATMUL_CASES, ids=MATMUL_IDS)
def test_matmul_values_and_gradients_match_lax_conv(shape, kernel, stride):
    x, k, cotangent = _case(shape, kernel, stride)
    out, ref = jax.jit(conv2d_matmul, static_argnums=2)(x, k, stride), _reference(x, k, stride)
    assert out.shape == ref.shape
    _assert_close(out, ref, 1e-5)
    ours = jax.jit(_grads(conv2d_matmul, stride))(x, k, cotangent)
    theirs = jax.jit(_grads(_reference, stride))(x, k, cotangent)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        _assert_close(a, b, 1e-4)


@pytest.mark.parametrize("shape,kernel,stride", [MATMUL_CASES[i] for i in (0, 4)],
                         ids=[MATMUL_IDS[i] for i in (0, 4)])
def test_matmul_gradients_in_a_rolled_scan(shape, kernel, stride):
    """Three different (x, cotangent) pairs through a rolled scan give the per-pair
    gradients of lax.conv."""
    cases = [_case(shape, kernel, stride, seed) for seed in range(3)]
    xs = jnp.stack([c[0] for c in cases])
    cts = jnp.stack([c[2] for c in cases])
    k = cases[0][1]
    grad_ours, grad_ref = _grads(conv2d_matmul, stride), _grads(_reference, stride)

    def body(k, inputs):
        x, ct = inputs
        dx, dk = grad_ours(x, k, ct)
        return k, (dx, dk, jnp.sum(conv2d_matmul(x, k, stride) * ct))

    _, (dxs, dks, losses) = jax.jit(lambda k: jax.lax.scan(body, k, (xs, cts)))(k)
    for i, (x, _, ct) in enumerate(cases):
        dx, dk = grad_ref(x, k, ct)
        _assert_close(dxs[i], dx, 1e-4)
        _assert_close(dks[i], dk, 1e-4)
        np.testing.assert_allclose(losses[i], jnp.sum(_reference(x, k, stride) * ct),
                                   rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,kernel,stride", MATMUL_CASES, ids=MATMUL_IDS)
def test_matmul_gradient_has_no_convolution(shape, kernel, stride):
    """No convolution op in the gradient's jaxpr, except in the fallback to conv2d."""
    x, k, cotangent = _case(shape, kernel, stride)
    text = str(jax.make_jaxpr(_grads(conv2d_matmul, stride))(x, k, cotangent))
    assert ("conv_general_dilated" in text) == _falls_back(kernel, stride)
    assert ("dot_general" in text) != _falls_back(kernel, stride)


def test_conv_module_methods_share_parameters_and_values():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 12, 12, 3)), jnp.float32)
    params = Conv(5, (4, 4), 2).init(jax.random.key(0), x)
    xla_params = Conv(5, (4, 4), 2, method="xla").init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, xla_params)
    jax.tree.map(np.testing.assert_array_equal, params, xla_params)
    _assert_close(Conv(5, (4, 4), 2).apply(params, x),
                  Conv(5, (4, 4), 2, method="xla").apply(params, x), 1e-5)
    with pytest.raises(ValueError, match="unknown conv method"):
        Conv(5, (4, 4), 2, method="fft").init(jax.random.key(0), x)


def test_nature_cnn_methods_share_parameters_and_values():
    """An "xla" checkpoint loads into the "matmul" torso and computes the same features."""
    obs = jnp.asarray(np.random.default_rng(2).integers(0, 256, size=(2, 4, 84, 84)), jnp.uint8)
    matmul, xla = NatureCNN(features=16), NatureCNN(features=16, conv_method="xla")
    # Shapes by tracing only, values from numpy: compiling the initializers' random
    # draws for each shape takes seconds on CPU.
    shapes = jax.eval_shape(xla.init, jax.random.key(0), obs)
    assert jax.tree.map(jnp.shape, jax.eval_shape(matmul.init, jax.random.key(0), obs)) == \
        jax.tree.map(jnp.shape, shapes)
    rng = np.random.default_rng(3)
    params = jax.tree.map(lambda leaf: jnp.asarray(0.05 * rng.normal(size=leaf.shape),
                                                   jnp.float32), shapes)
    _assert_close(jax.jit(matmul.apply)(params, obs), jax.jit(xla.apply)(params, obs), 1e-5)

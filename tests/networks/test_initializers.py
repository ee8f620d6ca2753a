"""Initializers traced once per shape: same bits as the initializer itself, and flax's
per-apply shape check no longer traces the draw again."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax.networks import initializers
from rljax.networks.orthogonal import orthogonal


def test_same_bits_as_the_wrapped_initializer():
    key = jax.random.key(3)
    for plain, wrapped in [(nn.initializers.lecun_normal(), initializers.LECUN_NORMAL),
                           (nn.initializers.he_normal(), initializers.HE_NORMAL)]:
        for shape in [(4, 64), (3, 3, 8, 16)]:
            np.testing.assert_array_equal(np.asarray(wrapped(key, shape, jnp.float32)),
                                          np.asarray(plain(key, shape, jnp.float32)))


def test_the_draw_is_traced_once_per_shape_across_applies():
    traces = []

    def counted(key, shape, dtype=jnp.float32):
        traces.append(shape)
        return jax.random.normal(key, shape, dtype)

    once = initializers.traced_once(counted)
    net = nn.Dense(5, kernel_init=once)
    params = net.init(jax.random.key(0), jnp.ones((2, 3)))
    for _ in range(3):  # each apply checks the kernel's shape by tracing its initializer
        jax.jit(net.apply)(params, jnp.ones((2, 3)))
        jax.jit(net.apply)(params, jnp.ones((4, 3)))
    assert traces == [(3, 5)], traces
    plain = nn.Dense(5, kernel_init=counted)
    traces.clear()
    for _ in range(3):
        jax.jit(plain.apply)(params, jnp.ones((2, 3)))
    assert len(traces) == 3  # without it: one trace per apply


def test_orthogonal_is_traced_once_per_shape(monkeypatch):
    from rljax.networks import orthogonal as module

    traces, householder_q = [], module.householder_q
    monkeypatch.setattr(module, "householder_q",
                        lambda a: traces.append(a.shape) or householder_q(a))
    for k in range(4):  # other keys, other initializer objects of the same gain
        jax.eval_shape(lambda k=k: orthogonal(2.0)(jax.random.key(k), (11, 3)))
    assert traces == [(11, 3)], traces
    jax.eval_shape(lambda: orthogonal(2.0)(jax.random.key(0), (11, 4)))
    assert traces == [(11, 3), (11, 4)], traces

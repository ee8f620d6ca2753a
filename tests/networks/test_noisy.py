"""NoisyDense: factorized noise, noise sources, init, gradients, against NumPy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.networks.noisy import NoisyDense, noise_like, scale_noise

# Every call uses inputs [FAN_IN, FAN_IN] (the identity recovers the noise matrix) so
# that each jitted function compiles once.
FAN_IN, FAN_OUT = 256, 8
LAYER = NoisyDense(FAN_OUT)
VARIABLES = jax.jit(LAYER.init)(jax.random.key(0), jnp.zeros((FAN_IN, FAN_IN)))


@jax.jit
def noisy(variables, x, key):
    return LAYER.apply(variables, x, rngs={"noise": key})


@jax.jit
def explicit(variables, x, eps_in, eps_out):
    return LAYER.apply({**variables, "noise": {"eps_in": eps_in, "eps_out": eps_out}}, x)


@jax.jit
def mean_only(variables, x):
    return LAYER.apply(variables, x, deterministic=True)


def f(e):
    return np.sign(e) * np.sqrt(np.abs(e))


def unit_sigma(variables):
    """Kernel sigma 1, bias sigma 0: the output perturbation is ``x @ eps_w``."""
    p = dict(variables["params"])
    p["kernel_sigma"] = np.ones(p["kernel_sigma"].shape, np.float32)
    p["bias_sigma"] = np.zeros(p["bias_sigma"].shape, np.float32)
    return {"params": p}


def noise_matrix(variables, key):
    """Recovers ``eps_w [fan_in, fan_out]`` and ``eps_b [fan_out]`` from outputs."""
    p = variables["params"]
    eye = np.eye(FAN_IN, dtype=np.float32)
    w = np.asarray(noisy(unit_sigma(variables), eye, key)) - np.asarray(
        mean_only(variables, eye))
    only_bias = {"params": {**p, "kernel_sigma": np.zeros(p["kernel_sigma"].shape, np.float32),
                            "bias_sigma": np.ones(p["bias_sigma"].shape, np.float32)}}
    zeros = np.zeros((FAN_IN, FAN_IN), np.float32)
    b = (np.asarray(noisy(only_bias, zeros, key)) - np.asarray(mean_only(variables, zeros)))[0]
    return w, b


def inputs(seed):
    return np.random.default_rng(seed).normal(size=(FAN_IN, FAN_IN)).astype(np.float32)


def test_init_distribution():
    p = VARIABLES["params"]
    bound = 1 / np.sqrt(FAN_IN)
    for name in ("kernel_mu", "bias_mu"):
        assert np.all(np.abs(np.asarray(p[name])) <= bound)
    # U(-b, b) has variance b^2 / 3; over 2,048 draws the sample variance has a
    # relative standard error of sqrt(0.8 / 2048) = 2%: 10% is 5 standard errors.
    np.testing.assert_allclose(np.asarray(p["kernel_mu"]).var(), bound**2 / 3, rtol=0.1)
    np.testing.assert_allclose(p["kernel_sigma"], np.full((FAN_IN, FAN_OUT), 0.5 * bound),
                               rtol=1e-6)
    np.testing.assert_allclose(p["bias_sigma"], np.full((FAN_OUT,), 0.5 * bound), rtol=1e-6)


def test_weight_noise_is_factorized_rank_one():
    w, b = noise_matrix(VARIABLES, jax.random.key(3))
    singular = np.linalg.svd(w, compute_uv=False)
    assert singular[0] > 0.1
    assert singular[1] < 1e-5 * singular[0]
    # Columns scale with the bias noise f(eps_out): eps_w = f(eps_in) f(eps_out)^T.
    row_factor = w / b[None, :]
    np.testing.assert_allclose(row_factor, np.repeat(row_factor[:, :1], FAN_OUT, 1),
                               rtol=1e-4)


def test_explicit_noise_matches_numpy():
    rng = np.random.default_rng(0)
    x = inputs(0)
    eps_in = rng.normal(size=FAN_IN).astype(np.float32)
    eps_out = rng.normal(size=FAN_OUT).astype(np.float32)
    p = {k: np.asarray(v) for k, v in VARIABLES["params"].items()}
    eps_w = np.outer(f(eps_in), f(eps_out))
    expected = x @ (p["kernel_mu"] + p["kernel_sigma"] * eps_w) + p["bias_mu"] + (
        p["bias_sigma"] * f(eps_out))
    np.testing.assert_allclose(explicit(VARIABLES, x, eps_in, eps_out), expected, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(scale_noise(jnp.asarray(eps_in)), f(eps_in), rtol=1e-6)


def test_per_row_explicit_noise_broadcasts():
    rng = np.random.default_rng(1)
    x = inputs(1)
    eps_in = rng.normal(size=(FAN_IN, FAN_IN)).astype(np.float32)
    eps_out = rng.normal(size=(FAN_IN, FAN_OUT)).astype(np.float32)
    batched = np.asarray(explicit(VARIABLES, x, eps_in, eps_out))
    for i in (0, 7, FAN_IN - 1):
        row = explicit(VARIABLES, x, eps_in[i], eps_out[i])[i]
        np.testing.assert_allclose(batched[i], row, rtol=1e-4, atol=1e-5)


def test_noise_reproducible_from_key_and_keys_differ():
    x = np.ones((FAN_IN, FAN_IN), np.float32)
    a = noisy(VARIABLES, x, jax.random.key(7))
    np.testing.assert_array_equal(a, noisy(VARIABLES, x, jax.random.key(7)))
    assert not np.allclose(a, noisy(VARIABLES, x, jax.random.key(8)))
    # One draw for the whole batch: identical rows stay identical.
    np.testing.assert_array_equal(a[0], a[1])


def test_deterministic_is_the_mean_linear_map():
    x = inputs(2)
    p = VARIABLES["params"]
    expected = x @ np.asarray(p["kernel_mu"]) + np.asarray(p["bias_mu"])
    np.testing.assert_allclose(mean_only(VARIABLES, x), expected, rtol=1e-4, atol=1e-5)
    # The attribute works too, and a key is then ignored.
    frozen = jax.jit(NoisyDense(FAN_OUT, deterministic=True).apply)
    np.testing.assert_allclose(frozen(VARIABLES, x, rngs={"noise": jax.random.key(0)}),
                               expected, rtol=1e-4, atol=1e-5)
    # Zero explicit noise is the mean map as well.
    zeros = noise_like(VARIABLES)
    np.testing.assert_allclose(explicit(VARIABLES, x, zeros["eps_in"], zeros["eps_out"]),
                               expected, rtol=1e-4, atol=1e-5)


def test_gradient_reaches_sigma():
    x = np.ones((FAN_IN, FAN_IN), np.float32)

    def loss(params, key):
        return jnp.sum(LAYER.apply({"params": params}, x, rngs={"noise": key}) ** 2)

    grads = jax.jit(jax.grad(loss))(VARIABLES["params"], jax.random.key(4))
    assert np.all(np.abs(np.asarray(grads["kernel_sigma"])) > 0)
    assert np.all(np.abs(np.asarray(grads["bias_sigma"])) > 0)
    assert np.all(np.abs(np.asarray(grads["kernel_mu"])) > 0)


def test_missing_or_bad_noise_raises():
    x = jax.ShapeDtypeStruct((1, FAN_IN), jnp.float32)  # errors come at trace time
    with pytest.raises(ValueError, match="rngs=\\{'noise': key\\}"):
        jax.eval_shape(LAYER.apply, VARIABLES, x)
    with pytest.raises(ValueError, match=f"eps_in \\[..., {FAN_IN}\\]"):
        jax.eval_shape(LAYER.apply, {**VARIABLES, "noise": {"eps_in": jnp.zeros(3),
                                                            "eps_out": jnp.zeros(FAN_OUT)}}, x)
    with pytest.raises(ValueError, match="sigma0 must be >= 0, got -1.0"):
        jax.eval_shape(NoisyDense(3, sigma0=-1.0).init, jax.random.key(0), x)


def test_noise_like_mirrors_noisy_layers():
    tree = noise_like({"params": {"a": VARIABLES["params"], "dense": {"kernel": jnp.zeros(2)}}},
                      batch_shape=(6,))
    assert jax.tree.map(jnp.shape, tree) == {"a": {"eps_in": (6, FAN_IN),
                                                   "eps_out": (6, FAN_OUT)}}
    assert noise_like({"params": {"dense": {"kernel": jnp.zeros(2)}}}) == {}
    with pytest.raises(ValueError, match="params"):
        noise_like({"batch_stats": {}})

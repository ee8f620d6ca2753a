"""Q-networks (linear, dueling, noisy) and DDPG actor / critic against NumPy forwards."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import losses
from rljax.networks import make_ddpg_actor, make_ddpg_critic, make_q_network, noise_like

OBS_DIM, A, B = 6, 3, 8
RNG = np.random.default_rng(0)
OBS = RNG.normal(size=(B, OBS_DIM)).astype(np.float32) * 2 + 1
TOL = dict(rtol=1e-4, atol=1e-5)


def random_variables(init, *example):
    """Variables of ``init``'s structure filled with N(0, 0.3^2) draws.

    Tracing ``init`` with eval_shape checks its logic without compiling it: compiling the
    orthogonal initializers (a QR decomposition) takes seconds on CPU.
    """
    shapes = jax.eval_shape(init, jax.random.key(0), *example)
    return jax.tree.map(lambda s: (0.3 * RNG.normal(size=s.shape)).astype(s.dtype), shapes)


def np_dense(p, x):
    return x @ p["kernel"] + p["bias"]


def np_noisy(p, x, eps=None):
    """NoisyDense reference; ``eps = (eps_in, eps_out)`` before ``f``, None: mean only."""
    y = x @ p["kernel_mu"] + p["bias_mu"]
    if eps is None:
        return y
    f = lambda e: np.sign(e) * np.sqrt(np.abs(e))
    w = p["kernel_mu"] + p["kernel_sigma"] * np.outer(f(eps[0]), f(eps[1]))
    return x @ w + p["bias_mu"] + p["bias_sigma"] * f(eps[1])


def np_torso(p, x):
    mlp = p["torso"]["MLP_0"]
    for i in range(len(mlp)):
        x = np.maximum(np_dense(mlp[f"Dense_{i}"], x), 0.0)
    return x


# --- Q-networks ---------------------------------------------------------------------


@functools.cache
def q_net(**kwargs):
    net = make_q_network((OBS_DIM,), A, (16, 16), **kwargs)
    return net, random_variables(net.init, OBS), jax.jit(net.apply)


def test_linear_head_matches_numpy():
    net, v, apply = q_net()
    p = v["params"]
    expected = np_dense(p["head"]["q_out"], np_torso(p, OBS))
    np.testing.assert_allclose(apply(v, OBS), expected, **TOL)
    # A key is accepted and ignored without noisy layers.
    np.testing.assert_allclose(apply(v, OBS, noise_key=jax.random.key(0)), expected, **TOL)


def test_dueling_head_matches_numpy():
    net, v, apply = q_net(dueling=True, head_hidden_sizes=(8,))
    p, h = v["params"], v["params"]["head"]
    x = np_torso(p, OBS)
    value = np_dense(h["value_out"], np.maximum(np_dense(h["value_0"], x), 0.0))
    adv = np_dense(h["advantage_out"], np.maximum(np_dense(h["advantage_0"], x), 0.0))
    q = np.asarray(apply(v, OBS))
    np.testing.assert_allclose(q, value + adv - adv.mean(-1, keepdims=True), **TOL)
    np.testing.assert_allclose(q.mean(-1), value[:, 0], **TOL)  # Wang et al.'s identifiability


def test_noisy_dueling_head():
    net, v, apply = q_net(dueling=True, noisy=True)
    p, h = v["params"], v["params"]["head"]
    x = np_torso(p, OBS)

    def reference(eps=None):
        eps = eps or {}
        value = np_noisy(h["value_out"], x, eps.get("value_out"))
        adv = np_noisy(h["advantage_out"], x, eps.get("advantage_out"))
        return value + adv - adv.mean(-1, keepdims=True)

    np.testing.assert_allclose(apply(v, OBS), reference(), **TOL)  # no key: noise-free
    a = np.asarray(apply(v, OBS, noise_key=jax.random.key(2)))
    np.testing.assert_array_equal(a, apply(v, OBS, noise_key=jax.random.key(2)))
    assert not np.allclose(a, apply(v, OBS, noise_key=jax.random.key(3)))
    assert not np.allclose(a, reference())

    tree = noise_like(v)
    assert jax.tree.map(jnp.shape, tree) == {"head": {
        "value_out": {"eps_in": (16,), "eps_out": (1,)},
        "advantage_out": {"eps_in": (16,), "eps_out": (A,)}}}
    eps = {name: (RNG.normal(size=16).astype(np.float32),
                  RNG.normal(size=n).astype(np.float32))
           for name, n in (("value_out", 1), ("advantage_out", A))}
    tree = {"head": {k: {"eps_in": e[0], "eps_out": e[1]} for k, e in eps.items()}}
    np.testing.assert_allclose(apply(v, OBS, noise=tree), reference(eps), **TOL)


def test_image_observations_use_the_nature_cnn():
    net = make_q_network((4, 84, 84), 6, dueling=True, noisy=True, head_hidden_sizes=(32,))
    obs = jax.ShapeDtypeStruct((2, 4, 84, 84), jnp.uint8)
    variables = jax.eval_shape(net.init, jax.random.key(0), obs)  # shapes only: no compile
    assert "NatureCNN_0" in variables["params"]["torso"]
    assert variables["params"]["head"]["advantage_0"]["kernel_sigma"].shape == (512, 32)
    out = jax.eval_shape(functools.partial(net.apply, noise_key=jax.random.key(1)), variables,
                         obs)
    assert out.shape == (2, 6)


def test_both_conv_methods_compute_the_same_q_values_from_the_same_parameters():
    obs = jnp.asarray(np.random.default_rng(0).integers(0, 255, (3, 4, 84, 84)), jnp.uint8)
    nets = {m: make_q_network((4, 84, 84), 4, dueling=True, conv_method=m)
            for m in ("matmul", "xla")}
    # Shapes by tracing only, values from numpy (fan-in scaled): the initializers'
    # orthogonalization of the 3136 x 512 kernel takes seconds on CPU.
    shapes = jax.eval_shape(nets["matmul"].init, jax.random.key(0), obs)
    assert jax.tree.map(jnp.shape, jax.eval_shape(nets["xla"].init, jax.random.key(0), obs)) \
        == jax.tree.map(jnp.shape, shapes)
    rng = np.random.default_rng(1)
    variables = jax.tree.map(lambda leaf: jnp.asarray(
        rng.normal(size=leaf.shape) / np.sqrt(np.prod(leaf.shape[:-1], initial=1)),
        jnp.float32), shapes)
    np.testing.assert_allclose(nets["xla"].apply(variables, obs),
                               nets["matmul"].apply(variables, obs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(obs_shape=(4, 4)), "obs_shape must be 1-D"),
    (dict(num_actions=0), "num_actions must be a positive integer, got 0"),
    (dict(hidden_sizes=(8, -1)), "hidden_sizes"),
    (dict(activation="softsign"), "unknown activation 'softsign'"),
    (dict(sigma0=-0.5), "sigma0 must be a finite number >= 0, got -0.5"),
    (dict(dueling=1), "dueling must be True or False"),
    (dict(conv_method="fft"), "conv_method must be one of matmul, xla, got 'fft'"),
])
def test_q_network_rejects_bad_arguments(kwargs, match):
    args = dict(obs_shape=(OBS_DIM,), num_actions=A) | kwargs
    with pytest.raises(ValueError, match=match):
        make_q_network(**args)


# --- DDPG ---------------------------------------------------------------------------

LOW = np.array([-1.0, -2.0], np.float32)
HIGH = np.array([1.0, 0.5], np.float32)
SLOPE, MOMENTUM, BN_EPS = 0.05, 0.9, 1e-5


def leaky(x):
    return np.where(x >= 0, x, SLOPE * x)


def np_bn(p, stats, x, train):
    mean, var = (x.mean(0), x.var(0)) if train else (stats["mean"], stats["var"])
    return (x - mean) / np.sqrt(var + BN_EPS) * p["scale"] + p["bias"]


def np_actor(v, obs, train=False, eps=None):
    p, eps = v["params"], eps or {}
    x = np_bn(p["input_norm"], v.get("batch_stats", {}).get("input_norm"), obs, train)
    layer = np_noisy if "kernel_mu" in p["hidden_0"] else (lambda q, x, e=None: np_dense(q, x))
    for name in ("hidden_0", "hidden_1"):
        x = leaky(layer(p[name], x, eps.get(name)))
    z = layer(p["out"], x, eps.get("out"))
    return (HIGH + LOW) / 2 + (HIGH - LOW) / 2 * np.tanh(z)


def np_critic(v, obs, action, train=False):
    p = v["params"]
    x = np_bn(p["input_norm"], v["batch_stats"]["input_norm"], obs, train)
    x = np.concatenate([x, action], -1)
    for name in ("hidden_0", "hidden_1"):
        x = leaky(np_dense(p[name], x))
    return np_dense(p["out"], x)[:, 0]


def with_random_stats(v):
    """Non-trivial running statistics (variances > 0) and BN affine parameters."""
    v = jax.tree.map(np.array, v)
    stats, p = v["batch_stats"]["input_norm"], v["params"]["input_norm"]
    stats["mean"] = RNG.normal(size=OBS_DIM).astype(np.float32)
    stats["var"] = RNG.uniform(0.5, 2.0, size=OBS_DIM).astype(np.float32)
    p["scale"] = RNG.uniform(0.5, 2.0, size=OBS_DIM).astype(np.float32)
    p["bias"] = RNG.normal(size=OBS_DIM).astype(np.float32)
    return v


@functools.cache
def actor(noisy=False):
    net = make_ddpg_actor(LOW, HIGH, noisy=noisy)
    v = with_random_stats(random_variables(net.init, OBS))
    apply = jax.jit(net.apply, static_argnames=("train", "mutable"))
    return net, v, apply


@functools.cache
def critic():
    net = make_ddpg_critic()
    action = RNG.uniform(LOW, HIGH, size=(B, 2)).astype(np.float32)
    v = with_random_stats(random_variables(net.init, OBS, action))
    apply = jax.jit(net.apply, static_argnames=("train", "mutable"))
    return net, v, apply, action


def test_actor_init():
    v = jax.jit(make_ddpg_actor(LOW, HIGH).init)(jax.random.key(3), OBS)
    p = v["params"]
    # Lillicrap et al.: hidden U(+-1/sqrt(fan_in)), output U(+-3e-3); BN starts at 0 / 1.
    assert 0.5 / np.sqrt(OBS_DIM) < np.abs(p["hidden_0"]["kernel"]).max() <= 1 / np.sqrt(
        OBS_DIM)
    assert 0.5 / np.sqrt(150) < np.abs(p["hidden_1"]["kernel"]).max() <= 1 / np.sqrt(150)
    assert 1e-3 < np.abs(p["out"]["kernel"]).max() <= 3e-3
    np.testing.assert_array_equal(v["batch_stats"]["input_norm"]["mean"], np.zeros(OBS_DIM))
    np.testing.assert_array_equal(v["batch_stats"]["input_norm"]["var"], np.ones(OBS_DIM))


def test_actor_eval_matches_numpy_and_respects_bounds():
    net, v, apply = actor()
    assert v["params"]["hidden_0"]["kernel"].shape == (OBS_DIM, 150)
    np.testing.assert_allclose(apply(v, OBS), np_actor(v, OBS), **TOL)
    # Large pre-activations saturate at the bounds, never beyond.
    big = jax.tree.map(np.array, v)
    big["params"]["out"]["kernel"] *= 1e3
    a = np.asarray(apply(big, OBS))
    assert np.all(a >= LOW) and np.all(a <= HIGH)
    assert np.any(np.isclose(a, LOW, atol=1e-3)) and np.any(np.isclose(a, HIGH, atol=1e-3))


def test_actor_train_mode_uses_and_updates_batch_stats():
    net, v, apply = actor()
    out, updates = apply(v, OBS, train=True, mutable=("batch_stats",))
    np.testing.assert_allclose(out, np_actor(v, OBS, train=True), **TOL)
    new, old = updates["batch_stats"]["input_norm"], v["batch_stats"]["input_norm"]
    np.testing.assert_allclose(new["mean"], MOMENTUM * old["mean"] + (1 - MOMENTUM)
                               * OBS.mean(0), **TOL)
    np.testing.assert_allclose(new["var"], MOMENTUM * old["var"] + (1 - MOMENTUM)
                               * OBS.var(0), **TOL)
    # Evaluation mode changes nothing, even when asked for the collection.
    _, same = apply(v, OBS, train=False, mutable=("batch_stats",))
    jax.tree.map(np.testing.assert_array_equal, same["batch_stats"], v["batch_stats"])
    with pytest.raises(ValueError, match="mutable=\\['batch_stats'\\]"):
        net.apply(v, OBS, train=True)


def test_critic_matches_numpy_in_both_modes():
    net, v, apply, action = critic()
    np.testing.assert_allclose(apply(v, OBS, action), np_critic(v, OBS, action), **TOL)
    q, updates = apply(v, OBS, action, train=True, mutable=("batch_stats",))
    np.testing.assert_allclose(q, np_critic(v, OBS, action, train=True), **TOL)
    assert q.shape == (B,)
    assert not np.allclose(updates["batch_stats"]["input_norm"]["mean"],
                           v["batch_stats"]["input_norm"]["mean"])


def test_actor_gradient_through_the_critic():
    _, av, actor_apply = actor()
    _, cv, critic_apply, _ = critic()

    @jax.jit
    def actor_loss(actor_params):
        a = actor_apply({**av, "params": actor_params}, OBS)
        return jnp.mean(losses.ddpg_actor_loss(critic_apply(cv, OBS, a)))

    grads = jax.grad(actor_loss)(av["params"])
    norms = jax.tree.map(lambda g: float(jnp.abs(g).sum()), grads)
    assert all(n > 0 for n in jax.tree.leaves(norms["out"]))
    assert all(n > 0 for n in jax.tree.leaves(norms["hidden_0"]))


def test_noisy_actor_with_ou_style_per_env_noise():
    net, v, apply = actor(noisy=True)
    tree = noise_like(v, batch_shape=(B,))
    assert jax.tree.map(jnp.shape, tree) == {
        "hidden_0": {"eps_in": (B, OBS_DIM), "eps_out": (B, 150)},
        "hidden_1": {"eps_in": (B, 150), "eps_out": (B, 150)},
        "out": {"eps_in": (B, 150), "eps_out": (B, 2)}}
    tree = jax.tree.map(lambda z: RNG.normal(size=z.shape).astype(np.float32), tree)
    out = np.asarray(apply(v, OBS, noise=tree))
    for i in (0, B - 1):  # each env's row uses its own noise
        eps = {k: (e["eps_in"][i], e["eps_out"][i]) for k, e in tree.items()}
        np.testing.assert_allclose(out[i], np_actor(v, OBS[i:i + 1], eps=eps)[0], **TOL)
    # Drawn noise is tested on NoisyDense and the Q-network; here only its plumbing
    # (traced, not compiled: random-number kernels are slow to compile on CPU).
    keyed = jax.eval_shape(functools.partial(net.apply, noise_key=jax.random.key(0)), v, OBS)
    assert keyed.shape == (B, 2)


def test_without_batch_norm():
    net = make_ddpg_critic(batch_norm=False, hidden_sizes=(4,), activation="tanh")
    v = jax.eval_shape(net.init, jax.random.key(0), OBS, OBS[:, :2])
    assert set(v) == {"params"}
    assert v["params"]["hidden_0"]["kernel"].shape == (OBS_DIM + 2, 4)
    out = jax.eval_shape(functools.partial(net.apply, train=True), v, OBS, OBS[:, :2])
    assert out.shape == (B,)


@pytest.mark.parametrize("kwargs, match", [
    (dict(action_low=[1.0, 0.0]), "action_low < action_high"),
    (dict(action_low=[-1.0]), "same non-zero length"),
    (dict(action_high=[np.inf, 1.0]), "finite"),
    (dict(negative_slope=float("nan")), "negative_slope must be a finite number"),
    (dict(batch_norm_momentum=1.0), "batch_norm_momentum must be a number in \\[0, 1\\)"),
    (dict(hidden_sizes=(150, 0)), "hidden_sizes"),
    (dict(noisy="yes"), "noisy must be True or False"),
])
def test_ddpg_actor_rejects_bad_arguments(kwargs, match):
    args = dict(action_low=LOW, action_high=HIGH) | kwargs
    with pytest.raises(ValueError, match=match):
        make_ddpg_actor(**args)

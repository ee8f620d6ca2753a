"""Soft (Polyak) and periodic (hard) target updates over pytrees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.targets import periodic_update, soft_update

RNG = np.random.default_rng(0)


def tree(scale=1.0, dtype=np.float32):
    return {"params": {"dense": {"kernel": (scale * RNG.normal(size=(3, 2))).astype(dtype),
                                 "bias": (scale * RNG.normal(size=2)).astype(dtype)}},
            "batch_stats": {"mean": (scale * RNG.normal(size=3)).astype(dtype)}}


TARGET, ONLINE = tree(), tree(2.0)
jit_soft = jax.jit(soft_update)
jit_periodic = jax.jit(periodic_update, static_argnames="period")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_soft_update_matches_numpy(jit):
    fn = jit_soft if jit else soft_update
    tau = 0.005
    out = fn(TARGET, ONLINE, tau)
    expected = jax.tree.map(lambda t, o: (1 - tau) * t + tau * o, TARGET, ONLINE)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), out,
                 expected)
    assert jax.tree.structure(out) == jax.tree.structure(TARGET)


def test_soft_update_endpoints_and_dtype():
    jax.tree.map(np.testing.assert_array_equal, soft_update(TARGET, ONLINE, 1.0), ONLINE)
    jax.tree.map(np.testing.assert_array_equal, soft_update(TARGET, ONLINE, 0.0), TARGET)
    half = tree(dtype=jnp.bfloat16)
    out = jit_soft(half, tree(dtype=jnp.bfloat16), jnp.float32(0.1))  # traced tau
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(out))


def test_repeated_soft_updates_converge_geometrically():
    target = {"w": np.zeros(2, np.float32)}
    online = {"w": np.ones(2, np.float32)}
    step = jax.jit(lambda t: soft_update(t, online, 0.1))
    for _ in range(10):
        target = step(target)
    np.testing.assert_allclose(target["w"], 1 - 0.9**10, rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_periodic_update_copies_on_multiples_of_the_period(jit):
    fn = jit_periodic if jit else periodic_update
    for step in range(0, 9):
        out = fn(TARGET, ONLINE, jnp.int32(step), period=4)
        expected = ONLINE if step % 4 == 0 else TARGET
        jax.tree.map(np.testing.assert_array_equal, out, expected)


def test_periodic_update_under_vmap_over_seeds():
    stacked = lambda t: jax.tree.map(lambda x: np.stack([x, x]), t)
    out = jax.vmap(lambda t, o, s: periodic_update(t, o, s, 3))(
        stacked(TARGET), stacked(ONLINE), jnp.array([3, 4]))
    np.testing.assert_array_equal(out["batch_stats"]["mean"][0], ONLINE["batch_stats"]["mean"])
    np.testing.assert_array_equal(out["batch_stats"]["mean"][1], TARGET["batch_stats"]["mean"])


@pytest.mark.parametrize("tau", [-0.1, 1.5, float("nan"), True, np.ones(2)])
def test_soft_update_rejects_bad_tau(tau):
    with pytest.raises(ValueError, match="tau must be a number in \\[0, 1\\]"):
        soft_update(TARGET, ONLINE, tau)


@pytest.mark.parametrize("period", [0, -3, 2.5, True])
def test_periodic_update_rejects_bad_period(period):
    with pytest.raises(ValueError, match="period must be a positive integer"):
        periodic_update(TARGET, ONLINE, 0, period)


def test_mismatched_trees_raise():
    with pytest.raises(ValueError, match="same tree structure"):
        soft_update(TARGET, {"params": ONLINE["params"]}, 0.5)
    with pytest.raises(ValueError, match="same tree structure"):
        periodic_update(TARGET, ONLINE["params"], 0, 2)

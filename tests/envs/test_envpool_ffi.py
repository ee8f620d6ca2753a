"""envpool's XLA step through rljax's stable-name forwarder (rljax.envs.envpool_ffi)."""

import hashlib
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs
from rljax.buffers import _native
from rljax.envs import envpool_ffi

envpool = pytest.importorskip("envpool")

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu",
                                reason="the forwarder is for XLA:CPU")


def _pool(task, num_envs, seed=3):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        return envpool.make(task, env_type="gymnasium", num_envs=num_envs,
                            batch_size=num_envs, seed=seed)


@pytest.mark.parametrize("task", ["CartPole-v1", "HalfCheetah-v5"])
def test_stable_step_equals_envpool_step(task):
    n, x64 = 4, task != "CartPole-v1"  # HalfCheetah takes float64 actions
    ours, theirs = _pool(task, n), _pool(task, n)
    np.testing.assert_array_equal(ours.reset()[0], theirs.reset()[0])
    rng = np.random.default_rng(0)
    with jax.enable_x64(x64):
        h1, _, _, step1 = envpool_ffi.make_xla(ours)
        h2, _, _, step2 = theirs.xla()
        step1, step2 = jax.jit(step1), jax.jit(step2)
        assert "rljax_envpool_" in step1.lower(h1, *_action(rng, ours, n, x64)).as_text()
        for t in range(60):
            (action,) = _action(rng, ours, n, x64)
            h1, (obs1, rew1, term1, trunc1, info1) = step1(h1, action)
            h2, (obs2, rew2, term2, trunc2, info2) = step2(h2, action)
            assert obs1.dtype == obs2.dtype and (not x64 or obs1.dtype == jnp.float64)
            for a, b in ((obs1, obs2), (rew1, rew2), (term1, term2), (trunc1, trunc2),
                         (info1["env_id"], info2["env_id"]),
                         (info1["elapsed_step"], info2["elapsed_step"])):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"step {t}")
        np.testing.assert_array_equal(np.asarray(h1), np.frombuffer(ours._xla()[0][1][0],
                                                                       np.uint8))


def _action(rng, pool, n, x64):
    if x64:
        return (jnp.asarray(rng.uniform(-1, 1, (n,) + pool.action_space.shape)),)
    return (jnp.asarray(rng.integers(0, 2, n), jnp.int32),)


def _chunk_text(env, steps=3):
    def body(state, action):
        return env.step(state, action)

    actions = jnp.zeros((steps, env.spec.num_envs), jnp.int32)
    return jax.jit(lambda s, a: jax.lax.scan(body, s, a)).lower(env.reset(), actions).as_text()


def test_two_pools_give_identical_programs_and_both_step():
    first, second = envs.make("CartPole-v1", num_envs=3, seed=0), envs.make(
        "CartPole-v1", num_envs=3, seed=5)
    text = _chunk_text(first)
    assert text == _chunk_text(second)
    assert "rljax_envpool_CartPoleGymnasiumEnvPool_send" in text and "handle =" not in text
    # Same program, different pools: each call reaches its own pool (different seeds).
    run = jax.jit(lambda s, a: jax.lax.scan(lambda c, x: first.step(c, x), s, a))
    actions = jnp.zeros((5, 3), jnp.int32)
    out1 = run(first.reset(), actions)[1].obs
    out2 = jax.jit(lambda s, a: jax.lax.scan(lambda c, x: second.step(c, x), s, a))(
        second.reset(), actions)[1].obs
    assert not np.array_equal(np.asarray(out1), np.asarray(out2))


_PROGRAM = """
import hashlib, jax, jax.numpy as jnp, sys
sys.path.insert(0, {root!r})
from rljax import envs
env = envs.make("CartPole-v1", num_envs=3, seed=0)
body = lambda s, a: env.step(s, a)
text = jax.jit(lambda s, a: jax.lax.scan(body, s, a)).lower(
    env.reset(), jnp.zeros((3, 3), jnp.int32)).as_text()
print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_program_is_identical_in_another_process():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = envs.make("CartPole-v1", num_envs=3, seed=0)
    here = hashlib.sha256(_chunk_text(env).encode()).hexdigest()
    done = subprocess.run([sys.executable, "-c", _PROGRAM.format(root=root)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == here


def test_falls_back_to_envpools_calls_when_the_forwarder_cannot_build(monkeypatch):
    def broken():
        raise _native.BuildError("no C++ compiler found")

    monkeypatch.setattr(envpool_ffi, "_library", broken)
    with pytest.warns(RuntimeWarning, match="stable envpool custom calls unavailable"):
        env = envs.make("CartPole-v1", num_envs=3, seed=7)
    text = _chunk_text(env)
    assert "rljax_envpool_" not in text and "handle =" in text
    monkeypatch.undo()
    ours = envs.make("CartPole-v1", num_envs=3, seed=7)  # the forwarder again
    assert "rljax_envpool_" in _chunk_text(ours)  # (resets both pools once, as above)
    actions = jnp.asarray(np.random.default_rng(1).integers(0, 2, (30, 3)), jnp.int32)
    results = []
    for e in (env, ours):
        run = jax.jit(lambda s, a, e=e: jax.lax.scan(lambda c, x: e.step(c, x), s, a))
        results.append(run(e.reset(), actions)[1])
    for a, b in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_build_without_a_compiler_raises(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(_native.BuildError):
        envpool_ffi.build(str(tmp_path))


def test_off_switch_uses_envpools_calls(monkeypatch):
    monkeypatch.setenv("RLJAX_NATIVE", "0")
    env = envs.make("CartPole-v1", num_envs=3, seed=0)
    assert "rljax_envpool_" not in _chunk_text(env)

"""The unrolled threefry lowering rljax installs on CPU computes JAX's own numbers, has no
loop in the compiled program, and stays off with ``RLJAX_UNROLLED_THREEFRY=0``."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax.loops  # noqa: F401  (installs the lowering)
from rljax import threefry

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU lowering")


def draws(key, old_key):
    """Every kind of draw rljax and the envs make, new-style and raw uint32 keys."""
    k1, k2, k3 = jax.random.split(key, 3)
    logits = jnp.log(jnp.arange(1.0, 7.0))
    return {
        "split": jax.random.key_data(jax.random.split(k1, 5)),
        "fold_in": jax.random.key_data(jax.random.fold_in(k2, 7)),
        "uniform": jax.random.uniform(k1, (33, 3)),
        "normal": jax.random.normal(k2, (17,)),
        "randint": jax.random.randint(k3, (129,), 0, 1000),
        "categorical": jax.random.categorical(k3, logits, shape=(64,)),
        "permutation": jax.random.permutation(k2, 4096),
        "bits": jax.random.bits(k1, (8,), jnp.uint32),
        "old_split": jax.vmap(lambda k: jax.random.split(k, 3))(
            jax.vmap(jax.random.split)(old_key)[:, 0]),
        "old_randint": jax.vmap(lambda k: jax.random.randint(k, (), 0, 10))(old_key),
    }


def _compiled(unrolled: bool):
    fn = jax.jit(lambda key, old: draws(key, old))
    args = (jax.random.key(1234), jax.vmap(jax.random.PRNGKey)(jnp.arange(128)))
    with threefry.lowering(unrolled):
        compiled = fn.lower(*args).compile()
    return compiled, args


def test_the_unrolled_lowering_draws_the_same_numbers_without_a_loop():
    (rolled, args), (unrolled, _) = _compiled(False), _compiled(True)
    assert "while" in rolled.as_text()  # JAX's own CPU lowering loops
    assert "while" not in unrolled.as_text()
    a, b = rolled(*args), unrolled(*args)
    for name in a:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)
    # And both equal what JAX computes op by op, outside any compiled program.
    eager = draws(*args)
    np.testing.assert_array_equal(np.asarray(eager["permutation"]), np.asarray(b["permutation"]))


def test_importing_the_loops_installs_it_unless_switched_off():
    code = ("import jax, rljax.loops; "
            "f = jax.jit(lambda k: jax.random.split(k, 4)).lower(jax.random.key(0)).compile(); "
            "print('while' in f.as_text())")
    for flag, loops in (("1", "False"), ("0", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, threefry.ENV_FLAG: flag}, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == loops, (flag, out.stdout)

"""rljax.lockstep.cond: lax.cond's results everywhere, and only the taken branch under vmap
when the members' predicates agree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import lockstep


def _branches(calls):
    def on_true(x, pair):
        jax.debug.callback(lambda: calls.append("true"))
        return {"x": x * 2.0 + pair[0], "n": pair[1] + 1}

    def on_false(x, pair):
        jax.debug.callback(lambda: calls.append("false"))
        return {"x": x - pair[0], "n": pair[1] * 3}

    return on_true, on_false


def _run(cond, preds, x, pair, in_axes):
    calls = []
    on_true, on_false = _branches(calls)
    out = jax.jit(jax.vmap(lambda p, x, pair: cond(p, on_true, on_false, x, pair),
                           in_axes=in_axes))(jnp.asarray(preds), x, pair)
    jax.effects_barrier()
    return out, sorted(set(calls))


@pytest.mark.parametrize("preds", [[True, True, True], [False, False, False],
                                   [True, False, True], [False, True, False]])
@pytest.mark.parametrize("pair_batched", [False, True])
def test_vmapped_results_are_lax_cond_and_only_taken_branches_run(preds, pair_batched):
    x = jnp.arange(3, dtype=jnp.float32)
    pair = ((jnp.arange(3, dtype=jnp.float32) + 5.0, jnp.arange(3, dtype=jnp.int32))
            if pair_batched else (jnp.float32(5.0), jnp.int32(7)))
    in_axes = (0, 0, 0 if pair_batched else None)
    got, ran = _run(lockstep.cond, preds, x, pair, in_axes)
    want, _ = _run(jax.lax.cond, preds, x, pair, in_axes)
    for k in ("x", "n"):
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape == (3,)
        np.testing.assert_array_equal(got[k], want[k])
    # NumPy reference of each member's branch.
    p0, p1 = (np.asarray(pair[0]), np.asarray(pair[1]))
    p = np.asarray(preds)
    np.testing.assert_array_equal(got["x"], np.where(p, np.arange(3) * 2.0 + p0,
                                                     np.arange(3) - p0))
    np.testing.assert_array_equal(got["n"], np.broadcast_to(np.where(p, p1 + 1, p1 * 3), 3))
    assert ran == sorted({"true" if q else "false" for q in preds})


def test_plain_cond_under_vmap_runs_both_branches():
    # The witness used above detects a select: lax.cond under vmap runs both branches.
    _, ran = _run(jax.lax.cond, [True, True, True], jnp.zeros(3), (1.0, 2), (0, 0, None))
    assert ran == ["false", "true"]


def test_unbatched_predicate_and_single_run():
    calls = []
    on_true, on_false = _branches(calls)
    x, pair = jnp.arange(4.0), (jnp.float32(1.0), jnp.int32(2))
    out = jax.jit(jax.vmap(lambda x, p: lockstep.cond(p, on_true, on_false, x, pair),
                           in_axes=(0, None)))(x, jnp.bool_(False))
    jax.effects_barrier()
    np.testing.assert_array_equal(out["x"], np.arange(4.0) - 1.0)
    assert calls == ["false"]
    single = jax.jit(lambda p: lockstep.cond(p, on_true, on_false, jnp.float32(3.0), pair))
    assert float(single(True)["x"]) == 7.0 and int(single(False)["n"]) == 6


def test_branches_may_close_over_batched_and_integer_values():
    # As in TD3's delayed actor update (closes over the members' observations) and the
    # off-policy loop (closes over its counters).
    def member(pred, obs, count):
        def on_true(s):
            return s + jnp.sum(obs) + count

        def on_false(s):
            return s - count

        return lockstep.cond(pred, on_true, on_false, jnp.float32(1.0))

    obs, count = jnp.arange(6.0).reshape(3, 2), jnp.arange(3, dtype=jnp.int32)
    for preds in ([True] * 3, [False] * 3, [True, False, False]):
        got = jax.jit(jax.vmap(member))(jnp.asarray(preds), obs, count)
        want = np.where(preds, 1.0 + np.asarray(obs).sum(1) + np.arange(3), 1.0 - np.arange(3))
        np.testing.assert_allclose(got, want)


def test_inside_scan_and_nested_vmap():
    # A carry that starts unbatched and a predicate from a per-member counter, as in the
    # training loops; then members of members (devices x seeds).
    def member(start):
        def body(carry, _):
            step, total = carry
            total = lockstep.cond(step % 2 == 0, lambda t: t + step, lambda t: t * 1, total)
            return (step + 1, total), total

        return jax.lax.scan(body, (start, jnp.int32(0)), None, length=6)[1]

    starts = jnp.array([[0, 0], [1, 1], [0, 1]], jnp.int32)
    got = jax.jit(jax.vmap(jax.vmap(member)))(starts)
    want = np.zeros((3, 2, 6), np.int64)
    for i in range(3):
        for j in range(2):
            total, step = 0, int(starts[i, j])
            for t in range(6):
                total += step if step % 2 == 0 else 0
                want[i, j, t] = total
                step += 1
    np.testing.assert_array_equal(got, want)

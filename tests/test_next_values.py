"""rljax.types.next_values against a NumPy reference: the value each step bootstraps from,
with the value function run only on truncated steps' final observations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.types import Rollout, next_obs, next_values


def _rollout(steps, envs, limit, seed, keep_final=True):
    """Episodes that end by termination at random or by truncation at exactly ``limit``
    steps (each env starts part-way through an episode), with distinct observations."""
    rng = np.random.default_rng(seed)
    age = rng.integers(0, limit, envs)
    term = np.zeros((steps, envs), bool)
    trunc = np.zeros((steps, envs), bool)
    for t in range(steps):
        age += 1
        trunc[t] = age >= limit
        term[t] = ~trunc[t] & (rng.random(envs) < 0.1)
        age[term[t] | trunc[t]] = 0
    obs = rng.normal(size=(steps + 1, envs, 3)).astype(np.float32)
    final = rng.normal(size=(steps, envs, 3)).astype(np.float32)
    # Where the episode went on, the final observation is the next one.
    going = ~(term | trunc)
    final[going] = obs[1:][going]
    zeros = np.zeros((steps, envs), np.float32)
    return Rollout(obs=jnp.asarray(obs), action=jnp.asarray(zeros, jnp.int32),
                   reward=jnp.asarray(zeros), terminated=jnp.asarray(term),
                   truncated=jnp.asarray(trunc), valid=jnp.ones((steps, envs), bool),
                   extras={}, final_obs=jnp.asarray(final) if keep_final else None)


def _value(o):
    return jnp.tanh(o @ jnp.array([0.3, -0.7, 1.1])) + 0.1 * o[..., 0] ** 2


def _reference(r: Rollout, values: np.ndarray) -> np.ndarray:
    """Every step's bootstrap value from every final observation (NumPy)."""
    o = np.asarray(r.obs)
    v = lambda x: np.tanh(x @ np.array([0.3, -0.7, 1.1])) + 0.1 * x[..., 0] ** 2  # noqa: E731
    following = np.concatenate([values[1:], v(o[-1])[None]], axis=0)
    if r.final_obs is None:
        return following
    return np.where(np.asarray(r.truncated), v(np.asarray(r.final_obs)), following)


@pytest.mark.parametrize("steps,envs,limit", [(16, 8, 500), (16, 8, 5), (7, 5, 3),
                                              (12, 4, 1), (9, 6, 0)])
def test_matches_every_final_observation(steps, envs, limit):
    for seed in range(3):
        r = _rollout(steps, envs, max(limit, 2), seed)
        values = np.asarray(_value(r.obs[:-1]))  # the values recorded when acting
        got = np.asarray(jax.jit(next_values, static_argnums=(2, 3))(
            r, jnp.asarray(values), _value, limit))
        want = _reference(r, values)
        # Terminated steps do not bootstrap: their entries are not read.
        read = ~np.asarray(r.terminated)
        np.testing.assert_allclose(got[read], want[read], rtol=1e-6, atol=1e-6)
        assert int(np.asarray(r.truncated).sum()) > 0 or limit >= steps


def test_truncated_values_come_from_the_final_observation():
    r = _rollout(16, 8, 4, seed=1)
    values = np.asarray(_value(r.obs[:-1]))
    got = np.asarray(next_values(r, jnp.asarray(values), _value, 4))
    trunc = np.asarray(r.truncated)
    assert trunc.sum() >= 8
    np.testing.assert_allclose(got[trunc], np.asarray(_value(r.final_obs))[trunc], rtol=1e-6)
    # ... and not from the next episode's first observation, which differs.
    assert not np.allclose(got[trunc][:, None], np.concatenate(
        [values[1:], np.asarray(_value(r.obs[-1]))[None]])[trunc][:, None])


def test_without_final_observations_the_next_ones():
    r = _rollout(6, 3, 4, seed=2, keep_final=False)
    values = np.asarray(_value(r.obs[:-1]))
    got = np.asarray(next_values(r, jnp.asarray(values), _value, 4))
    np.testing.assert_allclose(got, _reference(r, values), rtol=1e-6)


def test_value_fn_runs_on_the_bound_only():
    seen = []

    def value_fn(o):
        seen.append(o.shape[0])
        return _value(o)

    r = _rollout(16, 8, 500, seed=0)
    next_values(r, _value(r.obs[:-1]), value_fn, 500)
    assert seen == [8, 8]  # the last observations, then one truncation per env at most
    seen.clear()
    next_values(r, _value(r.obs[:-1]), value_fn, 0)
    assert seen == [16 * 8]  # no time limit known: every final observation, once


@pytest.mark.parametrize("limit", [3, 0])
def test_a_compact_final_observation_is_widened_to_the_same_values(limit):
    """0/1 observations with the final ones kept as bool (EnvSpec.compact_obs_dtype):
    next_obs and next_values give exactly what the float32 final observations give."""
    r = _rollout(10, 4, 3, seed=4)
    r = r._replace(obs=(r.obs > 0).astype(jnp.float32),
                   final_obs=(r.final_obs > 0).astype(jnp.float32))
    compact = r._replace(final_obs=r.final_obs.astype(bool))
    assert next_obs(compact).dtype == jnp.float32
    np.testing.assert_array_equal(next_obs(compact), next_obs(r))
    values = _value(r.obs[:-1])
    np.testing.assert_array_equal(next_values(compact, values, _value, limit),
                                  next_values(r, values, _value, limit))


def test_vmapped_over_members_equals_each():
    rs = [_rollout(10, 4, 3, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *rs)
    values = jnp.stack([_value(r.obs[:-1]) for r in rs])
    got = jax.vmap(lambda r, v: next_values(r, v, _value, 3))(stacked, values)
    for k, r in enumerate(rs):
        want = next_values(r, values[k], _value, 3)
        read = ~np.asarray(r.terminated)
        np.testing.assert_allclose(np.asarray(got[k])[read], np.asarray(want)[read],
                                   rtol=1e-6)

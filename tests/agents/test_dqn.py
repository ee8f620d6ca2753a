"""DQN: loss against NumPy, target updates, schedules, acting, config errors, learning."""

from __future__ import annotations

import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _trees import assert_trees_close

from rljax import envs, exploration
from rljax.agents import dqn
from rljax.buffers.nstep import NStepTransition
from rljax.buffers.prioritized import PrioritizedSample
from rljax.records import configure
from rljax.run import cli
from rljax.run.presets import from_preset

N, OBS, A = 16, 5, 3


@pytest.fixture(scope="module")
def spec():
    cartpole = envs.make("CartPole-v1", num_envs=2, seed=0).spec
    return dataclasses.replace(cartpole, obs_shape=(OBS,), num_actions=A)


def _random_variables(config, spec, seed):
    """Variables of the Q-network's structure with N(0, 0.5^2) draws (no init compile)."""
    net = dqn.network(config, spec)
    shapes = jax.eval_shape(net.init, jax.random.key(0), jnp.zeros((1, OBS)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: (0.5 * rng.normal(size=s.shape)).astype(np.float32), shapes)


def _batch(seed=1):
    rng = np.random.default_rng(seed)
    terminated = rng.random(N) < 0.3
    m = rng.integers(1, 4, N)  # n-step windows of 1..3 steps
    transition = NStepTransition(
        obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32),
        action=jnp.asarray(rng.integers(0, A, N), jnp.int32),
        reward=jnp.asarray(rng.normal(size=N) * 2, jnp.float32),
        discount=jnp.asarray(0.99**m * (1 - terminated), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32))
    weights = jnp.asarray(rng.uniform(0.1, 1.0, N), jnp.float32)
    return PrioritizedSample(jnp.arange(N), transition, jnp.full(N, 1.0 / N), weights)


def _np_q(variables, obs):
    """NumPy forward of the dueling MLP: relu torso, V + A - mean(A)."""
    p = jax.tree.map(np.asarray, variables["params"])
    h = np.maximum(np.asarray(obs) @ p["torso"]["MLP_0"]["Dense_0"]["kernel"]
                   + p["torso"]["MLP_0"]["Dense_0"]["bias"], 0)
    value = h @ p["head"]["value_out"]["kernel"] + p["head"]["value_out"]["bias"]
    adv = h @ p["head"]["advantage_out"]["kernel"] + p["head"]["advantage_out"]["bias"]
    return value + adv - adv.mean(axis=-1, keepdims=True)


def _np_loss(config, params, target, batch):
    tr = batch.transition
    q = _np_q(params, tr.obs)
    q_next_online, q_next_target = _np_q(params, tr.next_obs), _np_q(target, tr.next_obs)
    rows = np.arange(N)
    a_next = (np.argmax(q_next_online, axis=1) if config.double_q
              else np.argmax(q_next_target, axis=1))
    y = np.asarray(tr.reward) + np.asarray(tr.discount) * q_next_target[rows, a_next]
    td = y - q[rows, np.asarray(tr.action)]
    if config.td_loss == "huber":
        d = config.huber_delta
        per = np.where(np.abs(td) <= d, 0.5 * td**2, d * (np.abs(td) - 0.5 * d))
    else:
        per = 0.5 * td**2
    return float(np.mean(np.asarray(batch.weights) * per)), td, y


@pytest.mark.parametrize("double_q,loss,delta,jit", [
    (True, "huber", 1.0, False),
    (True, "huber", 0.3, True),
    (False, "l2", 1.0, True),
])
def test_loss_matches_numpy(spec, double_q, loss, delta, jit):
    config = dqn.DQNConfig(hidden_sizes=(16,), double_q=double_q, td_loss=loss,
                           huber_delta=delta)
    params, target = _random_variables(config, spec, 0), _random_variables(config, spec, 1)
    batch = _batch()
    fn = lambda p, t, b: dqn.loss(config, dqn.network(config, spec), p, t, b)
    value, (td, _) = (jax.jit(fn) if jit else fn)(params, target, batch)
    ref_value, ref_td, y = _np_loss(config, params, target, batch)
    np.testing.assert_allclose(td, ref_td, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(value, ref_value, rtol=1e-4, atol=1e-5)
    if double_q:  # the case must tell double Q from max-target Q
        other = _np_loss(dataclasses.replace(config, double_q=False), params, target, batch)[1]
        assert np.abs(other - ref_td).max() > 1e-2
    assert np.abs(ref_td).max() > delta  # both sides of the Huber kink are exercised

    # Gradients flow only through Q(s, a): the same as differentiating against constant y.
    def const_target_loss(p):
        q = dqn.network(config, spec).apply(p, batch.transition.obs)
        q_a = jnp.take_along_axis(q, batch.transition.action[:, None], axis=1)[:, 0]
        per = dqn.losses.weighted_td_loss(jnp.asarray(y, jnp.float32) - q_a, batch.weights,
                                          loss=loss, delta=delta)
        return per

    grads = jax.grad(lambda p: fn(p, target, batch)[0])(params)
    ref_grads = jax.grad(const_target_loss)(params)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def _update_n(config, spec, n):
    agent = dqn.make_dqn(config, spec)
    state = agent.init(jax.random.key(0))
    first = state.target_params
    update = jax.jit(agent.update)
    batch = _batch()
    states = []
    for i in range(n):
        state, metrics, td = update(state, batch, jax.random.key(i))
        states.append(state)
    return first, states, metrics, td


def test_hard_target_copy_every_target_period_updates(spec):
    config = configure(dqn.DQNConfig, hidden_sizes=(16,), grad_steps=3, target_period=2)
    first, states, metrics, td = _update_n(config, spec, 7)
    same = lambda a, b: all(np.array_equal(x, y) for x, y in
                            zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
    for s in states[:5]:  # gradient steps 1..5 of 3 per update: no copy yet
        assert same(s.target_params, first)
    assert same(states[5].target_params, states[5].params)  # step 6 = 2 updates
    assert same(states[6].target_params, states[5].params)
    assert not same(states[6].params, states[5].params)
    assert td.shape == (N,) and np.all(np.isfinite(td))
    assert {"loss", "q_mean", "td_abs_mean", "grad_norm", "epsilon"} <= set(metrics)


def test_lr_factor_scales_each_update_by_its_loop_update(spec):
    """lr_factor is in loop updates: with 2 gradient steps per update (agent.update is one
    step), both steps of the first update (optimizer counts 0, 1) take factor 0.5, the
    same as half the learning rate, and the next update's (counts 2, 3) factor 0."""
    base = configure(dqn.DQNConfig, hidden_sizes=(16,), grad_steps=2, target_period=100)
    halved = dqn.make_dqn(dataclasses.replace(base, lr=base.lr / 2), spec)
    scaled = dqn.make_dqn(dataclasses.replace(base, lr_factor=((0, 0.5), (1, 0.0))), spec)
    batch, key = _batch(), jax.random.key(0)  # the same parameters, each its own Adam state
    ref, state = halved.init(key), scaled.init(key)
    for i in range(2):
        ref = halved.update(ref, batch, jax.random.key(i)).state
        state = scaled.update(state, batch, jax.random.key(i)).state
        assert_trees_close(state.params, ref.params, rtol=1e-5, atol=1e-8)
    assert_trees_close(scaled.update(state, batch, key).state.params, state.params)


def test_soft_target_update(spec):
    config = dqn.DQNConfig(hidden_sizes=(16,), tau=0.25)
    first, states, _, _ = _update_n(config, spec, 1)
    for t, t0, p in zip(jax.tree.leaves(states[0].target_params), jax.tree.leaves(first),
                        jax.tree.leaves(states[0].params), strict=True):
        np.testing.assert_allclose(t, 0.75 * t0 + 0.25 * p, rtol=1e-6, atol=1e-7)


def test_epsilon_and_beta_at_breakpoints():
    config = dqn.DQNConfig()  # reference: 1 -> 0.1 at 25k -> 0.01 at 500k; beta 0.4 -> 1 at 1M
    eps, beta = dqn.epsilon_schedule(config), exploration.piecewise_linear(config.replay.beta)
    for step, value in [(0, 1.0), (12_500, 0.55), (25_000, 0.1), (262_500, 0.055),
                        (500_000, 0.01), (750_000, 0.01), (5_000_000, 0.01)]:
        np.testing.assert_allclose(eps(step), value, rtol=1e-6, err_msg=f"epsilon({step})")
    for step, value in [(0, 0.4), (500_000, 0.7), (1_000_000, 1.0), (2_000_000, 1.0)]:
        np.testing.assert_allclose(beta(step), value, rtol=1e-6, err_msg=f"beta({step})")
    assert float(jax.jit(eps)(jnp.int32(25_000))) == pytest.approx(0.1)


def test_acting_follows_epsilon(spec):
    config = dqn.DQNConfig(hidden_sizes=(16,), epsilon=((0, 1.0), (10, 0.0)))
    agent = dqn.make_dqn(config, spec)
    state = agent.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(4096, OBS)), jnp.float32)
    act = jax.jit(agent.act)
    greedy = agent.policy(agent.params(state), obs)
    done = jnp.zeros(4096, bool)
    a10, _, _ = act(state, obs, jax.random.key(1), jnp.int32(10), done)
    np.testing.assert_array_equal(a10, greedy)  # epsilon 0
    a0, _, new_state = act(state, obs, jax.random.key(1), jnp.int32(0), done)
    counts = np.bincount(np.asarray(a0), minlength=A) / 4096
    np.testing.assert_allclose(counts, 1 / A, atol=0.04)  # epsilon 1: uniform
    assert int(new_state.update_step) == 0


def test_noisy_net_explores_with_noise_and_acts_greedily_without(spec):
    config = dqn.DQNConfig(hidden_sizes=(16,), noisy=True, noisy_sigma0=2.0)
    agent = dqn.make_dqn(config, spec)
    state = agent.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(512, OBS)), jnp.float32)
    done = jnp.zeros(512, bool)
    act, greedy_act = jax.jit(agent.act), jax.jit(agent.policy)
    a1, _, _ = act(state, obs, jax.random.key(1), jnp.int32(0), done)
    a2, _, _ = act(state, obs, jax.random.key(2), jnp.int32(0), done)
    assert np.mean(np.asarray(a1) != np.asarray(a2)) > 0.05
    np.testing.assert_array_equal(greedy_act(agent.params(state), obs),
                                  greedy_act(agent.params(state), obs))
    state, metrics, td = jax.jit(agent.update)(state, _batch(), jax.random.key(3))
    assert np.isfinite(float(metrics["loss"])) and "epsilon" not in metrics


def test_continuous_env_is_refused():
    spec = envs.make("Pendulum-v1", num_envs=1, seed=0).spec
    with pytest.raises(ValueError, match=r"DQN needs a discrete action space, but Pendulum-v1 "
                                         r"has a continuous one \(Box of shape \(1,\)"):
        dqn.make_dqn(dqn.DQNConfig(), spec)


def test_cli_refuses_continuous_env_in_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(["train", "cartpole-dqn", "--env", "Pendulum-v1", "--quiet"]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rljax: error: DQN needs a discrete action space, but Pendulum-v1")
    assert err.count("\n") == 1


@pytest.mark.parametrize("field,value,message", [
    ("num_envs", 0, "num_envs must be an integer >= 1, got 0"),
    ("td_loss", "mse", "td_loss must be one of huber, l2, got 'mse'"),
    ("epsilon", ((0, 1.5),), "epsilon values must be numbers in [0.0, 1.0]"),
    ("beta", ((5, 1.0), (2, 0.5)), "beta must be a schedule"),
    ("learning_starts", 8, "learning_starts must be an integer in [32, 16384] or None"),
    ("tau", 2.0, "tau must be a number in [0.0, 1.0]"),
    ("target_period", 2.5, "target_period must be an integer in [1, 2147483647]"),
    ("noisy", "yes", "noisy must be true or false"),
    ("lr_factor", ((0, -1.0),), "lr_factor values must be numbers in [0.0, 1000.0]"),
    ("lr_factor", ((3, 1.0),), "lr_factor must be a schedule"),
])
def test_bad_config_names_field_and_value(field, value, message):
    with pytest.raises(ValueError) as exc:
        configure(dqn.DQNConfig, **{field: value})
    assert message in str(exc.value)


def test_schedules_from_the_command_line():
    run = from_preset("cartpole-dqn", epsilon="0:1.0,100:0.05", beta="0:0.5,10:1")
    assert run.config.epsilon == ((0, 1.0), (100, 0.05))
    assert run.config.replay.beta == ((0, 0.5), (10, 1.0))
    assert hash(run.config) == hash(dataclasses.replace(run.config))
    with pytest.raises(ValueError, match="expected 2 values separated by ':'"):
        from_preset("cartpole-dqn", epsilon="0:1.0,100")



def test_expected_value_head_ignores_the_categorical_support(spec):
    """num_atoms=1 is the expected-value DQN whatever v_min and v_max: the same programs
    (traced, so without compiling) for every agent function."""
    base = dqn.DQNConfig(hidden_sizes=(16,), noisy=True)
    other = dataclasses.replace(base, v_min=-3.0, v_max=250.0)
    assert not base.distributional and base.num_atoms == 1
    batch, key = _batch(), jax.random.key(0)
    obs, done = batch.transition.obs, jnp.zeros(N, bool)
    programs = []
    for config in (base, other):
        agent = dqn.make_dqn(config, spec)
        state = jax.eval_shape(agent.init, key)
        programs.append([str(jax.make_jaxpr(fn)(*args)) for fn, args in [
            (agent.init, (key,)),
            (agent.act, (state, obs, key, jnp.int32(0), done)),
            (agent.update, (state, batch, key)),
            (agent.policy, (state.params, obs)),
            (agent.td_error, (state, batch.transition))]])
    assert programs[0] == programs[1]
    assert "argmax" in programs[0][2]  # double Q: the update was traced through
    assert jax.tree.map(jnp.shape, state.params["params"]["head"]["advantage_out"])[
        "kernel_mu"] == (16, A)
    q = jnp.ones((2, A))
    assert dqn.q_values(base, q) is q

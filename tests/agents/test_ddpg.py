"""DDPG: losses against NumPy, targets, batch-norm statistics, exploration state, NoisyNet,
clipping, config and action-space errors."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents import ddpg
from rljax.buffers.nstep import NStepTransition
from rljax.buffers.prioritized import PrioritizedSample
from rljax.envs.spec import EnvSpec
from rljax.records import configure

B, N, OBS, ACT = 4, 16, 5, 2
LOW, HIGH = (-1.0, -2.0), (1.0, 0.5)
SPEC = EnvSpec(task_id="Reacher-v5", num_envs=B, obs_shape=(OBS,), obs_dtype=np.float32,
               num_actions=None, action_shape=(ACT,), action_low=LOW, action_high=HIGH,
               max_episode_steps=50, reward_threshold=-3.75, is_atari=False)
SMALL = configure(ddpg.DDPGConfig, num_envs=B, actor_hidden=(8, 6), critic_hidden=(7, 5),
                  batch_size=N, learning_starts=N, buffer_size=64)
BN_EPS = 1e-5  # flax BatchNorm default


# --- NumPy reference networks ----------------------------------------------------------


def np_leaky(x, slope=0.05):
    return np.where(x >= 0, x, slope * x)


def np_norm(variables, x, train):
    """Input batch norm: batch statistics in training, running ones otherwise."""
    p = variables["params"]["input_norm"]
    if train:
        mean, var = x.mean(0), x.var(0)
    else:
        stats = variables["batch_stats"]["input_norm"]
        mean, var = np.asarray(stats["mean"]), np.asarray(stats["var"])
    return (x - mean) / np.sqrt(var + BN_EPS) * np.asarray(p["scale"]) + np.asarray(p["bias"])


def np_mlp(params, x, layers):
    for name in layers[:-1]:
        x = np_leaky(x @ np.asarray(params[name]["kernel"]) + np.asarray(params[name]["bias"]))
    return x @ np.asarray(params[layers[-1]]["kernel"]) + np.asarray(params[layers[-1]]["bias"])


def np_actor(variables, obs, train=False):
    x = np_norm(variables, np.asarray(obs, np.float64), train)
    z = np_mlp(variables["params"], x, ["hidden_0", "hidden_1", "out"])
    low, high = np.asarray(LOW), np.asarray(HIGH)
    return (high + low) / 2 + (high - low) / 2 * np.tanh(z)


def np_actor_means(variables, obs):
    """A NoisyDense actor without noise: the means (no batch norm statistics involved)."""
    p = variables["params"]
    x = np_norm(variables, np.asarray(obs, np.float64), False)
    for name in ("hidden_0", "hidden_1"):
        x = np_leaky(x @ np.asarray(p[name]["kernel_mu"]) + np.asarray(p[name]["bias_mu"]))
    z = x @ np.asarray(p["out"]["kernel_mu"]) + np.asarray(p["out"]["bias_mu"])
    low, high = np.asarray(LOW), np.asarray(HIGH)
    return (high + low) / 2 + (high - low) / 2 * np.tanh(z)


def np_critic(variables, obs, action, train=False):
    x = np.concatenate([np_norm(variables, np.asarray(obs, np.float64), train),
                        np.asarray(action, np.float64)], axis=-1)
    return np_mlp(variables["params"], x, ["hidden_0", "hidden_1", "out"])[:, 0]


# --- fixtures --------------------------------------------------------------------------


def perturb(tree, key, scale=0.3):
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [x + scale * jax.random.normal(k, x.shape)
                                        for x, k in zip(leaves, keys, strict=True)])


def with_stats(variables, key):
    """Non-trivial running statistics (mean != 0, var != 1), so that training-mode and
    evaluation-mode batch norm differ."""
    k1, k2 = jax.random.split(key)
    stats = variables["batch_stats"]["input_norm"]
    new = {"mean": jax.random.normal(k1, stats["mean"].shape),
           "var": jnp.exp(jax.random.normal(k2, stats["var"].shape))}
    return {**variables, "batch_stats": {"input_norm": new}}


@functools.cache
def random_state(config=SMALL, seed=0):
    """An agent state whose four networks all differ (weights and running statistics)."""
    keys = jax.random.split(jax.random.key(seed), 9)
    state = jitted("init", config)(keys[0])
    nets = {}
    for i, name in enumerate(("actor", "critic", "target_actor", "target_critic")):
        v = getattr(state, name)
        v = {**v, "params": perturb(v["params"], keys[1 + i])}
        nets[name] = with_stats(v, keys[5 + i])
    return state.replace(**nets)


def random_batch(seed=1):
    rng = np.random.default_rng(seed)
    tr = NStepTransition(
        obs=jnp.asarray(rng.normal(size=(N, OBS)) * 2 + 1, jnp.float32),
        action=jnp.asarray(rng.uniform(LOW, HIGH, size=(N, ACT)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=N), jnp.float32),
        discount=jnp.asarray(rng.choice([0.0, 0.97, 0.97**3], size=N), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32))
    weights = jnp.asarray(rng.uniform(0.1, 1.0, size=N), jnp.float32)
    return PrioritizedSample(jnp.arange(N), tr, jnp.full(N, 1.0 / N), weights)


def tree_close(a, b, **kw):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kw),
                 a, b)


# --- losses ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit,loss", [(True, "l2"), (True, "huber"), (False, "l2")],
                         ids=["jit-l2", "jit-huber", "eager-l2"])
def test_critic_loss_matches_numpy(jit, loss):
    config = dataclasses.replace(SMALL, td_loss=loss, huber_delta=0.5)
    state, batch = random_state(config), random_batch()
    tr = batch.transition
    fn = jitted("critic_loss", config) if jit else functools.partial(
        ddpg.critic_loss, config, SPEC, ddpg.parts(config, SPEC))
    value, (td, q, rest) = fn(state.critic["params"], state, batch)

    # Targets from the target nets in evaluation mode; Q(s, a) in training mode.
    a_t = np_actor(state.target_actor, tr.next_obs)
    target = np.asarray(tr.reward) + np.asarray(tr.discount) * np_critic(
        state.target_critic, tr.next_obs, a_t)
    q_ref = np_critic(state.critic, tr.obs, tr.action, train=True)
    td_ref = target - q_ref
    if loss == "l2":
        per = 0.5 * td_ref**2
    else:
        per = np.where(np.abs(td_ref) <= 0.5, 0.5 * td_ref**2, 0.5 * (np.abs(td_ref) - 0.25))
    np.testing.assert_allclose(q, q_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(td, td_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, np.mean(np.asarray(batch.weights) * per), rtol=1e-4)
    # The batch's statistics move the critic's running averages (momentum 0.9).
    obs = np.asarray(tr.obs, np.float64)
    old = state.critic["batch_stats"]["input_norm"]
    np.testing.assert_allclose(rest["batch_stats"]["input_norm"]["mean"],
                               0.9 * np.asarray(old["mean"]) + 0.1 * obs.mean(0), rtol=1e-5)
    np.testing.assert_allclose(rest["batch_stats"]["input_norm"]["var"],
                               0.9 * np.asarray(old["var"]) + 0.1 * obs.var(0), rtol=1e-4)


def test_target_policy_smoothing():
    """``Q'(s', clip(mu'(s') + clip(sigma * eps, -c, c), low, high))``; no key, no noise."""
    config = dataclasses.replace(SMALL, target_noise=0.7, target_noise_clip=0.3)
    state, tr = random_state(config), random_batch().transition
    fn = jitted("target_q", config)
    key = jax.random.key(5)
    eps = np.asarray(jax.random.normal(jax.random.split(key)[1], (N, ACT)))
    a_t = np.clip(np_actor(state.target_actor, tr.next_obs) + np.clip(0.7 * eps, -0.3, 0.3),
                  LOW, HIGH)
    np.testing.assert_allclose(fn(state, tr.next_obs, key),
                               np_critic(state.target_critic, tr.next_obs, a_t), rtol=1e-4,
                               atol=1e-5)
    plain = np_critic(state.target_critic, tr.next_obs, np_actor(state.target_actor,
                                                                  tr.next_obs))
    np.testing.assert_allclose(fn(state, tr.next_obs, None), plain, rtol=1e-4, atol=1e-5)


def test_twin_critics_min_target_and_summed_loss():
    config = dataclasses.replace(SMALL, twin_critics=True)
    state, batch = jitted("init", config)(jax.random.key(0)), random_batch()
    assert state.critic["params"]["out"]["kernel"].shape[0] == 2
    # Make both critics (and their targets) differ.
    state = state.replace(**{name: {**getattr(state, name), "params": perturb(
        getattr(state, name)["params"], jax.random.key(i))} for i, name in enumerate(
            ("critic", "target_critic"))})
    tr = batch.transition
    one = lambda tree, i: jax.tree.map(lambda x: x[i], tree)  # noqa: E731
    a_t = np_actor(state.target_actor, tr.next_obs)
    target = np.asarray(tr.reward) + np.asarray(tr.discount) * np.minimum(
        np_critic(one(state.target_critic, 0), tr.next_obs, a_t),
        np_critic(one(state.target_critic, 1), tr.next_obs, a_t))
    value, (td, q, rest) = jitted("critic_loss", config)(state.critic["params"], state, batch)
    tds = [target - np_critic(one(state.critic, i), tr.obs, tr.action, train=True)
           for i in range(2)]
    expected = sum(np.mean(np.asarray(batch.weights) * 0.5 * d**2) for d in tds)
    np.testing.assert_allclose(value, expected, rtol=1e-4)
    np.testing.assert_allclose(td, tds[0], rtol=1e-4, atol=1e-5)
    assert rest["batch_stats"]["input_norm"]["mean"].shape == (2, OBS)
    # The actor follows the first critic.
    a_loss, _ = jitted("actor_loss", config)(state.actor["params"], state, tr.obs)
    action = np_actor(state.actor, tr.obs, train=True)
    np.testing.assert_allclose(
        a_loss, -np.mean(np_critic(one(state.critic, 0), tr.obs, action, train=True)),
        rtol=1e-4, atol=1e-6)
    new, metrics, _ = jitted("update", config)(state, batch, jax.random.key(1))
    assert np.isfinite(float(metrics["critic_loss"]))


def test_td_error_uses_evaluation_mode_everywhere():
    state, batch = random_state(), random_batch()
    tr = batch.transition
    td = jitted("td_error", SMALL)(state, tr)
    target = np.asarray(tr.reward) + np.asarray(tr.discount) * np_critic(
        state.target_critic, tr.next_obs, np_actor(state.target_actor, tr.next_obs))
    np.testing.assert_allclose(td, target - np_critic(state.critic, tr.obs, tr.action),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_actor_loss_matches_numpy_and_its_gradient(jit):
    state, batch = random_state(), random_batch()
    obs = batch.transition.obs
    fn = jitted("actor_loss", SMALL) if jit else functools.partial(
        ddpg.actor_loss, SMALL, SPEC, ddpg.parts(SMALL, SPEC))
    value, rest = fn(state.actor["params"], state, obs)
    action = np_actor(state.actor, obs, train=True)
    ref = -np.mean(np_critic(state.critic, obs, action, train=True))
    np.testing.assert_allclose(value, ref, rtol=1e-4, atol=1e-6)
    # The actor's statistics move; the critic's are not part of the actor step.
    assert not np.allclose(rest["batch_stats"]["input_norm"]["mean"],
                           state.actor["batch_stats"]["input_norm"]["mean"])

    if not jit:
        return
    # Deterministic policy gradient, checked along a random direction by central differences.
    grad = jax.jit(jax.grad(lambda p: fn(p, state, obs)[0]))(state.actor["params"])
    direction = perturb(jax.tree.map(jnp.zeros_like, grad), jax.random.key(7), 1.0)
    eps = 1e-3

    def loss_np(sign):
        p = jax.tree.map(lambda x, d: np.asarray(x, np.float64) + sign * eps * np.asarray(d),
                         state.actor["params"], direction)
        v = {**state.actor, "params": p}
        return -np.mean(np_critic(state.critic, obs, np_actor(v, obs, train=True), train=True))

    numeric = (loss_np(1) - loss_np(-1)) / (2 * eps)
    analytic = sum(float(jnp.sum(g * d)) for g, d in zip(jax.tree.leaves(grad),
                                                         jax.tree.leaves(direction), strict=True))
    np.testing.assert_allclose(analytic, numeric, rtol=2e-3, atol=1e-6)


# --- targets and update ----------------------------------------------------------------


def test_initial_targets():
    state = bound("init", SMALL, SPEC)(jax.random.key(0))
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(
        state.target_critic["params"]))
    tree_close(state.target_critic["batch_stats"], state.critic["batch_stats"])
    jax.tree.map(np.testing.assert_array_equal, state.target_actor, state.actor)
    copy = bound("init", dataclasses.replace(SMALL, target_critic_init="copy"))(
        jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal, copy.target_critic, copy.critic)


def test_update_soft_updates_targets_and_batch_stats_once():
    config, tau = SMALL, SMALL.tau
    state, batch = random_state(config), random_batch()
    new, metrics, td = jitted("update", config)(state, batch, jax.random.key(3))
    # Polyak averaging of the whole variable trees (parameters and statistics).
    for online, target in (("actor", "target_actor"), ("critic", "target_critic")):
        expected = jax.tree.map(lambda t, o: (1 - tau) * np.asarray(t) + tau * np.asarray(o),
                                getattr(state, target), getattr(new, online))
        tree_close(getattr(new, target), expected, rtol=1e-5, atol=1e-7)
    # Each network's running statistics see the batch exactly once (its own step).
    obs = np.asarray(batch.transition.obs, np.float64)
    for name in ("actor", "critic"):
        old = getattr(state, name)["batch_stats"]["input_norm"]["mean"]
        np.testing.assert_allclose(getattr(new, name)["batch_stats"]["input_norm"]["mean"],
                                   0.9 * np.asarray(old) + 0.1 * obs.mean(0), rtol=1e-5)
    # The returned TD errors are the critic step's (before its update).
    _, (td_ref, _, _) = jitted("critic_loss", config)(state.critic["params"], state, batch)
    np.testing.assert_allclose(td, td_ref, rtol=1e-5, atol=1e-6)
    assert int(new.step) == 1 and np.isfinite(float(metrics["critic_loss"]))
    assert not np.allclose(new.critic["params"]["out"]["kernel"],
                           state.critic["params"]["out"]["kernel"])


def test_policy_delay_updates_actor_and_targets_every_other_step():
    config = dataclasses.replace(SMALL, policy_delay=2)
    state, batch = random_state(config), random_batch()
    update = jitted("update", config)
    s1, m1, _ = update(state, batch, jax.random.key(1))  # step 0: actor step and targets
    s2, m2, _ = update(s1, batch, jax.random.key(2))  # step 1: critic only
    kernel = lambda v: np.asarray(v["params"]["out"]["kernel"])  # noqa: E731
    assert not np.allclose(kernel(s1.actor), kernel(state.actor))
    assert not np.allclose(kernel(s1.target_critic), kernel(state.target_critic))
    np.testing.assert_array_equal(kernel(s2.actor), kernel(s1.actor))
    np.testing.assert_array_equal(kernel(s2.target_actor), kernel(s1.target_actor))
    np.testing.assert_array_equal(kernel(s2.target_critic), kernel(s1.target_critic))
    assert not np.allclose(kernel(s2.critic), kernel(s1.critic))
    # Metrics: the mean over the two steps is the actor step's value.
    ref, _ = jitted("actor_loss", config)(state.actor["params"], s1.replace(
        actor=state.actor), batch.transition.obs)
    np.testing.assert_allclose((m1["actor_loss"] + m2["actor_loss"]) / 2, ref, rtol=1e-5)
    assert float(m2["actor_loss"]) == 0.0


def test_weight_decay_is_l2_added_before_adam():
    """With a zero loss gradient, Adam on ``wd * theta`` moves every parameter by
    ``lr * sign(theta)`` on the first step (coupled L2, as PyTorch's Adam
    weight_decay), not by ``lr * wd * theta`` (AdamW)."""
    config = dataclasses.replace(SMALL, actor_weight_decay=1e-4, actor_lr=1e-3)
    opt = ddpg.parts(config, SPEC).actor_opt
    params = {"w": jnp.asarray([0.5, -2.0, 3.0])}
    updates, _ = opt.update({"w": jnp.zeros(3)}, opt.init(params), params)
    np.testing.assert_allclose(updates["w"], -1e-3 * np.sign(params["w"]), rtol=1e-3)


# --- acting ----------------------------------------------------------------------------


def bound(name, config, spec=SPEC):
    """``ddpg.<name>`` bound to ``config``, ``spec`` and the parts built from them."""
    return functools.partial(getattr(ddpg, name), config, spec, ddpg.parts(config, spec))


@functools.cache
def jitted(name, config, spec=SPEC):
    """``ddpg.<name>`` bound to ``config`` and jitted, compiled once per config."""
    return jax.jit(bound(name, config, spec))


def act(config, state, obs, key, new_episode):
    """``(action, state)`` of ``ddpg.act`` (whose extras are empty)."""
    action, extras, state = jitted("act", config)(state, obs, key, 0, new_episode)
    assert extras == {}
    return action, state


OBS_B = jnp.asarray(np.random.default_rng(2).normal(size=(B, OBS)), jnp.float32)


def test_acting_changes_no_network_state_and_greedy_is_deterministic():
    state = random_state()
    _, new = act(SMALL, state, OBS_B, jax.random.key(0), jnp.zeros(B, bool))
    for name in ("actor", "critic", "target_actor", "target_critic"):
        jax.tree.map(np.testing.assert_array_equal, getattr(new, name), getattr(state, name))
    greedy = jitted("policy", SMALL)
    a1, a2 = greedy(state.actor, OBS_B), greedy(state.actor, OBS_B)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(a1, np_actor(state.actor, OBS_B), rtol=1e-4, atol=1e-5)


def test_noise_scale_decays_per_episode_and_ou_restarts():
    config = dataclasses.replace(SMALL, ou_sigma=0.0, ou_theta=0.1)  # deterministic OU
    state = bound("init", config, SPEC)(jax.random.key(0))
    np.testing.assert_allclose(state.noise_scale, 0.75)
    state = state.replace(ou=jnp.ones((B, ACT)))
    starts = [jnp.array([True, False, False, True]), jnp.array([True, True, False, False])]
    for new_episode in starts:
        _, state = act(config, state, OBS_B, jax.random.key(1), new_episode)
    episodes = np.array([2, 1, 0, 1])
    np.testing.assert_allclose(state.noise_scale, 0.75 * 0.92**episodes, rtol=1e-6)
    # OU: restarted at 0 where an episode began (and stays 0 without noise), else it
    # reverts by (1 - theta) per step.
    np.testing.assert_allclose(state.ou[:, 0], [0.0, 0.0, 0.9**2, 0.0], atol=1e-7)


def test_ou_noise_statistics_in_act():
    """Action noise = scale * OU(theta, sigma): one step from 0 has std ``sigma``."""
    config = configure(SMALL, num_envs=4096, noise_scale=0.5, ou_sigma=0.2)
    spec = configure(SPEC, num_envs=4096, action_low=(-50.0, -50.0),
                               action_high=(50.0, 50.0))
    state = bound("init", config, spec)(jax.random.key(0))
    obs = jnp.zeros((4096, OBS))
    action, _, _ = jax.jit(lambda s, k: bound("act", config, spec)(
        s, obs, k, 0, jnp.zeros(4096, bool)))(state, jax.random.key(1))
    noise = np.asarray(action) - np.asarray(bound("policy", config, spec)(state.actor, obs))
    assert abs(noise.mean()) < 5 * 0.1 / np.sqrt(noise.size)
    np.testing.assert_allclose(noise.std(), 0.5 * 0.2, rtol=0.05)


@pytest.mark.parametrize("noise", ["ou", "gaussian"])
def test_actions_clipped_to_bounds(noise):
    config = dataclasses.replace(SMALL, noise=noise, ou_sigma=50.0, gaussian_sigma=50.0,
                                 noise_scale=1.0)
    state = bound("init", config, SPEC)(jax.random.key(0))
    action, _ = act(config, state, OBS_B, jax.random.key(1), jnp.zeros(B, bool))
    action = np.asarray(action)
    assert np.all(action >= np.asarray(LOW)) and np.all(action <= np.asarray(HIGH))
    assert np.any(action == np.asarray(LOW)) and np.any(action == np.asarray(HIGH))
    greedy = np.asarray(bound("policy", config)(state.actor, 100 * OBS_B))
    assert np.all(greedy >= np.asarray(LOW)) and np.all(greedy <= np.asarray(HIGH))


# --- NoisyNet --------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["ou", "key"])
def test_noisy_actor_noise_reproducible_and_off_in_evaluation(source):
    config = dataclasses.replace(SMALL, noisy=True, noisy_noise=source, noise="none")
    state = bound("init", config, SPEC)(jax.random.key(0))
    assert "kernel_sigma" in state.actor["params"]["hidden_0"]
    new_episode = jnp.zeros(B, bool)
    a1, s1 = act(config, state, OBS_B, jax.random.key(1), new_episode)
    a2, _ = act(config, state, OBS_B, jax.random.key(1), new_episode)
    a3, _ = act(config, state, OBS_B, jax.random.key(2), new_episode)
    np.testing.assert_array_equal(a1, a2)  # same key, same noise
    assert not np.allclose(a1, a3)
    greedy = jitted("policy", config)
    g = np.asarray(greedy(state.actor, OBS_B))
    np.testing.assert_array_equal(g, greedy(state.actor, OBS_B))
    assert not np.allclose(a1, g)  # acting is noisy, evaluation is not
    np.testing.assert_allclose(g, np_actor_means(state.actor, OBS_B), rtol=1e-4, atol=1e-5)
    if source == "ou":
        # Factorized noise inputs per env and layer: eps_in [B, fan_in], eps_out [B, fan_out],
        # stepped by the OU process and restarted at new episodes.
        layer = s1.noisy_ou["hidden_1"]
        assert layer["eps_in"].shape == (B, 8) and layer["eps_out"].shape == (B, 6)
        assert np.all(np.asarray(layer["eps_in"]) != 0)
        _, s2 = act(config, s1, OBS_B, jax.random.key(3), jnp.array([True, False, False, False]))
        _, fresh = act(config, state, OBS_B, jax.random.key(3), jnp.ones(B, bool))
        np.testing.assert_allclose(s2.noisy_ou["hidden_1"]["eps_in"][0],
                                   fresh.noisy_ou["hidden_1"]["eps_in"][0], rtol=1e-6)
    else:
        assert s1.noisy_ou == {}


def test_noisy_update_trains_the_noise_scales():
    config = dataclasses.replace(SMALL, noisy=True)
    state = bound("init", config, SPEC)(jax.random.key(0))
    new, _, _ = jitted("update", config)(state, random_batch(), jax.random.key(1))
    sigma = lambda s: np.asarray(s.actor["params"]["hidden_0"]["kernel_sigma"])  # noqa: E731
    assert not np.allclose(sigma(new), sigma(state))


# --- errors ----------------------------------------------------------------------------


def test_discrete_action_space_refused():
    spec = dataclasses.replace(SPEC, task_id="CartPole-v1", num_actions=2, action_shape=(),
                               action_low=None, action_high=None)
    with pytest.raises(ValueError, match=r"CartPole-v1.*discrete"):
        ddpg.make_ddpg(SMALL, spec)


def test_cli_refuses_discrete_env_with_one_line(capsys):
    from rljax.run import cli

    code = cli.main(["train", "reacher-ddpg", "--env", "CartPole-v1", "--quiet",
                     "--logdir", "/tmp/rljax-test-never-written"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "CartPole-v1" in err and err.startswith("rljax: error:")


@pytest.mark.parametrize("field,value,match", [
    ("tau", 1.5, r"tau must be a number in \[0.0, 1.0\], got 1.5"),
    ("noise", "pink", r"noise must be one of ou, gaussian, none, got 'pink'"),
    ("grad_steps", 0, r"grad_steps must be an integer >= 1, got 0"),
    ("batch_size", 20_000, r"learning_starts must be an integer in \[20000, 1000000\] or None "
                           r"\(from batch_size to buffer_size; None: a full buffer\), got 10000"),
    ("learning_starts", 2_000_000, r"learning_starts must be an integer in \[128, 1000000\]"),
    ("beta", ((0, -0.1),), r"beta values must be numbers in \[0.0, 1.0\]"),
    ("beta", 1.0, r"beta must be a schedule \(\(update, value\), ...\)"),
    ("noisy_noise", "brown", r"noisy_noise must be one of ou, key"),
    ("flush_every", 0, r"flush_every must be an integer in \[1, 2147483647\] or None"),
    ("actor_hidden", (), r"actor_hidden must be a non-empty tuple"),
])
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        configure(ddpg.DDPGConfig, **{field: value})


def test_config_for_the_driver():
    config = ddpg.DDPGConfig()
    assert config.loop.num_envs == 20 and config.loop.steps_per_update == 20 * 50
    hash(config)

"""DQN's categorical head (C51 / Rainbow): network, target, loss and priorities against
NumPy, greedy actions from the mean, masked logits, config checks, and learning CartPole."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import envs
from rljax.agents import dqn
from rljax.loops import factory
from rljax.networks import Network, make_q_network, noise_like
from rljax.records import configure
from rljax.types import NStepTransition, Sample

N, OBS, A, K = 12, 5, 3, 11
GAMMA = 0.9
V_MIN, V_MAX = -4.0, 6.0
TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def spec():
    cartpole = envs.make("CartPole-v1", num_envs=2, seed=0).spec
    return dataclasses.replace(cartpole, obs_shape=(OBS,), num_actions=A)


def _config(**kwargs):
    return configure(dqn.DQNConfig, hidden_sizes=(16,), num_atoms=K, v_min=V_MIN, v_max=V_MAX,
                         gamma=GAMMA, n_step=3, **kwargs)


def _random_variables(net, seed, scale=0.5):
    """Variables of ``net``'s structure with N(0, scale^2) draws (no init compile)."""
    shapes = jax.eval_shape(net.init, jax.random.key(0), jnp.zeros((1, OBS)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: (scale * rng.normal(size=s.shape)).astype(np.float32),
                        shapes)


def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_logits(variables, obs, dueling):
    """NumPy forward of the one-layer relu MLP and the categorical head: [N, A, K]."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), variables["params"])
    dense = lambda q, x: x @ q["kernel"] + q["bias"]
    h = np.maximum(dense(p["torso"]["MLP_0"]["Dense_0"], np.asarray(obs, np.float64)), 0)
    head = p["head"]
    if not dueling:
        return dense(head["q_out"], h).reshape(-1, A, K)
    value = dense(head["value_out"], h)[:, None, :]
    adv = dense(head["advantage_out"], h).reshape(-1, A, K)
    return value + adv - adv.mean(axis=1, keepdims=True)


def _np_project(probs, r, discount):
    """Bellemare et al. 2017, algorithm 1, atom by atom: each ``r + discount z_j``,
    clipped, split between the atoms below and above it (all to one when it lands on
    one)."""
    z = np.linspace(V_MIN, V_MAX, K)
    dz = (V_MAX - V_MIN) / (K - 1)
    out = np.zeros(K)
    for j in range(K):
        b = (np.clip(r + discount * z[j], V_MIN, V_MAX) - V_MIN) / dz
        lo, hi = int(np.floor(b)), int(np.ceil(b))
        if lo == hi:
            out[lo] += probs[j]
        else:
            out[lo] += probs[j] * (hi - b)
            out[hi] += probs[j] * (b - lo)
    return out


def _np_targets(params, target, tr, double_q=True, dueling=True):
    """Double-Q (or target-selected) projected targets [N, K], online logits [N, A, K]."""
    z = np.linspace(V_MIN, V_MAX, K)
    logits_t_target = _np_logits(target, tr.next_obs, dueling)
    select = _np_logits(params if double_q else target, tr.next_obs, dueling)
    a_star = np.argmax((_np_softmax(select) * z).sum(-1), axis=1)
    probs = _np_softmax(logits_t_target[np.arange(len(a_star)), a_star])
    targets = np.stack([_np_project(probs[i], float(tr.reward[i]), float(tr.discount[i]))
                        for i in range(len(a_star))])
    return targets, _np_logits(params, tr.obs, dueling)


def _np_losses(logits, action, targets):
    """Cross-entropy and KL of the taken action's distribution to the targets, [N] each."""
    log_p = np.log(_np_softmax(logits[np.arange(len(action)), np.asarray(action)]))
    ce = -np.sum(np.where(targets > 0, targets * log_p, 0.0), axis=-1)
    kl = np.sum(np.where(targets > 0, targets * (np.log(np.where(targets > 0, targets, 1))
                                                 - log_p), 0.0), axis=-1)
    return ce, kl


def _batch(seed=0):
    """Terminated, truncated (an m < 3 step window) and full 3-step transitions, with
    rewards that land inside the support, on an atom and beyond either end."""
    rng = np.random.default_rng(seed)
    kinds = np.array(["terminated", "truncated", "normal"] * (N // 3))
    m = np.where(kinds == "normal", 3, rng.integers(1, 3, N))
    discount = np.where(kinds == "terminated", 0.0, GAMMA**m)
    reward = rng.uniform(-3.0, 5.0, N)
    reward[:3] = 1.0  # an atom: terminated lands exactly on z = 1
    reward[3:6] = [-20.0, 30.0, 9.0]  # clipped to v_min / v_max
    transition = NStepTransition(
        obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32),
        action=jnp.asarray(rng.integers(0, A, N), jnp.int32),
        reward=jnp.asarray(reward, jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(N, OBS)), jnp.float32))
    weights = jnp.asarray(rng.uniform(0.1, 1.0, N), jnp.float32)
    return Sample(jnp.arange(N), transition, jnp.full(N, 1.0 / N), weights), kinds


# --- the categorical head ------------------------------------------------------------


@pytest.mark.parametrize("dueling,noisy", [(False, False), (True, False), (True, True)])
def test_head_gives_logits_per_action_and_atom(dueling, noisy):
    net = make_q_network((OBS,), A, (16,), dueling=dueling, noisy=noisy, num_atoms=K)
    variables = _random_variables(net, 0)
    obs = np.random.default_rng(1).normal(size=(2, 4, OBS)).astype(np.float32)
    key = jax.random.key(0) if noisy else None
    logits = np.asarray(jax.jit(functools.partial(net.apply, noise_key=key))(variables, obs))
    assert logits.shape == (2, 4, A, K)
    np.testing.assert_allclose(_np_softmax(logits).sum(-1), np.ones((2, 4, A)), **TOL)
    if not noisy:
        np.testing.assert_allclose(logits.reshape(-1, A, K),
                                   _np_logits(variables, obs.reshape(-1, OBS), dueling),
                                   rtol=1e-4, atol=1e-5)
    head = variables["params"]["head"]
    out = head["advantage_out"] if dueling else head["q_out"]
    assert (out["kernel_mu"] if noisy else out["kernel"]).shape == (16, A * K)


def test_dueling_streams_combine_per_atom():
    net = make_q_network((OBS,), A, (16,), dueling=True, num_atoms=K)
    variables = _random_variables(net, 2)
    obs = np.random.default_rng(3).normal(size=(7, OBS)).astype(np.float32)
    logits = np.asarray(net.apply(variables, obs))
    head = variables["params"]["head"]
    h = np.maximum(obs @ variables["params"]["torso"]["MLP_0"]["Dense_0"]["kernel"]
                   + variables["params"]["torso"]["MLP_0"]["Dense_0"]["bias"], 0)
    value = h @ head["value_out"]["kernel"] + head["value_out"]["bias"]  # [7, K]
    adv = (h @ head["advantage_out"]["kernel"] + head["advantage_out"]["bias"]).reshape(7, A, K)
    expected = value[:, None, :] + adv - adv.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    # The mean over actions is the value stream, atom by atom (Wang et al.'s identifiability).
    np.testing.assert_allclose(logits.mean(axis=1), value, rtol=1e-4, atol=1e-5)
    # Not a per-action mean over atoms instead: the combination is over actions.
    assert np.abs(adv.mean(axis=1)).max() > 0.1


def test_noisy_categorical_head_noise_shapes():
    net = make_q_network((OBS,), A, (16,), dueling=True, noisy=True, num_atoms=K)
    tree = jax.tree.map(jnp.shape, noise_like(_random_variables(net, 0), (4,)))
    assert tree == {"head": {"value_out": {"eps_in": (4, 16), "eps_out": (4, K)},
                             "advantage_out": {"eps_in": (4, 16), "eps_out": (4, A * K)}}}


@pytest.mark.parametrize("value", [1, 0, 2.0, True])
def test_network_refuses_bad_num_atoms(value):
    with pytest.raises(ValueError, match=f"num_atoms must be None or an integer >= 2, "
                                         f"got {value!r}"):
        make_q_network((OBS,), A, num_atoms=value)


# --- config --------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_atoms=0), "num_atoms must be an integer >= 1 (1: Q-values; 2 or more: a "
                        "categorical return distribution), got 0"),
    (dict(num_atoms=51.0), "num_atoms must be an integer >= 1"),
    (dict(v_min=float("nan")), "v_min must be a finite number, got nan"),
    (dict(v_max=float("inf")), "v_max must be a finite number, got inf"),
    (dict(v_min=5.0, v_max=5.0), "v_min must be below v_max (the categorical support runs "
                                 "from v_min to v_max), got v_min=5.0 and v_max=5.0"),
    (dict(v_min=1.0, v_max=-1.0), "got v_min=1.0 and v_max=-1.0"),
])
def test_bad_categorical_config_names_field_and_value(kwargs, message):
    with pytest.raises(ValueError) as exc:
        dqn.DQNConfig(**kwargs)
    assert message in str(exc.value)


def test_support():
    config = dqn.DQNConfig(num_atoms=51, v_min=0.0, v_max=100.0)
    np.testing.assert_allclose(dqn.support(config), np.linspace(0, 100, 51), rtol=1e-6)
    assert config.distributional and not dqn.DQNConfig().distributional


# --- target, loss, priorities --------------------------------------------------------


@pytest.mark.parametrize("double_q,dueling,jit", [(True, True, False), (True, True, True),
                                                  (False, False, True)])
def test_target_distribution_matches_numpy(spec, double_q, dueling, jit):
    config = _config(double_q=double_q, dueling=dueling)
    net = dqn.network(config, spec)
    params, target = _random_variables(net, 0), _random_variables(net, 1)
    batch, kinds = _batch()
    fn = functools.partial(dqn.categorical_targets, config, net)
    got, logits = (jax.jit(fn) if jit else fn)(params, target, batch.transition)
    expected, np_logits = _np_targets(params, target, batch.transition, double_q, dueling)
    np.testing.assert_allclose(logits, np_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got).sum(-1), 1.0, rtol=1e-5)
    z = np.linspace(V_MIN, V_MAX, K)
    terminated = kinds == "terminated"
    # Terminated transitions put all their mass around the (clipped) reward.
    r = np.clip(np.asarray(batch.transition.reward), V_MIN, V_MAX)
    np.testing.assert_allclose((np.asarray(got) * z).sum(-1)[terminated], r[terminated],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got)[0], np.eye(K)[5], atol=1e-6)  # on z_5 = 1
    np.testing.assert_allclose(np.asarray(got)[3:6], np.eye(K)[[0, -1, -1]], atol=1e-6)
    # Truncated and normal transitions inside the support bootstrap: their targets spread.
    assert np.all((np.asarray(got)[6:][~terminated[6:]] > 1e-3).sum(-1) >= 2)
    if double_q:  # the case must tell the online selection from the target's
        other = _np_targets(params, target, batch.transition, False, dueling)[0]
        assert np.abs(other - expected).max() > 1e-2


def test_loss_and_priorities_match_numpy(spec):
    config = _config()
    net = dqn.network(config, spec)
    params, target = _random_variables(net, 3), _random_variables(net, 4)
    batch, _ = _batch(1)
    fn = functools.partial(dqn.loss, config, dqn.network(config, spec))
    value, (td, metrics) = jax.jit(fn)(params, target, batch)
    targets, logits = _np_targets(params, target, batch.transition)
    ce, kl = _np_losses(logits, batch.transition.action, targets)
    # The per-transition losses alone, not jitted.
    args = (jnp.asarray(logits, jnp.float32), batch.transition.action,
            jnp.asarray(targets, jnp.float32))
    for got, expected in zip(dqn.categorical_losses(*args), (ce, kl), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, np.mean(np.asarray(batch.weights) * ce), rtol=1e-4)
    np.testing.assert_allclose(td, kl, rtol=1e-4, atol=1e-5)
    # KL, not the cross-entropy: they differ by the target's entropy (0 for one-atom ones).
    assert np.all(np.asarray(td) >= 0) and np.abs(ce - kl).max() > 0.5
    q = (_np_softmax(logits) * np.linspace(V_MIN, V_MAX, K)).sum(-1)
    np.testing.assert_allclose(metrics["q_mean"], q.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["td_abs_mean"], kl.mean(), rtol=1e-4)

    # Gradients flow only through the taken action's logits at s: the same as the
    # cross-entropy against constant targets.
    def const_target_loss(p):
        logits = net.apply(p, batch.transition.obs)
        log_p = jax.nn.log_softmax(logits[jnp.arange(N), batch.transition.action])
        return jnp.mean(batch.weights * -jnp.sum(jnp.asarray(targets, jnp.float32) * log_p, -1))

    grads = jax.jit(jax.grad(lambda p: fn(p, target, batch)[0]))(params)
    ref_grads = jax.jit(jax.grad(const_target_loss))(params)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_update_returns_kl_priorities_and_initial_priorities_agree(spec):
    config = _config(tau=0.5, lr=1e-2)
    agent = dqn.make_dqn(config, spec)
    net = dqn.network(config, spec)
    params = _random_variables(net, 8)
    state = dqn.DQNState(params=params, target_params=_random_variables(net, 9),
                         opt_state=dqn.parts(config, spec).optimizer.init(params),
                         step=jnp.int32(0), update_step=jnp.int32(0))
    batch, _ = _batch(2)
    targets, logits = _np_targets(state.params, state.target_params, batch.transition)
    kl = _np_losses(logits, batch.transition.action, targets)[1]
    np.testing.assert_allclose(jax.jit(agent.td_error)(state, batch.transition), kl,
                               rtol=1e-4, atol=1e-6)
    new_state, metrics, td = jax.jit(agent.update)(state, batch, jax.random.key(1))
    np.testing.assert_allclose(td, kl, rtol=1e-4, atol=1e-6)
    assert {"loss", "q_mean", "td_abs_mean", "grad_norm", "epsilon"} <= set(metrics)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert int(new_state.step) == 1
    # A step down the cross-entropy's gradient lowers it on the same batch.
    loss = jax.jit(functools.partial(dqn.loss, config, dqn.network(config, spec)))
    assert float(loss(new_state.params, state.target_params, batch)[0]) < float(metrics["loss"])


# --- acting --------------------------------------------------------------------------


def test_greedy_action_is_the_argmax_of_the_mean(spec):
    config = _config(noisy=True)
    agent = dqn.make_dqn(config, spec)
    variables = _random_variables(dqn.network(config, spec), 5, scale=1.0)
    head = variables["params"]["head"]
    for layer in head.values():  # no noise: acting is then greedy too
        layer["kernel_sigma"][:] = 0.0
        layer["bias_sigma"][:] = 0.0
    state = dqn.DQNState(params=variables, target_params=variables, opt_state=(),
                         step=jnp.int32(0), update_step=jnp.int32(0))
    obs = jnp.asarray(np.random.default_rng(6).normal(size=(512, OBS)), jnp.float32)
    means = {"torso": variables["params"]["torso"],
             "head": {k: {"kernel": v["kernel_mu"], "bias": v["bias_mu"]} for k, v in head.items()}}
    logits = _np_logits({"params": means}, obs, dueling=True)
    mean = (_np_softmax(logits) * np.linspace(V_MIN, V_MAX, K)).sum(-1)
    greedy = np.argmax(mean, axis=1)
    np.testing.assert_array_equal(jax.jit(agent.policy)(agent.params(state), obs), greedy)
    # Noisy acting without noise scales is the same greedy policy, through the mean.
    actions, _, _ = jax.jit(agent.act)(state, obs, jax.random.key(1), jnp.int32(0),
                                       jnp.zeros(512, bool))
    np.testing.assert_array_equal(actions, greedy)
    # So is epsilon-greedy acting at epsilon 0 (a network without noisy layers).
    plain = _config(epsilon=((0, 0.0),))
    state = state.replace(params={"params": means}, target_params={"params": means})
    actions, _, _ = jax.jit(dqn.make_dqn(plain, spec).act)(
        state, obs, jax.random.key(1), jnp.int32(0), jnp.zeros(512, bool))
    np.testing.assert_array_equal(actions, greedy)
    # The mean is what decides: the argmax of the largest logit or of the summed logits
    # differs.
    assert np.mean(np.argmax(logits.max(-1), axis=1) != greedy) > 0.05
    assert np.mean(np.argmax(logits.sum(-1), axis=1) != greedy) > 0.05


def test_masked_logits_give_no_nan():
    config = _config()
    z = dqn.support(config)
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(4, A, K)).astype(np.float32)
    logits[:, 2, :] = -np.inf  # action 2 masked everywhere
    logits[:, 0, 7:] = -np.inf  # atoms masked in action 0
    logits = jnp.asarray(logits)
    q = np.asarray(dqn.q_values(config, logits))
    assert np.all(q[:, 2] == -np.inf) and np.all(np.isfinite(q[:, :2]))
    np.testing.assert_allclose(q[:, 0], (_np_softmax(np.asarray(logits)[:, 0, :7])
                                         * np.asarray(z)[:7]).sum(-1), rtol=1e-5)

    # Target: the masked action is never picked; the masked atoms carry no mass.
    net = Network(init=None, apply=lambda v, obs, noise_key=None: obs + v)
    transition = NStepTransition(obs=logits, action=jnp.array([0, 1, 0, 1]),
                                 reward=jnp.array([-1.0, 0.3, 2.0, 0.0]),
                                 discount=jnp.array([0.0, 0.81, 0.9, 0.729]),
                                 next_obs=logits)
    targets, _ = dqn.categorical_targets(config, net, jnp.zeros(()), jnp.zeros(()), transition)
    assert np.all(np.isfinite(targets))
    np.testing.assert_allclose(np.asarray(targets).sum(-1), 1.0, rtol=1e-5)
    # No target mass on the taken action 0's masked atoms (else the loss is rightly inf).
    targets = jnp.asarray(targets).at[:, 7:].set(0.0)
    targets = targets / targets.sum(-1, keepdims=True)

    def total(x):
        ce, kl = dqn.categorical_losses(x, transition.action, targets)
        return jnp.sum(ce), kl

    grads, kl = jax.jit(jax.grad(total, has_aux=True))(logits)
    assert np.all(np.isfinite(kl)) and np.all(np.asarray(kl) >= 0)
    assert not np.any(np.isnan(grads))
    assert np.all(np.asarray(grads)[:, 2] == 0)  # nothing flows into the masked action
    policy = jnp.argmax(dqn.q_values(config, logits), axis=-1)
    assert np.all(np.asarray(policy) != 2)


# --- learning ------------------------------------------------------------------------


def _cartpole_rainbow(**kwargs):
    """The CartPole Rainbow configuration (3-step double dueling categorical DQN with
    NoisyNet and prioritized replay)."""
    return configure(dqn.DQNConfig, grad_steps=4, batch_size=64, buffer_size=50_000,
                         learning_starts=1_000, n_step=3, hidden_sizes=(128, 128), lr=5e-4,
                         adam_eps=1.5e-4, max_grad_norm=10.0, target_period=50, alpha=0.5,
                         beta=((0, 0.4), (9_375, 1.0)), noisy=True, noisy_sigma0=0.5,
                         num_atoms=51, **kwargs)


def _train(config, steps, seed=0):
    env = envs.make("CartPole-v1", config.loop.num_envs, seed)
    agent = dqn.make_dqn(config, env.spec)
    updates = steps // config.loop.steps_per_update
    trainer = factory.off_policy(agent, env, config, updates, threshold=475.0)
    state, _ = trainer.chunk(trainer.init(jax.random.key(seed)))
    assert int(state.env_steps) == steps
    return env.spec, jax.device_get(state)


@pytest.mark.optimized
@pytest.mark.slow
def test_cartpole_learns_calibrated_values():
    """CartPole with gamma 0.9 and 1 reward a step: every state more than ~40 steps from a
    failure is worth 1 / (1 - gamma) = 10 (a time limit bootstraps), the start states of a
    policy that balances included. 20k env steps must balance well beyond random play
    (about 22) and put the mean return at the start states at 10 +- 0.5. A target projected
    after a one-atom shift (dz = 0.8) moves the fixed point by gamma^3 dz / (1 - gamma^3),
    about 2.2 (measured: 12.1 and 7.8): the policy still balances, the values do not pass.
    """
    config = _cartpole_rainbow(gamma=0.9, v_min=0.0, v_max=40.0)
    spec, state = _train(config, 20_480)
    stats = state.env.stats
    last = [(int(stats.episodes) - 1 - i) % stats.window for i in range(20)]
    returns = np.asarray(stats.recent_returns)[last]
    assert np.mean(returns) >= 100, returns
    starts = np.random.default_rng(0).uniform(-0.05, 0.05, (256, 4)).astype(np.float32)
    logits = dqn.network(config, spec).apply(state.agent.params, starts)
    q = np.asarray(dqn.q_values(config, logits)).max(axis=-1)
    np.testing.assert_allclose(q, 10.0, atol=0.5)

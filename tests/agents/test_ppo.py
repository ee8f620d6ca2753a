"""PPO: GAE and one minibatch step against NumPy and optax, minibatches and their
advantage normalization, the unclipped Gaussian action, the observation normalizer,
reward scaling, shapes, config errors, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _corruptible import cartpole_runs

from rljax import envs
from rljax.agents import ppo, ppo_loss, ppo_networks
from rljax.agents.base import RunLength
from rljax.records import configure
from rljax.types import Rollout

T, B = 6, 4
HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


@pytest.fixture(scope="module")
def specs():
    cartpole = envs.make("CartPole-v1", B, 0).spec
    pendulum = envs.make("Pendulum-v1", B, 0).spec
    frames = dataclasses.replace(cartpole, task_id="Breakout-v5", obs_shape=(4, 84, 84),
                                 obs_dtype=np.dtype(np.uint8), num_actions=4, is_atari=True)
    return {"discrete": cartpole, "continuous": pendulum, "frames": frames}


def _config(**kw):
    base = dict(num_envs=B, rollout_len=T, num_epochs=1, num_minibatches=1, hidden_sizes=(5,),
                gamma=0.9, gae_lambda=0.8, lr=1e-2, max_grad_norm=0.5, log_std_init=-0.3)
    return configure(ppo.PPOConfig, **{**base, **kw})


# --- NumPy references -------------------------------------------------------------------


def _mlp(tree, x, act):
    layers = tree["Torso_0"]["MLP_0"]
    for i in range(len(layers)):
        x = act(x @ layers[f"Dense_{i}"]["kernel"] + layers[f"Dense_{i}"]["bias"])
    return x @ tree["Dense_0"]["kernel"] + tree["Dense_0"]["bias"]


def _heads(xp, params, obs):
    """Policy head (logits or means) and values of separate tanh networks."""
    head = _mlp(params["actor"]["params"], obs, xp.tanh)
    value = _mlp(params["critic"]["params"]["Head_0"], obs, xp.tanh)[..., 0]
    return head, value


def _log_prob_entropy(xp, params, head, action, discrete):
    if discrete:
        shifted = head - xp.max(head, axis=-1, keepdims=True)
        logp = shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))
        onehot = np.arange(head.shape[-1]) == np.asarray(action)[..., None]
        return xp.sum(xp.where(onehot, logp, 0.0), axis=-1), -xp.sum(xp.exp(logp) * logp, -1)
    log_std = params["log_std"]
    z = (action - head) * xp.exp(-log_std)
    logp = xp.sum(-0.5 * z**2 - log_std - HALF_LOG_2PI, axis=-1)
    return logp, xp.sum(log_std + 0.5 + HALF_LOG_2PI) + 0.0 * logp


def _ref_gae(reward, term, trunc, values, gamma, lam):
    adv = np.zeros(reward.shape)
    for b in range(reward.shape[1]):
        a = 0.0
        for t in reversed(range(reward.shape[0])):
            delta = reward[t, b] + (0.0 if term[t, b] else gamma * values[t + 1, b]) - values[t, b]
            a = delta + (0.0 if term[t, b] or trunc[t, b] else gamma * lam * a)
            adv[t, b] = a
    return adv, adv + values[:-1]


def _masked_mean(xp, x, mask):
    return xp.sum(xp.where(mask, x, 0.0)) / max(int(np.sum(mask)), 1)


def _ref_loss(xp, cfg, params, obs, action, old_logp, old_v, adv, ret, mask, discrete):
    """PPO's minibatch loss written out, for NumPy (values) and jax.numpy (gradients)."""
    head, v = _heads(xp, params, obs)
    logp, ent = _log_prob_entropy(xp, params, head, action, discrete)
    if cfg.normalize_advantages:
        mean = adv[mask].mean()
        adv = (adv - mean) / (np.sqrt(((adv - mean)[mask] ** 2).mean()) + 1e-8)
    ratio = xp.exp(logp - old_logp)
    eps = cfg.clip_eps
    pg = _masked_mean(xp, -xp.minimum(ratio * adv, xp.clip(ratio, 1 - eps, 1 + eps) * adv),
                      mask)
    vl = (v - ret) ** 2
    if cfg.value_clip_eps is not None:
        clipped = old_v + xp.clip(v - old_v, -cfg.value_clip_eps, cfg.value_clip_eps)
        vl = xp.maximum(vl, (clipped - ret) ** 2)
    vloss = _masked_mean(xp, vl, mask)
    entropy = _masked_mean(xp, ent, mask)
    total = pg + cfg.value_coef * vloss - cfg.entropy_coef * entropy
    return total, {"policy_loss": pg, "value_loss": vloss, "entropy": entropy, "ratio": ratio,
                   "adv": adv,
                   "approx_kl": _masked_mean(xp, (ratio - 1) - xp.log(ratio), mask),
                   "clip_fraction": _masked_mean(xp, 1.0 * (abs(ratio - 1) > eps), mask)}


def _to_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


# --- rollouts -----------------------------------------------------------------------------


def _episode_flags(rng):
    """Terminations and truncations anywhere, each followed by a reset step."""
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    term[1, 0] = trunc[3, 1] = term[T - 1, 2] = trunc[0, 2] = True
    term[rng.integers(0, T), 3] = True
    valid = np.ones((T, B), bool)
    valid[1:][(term | trunc)[:-1]] = False
    return term, trunc, valid


def _rollout(spec, seed, extras=None, obs=None):
    rng = np.random.default_rng(seed)
    term, trunc, valid = _episode_flags(rng)
    if obs is None:
        obs = rng.normal(size=(T + 1, B) + spec.obs_shape)
    if spec.discrete:
        action = rng.integers(0, spec.num_actions, (T, B))
    else:
        raw = 2.5 * rng.normal(size=(T, B) + spec.action_shape)
        action = np.clip(raw, spec.action_low, spec.action_high)
        extras = {"raw_action": jnp.asarray(raw, jnp.float32), **(extras or {})}
    return Rollout(obs=jnp.asarray(obs, jnp.float32), action=jnp.asarray(action),
                   reward=jnp.asarray(rng.normal(size=(T, B)) * valid, jnp.float32),
                   terminated=jnp.asarray(term), truncated=jnp.asarray(trunc),
                   valid=jnp.asarray(valid), extras=extras)


def _acted_rollout(agent, state, spec, seed, obs=None):
    """A rollout whose actions and extras come from ``agent.act``, as in the loop."""
    rng = np.random.default_rng(seed)
    if obs is None:
        obs = rng.normal(size=(T + 1, B) + spec.obs_shape)
    obs = jnp.asarray(obs, jnp.float32)
    steps = [agent.act(state, obs[t], jax.random.key(100 + t), t, jnp.zeros(B, bool))
             for t in range(T)]
    stack = lambda *xs: jnp.stack(xs)
    action = stack(*[s[0] for s in steps])
    extras = jax.tree.map(stack, *[s[1] for s in steps])
    return _rollout(spec, seed, obs=obs)._replace(action=action, extras=extras)


# --- GAE ----------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_advantages_and_returns_match_numpy(specs, jit):
    cfg = _config()
    batch = _rollout(specs["discrete"], 0)
    values = np.random.default_rng(1).normal(size=(T + 1, B)).astype(np.float32)
    fn = ppo_loss.advantages_and_returns
    if jit:
        fn = jax.jit(fn, static_argnums=0)
    adv, ret = fn(cfg, batch.reward, batch, jnp.asarray(values))
    ref_adv, ref_ret = _ref_gae(np.asarray(batch.reward), np.asarray(batch.terminated),
                                np.asarray(batch.truncated), values, 0.9, 0.8)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


# --- one minibatch step -------------------------------------------------------------------

RATIOS = np.array([1.5, 0.6, 1.1, 0.9, 1.3, 0.7, 1.0, 2.0])


@pytest.mark.parametrize("kind,value_clip_eps", [("discrete", None), ("continuous", 0.05)])
def test_one_minibatch_step_matches_numpy_and_optax(specs, kind, value_clip_eps):
    spec, discrete = specs[kind], kind == "discrete"
    cfg = _config(value_clip_eps=value_clip_eps)
    agent = ppo.make_ppo(cfg, spec)
    state = agent.init(jax.random.key(0))
    params = _to_numpy(state.params)
    batch = _rollout(spec, 3)
    action = np.asarray(batch.action if discrete else batch.extras["raw_action"], np.float64)
    obs = np.asarray(batch.obs, np.float64)
    head, values = _heads(np, params, obs)
    logp, _ = _log_prob_entropy(np, params, head[:-1], action, discrete)
    # Rollout log-probs and values away from the current ones: ratios on both sides of
    # the clipping range, values on both sides of the value clipping range.
    old_logp = logp - np.log(RATIOS[np.arange(T * B) % len(RATIOS)].reshape(T, B))
    old_v = values[:-1] + np.where(np.arange(T * B).reshape(T, B) % 3 == 0, 0.3, -0.2)
    extras = dict(batch.extras or {}, log_prob=jnp.asarray(old_logp, jnp.float32),
                  value=jnp.asarray(old_v, jnp.float32))
    batch = batch._replace(extras=extras)
    old_logp, old_v = (np.asarray(extras[k], np.float64) for k in ("log_prob", "value"))

    values = np.concatenate([old_v, values[-1:]])
    mask = np.asarray(batch.valid)
    adv, ret = _ref_gae(np.asarray(batch.reward, np.float64), np.asarray(batch.terminated),
                        np.asarray(batch.truncated), values, cfg.gamma, cfg.gae_lambda)
    args = (obs[:-1], action, old_logp, old_v, adv, ret, mask, discrete)
    loss, ref = _ref_loss(np, cfg, params, *args)
    ratio, norm_adv = ref["ratio"], ref["adv"]
    if not discrete:
        # The reference takes the log-probs of the stored unclipped actions, which leave
        # the bounds: with the clipped (stepped) ones the losses would differ.
        raw_logp, _ = _log_prob_entropy(np, params, head[:-1], action, False)
        stepped, _ = _log_prob_entropy(np, params, head[:-1], np.asarray(batch.action), False)
        assert np.abs(raw_logp - stepped)[mask].max() > 0.1
    assert np.any(mask & (norm_adv > 0) & (ratio > 1 + cfg.clip_eps))
    assert np.any(mask & (norm_adv < 0) & (ratio < 1 - cfg.clip_eps))

    out = jax.jit(agent.update)(state, batch, jax.random.key(1))
    m = out.metrics
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        np.testing.assert_allclose(m[name], ref[name], rtol=2e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(m["loss"], loss, rtol=2e-4, atol=1e-6)

    # The step is optax's clipped Adam step on the same loss.
    f32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    grads = jax.jit(jax.grad(lambda p: _ref_loss(jnp, cfg, p, *args)[0]))(f32)
    tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                     optax.adam(cfg.lr, eps=cfg.adam_eps))
    updates, _ = tx.update(grads, tx.init(f32), f32)
    expected = optax.apply_updates(f32, updates)
    np.testing.assert_allclose(m["grad_norm"], optax.tree.norm(grads), rtol=1e-4)
    for got, want in zip(jax.tree.leaves(out.state.params), jax.tree.leaves(expected),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert int(out.state.step) == 1


# --- minibatches --------------------------------------------------------------------------


def _record_minibatches(monkeypatch):
    """Patches ``ppo.minibatch_loss`` to record every minibatch it is given, in order."""
    seen = []
    original = ppo.minibatch_loss

    def recording(config, spec, parts, params, minibatch):
        jax.debug.callback(lambda mb: seen.append(jax.tree.map(np.asarray, mb)), minibatch,
                           ordered=True)
        return original(config, spec, parts, params, minibatch)

    monkeypatch.setattr(ppo, "minibatch_loss", recording)
    return seen


def test_each_sample_once_per_epoch_and_advantages_normalized_per_minibatch(specs,
                                                                           monkeypatch):
    spec = specs["discrete"]
    # A negligible step size keeps the parameters (so the reference losses) fixed.
    cfg = _config(num_epochs=2, num_minibatches=3, lr=1e-12, max_grad_norm=None)
    agent = ppo.make_ppo(cfg, spec)
    state = agent.init(jax.random.key(0))
    batch = _acted_rollout(agent, state, spec, 5)
    data, _ = ppo.samples(cfg, spec, ppo.parts(cfg, spec), state, batch)
    seen = _record_minibatches(monkeypatch)
    m = agent.update(state, batch, jax.random.key(2)).metrics
    assert len(seen) == cfg.num_epochs * cfg.num_minibatches
    flat_obs = np.asarray(data.obs).reshape(T * B, -1)
    orders = []
    for epoch in range(cfg.num_epochs):
        mbs = seen[epoch * cfg.num_minibatches:(epoch + 1) * cfg.num_minibatches]
        assert all(mb.obs.shape == (T * B // cfg.num_minibatches, 4) for mb in mbs)
        obs = np.concatenate([mb.obs for mb in mbs])
        ids = np.array([np.flatnonzero((flat_obs == o).all(-1))[0] for o in obs])
        np.testing.assert_array_equal(np.sort(ids), np.arange(T * B))
        orders.append(ids)
        # Each sample's fields travel together.
        for field in ("action", "log_prob", "value", "advantage", "target", "valid"):
            got = np.concatenate([getattr(mb, field) for mb in mbs])
            np.testing.assert_array_equal(got, np.asarray(getattr(data, field)).reshape(-1)[ids])
    assert not np.array_equal(orders[0], orders[1])  # a fresh shuffle per epoch

    # Advantages are standardized with each minibatch's own statistics.
    params = _to_numpy(state.params)

    def policy_loss(config, mb):
        return _ref_loss(np, config, params, mb.obs, mb.action, mb.log_prob, mb.value,
                         mb.advantage, mb.target, mb.valid, True)[1]["policy_loss"]

    per_minibatch = np.mean([policy_loss(cfg, mb) for mb in seen])
    np.testing.assert_allclose(m["policy_loss"], per_minibatch, rtol=1e-4, atol=1e-7)
    # Standardizing with the whole batch's statistics would give another loss.
    adv, valid = np.asarray(data.advantage), np.asarray(data.valid)
    mean, std = adv[valid].mean(), adv[valid].std()
    plain = dataclasses.replace(cfg, normalize_advantages=False)
    whole = np.mean([policy_loss(plain, mb._replace(advantage=(mb.advantage - mean) / std))
                     for mb in seen])
    assert abs(whole - per_minibatch) > 1e-4


def test_minibatch_loss_normalization_ignores_scale_shift_and_reset_steps(specs):
    spec = specs["discrete"]
    cfg = _config()
    state = ppo.make_ppo(cfg, spec).init(jax.random.key(0))
    rng = np.random.default_rng(4)
    n = 16
    valid = rng.random(n) < 0.7
    mb = ppo_loss.Samples(obs=jnp.asarray(rng.normal(size=(n, 4)), jnp.float32),
                          action=jnp.asarray(rng.integers(0, 2, n)),
                          log_prob=jnp.asarray(np.log(0.5) + 0.3 * rng.normal(size=n),
                                               jnp.float32),
                          value=jnp.zeros(n),
                          advantage=jnp.asarray(rng.normal(size=n), jnp.float32),
                          target=jnp.zeros(n), valid=jnp.asarray(valid))
    loss = lambda c, x: ppo.minibatch_loss(c, spec, ppo.parts(c, spec), state.params,
                                           x)[1]["policy_loss"]
    base = loss(cfg, mb)
    moved = mb._replace(advantage=jnp.where(valid, 3.0 * mb.advantage + 5.0, 1e6))
    np.testing.assert_allclose(loss(cfg, moved), base, rtol=1e-5)
    plain = dataclasses.replace(cfg, normalize_advantages=False)
    assert abs(float(loss(plain, moved)) - float(base)) > 1e-2


# --- continuous actions ---------------------------------------------------------------------


def test_gaussian_actions_are_clipped_but_the_unclipped_action_is_kept(specs):
    spec = specs["continuous"]
    cfg = _config(log_std_init=1.5)
    agent = ppo.make_ppo(cfg, spec)
    state = agent.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(64, 3)), jnp.float32)
    action, extras, _ = agent.act(state, obs, jax.random.key(1), 0, jnp.zeros(64, bool))
    raw = np.asarray(extras["raw_action"])
    assert np.abs(raw).max() > 2.0  # std e^1.5: some actions leave [-2, 2]
    np.testing.assert_array_equal(action, np.clip(raw, -2.0, 2.0))
    params = _to_numpy(state.params)
    mean, value = _heads(np, params, np.asarray(obs, np.float64))
    logp, _ = _log_prob_entropy(np, params, mean, raw, False)
    np.testing.assert_allclose(extras["log_prob"], logp, rtol=1e-5)
    np.testing.assert_allclose(extras["value"], value, rtol=1e-5, atol=1e-6)

    # The update learns from the unclipped action too: see
    # test_one_minibatch_step_matches_numpy_and_optax[continuous-0.05].


# --- normalization ----------------------------------------------------------------------------


def test_obs_statistics_are_those_of_the_valid_observations(specs):
    spec = specs["discrete"]
    cfg = _config(normalize_obs=True)
    agent = ppo.make_ppo(cfg, spec)
    state = agent.init(jax.random.key(0))
    rng = np.random.default_rng(8)
    seen, update = [], jax.jit(agent.update)
    for seed in (0, 1):
        obs = rng.normal([1.0, -2.0, 3.0, 0.5], [0.1, 2.0, 5.0, 1.0], size=(T + 1, B, 4))
        batch = _acted_rollout(agent, state, spec, seed, obs=obs)
        valid = np.asarray(batch.valid)
        # Reset steps' observations do not count.
        obs[:-1][~valid] = 1e6
        batch = batch._replace(obs=jnp.asarray(obs, jnp.float32))
        out = update(state, batch, jax.random.key(seed))
        if seed == 1:
            # The rollout was acted on with the statistics of the first update, and is
            # learned from with them: the ratio starts at 1.
            np.testing.assert_allclose(out.metrics["approx_kl"], 0.0, atol=1e-6)
        state = out.state
        seen.append(np.asarray(batch.obs[:-1], np.float64)[valid])
        everything = np.concatenate(seen)
        np.testing.assert_allclose(state.obs_stats.mean, everything.mean(0), rtol=1e-5)
        np.testing.assert_allclose(state.obs_stats.var, everything.var(0), rtol=1e-4)
        assert int(state.obs_stats.count) == len(everything)

    # act and policy standardize with the statistics.
    obs = jnp.asarray(rng.normal(size=(B, 4)) * 3, jnp.float32)
    stats = state.obs_stats
    normalized = np.clip((np.asarray(obs) - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10)
    plain = dataclasses.replace(cfg, normalize_obs=False)
    params = agent.params(state)
    np.testing.assert_array_equal(
        agent.policy(params, obs),
        ppo.policy(plain, spec, ppo.parts(plain, spec), {"net": params["net"], "obs_stats": None},
                   jnp.asarray(normalized, jnp.float32)))
    _, extras, _ = agent.act(state, obs, jax.random.key(0), 0, jnp.zeros(B, bool))
    _, value = _heads(np, _to_numpy(state.params), normalized)
    np.testing.assert_allclose(extras["value"], value, rtol=1e-4, atol=1e-5)


def test_rewards_are_scaled_by_the_running_return_std(specs):
    spec = specs["discrete"]
    cfg = _config(reward_scaling=True)
    agent = ppo.make_ppo(cfg, spec)
    state = agent.init(jax.random.key(0))
    batch = _acted_rollout(agent, state, spec, 9)
    reward, term, trunc, valid = (np.asarray(x) for x in (
        batch.reward, batch.terminated, batch.truncated, batch.valid))
    ret, seen, scaled = np.zeros(B), [], np.zeros((T, B))
    for t in range(T):
        ret = np.where(valid[t], cfg.gamma * ret + reward[t], ret)
        seen += list(ret[valid[t]])
        scaled[t] = np.clip(reward[t] / np.sqrt(np.var(seen) + 1e-8), -10, 10)
        ret = np.where(term[t] | trunc[t], 0.0, ret)
    data, scaler = ppo.samples(cfg, spec, ppo.parts(cfg, spec), state, batch)
    np.testing.assert_allclose(scaler.ret, ret, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scaler.stats.var, np.var(seen), rtol=1e-4)
    _, last_value = _heads(np, _to_numpy(state.params), np.asarray(batch.obs[-1], np.float64))
    values = np.concatenate([np.asarray(batch.extras["value"]), last_value[None]])
    adv, _ = _ref_gae(scaled, term, trunc, values, cfg.gamma, cfg.gae_lambda)
    np.testing.assert_allclose(np.where(valid, data.advantage, 0), np.where(valid, adv, 0),
                               rtol=1e-4, atol=1e-5)
    out = agent.update(state, batch, jax.random.key(0))
    np.testing.assert_allclose(out.state.reward_scaler.ret, ret, rtol=1e-5, atol=1e-6)


# --- acting, shapes, config ---------------------------------------------------------------------


@pytest.mark.parametrize("kind,shared", [("discrete", False), ("discrete", True),
                                         ("continuous", False), ("continuous", True)])
def test_act_and_policy_values_shapes_and_dtypes(specs, kind, shared):
    spec = specs[kind]
    agent = ppo.make_ppo(_config(shared_torso=shared), spec)
    state = agent.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(B,) + spec.obs_shape), jnp.float32)
    action, extras, new_state = jax.jit(agent.act)(state, obs, jax.random.key(1), 0,
                                                   jnp.zeros(B, bool))
    greedy = agent.policy(agent.params(state), obs)
    assert extras["log_prob"].shape == extras["value"].shape == (B,)
    assert extras["log_prob"].dtype == extras["value"].dtype == jnp.float32
    assert np.all(np.isfinite(extras["log_prob"])) and np.all(np.isfinite(extras["value"]))
    if spec.discrete:
        assert action.shape == greedy.shape == (B,)
        assert action.dtype == greedy.dtype == jnp.int32
        assert set(extras) == {"log_prob", "value"}
        assert np.all((np.asarray(action) >= 0) & (np.asarray(action) < spec.num_actions))
    else:
        assert action.shape == greedy.shape == extras["raw_action"].shape == (B, 1)
        assert action.dtype == greedy.dtype == jnp.float32
        assert np.all(np.abs(np.asarray(greedy)) <= 2.0)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)


def test_frames_get_the_nature_cnn(specs):
    # Abstract evaluation only: shapes and dtypes without compiling the CNN.
    spec = specs["frames"]
    agent = ppo.make_ppo(_config(shared_torso=True), spec)
    state = jax.eval_shape(agent.init, jax.random.key(0))
    torso = state.params["actor_critic"]["params"]["Torso_0"]
    assert "NatureCNN_0" in torso and "MLP_0" not in torso
    obs = jax.ShapeDtypeStruct((B,) + spec.obs_shape, jnp.uint8)
    action, extras, _ = jax.eval_shape(agent.act, state, obs, jax.random.key(1), 0,
                                       jnp.zeros(B, bool))
    greedy = jax.eval_shape(agent.policy, agent.params(state), obs)
    assert action.shape == greedy.shape == (B,) and action.dtype == greedy.dtype == jnp.int32
    assert extras["log_prob"].shape == extras["value"].shape == (B,)


def test_config_errors_name_field_and_value(specs):
    with pytest.raises(ValueError, match="num_epochs must be an integer >= 1, got 0"):
        ppo.PPOConfig(num_epochs=0)
    with pytest.raises(ValueError, match=r"num_minibatches must divide .* = 512, got 3"):
        ppo.PPOConfig(num_minibatches=3)
    with pytest.raises(ValueError, match=r"clip_eps must be a number in \(0.0, 1.0\], got 0"):
        ppo.PPOConfig(clip_eps=0)
    with pytest.raises(ValueError, match="anneal_lr needs the run's length"):
        ppo.make_ppo(ppo.PPOConfig(anneal_lr=True), specs["discrete"])
    with pytest.raises(ValueError, match="activation must be one of"):
        ppo.PPOConfig(activation="rleu")
    with pytest.raises(ValueError, match="normalize_obs .* Breakout-v5"):
        ppo.make_ppo(ppo.PPOConfig(normalize_obs=True), specs["frames"])


def test_learning_rate_anneals_linearly_per_update():
    cfg = _config(lr=1e-3, anneal_lr=True, num_epochs=2, num_minibatches=3)
    lr = ppo_networks.learning_rate(cfg, RunLength(updates=10, schedule_updates=10))
    steps = jnp.arange(0, 70)
    expected = 1e-3 * np.maximum(1 - (np.arange(70) // 6) / 10, 0)
    np.testing.assert_allclose(jax.jit(jax.vmap(lr))(steps), expected, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(ppo_networks.learning_rate(_config(lr=1e-3), None)(50), 1e-3)


# --- learning -------------------------------------------------------------------------------------

CARTPOLE = ppo.PPOConfig()


@pytest.mark.optimized
@pytest.mark.slow
def test_ppo_solves_cartpole_and_a_flipped_surrogate_does_not():
    (solved_at, best), (flipped_solved_at, flipped_best) = cartpole_runs(
        ppo.make_ppo, CARTPOLE, 0, [(False, 500_000), (True, 100_000)],
        ppo_loss.losses, "clipped_surrogate_loss")
    assert 0 <= solved_at <= 500_000, best
    assert flipped_solved_at < 0 and flipped_best < 50, flipped_best

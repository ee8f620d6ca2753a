"""PQN: Q(lambda) targets and one minibatch step against NumPy and optax, epsilon
schedule, LayerNorm in the network, shapes, config errors, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _corruptible import cartpole_runs

from rljax import envs
from rljax.agents import pqn, pqn_core
from rljax.agents.base import RunLength
from rljax.losses import q_lambda_returns
from rljax.records import configure
from rljax.types import Rollout, valid_mask

T, B = 7, 4


@pytest.fixture(scope="module")
def specs():
    cartpole = envs.make("CartPole-v1", B, 0).spec
    frames = dataclasses.replace(cartpole, task_id="Breakout-v5", obs_shape=(4, 84, 84),
                                 obs_dtype=np.dtype(np.uint8), num_actions=4, is_atari=True)
    return {"discrete": cartpole, "frames": frames}


def _config(**kw):
    base = dict(num_envs=B, rollout_len=T, num_epochs=1, num_minibatches=1, hidden_sizes=(5, 3),
                gamma=0.9, q_lambda=0.7, reward_scale=0.5, lr=1e-2, max_grad_norm=0.5)
    return configure(pqn.PQNConfig, **{**base, **kw})


def _np_q(xp, params, obs):
    """The LayerNorm MLP Q-network written out (flax's LayerNorm: eps 1e-6)."""
    torso = params["params"]["torso"]
    x = obs
    for i in range(len([k for k in torso if k.startswith("Dense")])):
        h = x @ torso[f"Dense_{i}"]["kernel"] + torso[f"Dense_{i}"]["bias"]
        mean = h.mean(-1, keepdims=True)
        var = ((h - mean) ** 2).mean(-1, keepdims=True)
        ln = torso[f"LayerNorm_{i}"]
        x = xp.maximum((h - mean) / xp.sqrt(var + 1e-6) * ln["scale"] + ln["bias"], 0.0)
    head = params["params"]["q"]
    return x @ head["kernel"] + head["bias"]


def _ref_targets(reward, term, trunc, q_next, gamma, lam):
    """Peng's Q(lambda) over each env's rollout, one Python loop."""
    g = np.zeros(reward.shape)
    for b in range(reward.shape[1]):
        nxt = 0.0
        for t in reversed(range(reward.shape[0])):
            v = q_next[t, b].max()
            if term[t, b]:
                nxt = reward[t, b]
            elif trunc[t, b] or t == reward.shape[0] - 1:
                nxt = reward[t, b] + gamma * v
            else:
                nxt = reward[t, b] + gamma * ((1 - lam) * v + lam * nxt)
            g[t, b] = nxt
    return g


def _rollout(seed):
    """Terminations and truncations anywhere, each followed by a reset step."""
    rng = np.random.default_rng(seed)
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    term[1, 0] = trunc[3, 1] = term[T - 1, 2] = trunc[0, 2] = True
    term[rng.integers(0, T), 3] = True
    valid = np.ones((T, B), bool)
    valid[1:][(term | trunc)[:-1]] = False
    return Rollout(obs=jnp.asarray(rng.normal(size=(T + 1, B, 4)), jnp.float32),
                   action=jnp.asarray(rng.integers(0, 2, (T, B)), jnp.int32),
                   reward=jnp.asarray(rng.normal(size=(T, B)) * valid, jnp.float32),
                   terminated=jnp.asarray(term), truncated=jnp.asarray(trunc),
                   valid=jnp.asarray(valid), extras={})


def _to_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


@pytest.mark.parametrize("jit", [False, True])
def test_targets_are_q_lambda_returns_over_the_rollout(specs, jit):
    spec = specs["discrete"]
    cfg = _config()
    state = pqn.make_pqn(cfg, spec).init(jax.random.key(0))
    batch = _rollout(1)
    fn = jax.jit(pqn.targets, static_argnums=(0, 1)) if jit else pqn.targets
    got = fn(cfg, pqn.network(cfg, spec), state.params, batch)
    q_next = _np_q(np, _to_numpy(state.params), np.asarray(batch.obs[1:], np.float64))
    reward, term, trunc = (np.asarray(x) for x in (batch.reward, batch.terminated,
                                                   batch.truncated))
    ref = _ref_targets(0.5 * reward, term, trunc, q_next, 0.9, 0.7)
    valid = np.asarray(batch.valid)
    np.testing.assert_allclose(np.where(valid, got, 0), np.where(valid, ref, 0), rtol=1e-5,
                               atol=1e-5)
    # The same from the greedy values recorded when acting (the network then runs on the
    # last observation only).
    net = pqn.network(cfg, spec)
    recorded = batch._replace(extras={"q_max": jnp.max(net.apply(state.params, batch.obs[:-1]),
                                                       axis=-1)})
    np.testing.assert_allclose(np.where(valid, fn(cfg, net, state.params, recorded), 0),
                               np.where(valid, ref, 0), rtol=1e-5, atol=1e-5)
    # ... which is the core function over each env.
    core = jax.vmap(lambda r, d, e, q: q_lambda_returns(r, d, e, q, 0.7), in_axes=1,
                    out_axes=1)(0.5 * reward, 0.9 * (1.0 - term), term | trunc,
                                q_next.astype(np.float32))
    np.testing.assert_allclose(got, core, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["radam", "adam"])
def test_one_minibatch_step_matches_numpy_and_optax(specs, optimizer):
    spec = specs["discrete"]
    cfg = _config(optimizer=optimizer)
    agent = pqn.make_pqn(cfg, spec)
    state = agent.init(jax.random.key(2))
    batch = _rollout(3)
    params = _to_numpy(state.params)
    obs = np.asarray(batch.obs, np.float64)
    reward, term, trunc = (np.asarray(x) for x in (batch.reward, batch.terminated,
                                                   batch.truncated))
    target = _ref_targets(0.5 * reward, term, trunc, _np_q(np, params, obs[1:]), 0.9, 0.7)
    action, valid = np.asarray(batch.action), np.asarray(batch.valid)
    onehot = np.arange(2) == action[..., None]

    def ref_loss(xp, p):
        q_a = xp.sum(xp.where(onehot, _np_q(xp, p, obs[:-1]), 0.0), axis=-1)
        return xp.sum(xp.where(valid, 0.5 * (q_a - target) ** 2, 0.0)) / valid.sum()

    out = jax.jit(agent.update)(state, batch, jax.random.key(4))
    np.testing.assert_allclose(out.metrics["loss"], ref_loss(np, params), rtol=1e-4)
    np.testing.assert_allclose(out.metrics["target_mean"], target[valid].mean(), rtol=1e-4)

    f32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    grads = jax.jit(jax.grad(lambda p: ref_loss(jnp, p)))(f32)
    make = optax.radam if optimizer == "radam" else optax.adam
    tx = optax.chain(optax.clip_by_global_norm(0.5), make(1e-2, eps=cfg.adam_eps))
    updates, _ = tx.update(grads, tx.init(f32), f32)
    expected = optax.apply_updates(f32, updates)
    np.testing.assert_allclose(out.metrics["grad_norm"], optax.tree.norm(grads), rtol=1e-4)
    for got, want in zip(jax.tree.leaves(out.state.params), jax.tree.leaves(expected),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert int(out.state.step) == 1


def test_reset_steps_do_not_enter_the_loss(specs):
    spec = specs["discrete"]
    cfg = _config()
    state = pqn.make_pqn(cfg, spec).init(jax.random.key(0))
    batch = _rollout(5)
    net = pqn.network(cfg, spec)
    data = pqn.Samples(obs=batch.obs[:-1], action=batch.action,
                       target=pqn.targets(cfg, net, state.params, batch), valid=batch.valid)
    loss = lambda d: pqn.minibatch_loss(net, state.params, d)[0]
    invalid = ~np.asarray(batch.valid)
    changed = data._replace(action=jnp.where(invalid, 1 - data.action, data.action),
                            target=jnp.where(invalid, 1e6, data.target))
    np.testing.assert_allclose(loss(changed), loss(data), rtol=1e-6)


def test_rollouts_without_reset_steps_take_plain_means(specs):
    """A rollout that keeps final observations (an env resetting within the step) has no
    reset steps: the loss drops the mask, and the update equals the masked one's."""
    spec = specs["discrete"]
    cfg = _config()
    agent = pqn.make_pqn(cfg, spec)
    state = agent.init(jax.random.key(0))
    batch = _rollout(5)
    native = batch._replace(valid=jnp.ones_like(batch.valid), final_obs=batch.obs[1:])
    assert valid_mask(native) is None and valid_mask(batch) is batch.valid
    masked = pqn.update(cfg, pqn.Parts(pqn.network(cfg, spec), pqn.optimizer(cfg)), state,
                        native._replace(final_obs=None), jax.random.key(1))
    plain = agent.update(state, native, jax.random.key(1))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
                 plain.state.params, masked.state.params)
    np.testing.assert_allclose(plain.metrics["loss"], masked.metrics["loss"], rtol=1e-6)


def test_epsilon_follows_its_schedule_in_updates(specs):
    spec = specs["discrete"]
    agent = pqn.make_pqn(_config(epsilon=((0, 1.0), (10, 0.0))), spec)
    state = agent.init(jax.random.key(0))
    n = 4000
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(n, 4)), jnp.float32)
    greedy = np.asarray(agent.policy(agent.params(state), obs))
    act = jax.jit(agent.act)
    for step, epsilon in ((0, 1.0), (5, 0.5), (10, 0.0), (20, 0.0)):
        action, extras, new_state = act(state, obs, jax.random.key(step), step,
                                        jnp.zeros(n, bool))
        assert action.dtype == jnp.int32 and action.shape == (n,)
        # The greedy value of each observation, recorded for the targets' bootstraps.
        np.testing.assert_allclose(extras["q_max"], np.max(np.asarray(pqn.network(
            _config(), spec).apply(state.params, obs)), axis=-1), rtol=1e-3, atol=1e-3)
        # A random action is the greedy one half the time (two actions).
        np.testing.assert_allclose(np.mean(np.asarray(action) != greedy), epsilon / 2,
                                   atol=0.03)
        assert int(new_state.update_step) == step


def test_layer_norm_before_every_hidden_nonlinearity(specs):
    spec = specs["discrete"]
    agent = pqn.make_pqn(_config(hidden_sizes=(8, 8)), spec)
    params = agent.init(jax.random.key(0)).params
    torso = params["params"]["torso"]
    assert sorted(torso) == ["Dense_0", "Dense_1", "LayerNorm_0", "LayerNorm_1"]
    obs = np.random.default_rng(0).normal(size=(5, 4)) * 100
    np.testing.assert_allclose(pqn.network(_config(hidden_sizes=(8, 8)), spec).apply(
        params, jnp.asarray(obs, jnp.float32)), _np_q(np, _to_numpy(params), obs), rtol=1e-4,
        atol=1e-4)
    without = jax.eval_shape(pqn.make_pqn(_config(layer_norm=False), spec).init,
                             jax.random.key(0)).params
    assert not any("LayerNorm" in k for k in without["params"]["torso"])
    # Frames: the Nature CNN with a norm after each conv and after its dense layer.
    frames = jax.eval_shape(pqn.make_pqn(_config(), specs["frames"]).init, jax.random.key(0))
    cnn = frames.params["params"]["torso"]
    assert sorted(k for k in cnn if k.startswith("LayerNorm")) == [
        f"LayerNorm_{i}" for i in range(4)]
    assert cnn["LayerNorm_0"]["scale"].shape == (32,)
    assert cnn["LayerNorm_3"]["scale"].shape == (512,)


def test_frames_act_and_policy_shapes(specs):
    spec = specs["frames"]
    agent = pqn.make_pqn(_config(), spec)
    state = jax.eval_shape(agent.init, jax.random.key(0))
    obs = jax.ShapeDtypeStruct((B,) + spec.obs_shape, jnp.uint8)
    action, extras, _ = jax.eval_shape(agent.act, state, obs, jax.random.key(1), 3,
                                       jnp.zeros(B, bool))
    greedy = jax.eval_shape(agent.policy, agent.params(state), obs)
    assert action.shape == greedy.shape == (B,) and action.dtype == greedy.dtype == jnp.int32
    assert {k: (v.shape, v.dtype) for k, v in extras.items()} == {
        "q_max": ((B,), jnp.float32)}


def test_config_errors_name_field_and_value():
    with pytest.raises(ValueError, match="q_lambda must be a number in"):
        pqn.PQNConfig(q_lambda=1.5)
    with pytest.raises(ValueError, match="optimizer must be one of radam, adam, got 'sgd'"):
        pqn.PQNConfig(optimizer="sgd")
    with pytest.raises(ValueError, match=r"num_minibatches must divide .* = 512, got 5"):
        pqn.PQNConfig(num_minibatches=5)
    with pytest.raises(ValueError, match="epsilon must be a schedule"):
        pqn.PQNConfig(epsilon=((5, 1.0),))
    with pytest.raises(ValueError, match="anneal_lr needs the run's length"):
        pqn.make_pqn(pqn.PQNConfig(anneal_lr=True), envs.make("CartPole-v1", 4).spec)
    with pytest.raises(ValueError, match=r"lr_factor values must be numbers in \[0.0, "):
        pqn.PQNConfig(lr_factor=((0, 1.0), (10, -0.5)))
    with pytest.raises(ValueError, match="lr_factor must be a schedule") as e:
        pqn.PQNConfig(lr_factor=((3, 1.0),))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("anneal", [False, True])
def test_lr_factor_times_the_rate_per_loop_update(specs, anneal):
    """lr_factor is in loop updates (4 minibatch steps each here), holds its last value
    past its last update and multiplies the annealed rate: against np.interp; a factor
    of 0 leaves the parameters where they are."""
    points = ((0, 1.0), (4, 1.0), (10, 0.05))
    cfg = _config(lr=1e-3, anneal_lr=anneal, num_epochs=2, num_minibatches=2, lr_factor=points)
    lr = pqn_core.learning_rate(cfg, RunLength(updates=20, schedule_updates=20))
    update = np.array([0, 3, 4, 5, 7, 9, 10, 11, 19, 25])
    count = update * 4 + np.arange(len(update)) % 4  # a step inside each update
    expected = 1e-3 * np.interp(update, *zip(*points, strict=True))
    if anneal:
        expected *= np.maximum(1 - update / 20, 0)
    np.testing.assert_allclose(jax.jit(jax.vmap(lr))(jnp.asarray(count)), expected,
                               rtol=1e-6, atol=1e-12)
    frozen = pqn.make_pqn(_config(lr_factor=((0, 0.0),)), specs["discrete"])
    state = frozen.init(jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal,
                 frozen.update(state, _rollout(2), jax.random.key(1)).state.params, state.params)


def test_continuous_actions_refused():
    spec = envs.make("Pendulum-v1", num_envs=1).spec
    with pytest.raises(ValueError, match="discrete action space.*Pendulum-v1"):
        pqn.make_pqn(pqn.PQNConfig(), spec)


# --- learning -------------------------------------------------------------------------------

CARTPOLE = pqn.PQNConfig()


@pytest.mark.optimized
@pytest.mark.slow
def test_pqn_solves_cartpole_and_negated_targets_do_not():
    # Negated: Q regressed on -G, so the greedy action is the worst one. (CartPole's
    # constant reward makes Q(lambda) forgiving: targets one step late still solve it, since
    # the gamma * lambda * G_{t+1} part of G_t carries the consequence of a_t.)
    (solved_at, best), (negated_solved_at, negated_best) = cartpole_runs(
        pqn.make_pqn, CARTPOLE, 0, [(False, 500_000), (True, 100_000)],
        pqn.losses, "q_lambda_returns")
    assert 0 <= solved_at <= 500_000, best
    assert negated_solved_at < 0 and negated_best < 100, negated_best

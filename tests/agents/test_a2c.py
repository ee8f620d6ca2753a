"""A2C: targets against NumPy, masking of reset steps, config errors, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _corruptible import negated_where, with_flag
from _trees import assert_trees_close

from rljax import envs
from rljax.agents import a2c
from rljax.envs.stats import recent_mean_return
from rljax.loops.on_policy import make_on_policy_trainer
from rljax.records import configure
from rljax.types import Rollout

T, B = 6, 3


@pytest.fixture(scope="module")
def cartpole_spec():
    return envs.make("CartPole-v1", num_envs=B, seed=0).spec


def _rollout(seed):
    """A rollout with terminations, truncations and the reset steps that follow them."""
    rng = np.random.default_rng(seed)
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    term[1, 0] = True
    trunc[3, 1] = True
    term[T - 1, 2] = True
    trunc[0, 2] = True
    valid = np.ones((T, B), bool)
    ends = term | trunc
    valid[1:][ends[:-1]] = False
    reward = rng.normal(size=(T, B)).astype(np.float32) * valid
    return Rollout(
        obs=jnp.asarray(rng.normal(size=(T + 1, B, 4)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, (T, B)), jnp.int32),
        reward=jnp.asarray(reward), terminated=jnp.asarray(term),
        truncated=jnp.asarray(trunc), valid=jnp.asarray(valid))


def _ref_targets(batch, values, gamma, lam):
    r, term, trunc = (np.asarray(x) for x in (batch.reward, batch.terminated, batch.truncated))
    values = np.asarray(values)
    adv = np.zeros((T, B))
    ret = np.zeros((T, B))
    for b in range(B):
        g, a = values[T, b], 0.0
        for t in reversed(range(T)):
            v_next = values[t + 1, b]
            if lam is None:
                if term[t, b]:
                    g = r[t, b]
                elif trunc[t, b]:
                    g = r[t, b] + gamma * v_next
                else:
                    g = r[t, b] + gamma * g
                ret[t, b], adv[t, b] = g, g - values[t, b]
            else:
                delta = r[t, b] + (0.0 if term[t, b] else gamma * v_next) - values[t, b]
                a = delta + (0.0 if term[t, b] or trunc[t, b] else gamma * lam * a)
                adv[t, b], ret[t, b] = a, a + values[t, b]
    return adv, ret


@pytest.mark.parametrize("lam", [None, 0.95])
@pytest.mark.parametrize("jit", [False, True])
def test_advantages_and_returns_match_numpy(lam, jit):
    cfg = a2c.A2CConfig(gamma=0.9, gae_lambda=lam)
    batch = _rollout(0)
    values = jnp.asarray(np.random.default_rng(1).normal(size=(T + 1, B)), jnp.float32)
    fn = a2c.advantages_and_returns
    if jit:
        fn = jax.jit(fn, static_argnums=0)
    adv, ret = fn(cfg, batch, values)
    ref_adv, ref_ret = _ref_targets(batch, values, 0.9, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_loss_ignores_reset_steps(cartpole_spec):
    cfg = a2c.A2CConfig()
    agent = a2c.make_a2c(cfg, cartpole_spec)
    state = agent.init(jax.random.key(0))
    batch = _rollout(2)
    loss0, _ = a2c.loss(cfg, a2c.parts(cfg, cartpole_spec), state.params, batch)
    # Changing what happens on reset steps (actions, obs there are ignored by envpool)
    # must not change the loss.
    invalid = ~np.asarray(batch.valid)
    action = np.where(invalid, 1 - np.asarray(batch.action), np.asarray(batch.action))
    flipped = batch._replace(action=jnp.asarray(action))
    loss1, _ = a2c.loss(cfg, a2c.parts(cfg, cartpole_spec), state.params, flipped)
    np.testing.assert_allclose(loss0, loss1, rtol=1e-6)


# A floor of 100 is above these advantages' spread: they are centred, not scaled up.
@pytest.mark.parametrize("floor", [0.0, 100.0])
def test_normalized_advantage_policy_loss_matches_numpy(cartpole_spec, floor):
    cfg = a2c.A2CConfig(entropy_coef=0.0, advantage_std_floor=floor)
    agent = a2c.make_a2c(cfg, cartpole_spec)
    state = agent.init(jax.random.key(3))
    batch = _rollout(4)
    _, m = a2c.loss(cfg, a2c.parts(cfg, cartpole_spec), state.params, batch)
    net = a2c.parts(cfg, cartpole_spec)
    logits = np.asarray(net.actor.apply(state.params["actor"], batch.obs[:-1]), np.float64)
    values = np.asarray(net.critic.apply(state.params["critic"], batch.obs), np.float64)
    adv, ret = _ref_targets(batch, values, cfg.gamma, None)
    mask = np.asarray(batch.valid)
    a = adv[mask]
    assert floor == 0.0 or a.std() < floor
    a = (a - a.mean()) / (max(a.std(), floor) + 1e-8)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    chosen = np.take_along_axis(logp, np.asarray(batch.action)[..., None], -1)[..., 0][mask]
    np.testing.assert_allclose(m["policy_loss"], -(chosen * a).mean(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["value_loss"], ((ret - values[:-1])[mask] ** 2).mean(),
                               rtol=1e-4)


def test_logit_penalty_adds_the_mean_squared_centred_logit(cartpole_spec):
    cfg = a2c.A2CConfig(logit_penalty=0.5)
    plain = a2c.A2CConfig()
    state = a2c.make_a2c(cfg, cartpole_spec).init(jax.random.key(5))
    batch = _rollout(6)
    with_penalty, m = a2c.loss(cfg, a2c.parts(cfg, cartpole_spec), state.params, batch)
    without, _ = a2c.loss(plain, a2c.parts(plain, cartpole_spec), state.params, batch)
    net = a2c.parts(cfg, cartpole_spec)
    logits = np.asarray(net.actor.apply(state.params["actor"], batch.obs[:-1]), np.float64)
    centred = logits - logits.mean(-1, keepdims=True)
    squared = (centred ** 2).mean(-1)[np.asarray(batch.valid)].mean()
    np.testing.assert_allclose(m["logit_sq"], squared, rtol=1e-5)
    np.testing.assert_allclose(with_penalty - without, 0.5 * squared, rtol=1e-4, atol=1e-6)


def test_lr_factor_scales_both_learning_rates_per_update(cartpole_spec):
    """Factor 0.25 at update 0 is a quarter of both learning rates; factor 0 from update 1
    on leaves the parameters where they are."""
    batch = _rollout(7)
    quarter = a2c.make_a2c(a2c.A2CConfig(actor_lr=5e-4 / 4, critic_lr=7e-4 / 4), cartpole_spec)
    scaled = a2c.make_a2c(a2c.A2CConfig(lr_factor=((0, 0.25), (1, 0.0))), cartpole_spec)
    key = jax.random.key(2)  # the same parameters, each its own Adam state
    one = scaled.update(scaled.init(key), batch, key).state
    assert_trees_close(one.params, quarter.update(quarter.init(key), batch, key).state.params,
                       rtol=1e-5, atol=1e-8)
    assert_trees_close(scaled.update(one, batch, jax.random.key(1)).state.params, one.params)


def test_config_errors_name_field_and_value():
    with pytest.raises(ValueError, match="rollout_len must be an integer >= 1, got 0"):
        configure(a2c.A2CConfig, rollout_len=0)
    with pytest.raises(ValueError, match=r"gae_lambda must be a number in \[0.0, 1.0\]"):
        a2c.A2CConfig(gae_lambda=1.5)
    with pytest.raises(ValueError, match="activation must be one of relu, .*, got 'rleu'"):
        a2c.A2CConfig(activation="rleu")
    with pytest.raises(ValueError, match="actor_hidden"):
        a2c.A2CConfig(actor_hidden=(64, -1))
    with pytest.raises(ValueError, match=r"advantage_std_floor must be a number in \[0.0, "):
        a2c.A2CConfig(advantage_std_floor=-1.0)
    with pytest.raises(ValueError, match=r"logit_penalty must be a number in \[0.0, "):
        a2c.A2CConfig(logit_penalty=-1.0)
    with pytest.raises(ValueError, match="update_rms_clip must be a number"):
        a2c.A2CConfig(update_rms_clip=0.0)
    with pytest.raises(ValueError, match=r"lr_factor values must be numbers in \[0.0, "):
        a2c.A2CConfig(lr_factor=((0, -0.5),))


def test_continuous_actions_refused():
    spec = envs.make("Reacher-v5", num_envs=1).spec
    with pytest.raises(ValueError, match="discrete action space.*Reacher-v5"):
        a2c.make_a2c(a2c.A2CConfig(), spec)


def _train_cartpole(runs, chunks=7, updates_per_chunk=268):
    """Trains A2C's default config on CartPole-v1 (one pool, one compiled program), once per
    ``flipped`` of ``runs``, for ``chunks`` chunks (150,080 env steps), the policy gradient
    pointing the wrong way in the flipped runs; returns each run's 100-episode mean return
    after each chunk."""
    config = a2c.A2CConfig()
    env = envs.make("CartPole-v1", config.loop.num_envs, 0)
    agent, flipped = with_flag(a2c.make_a2c(config, env.spec))
    trainer = make_on_policy_trainer(agent, env, rollout_len=config.loop.rollout_len,
                                     updates_per_chunk=updates_per_chunk, threshold=475.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(a2c.losses, "policy_gradient_loss",
                      negated_where(flipped, a2c.losses.policy_gradient_loss))
        chunk = trainer.chunk.lower(trainer.init(jax.random.key(0))).compile()
    out = []
    for flip in runs:
        state = trainer.init(jax.random.key(0))
        state = state.replace(agent=(state.agent[0], jnp.asarray(flip)))
        means = []
        for _ in range(chunks):
            state, _ = chunk(state)
            means.append(float(np.nan_to_num(recent_mean_return(state.env.stats))))
        out.append(means)
    return out


@pytest.mark.optimized
@pytest.mark.slow
def test_a2c_learns_cartpole_and_a_flipped_sign_does_not():
    # Random play scores about 22; a policy pushed away from rewarding actions less.
    good, bad = _train_cartpole([False, True])
    assert max(good) >= 100, good
    assert max(bad) < 30, bad

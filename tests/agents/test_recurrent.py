"""Agents with memory (PPO-RNN, PQN-RNN): the update replays exactly the carries and
outputs acting saw, across episode ends at every rollout position; the carry resets where
an episode ended (terminated or truncated) and nowhere else; the observation wrapper; the
stateful evaluation policy; seeds in one program; checkpoints; learning on CartPole with the
velocities hidden."""

from __future__ import annotations

import dataclasses
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _backend import MEMBER_ATOL
from _corruptible import negated_where, with_flag

from rljax import envs
from rljax.agents import (
    ppo,
    ppo_loss,
    ppo_networks,
    pqn,
    recurrent,
    recurrent_ppo,
    recurrent_pqn,
)
from rljax.agents.base import Update
from rljax.envs.stats import recent_mean_return
from rljax.loops import on_policy
from rljax.loops.evaluation import make_evaluator
from rljax.networks.recurrent import reset_carry
from rljax.records import Memory, configure
from rljax.run.build import build
from rljax.run.config import RunConfig
from rljax.run.presets import get_preset

T, B = 8, 4
NOVEL = {"obs_indices": (0, 2)}


def _ppo(**kw):
    base = dict(num_envs=B, rollout_len=T, num_epochs=2, num_minibatches=2,
                hidden_sizes=(8, 8), memory=Memory(core="gru", size=6), lr=1e-2)
    return configure(ppo.PPOConfig, **{**base, **kw})


def _pqn(**kw):
    base = dict(num_envs=B, rollout_len=T, num_epochs=2, num_minibatches=2,
                hidden_sizes=(8,), memory=Memory(core="gru", size=6), lr=1e-2)
    return configure(pqn.PQNConfig, **{**base, **kw})


def _max_err(a, b):
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x - y)) for x, y in zip(
        jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]))


def _replay_check(kind, config, spec, state, batch):
    """Replays the rollout with the acting parameters; returns the largest differences
    from what acting recorded, and the episode flags."""
    learner = state.learner
    extras = batch.extras
    if kind == "pqn":
        net, params, obs = recurrent_pqn.network(config, spec), learner.params, batch.obs[:-1]
    else:
        net, params = recurrent_ppo.network(config, spec), learner.params["net"]
        obs = ppo_networks.prepare(config, learner.obs_stats, batch.obs[:-1])
    replayed = recurrent.replay(net, config, params, obs, batch)
    out = {"hidden_err": _max_err(replayed.hidden, extras["hidden"])}
    if kind == "pqn":
        # The Q-values acting computed: one step from each recorded carry.
        def one(hidden, obs, reset):
            return net.apply(params, hidden, obs, reset)[1][0]
        q = jax.vmap(one)(extras["hidden"], obs, extras["new_episode"])
        out["output_err"] = _max_err(replayed.outputs[0], q)
    else:
        head, value = replayed.outputs
        action = batch.action if spec.discrete else extras["raw_action"]
        log_prob, _ = ppo_networks.log_prob_and_entropy(spec, learner.params, head, action)
        out["output_err"] = jnp.maximum(_max_err(log_prob, extras["log_prob"]),
                                        _max_err(value, extras["value"]))
    nonzero = jax.tree.leaves(extras["hidden"])[0]
    out.update(new_episode=extras["new_episode"], terminated=batch.terminated,
               truncated=batch.truncated, valid=batch.valid,
               hidden_norm=jnp.abs(nonzero).sum(-1))
    return out


CASES = {
    "ppo-gru": ("ppo", "CartPole-v1", _ppo()),
    "ppo-lstm": ("ppo", "CartPole-v1", _ppo(memory=Memory(core="lstm", size=6))),
    "ppo-continuous": ("ppo", "Pendulum-v1", _ppo(normalize_obs=True, reward_scaling=True)),
    "ppo-separate-critic": ("ppo", "CartPole-v1",
                            _ppo(memory=Memory(core="gru", size=6, separate_critic=True))),
    "pqn-gru": ("pqn", "CartPole-v1", _pqn()),
}


def _bootstrap_err(kind, config, spec, state, batch):
    """The largest difference between the update's targets (bootstrapped from the values
    acting recorded, the heads run only after the last step and on truncated steps) and
    those of the heads run from the carry every step left, on the observation it ended in
    (time limit 0)."""
    unknown = dataclasses.replace(spec, max_episode_steps=0)

    def targets(spec):
        if kind == "ppo":
            net = recurrent_ppo.network(config, spec)
            data, _ = recurrent_ppo.samples(config, spec, net, state, batch)
            return jnp.stack([data.advantage, data.target])
        return recurrent_pqn.targets(config, recurrent_pqn.network(config, spec), state,
                                     batch, time_limit=spec.max_episode_steps)

    return jnp.max(jnp.where(batch.valid, jnp.abs(targets(spec) - targets(unknown)), 0))


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_replays_the_acting_carries_and_outputs_across_episode_ends(case):
    """(On Pendulum, truncated every 4 steps, the update's bootstrap is checked too: the
    case of test_bootstrap_from_recorded_values_equals_the_heads_after_every_step with a
    continuous action on envpool's layout.)"""
    kind, task, config = CASES[case]
    options = dict(NOVEL) if task == "CartPole-v1" else {}
    # Short episodes: truncations (and, on CartPole, terminations) at every position.
    env = envs.make(task, B, 3, max_episode_steps=30 if options else 4, **options)
    agent = (ppo.make_ppo if kind == "ppo" else pqn.make_pqn)(config, env.spec)

    def update(state, batch, key):
        check = _replay_check(kind, config, env.spec, state, batch)
        if not options:
            check.update(err=_bootstrap_err(kind, config, env.spec, state, batch))
        out = agent.update(state, batch, key)
        return Update(out.state, {**out.metrics, **check}, out.td_error)

    trainer = on_policy.make_on_policy_trainer(agent._replace(update=update), env,
                                               rollout_len=T, updates_per_chunk=16)
    _, m = jax.device_get(trainer.chunk(trainer.init(jax.random.key(0))))
    # Acting and the update's replay are separately compiled paths of the same recurrence:
    # float32 rounding, which grows with the parameters (an LSTM's hidden state reached
    # 1.9e-6 by the 16th update); a replay that does not reset its carries at episode
    # starts is off by 0.5-13 here.
    assert np.max(m["hidden_err"]) < 1e-5 and np.max(m["output_err"]) < 1e-5, (
        m["hidden_err"], m["output_err"])
    new_episode, term, trunc = m["new_episode"], m["terminated"], m["truncated"]
    # Rollouts after the first begin with every position holding an episode's first step.
    assert new_episode[1:].any(axis=(0, 2)).all()
    assert trunc.any() and (task != "CartPole-v1" or term.any())
    # The flags are the episode ends: the step after a terminated or truncated one.
    np.testing.assert_array_equal(new_episode[:, 1:], (term | trunc)[:, :-1])
    np.testing.assert_array_equal(new_episode[1:, 0], (term | trunc)[:-1, -1])
    # Memory is kept elsewhere (the carry is not zero within episodes).
    assert (m["hidden_norm"][1:][~new_episode[1:] & m["valid"][1:]] > 0).all()
    if not options:
        assert 2 * B * -(-T // 4) < T * B  # the gathered path, not every step
        assert trunc[1:].sum(axis=(1, 2)).min() >= B  # several per rollout
        assert np.max(m["err"]) < 1e-5, m["err"]


# (kind, task, config, time limit): episodes truncated every few steps, in envpool's
# layout (a reset step after each end) and in gymnax's (reset within the step). (PPO on
# Pendulum is checked in the "ppo-continuous" case of the test above.)
BOOTSTRAP_CASES = {
    "ppo-gru-envpool": ("ppo", "CartPole-v1", _ppo(), 3),
    "ppo-lstm-gymnax": ("ppo", "gymnax:CartPole-v1", _ppo(memory=Memory(core="lstm", size=6)), 3),
    "ppo-separate-critic-gymnax": (
        "ppo", "gymnax:CartPole-v1",
        _ppo(memory=Memory(core="lstm", size=6, separate_critic=True)), 3),
    "pqn-gru-envpool": ("pqn", "CartPole-v1", _pqn(), 3),
    "pqn-gru-gymnax": ("pqn", "gymnax:CartPole-v1", _pqn(), 3),
    "pqn-reset-every-step-gymnax": (
        "pqn", "gymnax:CartPole-v1",
        _pqn(memory=Memory(core="gru", size=6, reset_every_step=True)), 3),
}


@pytest.mark.parametrize("case", sorted(BOOTSTRAP_CASES))
def test_bootstrap_from_recorded_values_equals_the_heads_after_every_step(case):
    """The update bootstraps from the values acting recorded and runs the heads only after
    the last step and on truncated steps; that gives the targets of the heads run from the
    carry every step left, on the observation it ended in (time limit 0)."""
    kind, task, config, limit = BOOTSTRAP_CASES[case]
    env = envs.make(task, B, 3, max_episode_steps=limit)
    assert 2 * B * -(-T // limit) < T * B  # the gathered path, not every step
    agent = (ppo.make_ppo if kind == "ppo" else pqn.make_pqn)(config, env.spec)

    def update(state, batch, key):
        err = _bootstrap_err(kind, config, env.spec, state, batch)
        out = agent.update(state, batch, key)
        return Update(out.state, {**out.metrics, "err": err,
                                  "truncations": batch.truncated.sum()}, out.td_error)

    trainer = on_policy.make_on_policy_trainer(agent._replace(update=update), env,
                                               rollout_len=T, updates_per_chunk=8)
    _, m = jax.device_get(trainer.chunk(trainer.init(jax.random.key(0))))
    assert m["truncations"][1:].min() >= B  # several per rollout, at every position
    assert np.max(m["err"]) < 1e-5, m["err"]


@pytest.mark.parametrize("kind", ["ppo", "pqn", "ppo-lstm", "ppo-rnn", "ppo-separate"])
def test_act_resets_the_carry_where_new_episode_and_nowhere_else(kind):
    spec = envs.make("CartPole-v1", B, 0, **NOVEL).spec
    core = {"ppo-lstm": "lstm", "ppo-rnn": "rnn"}.get(kind, "gru")
    config = _pqn() if kind == "pqn" else _ppo(memory=Memory(
        core=core, size=6, separate_critic=kind == "ppo-separate"))
    make = pqn.make_pqn if kind == "pqn" else ppo.make_ppo
    agent = make(config, spec)
    state = agent.init(jax.random.key(1))
    hidden = jax.tree.map(lambda x: jax.random.normal(jax.random.key(2), x.shape),
                          state.hidden)
    state = state.replace(hidden=hidden)
    obs = jax.random.normal(jax.random.key(3), (B, 2))
    flags = jnp.array([True, False, True, False])
    key, step = jax.random.key(4), jnp.zeros((), jnp.int32)
    _, extras, after = agent.act(state, obs, key, step, flags)
    assert _max_err(extras["hidden"], hidden) == 0
    np.testing.assert_array_equal(extras["new_episode"], flags)
    _, _, kept = agent.act(state, obs, key, step, jnp.zeros(B, bool))
    zeroed = state.replace(hidden=reset_carry(hidden, jnp.ones(B, bool)))
    _, _, fresh = agent.act(zeroed, obs, key, step, jnp.zeros(B, bool))
    for a, k, f in zip(jax.tree.leaves(after.hidden), jax.tree.leaves(kept.hidden),
                       jax.tree.leaves(fresh.hidden), strict=True):
        np.testing.assert_array_equal(a[~flags], k[~flags])
        np.testing.assert_array_equal(a[flags], f[flags])
        assert not np.allclose(k[flags], f[flags])
    # The ablation resets before every step: acting ignores the carry.
    ablated = make(dataclasses.replace(
        config, memory=dataclasses.replace(config.memory, reset_every_step=True)), spec)
    a, _, s = ablated.act(state, obs, key, step, jnp.zeros(B, bool))
    b, _, z = ablated.act(zeroed, obs, key, step, jnp.zeros(B, bool))
    np.testing.assert_array_equal(a, b)
    assert _max_err(s.hidden, z.hidden) == 0


def test_select_obs_keeps_the_chosen_entries_in_every_path():
    full = envs.make("CartPole-v1", B, 5)
    novel = envs.make("CartPole-v1", B, 5, obs_indices=[0, 2])
    assert novel.spec.obs_shape == (2,) and dict(novel.spec.options)["obs_indices"] == (0, 2)
    s_full, s_novel = full.reset(), novel.reset()
    np.testing.assert_array_equal(s_novel.obs, np.asarray(s_full.obs)[:, [0, 2]])
    assert novel.state_shapes().obs.shape == (B, 2)
    action = jnp.ones(B, jnp.int32)
    (n_state, n_out), (f_state, f_out) = novel.step(s_novel, action), full.step(s_full, action)
    np.testing.assert_array_equal(n_state.obs, np.asarray(f_state.obs)[:, [0, 2]])
    np.testing.assert_array_equal(n_out.obs, np.asarray(f_out.obs)[:, [0, 2]])
    assert novel.host_step(np.zeros(B, np.int32))[0].shape == (B, 2)
    with pytest.raises(ValueError, match="obs_indices must be distinct integers in"):
        envs.make("CartPole-v1", B, 5, obs_indices=(0, 4))
    with pytest.raises(ValueError, match="unknown memory core 'transformer'; allowed: gru, "
                                         "lstm, rnn"):
        _ppo(memory="transformer")
    with pytest.raises(ValueError, match="num_minibatches must divide num_envs"):
        _pqn(num_minibatches=8)


def test_evaluation_and_run_policy_carry_memory():
    spec = envs.make("CartPole-v1", B, 0, **NOVEL).spec
    agent = ppo.make_ppo(_ppo(), spec)
    params = agent.params(agent.init(jax.random.key(0)))
    result = make_evaluator(agent.policy, envs.make("CartPole-v1", 3, 7, **NOVEL),
                            policy_init=agent.policy_init)(params)
    assert result["episodes"] == 3
    # The stateful policy advances its carry and resets it where asked.
    carry = agent.policy_init(2)
    obs = jnp.ones((2, 2))
    _, carry1 = agent.policy(params, obs, carry, jnp.zeros(2, bool))
    _, carry2 = agent.policy(params, obs, carry1, jnp.array([True, False]))
    np.testing.assert_array_equal(carry2[0], carry1[0])
    assert not np.allclose(carry2[1], carry1[1])


def _one_chunk(run: RunConfig):
    _, agent, trainer, _ = build(run)
    state, metrics = trainer.chunk(trainer.init(jax.random.key(run.seed)))
    return jax.device_get((state, metrics)), agent


def test_member_k_of_four_seeds_equals_the_single_run():
    config = _ppo(num_envs=4, rollout_len=4)
    steps = 4 * config.loop.steps_per_update
    common = dict(algo="ppo", env_id="CartPole-v1", config=config, total_steps=steps,
                  chunk_steps=steps, env_options=tuple(NOVEL.items()))
    (many, many_metrics), agent = _one_chunk(RunConfig(seed=3, num_seeds=4, **common))
    # One member, not the first: a member read at the wrong index or run on another seed's
    # envs differs (member 0 runs the same program path, and all four carries differ below).
    for k in (2,):
        (one, one_metrics), _ = _one_chunk(RunConfig(seed=3 + k, **common))
        # Same program shape (the member axis aside): parameters, metrics and the carry
        # agree to XLA:CPU's rounding of a vmapped against an unbatched program.
        for a, b in zip(jax.tree.leaves((agent.params(many.agent), many.agent.hidden)),
                        jax.tree.leaves((agent.params(one.agent), one.agent.hidden)),
                        strict=True):
            assert a.shape == (4,) + b.shape
            np.testing.assert_allclose(a[k], b, rtol=1e-5, atol=MEMBER_ATOL)
        for name, value in one_metrics.items():
            np.testing.assert_allclose(many_metrics[name][k], value, rtol=1e-4, atol=1e-5,
                                       err_msg=f"member {k}: {name}")
    hidden = np.asarray(many.agent.hidden)
    assert all(not np.allclose(hidden[i], hidden[j]) for i in range(4) for j in range(i))


@pytest.mark.optimized
@pytest.mark.slow
def test_ppo_rnn_learns_novel_cartpole_and_a_flipped_surrogate_does_not():
    """cartpole-novel-ppo-rnn's agent (learning rate not annealed) on CartPole with the
    velocities hidden, to a 100-episode mean of 200 (the feed-forward control and the
    agent with its memory reset every step stay below 56 over 1M steps), against the same
    agent with its surrogate's sign flipped."""
    config = dataclasses.replace(get_preset("cartpole-novel-ppo-rnn").run.config,
                                 anneal_lr=False)
    env = envs.make("CartPole-v1", config.loop.num_envs, 0, **NOVEL)
    agent, flag = with_flag(ppo.make_ppo(config, env.spec))
    trainer = on_policy.make_on_policy_trainer(agent, env, rollout_len=config.loop.rollout_len,
                                               updates_per_chunk=20, threshold=200.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ppo_loss.losses, "clipped_surrogate_loss",
                      negated_where(flag, ppo_loss.losses.clipped_surrogate_loss))
        chunk = trainer.chunk.lower(trainer.init(jax.random.key(0))).compile()
    out = []
    # The flipped run is cut at 20k: measured per 10,240 steps it stays at 9.4 (below
    # random play, about 22), where the clean run is at 91 and passes 200 by 49k.
    for negate, max_steps in ((False, 150_000), (True, 20_000)):
        state = trainer.init(jax.random.key(0))
        state = state.replace(agent=(state.agent[0], jnp.asarray(negate)))
        best = 0.0
        while int(state.solved_at) < 0 and int(state.env_steps) < max_steps:
            state, _ = chunk(state)
            best = max(best, float(jnp.nan_to_num(recent_mean_return(state.env.stats))))
        out.append((int(state.solved_at), best))
    (solved_at, best), (flipped_at, flipped_best) = out
    assert 0 <= solved_at <= 150_000, best
    assert flipped_at < 0 and flipped_best < 50, flipped_best


@pytest.mark.slow
def test_recurrent_run_on_a_jax_native_env_resumes_exactly(tmp_path):
    """A PPO-RNN run on gymnax CartPole (velocities hidden) stopped after its first chunk
    and resumed ends where the uninterrupted run ends: the same metrics rows (episode
    counts and returns continue), the same carry and the same parameters, bit for bit.
    The checkpoint holds both the env state and the carry; without either the second
    chunk would start from fresh episodes or a zero carry and differ. The loaded run's
    policy keeps a carry of its own."""
    import rljax

    whole = rljax.train("cartpole-novel-ppo-rnn", run_dir=str(tmp_path / "whole"),
                        env="gymnax:CartPole-v1", num_envs=8, chunk_steps=512, num_epochs=1,
                        num_minibatches=2, hidden_sizes=(8, 8), **{"memory.size": 8},
                        eval_every=0, tensorboard=False, checkpoint_every=512,
                        keep_checkpoints=3, seed=5, total_steps=1_536)
    # The copy resumed from its first checkpoint: the state a run stopped there saved
    # (the newer checkpoints are set aside).
    shutil.copytree(tmp_path / "whole", tmp_path / "part")
    resumed = rljax.train(resume=str(tmp_path / "part"), from_checkpoint=512,
                          total_steps=1_536)
    assert resumed.run_dir == str(tmp_path / "part")
    keys = ("env_steps", "episodes", "episode_return_mean", "return_mean_100", "loss")
    assert [[r.get(k) for k in keys] for r in resumed.metrics] == [
        [r.get(k) for k in keys] for r in whole.metrics[1:]]
    assert whole.metrics[-1]["episodes"] > whole.metrics[0]["episodes"] > 0
    for a, b in zip(jax.tree.leaves(jax.device_get(whole.state.agent)),
                    jax.tree.leaves(jax.device_get(resumed.state.agent)), strict=True):
        np.testing.assert_array_equal(a, b)
    # The saved run loads with its carry; its policy keeps its own memory for a single
    # env, and forgets it on request.
    hidden = np.asarray(whole.state.agent.hidden)
    assert np.abs(hidden).sum() > 0
    loaded = rljax.load(whole.run_dir)
    np.testing.assert_array_equal(np.asarray(loaded.state.agent.hidden), hidden)
    obs = np.array([0.01, -0.02], np.float32)
    loaded.policy(obs, new_episode=True)
    first = np.asarray(loaded._memory[1]).copy()
    loaded.policy(obs)
    assert not np.allclose(loaded._memory[1], first)
    loaded.reset_memory()
    loaded.policy(obs, new_episode=True)
    np.testing.assert_array_equal(loaded._memory[1], first)

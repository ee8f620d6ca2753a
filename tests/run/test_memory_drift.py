"""benchmarks.memory_drift: a recurrent policy's change as PPO's loss sees it (unrolled a
sequence from the old carries) and as it acts (unrolled from each episode's start)."""

import json
import types

import jax
import numpy as np
import pytest

import rljax
from benchmarks import memory_drift as md


def test_kl_and_span_means_match_numpy():
    rng = np.random.default_rng(0)
    old, new = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    p = np.exp(old) / np.exp(old).sum(-1, keepdims=True)
    q = np.exp(new) / np.exp(new).sum(-1, keepdims=True)
    np.testing.assert_allclose(md.categorical_kl(old, new), (p * np.log(p / q)).sum(-1),
                               rtol=1e-5)
    values = rng.normal(size=(500, 4))
    alive = np.ones((500, 4))
    alive[200:, 1:] = 0.0  # three episodes end at step 200
    got = md.span_means(values, alive)
    assert got[0] == pytest.approx(values[:16].mean())
    assert got[2] == pytest.approx((values[100:200].sum() + values[200:300, 0].sum()) / 500)
    assert got[3] == pytest.approx(values[300:500, 0].mean())
    assert np.isnan(md.span_means(values, np.zeros_like(alive))[1])


def _untrained(tmp_path, **overrides):
    """A stand-in for a loaded run of the preset (what ``measure`` reads of ``rljax.load``'s
    Run): its config and spec, and the freshly initialized agent's parameters."""
    from rljax.run.build import build
    from rljax.run.presets import from_preset

    config = from_preset("cartpole-novel-ppo-rnn", seed=0, logdir=str(tmp_path),
                         tensorboard=False, hidden_sizes=(16, 16), **overrides)
    env, agent, trainer, _ = build(config)
    state = trainer.init(jax.random.key(0))
    return types.SimpleNamespace(config=config, spec=env.spec,
                                 params=agent.params(state.agent))


def _moved(run, scale):
    """A stand-in for a later checkpoint: the run's parameters plus a fixed perturbation."""
    keys = iter(jax.random.split(jax.random.key(1), 64))
    return types.SimpleNamespace(params=jax.tree.map(
        lambda x: x + scale * jax.random.normal(next(keys), x.shape, x.dtype), run.params))


def test_seq_equals_full_where_the_loss_sees_all_the_memory(tmp_path, monkeypatch, capsys):
    """Unrolled from the episode's start (one sequence of the whole episode) or without
    memory (reset every step), the two readings agree; a 16-step unroll from the old
    carries differs from the full one once the carry matters; no change reads zero."""
    run = _untrained(tmp_path, num_seeds=2, memory=rljax.records.Memory(core="gru", size=16))
    new = _moved(run, 0.3)
    whole = md.measure(run, new, episodes=8, seq=512, fractions=[1.0])
    for row in whole:
        np.testing.assert_allclose(row["kl_seq"], row["kl_full"], rtol=1e-4)
        assert min(row["kl_full"][:2]) > 0
    short = md.measure(run, new, episodes=8, seq=16, fractions=[1.0])
    assert all(r["kl_seq"][0] == pytest.approx(r["kl_full"][0], rel=1e-4) for r in short)
    assert any(abs(r["kl_seq"][1] - r["kl_full"][1]) > 1e-3 * r["kl_full"][1] for r in short)
    same = md.measure(run, run, episodes=4, seq=16, fractions=[0.5])
    assert all(max(r["kl_seq"] + r["kl_full"]) < 1e-6 for r in same)

    monkeypatch.setattr(md, "RESULTS", str(tmp_path / "memory_drift.json"))
    loads = iter([run, new])
    monkeypatch.setattr(rljax, "load", lambda *a, **k: next(loads))
    assert md.main(["RUN", "--from-checkpoint", "0", "--to-checkpoint", "1", "--episodes",
                    "4", "--fractions", "0.1"]) == 0
    assert "| 1 | 0.1 |" in capsys.readouterr().out
    (key,) = json.loads((tmp_path / "memory_drift.json").read_text())
    assert key == "cartpole-novel-ppo-rnn 0->1 seq=16"


def test_without_memory_the_two_readings_agree(tmp_path):
    """``memory.reset_every_step``: the carry zeroed before every step, nothing to carry."""
    run = _untrained(tmp_path, memory=rljax.records.Memory(core="gru", size=16,
                                                           reset_every_step=True))
    (row,) = md.measure(run, _moved(run, 0.3), episodes=8, seq=16, fractions=[1.0])
    np.testing.assert_allclose(row["kl_seq"], row["kl_full"], rtol=1e-4)
    assert min(row["kl_full"][:2]) > 0
    with pytest.raises(ValueError, match="plays CartPole-v1"):
        md.make_tools(types.SimpleNamespace(config=types.SimpleNamespace(
            config=run.config.config, env_id="Acrobot-v1"), spec=run.spec), 16)

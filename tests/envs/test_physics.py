"""The brax/playground backend (rljax.envs.physics): episode rules on a brax-style env
object checked against plain NumPy, the refusals (one line, exit 2), a brax preset's
``--seeds 4`` and its resume on a brax-style backend, a short SAC run and its resume on
Brax's own inverted_pendulum, and (marked exhaustive: brax's programs compile for minutes
on 2 cores) Brax's own reacher and every continuous agent."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import rljax
from rljax import envs
from rljax.envs import physics
from rljax.run import cli
from rljax.run.logging import read_jsonl


@struct.dataclass
class _State:
    pos: jax.Array
    obs: dict
    reward: jax.Array
    done: jax.Array


class _Walk:
    """A brax-style env: ``pos`` moves by the (clipped) action's sum, the episode terminates
    past 2.5; a dict observation ``{"b": [pos, 2 pos], "a": [[-pos]]}``."""

    action_size = 2

    def _obs(self, pos):
        return {"b": jnp.stack([pos, 2 * pos]), "a": -pos.reshape(1, 1)}

    def reset(self, key):
        pos = jax.random.uniform(key, (), minval=-0.5, maxval=0.5)
        return _State(pos, self._obs(pos), jnp.zeros(()), jnp.zeros(()))

    def step(self, state, action):
        pos = state.pos + action.sum()
        return _State(pos, self._obs(pos), pos, (pos > 2.5).astype(jnp.float32))


def _flat(pos):
    return np.stack([-pos, pos, 2 * pos], axis=-1)  # "a" before "b", each raveled


def test_termination_truncation_final_obs_and_clipping_match_numpy():
    n, limit = 5, 4
    low, high = jnp.full(2, -0.5), jnp.full(2, 1.0)
    initial, step = physics.brax_style_functions(_Walk(), n, limit, low, high)
    state = initial(np.arange(n))
    step = jax.jit(step)
    pos = -np.asarray(state.obs)[:, 0]
    np.testing.assert_allclose(np.asarray(state.obs), _flat(pos), rtol=1e-6)
    t = np.zeros(n, int)
    rng = np.random.default_rng(0)
    for _ in range(12):
        action = rng.uniform(-2, 2, (n, 2)).astype(np.float32)
        state, out = step(state, jnp.asarray(action))
        pos = pos + np.clip(action, -0.5, 1.0).sum(-1)
        t += 1
        terminated = pos > 2.5
        truncated = (t >= limit) & ~terminated
        np.testing.assert_allclose(np.asarray(out.obs), _flat(pos), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(out.reward), pos, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(out.terminated), terminated)
        np.testing.assert_array_equal(np.asarray(out.truncated), truncated)
        ended = terminated | truncated
        next_pos = -np.asarray(state.obs)[:, 0]
        assert np.all(np.abs(next_pos[ended]) <= 0.5)  # a fresh episode's first obs
        np.testing.assert_allclose(next_pos[~ended], pos[~ended], rtol=1e-5, atol=1e-6)
        pos, t = next_pos, np.where(ended, 0, t)
        np.testing.assert_array_equal(np.asarray(state.handle.t), t)


def test_an_envs_stream_does_not_depend_on_its_batch():
    """Env i of seeds S resets alike in a batch of 4 and alone (how members and data shards
    rebuild a run's envs), whether or not another env of its batch ended."""
    low, high = jnp.full(2, -1.0), jnp.full(2, 1.0)
    walk = _Walk()
    seeds = np.array([11, 12, 13, 14])
    batch = physics.brax_style_functions(walk, 4, 3, low, high)
    alone = physics.brax_style_functions(walk, 1, 3, low, high)
    actions = jnp.tile(jnp.array([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.1, 0.0]]), (1, 1))
    sb, sa = batch[0](seeds), alone[0](seeds[1:2])
    for _ in range(7):  # env 0 terminates on step 2: env 1 ends only at its time limit
        sb, _ = batch[1](sb, actions)
        sa, _ = alone[1](sa, actions[1:2])
        np.testing.assert_allclose(np.asarray(sb.obs)[1:2], np.asarray(sa.obs), rtol=1e-6)


def test_refusals_are_one_line_with_the_choices(monkeypatch):
    pytest.importorskip("brax")
    with pytest.raises(ValueError, match=r"did you mean brax:reacher"):
        envs.check_task("brax:reacer")
    with pytest.raises(ValueError, match="option backend of brax:reacher must be one of"):
        envs.make("brax:reacher", 2, 0, backend="fast")
    with pytest.raises(ValueError, match="unknown option 'max_steps'.*max_episode_steps"):
        envs.make("brax:reacher", 2, 0, max_steps=3)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mujoco_playground" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs the mujoco_playground package: pip install "
                                         r"'rljax\[playground\]'"):
        envs.check_task("playground:CartpoleBalance")


def test_brax_actions_are_in_minus_one_one_and_swimmer_is_generalized():
    """Brax's envs take actions in [-1, 1] (inverted_pendulum maps them onto its [-3, 3]
    itself: bounds of [-3, 3] would have scaled them twice); swimmer runs only on brax's
    generalized pipeline, its default here."""
    pytest.importorskip("brax")
    spec = physics.task_spec("brax:inverted_pendulum")
    assert spec.action_shape == (1,) and (spec.action_low, spec.action_high) == ((-1.0,), (1.0,))
    assert physics._bounds(physics._env("brax:pusher", ()))[1].tolist() == [1.0] * 7
    assert physics.task_spec("brax:swimmer").action_high == (1.0, 1.0)
    with pytest.raises(ValueError, match="brax:swimmer runs only on brax's generalized "
                                         "pipeline, got backend='positional'"):
        physics.task_spec("brax:swimmer", backend="positional")


def test_playground_robots_that_need_downloads_are_refused():
    pytest.importorskip("mujoco_playground")
    with pytest.raises(ValueError, match="downloaded on first load"):
        envs.check_task("playground:Go1JoystickFlatTerrain")
    with pytest.raises(ValueError, match="did you mean playground:CartpoleBalance"):
        envs.check_task("playground:CartpoleBalanse")
    assert "playground:CheetahRun" in envs.task_ids()["playground"]


@pytest.mark.parametrize("preset, env, missing, message", [
    ("brax-inverted-pendulum-sac", "brax:reacer", None,
     "unknown task id 'brax:reacer' (did you mean brax:reacher"),
    ("cartpole-dqn", "brax:inverted_pendulum", None,
     "DQN needs a discrete action space, but brax:inverted_pendulum has a continuous one"),
    ("playground-cartpole-balance-sac", "playground:Go1JoystickFlatTerrain", None,
     "is a Playground locomotion/manipulation task whose robot model is downloaded on first "
     "load"),
    ("brax-inverted-pendulum-ppo", "brax:inverted_pendulum", "brax",
     "brax:inverted_pendulum needs the brax package: pip install 'rljax[brax]'"),
    ("playground-reacher-easy-ppo", "playground:ReacherEasy", "mujoco_playground",
     "playground:ReacherEasy needs the mujoco_playground package: pip install "
     "'rljax[playground]'"),
])
def test_bad_physics_inputs_are_one_line_and_exit_2(preset, env, missing, message, tmp_path,
                                                     capsys, monkeypatch):
    """The refusals of the CLI on these tasks: an unknown task (with the close matches), a
    discrete agent, a Playground robot that needs downloads, the package missing."""
    pytest.importorskip("mujoco_playground" if env.startswith("playground") else "brax")
    if missing:
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == missing else real(name, *a))
    code = cli.main(["train", preset, "--env", env, "--total-steps", "100000", "--logdir",
                     str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not os.listdir(tmp_path)


@pytest.mark.exhaustive  # brax programs compile for minutes on 2 cores
@pytest.mark.slow
def test_brax_reacher_steps_with_the_time_limit_apart():
    """Brax's own env through the backend: spec, bounds, the time limit and the reset."""
    pytest.importorskip("brax")
    env = envs.make("brax:reacher", 3, 0, max_episode_steps=2)
    spec = env.spec
    assert spec.obs_shape == (11,) and spec.action_shape == (2,)
    assert spec.action_low == (-1.0, -1.0) and spec.action_high == (1.0, 1.0)
    assert spec.vmappable and spec.resets_in_step and spec.max_episode_steps == 2
    state = env.reset()
    first = np.asarray(state.obs)
    step = jax.jit(env.step)
    state, out = step(state, jnp.zeros((3, 2)))
    assert not np.asarray(out.truncated).any() and np.isfinite(np.asarray(out.reward)).all()
    state, out = step(state, jnp.ones((3, 2)))
    np.testing.assert_array_equal(np.asarray(out.truncated), [True] * 3)
    assert not np.asarray(out.terminated).any()
    assert not np.allclose(np.asarray(state.obs), np.asarray(out.obs))
    assert not np.allclose(np.asarray(state.obs), first)  # a new draw, not the first state


def _whole_and_resumed(tmp_path, chunk: int, total: int, **changes):
    """``brax-inverted-pendulum-sac`` (seed 5) run for ``total`` env steps in chunks of
    ``chunk``, then its folder copied and resumed from the checkpoint after the first chunk
    (the state a run stopped there saved; newer checkpoints set aside) to ``total`` again:
    the whole run and the resumed run's rows."""
    whole = rljax.train("brax-inverted-pendulum-sac", run_dir=str(tmp_path / "whole"),
                        seed=5, total_steps=total, chunk_steps=chunk, checkpoint_every=chunk,
                        tensorboard=False, **changes)
    shutil.copytree(tmp_path / "whole", tmp_path / "part")
    resumed = rljax.train(resume=str(tmp_path / "part"), from_checkpoint=chunk,
                          total_steps=total)
    assert [r["env_steps"] for r in resumed.metrics] == list(range(2 * chunk, total + 1,
                                                                   chunk))  # it ran them
    return whole, [json.loads(x) for x in open(os.path.join(resumed.run_dir,
                                                            "metrics.jsonl"))]


# About a minute of CPU on 2 cores, most of it compiling brax's physics twice: for the
# fresh run, and for the resumed one (its restored arrays are committed to the device,
# which makes another program than the fresh run's uncommitted ones).
@pytest.mark.slow
def test_sac_on_brax_trains_and_its_resume_equals_the_uninterrupted_run(tmp_path):
    """Brax's own inverted_pendulum (positional pipeline) in short SAC runs: episodes end
    (random actions topple the pole within ~20 steps), losses are finite, and a run
    resumed from its checkpoint after one chunk (brax's physics state, keys, step counts
    and the replay in the checkpoint) equals the uninterrupted one row for row. (A user's
    brax-style object through the same backend code: tests/run/test_env_objects.py;
    stopping a run and resuming it: tests/run/test_resume.py.)"""
    pytest.importorskip("brax")
    whole, rows = _whole_and_resumed(tmp_path, 32, 64, env="brax:inverted_pendulum",
                                     num_envs=2, random_steps=16, learning_starts=16,
                                     batch_size=8, actor_hidden=(8,), critic_hidden=(8,),
                                     buffer_size=256)
    assert [r["env_steps"] for r in whole.metrics] == [32, 64]
    assert whole.metrics[-1]["episodes"] > 0 and np.isfinite(whole.metrics[-1]["critic_loss"])
    keys = ("env_steps", "episodes", "episode_return_mean", "critic_loss", "actor_loss")
    assert [[r.get(k) for k in keys] for r in rows] == [[r.get(k) for k in keys]
                                                      for r in whole.metrics]


@pytest.fixture
def walk():
    """``walk:Line``: the brax-style :class:`_Walk` registered as a backend, as a user's
    brax-style env is (time limit 20)."""
    from rljax.envs import registry

    obj = _Walk()

    def spec(name, num_envs=1, **options):
        registry.check_name(f"walk:{name}", name, ("Line",))
        return physics.object_spec(f"walk:{name}", obj, num_envs, 20)

    def make(name, num_envs, seed, **options):
        s = spec(name, num_envs)
        low, high = (jnp.asarray(b, jnp.float32) for b in (s.action_low, s.action_high))
        return physics.object_env(s, seed, physics.brax_style_functions(obj, num_envs, 20,
                                                                        low, high))

    envs.register("walk", envs.Backend(make=make, task_ids=lambda: ("Line",), spec=spec))
    yield "walk:Line"
    registry._BACKENDS.pop("walk")


@pytest.mark.slow  # ~40 s at load 7 on 2 cores: one 4-member PPO program
def test_four_seeds_of_a_brax_preset_in_one_program(walk, tmp_path, capsys):
    """``rljax train brax-inverted-pendulum-ppo --seeds 4`` (on the brax-style backend,
    whose programs compile in seconds): four members in one program, each with its own
    rows and episodes. (Member k equals the single run with seed k:
    tests/parallel/test_members_agents.py.)"""
    assert cli.main(["train", "brax-inverted-pendulum-ppo", "--env", walk, "--num-envs", "4",
                     "--set", "rollout_len=8", "--set", "num_minibatches=2", "--set",
                     "num_epochs=1", "--set", "hidden_sizes=8,8", "--total-steps", "64",
                     "--chunk-steps", "32", "--no-tensorboard", "--quiet", "--seed", "5",
                     "--seeds", "4", "--logdir", str(tmp_path)]) == 0
    four = json.loads(capsys.readouterr().out)
    assert four["num_seeds"] == 4 and four["total_env_steps"] == 4 * 64
    assert [m["seed"] for m in four["seeds"]] == [5, 6, 7, 8]
    for seed in (5, 6, 7, 8):
        rows = read_jsonl(os.path.join(four["run_dir"], f"seed_{seed}", "metrics.jsonl"))
        assert [r["env_steps"] for r in rows] == [32, 64] and rows[-1]["episodes"] > 0
        assert np.isfinite(rows[-1]["loss"])
    returns = [m["final_return_mean"] for m in four["seeds"]]
    assert len(set(returns)) == 4, returns  # the members draw their own episodes


@pytest.mark.exhaustive  # brax programs compile for minutes on 2 cores
@pytest.mark.slow
@pytest.mark.parametrize("preset,changes", [
    ("reacher-ddpg", dict(num_envs=4, learning_starts=40, batch_size=16)),
    ("reacher-td3", dict(num_envs=4, random_steps=40, learning_starts=40, batch_size=16)),
    ("reacher-ppo", dict(num_envs=4, rollout_len=16, num_minibatches=2, num_epochs=1)),
])
def test_every_continuous_agent_trains_on_a_brax_style_env(walk, preset, changes):
    """DDPG, TD3 and Gaussian PPO (SAC: the brax resume test above) run on the backend unchanged:
    a short run's rows count finished episodes and finite losses."""
    hidden = {"hidden_sizes": (8,)} if preset.endswith("ppo") else {
        "actor_hidden": (8,), "critic_hidden": (8,), "buffer_size": 500}
    run = rljax.train(preset, env=walk, total_steps=128, chunk_steps=64, tensorboard=False,
                      eval_every=0, **hidden, **changes)
    last = run.metrics[-1]
    assert last["env_steps"] == 128 and last["episodes"] > 0
    losses = [v for k, v in last.items() if k.endswith("loss")]
    assert losses and all(np.isfinite(v) for v in losses)

"""A user's torso through the one keyword ``network=``: stored in the run record as an
import string, rebuilt on resume and evaluation, refused in one line when it is not a flax
module or does not give features ``[B, F]``; the MinAtar CNN's shapes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _torsos import TinyTorso

import rljax
from rljax import envs
from rljax.agents import a2c, ddpg, dqn, ppo, pqn, sac, td3
from rljax.agents.ddpg_config import DDPGConfig
from rljax.networks.torso import MinAtarCNN, check_torso, import_string
from rljax.run import cli

SPEC = envs.make("CartPole-v1", 4).spec


def test_a_torso_class_is_kept_as_its_import_string():
    config = ppo.PPOConfig(network=TinyTorso)
    assert config.network == "_torsos:TinyTorso" == import_string("_torsos:TinyTorso")
    assert ppo.PPOConfig(network="_torsos:TinyTorso") == config
    agent = ppo.make_ppo(config, SPEC)
    params = agent.init(jax.random.key(0)).params
    assert params["actor"]["params"]["torso"]["Dense_0"]["kernel"].shape == (4, 16)
    assert params["actor"]["params"]["head_0"]["kernel"].shape == (16, 2)
    assert params["critic"]["params"]["head_0"]["kernel"].shape == (16, 1)
    action, extras, _ = agent.act(agent.init(jax.random.key(0)), jnp.zeros((4, 4)),
                                  jax.random.key(1), jnp.zeros((), jnp.int32),
                                  jnp.zeros(4, bool))
    assert action.shape == (4,) and extras["value"].shape == (4,)


@pytest.mark.parametrize("network,message", [
    ("_torsos:Nothing", r"^network '_torsos:Nothing' does not resolve: module '_torsos' has "
                        "no attribute 'Nothing'"),
    ("no_such_package.mod:Torso", r"^network 'no_such_package.mod:Torso' does not resolve"),
    ("_torsos.TinyTorso", r"^network must be a flax module class or an import string "
                          r"'package.module:Class', got '_torsos.TinyTorso'"),
    ("_torsos:NOT_A_MODULE", r"^network must be a flax.linen.Module class \(built without "
                             r"arguments, mapping observations \[B, \*obs_shape\]"),
    (dict, r"^network must be a flax.linen.Module class"),
])
def test_a_network_that_is_not_a_module_is_refused_in_the_config(network, message):
    with pytest.raises(ValueError, match=message):
        pqn.PQNConfig(network=network)


def test_a_class_defined_in_a_function_is_refused():
    class Local(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x

    with pytest.raises(ValueError, match=r"network .*Local cannot be imported back by its "
                                         "name .*; define it at the top level of a module"):
        ppo.PPOConfig(network=Local)


@pytest.mark.parametrize("make", [ppo.make_ppo, pqn.make_pqn])
def test_a_torso_of_the_wrong_output_shape_is_refused_when_built(make):
    config = (ppo.PPOConfig if make is ppo.make_ppo else pqn.PQNConfig)(
        network="_torsos:PerFeature")
    with pytest.raises(ValueError, match=r"^network PerFeature must map observations "
                                         r"\[B, \*obs_shape\] \(float32\) to features "
                                         r"\[B, F\]; observations \[2, 4\] gave \[2, 4, 3\], "
                                         r"expected \[2, F\]$"):
        make(config, SPEC)
    with pytest.raises(ValueError, match=r"^network Broken must map .* applied to \[2, 4\] it "
                                         "raised RuntimeError: no torso here$"):
        make(dataclass_with(config, "_torsos:Broken"), SPEC)


CONTINUOUS = envs.make("gymnax:Pendulum-v1", 1).spec


@pytest.mark.parametrize("config_cls, make, spec", [
    (a2c.A2CConfig, a2c.make_a2c, SPEC), (dqn.DQNConfig, dqn.make_dqn, SPEC),
    (DDPGConfig, ddpg.make_ddpg, CONTINUOUS), (td3.TD3Config, td3.make_td3, CONTINUOUS),
    (sac.SACConfig, sac.make_sac, CONTINUOUS),
])
def test_every_agent_refuses_a_bad_torso_in_one_line(config_cls, make, spec):
    obs = ", ".join(map(str, spec.obs_shape))
    with pytest.raises(ValueError, match=rf"^network PerFeature must map observations "
                                         rf"\[B, \*obs_shape\] \(float32\) to features "
                                         rf"\[B, F\]; observations \[2, {obs}\] gave "
                                         rf"\[2, {obs}, 3\], expected \[2, F\]$"):
        make(config_cls(network="_torsos:PerFeature"), spec)
    with pytest.raises(ValueError, match=r"^network must be a flax.linen.Module class"):
        config_cls(network="_torsos:NOT_A_MODULE")


def dataclass_with(config, network):
    return dataclasses.replace(config, network=network)


@pytest.mark.parametrize("preset", ["cartpole-ppo", "cartpole-dqn", "gymnax-pendulum-sac"])
def test_the_cli_refuses_a_bad_network_in_one_line(preset, capsys, tmp_path):
    rc = cli.main(["train", preset, "--set", "network=_torsos:PerFeature", "--quiet",
                   "--no-tensorboard", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "expected [2, F]" in err, err
    assert not os.listdir(tmp_path)


def test_the_minatar_cnn_takes_grids_and_flat_grids():
    assert check_torso(MinAtarCNN, (10, 10, 4)) == check_torso(MinAtarCNN, (400,)) == 128
    module = MinAtarCNN()
    x = jax.random.uniform(jax.random.key(0), (3, 10, 10, 4))
    params = module.init(jax.random.key(1), x)
    assert params["params"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16)
    np.testing.assert_allclose(module.apply(params, x.reshape(3, 400)), module.apply(params, x))


@pytest.mark.slow
def test_a_user_torso_in_ppo_is_checkpointed_resumed_and_evaluated(tmp_path):
    """One keyword swaps the torso; the run record names it, so a resume and ``rljax
    eval`` rebuild it; the resumed run's rows equal the uninterrupted run's."""
    # gymnax's env state is checkpointed, so the resumed run continues bit for bit
    common = dict(network=TinyTorso, env="gymnax:CartPole-v1", chunk_steps=512,
                  checkpoint_every=512, seed=3, tensorboard=False, eval_every=0)
    whole = rljax.train("cartpole-ppo", run_dir=str(tmp_path / "whole"), total_steps=1_024,
                        **common)
    record = json.load(open(tmp_path / "whole" / "config.json"))
    assert record["config"]["network"] == "_torsos:TinyTorso"
    # The copy resumed from its first checkpoint: the state a run stopped there saved.
    shutil.copytree(tmp_path / "whole", tmp_path / "part")
    resumed = rljax.train(resume=str(tmp_path / "part"), from_checkpoint=512,
                          total_steps=1_024)
    assert resumed.config.config.network == "_torsos:TinyTorso"
    keys = ("env_steps", "episodes", "episode_return_mean", "loss", "value_loss")
    assert [[r.get(k) for k in keys] for r in resumed.metrics] == [
        [r.get(k) for k in keys] for r in whole.metrics[1:]]
    assert "torso" in resumed.state.agent.params["actor"]["params"]
    loaded = rljax.load(str(tmp_path / "part"))
    assert loaded.policy(np.zeros(4, np.float32)) in (0, 1)
    assert cli.main(["eval", str(tmp_path / "part"), "--episodes", "2"]) == 0


def _torso_leaves(tree) -> dict:
    """``{path: leaf}`` of the leaves under a module named "torso"."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): leaf for path, leaf in leaves
            if any(getattr(k, "key", None) == "torso" for k in path)}


def _perturbed(tree, seed=7):
    """``tree`` with every torso leaf replaced by random values."""
    paths = _torso_leaves(tree)
    key = iter(jax.random.split(jax.random.key(seed), len(paths)))
    return jax.tree_util.tree_map_with_path(
        lambda p, x: jax.random.normal(next(key), x.shape, x.dtype)
        if jax.tree_util.keystr(p) in paths else x, tree)


def _critic_values(make, config, spec, state):
    """Each agent's value estimates of 64 random observations (and actions): A2C's
    critic, DQN's Q-values, the continuous agents' critics."""
    obs = jax.random.normal(jax.random.key(3), (64,) + spec.obs_shape)
    if make is a2c.make_a2c:
        built = a2c.parts(config, spec)
        if built.critic is None:
            return built.actor.apply(state.params, obs)[1]
        return built.critic.apply(state.params["critic"], obs)
    if make is dqn.make_dqn:
        return dqn.network(config, spec).apply(state.params, obs)
    action = jax.random.uniform(jax.random.key(4), (64,) + spec.action_shape, minval=-1.0)
    if make is ddpg.make_ddpg:
        return ddpg.parts(config, spec).critic.apply(state.critic, obs, action)
    module = td3 if make is td3.make_td3 else sac
    return module.parts(config, spec).critic.apply(state.critic, obs, action)


# agent, config, env, the state's fields holding a network
AGENTS = {
    "a2c": (a2c.make_a2c, a2c.A2CConfig(), SPEC, {"params"}),
    "a2c-shared": (a2c.make_a2c, a2c.A2CConfig(shared_torso=True), SPEC, {"params"}),
    "rainbow": (dqn.make_dqn, dqn.DQNConfig(num_atoms=5, noisy=True, dueling=True), SPEC,
                {"params", "target_params"}),
    "ddpg": (ddpg.make_ddpg, DDPGConfig(), CONTINUOUS,
             {"actor", "critic", "target_actor", "target_critic"}),
    "td3": (td3.make_td3, td3.TD3Config(), CONTINUOUS,
            {"actor", "critic", "target_actor", "target_critic"}),
    "sac": (sac.make_sac, sac.SACConfig(), CONTINUOUS, {"actor", "critic", "target_critic"}),
}


@pytest.mark.parametrize("name", list(AGENTS))
def test_every_agent_puts_its_layers_on_a_user_torso(name):
    """Every network of the state has the torso (its kernel of the observation width),
    and both the policy and the value estimates change with the torso's parameters."""
    make, config, spec, holders = AGENTS[name]
    config = dataclasses.replace(config, network=TinyTorso)
    agent = make(config, spec)
    state = agent.init(jax.random.key(0))
    kernels = {p: v.shape for p, v in _torso_leaves(state).items() if p.endswith("['kernel']")}
    # (and the optimizer states that keep parameter-shaped moments)
    assert holders <= {p[1:].split("[")[0] for p in kernels}, kernels
    assert all(shape[-2:] == (spec.obs_shape[0], 16) for shape in kernels.values()), kernels
    obs = jax.random.normal(jax.random.key(3), (64,) + spec.obs_shape)
    params = agent.params(state)
    actions = np.asarray(agent.policy(params, obs))
    assert not np.array_equal(actions, np.asarray(agent.policy(_perturbed(params), obs)))
    values = np.asarray(_critic_values(make, config, spec, state))
    assert 64 in values.shape, values.shape  # [64], [2, 64] twin critics, [64, A, K] C51
    assert not np.allclose(values, np.asarray(
        _critic_values(make, config, spec, _perturbed(state))))

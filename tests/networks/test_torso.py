"""A user's torso through the one keyword ``network=``: stored in the run record as an
import string, rebuilt on resume and evaluation, refused in one line when it is not a flax
module or does not give features ``[B, F]``; the MinAtar CNN's shapes."""

from __future__ import annotations

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _torsos import TinyTorso

import rljax
from rljax import envs
from rljax.agents import ppo, pqn
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


def dataclass_with(config, network):
    import dataclasses

    return dataclasses.replace(config, network=network)


def test_the_cli_refuses_a_bad_network_in_one_line(capsys, tmp_path):
    rc = cli.main(["train", "cartpole-ppo", "--set", "network=_torsos:PerFeature", "--quiet",
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
    rljax.train("cartpole-ppo", run_dir=str(tmp_path / "part"), total_steps=512, **common)
    record = json.load(open(tmp_path / "part" / "config.json"))
    assert record["config"]["network"] == "_torsos:TinyTorso"
    resumed = rljax.train(resume=str(tmp_path / "part"), total_steps=1_024)
    assert resumed.config.config.network == "_torsos:TinyTorso"
    keys = ("env_steps", "episodes", "episode_return_mean", "loss", "value_loss")
    assert [[r.get(k) for k in keys] for r in resumed.metrics] == [
        [r.get(k) for k in keys] for r in whole.metrics[1:]]
    assert "torso" in resumed.state.agent.params["actor"]["params"]
    loaded = rljax.load(str(tmp_path / "part"))
    assert loaded.policy(np.zeros(4, np.float32)) in (0, 1)
    assert cli.main(["eval", str(tmp_path / "part"), "--episodes", "2"]) == 0

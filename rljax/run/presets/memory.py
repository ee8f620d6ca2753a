"""Presets of agents with memory (PPO-RNN, PQN-RNN) and their feed-forward controls on a
partially observed task: CartPole-v1 with the velocities hidden (``obs_indices=(0, 2)``:
cart position and pole angle only), where a policy must infer the velocities from the
observations it has seen."""

from __future__ import annotations

import dataclasses

from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.records import Memory, OnPolicyLoop
from rljax.run.presets.base import Preset
from rljax.run.presets.base import preset as _preset

_NOVEL = (("obs_indices", (0, 2)),)  # CartPole-v1: x, theta; no velocities
_BUDGET = 1_000_000

_PPO_RNN = PPOConfig(loop=OnPolicyLoop(num_envs=32, rollout_len=16),
                     num_epochs=4, num_minibatches=4, lr=1e-3, anneal_lr=True,
                     hidden_sizes=(128, 128), activation="relu", reward_scaling=True,
                     memory=Memory(core="gru", size=128))
_PQN_RNN = PQNConfig(loop=OnPolicyLoop(num_envs=32, rollout_len=16),
                     num_epochs=4, num_minibatches=4, lr=3e-4, anneal_lr=True,
                     hidden_sizes=(128, 128), memory=Memory(core="gru", size=128))
_KEYS = ("num_envs", "rollout_len", "num_epochs", "num_minibatches", "lr", "hidden_sizes",
         "memory.core", "memory.size")
_PPO_KEYS = _KEYS + ("reward_scaling",)
_PQN_KEYS = _KEYS + ("epsilon",)
_CONTROL = ("the feed-forward control of {name}: the same configuration and budget without "
            "memory")

PRESETS: list[Preset] = [
    _preset(
        name="cartpole-novel-ppo-rnn", env_id="CartPole-v1", config=_PPO_RNN,
        env_options=_NOVEL, total_steps=_BUDGET, threshold=475.0, key_params=_PPO_KEYS,
        notes="PPO-RNN in PureJaxRL's ppo_rnn shape (Dense 128 relu -> GRU 128 -> actor and "
              "critic heads of Dense 128 relu, PPO 4 epochs x 4 minibatches of whole env "
              "sequences, clip 0.2, entropy 0.01, GAE 0.95, learning rate annealed) on "
              "rljax's CartPole rollout (32 envs x 16 steps) with Adam 1e-3 and rewards divided "
              "by the running std of the return (without it seeds reached only 190-330 by "
              "1M); CartPole-v1 with the velocities hidden"),
    _preset(
        name="cartpole-novel-pqn-rnn", env_id="CartPole-v1", config=_PQN_RNN,
        env_options=_NOVEL, total_steps=_BUDGET, threshold=475.0, key_params=_PQN_KEYS,
        notes="PQN-RNN in purejaxql's pqn_rnn shape (LayerNorm MLP -> GRU -> linear "
              "Q-values, Q(lambda) 0.95, rewards x 0.1, RAdam annealed, minibatches of whole "
              "env sequences; 128 units instead of 256, no memory window of the previous "
              "rollout: each sequence starts from the carry acting recorded) on rljax's "
              "CartPole rollout (32 envs x 16 steps, 4 epochs x 4 minibatches, lr 3e-4 (seed "
              "0 reached 475 at 645k; 5e-4 at 750k, 1e-3 not by 360k), "
              "epsilon 1 -> 0.05 -> 0.01 over 150 updates); CartPole-v1 with the "
              "velocities hidden"),
    _preset(
        name="cartpole-novel-ppo", env_id="CartPole-v1",
        config=dataclasses.replace(_PPO_RNN, memory=None), env_options=_NOVEL,
        total_steps=_BUDGET, threshold=475.0, key_params=_PPO_KEYS,
        notes=_CONTROL.format(name="cartpole-novel-ppo-rnn") + " (separate 128-128 relu "
              "actor and critic)"),
    _preset(
        name="cartpole-novel-pqn", env_id="CartPole-v1",
        config=dataclasses.replace(_PQN_RNN, memory=None), env_options=_NOVEL,
        total_steps=_BUDGET, threshold=475.0, key_params=_PQN_KEYS,
        notes=_CONTROL.format(name="cartpole-novel-pqn-rnn") + " (LayerNorm 128-128)"),
]

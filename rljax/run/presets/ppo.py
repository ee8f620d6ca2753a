"""PPO presets."""

from __future__ import annotations

from rljax.agents.ppo import PPOConfig
from rljax.records import OnPolicyLoop
from rljax.run.presets.base import ONE_THREAD_NOTE, Preset
from rljax.run.presets.base import preset as _preset

# PPO: rollout-then-learn on the on-policy loop.
_ATARI_PPO = PPOConfig(loop=OnPolicyLoop(num_envs=8, rollout_len=128),
                       num_epochs=4, num_minibatches=4, lr=2.5e-4, anneal_lr=True, clip_eps=0.1,
                       value_clip_eps=0.1, entropy_coef=0.01, value_coef=0.25, max_grad_norm=0.5,
                       gae_lambda=0.95, shared_torso=True)
_PPO_KEYS = ("num_envs", "rollout_len", "num_epochs", "num_minibatches", "lr", "clip_eps",
             "entropy_coef", "gae_lambda")
# The MuJoCo PPO reference (Schulman et al.'s MuJoCo settings as the envpool and CleanRL
# continuous-action scripts run them): 2,048 steps per update, 10 epochs x 32 minibatches.
_MUJOCO_PPO = PPOConfig(loop=OnPolicyLoop(num_envs=16, rollout_len=128),
                        num_epochs=10, num_minibatches=32, lr=3e-4, anneal_lr=True, clip_eps=0.2,
                        value_clip_eps=0.2, entropy_coef=0.0, value_coef=0.25, max_grad_norm=0.5,
                        gae_lambda=0.95, gamma=0.99, normalize_obs=True, reward_scaling=True)
_MUJOCO_PPO_NOTE = ("the MuJoCo PPO reference: 2,048 steps per update (16 envs x 128 here, "
                    "1 env x 2,048 there), 10 epochs x 32 minibatches of 64, Adam 3e-4 "
                    "annealed, clip 0.2 with value clipping, no entropy bonus, grad norm 0.5, "
                    "separate 64-64 tanh actor and critic, state-independent log-std, "
                    "observation normalization and reward scaling")
PRESETS: list[Preset] = [
    _preset(
        name="cartpole-ppo",
        env_id="CartPole-v1",
        config=PPOConfig(),
        total_steps=500_000,
        threshold=475.0,
        key_params=_PPO_KEYS,
        cpu_threads=1,
        notes="tuned for wall time: 32 envs x 16 steps, 4 epochs x 4 minibatches, Adam 2.5e-3, "
              "clip 0.2, separate 64-64 tanh actor and critic; 3 of 3 seeds solved within "
              f"70-91k env steps; {ONE_THREAD_NOTE}",
    ),
    _preset(
        name="breakout-ppo",
        env_id="Breakout-v5",
        config=_ATARI_PPO,
        total_steps=10_000_000,
        chunk_steps=10_240,
        key_params=_PPO_KEYS + ("anneal_lr", "value_clip_eps"),
        notes="the envpool-XLA PPO reference defaults (8 envs x 128 steps, 4 x 4 minibatches, "
              "Adam 2.5e-4 annealed to 0, clip 0.1 with value clipping, entropy 0.01, value "
              "coefficient 0.5 on 0.5 (v - G)^2 = 0.25 here, grad norm 0.5), Nature CNN; not "
              "yet run to 10M steps in rljax",
    ),
    _preset(
        name="reacher-ppo",
        env_id="Reacher-v5",
        config=_MUJOCO_PPO,
        total_steps=1_000_000,
        threshold=-3.75,
        chunk_steps=20_480,
        stop_on_solve=False,
        key_params=_PPO_KEYS + ("normalize_obs", "reward_scaling"),
        notes=f"{_MUJOCO_PPO_NOTE}",
    ),
    _preset(
        name="halfcheetah-ppo",
        env_id="HalfCheetah-v5",
        config=_MUJOCO_PPO,
        total_steps=1_000_000,
        threshold=4800.0,
        chunk_steps=20_480,
        stop_on_solve=False,
        key_params=_PPO_KEYS + ("normalize_obs", "reward_scaling"),
        notes=f"{_MUJOCO_PPO_NOTE}",
    ),
    _preset(
        name="breakout-ppo-1m", env_id="Breakout-v5", config=_ATARI_PPO,
        total_steps=1_000_000, chunk_steps=10_240, key_params=_PPO_KEYS + ("anneal_lr",),
        notes="a 1M-step CPU demonstration, NOT the reference: breakout-ppo's configuration "
              "with a 1M-step budget (the learning rate anneals to 0 over 1M steps); "
              "seed 0 on CPU: 100-episode mean 10.1 at 266,240 env steps, 22.6 at 1M "
              "(docs/results.md)"),
]

"""Presets on Brax's and MuJoCo Playground's JAX physics (``brax:NAME``, ``playground:NAME``).

Two kinds. CPU presets (``CPU:`` in the notes) are sized to learn on a 2-core CPU in
minutes: brax's inverted pendulum on its positional pipeline, its reacher on the
generalized pipeline with Gymnasium Reacher's 50-step episodes, and Playground's
CartpoleBalance with SAC (learning, not yet solved within its budget). GPU presets carry the
published settings: brax's training notebook (``notebooks/training.ipynb``: reacher, ant,
halfcheetah PPO) and Playground's ``config/dm_control_suite_params.py`` (``brax_ppo_config``,
``brax_sac_config``), with 2,048 (PPO) or 128 (SAC) envs and tens of millions of steps:
they are meant for an accelerator and were not run here. Differences from those settings:
rljax's PPO normalises rewards by a running return scale (``reward_scaling``) where brax
multiplies them by a constant, and it has no action repeat (brax reacher's
``action_repeat=4`` is left out); brax's SAC critic LayerNorm is not in rljax's SAC.
"""

from __future__ import annotations

from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.records import OffPolicyLoop, OnPolicyLoop, Replay
from rljax.run.presets.base import Preset
from rljax.run.presets.base import preset as _preset
from rljax.run.presets.ppo import _MUJOCO_PPO, _MUJOCO_PPO_NOTE
from rljax.run.presets.twin_critic import _REACHER_LOOP, _REACHER_NOTE, _REACHER_REPLAY

_PPO_KEYS = ("num_envs", "rollout_len", "num_epochs", "num_minibatches", "lr", "gamma",
             "entropy_coef", "normalize_obs")
_SAC_KEYS = ("num_envs", "grad_steps", "batch_size", "buffer_size", "learning_starts",
             "actor_lr", "critic_lr", "gamma")
_GPU = "a GPU run (not run on this CPU)"


def _brax_ppo(num_envs: int, unroll: int, epochs: int, gamma: float, entropy: float,
              minibatches: int = 32) -> PPOConfig:
    """brax's notebook PPO: Adam 3e-4, normalised observations."""
    return PPOConfig(loop=OnPolicyLoop(num_envs=num_envs, rollout_len=unroll),
                     num_epochs=epochs, num_minibatches=minibatches, lr=3e-4, gamma=gamma,
                     entropy_coef=entropy, normalize_obs=True, reward_scaling=True,
                     hidden_sizes=(256, 256), activation="swish", max_grad_norm=None)


def _cpu_sac(num_envs: int, grad_steps: int) -> SACConfig:
    """Playground's brax_sac_config's Adam 1e-3, gamma 0.99 and 8,192 steps before
    learning, with gradient steps of 256 and 64-64 networks (CPU-sized)."""
    return SACConfig(loop=OffPolicyLoop(num_envs=num_envs, grad_steps=grad_steps,
                                        random_steps=8192),
                     replay=Replay(batch_size=256, buffer_size=200_000, learning_starts=8192),
                     actor_hidden=(64, 64), critic_hidden=(64, 64), actor_lr=1e-3,
                     critic_lr=1e-3, temperature_lr=1e-3)


_CPU_SAC_NOTE = ("CPU: Playground's brax_sac_config's Adam 1e-3, gamma 0.99 and 8,192 steps "
                 "before learning")


# Playground's brax_ppo_config for the DM Control suite, and its brax_sac_config.
_PG_PPO = PPOConfig(loop=OnPolicyLoop(num_envs=2048, rollout_len=30), num_epochs=16,
                    num_minibatches=32, lr=1e-3, gamma=0.995, entropy_coef=1e-2,
                    normalize_obs=True, reward_scaling=True, hidden_sizes=(256, 256),
                    activation="swish", max_grad_norm=None)
_PG_SAC = SACConfig(loop=OffPolicyLoop(num_envs=128, grad_steps=8, random_steps=8192),
                    replay=Replay(batch_size=512, buffer_size=1_048_576, learning_starts=8192),
                    actor_lr=1e-3, critic_lr=1e-3, gamma=0.99)
_PG_PPO_NOTE = ("Playground's dm_control_suite_params brax_ppo_config (2,048 envs x 30 steps, "
                "16 epochs x 32 minibatches, Adam 1e-3, gamma 0.995, entropy 1e-2, normalised "
                "observations)")
_PG_SAC_NOTE = ("Playground's dm_control_suite_params brax_sac_config (128 envs, 8 gradient "
                "steps of 512 per 128 env steps, Adam 1e-3, gamma 0.99, 8,192 steps before "
                "learning; replay 1M where it has 4M)")


def _playground(task: str, slug: str, ppo_steps: int, sac_steps: int,
                threshold: float | None) -> list[Preset]:
    env_id = f"playground:{task}"
    return [
        _preset(name=f"playground-{slug}-ppo", env_id=env_id, config=_PG_PPO,
                total_steps=ppo_steps, threshold=threshold, chunk_steps=2048 * 30 * 8,
                key_params=_PPO_KEYS,
                notes=f"{_PG_PPO_NOTE}, {ppo_steps // 1_000_000}M steps: {_GPU}"),
        _preset(name=f"playground-{slug}-sac", env_id=env_id, config=_PG_SAC,
                total_steps=sac_steps, threshold=threshold, chunk_steps=128 * 400,
                key_params=_SAC_KEYS,
                notes=f"{_PG_SAC_NOTE}, {sac_steps // 1_000_000}M steps: {_GPU}"),
    ]


PRESETS: list[Preset] = [
    _preset(name="brax-inverted-pendulum-sac", env_id="brax:inverted_pendulum",
            config=_cpu_sac(num_envs=16, grad_steps=4),
            total_steps=300_000, threshold=950.0, chunk_steps=8192, stop_on_solve=True,
            key_params=_SAC_KEYS + ("actor_hidden", "critic_hidden"),
            notes=f"{_CPU_SAC_NOTE}; 4 gradient steps of 256 per 16 env steps (the SAC "
                  "paper's batch; Playground: 8 of 512 per 128), 64-64 networks (the "
                  "paper's 256-256 cost 10x the time per step here), on brax's positional "
                  "pipeline; 300k steps: the 100-episode window needs ~100k steps of "
                  "1,000-step episodes once it balances"),
    _preset(name="brax-inverted-pendulum-ppo", env_id="brax:inverted_pendulum",
            config=PPOConfig(loop=OnPolicyLoop(num_envs=32, rollout_len=32), num_epochs=4,
                             num_minibatches=4, lr=3e-4, gamma=0.97, entropy_coef=1e-2,
                             normalize_obs=True),
            total_steps=500_000, threshold=950.0, chunk_steps=32_768, key_params=_PPO_KEYS,
            notes="CPU: brax's notebook inverted_pendulum PPO (Adam 3e-4, gamma 0.97, "
                  "entropy 1e-2, normalised observations) at 32 envs x 32 steps, 4 epochs x "
                  "4 minibatches, tanh 64-64, where brax has 2,048 envs x 5 steps"),
    _preset(name="brax-reacher-ppo-cpu", env_id="brax:reacher", config=_MUJOCO_PPO,
            env_options=(("backend", "generalized"), ("max_episode_steps", 50)),
            total_steps=400_000, threshold=-6.0, chunk_steps=20_480, stop_on_solve=True,
            key_params=_PPO_KEYS,
            notes="CPU: Gymnasium Reacher's twin, 50-step (1 s) episodes of brax's reacher "
                  "on its generalized pipeline (Reacher-v5's gear 200 and 2 x 10 ms steps; "
                  "the positional pipeline's gear 25 did not learn to reach), with "
                  f"reacher-ppo's settings, {_MUJOCO_PPO_NOTE}; -6.0 is the TD3 paper's PPO "
                  "line on Reacher"),
    _preset(name="brax-reacher-sac-cpu", env_id="brax:reacher",
            config=SACConfig(loop=_REACHER_LOOP, replay=_REACHER_REPLAY),
            env_options=(("backend", "generalized"), ("max_episode_steps", 50)),
            total_steps=200_000, threshold=-6.0, chunk_steps=10_000, stop_on_solve=True,
            key_params=_SAC_KEYS,
            notes="CPU: brax-reacher-ppo-cpu's task (50-step episodes on the generalized "
                  f"pipeline) with reacher-sac's settings, {_REACHER_NOTE}, temperature "
                  "learned toward entropy -2 (brax publishes SAC settings for hopper and "
                  "walker2d only, none for reacher); -6.0 as brax-reacher-ppo-cpu"),
    _preset(name="brax-reacher-ppo", env_id="brax:reacher",
            config=_brax_ppo(2048, 50, 8, 0.95, 1e-3), total_steps=50_000_000,
            chunk_steps=2048 * 50 * 4, key_params=_PPO_KEYS,
            notes="brax's notebook reacher PPO (2,048 envs x 50 steps, 8 epochs x 32 "
                  "minibatches, Adam 3e-4, gamma 0.95, entropy 1e-3), without its action "
                  f"repeat of 4, 50M steps: {_GPU}"),
    _preset(name="brax-halfcheetah-ppo", env_id="brax:halfcheetah",
            config=_brax_ppo(2048, 20, 8, 0.95, 1e-3), total_steps=50_000_000,
            chunk_steps=2048 * 20 * 8, key_params=_PPO_KEYS,
            notes="brax's notebook halfcheetah PPO (2,048 envs x 20 steps, 8 epochs x 32 "
                  f"minibatches, Adam 3e-4, gamma 0.95, entropy 1e-3), 50M steps: {_GPU}"),
    _preset(name="brax-ant-ppo", env_id="brax:ant",
            config=_brax_ppo(4096, 5, 4, 0.97, 1e-2), total_steps=50_000_000,
            chunk_steps=4096 * 5 * 40, key_params=_PPO_KEYS,
            notes="brax's notebook ant PPO (4,096 envs x 5 steps, 4 epochs x 32 minibatches, "
                  f"Adam 3e-4, gamma 0.97, entropy 1e-2), 50M steps: {_GPU}"),
    _preset(name="playground-cartpole-balance-sac-cpu", env_id="playground:CartpoleBalance",
            config=_cpu_sac(num_envs=32, grad_steps=8),
            total_steps=200_000, threshold=900.0, chunk_steps=16_384, stop_on_solve=True,
            key_params=_SAC_KEYS + ("actor_hidden", "critic_hidden"),
            notes=f"{_CPU_SAC_NOTE}, at 32 envs with 8 gradient steps of 256 per 32 env "
                  "steps (Playground: 8 of 512 per 128) and 64-64 networks, as "
                  "brax-inverted-pendulum-sac; MJX (impl='jax') on the CPU; seed 51: episodes "
                  "past 900 from ~160k, 100-episode mean 861 at 200k (not solved; "
                  "docs/results.md)"),
    *_playground("CartpoleBalance", "cartpole-balance", 60_000_000, 5_000_000, 900.0),
    *_playground("ReacherEasy", "reacher-easy", 60_000_000, 5_000_000, 800.0),
    *_playground("CheetahRun", "cheetah-run", 60_000_000, 10_000_000, None),
]

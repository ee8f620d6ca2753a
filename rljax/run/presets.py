"""Named, reproducible training configurations."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from rljax.agents.a2c import A2CConfig
from rljax.agents.ddpg import DDPGConfig
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.agents.sac import SACConfig
from rljax.agents.td3 import TD3Config
from rljax.run.config import RunConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """A named run: algorithm, environment, hyperparameters and budget.

    Attributes:
        name: preset name (``rljax train NAME``).
        run: the run it stands for (with ``preset=name``); the command line and
            :func:`rljax.run.config.from_preset` override parts of it.
        key_params: agent config fields shown by ``rljax presets``.
        notes: anything a user should know about the preset.
    """

    name: str
    run: RunConfig
    key_params: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self):
        if self.run.preset != self.name:
            raise ValueError(f"preset {self.name!r} holds a run named {self.run.preset!r}")
        fields = {f.name for f in dataclasses.fields(self.run.config)}
        unknown = [k for k in self.key_params if k not in fields]
        if unknown:
            raise ValueError(f"preset {self.name!r}: key_params {unknown} are not fields of "
                             f"{type(self.run.config).__name__}")


def _preset(*, name: str, key_params: tuple[str, ...], notes: str, **run: Any) -> Preset:
    """A Preset whose run is ``RunConfig(preset=name, **run)``."""
    return Preset(name=name, run=RunConfig(preset=name, **run), key_params=key_params,
                  notes=notes)


_PRESETS: list[Preset] = [
    _preset(
        name="cartpole-a2c",
        algo="a2c",
        env_id="CartPole-v1",
        config=A2CConfig(gae_lambda=0.95),
        total_steps=500_000,
        threshold=475.0,
        key_params=("num_envs", "rollout_len", "gae_lambda", "actor_lr", "critic_lr",
                    "entropy_coef", "gamma"),
        notes="reference A2C (separate actor 2x128 / critic 2x64, 5-step rollouts) with "
              "GAE(0.95) advantages: 8 of 8 seeds solve within 500k steps here, against 7 "
              "of 8 with plain 5-step returns (--set gae_lambda=none)",
    ),
]

# DQN. The reference (Breakout) trains 1,000,000 updates of 8 envs x 4 steps = 32M env steps.
_DQN_KEYS = ("num_envs", "env_steps_per_update", "grad_steps", "batch_size", "buffer_size",
             "lr", "target_period", "epsilon", "beta")
_PRESETS += [
    _preset(
        name="cartpole-dqn",
        algo="dqn",
        env_id="CartPole-v1",
        config=DQNConfig(grad_steps=4, batch_size=64, buffer_size=50_000, learning_starts=1_000,
                         n_step=3, hidden_sizes=(128, 128), lr=5e-4, max_grad_norm=10.0,
                         target_period=50, epsilon=((0, 1.0), (300, 0.02)),
                         beta=((0, 0.4), (9_375, 1.0))),
        total_steps=300_000,
        threshold=475.0,
        key_params=_DQN_KEYS + ("n_step", "hidden_sizes", "learning_starts"),
        notes="tuned for wall time: 8 envs x 4 steps, then 4 gradient steps of 64 (8 samples "
              "per env step), 3-step double dueling DQN with prioritized replay, target copy "
              "every 50 updates, epsilon 1 -> 0.02 over the first 300 updates (9.6k steps)",
    ),
    _preset(
        name="breakout-dqn",
        algo="dqn",
        env_id="Breakout-v5",
        config=DQNConfig(),
        total_steps=10_000_000,
        chunk_steps=10_240,
        key_params=_DQN_KEYS,
        notes="the reference configuration (double + dueling DQN, prioritized replay 2^14, "
              "Huber, Adam 2.5e-4, clip 0.5, target copy every 250 updates); the reference "
              "trains 1,000,000 updates = 32M env steps, this preset defaults to 10M with "
              "the reference breakpoints kept (epsilon 0.01 at update 500,000, beta 1 at "
              "update 1,000,000), so a 10M-step run ends at epsilon 0.046 and beta 0.59",
    ),
    _preset(
        name="breakout-dqn-500k",
        algo="dqn",
        env_id="Breakout-v5",
        config=DQNConfig(grad_steps=2, epsilon=((0, 1.0), (3_125, 0.1), (12_500, 0.01)),
                         beta=((0, 0.4), (15_625, 1.0))),
        total_steps=500_000,
        chunk_steps=10_240,
        key_params=_DQN_KEYS,
        notes="a 500k-step CPU demonstration, NOT the reference: breakout-dqn with a quarter "
              "of the gradient work (2 gradient steps per update, 1 of 32 per 16 env steps; "
              "about an hour on 2 CPU cores) and the "
              "schedules compressed: epsilon 1 -> 0.1 at update 3,125 (100k env steps) -> "
              "0.01 at update 12,500 (400k), beta 0.4 -> 1 at the last update (15,625)",
    ),
]

# DDPG on Reacher-v5 (50-step episodes; 51 env steps each with envpool's reset step).
_DDPG_KEYS = ("num_envs", "env_steps_per_update", "grad_steps", "batch_size", "actor_lr",
              "critic_lr", "tau", "gamma", "n_step", "noise", "noise_scale", "noise_decay")
_PRESETS += [
    _preset(
        name="reacher-ddpg",
        algo="ddpg",
        env_id="Reacher-v5",
        config=DDPGConfig(env_steps_per_update=1, grad_steps=10, batch_size=256,
                          learning_starts=5_000, buffer_size=300_000, batch_norm=False,
                          lr_decay_steps=150_000, actor_weight_decay=0.0,
                          critic_weight_decay=0.0, tau=5e-3, target_critic_init="copy",
                          target_noise=0.2, noise="gaussian", gaussian_sigma=0.3,
                          noise_scale=1.0, noise_decay=0.98, noise_scale_min=0.1),
        total_steps=500_000,
        threshold=-3.75,
        chunk_steps=20_000,
        stop_on_solve=False,
        key_params=_DDPG_KEYS + ("batch_norm", "target_noise", "lr_decay_steps"),
        notes="tuned: 10 gradient steps of 256 per 20 env steps, no batch norm (the "
              "batch-statistics noise limits the critic's precision), Adam 1e-3 -> 1e-4 over "
              "150k steps without weight decay, tau 5e-3, target-action smoothing 0.2, "
              "Gaussian noise 0.3 x 0.98^episode (floor 0.1); prioritized replay as the "
              "reference. Solves in ~100-150k env steps; trains the whole 500k budget "
              "(stop_on_solve off) to show the policy stays solved",
    ),
    _preset(
        name="reacher-ddpg-reference",
        algo="ddpg",
        env_id="Reacher-v5",
        config=DDPGConfig(),
        total_steps=2_000_000,
        threshold=-3.75,
        chunk_steps=20_000,
        stop_on_solve=True,
        key_params=_DDPG_KEYS,
        notes="the reference configuration: 20 envs, 100 gradient steps of 128 every 50 "
              "steps, prioritized replay (alpha 0.6, beta 1, initial TD-error priorities), "
              "Adam 1e-3 with L2 1e-4, tau 5e-4, OU(0.01, 0.2) x 0.75 * 0.92^episode; stops "
              "at the solve threshold",
    ),
]

# Rainbow: DQN with the categorical head (num_atoms > 1) and every other option on.
_RAINBOW_KEYS = _DQN_KEYS + ("n_step", "num_atoms", "v_min", "v_max", "noisy", "alpha")
_PRESETS += [
    _preset(
        name="cartpole-rainbow",
        algo="dqn",
        env_id="CartPole-v1",
        config=DQNConfig(grad_steps=4, batch_size=64, buffer_size=50_000, learning_starts=1_000,
                         n_step=3, hidden_sizes=(128, 128), lr=5e-4, max_grad_norm=10.0,
                         target_period=50, beta=((0, 0.4), (9_375, 1.0)), num_atoms=51,
                         v_min=0.0, v_max=100.0, noisy=True, noisy_sigma0=0.5, alpha=0.5,
                         adam_eps=1.5e-4),
        total_steps=300_000,
        threshold=475.0,
        key_params=_RAINBOW_KEYS,
        notes="cartpole-dqn's loop with Rainbow's parts: 51 atoms on [0, 100], NoisyNet "
              "(sigma0 0.5) instead of epsilon, PER alpha 0.5, 3-step double dueling "
              "targets; 3 of 3 seeds solved at 136k-233k env steps",
    ),
    _preset(
        name="breakout-rainbow",
        algo="dqn",
        env_id="Breakout-v5",
        config=DQNConfig(buffer_size=1_000_000, learning_starts=20_000, lr=6.25e-5,
                         adam_eps=1.5e-4, alpha=0.5, beta=((0, 0.4), (312_500, 1.0)),
                         noisy=True, noisy_sigma0=0.5, n_step=3, num_atoms=51, v_min=-10.0,
                         v_max=10.0, max_grad_norm=10.0, target_period=250),
        total_steps=10_000_000,
        chunk_steps=10_240,
        key_params=_RAINBOW_KEYS,
        notes="Hessel et al.'s configuration in rljax's units (a loop update = 8 envs x 4 "
              "agent steps = 128 frames): target copy every 32k frames = 250 updates, "
              "learning from 80k frames = 20k env steps, replay 1M, one batch of 32 per 4 "
              "agent steps, beta 0.4 -> 1 over the 10M steps; not yet run in rljax",
    ),
    _preset(
        name="breakout-rainbow-500k",
        algo="dqn",
        env_id="Breakout-v5",
        config=DQNConfig(grad_steps=2, beta=((0, 0.4), (15_625, 1.0)), alpha=0.5,
                         adam_eps=1.5e-4, noisy=True, noisy_sigma0=0.5, n_step=3,
                         num_atoms=51, v_min=-10.0, v_max=10.0),
        total_steps=500_000,
        chunk_steps=10_240,
        key_params=_RAINBOW_KEYS,
        notes="a 500k-step CPU demonstration, NOT the reference: breakout-dqn-500k's replay, "
              "gradient work (1 step of 32 per 16 env steps), learning rate, target period and "
              "beta schedule, with Rainbow's parts switched on (51 atoms on [-10, 10], "
              "NoisyNet sigma0 0.5 instead of epsilon, PER alpha 0.5, 3-step targets, Adam "
              "eps 1.5e-4), so that the two compare at equal work; seeds 0-1 on CPU: 18.4 / "
              "44.1 at 500k env steps against breakout-dqn-500k's 16.2 / 16.2 (docs/results.md)",
    ),
]

# PPO and PQN: rollout-then-learn agents on the on-policy loop.
_ATARI_PPO = PPOConfig(num_envs=8, rollout_len=128, num_epochs=4, num_minibatches=4,
                       lr=2.5e-4, anneal_lr=True, clip_eps=0.1, value_clip_eps=0.1,
                       entropy_coef=0.01, value_coef=0.25, max_grad_norm=0.5, gae_lambda=0.95,
                       shared_torso=True)
_ATARI_PQN = PQNConfig(num_envs=128, rollout_len=32, num_epochs=2, num_minibatches=32,
                       lr=2.5e-4, q_lambda=0.65, reward_scale=1.0,
                       epsilon=((0, 1.0), (244, 0.001)))
_PPO_KEYS = ("num_envs", "rollout_len", "num_epochs", "num_minibatches", "lr", "clip_eps",
             "entropy_coef", "gae_lambda")
_PQN_KEYS = ("num_envs", "rollout_len", "num_epochs", "num_minibatches", "lr", "q_lambda",
             "epsilon")
# The MuJoCo PPO reference (Schulman et al.'s MuJoCo settings as the envpool and CleanRL
# continuous-action scripts run them): 2,048 steps per update, 10 epochs x 32 minibatches.
_MUJOCO_PPO = PPOConfig(num_envs=16, rollout_len=128, num_epochs=10, num_minibatches=32,
                        lr=3e-4, anneal_lr=True, clip_eps=0.2, value_clip_eps=0.2,
                        entropy_coef=0.0, value_coef=0.25, max_grad_norm=0.5,
                        gae_lambda=0.95, gamma=0.99, normalize_obs=True, reward_scaling=True)
_MUJOCO_PPO_NOTE = ("the MuJoCo PPO reference: 2,048 steps per update (16 envs x 128 here, "
                    "1 env x 2,048 there), 10 epochs x 32 minibatches of 64, Adam 3e-4 "
                    "annealed, clip 0.2 with value clipping, no entropy bonus, grad norm 0.5, "
                    "separate 64-64 tanh actor and critic, state-independent log-std, "
                    "observation normalization and reward scaling")
_PRESETS += [
    _preset(
        name="cartpole-ppo",
        algo="ppo",
        env_id="CartPole-v1",
        config=PPOConfig(),
        total_steps=500_000,
        threshold=475.0,
        key_params=_PPO_KEYS,
        notes="tuned for wall time: 32 envs x 16 steps, 4 epochs x 4 minibatches, Adam 2.5e-3, "
              "clip 0.2, separate 64-64 tanh actor and critic; 3 of 3 seeds solved within "
              "70-91k env steps",
    ),
    _preset(
        name="breakout-ppo",
        algo="ppo",
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
        algo="ppo",
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
        algo="ppo",
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
        name="cartpole-pqn",
        algo="pqn",
        env_id="CartPole-v1",
        config=PQNConfig(anneal_lr=True),
        total_steps=500_000,
        threshold=475.0,
        key_params=_PQN_KEYS + ("anneal_lr",),
        notes="32 envs x 16 steps, 4 epochs x 4 minibatches, LayerNorm 128-128, RAdam 1e-3 "
              "annealed to 0 over the run, Q(0.95), epsilon 1 -> 0.05 -> 0.01 over 150 "
              "updates; seeds 0-15 in one program all solved, at 83-141k env steps, but "
              "only 10 of 16 were still solved at 500k (the others ended at 15-458; "
              "docs/results.md); a constant learning rate solved sooner, 72-97k, but seed 0 "
              "fell to 163 by 500k",
    ),
    _preset(
        name="breakout-pqn",
        algo="pqn",
        env_id="Breakout-v5",
        config=_ATARI_PQN,
        total_steps=10_000_000,
        chunk_steps=40_960,
        key_params=_PQN_KEYS,
        notes="the PQN paper's Atari configuration (128 envs x 32 steps, 2 epochs x 32 "
              "minibatches, RAdam 2.5e-4, lambda 0.65, epsilon 1 -> 0.001 over the first 10% "
              "of updates), 10M env steps; not yet run in rljax",
    ),
    _preset(
        name="breakout-ppo-1m", algo="ppo", env_id="Breakout-v5", config=_ATARI_PPO,
        total_steps=1_000_000, chunk_steps=10_240, key_params=_PPO_KEYS + ("anneal_lr",),
        notes="a 1M-step CPU demonstration, NOT the reference: breakout-ppo's configuration "
              "with a 1M-step budget (the learning rate anneals to 0 over 1M steps); "
              "seed 0 on CPU: 100-episode mean 10.1 at 266,240 env steps, 22.6 at 1M "
              "(docs/results.md)"),
    _preset(
        name="breakout-pqn-1m", algo="pqn", env_id="Breakout-v5",
        config=dataclasses.replace(_ATARI_PQN, epsilon=((0, 1.0), (24, 0.001))),
        total_steps=1_000_000, chunk_steps=40_960, key_params=_PQN_KEYS,
        notes="a 1M-step CPU demonstration, NOT the reference: breakout-pqn's configuration "
              "with a 1M-step budget (244 updates; epsilon 1 -> 0.001 over the first 10%, "
              "24 updates); seed 0 on CPU: 100-episode mean 10.4 at 409,600 env steps, "
              "31.8 at 1M (docs/results.md)"),
]

# TD3 and SAC: the off-policy loop with twin critics. The MuJoCo configurations are the
# authors' (one env, one gradient step of 256 per env step); Reacher's is tuned for this CPU.
_TD3_KEYS = ("num_envs", "env_steps_per_update", "grad_steps", "batch_size", "buffer_size",
             "learning_starts", "actor_lr", "critic_lr", "tau")
_SAC_KEYS = _TD3_KEYS + ("init_temperature", "target_entropy")
_REACHER_REPLAY = dict(num_envs=20, env_steps_per_update=1, grad_steps=10, batch_size=256,
                       learning_starts=5_000, random_steps=5_000, buffer_size=300_000)
_REACHER_WORK = ("20 envs, 10 gradient steps of 256 per 20 env steps (half the papers' "
                 "gradient work per env step), 5k random steps, 300k replay")
_REACHER_NOTE = f"{_REACHER_WORK}, 256-256 networks, Adam 3e-4"
_MUJOCO_NOTE = ("one env, one gradient step of 256 per env step, 1M replay, 256-256 ReLU, "
                "Adam 3e-4, tau 0.005")
_PRESETS += [
    # reacher-td3's gamma, learning rate and networks against the paper's:
    # docs/results.md#reacher-td3.
    _preset(name="reacher-td3", algo="td3", env_id="Reacher-v5",
            config=TD3Config(**_REACHER_REPLAY, gamma=0.97, actor_lr=1e-3, critic_lr=1e-3,
                             actor_hidden=(150, 150), critic_hidden=(150, 150)),
            total_steps=1_000_000, threshold=-3.75, chunk_steps=20_000, stop_on_solve=False,
            eval_every=20_000, eval_episodes=100,
            key_params=_TD3_KEYS + ("gamma", "actor_hidden", "critic_hidden"),
            notes=f"tuned for this CPU: {_REACHER_WORK}, gamma 0.97, 150-150 networks, "
                  "Adam 1e-3 (better at 160k than the paper's 0.99, 256-256, 3e-4), policy "
                  "delay 2, smoothing 0.2 clipped at 0.5, exploration 0.1; the noise-free "
                  "policy evaluated on 100 episodes every 20k steps; the paper's "
                  "configuration is halfcheetah-td3's with --env Reacher-v5"),
    _preset(name="reacher-sac", algo="sac", env_id="Reacher-v5",
            config=SACConfig(**_REACHER_REPLAY), total_steps=1_000_000, threshold=-3.75,
            chunk_steps=20_000, stop_on_solve=False, eval_every=20_000, eval_episodes=100,
            key_params=_SAC_KEYS,
            notes=f"tuned for this CPU: {_REACHER_NOTE}, temperature from 1 learned toward "
                  "entropy -2; the paper's configuration is halfcheetah-sac's with --env "
                  "Reacher-v5"),
    _preset(name="halfcheetah-td3", algo="td3", env_id="HalfCheetah-v5", config=TD3Config(),
            total_steps=1_000_000, threshold=4800.0, chunk_steps=20_000, stop_on_solve=False,
            key_params=_TD3_KEYS,
            notes=f"the TD3 authors' published code: {_MUJOCO_NOTE}, 25k random steps, "
                  "policy delay 2, smoothing 0.2 clipped at 0.5, exploration 0.1; seed 0 on "
                  "CPU: noise-free policy 9,128 at 1M steps (docs/results.md)"),
    _preset(name="halfcheetah-sac", algo="sac", env_id="HalfCheetah-v5", config=SACConfig(),
            total_steps=1_000_000, threshold=4800.0, chunk_steps=20_000, stop_on_solve=False,
            key_params=_SAC_KEYS,
            notes=f"the SAC paper's table: {_MUJOCO_NOTE}, temperature learned toward "
                  "entropy -6, 10k random steps; seed 0 on CPU: noise-free policy 10,299 at "
                  "1M steps, 9,017 at 600k (docs/results.md)"),
    _preset(name="hopper-sac", algo="sac", env_id="Hopper-v5", config=SACConfig(),
            total_steps=1_000_000, threshold=3800.0, chunk_steps=20_000, stop_on_solve=False,
            key_params=_SAC_KEYS,
            notes=f"the SAC paper's table: {_MUJOCO_NOTE}, temperature learned toward "
                  "entropy -3, 10k random steps; seed 0 on CPU: noise-free policy 3,316 at "
                  "300k steps (docs/results.md; not yet run to 1M)"),
]

PRESETS: dict[str, Preset] = {p.name: p for p in _PRESETS}


def get_preset(name: str) -> Preset:
    """Returns the preset called ``name``; ValueError listing the choices otherwise."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown preset {name!r}{hint}; available: {', '.join(PRESETS)}")
    return PRESETS[name]

"""Peer libraries beside rljax in ``rljax bench``: the same preset's env and config in
Stable-Baselines3 (PyTorch: A2C, DQN, DDPG) and sbx (JAX: PPO, TD3, SAC), trained in this
process after a warm-up. A peer that is not installed gives a row saying so.

Shipped in the run layer (not in ``benchmarks/``, which an installed rljax lacks) because
``rljax bench`` reports the peers beside each preset it measures and lists them in
``--presets``; ``benchmarks/sbx_peer.py`` reuses :func:`_sbx_model`."""

from __future__ import annotations

import importlib.util
import time

import jax

# Presets with a peer counterpart (Stable-Baselines3 on PyTorch, sbx on JAX), for
# ``--presets``; the default list stays short (each preset runs in a fresh process).
SB3_PRESETS = ("cartpole-a2c", "cartpole-dqn", "reacher-ddpg")
SBX_PRESETS = ("cartpole-ppo", "reacher-ppo", "halfcheetah-ppo", "reacher-td3", "reacher-sac",
               "halfcheetah-td3", "halfcheetah-sac", "hopper-sac")
SBX_MISSING = "sbx-rl is not installed (pip install sbx-rl): no sbx peer"

def _sb3_model(preset: str):
    """A Stable-Baselines3 model on the preset's env with its sizes and gradient work:
    ``(model, warm-up steps, timed steps, what differs)``, or None for no counterpart."""
    import numpy as np
    from stable_baselines3 import A2C, DDPG, DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    from rljax.run.presets import from_preset

    run = from_preset(preset, tensorboard=False)
    c = run.config
    if preset == "cartpole-a2c":
        vec = make_vec_env(run.env_id, n_envs=c.loop.num_envs)
        model = A2C("MlpPolicy", vec, n_steps=c.loop.rollout_len, learning_rate=c.actor_lr,
                    gamma=c.gamma, gae_lambda=c.gae_lambda or 1.0, ent_coef=c.entropy_coef,
                    policy_kwargs={"net_arch": {"pi": list(c.actor_hidden),
                                                "vf": list(c.critic_hidden)}}, verbose=0)
        return model, 2_000, 40_000, "one optimizer (RMSprop) for actor and critic"
    if preset == "cartpole-dqn":
        vec = make_vec_env(run.env_id, n_envs=c.loop.num_envs)
        model = DQN("MlpPolicy", vec, learning_rate=c.lr, buffer_size=c.replay.buffer_size,
                    learning_starts=c.replay.min_replay, batch_size=c.replay.batch_size,
                    gamma=c.gamma,
                    train_freq=c.loop.env_steps_per_update, gradient_steps=c.loop.grad_steps,
                    target_update_interval=c.target_period * c.loop.steps_per_update,
                    max_grad_norm=c.max_grad_norm or 1e9,
                    policy_kwargs={"net_arch": list(c.hidden_sizes)}, verbose=0)
        return (model, c.replay.min_replay + 2_000, 20_000,
                "uniform replay, plain (not double, dueling or n-step) DQN")
    if preset == "reacher-ddpg":
        vec = make_vec_env(run.env_id, n_envs=c.loop.num_envs)
        dim = vec.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(dim), c.gaussian_sigma * np.ones(dim))
        model = DDPG("MlpPolicy", vec, learning_rate=c.critic_lr, buffer_size=c.replay.buffer_size,
                     learning_starts=c.replay.min_replay, batch_size=c.replay.batch_size, tau=c.tau,
                     gamma=c.gamma, train_freq=c.loop.env_steps_per_update,
                     gradient_steps=c.loop.grad_steps, action_noise=noise,
                     policy_kwargs={"net_arch": list(c.critic_hidden)}, verbose=0)
        return (model, c.replay.min_replay + 2_000, 10_000,
                "uniform replay, no target-action smoothing, gymnasium's MuJoCo Reacher")
    return None


def _sbx_model(preset: str, run=None):
    """An sbx (Stable-Baselines3 in JAX) model on the preset's env with its sizes and
    gradient work (``run``: the preset's run with overrides; None: as it is):
    ``(model, warm-up steps, timed steps, what differs)``, or None for no counterpart."""
    import flax.linen as nn
    import numpy as np
    from sbx import PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize

    from rljax.run.presets import from_preset

    if preset not in SBX_PRESETS:
        return None
    run = run or from_preset(preset, tensorboard=False)
    c = run.config
    vec = make_vec_env(run.env_id, n_envs=c.loop.num_envs)
    differs = ["gymnasium's MuJoCo env stepped from Python"] if run.env_id != "CartPole-v1" \
        else ["gymnasium's CartPole stepped from Python"]
    if run.algo == "ppo":
        if c.normalize_obs or c.reward_scaling:
            vec = VecNormalize(vec, norm_obs=c.normalize_obs, norm_reward=c.reward_scaling,
                               gamma=c.gamma)
        if c.anneal_lr:
            differs.append("constant learning rate (rljax anneals it)")
        if c.shared_torso:
            differs.append("separate actor and critic (rljax shares a torso)")
        model = PPO("MlpPolicy", vec, learning_rate=c.lr, n_steps=c.loop.rollout_len,
                    batch_size=c.loop.steps_per_update // c.num_minibatches, n_epochs=c.num_epochs,
                    gamma=c.gamma, gae_lambda=c.gae_lambda, clip_range=c.clip_eps,
                    clip_range_vf=c.value_clip_eps, ent_coef=c.entropy_coef,
                    vf_coef=c.value_coef, max_grad_norm=c.max_grad_norm or 1e9,
                    policy_kwargs={"net_arch": {"pi": list(c.hidden_sizes),
                                                "vf": list(c.hidden_sizes)},
                                   "activation_fn": getattr(nn, c.activation)}, verbose=0)
        return model, 2 * c.loop.steps_per_update, 20 * c.loop.steps_per_update, "; ".join(differs)
    if c.replay.n_step != 1 or c.replay.prioritized:
        differs.append("uniform one-step replay")
    common = dict(learning_rate=c.actor_lr, qf_learning_rate=c.critic_lr,
                  buffer_size=c.replay.buffer_size, learning_starts=c.replay.min_replay,
                  batch_size=c.replay.batch_size, tau=c.tau, gamma=c.gamma,
                  train_freq=c.loop.env_steps_per_update, gradient_steps=c.loop.grad_steps,
                  policy_kwargs={"net_arch": {"pi": list(c.actor_hidden),
                                              "qf": list(c.critic_hidden)}}, verbose=0)
    if run.algo == "td3":
        dim = vec.action_space.shape[0]
        half = (vec.action_space.high - vec.action_space.low) / 2
        noise = NormalActionNoise(np.zeros(dim), c.exploration_noise * half)
        model = TD3("MlpPolicy", vec, policy_delay=c.policy_delay,
                    target_policy_noise=c.target_noise, target_noise_clip=c.target_noise_clip,
                    action_noise=noise, **common)
    elif run.algo == "sac":
        entropy = (-float(vec.action_space.shape[0]) if c.target_entropy is None
                   else float(c.target_entropy))
        model = SAC("MlpPolicy", vec, ent_coef=f"auto_{c.init_temperature}"
                    if c.learn_temperature else float(c.init_temperature),
                    target_entropy=entropy, **common)
    else:
        return None
    # Timed: a few thousand env steps once learning has started (at least 50 updates).
    steps = max(2_000, 50 * c.loop.steps_per_update)
    return model, c.replay.min_replay + 2 * c.loop.steps_per_update, steps, "; ".join(differs)


def _learn_rate(built) -> float:
    """Steps/s of a peer model's ``learn`` after its warm-up."""
    from stable_baselines3.common.logger import Logger

    model, warm, steps, _ = built
    # A logger with no outputs: learn() would otherwise make an empty SB3-<time> folder
    # in the temporary directory on every call.
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(warm)
    start = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.perf_counter() - start)


def _sb3_peer(preset: str) -> list[dict]:
    if preset not in SB3_PRESETS or not importlib.util.find_spec("stable_baselines3"):
        return []
    try:
        built = _sb3_model(preset)
        if built is None:
            return []
        sps = _learn_rate(built)
    except Exception as e:  # noqa: BLE001 - a peer's failure must not cost the suite
        return [{"library": "stable-baselines3", "preset": preset,
                 "error": f"{type(e).__name__}: {e}"}]
    import stable_baselines3
    import torch

    return [{"library": f"stable-baselines3 {stable_baselines3.__version__} (torch "
                        f"{torch.__version__}, {torch.get_num_threads()} threads)",
             "preset": preset, "train_sps": sps, "differs": built[3]}]


def _sbx_peer(preset: str) -> list[dict]:
    if preset not in SBX_PRESETS:
        return []
    if not importlib.util.find_spec("sbx"):
        return [{"library": "sbx", "preset": preset, "missing": SBX_MISSING}]
    try:
        built = _sbx_model(preset)
        if built is None:
            return []
        sps = _learn_rate(built)
    except Exception as e:  # noqa: BLE001 - a peer's failure must not cost the suite
        return [{"library": "sbx", "preset": preset, "error": f"{type(e).__name__}: {e}"}]
    import sbx

    return [{"library": f"sbx {sbx.__version__} (jax {jax.__version__})", "preset": preset,
             "train_sps": sps, "differs": built[3]}]


def peers(preset: str) -> list[dict]:
    """The preset's env and config in installed peer libraries (Stable-Baselines3 on
    PyTorch for A2C, DQN and DDPG; sbx, Stable-Baselines3 in JAX, for PPO, TD3 and SAC),
    trained in this process after a warm-up: steps/s while learning. A peer that is not
    installed gives a row saying so (``"missing"``)."""
    return _sb3_peer(preset) + _sbx_peer(preset)



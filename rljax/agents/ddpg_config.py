"""DDPG hyperparameters: :class:`DDPGConfig`, validated on construction (see
:mod:`rljax.agents.ddpg` for the method)."""

from __future__ import annotations

import dataclasses

from rljax.agents.base import check_positive, check_range, check_sizes
from rljax.networks.core import get_activation

_CHOICES = {"noise": ("ou", "gaussian", "none"), "critic_loss": ("l2", "huber"),
            "target_critic_init": ("zeros", "copy"), "noisy_noise": ("ou", "key")}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DDPGConfig:
    """DDPG hyperparameters (defaults: the rljax reference configuration for Reacher).

    Attributes:
        num_envs: parallel environments.
        env_steps_per_update: steps of every env between learning phases.
        grad_steps: gradient steps per learning phase.
        batch_size: transitions per gradient step.
        min_replay: transitions stored before learning starts.
        replay_capacity: transitions kept.
        gamma: discount.
        n_step: n-step return length (1: one-step TD).
        prioritized: proportional prioritized replay; False: uniform.
        alpha: priority exponent.
        beta: importance-sampling exponent (constant).
        priority_eps: added to ``|delta|`` in priorities.
        initial_priorities: new transitions get their TD error as priority (else the
            largest priority so far).
        flush_every: empty the replay after every this many sampled batches (the
            reference's ``buf_life``); None: never.
        actor_hidden: actor hidden layer sizes.
        critic_hidden: critic hidden layer sizes.
        activation: hidden activation name.
        negative_slope: LeakyReLU slope.
        batch_norm: batch-normalize the state input of both networks.
        batch_norm_momentum: running-average momentum (0.9 = PyTorch's 0.1).
        actor_lr: actor Adam learning rate.
        critic_lr: critic Adam learning rate.
        lr_decay_steps: decay both learning rates linearly to ``lr_end_factor`` times
            their value over this many gradient steps (None: constant).
        lr_end_factor: final learning-rate factor of the decay.
        actor_weight_decay: L2 coefficient of the actor (added to the gradient).
        critic_weight_decay: L2 coefficient of the critic.
        max_grad_norm: clip each network's gradient to this global norm; None: off.
        critic_loss: "l2" (0.5 delta^2) or "huber".
        huber_delta: Huber threshold.
        tau: soft target-update rate of both networks.
        target_critic_init: "zeros": the target critic starts with zero weights (the
            reference); "copy": a copy of the critic.
        noise: action noise, "ou", "gaussian" or "none".
        ou_theta: OU mean-reversion rate (action noise and NoisyNet OU inputs).
        ou_sigma: OU noise scale.
        gaussian_sigma: standard deviation of Gaussian action noise.
        noise_scale: initial factor on the action noise.
        noise_decay: factor applied to an env's noise scale at each of its new episodes.
        noise_scale_min: the scale never decays below this.
        noisy: NoisyDense layers in the actor.
        noisy_sigma0: NoisyDense initial noise scale.
        noisy_noise: NoisyNet noise inputs while acting: "ou" (an OU process per env,
            restarted at new episodes) or "key" (fresh Gaussian noise per step and env).
        target_noise: std of the Gaussian noise added to target actions (TD3's target
            policy smoothing; 0: off, as in DDPG).
        target_noise_clip: that noise is clipped to ``[-c, c]``.
        twin_critics: two critics trained on the same target, built from the smaller of
            the two target critics (TD3's clipped double Q); the actor and the priorities
            use the first critic.
        policy_delay: one actor step and target update per this many critic steps
            (TD3's delayed policy updates; 1: every step, as in DDPG). Metrics
            ``actor_loss`` and ``actor_grad_norm`` count skipped steps as 0 and actor
            steps ``policy_delay``-fold, so that their mean over a multiple of
            ``policy_delay`` steps is the actor steps' mean.
    """

    num_envs: int = 20
    env_steps_per_update: int = 50
    grad_steps: int = 100
    batch_size: int = 128
    min_replay: int = 10_000
    replay_capacity: int = 1_000_000
    gamma: float = 0.97
    n_step: int = 1
    prioritized: bool = True
    alpha: float = 0.6
    beta: float = 1.0
    priority_eps: float = 1e-5
    initial_priorities: bool = True
    flush_every: int | None = None
    actor_hidden: tuple[int, ...] = (150, 150)
    critic_hidden: tuple[int, ...] = (150, 150)
    activation: str = "leaky_relu"
    negative_slope: float = 0.05
    batch_norm: bool = True
    batch_norm_momentum: float = 0.9
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    lr_decay_steps: int | None = None
    lr_end_factor: float = 0.1
    actor_weight_decay: float = 1e-4
    critic_weight_decay: float = 1e-4
    max_grad_norm: float | None = None
    critic_loss: str = "l2"
    huber_delta: float = 1.0
    tau: float = 5e-4
    target_critic_init: str = "zeros"
    noise: str = "ou"
    ou_theta: float = 0.01
    ou_sigma: float = 0.2
    gaussian_sigma: float = 0.2
    noise_scale: float = 0.75
    noise_decay: float = 0.92
    noise_scale_min: float = 0.0
    noisy: bool = False
    noisy_sigma0: float = 0.5
    noisy_noise: str = "ou"
    target_noise: float = 0.0
    target_noise_clip: float = 0.5
    twin_critics: bool = False
    policy_delay: int = 1

    def __post_init__(self):
        check_positive(self, "num_envs", "env_steps_per_update", "grad_steps", "batch_size",
                       "min_replay", "replay_capacity", "n_step", "policy_delay", integer=True)
        check_positive(self, "actor_lr", "critic_lr", "huber_delta")
        if self.flush_every is not None:
            check_positive(self, "flush_every", integer=True)
        if self.lr_decay_steps is not None:
            check_positive(self, "lr_decay_steps", integer=True)
        for name in ("gamma", "beta", "tau", "noise_decay", "lr_end_factor"):
            check_range(self, name, 0.0, 1.0)
        for name in ("alpha", "priority_eps", "actor_weight_decay", "critic_weight_decay",
                     "ou_sigma", "gaussian_sigma", "noise_scale", "noise_scale_min",
                     "noisy_sigma0", "target_noise", "target_noise_clip"):
            check_range(self, name, 0.0, 1e6)
        check_range(self, "ou_theta", 0.0, 1.0)
        check_range(self, "negative_slope", -1e3, 1e3)
        check_range(self, "batch_norm_momentum", 0.0, 0.999999)
        check_range(self, "max_grad_norm", 1e-12, 1e12, optional=True)
        check_sizes(self, "actor_hidden")
        check_sizes(self, "critic_hidden")
        get_activation(self.activation)
        for name in ("prioritized", "initial_priorities", "batch_norm", "noisy",
                     "twin_critics"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                                 f"got {getattr(self, name)!r}")
        if self.batch_size > self.min_replay:
            raise ValueError(f"min_replay must be >= batch_size ({self.batch_size}), "
                             f"got {self.min_replay}")
        if self.min_replay > self.replay_capacity:
            raise ValueError(f"min_replay must be <= replay_capacity "
                             f"({self.replay_capacity}), got {self.min_replay}")

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.env_steps_per_update

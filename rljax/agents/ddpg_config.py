"""DDPG hyperparameters: :class:`DDPGConfig`, validated on construction (see
:mod:`rljax.agents.ddpg` for the method)."""

from __future__ import annotations

import dataclasses

from rljax import validate
from rljax.losses.value_learning import LOSSES
from rljax.networks.core import ACTIVATIONS
from rljax.networks.torso import import_string
from rljax.records import OffPolicyLoop, Replay, no_random_phase, shape_field

_CHOICES = {"noise": ("ou", "gaussian", "none"), "td_loss": LOSSES,
            "target_critic_init": ("zeros", "copy"), "noisy_noise": ("ou", "key"),
            "activation": tuple(ACTIVATIONS)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DDPGConfig:
    """DDPG hyperparameters (defaults: the rljax reference configuration for Reacher).

    Attributes:
        loop: the off-policy loop (:class:`rljax.records.OffPolicyLoop`): each update
            steps every env ``env_steps_per_update`` times, then takes ``grad_steps``
            gradient steps.
        replay: the replay (:class:`rljax.records.Replay`; ``flush_every`` is the
            reference's ``buf_life``).
        gamma: discount.
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
        td_loss: loss of the critic's TD error, "l2" (0.5 delta^2) or "huber".
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
        network: a torso of the user's encoding the (batch-normalized) observation: a
            flax module class or its import string ``"pkg.mod:Class"`` (kept as the
            string; :mod:`rljax.networks.torso`). The actor's output layer goes on its
            features (``actor_hidden`` unused); the critic's ``critic_hidden`` layers on
            its features concatenated with the action. Each network has a torso of its
            own. None: the MLPs.
    """

    loop: OffPolicyLoop = OffPolicyLoop(num_envs=20, env_steps_per_update=50,
                                        grad_steps=100)
    replay: Replay = Replay(batch_size=128, buffer_size=1_000_000, learning_starts=10_000,
                            prioritized=True, beta=((0, 1.0),), priority_eps=1e-5,
                            initial_priorities=True)
    gamma: float = 0.97
    actor_hidden: tuple[int, ...] = shape_field((150, 150), network=True)
    critic_hidden: tuple[int, ...] = shape_field((150, 150), network=True)
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
    td_loss: str = "l2"
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
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        no_random_phase("ddpg", self.loop)
        validate.integer("policy_delay", self.policy_delay, low=1)
        validate.integer("lr_decay_steps", self.lr_decay_steps, low=1, optional=True)
        for name in ("actor_lr", "critic_lr", "huber_delta"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("gamma", "tau", "noise_decay", "lr_end_factor", "ou_theta"):
            validate.number(name, getattr(self, name), low=0.0, high=1.0)
        for name in ("actor_weight_decay", "critic_weight_decay",
                     "ou_sigma", "gaussian_sigma", "noise_scale", "noise_scale_min",
                     "noisy_sigma0", "target_noise", "target_noise_clip"):
            validate.number(name, getattr(self, name), low=0.0, high=1e6)
        validate.number("negative_slope", self.negative_slope, low=-1e3, high=1e3)
        validate.number("batch_norm_momentum", self.batch_norm_momentum, low=0.0, high=0.999999)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.sizes("actor_hidden", self.actor_hidden)
        validate.sizes("critic_hidden", self.critic_hidden)
        for name in ("batch_norm", "noisy", "twin_critics"):
            validate.boolean(name, getattr(self, name))
        for name, allowed in _CHOICES.items():
            validate.choice(name, getattr(self, name), allowed)
        object.__setattr__(self, "network", import_string(self.network))


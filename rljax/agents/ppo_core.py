"""What PPO and PPO-RNN (:mod:`rljax.agents.ppo`, :mod:`rljax.agents.recurrent_ppo`)
share below both: the hyperparameters, the train state, and what the noise-free policy
reads from it."""

from __future__ import annotations

import dataclasses
from typing import Any

import optax
from flax import struct

from rljax import normalization, validate
from rljax.agents.base import check_epochs, check_memory, upgrade_on_policy_record
from rljax.networks import core as nets
from rljax.networks.torso import import_string
from rljax.records import Memory, OnPolicyLoop, record_field, shape_field
from rljax.types import Array, Params


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyperparameters (defaults: the rljax configuration for CartPole-v1).

    The value loss is the plain squared error: implementations that halve it (CleanRL,
    Baselines) with a coefficient ``c`` correspond to ``value_coef = c / 2``.

    Learning-rate annealing is linear in loop updates: update ``u`` (from 0) uses
    ``lr * max(0, 1 - u / total_updates)`` for all of its minibatch steps, as CleanRL
    does. The run's length is not the agent's to know: ``total_updates`` comes from the
    :class:`rljax.agents.base.RunLength` the run gives :func:`rljax.agents.ppo.make_ppo`.

    Attributes:
        loop: the on-policy loop (:class:`rljax.records.OnPolicyLoop`).
        gamma: discount.
        gae_lambda: GAE lambda.
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * rollout_len``.
        clip_eps: clipping range of the probability ratio.
        value_clip_eps: clipping range of the value around the rollout's value; None: off.
        entropy_coef: weight of the entropy bonus.
        value_coef: weight of the value loss.
        lr: Adam learning rate.
        anneal_lr: anneal the learning rate linearly to 0 over the run's updates
            (``RunLength.schedule_updates``).
        adam_eps: Adam epsilon.
        max_grad_norm: clip each minibatch gradient to this global norm; None: off.
        normalize_advantages: standardize advantages within each minibatch.
        normalize_obs: standardize observations by their running statistics (flat
            observations only).
        reward_scaling: divide rewards by the running std of the discounted return.
        hidden_sizes: MLP layer sizes of the actor and of the critic (flat observations;
            frames get the Nature CNN).
        activation: hidden activation name.
        shared_torso: one torso with policy and value heads; False: separate networks.
        log_std_init: initial log standard deviation of the Gaussian policy (continuous
            actions).
        network: a torso of the user's in place of the MLP or CNN: a flax module class
            or its import string ``"pkg.mod:Class"`` (kept as the string;
            :mod:`rljax.networks.torso`); PPO puts its policy and value layers on its
            features (``hidden_sizes``, ``activation`` unused; with memory the core
            comes between). None: the default torso.
        memory: a :class:`rljax.records.Memory` (core, size, reset_every_step), or a
            core's name for ``Memory(core=name)``: PPO-RNN (:mod:`rljax.agents.recurrent`);
            None: feed-forward. With memory the actor and critic share the torso (the
            first layer of ``hidden_sizes``) and the core, each head has the remaining
            layers of ``hidden_sizes`` before its output layer, and ``shared_torso`` is
            ignored; minibatches are whole env sequences (``num_minibatches`` must divide
            ``num_envs``).
    """

    loop: OnPolicyLoop = OnPolicyLoop(num_envs=32, rollout_len=16)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_epochs: int = shape_field(4)
    num_minibatches: int = shape_field(4)
    clip_eps: float = 0.2
    value_clip_eps: float | None = None
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    lr: float = 2.5e-3
    anneal_lr: bool = False
    adam_eps: float = 1e-5
    max_grad_norm: float | None = 0.5
    normalize_advantages: bool = True
    normalize_obs: bool = False
    reward_scaling: bool = False
    hidden_sizes: tuple[int, ...] = shape_field((64, 64), network=True)
    activation: str = "tanh"
    shared_torso: bool = False
    log_std_init: float = 0.0
    memory: Memory | None = record_field(None, Memory)
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        check_epochs(self)
        # The ratio is clipped to [1 - clip_eps, 1 + clip_eps]: past 1 the range holds
        # negative ratios and clips nothing.
        validate.number("clip_eps", self.clip_eps, low=0.0, high=1.0, low_open=True)
        for name in ("lr", "adam_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("value_clip_eps", self.value_clip_eps, low=0.0, low_open=True,
                        optional=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("gae_lambda", self.gae_lambda, low=0.0, high=1.0)
        validate.number("entropy_coef", self.entropy_coef, low=0.0, high=1e3)
        validate.number("value_coef", self.value_coef, low=0.0, high=1e3)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.number("log_std_init", self.log_std_init, low=-20.0, high=20.0)
        validate.sizes("hidden_sizes", self.hidden_sizes)
        validate.choice("activation", self.activation, tuple(nets.ACTIVATIONS))
        for name in ("anneal_lr", "normalize_advantages", "normalize_obs", "reward_scaling",
                     "shared_torso"):
            validate.boolean(name, getattr(self, name))
        check_memory(self)
        object.__setattr__(self, "network", import_string(self.network))

    @property
    def minibatch_size(self) -> int:
        return self.loop.steps_per_update // self.num_minibatches


@struct.dataclass
class PPOState:
    """Train state.

    Attributes:
        params: ``{"actor": ..., "critic": ...}`` or ``{"actor_critic": ...}``, and
            ``"log_std" [A]`` for continuous actions.
        opt_state: Adam state.
        obs_stats: running observation statistics (None without ``normalize_obs``).
        reward_scaler: per-env discounted returns and their statistics (None without
            ``reward_scaling``).
        step: updates done.
    """

    params: Params
    opt_state: optax.OptState
    obs_stats: normalization.RunningStats | None
    reward_scaler: normalization.RewardScalerState | None
    step: Array


def policy_params(state: PPOState) -> dict[str, Any]:
    """What :func:`policy` needs: the networks and the observation statistics."""
    return {"net": state.params, "obs_stats": state.obs_stats}


upgrade_record = upgrade_on_policy_record
"""Old run records of this agent in today's form (:mod:`rljax.run.registry` reads it)."""

"""What PQN and PQN-RNN (:mod:`rljax.agents.pqn`, :mod:`rljax.agents.recurrent_pqn`)
share below both: the hyperparameters, the train state, the epsilon schedule, the
optimizer and the Q(lambda) regression loss."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax import exploration, losses, validate
from rljax.agents.base import (
    ONE_DEVICE,
    Parallel,
    RunLength,
    annealed_learning_rate,
    check_epochs,
    check_memory,
    upgrade_on_policy_record,
)
from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.core import ACTIVATIONS
from rljax.networks.distributions import take_action
from rljax.networks.torso import import_string
from rljax.records import Memory, OnPolicyLoop, record_field, shape_field
from rljax.types import Array, Metrics, Params
from rljax.validate import Schedule

OPTIMIZERS = ("radam", "adam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PQNConfig:
    """PQN hyperparameters (defaults: the rljax configuration for CartPole-v1).

    The paper's public configurations (purejaxql), for reference:

    * CartPole-v1: 32 envs x 64 steps, 4 epochs x 16 minibatches, two LayerNorm layers
      of 256 units, RAdam lr 1e-4 annealed linearly to 0, max grad norm 10, gamma 0.99,
      lambda 0.95, rewards scaled by 0.1, epsilon 1 -> 0.2 over the first 20% of the
      updates (500k env steps);
    * Atari (10M env steps = 40M frames): 128 envs x 32 steps, 2 epochs x 32 minibatches,
      the Nature CNN with LayerNorm, RAdam lr 2.5e-4 (constant), max grad norm 10,
      gamma 0.99, lambda 0.65, epsilon 1 -> 0.001 over the first 10% of the updates
      (``((0, 1.0), (244, 0.001))``), rewards clipped and life loss as episode end.

    Learning-rate annealing is linear in loop updates: update ``u`` (from 0) uses
    ``lr * max(0, 1 - u / total_updates)``, ``total_updates`` from the
    :class:`rljax.agents.base.RunLength` the run gives :func:`rljax.agents.pqn.make_pqn`,
    so it stretches with the run's length. ``lr_factor`` is tied to updates instead, the
    same in a run of any length; with both, update ``u`` uses their product.

    Attributes:
        loop: the on-policy loop (:class:`rljax.records.OnPolicyLoop`).
        gamma: discount.
        q_lambda: lambda of the Q(lambda) targets (0: one-step Q-learning targets).
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * rollout_len``.
        epsilon: epsilon-greedy schedule ``((update, value), ...)``.
        reward_scale: rewards are multiplied by it before the targets.
        optimizer: "radam" (the paper's) or "adam".
        lr: learning rate.
        anneal_lr: anneal the learning rate linearly to 0 over the run's updates
            (``RunLength.schedule_updates``).
        lr_factor: a multiplier of ``lr``, piecewise linear in loop updates
            (``((update, factor), ...)``, :func:`rljax.exploration.piecewise_linear`; the
            last factor holds from its update on); None: 1.
        adam_eps: (R)Adam epsilon. The CartPole presets use 1e-3: at the default, once a
            seed has converged its noise gradients still move every parameter by about
            ``lr`` per step, and the greedy policy drifts (docs/results.md).
        max_grad_norm: clip each minibatch gradient to this global norm; None: off.
        hidden_sizes: MLP layer sizes (flat observations; frames get the Nature CNN).
        activation: hidden activation name of the MLP.
        layer_norm: LayerNorm before every hidden nonlinearity (False for ablations).
        conv_method: the Nature CNN's convolutions (frames only), "matmul" or "xla".
        memory: a :class:`rljax.records.Memory` (core, size, reset_every_step), or a
            core's name for ``Memory(core=name)``: PQN-RNN (:mod:`rljax.agents.recurrent`);
            None: feed-forward. With memory the LayerNorm torso (``hidden_sizes``) feeds
            the core and a linear layer on the core gives the Q-values; minibatches are
            whole env sequences (``num_minibatches`` must divide ``num_envs``).
        network: a torso of the user's in place of the MLP or CNN: a flax module class
            or its import string ``"pkg.mod:Class"`` (kept as the string;
            :mod:`rljax.networks.torso`), e.g. ``"rljax.networks.torso:MinAtarCNN"``; a
            linear Q-value layer goes on its features (with memory, after the core).
            None: the LayerNorm MLP or CNN.
    """

    loop: OnPolicyLoop = OnPolicyLoop(num_envs=32, rollout_len=16)
    gamma: float = 0.99
    q_lambda: float = 0.95
    num_epochs: int = shape_field(4)
    num_minibatches: int = shape_field(4)
    epsilon: Schedule = ((0, 1.0), (50, 0.05), (150, 0.01))
    reward_scale: float = 0.1
    optimizer: str = "radam"
    lr: float = 1e-3
    anneal_lr: bool = False
    lr_factor: Schedule | None = None
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 10.0
    hidden_sizes: tuple[int, ...] = shape_field((128, 128), network=True)
    activation: str = "relu"
    layer_norm: bool = True
    conv_method: str = "matmul"
    memory: Memory | None = record_field(None, Memory)
    network: type | str | None = None  # a class is kept as its import string

    def __post_init__(self):
        check_epochs(self)
        for name in ("lr", "adam_eps"):
            validate.number(name, getattr(self, name), low=0.0, low_open=True)
        validate.number("gamma", self.gamma, low=0.0, high=1.0)
        validate.number("q_lambda", self.q_lambda, low=0.0, high=1.0)
        validate.number("reward_scale", self.reward_scale, low=0.0, high=1e6, low_open=True)
        validate.number("max_grad_norm", self.max_grad_norm, low=1e-12, high=1e12, optional=True)
        validate.sizes("hidden_sizes", self.hidden_sizes)
        validate.choice("activation", self.activation, tuple(ACTIVATIONS))
        validate.choice("optimizer", self.optimizer, OPTIMIZERS)
        validate.choice("conv_method", self.conv_method, CONV_METHODS)
        for name in ("anneal_lr", "layer_norm"):
            validate.boolean(name, getattr(self, name))
        check_memory(self)
        if self.memory is not None and self.memory.separate_critic:
            raise ValueError("memory.separate_critic gives PPO-RNN's critic a core of its "
                             "own; PQN has no critic (one Q-value head): leave it false")
        object.__setattr__(self, "network", import_string(self.network))
        validate.schedule("epsilon", self.epsilon, low=0.0, high=1.0)
        if self.lr_factor is not None:
            validate.schedule("lr_factor", self.lr_factor, low=0.0, high=1e3)


def epsilon_schedule(config: PQNConfig) -> optax.Schedule:
    """Epsilon as a function of the loop update count."""
    return exploration.piecewise_linear(config.epsilon)


@struct.dataclass
class PQNState:
    """Train state.

    Attributes:
        params: Q-network variables.
        opt_state: optimizer state.
        step: updates done.
        update_step: loop update the exploring policy last acted in (for the epsilon
            metric).
    """

    params: Params
    opt_state: optax.OptState
    step: Array
    update_step: Array


def learning_rate(config: PQNConfig, run: RunLength | None) -> optax.Schedule:
    """The learning rate as a function of the optimizer's step count (minibatch steps):
    ``lr``, annealed with ``anneal_lr``, times ``lr_factor``."""
    steps = config.num_epochs * config.num_minibatches
    return exploration.scaled_learning_rate(
        annealed_learning_rate(config.lr, config.anneal_lr, run, steps), config.lr_factor,
        steps)


def optimizer(config: PQNConfig, parallel: Parallel = ONE_DEVICE,
              run: RunLength | None = None) -> optax.GradientTransformation:
    """The optimizer of ``config`` (also PQN-RNN's), after the parallel transformation."""
    clip = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
    make = optax.radam if config.optimizer == "radam" else optax.adam
    # One array per parameter, not optax.flatten: the flat vector made each minibatch step
    # of the MinAtar preset 13% slower on XLA:CPU (its elementwise optimizer kernels over
    # one odd-length vector); CartPole-sized networks time the same either way
    # (docs/benchmarks.md, "PQN's optimizer state").
    return parallel.optimizer(
        optax.chain(*clip, make(learning_rate(config, run), eps=config.adam_eps)))


class Samples(NamedTuple):
    """Per-sample data of an update, ``[T, B, ...]`` (or one minibatch's ``[N, ...]``)."""

    obs: Array
    action: Array
    target: Array
    valid: Array | None


def q_lambda_loss(q: Array, data: Samples) -> tuple[Array, Metrics]:
    """``0.5 (Q(s, a) - G)^2`` averaged over the valid samples, from the Q-values ``q
    [..., A]`` of ``data.obs`` (shared by PQN and PQN-RNN); ``(loss, metrics)``."""
    q_a = take_action(q, data.action, 0.0)
    td = jax.lax.stop_gradient(data.target) - q_a
    loss = losses.masked_mean(0.5 * jnp.square(td), data.valid)
    return loss, {"loss": loss, "q_mean": losses.masked_mean(q_a, data.valid),
                  "td_abs": losses.masked_mean(jnp.abs(td), data.valid)}


upgrade_record = upgrade_on_policy_record
"""Old run records of this agent in today's form (:mod:`rljax.run.registry` reads it)."""

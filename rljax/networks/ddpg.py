"""Deterministic actor and Q critic for continuous control (DDPG; Lillicrap et al. 2016,
"Continuous Control with Deep Reinforcement Learning").

Defaults follow the rljax reference: two hidden layers of 150 units, LeakyReLU with
negative slope 0.05, batch normalization of the state input, and a tanh output scaled to
the action bounds.

Batch normalization (Ioffe & Szegedy 2015) keeps its running mean and variance in the
``"batch_stats"`` collection, next to ``"params"`` in the variables dict. ``train=True``
normalizes with the batch's statistics and updates the running ones, so the call needs
``mutable=["batch_stats"]`` and returns ``(output, {"batch_stats": new})``;
``train=False`` (acting, targets, evaluation) uses the running statistics and changes
nothing. Running averages follow ``new = momentum * old + (1 - momentum) * batch``;
momentum 0.9 is PyTorch's default (its ``momentum=0.1``). Unlike PyTorch, flax keeps the
biased batch variance in the running average.

A user's torso (``torso``, :func:`rljax.networks.torso.user_torso`) encodes the
(batch-normalized) observation in place of the layers that see the observation alone: the
actor's hidden layers (its output layer then acts on the torso's features), and in the
critic the observation's part of the input: ``Q(s, a) = MLP(concat(torso(BN(s)), a))``,
its hidden layers kept, so the action still meets the features in a nonlinear layer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax.networks.core import Network, get_activation
from rljax.networks.initializers import traced_once
from rljax.networks.torso import UserTorso, apply_torso
from rljax.networks.value import check_sigma0, check_sizes, dense, noise_args
from rljax.types import Array, PRNGKey

# Lillicrap et al.: hidden layers U(-1/sqrt(fan_in), 1/sqrt(fan_in)), output layer
# U(-3e-3, 3e-3) so that initial actions and Q-values are near zero.
_HIDDEN_INIT = traced_once(nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"))


@functools.cache
def _symmetric_uniform(limit: float) -> Callable:
    def init(key: PRNGKey, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return traced_once(init)


def _activation(name: str, negative_slope: float) -> Callable[[Array], Array]:
    if name == "leaky_relu":
        return functools.partial(nn.leaky_relu, negative_slope=negative_slope)
    return get_activation(name)


def _check_common(hidden_sizes: Any, activation: str, negative_slope: Any, batch_norm: Any,
                  batch_norm_momentum: Any) -> tuple[int, ...]:
    sizes = check_sizes("hidden_sizes", hidden_sizes, allow_empty=True)
    get_activation(activation)
    if isinstance(negative_slope, bool) or not isinstance(negative_slope, int | float) or (
            not math.isfinite(negative_slope)):
        raise ValueError(f"negative_slope must be a finite number, got {negative_slope!r}")
    if not isinstance(batch_norm, bool):
        raise ValueError(f"batch_norm must be True or False, got {batch_norm!r}")
    if isinstance(batch_norm_momentum, bool) or not isinstance(
            batch_norm_momentum, int | float) or not 0.0 <= batch_norm_momentum < 1.0:
        raise ValueError(f"batch_norm_momentum must be a number in [0, 1), "
                         f"got {batch_norm_momentum!r}")
    return sizes


def _check_mutable(train: bool, batch_norm: bool, mutable: Any) -> None:
    # flax's own error (ModifyScopeVariableError) surfaces from inside the trace.
    if not (train and batch_norm):
        return
    if mutable is True or mutable == "batch_stats" or (
            isinstance(mutable, list | tuple) and "batch_stats" in mutable):
        return
    raise ValueError("train=True updates the batch-norm statistics: pass "
                     f"mutable=['batch_stats'] (got mutable={mutable!r}), or train=False")


def _input_norm(x: Array, *, enabled: bool, train: bool, momentum: float,
                batch_norm_axis: str | None) -> Array:
    x = x.astype(jnp.float32)
    if not enabled:
        return x
    # With batch_norm_axis, training-mode statistics are averaged over that mesh axis (the
    # whole batch when it is split over devices in equal shards).
    return nn.BatchNorm(use_running_average=not train, momentum=momentum,
                        axis_name=batch_norm_axis if train else None, name="input_norm")(x)


class DeterministicActor(nn.Module):
    """``mu(s) = mid + half_range * tanh(MLP(BN(s)))``, inside ``[low, high]``."""

    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    hidden_sizes: Sequence[int] = (150, 150)
    activation: str = "leaky_relu"
    negative_slope: float = 0.05
    batch_norm: bool = True
    batch_norm_momentum: float = 0.9
    noisy: bool = False
    sigma0: float = 0.5
    batch_norm_axis: str | None = None
    torso: UserTorso | None = None

    @nn.compact
    def __call__(self, obs: Array, train: bool = False, deterministic: bool = True) -> Array:
        act = _activation(self.activation, self.negative_slope)
        x = _input_norm(obs, enabled=self.batch_norm, train=train,
                        momentum=self.batch_norm_momentum, batch_norm_axis=self.batch_norm_axis)
        if self.torso is not None:
            x = apply_torso(self.torso, x)
        for i, size in enumerate(() if self.torso is not None else self.hidden_sizes):
            x = act(dense(size, noisy=self.noisy, sigma0=self.sigma0, name=f"hidden_{i}",
                          kernel_init=_HIDDEN_INIT)(x, deterministic))
        low = jnp.asarray(self.action_low, jnp.float32)
        high = jnp.asarray(self.action_high, jnp.float32)
        z = dense(low.shape[0], noisy=self.noisy, sigma0=self.sigma0, name="out",
                  kernel_init=_symmetric_uniform(3e-3))(x, deterministic)
        return (high + low) / 2.0 + (high - low) / 2.0 * jnp.tanh(z)


class QCritic(nn.Module):
    """``Q(s, a) = MLP(concat(BN(s), a))``; the action is not normalized (as in
    Lillicrap et al., whose batch norm stops before the action input)."""

    hidden_sizes: Sequence[int] = (150, 150)
    activation: str = "leaky_relu"
    negative_slope: float = 0.05
    batch_norm: bool = True
    batch_norm_momentum: float = 0.9
    batch_norm_axis: str | None = None
    torso: UserTorso | None = None

    @nn.compact
    def __call__(self, obs: Array, action: Array, train: bool = False) -> Array:
        act = _activation(self.activation, self.negative_slope)
        s = _input_norm(obs, enabled=self.batch_norm, train=train,
                        momentum=self.batch_norm_momentum, batch_norm_axis=self.batch_norm_axis)
        if self.torso is not None:
            s = apply_torso(self.torso, s)
        x = jnp.concatenate([s, action.astype(jnp.float32)], axis=-1)
        for i, size in enumerate(self.hidden_sizes):
            x = act(nn.Dense(size, kernel_init=_HIDDEN_INIT, name=f"hidden_{i}")(x))
        return nn.Dense(1, kernel_init=_symmetric_uniform(3e-3), name="out")(x)[..., 0]


def _bounds(action_low: Any, action_high: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    low = np.asarray(action_low, np.float64)
    high = np.asarray(action_high, np.float64)
    if low.ndim != 1 or low.shape != high.shape or low.size == 0:
        raise ValueError(f"action_low and action_high must be 1-D of the same non-zero length, "
                         f"got shapes {low.shape} and {high.shape}")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ValueError(f"action bounds must be finite with action_low < action_high, "
                         f"got {low.tolist()} and {high.tolist()}")
    return tuple(low.tolist()), tuple(high.tolist())


def make_ddpg_actor(action_low: Any, action_high: Any, *,
                    hidden_sizes: Sequence[int] = (150, 150), activation: str = "leaky_relu",
                    negative_slope: float = 0.05, batch_norm: bool = True,
                    batch_norm_momentum: float = 0.9, noisy: bool = False,
                    sigma0: float = 0.5, batch_norm_axis: str | None = None,
                    torso: UserTorso | None = None) -> Network:
    """Deterministic policy ``obs [..., obs_dim] -> action [..., action_dim]``.

    Args:
        action_low: lower action bounds ``[action_dim]``.
        action_high: upper action bounds ``[action_dim]``.
        hidden_sizes: hidden layer sizes.
        activation: hidden activation name; ``negative_slope`` applies to "leaky_relu".
        negative_slope: LeakyReLU slope for negative inputs.
        batch_norm: batch-normalize the observation input.
        batch_norm_momentum: running-average momentum of the batch statistics.
        noisy: every linear layer is a NoisyDense (parameter-space exploration).
        sigma0: NoisyDense initial noise scale.
        batch_norm_axis: in training mode, take the batch-norm statistics over the whole batch
            split along this mesh axis (inside ``shard_map``; equal shards).
        torso: a user's checked torso (:func:`rljax.networks.torso.user_torso`) in place
            of the hidden layers (``hidden_sizes`` is then unused); None: the MLP.

    Returns:
        ``Network(init, apply)`` with

        * ``init(key, obs) -> variables``: ``{"params", "batch_stats"}`` (no
          ``batch_stats`` without batch norm); ``obs [B, obs_dim]`` an example batch.
        * ``apply(variables, obs, *, train=False, noise_key=None, noise=None,
          mutable=False)`` -> ``action``, or ``(action, updates)`` when ``mutable`` is
          set (``mutable=["batch_stats"]`` is required with ``train=True``).
          ``noise_key`` draws NoisyDense noise; ``noise`` gives it (a tree from
          :func:`rljax.networks.noisy.noise_like`, e.g. stepped by an OU process, with
          optional leading batch dims); neither: noise-free. Ignored when not ``noisy``.
    """
    low, high = _bounds(action_low, action_high)
    sizes = _check_common(hidden_sizes, activation, negative_slope, batch_norm,
                          batch_norm_momentum)
    if not isinstance(noisy, bool):
        raise ValueError(f"noisy must be True or False, got {noisy!r}")
    module = DeterministicActor(low, high, sizes, activation, float(negative_slope), batch_norm,
                                float(batch_norm_momentum), noisy, check_sigma0(sigma0),
                                batch_norm_axis, torso)

    def init(key: PRNGKey, obs: Array) -> dict:
        return module.init(key, obs, train=False, deterministic=True)

    def apply(variables: dict, obs: Array, *, train: bool = False,
              noise_key: PRNGKey | None = None, noise: Any | None = None,
              mutable: bool | str | Sequence[str] = False) -> Any:
        _check_mutable(train, batch_norm, mutable)
        variables, rngs, deterministic = noise_args(variables, noise_key, noise)
        return module.apply(variables, obs, train=train, deterministic=deterministic,
                            rngs=rngs, mutable=mutable)

    return Network(init=init, apply=apply)


def make_ddpg_critic(*, hidden_sizes: Sequence[int] = (150, 150),
                     activation: str = "leaky_relu", negative_slope: float = 0.05,
                     batch_norm: bool = True, batch_norm_momentum: float = 0.9,
                     batch_norm_axis: str | None = None,
                     torso: UserTorso | None = None) -> Network:
    """Action-value ``Q(obs [..., obs_dim], action [..., action_dim]) -> q [...]``.

    Args: as :func:`make_ddpg_actor` (no noise, no bounds), except that a ``torso``
    encodes the observation alone and ``hidden_sizes`` layers follow on its features
    concatenated with the action.

    Returns:
        ``Network(init, apply)`` with

        * ``init(key, obs, action) -> variables`` (``obs``, ``action`` example batches),
        * ``apply(variables, obs, action, *, train=False, mutable=False)`` -> ``q [...]``,
          or ``(q, updates)`` when ``mutable`` is set (required with ``train=True``).
    """
    sizes = _check_common(hidden_sizes, activation, negative_slope, batch_norm,
                          batch_norm_momentum)
    module = QCritic(sizes, activation, float(negative_slope), batch_norm,
                     float(batch_norm_momentum), batch_norm_axis, torso)

    def init(key: PRNGKey, obs: Array, action: Array) -> dict:
        return module.init(key, obs, action, train=False)

    def apply(variables: dict, obs: Array, action: Array, *, train: bool = False,
              mutable: bool | str | Sequence[str] = False) -> Any:
        _check_mutable(train, batch_norm, mutable)
        return module.apply(variables, obs, action, train=train, mutable=mutable)

    return Network(init=init, apply=apply)

"""Network factories. flax.linen is used here and nowhere else in rljax.

Each factory returns a :class:`Network` of two pure functions,
``init(key, obs) -> params`` and ``apply(params, obs) -> output``, so agents only
ever see parameter pytrees.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from rljax.networks.conv import Conv
from rljax.networks.orthogonal import orthogonal
from rljax.types import Array, PRNGKey

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": nn.relu,
    "tanh": nn.tanh,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "swish": nn.swish,
    "leaky_relu": nn.leaky_relu,
}


class Network(NamedTuple):
    """A network as a pair of pure functions.

    Attributes:
        init: ``init(key, obs) -> params`` (``obs`` an example batch).
        apply: ``apply(params, obs, *args, **kwargs) -> output``.
    """

    init: Callable[..., Any]
    apply: Callable[..., Any]


def get_activation(name: str) -> Callable[[Array], Array]:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; allowed: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _orthogonal(scale: float) -> Callable:
    # Not nn.initializers.orthogonal: its LAPACK QR, batched over members, can deadlock
    # XLA's CPU thread pool (rljax/networks/orthogonal.py).
    return orthogonal(scale)


class MLP(nn.Module):
    """Fully connected layers; the last one linear when ``output_size`` is set.

    Hidden layers use orthogonal init with gain sqrt(2); the output layer uses
    ``output_scale`` (small for policy logits, 1 for values), the usual choice for
    actor-critic methods (Engstrom et al. 2020, "Implementation Matters").
    """

    hidden_sizes: Sequence[int]
    output_size: int | None = None
    activation: str = "relu"
    output_scale: float = 1.0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = get_activation(self.activation)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=_orthogonal(np.sqrt(2.0)))(x))
        if self.output_size is not None:
            x = nn.Dense(self.output_size, kernel_init=_orthogonal(self.output_scale))(x)
        return x


class NatureCNN(nn.Module):
    """The DQN torso of Mnih et al. (2015): 3 conv layers and a 512-unit layer.

    Takes ``[..., 4, 84, 84]`` uint8 frames (channels first, as envpool gives
    them) and scales them to [0, 1] inside.
    """

    features: int = 512
    conv_method: str = "matmul"  # conv.Conv's method: "matmul" (im2col) or "xla"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        batch_shape = x.shape[:-3]
        x = x.reshape((-1,) + x.shape[-3:])
        x = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        init = _orthogonal(np.sqrt(2.0))
        # conv.Conv: nn.Conv's parameters (either method), with gradients that stay fast
        # in XLA:CPU loops; "matmul" has no conv op at all (faster on CPU, see conv.py).
        conv = functools.partial(Conv, kernel_init=init, method=self.conv_method)
        x = nn.relu(conv(32, (8, 8), 4)(x))
        x = nn.relu(conv(64, (4, 4), 2)(x))
        x = nn.relu(conv(64, (3, 3), 1)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(self.features, kernel_init=init)(x))
        return x.reshape(batch_shape + (self.features,))


class Torso(nn.Module):
    """Nature CNN for image observations, MLP for flat ones."""

    hidden_sizes: Sequence[int]
    image: bool
    activation: str = "relu"
    conv_method: str = "matmul"  # the Nature CNN's convolutions (see conv.Conv)

    @nn.compact
    def __call__(self, x: Array) -> Array:
        if self.image:
            return NatureCNN(conv_method=self.conv_method)(x)
        return MLP(self.hidden_sizes, activation=self.activation)(x.astype(jnp.float32))


class Head(nn.Module):
    """Torso followed by a linear layer of ``output_size`` units."""

    hidden_sizes: Sequence[int]
    image: bool
    output_size: int
    activation: str = "relu"
    output_scale: float = 1.0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = Torso(tuple(self.hidden_sizes), self.image, self.activation)(x)
        return nn.Dense(self.output_size, kernel_init=_orthogonal(self.output_scale))(x)


def from_module(module: nn.Module) -> Network:
    """Wraps a linen module as ``Network(init, apply)``."""

    def init(key: PRNGKey, obs: Array) -> Any:
        return module.init(key, obs)

    return Network(init=init, apply=module.apply)


def make_policy_network(obs_shape: Sequence[int], num_actions: int,
                        hidden_sizes: Sequence[int] = (128, 128),
                        activation: str = "relu") -> Network:
    """Categorical policy: ``apply(params, obs [..., *obs_shape]) -> logits [..., A]``."""
    get_activation(activation)
    return from_module(Head(tuple(hidden_sizes), len(obs_shape) == 3, num_actions,
                            activation, output_scale=0.01))


class _ValueHead(nn.Module):
    hidden_sizes: Sequence[int]
    image: bool
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        return Head(tuple(self.hidden_sizes), self.image, 1, self.activation)(x)[..., 0]


def make_value_network(obs_shape: Sequence[int], hidden_sizes: Sequence[int] = (64, 64),
                       activation: str = "relu") -> Network:
    """State value: ``apply(params, obs [..., *obs_shape]) -> values [...]``."""
    get_activation(activation)
    return from_module(_ValueHead(tuple(hidden_sizes), len(obs_shape) == 3, activation))


class _ActorCritic(nn.Module):
    hidden_sizes: Sequence[int]
    image: bool
    num_actions: int
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array) -> tuple[Array, Array]:
        h = Torso(tuple(self.hidden_sizes), self.image, self.activation)(x)
        logits = nn.Dense(self.num_actions, kernel_init=_orthogonal(0.01), name="policy")(h)
        value = nn.Dense(1, kernel_init=_orthogonal(1.0), name="value")(h)[..., 0]
        return logits, value


def make_actor_critic(obs_shape: Sequence[int], num_actions: int,
                      hidden_sizes: Sequence[int] = (128, 128),
                      activation: str = "relu") -> Network:
    """Shared torso with policy and value heads:
    ``apply(params, obs) -> (logits [..., A], values [...])``."""
    get_activation(activation)
    return from_module(_ActorCritic(tuple(hidden_sizes), len(obs_shape) == 3, num_actions,
                                    activation))



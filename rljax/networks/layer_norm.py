"""Q-networks with layer normalization after every hidden layer, as in PQN (Gallici et
al. 2024, "Simplifying Deep Temporal Difference Learning").

The paper's analysis shows that LayerNorm (Ba et al. 2016) before each nonlinearity keeps
TD learning stable without a target network or replay: every hidden layer is
``activation(LayerNorm(W x + b))``, the output layer is linear. Flat observations get an
MLP, ``[..., 4, 84, 84]`` uint8 frames the Nature CNN (Mnih et al. 2015) with LayerNorm
over the channels of each conv output and over the 512 units of its dense layer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.conv import Conv
from rljax.networks.core import Network, from_module, get_activation
from rljax.networks.initializers import HE_NORMAL
from rljax.types import Array


def _normalized(x: Array, layer_norm: bool) -> Array:
    return nn.LayerNorm()(x) if layer_norm else x


class LayerNormMLP(nn.Module):
    """Hidden layers ``activation(LayerNorm(Dense(x)))`` (He-normal kernels)."""

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = get_activation(self.activation)
        x = x.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = act(_normalized(nn.Dense(size, kernel_init=HE_NORMAL)(x),
                                self.layer_norm))
        return x


class LayerNormNatureCNN(nn.Module):
    """The Nature CNN (3 convs, a 512-unit layer) with LayerNorm before each ReLU.

    Takes ``[..., 4, 84, 84]`` uint8 frames (channels first, as envpool gives them) and
    scales them to [0, 1] inside; the norm of a conv output is taken over its channels at
    each position.
    """

    features: int = 512
    layer_norm: bool = True
    conv_method: str = "matmul"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        batch_shape = x.shape[:-3]
        x = x.reshape((-1,) + x.shape[-3:])
        x = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        init = HE_NORMAL
        conv = functools.partial(Conv, kernel_init=init, method=self.conv_method)
        for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(_normalized(conv(features, (kernel, kernel), stride)(x),
                                    self.layer_norm))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(_normalized(nn.Dense(self.features, kernel_init=init)(x), self.layer_norm))
        return x.reshape(batch_shape + (self.features,))


class LayerNormQNetwork(nn.Module):
    """Torso (:class:`LayerNormNatureCNN` or :class:`LayerNormMLP`) and a linear layer of
    ``num_actions`` Q-values."""

    num_actions: int
    image: bool
    hidden_sizes: Sequence[int] = (128, 128)
    activation: str = "relu"
    layer_norm: bool = True
    conv_method: str = "matmul"

    @nn.compact
    def __call__(self, obs: Array) -> Array:
        if self.image:
            h = LayerNormNatureCNN(layer_norm=self.layer_norm, conv_method=self.conv_method,
                                   name="torso")(obs)
        else:
            h = LayerNormMLP(tuple(self.hidden_sizes), self.activation, self.layer_norm,
                             name="torso")(obs)
        return nn.Dense(self.num_actions, name="q")(h)


def make_layer_norm_q_network(obs_shape: Sequence[int], num_actions: int,
                              hidden_sizes: Sequence[int] = (128, 128), *,
                              activation: str = "relu", layer_norm: bool = True,
                              conv_method: str = "matmul") -> Network:
    """Q-network ``obs [..., *obs_shape] -> q [..., A]`` with LayerNorm in its torso.

    Args:
        obs_shape: one observation's shape: 3-D (``(4, 84, 84)`` uint8 frames) gets the
            Nature CNN (``hidden_sizes`` unused), 1-D an MLP.
        num_actions: number of discrete actions ``A``.
        hidden_sizes: MLP layer sizes.
        activation: hidden activation of the MLP (the CNN uses ReLU).
        layer_norm: False leaves the norms out (for ablations).
        conv_method: the CNN's convolutions, see :class:`rljax.networks.conv.Conv`.
    """
    get_activation(activation)
    if conv_method not in CONV_METHODS:
        raise ValueError(f"conv_method must be one of {', '.join(CONV_METHODS)}, "
                         f"got {conv_method!r}")
    if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 1:
        raise ValueError(f"num_actions must be an integer >= 1, got {num_actions!r}")
    return from_module(LayerNormQNetwork(num_actions, len(obs_shape) == 3, tuple(hidden_sizes),
                                         activation, layer_norm, conv_method))

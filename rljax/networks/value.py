"""Action-value networks for DQN and its variants.

``make_q_network`` builds ``Q(s, .) : [..., *obs_shape] -> [..., A]`` from a torso (Nature
CNN for ``[4, 84, 84]`` uint8 frames, Mnih et al. 2015; an MLP for flat observations) and
a head that is linear or dueling (Wang et al. 2016, "Dueling Network Architectures for
Deep Reinforcement Learning"), made of :class:`~rljax.networks.noisy.NoisyDense` layers
when ``noisy=True`` (Fortunato et al. 2018). With ``num_atoms=K`` the head gives instead
the logits ``[..., A, K]`` of a categorical return distribution per action (C51,
Bellemare et al. 2017; dueling over atoms as in Rainbow, Hessel et al. 2018). A user's
torso (:mod:`rljax.networks.torso`, ``network=``) takes the torso's place under the same
head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from rljax.networks.conv import METHODS as CONV_METHODS
from rljax.networks.core import Network, Torso, get_activation
from rljax.networks.initializers import LECUN_NORMAL
from rljax.networks.noisy import NOISE, NoisyDense
from rljax.networks.orthogonal import orthogonal
from rljax.networks.torso import UserTorso, apply_torso, user_torso
from rljax.types import Array, PRNGKey


def check_sizes(name: str, value: Any, allow_empty: bool = False) -> tuple[int, ...]:
    """``value`` as a tuple of positive ints, or a ValueError naming ``name``."""
    try:
        sizes = tuple(value)
    except TypeError:
        sizes = None
    if sizes is None or (not sizes and not allow_empty) or not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0
            for v in sizes):
        empty = "possibly empty " if allow_empty else "non-empty "
        raise ValueError(f"{name} must be a {empty}sequence of positive integers, got {value!r}")
    return tuple(int(v) for v in sizes)


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an int > 0, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_sigma0(sigma0: Any) -> float:
    """NoisyDense's initial noise scale as a float >= 0, or a ValueError."""
    if isinstance(sigma0, bool) or not isinstance(sigma0, int | float) or not (
            0.0 <= sigma0 < float("inf")):
        raise ValueError(f"sigma0 must be a finite number >= 0, got {sigma0!r}")
    return float(sigma0)


def dense(features: int, *, noisy: bool, sigma0: float, name: str,
          kernel_init: Callable | None = None) -> Callable[[Array, bool], Array]:
    """A linear layer ``(x, deterministic) -> y``: NoisyDense or nn.Dense.

    Must be called inside a compact ``__call__`` (it creates the submodule there).
    """
    if noisy:
        layer = NoisyDense(features, sigma0, name=name)
        return lambda x, deterministic: layer(x, deterministic=deterministic)
    layer = nn.Dense(features, name=name, kernel_init=kernel_init or LECUN_NORMAL)
    return lambda x, deterministic: layer(x)


class QHead(nn.Module):
    """Linear or dueling head ``[..., features] -> [..., A]``, or ``[..., A, K]`` logits
    with ``num_atoms=K``.

    Dueling: ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` (Wang et al. 2016, eq. 9),
    each stream with its own ``hidden_sizes`` layers. Categorical and dueling: the same
    per atom, ``logits(s, a, k) = V(s, k) + A(s, a, k) - mean_a' A(s, a', k)`` (Hessel et
    al. 2018, sec. 3), a softmax over ``k`` then giving each action's distribution.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = ()
    dueling: bool = False
    noisy: bool = False
    sigma0: float = 0.5
    activation: str = "relu"
    num_atoms: int | None = None

    @nn.compact
    def __call__(self, h: Array, deterministic: bool = True) -> Array:
        act = get_activation(self.activation)

        def stream(x: Array, out: int, prefix: str) -> Array:
            for i, size in enumerate(self.hidden_sizes):
                x = act(dense(size, noisy=self.noisy, sigma0=self.sigma0, name=f"{prefix}_{i}",
                              kernel_init=orthogonal(np.sqrt(2.0)))(
                                  x, deterministic))
            return dense(out, noisy=self.noisy, sigma0=self.sigma0, name=f"{prefix}_out",
                         kernel_init=orthogonal(1.0))(x, deterministic)

        if self.num_atoms is None:
            if not self.dueling:
                return stream(h, self.num_actions, "q")
            value = stream(h, 1, "value")
            advantage = stream(h, self.num_actions, "advantage")
            return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)
        # The expected-value head's layers (same names), their outputs K times wider.
        atoms = (self.num_actions, self.num_atoms)
        if not self.dueling:
            return stream(h, self.num_actions * self.num_atoms, "q").reshape(
                h.shape[:-1] + atoms)
        value = stream(h, self.num_atoms, "value")[..., None, :]
        advantage = stream(h, self.num_actions * self.num_atoms, "advantage").reshape(
            h.shape[:-1] + atoms)
        return value + advantage - jnp.mean(advantage, axis=-2, keepdims=True)


class QNetwork(nn.Module):
    """Torso (Nature CNN or MLP, or ``user_torso``) and a :class:`QHead`."""

    num_actions: int
    image: bool
    hidden_sizes: Sequence[int] = (64, 64)
    head_hidden_sizes: Sequence[int] = ()
    dueling: bool = False
    noisy: bool = False
    sigma0: float = 0.5
    activation: str = "relu"
    conv_method: str = "matmul"
    num_atoms: int | None = None
    user_torso: UserTorso | None = None

    @nn.compact
    def __call__(self, obs: Array, deterministic: bool = True) -> Array:
        if self.user_torso is not None:
            h = apply_torso(self.user_torso, obs)
        else:
            h = Torso(tuple(self.hidden_sizes), self.image, self.activation, self.conv_method,
                      name="torso")(obs)
        return QHead(self.num_actions, tuple(self.head_hidden_sizes), self.dueling, self.noisy,
                     self.sigma0, self.activation, self.num_atoms, name="head")(h, deterministic)


def noise_args(variables: dict, noise_key: PRNGKey | None,
               noise: Any | None) -> tuple[dict, dict | None, bool]:
    """Maps the factories' ``noise_key`` / ``noise`` keywords to flax's
    ``(variables, rngs, deterministic)``: noise-free when neither is given."""
    if noise is not None:
        variables = {**variables, NOISE: noise}
    rngs = None if noise_key is None else {NOISE: noise_key}
    return variables, rngs, noise is None and noise_key is None


def make_q_network(obs_shape: Sequence[int], num_actions: int,
                   hidden_sizes: Sequence[int] = (64, 64), *,
                   head_hidden_sizes: Sequence[int] = (), dueling: bool = False,
                   noisy: bool = False, sigma0: float = 0.5,
                   activation: str = "relu", conv_method: str = "matmul",
                   num_atoms: int | None = None, network: Any = None) -> Network:
    """Q-network ``obs [..., *obs_shape] -> q [..., A]`` (or logits ``[..., A, K]``).

    Args:
        obs_shape: one observation's shape: ``(4, 84, 84)`` uint8 frames get the Nature
            CNN torso (conv stack and a 512-unit layer; ``hidden_sizes`` is then unused),
            a 1-D shape gets an MLP torso.
        num_actions: number of discrete actions ``A``.
        hidden_sizes: MLP torso layer sizes (may be empty: a linear Q-function).
        head_hidden_sizes: hidden layers of the head (of each stream when dueling), e.g.
            ``(512,)`` for the streams of Wang et al.; empty by default.
        dueling: dueling head ``Q = V + A - mean(A)``.
        noisy: the head's layers (all of them, hidden and output) are NoisyDense.
        sigma0: NoisyDense initial noise scale.
        activation: hidden activation name (see ``rljax.networks.core.ACTIVATIONS``).
        conv_method: the Nature CNN's convolutions, ``"matmul"`` (im2col) or ``"xla"``
            (:class:`rljax.networks.conv.Conv`); same parameters either way.
        num_atoms: None: Q-values ``[..., A]``; an integer ``K >= 2``: a categorical head
            whose output is the logits ``[..., A, K]`` of each action's return
            distribution over ``K`` atoms (softmax over the last axis).
        network: a user's torso (a flax module class or its import string,
            :mod:`rljax.networks.torso`) in place of the CNN or MLP (``hidden_sizes`` is
            then unused, and ``obs_shape`` may be of any rank); None: the CNN or MLP.

    Returns:
        ``Network(init, apply)`` with

        * ``init(key, obs) -> variables`` (``{"params": ...}``; ``obs`` an example batch),
        * ``apply(variables, obs, *, noise_key=None, noise=None) -> q [..., A]`` (logits
          ``[..., A, K]`` with ``num_atoms``).

        With ``noisy=True``, ``noise_key`` draws fresh factorized noise (one draw for the
        whole batch; vmap over keys for one per row) and ``noise`` passes it explicitly
        (a tree from :func:`rljax.networks.noisy.noise_like`); with neither the network
        is noise-free (the means only): the evaluation / greedy policy. Without
        ``noisy`` both keywords are accepted and ignored, so agents may pass a key
        unconditionally.
    """
    obs_shape = check_sizes("obs_shape", obs_shape)
    torso = user_torso(network, obs_shape)
    if torso is None and len(obs_shape) not in (1, 3):
        raise ValueError(f"obs_shape must be 1-D (vector) or 3-D (stacked frames), "
                         f"got {obs_shape!r}")
    num_actions = check_positive_int("num_actions", num_actions)
    hidden_sizes = check_sizes("hidden_sizes", hidden_sizes, allow_empty=True)
    head_hidden_sizes = check_sizes("head_hidden_sizes", head_hidden_sizes, allow_empty=True)
    sigma0 = check_sigma0(sigma0)
    get_activation(activation)
    for name, flag in (("dueling", dueling), ("noisy", noisy)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    if conv_method not in CONV_METHODS:
        raise ValueError(f"conv_method must be one of {', '.join(CONV_METHODS)}, "
                         f"got {conv_method!r}")
    if num_atoms is not None and (isinstance(num_atoms, bool) or not isinstance(
            num_atoms, int | np.integer) or num_atoms < 2):
        raise ValueError(f"num_atoms must be None or an integer >= 2, got {num_atoms!r}")
    module = QNetwork(num_actions, len(obs_shape) == 3, hidden_sizes, head_hidden_sizes,
                      dueling, noisy, sigma0, activation, conv_method,
                      None if num_atoms is None else int(num_atoms), torso)

    def init(key: PRNGKey, obs: Array) -> dict:
        return module.init(key, obs, deterministic=True)

    def apply(variables: dict, obs: Array, *, noise_key: PRNGKey | None = None,
              noise: Any | None = None) -> Array:
        variables, rngs, deterministic = noise_args(variables, noise_key, noise)
        return module.apply(variables, obs, deterministic=deterministic, rngs=rngs)

    return Network(init=init, apply=apply)

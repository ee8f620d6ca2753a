"""A user's torso in place of an agent's default one, and a small CNN for MinAtar.

An agent's ``network`` field names a flax module class, as the class itself or as an
import string ``"package.module:Class"``; the config keeps the import string, so the run
record (config.json) names it and a resume or ``rljax eval`` rebuilds it. The class is
built without arguments and maps a batch of observations to a batch of features:

    Torso()(obs [B, *obs_shape] float32) -> features [B, F]

The agent puts its own output layers on the features (:class:`WithHeads`): PPO and A2C a
policy and a value layer, PQN a Q-value layer, PPO-RNN and PQN-RNN the memory core first
(:mod:`rljax.networks.recurrent`), DQN its Q head (:mod:`rljax.networks.value`), DDPG, TD3
and SAC their actor's output layers and their critics' layers on the features and the
action (:mod:`rljax.networks.ddpg`, :mod:`rljax.networks.continuous`), each network with
a torso of its own. :func:`check_torso` refuses a class that is not a module, or whose
output is not ``[B, F]``, in one line before anything compiles; :func:`user_torso` checks
it and gives the record those network factories take.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.networks.conv import Conv
from rljax.networks.core import Network, from_module
from rljax.types import Array

CONTRACT = "observations [B, *obs_shape] (float32) to features [B, F]"


class HeadSpec(NamedTuple):
    """One output head: ``hidden_sizes`` then a linear layer of ``size`` units initialized
    orthogonally with gain ``scale`` (None: flax's default initializer); ``squeeze``:
    drop the last axis (``size`` 1)."""

    size: int
    scale: float | None = 1.0
    squeeze: bool = False


def resolve(network: Any) -> type[nn.Module]:
    """The flax module class that ``network`` (a class or ``"pkg.mod:Class"``) names.

    Raises:
        ValueError: a string that does not import, or something that is not a flax module
            class.
    """
    if isinstance(network, str):
        module_name, sep, name = network.partition(":")
        if not sep or not module_name or not name:
            raise ValueError(f"network must be a flax module class or an import string "
                             f"'package.module:Class', got {network!r}")
        try:
            target: Any = importlib.import_module(module_name)
            for part in name.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"network {network!r} does not resolve: {e}") from None
        network = target
    if not (isinstance(network, type) and issubclass(network, nn.Module)):
        raise ValueError(f"network must be a flax.linen.Module class (built without "
                         f"arguments, mapping {CONTRACT}), got {network!r}")
    return network


def import_string(network: Any) -> str | None:
    """``network`` (None, a module class or an import string) as the import string a run
    record keeps; ValueError for a class that cannot be imported back by its name."""
    if network is None:
        return None
    cls = resolve(network)
    if isinstance(network, str):
        return network
    text = f"{cls.__module__}:{cls.__qualname__}"
    if "<locals>" in cls.__qualname__ or resolve(text) is not cls:
        raise ValueError(f"network {cls.__qualname__} cannot be imported back by its name "
                         f"({text}), so a run record could not rebuild it; define it at the "
                         f"top level of a module")
    return text


def check_torso(network: Any, obs_shape: Sequence[int]) -> int:
    """The feature width ``F`` of ``network``'s torso on observations of ``obs_shape``,
    traced from abstract inputs (nothing allocated or compiled).

    Raises:
        ValueError: naming the expected and the actual shapes, or what building the
            module raised.
    """
    cls = resolve(network)
    obs = jax.ShapeDtypeStruct((2,) + tuple(obs_shape), jnp.float32)
    try:
        out = jax.eval_shape(lambda o: cls().init_with_output(jax.random.key(0), o)[0], obs)
    except Exception as e:  # noqa: BLE001 - the user's module: its error in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"network {cls.__qualname__} must map {CONTRACT}; applied to "
                         f"[2, {', '.join(map(str, obs_shape))}] it raised "
                         f"{type(e).__name__}: {first}") from None
    if not isinstance(out, jax.ShapeDtypeStruct) or len(out.shape) != 2 or out.shape[0] != 2:
        got = (list(out.shape) if isinstance(out, jax.ShapeDtypeStruct)
               else type(out).__name__)
        raise ValueError(f"network {cls.__qualname__} must map {CONTRACT}; observations "
                         f"[2, {', '.join(map(str, obs_shape))}] gave {got}, expected [2, F]")
    return int(out.shape[1])


class UserTorso(NamedTuple):
    """A checked torso class, as the network factories take it: ``cls`` applied to
    observations of rank ``obs_rank`` (their shape's length)."""

    cls: type[nn.Module]
    obs_rank: int


def user_torso(network: Any, obs_shape: Sequence[int]) -> UserTorso | None:
    """``network`` (None, a module class or an import string) checked on observations of
    ``obs_shape`` (:func:`check_torso`), or None when ``network`` is None."""
    if network is None:
        return None
    check_torso(network, obs_shape)
    return UserTorso(resolve(network), len(tuple(obs_shape)))


def apply_torso(torso: UserTorso, obs: Array) -> Array:
    """``torso`` (a submodule named "torso") on ``obs [..., *obs_shape]`` -> features
    ``[..., F]``, the leading axes flattened into one batch axis and back, observations
    cast to float32. Called inside a compact ``__call__``."""
    lead = obs.shape[:obs.ndim - torso.obs_rank]
    x = obs.reshape((-1,) + obs.shape[len(lead):]).astype(jnp.float32)
    h = torso.cls(name="torso")(x)
    return h.reshape(lead + h.shape[1:])


def dense(size: int, scale: float | None, **kw: Any) -> nn.Dense:
    """A linear layer, initialized orthogonally with gain ``scale`` (None: flax's default)."""
    if scale is None:
        return nn.Dense(size, **kw)
    return nn.Dense(size, kernel_init=nn.initializers.orthogonal(scale), **kw)


class WithHeads(nn.Module):
    """A user's torso (a module class) with the agent's linear output heads; one head's
    output alone, several as a tuple."""

    torso: Any
    heads: Sequence[HeadSpec]
    obs_rank: int = 1

    @nn.compact
    def __call__(self, obs: Array) -> Any:
        h = apply_torso(UserTorso(self.torso, self.obs_rank), obs)
        outs = []
        for i, spec in enumerate(self.heads):
            y = dense(spec.size, spec.scale, name=f"head_{i}")(h)
            outs.append(y[..., 0] if spec.squeeze else y)
        return outs[0] if len(outs) == 1 else tuple(outs)


def make_torso_network(network: Any, obs_shape: Sequence[int],
                       heads: Sequence[HeadSpec]) -> Network:
    """``network``'s torso with ``heads``: ``apply(params, obs [..., *obs_shape])`` ->
    one head's ``[..., size]`` (``[...]`` squeezed) or a tuple of them.

    Raises:
        ValueError: as :func:`check_torso`.
    """
    check_torso(network, obs_shape)
    return from_module(WithHeads(resolve(network), tuple(heads), obs_rank=len(obs_shape)))


def make_torso_actor_critic(network: Any, obs_shape: Sequence[int], num_outputs: int,
                            shared: bool) -> tuple[Network, Network | None]:
    """An actor-critic's networks on ``network``'s torso: with ``shared`` one torso giving
    ``(policy [..., num_outputs], value [...])`` and None; else a policy network and a
    value network, each with a torso of its own (PPO's and A2C's layouts).

    Raises:
        ValueError: as :func:`check_torso`.
    """
    policy, value = HeadSpec(num_outputs, 0.01), HeadSpec(1, 1.0, squeeze=True)
    if shared:
        return make_torso_network(network, obs_shape, (policy, value)), None
    return (make_torso_network(network, obs_shape, (policy,)),
            make_torso_network(network, obs_shape, (value,)))


class MinAtarCNN(nn.Module):
    """A small CNN torso for MinAtar's ``10 x 10 x C`` grids, of the size purejaxql's PQN
    uses there: one 3x3 convolution of 16 channels, then a dense layer of 128 units, each
    followed by LayerNorm and ReLU. Takes the grid ``[B, 10, 10, C]`` or, as rljax's
    MinAtar envs give it by default, flattened ``[B, 100 C]``."""

    channels: int = 16
    features: int = 128
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x: Array) -> Array:
        if x.ndim == 2:
            x = x.reshape((x.shape[0], 10, 10, x.shape[1] // 100))
        init = nn.initializers.he_normal()
        norm = (lambda y: nn.LayerNorm()(y)) if self.layer_norm else (lambda y: y)
        conv = functools.partial(Conv, kernel_init=init, method="matmul")
        x = nn.relu(norm(conv(self.channels, (3, 3), 1)(x)))
        x = x.reshape((x.shape[0], -1))
        return nn.relu(norm(nn.Dense(self.features, kernel_init=init)(x)))

"""Recurrent networks: torso -> memory core (GRU, LSTM or a simple RNN) -> heads.

A :class:`RecurrentNetwork` is a :class:`Network` whose ``apply`` takes and returns the
core's carry (its memory):

    apply(params, carry, obs [B, ...], reset [B]) -> (carry, outputs)

one step for a batch of envs, the carry reset to its initial value (zeros) where ``reset``
is True before the step, and

    unroll(params, carry, obs [T, B, ...], reset [T, B]) -> (carries, outputs)

the same steps over a sequence inside one ``lax.scan``: ``carries`` holds, for every step,
the carry the step started from (before the reset) and ``carry_after`` the one it ended
with; the torso and heads run on all ``T * B`` inputs at once outside the scan, the core
alone steps in it. Both compute the same numbers: one step of ``apply`` on ``carries[t]``
gives ``outputs[t]``.

The torso is an MLP for flat observations (with LayerNorm before each nonlinearity for
PQN) or the Nature CNN for frames; ``outputs`` is a tuple, one entry per head, each head an
MLP ending in a linear layer (a value head's single unit is squeezed away).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax.networks.core import MLP, NatureCNN
from rljax.networks.initializers import LECUN_NORMAL
from rljax.networks.layer_norm import LayerNormMLP, LayerNormNatureCNN
from rljax.networks.orthogonal import orthogonal
from rljax.networks.torso import HeadSpec, check_torso, resolve
from rljax.types import Array, PRNGKey

# The memory cores by name, each a flax cell class taking ``features``: a new core is one
# line here (the configs' ``Memory.core`` is checked against this table).
CORES: dict[str, type[nn.RNNCellBase]] = {
    "gru": nn.GRUCell,
    "lstm": nn.OptimizedLSTMCell,
    "rnn": nn.SimpleCell,
}

# [B, H] for a GRU or simple RNN, (c [B, H], h [B, H]) for an LSTM; with two towers the
# pair of the actor's and the critic's
Carry = Any


def check_core(kind: Any) -> None:
    """ValueError unless ``kind`` names a core of :data:`CORES`."""
    if kind not in CORES:
        raise ValueError(f"unknown memory core {kind!r}; allowed: {', '.join(CORES)}")


def initial_carry(kind: str, batch_shape: Sequence[int], size: int) -> Carry:
    """The core's initial carry (zeros) for a batch of ``batch_shape`` envs, shaped as the
    cell's own ``initialize_carry`` shapes it."""
    check_core(kind)
    cell = CORES[kind](features=size, parent=None)
    shapes = jax.eval_shape(lambda: cell.initialize_carry(jax.random.key(0),
                                                          tuple(batch_shape) + (size,)))
    # one buffer per leaf: a donated state may not hold one twice
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def reset_carry(carry: Carry, reset: Array) -> Carry:
    """``carry`` with the rows where ``reset [B]`` is True set to the initial value
    (zeros)."""
    return jax.tree.map(lambda c: jnp.where(reset[..., None], jnp.zeros_like(c), c), carry)


class RecurrentModule(nn.Module):
    """Torso, memory core and heads (see the module docstring)."""

    kind: str
    memory_size: int
    torso_sizes: Sequence[int]
    heads: Sequence[HeadSpec]
    head_sizes: Sequence[int] = ()
    activation: str = "relu"
    layer_norm: bool = False
    image: bool = False
    conv_method: str = "matmul"
    network: Any = None  # a user's torso class (rljax.networks.torso) in place of the above
    towers: int = 1

    def setup(self):
        self.torso, self.cell = self.make_torso(), self.make_cell()
        if self.towers == 2:  # a torso and core of its own for the second head (the critic)
            self.critic_torso, self.critic_cell = self.make_torso(), self.make_cell()
        self.out = [MLP(tuple(self.head_sizes), output_size=h.size, activation=self.activation,
                        output_scale=h.scale) for h in self.heads]

    def make_cell(self) -> nn.RNNCellBase:
        # recurrent kernels orthogonal without LAPACK (rljax/networks/orthogonal.py)
        return CORES[self.kind](features=self.memory_size, kernel_init=LECUN_NORMAL,
                                recurrent_kernel_init=orthogonal())

    def make_torso(self) -> nn.Module:
        if self.network is not None:
            return self.network()
        if self.image:
            return (LayerNormNatureCNN(conv_method=self.conv_method) if self.layer_norm
                    else NatureCNN(conv_method=self.conv_method))
        if self.layer_norm:
            return LayerNormMLP(tuple(self.torso_sizes), self.activation)
        return MLP(tuple(self.torso_sizes), activation=self.activation)

    def embed(self, obs: Array) -> Any:
        """Torso features ``[..., F]`` of observations ``[..., *obs_shape]`` (a tuple of
        one per tower with ``towers`` 2)."""
        obs = obs if self.image and self.network is None else obs.astype(jnp.float32)
        if self.towers == 1:
            return self.torso(obs)
        return self.torso(obs), self.critic_torso(obs)

    def core(self, carry: Carry, x: Any, reset: Array) -> tuple[Carry, Any]:
        """One core step on features ``[B, F]``, the carry reset first where ``reset``."""
        carry = reset_carry(carry, reset)
        if self.towers == 1:
            return self.cell(carry, x)
        (actor, a), (critic, c) = self.cell(carry[0], x[0]), self.critic_cell(carry[1], x[1])
        return (actor, critic), (a, c)

    def outputs(self, y: Any) -> tuple[Array, ...]:
        """The heads on core outputs ``[..., H]`` (head ``i`` on tower ``i``'s)."""
        ys = (y,) * len(self.heads) if self.towers == 1 else y
        return tuple(head(yi)[..., 0] if spec.squeeze else head(yi)
                     for head, spec, yi in zip(self.out, self.heads, ys, strict=True))

    def __call__(self, carry: Carry, obs: Array, reset: Array) -> tuple[Carry, tuple]:
        carry, y = self.core(carry, self.embed(obs), reset)
        return carry, self.outputs(y)


class Unrolled(NamedTuple):
    """What :meth:`RecurrentNetwork.unroll` returns.

    Attributes:
        carries: the carry each step started from (before its reset), every leaf
            ``[T, B, H]``.
        carry_after: the carry each step ended with, every leaf ``[T, B, H]``.
        outputs: the heads' outputs, every one ``[T, B, ...]``.
    """

    carries: Carry
    carry_after: Carry
    outputs: tuple


class RecurrentNetwork(NamedTuple):
    """A recurrent network as pure functions (see the module docstring).

    Attributes:
        init: ``init(key, obs [B, *obs_shape]) -> params``.
        apply: ``apply(params, carry, obs [B, ...], reset [B]) -> (carry, outputs)``.
        unroll: ``unroll(params, carry, obs [T, B, ...], reset [T, B]) -> Unrolled``.
        step_from: ``step_from(params, carry_after [..., H], obs [..., *obs_shape]) ->
            outputs``: the heads after one more step from each given carry, without any
            reset (bootstrapping from the observation an episode ended in).
        initial_carry: ``initial_carry(batch_shape) -> carry`` (zeros).
        kind: the core's name in :data:`CORES`.
        memory_size: the carry's width ``H``.
    """

    init: Callable[..., Any]
    apply: Callable[..., Any]
    unroll: Callable[..., Unrolled]
    step_from: Callable[..., tuple]
    initial_carry: Callable[[Sequence[int]], Carry]
    kind: str
    memory_size: int


def make_recurrent_network(obs_shape: Sequence[int], kind: str, memory_size: int,
                           torso_sizes: Sequence[int], heads: Sequence[HeadSpec], *,
                           head_sizes: Sequence[int] = (), activation: str = "relu",
                           layer_norm: bool = False, conv_method: str = "matmul",
                           network: Any = None, towers: int = 1) -> RecurrentNetwork:
    """Builds torso -> ``kind`` core of ``memory_size`` units -> ``heads``.

    Args:
        obs_shape: one observation's shape; 3 axes: frames (Nature CNN torso).
        kind: a core's name in :data:`CORES` ("gru", "lstm", "rnn").
        memory_size: units of the core.
        torso_sizes: MLP layers before the core (flat observations).
        heads: the output heads.
        head_sizes: hidden MLP layers of every head, after the core.
        activation: hidden activation name.
        layer_norm: LayerNorm before every torso nonlinearity (PQN).
        conv_method: the Nature CNN's convolutions (frames).
        network: a user's torso, a flax module class or ``"pkg.mod:Class"``
            (:mod:`rljax.networks.torso`), in place of the MLP or CNN; None: those.
        towers: 1: one torso and core feed every head; 2 (two heads): each head has a
            torso and core of its own, and the carry is the pair of their carries.
    """
    check_core(kind)
    if towers not in (1, 2) or (towers == 2 and len(heads) != 2):
        raise ValueError(f"towers must be 1, or 2 with two heads (one tower each), got "
                         f"towers={towers!r} with {len(heads)} heads")
    if network is not None:
        check_torso(network, obs_shape)
        network = resolve(network)
    module = RecurrentModule(kind=kind, memory_size=int(memory_size),
                             torso_sizes=tuple(torso_sizes), heads=tuple(heads),
                             head_sizes=tuple(head_sizes), activation=activation,
                             layer_norm=layer_norm, image=len(obs_shape) == 3,
                             conv_method=conv_method, network=network, towers=towers)

    def make_carry(batch_shape: Sequence[int]) -> Carry:
        carries = tuple(initial_carry(kind, batch_shape, memory_size) for _ in range(towers))
        return carries[0] if towers == 1 else carries

    def init(key: PRNGKey, obs: Array) -> Any:
        batch = obs.shape[:1]
        return module.init(key, make_carry(batch), obs, jnp.zeros(batch, bool))

    def unroll(params: Any, carry: Carry, obs: Array, reset: Array) -> Unrolled:
        t, b = reset.shape
        x = module.apply(params, obs.reshape((t * b,) + obs.shape[2:]), method="embed")
        x = jax.tree.map(lambda f: f.reshape((t, b) + f.shape[1:]), x)

        def step(carry, inputs):
            x_t, reset_t = inputs
            new, y = module.apply(params, carry, x_t, reset_t, method="core")
            return new, (carry, new, y)

        _, (carries, after, y) = jax.lax.scan(step, carry, (x, reset))
        y = jax.tree.map(lambda f: f.reshape((t * b,) + f.shape[2:]), y)
        outs = module.apply(params, y, method="outputs")
        outs = tuple(o.reshape((t, b) + o.shape[1:]) for o in outs)
        return Unrolled(carries, after, outs)

    def step_from(params: Any, carry: Carry, obs: Array) -> tuple:
        lead = obs.shape[:obs.ndim - len(obs_shape)]
        n = int(np.prod(lead))
        flat = jax.tree.map(lambda c: c.reshape((n,) + c.shape[len(lead):]), carry)
        _, outs = module.apply(params, flat, obs.reshape((n,) + tuple(obs_shape)),
                               jnp.zeros((n,), bool))
        return tuple(o.reshape(lead + o.shape[1:]) for o in outs)

    return RecurrentNetwork(init=init, apply=module.apply, unroll=unroll, step_from=step_from,
                            initial_carry=make_carry, kind=kind, memory_size=int(memory_size))

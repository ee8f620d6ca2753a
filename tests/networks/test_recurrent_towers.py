"""Recurrent networks with two towers: the second head (PPO-RNN's critic) has a torso and
core of its own (``Memory.separate_critic``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents import pqn
from rljax.networks.recurrent import make_recurrent_network
from rljax.networks.torso import HeadSpec
from rljax.records import Memory, configure

HEADS = (HeadSpec(2, 0.01), HeadSpec(1, 1.0, squeeze=True))


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_each_head_reads_only_its_own_tower(core):
    """The policy's output does not move with the critic's parameters nor the value's
    with the actor's, while each moves with its own; the carry is the pair of the two
    cores' carries, reset together; unrolling equals stepping."""
    net = make_recurrent_network((3,), core, 5, (7,), HEADS, head_sizes=(4,), towers=2)
    obs = jax.random.normal(jax.random.key(0), (6, 2, 3))
    reset = jnp.zeros((6, 2), bool).at[3, 1].set(True)
    params = net.init(jax.random.key(1), obs[0])
    carry = net.initial_carry((2,))
    assert len(carry) == 2 and jax.tree.structure(carry[0]) == jax.tree.structure(carry[1])

    def outputs(p):
        return net.unroll(p, carry, obs, reset).outputs

    def grads(head):
        return jax.grad(lambda p: jnp.sum(outputs(p)[head] ** 2))(params)["params"]

    actor, critic = grads(0), grads(1)
    norm = lambda tree: float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(tree)))  # noqa: E731
    for name in ("torso", "cell", "out_0"):
        assert norm(actor[name]) > 0 and norm(critic[name]) == 0, name
    for name in ("critic_torso", "critic_cell", "out_1"):
        assert norm(critic[name]) > 0 and norm(actor[name]) == 0, name
    unrolled, stepped = net.unroll(params, carry, obs, reset), carry
    for t in range(obs.shape[0]):
        stepped, out = net.apply(params, stepped, obs[t], reset[t])
        for a, b in zip(out, unrolled.outputs, strict=True):
            np.testing.assert_allclose(a, b[t], atol=1e-6)
        for a, b in zip(jax.tree.leaves(stepped), jax.tree.leaves(
                jax.tree.map(lambda x, t=t: x[t], unrolled.carry_after)), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)


def test_one_tower_keeps_its_parameter_names_and_two_need_two_heads():
    """Checkpoints of one-tower networks load as before: the same parameter names."""
    net = make_recurrent_network((3,), "gru", 5, (7,), HEADS)
    assert set(net.init(jax.random.key(0), jnp.zeros((1, 3)))["params"]) == {
        "torso", "cell", "out_0", "out_1"}
    with pytest.raises(ValueError, match="towers must be 1, or 2 with two heads"):
        make_recurrent_network((3,), "gru", 5, (7,), HEADS[:1], towers=2)
    with pytest.raises(ValueError, match="towers must be 1, or 2"):
        make_recurrent_network((3,), "gru", 5, (7,), HEADS, towers=3)


def test_pqn_refuses_a_separate_critic():
    with pytest.raises(ValueError, match="PQN has no critic"):
        configure(pqn.PQNConfig, memory=Memory(separate_critic=True))
    with pytest.raises(ValueError, match="separate_critic"):
        Memory(separate_critic=1)

"""Single-file recurrent PPO (GRU) on gymnax's CartPole, in the PureJaxRL ``ppo_rnn`` style:
the reference rljax's recurrent PPO is timed against (benchmarks/recurrent_speed.py).

Everything is one function of a key: gymnax's auto-resetting ``step`` vmapped over the
envs, a GRU carried through acting (reset where the previous step ended an episode), the
rollout scan, GAE bootstrapped from one more network step on the last observation, and
epochs of minibatches of whole env sequences, each re-running the GRU over its sequences
from the carry recorded at the rollout's start; all in one ``lax.scan`` over updates.
The network and config are ``ppo_rnn``'s: Dense 128 relu -> GRU 128 -> actor and critic
heads (Dense 128 relu -> output), 4 envs x 128 steps, 4 epochs x 4 minibatches, clipped
surrogate and value losses, Adam 2.5e-4 (eps 1e-5) annealed after clipping the gradient
norm at 0.5. Episode ends are treated as terminal, as PureJaxRL does.

    python -m benchmarks.reference_rnn   # steps/s on its own
"""

from __future__ import annotations

import time
from typing import NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal

from benchmarks.reference_native import gae


class Sizes(NamedTuple):
    num_envs: int = 4
    rollout_len: int = 128
    num_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    hidden: int = 128
    total_updates: int = 976  # the learning rate's annealing horizon (500k steps)


PPO_RNN = Sizes()  # ppo_rnn's CartPole configuration


class GRUActorCritic(nn.Module):
    """``(carry [B, H], obs [T, B, D], done [T, B]) -> (carry, logits [T, B, A], value [T, B])``;
    the carry is zeroed before a step whose ``done`` flag (the previous step ended an
    episode) is set."""

    num_actions: int
    hidden: int

    @nn.compact
    def __call__(self, carry, obs, done):
        x = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)),
                             bias_init=constant(0.0))(obs))
        carry, y = ResetScan(self.hidden)(carry, (x, done))
        a = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(2.0))(y))
        logits = nn.Dense(self.num_actions, kernel_init=orthogonal(0.01))(a)
        c = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(2.0))(y))
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(c)[..., 0]
        return carry, logits, value


class ResetScan(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, carry, inputs):
        def step(cell, carry, inputs):
            x, done = inputs
            carry = jnp.where(done[:, None], jnp.zeros_like(carry), carry)
            return cell(carry, x)

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})
        return scan(nn.GRUCell(features=self.hidden), carry, inputs)


def sequence_epochs(opt, loss, s, weights, opt_state, seqs, key):
    """``s.num_epochs`` epochs of one ``opt`` step on ``grad(loss)`` per minibatch of whole
    env sequences: ``seqs``' leaves are time-major ``[T, num_envs, ...]``, the envs shuffled
    and split into ``s.num_minibatches`` each epoch."""
    def epoch(c, key):
        perm = jax.random.permutation(key, s.num_envs)
        mbs = jax.tree.map(lambda x: x[:, perm].reshape(
            (x.shape[0], s.num_minibatches, -1) + x.shape[2:]).swapaxes(0, 1), seqs)

        def minibatch(c, mb):
            weights, opt_state = c
            grads = jax.grad(loss)(weights, mb)
            updates, opt_state = opt.update(grads, opt_state, weights)
            return (optax.apply_updates(weights, updates), opt_state), None

        return jax.lax.scan(minibatch, c, mbs)[0], None

    return jax.lax.scan(epoch, (weights, opt_state), jax.random.split(key, s.num_epochs))[0]


def make_ppo_rnn(s: Sizes = PPO_RNN, gamma=0.99, lam=0.95, clip=0.2, ent=0.01, vf=0.5):
    """``(init(key) -> carry, run(carry, updates) -> carry)``."""
    env, params = gymnax.make("CartPole-v1")
    obs_dim = int(np.prod(env.observation_space(params).shape))
    net = GRUActorCritic(int(env.action_space(params).n), s.hidden)
    steps_per_anneal = s.num_epochs * s.num_minibatches
    schedule = optax.linear_schedule(s.lr, 0.0, s.total_updates * steps_per_anneal)
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(schedule, eps=1e-5))
    zeros = jnp.zeros((s.num_envs, s.hidden))

    def init(key):
        k_net, k_env, key = jax.random.split(key, 3)
        weights = net.init(k_net, zeros, jnp.zeros((1, s.num_envs, obs_dim)),
                           jnp.zeros((1, s.num_envs), bool))
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_env, s.num_envs),
                                                         params)
        done = jnp.zeros((s.num_envs,), bool)
        return weights, opt.init(weights), env_state, obs, done, zeros, key

    def step(carry, _):
        weights, opt_state, env_state, obs, done, h, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        h_next, logits, value = net.apply(weights, h, obs[None], done[None])
        action = jax.random.categorical(k_act, logits[0])
        logp = jax.nn.log_softmax(logits[0])[jnp.arange(s.num_envs), action]
        nobs, env_state, reward, term, trunc, _ = jax.vmap(
            env.step, (0, 0, 0, None))(jax.random.split(k_env, s.num_envs), env_state, action,
                                       params)
        ndone = term | trunc
        out = (obs, done, action, logp, value[0], reward, ndone)
        return (weights, opt_state, env_state, nobs, ndone, h_next, key), out

    def loss(weights, mb):
        h0, obs, done, action, logp_old, value_old, adv, target = mb
        _, logits, value = net.apply(weights, h0[0], obs, done)
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, action[..., None], -1)[..., 0]
        ratio = jnp.exp(logp - logp_old)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        v_clipped = value_old + jnp.clip(value - value_old, -clip, clip)
        v_loss = 0.5 * jnp.maximum(jnp.square(value - target),
                                   jnp.square(v_clipped - target)).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return pg + vf * v_loss - ent * entropy

    def update(carry, _):
        h_start = carry[5]
        carry, (obs, done, action, logp, value, reward, ndone) = jax.lax.scan(
            step, carry, None, s.rollout_len)
        weights, opt_state, env_state, last_obs, last_done, h, key = carry
        _, _, last_v = net.apply(weights, h, last_obs[None], last_done[None])

        adv = gae(reward, ndone.astype(jnp.float32), value, last_v[0], gamma, lam)
        key, k_epochs = jax.random.split(key)
        data = (h_start[None], obs, done, action, logp, value, adv, adv + value)
        weights, opt_state = sequence_epochs(opt, loss, s, weights, opt_state, data, k_epochs)
        return (weights, opt_state, env_state, last_obs, last_done, h, key), None

    def run(carry, updates: int):
        return jax.lax.scan(update, carry, None, updates)[0]

    return init, run


class ReferenceRNN:
    """A compiled chunk of ``updates`` updates: ``steps_per_second()`` runs one and returns
    env steps per second."""

    def __init__(self, sizes: Sizes = PPO_RNN, updates: int = 8, make=None):
        init, run = (make or make_ppo_rnn)(sizes)
        self.updates, self.sizes = updates, sizes
        self._run = jax.jit(lambda c: run(c, updates), donate_argnums=0)
        self._carry = self._run(jax.jit(init)(jax.random.key(0)))  # compile + warm up
        jax.block_until_ready(self._carry)

    def run(self):
        self._carry = self._run(self._carry)
        return self._carry

    def seconds(self) -> float:
        start = time.perf_counter()
        jax.block_until_ready(self.run())
        return time.perf_counter() - start

    @property
    def steps(self) -> int:
        return self.updates * self.sizes.num_envs * self.sizes.rollout_len


def main() -> None:
    loop = ReferenceRNN()
    print(f"{np.median([loop.steps / loop.seconds() for _ in range(5)]):,.0f} steps/s")


if __name__ == "__main__":
    main()

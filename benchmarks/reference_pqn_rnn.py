"""Single-file recurrent PQN (GRU) on gymnax's CartPole, in purejaxql's ``pqn_rnn`` style:
the reference rljax's recurrent PQN is timed against (benchmarks/recurrent_speed.py).

Everything is one function of a key, all in one ``lax.scan`` over updates:

- the network: two Dense -> LayerNorm -> ReLU layers, the previous action one-hot beside
  their output, a GRU (its carry zeroed where the previous step ended an episode) and a
  linear layer of Q-values;
- acting: epsilon-greedy, epsilon from 1 down to 0.2 over the first fifth of the updates;
  gymnax's auto-resetting ``step`` vmapped over the envs; rewards x 0.1;
- the sequences trained on: each env's rollout with the last ``memory_window`` steps of
  the rollout before it in front (the carry recorded at the window's first step starts
  it; the first rollout's window is random steps taken at init);
- learning: epochs of minibatches of whole env sequences; in each minibatch step the GRU
  runs over the sequences once, and the Q(lambda) targets are taken from that pass's
  values (gradient stopped), bootstrapping from the greedy value of the sequence's last
  step, which is not itself trained on; RAdam (learning rate annealed linearly to zero over
  the run's minibatch steps) after clipping the gradient norm at 10.

The sizes are purejaxql's CartPole ``pqn_rnn`` configuration: 32 envs x 64 steps, a memory
window of 4, 4 epochs x 16 minibatches, 256 units, lr 1e-4, gamma 0.99, lambda 0.95.
purejaxql's network also has a batch-norm layer on its input whose output it does not use;
it is left out here. ``memory_window=0`` trains on the rollout alone, the sequence length
rljax's recurrent PQN trains on.

    python -m benchmarks.reference_pqn_rnn   # steps/s on its own
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.reference_rnn import ReferenceRNN, ResetScan, sequence_epochs


class Sizes(NamedTuple):
    num_envs: int = 32
    rollout_len: int = 64
    memory_window: int = 4
    num_epochs: int = 4
    num_minibatches: int = 16
    lr: float = 1e-4
    hidden: int = 256
    layers: int = 2
    total_updates: int = 244  # the schedules' horizon: 500k env steps


PQN_RNN = Sizes()  # pqn_rnn's CartPole configuration


class RecurrentQNetwork(nn.Module):
    """``(carry [B, H], obs [T, B, D], done [T, B], last_action [T, B]) -> (carry,
    q [T, B, A])``."""

    num_actions: int
    hidden: int
    layers: int

    @nn.compact
    def __call__(self, carry, obs, done, last_action):
        x = obs
        for _ in range(self.layers):
            x = nn.relu(nn.LayerNorm()(nn.Dense(self.hidden)(x)))
        x = jnp.concatenate([x, jax.nn.one_hot(last_action, self.num_actions)], -1)
        carry, y = ResetScan(self.hidden)(carry, (x, done))
        return carry, nn.Dense(self.num_actions)(y)


def q_lambda_targets(q, reward, done, gamma: float, lam: float):
    """Q(lambda) returns ``[T - 1, B]`` for steps ``0..T-2`` from values ``q [T, B, A]``:
    ``G_t = r_t + gamma (1 - d_t) ((1 - lam) max q_{t+1} + lam G_{t+1})``, with
    ``G_{T-1} = max q_{T-1}``."""
    q_max = q.max(-1)

    def step(g_next, x):
        r, d, q_next = x
        g = r + gamma * (1.0 - d) * ((1.0 - lam) * q_next + lam * g_next)
        return g, g

    return jax.lax.scan(step, q_max[-1], (reward[:-1], done[:-1], q_max[1:]), reverse=True)[1]


def make_pqn_rnn(s: Sizes = PQN_RNN, gamma=0.99, lam=0.95, reward_scale=0.1,
                 eps_finish=0.2, eps_decay=0.2):
    """``(init(key) -> carry, run(carry, updates) -> carry)``."""
    env, params = gymnax.make("CartPole-v1")
    obs_dim = int(np.prod(env.observation_space(params).shape))
    num_actions = int(env.action_space(params).n)
    net = RecurrentQNetwork(num_actions, s.hidden, s.layers)
    grad_steps = s.total_updates * s.num_epochs * s.num_minibatches
    opt = optax.chain(optax.clip_by_global_norm(10.0),
                      optax.radam(optax.linear_schedule(s.lr, 1e-20, grad_steps)))
    epsilon = optax.linear_schedule(1.0, eps_finish, int(eps_decay * s.total_updates))
    window = s.memory_window

    def act(weights, carry, eps):
        env_state, obs, done, last_action, h, key = carry
        key, k_eps, k_rand, k_env = jax.random.split(key, 4)
        h_next, q = net.apply(weights, h, obs[None], done[None], last_action[None])
        greedy = jnp.argmax(q[0], -1)
        rand = jax.random.randint(k_rand, greedy.shape, 0, num_actions)
        action = jnp.where(jax.random.uniform(k_eps, greedy.shape) < eps, rand, greedy)
        nobs, env_state, reward, term, trunc, _ = jax.vmap(
            env.step, (0, 0, 0, None))(jax.random.split(k_env, s.num_envs), env_state, action,
                                       params)
        ndone = term | trunc
        out = (h, obs, done, last_action, action, reward * reward_scale, ndone)
        return (env_state, nobs, ndone, action, h_next, key), out

    def init(key):
        k_net, k_env, key = jax.random.split(key, 3)
        h = jnp.zeros((s.num_envs, s.hidden))
        done = jnp.zeros((s.num_envs,), bool)
        action = jnp.zeros((s.num_envs,), jnp.int32)
        weights = net.init(k_net, h, jnp.zeros((1, s.num_envs, obs_dim)), done[None],
                           action[None])
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_env, s.num_envs),
                                                         params)
        explore = (env_state, obs, done, action, h, key)
        # Random steps fill the first memory window.
        explore, memory = jax.lax.scan(lambda c, _: act(weights, c, 1.0), explore, None,
                                       window)
        return weights, opt.init(weights), explore, memory, jnp.zeros((), jnp.int32)

    def loss(weights, mb):
        h0, obs, done, last_action, action, reward, ndone = mb
        _, q = net.apply(weights, h0[0], obs, done, last_action)
        target = q_lambda_targets(jax.lax.stop_gradient(q), reward, ndone.astype(jnp.float32),
                                  gamma, lam)
        chosen = jnp.take_along_axis(q, action[..., None], -1)[..., 0]
        return 0.5 * jnp.square(chosen[:-1] - target).mean()

    def update(carry, _):
        weights, opt_state, explore, memory, n = carry
        eps = epsilon(n)
        explore, rollout = jax.lax.scan(lambda c, _: act(weights, c, eps), explore, None,
                                        s.rollout_len)
        seqs = jax.tree.map(lambda m, r: jnp.concatenate([m, r]), memory, rollout)
        key, k_epochs = jax.random.split(explore[-1])
        weights, opt_state = sequence_epochs(opt, loss, s, weights, opt_state, seqs, k_epochs)
        memory = jax.tree.map(lambda x: x[x.shape[0] - window:], seqs)
        return (weights, opt_state, explore[:-1] + (key,), memory, n + 1), None

    def run(carry, updates: int):
        return jax.lax.scan(update, carry, None, updates)[0]

    return init, run


class ReferencePQNRNN(ReferenceRNN):
    """A compiled chunk of ``updates`` updates (``run()``, ``steps``)."""

    def __init__(self, sizes: Sizes = PQN_RNN, updates: int = 2):
        super().__init__(sizes, updates, make=make_pqn_rnn)


def main() -> None:
    loop = ReferencePQNRNN()
    print(f"{np.median([loop.steps / loop.seconds() for _ in range(5)]):,.0f} steps/s")


if __name__ == "__main__":
    main()

"""Single-file PPO and PQN on gymnax envs, in the PureJaxRL style: the reference loops that
rljax's training on JAX-native envs is timed against (benchmarks/throughput.py).

Everything is one function of a key: the envs (gymnax's own auto-resetting ``step``,
vmapped over envs), acting, the rollout scan and the epochs of shuffled minibatches, all
in one ``lax.scan`` over updates, with no layers in between. The gradient work is set to
rljax's at the same config: the same envs, rollout length, epochs, minibatches, networks
and optimizer. Episode ends are treated as terminal (as PureJaxRL does), which costs the
same as rljax's bootstrapping from truncated final observations minus one critic pass.

    python -m benchmarks.reference_native   # steps/s of each, on its own
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


class Sizes(NamedTuple):
    num_envs: int
    rollout_len: int
    num_epochs: int
    num_minibatches: int
    lr: float
    hidden: tuple[int, ...]


class _MLP(nn.Module):
    hidden: tuple[int, ...]
    out: int
    act: str = "tanh"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        for h in self.hidden:
            x = nn.Dense(h)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = getattr(nn, self.act)(x)
        return nn.Dense(self.out)(x)


def _flat(obs):
    return obs.reshape(obs.shape[: obs.ndim - 3] + (-1,)) if obs.ndim >= 3 else obs


def _env(env_id: str):
    env, params = gymnax.make(env_id.split(":", 1)[1])
    obs_dim = int(np.prod(env.observation_space(params).shape))
    return env, params, obs_dim, int(env.action_space(params).n)


def _shuffled_minibatches(key, data, num_minibatches):
    n = jax.tree.leaves(data)[0].shape[0]
    perm = jax.random.permutation(key, n)
    return jax.tree.map(lambda x: x[perm].reshape((num_minibatches, -1) + x.shape[1:]), data)


def _epochs(opt, loss, net, opt_state, data, key, s: Sizes):
    """``s.num_epochs`` epochs of one optimizer step per shuffled minibatch of ``data``."""
    def epoch(c, key):
        def minibatch(c, mb):
            net, opt_state = c
            grads = jax.grad(loss)(net, mb)
            updates, opt_state = opt.update(grads, opt_state, net)
            return (optax.apply_updates(net, updates), opt_state), None
        return jax.lax.scan(minibatch, c, _shuffled_minibatches(key, data,
                                                                s.num_minibatches))[0], None

    return jax.lax.scan(epoch, (net, opt_state), jax.random.split(key, s.num_epochs))[0]


def gae(reward, done, value, last_value, gamma: float, lam: float):
    """GAE advantages ``[T, B]`` by a reverse scan, ``done`` (float) ending the bootstrap."""
    def step(acc, x):
        adv, v_next = acc
        r, d, v = x
        delta = r + gamma * v_next * (1 - d) - v
        adv = delta + gamma * lam * (1 - d) * adv
        return (adv, v), adv

    return jax.lax.scan(step, (jnp.zeros_like(last_value), last_value), (reward, done, value),
                        reverse=True)[1]


def make_ppo(env_id: str, s: Sizes, gamma=0.99, lam=0.95, clip=0.2, ent=0.01, vf=0.5):
    """``(init(key) -> carry, run(carry, updates) -> carry)``, PPO with separate actor and
    critic MLPs, Adam (eps 1e-5) after clipping the gradient norm at 0.5."""
    env, params, obs_dim, num_actions = _env(env_id)
    actor, critic = _MLP(s.hidden, num_actions), _MLP(s.hidden, 1)
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(s.lr, eps=1e-5))

    def init(key):
        k_a, k_c, k_env, key = jax.random.split(key, 4)
        dummy = jnp.zeros((1, obs_dim))
        net = {"a": actor.init(k_a, dummy), "c": critic.init(k_c, dummy)}
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_env, s.num_envs),
                                                         params)
        return net, opt.init(net), env_state, _flat(obs), key

    def step(carry, _):
        net, opt_state, env_state, obs, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        logits = actor.apply(net["a"], obs)
        value = critic.apply(net["c"], obs)[:, 0]
        action = jax.random.categorical(k_act, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(s.num_envs), action]
        nobs, env_state, reward, term, trunc, _ = jax.vmap(
            env.step, (0, 0, 0, None))(jax.random.split(k_env, s.num_envs), env_state, action,
                                       params)
        done = (term | trunc).astype(jnp.float32)
        return (net, opt_state, env_state, _flat(nobs), key), (obs, action, logp, value,
                                                               reward, done)

    def loss(net, mb):
        obs, action, logp_old, adv, target = mb
        logits = actor.apply(net["a"], obs)
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, action[:, None], 1)[:, 0]
        ratio = jnp.exp(logp - logp_old)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        v = critic.apply(net["c"], obs)[:, 0]
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return pg + vf * jnp.square(v - target).mean() - ent * entropy

    def update(carry, _):
        carry, (obs, action, logp, value, reward, done) = jax.lax.scan(
            step, carry, None, s.rollout_len)
        net, opt_state, env_state, last_obs, key = carry
        last_v = critic.apply(net["c"], last_obs)[:, 0]

        adv = gae(reward, done, value, last_v, gamma, lam)
        data = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]),
                            (obs, action, logp, adv, adv + value))

        key, k_epochs = jax.random.split(key)
        net, opt_state = _epochs(opt, loss, net, opt_state, data, k_epochs, s)
        return (net, opt_state, env_state, last_obs, key), None

    def run(carry, updates: int):
        return jax.lax.scan(update, carry, None, updates)[0]

    return init, run


def make_pqn(env_id: str, s: Sizes, gamma=0.99, lam=0.95, eps=0.05, reward_scale=0.1):
    """PQN: LayerNorm ReLU MLP, Q(lambda) targets over the rollout from the greedy values
    recorded when acting, RAdam after clipping the gradient norm at 10, epsilon-greedy
    acting (fixed epsilon: the schedule costs nothing)."""
    env, params, obs_dim, num_actions = _env(env_id)
    q_net = _MLP(s.hidden, num_actions, act="relu", layer_norm=True)
    opt = optax.chain(optax.clip_by_global_norm(10.0), optax.radam(s.lr))

    def init(key):
        k_q, k_env, key = jax.random.split(key, 3)
        net = q_net.init(k_q, jnp.zeros((1, obs_dim)))
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_env, s.num_envs),
                                                         params)
        return net, opt.init(net), env_state, _flat(obs), key

    def step(carry, _):
        net, opt_state, env_state, obs, key = carry
        key, k_eps, k_rand, k_env = jax.random.split(key, 4)
        q = q_net.apply(net, obs)
        greedy = jnp.argmax(q, -1)
        rand = jax.random.randint(k_rand, greedy.shape, 0, num_actions)
        action = jnp.where(jax.random.uniform(k_eps, greedy.shape) < eps, rand, greedy)
        nobs, env_state, reward, term, trunc, info = jax.vmap(
            env.step, (0, 0, 0, None))(jax.random.split(k_env, s.num_envs), env_state, action,
                                       params)
        done = (term | trunc).astype(jnp.float32)
        return (net, opt_state, env_state, _flat(nobs), key), (obs, action, reward, done,
                                                               q.max(-1))

    def loss(net, mb):
        obs, action, target = mb
        q = jnp.take_along_axis(q_net.apply(net, obs), action[:, None], 1)[:, 0]
        return 0.5 * jnp.square(q - target).mean()

    def update(carry, _):
        carry, (obs, action, reward, done, q_max) = jax.lax.scan(step, carry, None,
                                                                 s.rollout_len)
        net, opt_state, env_state, last_obs, key = carry
        # The greedy values recorded when acting bootstrap the next step, as purejaxql's
        # PQN does; only the last observation needs the network.
        q_next = jnp.concatenate([q_max[1:], q_net.apply(net, last_obs).max(-1)[None]])

        def lam_return(g_next, x):
            r, d, q = x
            g = r * reward_scale + gamma * (1 - d) * (lam * g_next + (1 - lam) * q)
            return g, g

        _, target = jax.lax.scan(lam_return, q_next[-1], (reward, done, q_next), reverse=True)
        data = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (obs, action, target))

        key, k_epochs = jax.random.split(key)
        net, opt_state = _epochs(opt, loss, net, opt_state, data, k_epochs, s)
        return (net, opt_state, env_state, last_obs, key), None

    def run(carry, updates: int):
        return jax.lax.scan(update, carry, None, updates)[0]

    return init, run


class ReferenceLoop:
    """A compiled chunk of the reference: ``steps_per_second(steps)`` runs whole updates
    adding up to about ``steps`` env steps and returns env steps per second."""

    def __init__(self, algo: str, env_id: str, sizes: Sizes, updates: int):
        init, run = (make_ppo if algo == "ppo" else make_pqn)(env_id, sizes)
        self.updates, self.sizes = updates, sizes
        self._run = jax.jit(lambda c: run(c, updates), donate_argnums=0)
        self._carry = self._run(jax.jit(init)(jax.random.key(0)))  # compile + warm up
        jax.block_until_ready(self._carry)

    def steps_per_second(self, steps: int | None = None) -> float:
        start = time.perf_counter()
        self._carry = self._run(self._carry)
        jax.block_until_ready(self._carry)
        return self.updates * self.sizes.num_envs * self.sizes.rollout_len / (
            time.perf_counter() - start)


def main() -> None:
    sizes = Sizes(32, 16, 4, 4, 2.5e-3, (64, 64))
    for algo in ("ppo", "pqn"):
        loop = ReferenceLoop(algo, "gymnax:CartPole-v1", sizes._replace(
            hidden=(64, 64) if algo == "ppo" else (128, 128)), updates=100)
        print(algo, f"{np.median([loop.steps_per_second() for _ in range(5)]):,.0f} steps/s")


if __name__ == "__main__":
    main()

"""A single-file-style JAX DQN on CartPole-v1: the reference rljax's DQN throughput is
compared with in the same process (``benchmarks.throughput``, ``dqn-cartpole-equal-work``).

It does what the widely used single-file JAX DQN does with its defaults, written here
from its description: one gymnasium env stepped from a Python loop, a NumPy ring replay of
10,000 transitions sampled uniformly, jitted greedy action and update functions, a
4-120-84-2 ReLU MLP, Adam 2.5e-4, mean-squared one-step TD error against a max over the
target network, one gradient step of batch 128 every 10 env steps once 10,000 steps are
stored, the target copied every 500 steps, epsilon 1 -> 0.05 over the first half of
training. Only its speed is used; it is not part of the library.

    python -m benchmarks.reference_dqn [--steps 30000]
"""

from __future__ import annotations

import argparse
import time

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

BUFFER = 10_000
BATCH = 128
TRAIN_EVERY = 10
LEARNING_STARTS = 10_000
TARGET_EVERY = 500
GAMMA = 0.99


class _QNet(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.actions)(x)


class ReferenceDQN:
    """The loop's state; :meth:`run` advances it by a number of env steps."""

    def __init__(self, seed: int = 0, total_steps: int = 500_000):
        self.env = gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        actions = int(self.env.action_space.n)
        net = _QNet(actions)
        self.params = net.init(jax.random.key(seed), jnp.zeros((1, 4), jnp.float32))
        self.target = self.params
        tx = optax.adam(2.5e-4)
        self.opt_state = tx.init(self.params)
        self.total_steps, self.step, self.actions = total_steps, 0, actions
        self.replay = {
            "obs": np.zeros((BUFFER, 4), np.float32),
            "next_obs": np.zeros((BUFFER, 4), np.float32),
            "action": np.zeros(BUFFER, np.int32),
            "reward": np.zeros(BUFFER, np.float32),
            "terminated": np.zeros(BUFFER, np.float32),
        }
        self.size = 0

        @jax.jit
        def greedy(params, obs):
            return jnp.argmax(net.apply(params, obs[None])[0])

        @jax.jit
        def update(params, target, opt_state, obs, action, reward, terminated, next_obs):
            bootstrap = jnp.max(net.apply(target, next_obs), axis=-1)
            y = reward + (1.0 - terminated) * GAMMA * bootstrap

            def loss(p):
                q = jnp.take_along_axis(net.apply(p, obs), action[:, None], axis=1)[:, 0]
                return jnp.mean((q - y) ** 2)

            value, grads = jax.value_and_grad(loss)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, value

        self._greedy, self._update = greedy, update

    def run(self, steps: int) -> None:
        """``steps`` env steps of acting, storing and (once started) learning."""
        r = self.replay
        for _ in range(steps):
            fraction = min(1.0, self.step / (0.5 * self.total_steps))
            epsilon = 1.0 + fraction * (0.05 - 1.0)
            if self.rng.random() < epsilon:
                action = int(self.rng.integers(self.actions))
            else:
                action = int(self._greedy(self.params, self.obs))
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            i = self.step % BUFFER
            r["obs"][i], r["next_obs"][i], r["action"][i] = self.obs, next_obs, action
            r["reward"][i], r["terminated"][i] = reward, float(terminated)
            self.size = min(self.size + 1, BUFFER)
            self.obs = next_obs
            if terminated or truncated:
                self.obs, _ = self.env.reset()
            self.step += 1
            if self.step > LEARNING_STARTS and self.step % TRAIN_EVERY == 0:
                j = self.rng.integers(0, self.size, BATCH)
                self.params, self.opt_state, _ = self._update(
                    self.params, self.target, self.opt_state, r["obs"][j], r["action"][j],
                    r["reward"][j], r["terminated"][j], r["next_obs"][j])
            if self.step % TARGET_EVERY == 0:
                self.target = self.params
        jax.block_until_ready(self.params)

    def steps_per_second(self, steps: int) -> float:
        start = time.perf_counter()
        self.run(steps)
        return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000, help="timed env steps")
    args = parser.parse_args(argv)
    ref = ReferenceDQN()
    ref.run(LEARNING_STARTS + 1_000)  # fill the replay, compile, start learning
    print(f"single-file-style JAX DQN on CartPole-v1: {ref.steps_per_second(args.steps):,.0f} "
          "env steps/s while learning")


if __name__ == "__main__":
    main()

"""Single-file-style JAX DQN loops: the references rljax's DQN throughput is compared with
in the same process (``benchmarks.throughput``, ``dqn-cartpole-equal-work``, ``dqn-breakout``).

They do what the widely used single-file JAX DQNs do with their defaults, written here from
their description: one env stepped from a Python loop, a NumPy ring replay sampled
uniformly, jitted greedy-action and update functions, plain DQN (mean-squared one-step TD
error against a max over a target network copied every few hundred steps), epsilon
annealed linearly over a fraction of training. CartPole (gymnasium): a 4-120-84-2 ReLU MLP,
Adam 2.5e-4, one gradient step of batch 128 every 10 env steps once 10,000 steps are stored,
a 10,000-transition replay, the target copied every 500 steps, epsilon 1 -> 0.05 over half
of training. Breakout (envpool's Breakout-v5, one env, 4x84x84 uint8 frames scaled to
[0, 1]): the Nature CNN, Adam 1e-4, one gradient step of batch 32 every 4 env steps, the
target copied every 1,000 steps, epsilon 1 -> 0.01 over a tenth of training; its replay is
smaller than the reference's million (memory only; sampling 32 rows costs the same). Only
their speed is used; they are not part of the library.

    python -m benchmarks.reference_dqn [--env Breakout-v5] [--steps 30000]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class Setup:
    """One reference configuration."""

    buffer: int
    batch: int
    train_every: int
    learning_starts: int
    target_every: int
    lr: float
    end_epsilon: float
    anneal_fraction: float


GAMMA = 0.99
SETUPS = {
    "CartPole-v1": Setup(buffer=10_000, batch=128, train_every=10, learning_starts=10_000,
                         target_every=500, lr=2.5e-4, end_epsilon=0.05, anneal_fraction=0.5),
    "Breakout-v5": Setup(buffer=20_000, batch=32, train_every=4, learning_starts=2_000,
                         target_every=1_000, lr=1e-4, end_epsilon=0.01, anneal_fraction=0.1),
}


class _MLP(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.actions)(x)


class _NatureCNN(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, x):
        x = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        x = nn.relu(nn.Conv(32, (8, 8), (4, 4), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (4, 4), (2, 2), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (3, 3), (1, 1), padding="VALID")(x))
        x = nn.relu(nn.Dense(512)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.actions)(x)


class _OneEnvpoolEnv:
    """envpool's batched gymnasium interface with one env, as a single env."""

    def __init__(self, task: str, seed: int):
        import envpool

        self.pool = envpool.make(task, env_type="gymnasium", num_envs=1, seed=seed)
        self.action_space = self.pool.action_space

    def reset(self, seed: int | None = None):
        return self.pool.reset()[0][0], {}

    def step(self, action: int):
        obs, reward, terminated, truncated, info = self.pool.step(np.array([action]))
        return obs[0], reward[0], terminated[0], truncated[0], info


class ReferenceDQN:
    """The loop's state; :meth:`run` advances it by a number of env steps."""

    def __init__(self, seed: int = 0, total_steps: int = 500_000, task: str = "CartPole-v1"):
        self.setup = setup = SETUPS[task]
        if task == "CartPole-v1":
            self.env = gym.make(task)
        else:
            self.env = _OneEnvpoolEnv(task, seed)
        self.obs, _ = self.env.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        actions = int(self.env.action_space.n)
        net = (_MLP if task == "CartPole-v1" else _NatureCNN)(actions)
        self.params = net.init(jax.random.key(seed), jnp.zeros((1, *self.obs.shape),
                                                              self.obs.dtype))
        self.target = self.params
        tx = optax.adam(setup.lr)
        self.opt_state = tx.init(self.params)
        self.total_steps, self.step, self.actions = total_steps, 0, actions
        shape, dtype = self.obs.shape, self.obs.dtype
        self.replay = {
            "obs": np.zeros((setup.buffer, *shape), dtype),
            "next_obs": np.zeros((setup.buffer, *shape), dtype),
            "action": np.zeros(setup.buffer, np.int32),
            "reward": np.zeros(setup.buffer, np.float32),
            "terminated": np.zeros(setup.buffer, np.float32),
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
        r, setup = self.replay, self.setup
        for _ in range(steps):
            fraction = min(1.0, self.step / (setup.anneal_fraction * self.total_steps))
            epsilon = 1.0 + fraction * (setup.end_epsilon - 1.0)
            if self.rng.random() < epsilon:
                action = int(self.rng.integers(self.actions))
            else:
                action = int(self._greedy(self.params, self.obs))
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            i = self.step % setup.buffer
            r["obs"][i], r["next_obs"][i], r["action"][i] = self.obs, next_obs, action
            r["reward"][i], r["terminated"][i] = reward, float(terminated)
            self.size = min(self.size + 1, setup.buffer)
            self.obs = next_obs
            if terminated or truncated:
                self.obs, _ = self.env.reset()
            self.step += 1
            if self.step > setup.learning_starts and self.step % setup.train_every == 0:
                j = self.rng.integers(0, self.size, setup.batch)
                self.params, self.opt_state, _ = self._update(
                    self.params, self.target, self.opt_state, r["obs"][j], r["action"][j],
                    r["reward"][j], r["terminated"][j], r["next_obs"][j])
            if self.step % setup.target_every == 0:
                self.target = self.params
        jax.block_until_ready(self.params)

    def steps_per_second(self, steps: int) -> float:
        start = time.perf_counter()
        self.run(steps)
        return steps / (time.perf_counter() - start)


def steady_state(task: str, seed: int = 0) -> ReferenceDQN:
    """A loop past its replay warm-up with epsilon at its final value."""
    setup = SETUPS[task]
    warm = setup.learning_starts + 1_000
    loop = ReferenceDQN(seed, total_steps=int(warm / setup.anneal_fraction) + 1, task=task)
    loop.run(warm)
    return loop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1", choices=sorted(SETUPS))
    parser.add_argument("--steps", type=int, default=30_000, help="timed env steps")
    args = parser.parse_args(argv)
    loop = steady_state(args.env)
    print(f"single-file-style JAX DQN on {args.env}: {loop.steps_per_second(args.steps):,.0f} "
          "env steps/s while learning, epsilon at its final value")


if __name__ == "__main__":
    main()

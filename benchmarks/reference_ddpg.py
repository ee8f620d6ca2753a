"""A single-file-style JAX DDPG on Reacher-v5: the reference rljax's DDPG throughput is
compared with in the same process (``benchmarks.throughput``, ``ddpg-equal-work-256``).

It does what the widely used single-file JAX DDPG does with its defaults, written here
from its description: one env stepped from a Python loop (envpool's Reacher-v5, the env
rljax trains on, through its gymnasium interface with one env), a NumPy ring replay
sampled uniformly, an actor and a critic of two hidden layers of 256 ReLU units (tanh
actions scaled to the bounds, the critic on concat(obs, action)), Adam 3e-4 for both,
Gaussian exploration noise 0.1 x the action scale, gamma 0.99, one critic step of batch 256
per env step and every second env step an actor step and soft target updates (tau 0.005).
Only its speed is used; it is not part of the library.

    python -m benchmarks.reference_ddpg [--steps 3000]
"""

from __future__ import annotations

import argparse
import time

import envpool
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

BUFFER = 1_000_000
BATCH = 256
LEARNING_STARTS = 2_000  # the reference waits 25,000 steps; only the steady state is timed
POLICY_EVERY = 2
GAMMA = 0.99
TAU = 0.005
NOISE = 0.1


class _Actor(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(nn.Dense(256)(obs))
        x = nn.relu(nn.Dense(256)(x))
        return jnp.tanh(nn.Dense(self.actions)(x))


class _Critic(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        x = nn.relu(nn.Dense(256)(jnp.concatenate([obs, action], axis=-1)))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(1)(x)[..., 0]


class ReferenceDDPG:
    """The loop's state; :meth:`run` advances it by a number of env steps."""

    def __init__(self, seed: int = 0, task: str = "Reacher-v5"):
        self.env = envpool.make(task, env_type="gymnasium", num_envs=1, seed=seed)
        self.obs = self.env.reset()[0][0].astype(np.float32)
        space = self.env.action_space
        self.low, self.high = space.low.astype(np.float32), space.high.astype(np.float32)
        self.scale = (self.high - self.low) / 2
        obs_dim, act_dim = self.obs.shape[0], space.shape[0]
        self.rng = np.random.default_rng(seed)
        actor, critic = _Actor(act_dim), _Critic()
        k1, k2 = jax.random.split(jax.random.key(seed))
        o, a = jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim))
        self.actor_params, self.critic_params = actor.init(k1, o), critic.init(k2, o, a)
        self.actor_target, self.critic_target = self.actor_params, self.critic_params
        tx = optax.adam(3e-4)
        self.actor_opt, self.critic_opt = tx.init(self.actor_params), tx.init(self.critic_params)
        self.replay = {
            "obs": np.zeros((BUFFER, obs_dim), np.float32),
            "next_obs": np.zeros((BUFFER, obs_dim), np.float32),
            "action": np.zeros((BUFFER, act_dim), np.float32),
            "reward": np.zeros(BUFFER, np.float32),
            "terminated": np.zeros(BUFFER, np.float32),
        }
        self.size = self.step = 0
        scale, center = jnp.asarray(self.scale), jnp.asarray((self.high + self.low) / 2)

        @jax.jit
        def act(params, obs):
            return actor.apply(params, obs[None])[0] * scale + center

        @jax.jit
        def critic_step(critic_params, critic_opt, actor_target, critic_target, batch):
            obs, action, reward, terminated, next_obs = batch
            next_action = actor.apply(actor_target, next_obs) * scale + center
            y = reward + (1.0 - terminated) * GAMMA * critic.apply(critic_target, next_obs,
                                                                   next_action)

            def loss(p):
                return jnp.mean((critic.apply(p, obs, action) - y) ** 2)

            grads = jax.grad(loss)(critic_params)
            updates, critic_opt = tx.update(grads, critic_opt, critic_params)
            return optax.apply_updates(critic_params, updates), critic_opt

        @jax.jit
        def actor_step(actor_params, actor_opt, critic_params, actor_target, critic_target,
                       obs):
            def loss(p):
                action = actor.apply(p, obs) * scale + center
                return -jnp.mean(critic.apply(critic_params, obs, action))

            grads = jax.grad(loss)(actor_params)
            updates, actor_opt = tx.update(grads, actor_opt, actor_params)
            actor_params = optax.apply_updates(actor_params, updates)
            soft = lambda t, p: optax.incremental_update(p, t, TAU)
            return (actor_params, actor_opt, soft(actor_target, actor_params),
                    soft(critic_target, critic_params))

        self._act, self._critic_step, self._actor_step = act, critic_step, actor_step

    def run(self, steps: int) -> None:
        """``steps`` env steps of acting, storing and (once started) learning."""
        r = self.replay
        for _ in range(steps):
            if self.step < LEARNING_STARTS:
                action = self.rng.uniform(self.low, self.high).astype(np.float32)
            else:
                action = np.asarray(self._act(self.actor_params, self.obs))
                action = action + self.rng.normal(0.0, NOISE * self.scale).astype(np.float32)
                action = np.clip(action, self.low, self.high)
            next_obs, reward, terminated, truncated, _ = self.env.step(
                action[None].astype(np.float64))
            i = self.step % BUFFER
            r["obs"][i], r["next_obs"][i], r["action"][i] = self.obs, next_obs[0], action
            r["reward"][i], r["terminated"][i] = reward[0], float(terminated[0])
            self.size = min(self.size + 1, BUFFER)
            self.obs = next_obs[0].astype(np.float32)
            if terminated[0] or truncated[0]:
                self.obs = self.env.reset()[0][0].astype(np.float32)
            self.step += 1
            if self.step > LEARNING_STARTS:
                j = self.rng.integers(0, self.size, BATCH)
                batch = (r["obs"][j], r["action"][j], r["reward"][j], r["terminated"][j],
                         r["next_obs"][j])
                self.critic_params, self.critic_opt = self._critic_step(
                    self.critic_params, self.critic_opt, self.actor_target, self.critic_target,
                    batch)
                if self.step % POLICY_EVERY == 0:
                    (self.actor_params, self.actor_opt, self.actor_target,
                     self.critic_target) = self._actor_step(
                        self.actor_params, self.actor_opt, self.critic_params,
                        self.actor_target, self.critic_target, batch[0])
        jax.block_until_ready(self.actor_params)

    def steps_per_second(self, steps: int) -> float:
        start = time.perf_counter()
        self.run(steps)
        return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3_000, help="timed env steps")
    args = parser.parse_args(argv)
    ref = ReferenceDDPG()
    ref.run(LEARNING_STARTS + 200)  # fill the replay, compile, start learning
    print(f"single-file-style JAX DDPG on Reacher-v5: {ref.steps_per_second(args.steps):,.0f} "
          "env steps/s while learning")


if __name__ == "__main__":
    main()

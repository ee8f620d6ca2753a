"""CartPole-v1 with the velocities hidden, and the agent's previous action in the observation.

    python -m benchmarks.novel_prev_action [--preset cartpole-novel-ppo-rnn] [--no-prev]
        [--seeds 8] [--total-steps 1000000] [--logdir DIR] [--set FIELD=VALUE ...]

A sampled policy's memory does not know which action was drawn, so its estimate of the
cart's velocity (the task hides it) goes wrong by one push each time the noise picks the
other action. This tests whether that is why the memory presets let the cart drift: the
task as a gymnax env object of one's own (gymnax's CartPole-v1 dynamics; the observation
is the cart position, the pole angle and the one-hot previous action, zeros at an
episode's start), trained with a memory preset's agent as ``rljax.train(PRESET, env=...)``
trains it: the seeds in one program split over the CPU cores, the learning rate annealed
over the budget. ``--no-prev`` is the same env without the action (the control). The run
directory is printed; ``python -m benchmarks.stability --analyze RUN_DIR`` tabulates it.
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from gymnax.environments.classic_control.cartpole import CartPole


@struct.dataclass
class State(environment.EnvState):
    inner: environment.EnvState
    prev: jax.Array  # the previous action; -1 at an episode's start


class NovelCartPole(environment.Environment):
    """CartPole-v1 observed as (x, theta[, one-hot previous action]); terminated only by
    the cart or the pole (the 500-step limit is the params', kept apart as truncation)."""

    def __init__(self, prev_action: bool = True):
        super().__init__()
        self.base = CartPole()
        self.prev_action = prev_action

    @property
    def default_params(self):
        return self.base.default_params

    def _obs(self, obs: jax.Array, prev: jax.Array) -> jax.Array:
        seen = obs[jnp.array([0, 2])]
        if self.prev_action:
            seen = jnp.concatenate([seen, jax.nn.one_hot(prev, 2)])
        return seen

    def reset_env(self, key, params):
        obs, inner = self.base.reset_env(key, params)
        prev = jnp.int32(-1)
        return self._obs(obs, prev), State(time=0, inner=inner, prev=prev)

    def step_env(self, key, state, action, params):
        obs, inner, reward, _, info = self.base.step_env(key, state.inner, action, params)
        terminated = ((jnp.abs(inner.x) > params.x_threshold)
                      | (jnp.abs(inner.theta) > params.theta_threshold_radians))
        prev = jnp.asarray(action, jnp.int32)
        return (self._obs(obs, prev), State(time=inner.time, inner=inner, prev=prev), reward,
                terminated, info)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (4 if self.prev_action else 2,))

    def action_space(self, params):
        return spaces.Discrete(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cartpole-novel-ppo-rnn",
                        choices=("cartpole-novel-ppo-rnn", "cartpole-novel-pqn-rnn"))
    parser.add_argument("--no-prev", action="store_true", help="leave the action out")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--cpu-devices", type=int, default=2)
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    import rljax
    from rljax.run.config import parse_assignments
    from rljax.run.presets import from_preset

    config = from_preset(args.preset, env=NovelCartPole(not args.no_prev), env_options={},
                         num_seeds=args.seeds, total_steps=args.total_steps,
                         schedule_steps=args.total_steps, cpu_devices=args.cpu_devices,
                         solve_threshold=475.0, logdir=args.logdir, tensorboard=False,
                         **parse_assignments(args.set))
    run = rljax.train(dataclasses.replace(config, stop_on_solve=False), progress=True)
    print(run.run_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

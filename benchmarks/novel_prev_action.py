"""CartPole-v1 with the velocities hidden, and the agent's previous action in the observation.

    python -m benchmarks.novel_prev_action [--preset cartpole-novel-ppo-rnn] [--no-prev]
        [--delta SCALE] [--seeds 8] [--total-steps 1000000] [--logdir DIR]
        [--set FIELD=VALUE ...]

A sampled policy's memory does not know which action was drawn, so its estimate of the
cart's velocity (the task hides it) goes wrong by one push each time the noise picks the
other action. This tests whether that is why the memory presets let the cart drift: the
task as a gymnax env object of one's own (gymnax's CartPole-v1 dynamics; the observation
is the cart position, the pole angle and the one-hot previous action, zeros at an
episode's start), trained with a memory preset's agent as ``rljax.train(PRESET, env=...)``
trains it: the seeds in one program split over the CPU cores, the learning rate annealed
over the budget. ``--no-prev`` is the same env without the action (the control). The run
directory is printed; ``python -m benchmarks.stability --analyze RUN_DIR`` tabulates it.

``--delta SCALE`` adds, after the positions, their change since the previous step times
SCALE (zeros at an episode's start): the velocities one step late, what a memory would
have to work out. With ``--delta 50`` (1 / CartPole's 0.02 s step) they read as the
velocities themselves, so the task is all but fully observed: the check of whether a
preset's settings, rather than its memory, make it dip after solving. Any memory preset
or its feed-forward control (``cartpole-novel-ppo``, ``-pqn``) trains on it.
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
    seen: jax.Array  # the previous positions (x, theta); this step's at an episode's start


class NovelCartPole(environment.Environment):
    """CartPole-v1 observed as (x, theta[, one-hot previous action][, their change since
    the last step x ``delta``]); terminated only by the cart or the pole (the 500-step
    limit is the params', kept apart as truncation)."""

    def __init__(self, prev_action: bool = True, delta: float = 0.0):
        super().__init__()
        if delta < 0:
            raise ValueError(f"delta scales the change of the positions: >= 0 (0: left "
                             f"out), got {delta!r}")
        self.base = CartPole()
        self.prev_action = prev_action
        self.delta = delta

    @property
    def default_params(self):
        return self.base.default_params

    def _obs(self, seen: jax.Array, prev: jax.Array, before: jax.Array) -> jax.Array:
        parts = [seen]
        if self.prev_action:
            parts.append(jax.nn.one_hot(prev, 2))
        if self.delta:
            parts.append((seen - before) * self.delta)
        return jnp.concatenate(parts)

    def reset_env(self, key, params):
        obs, inner = self.base.reset_env(key, params)
        prev, seen = jnp.int32(-1), obs[jnp.array([0, 2])]
        return self._obs(seen, prev, seen), State(time=0, inner=inner, prev=prev, seen=seen)

    def step_env(self, key, state, action, params):
        obs, inner, reward, _, info = self.base.step_env(key, state.inner, action, params)
        terminated = ((jnp.abs(inner.x) > params.x_threshold)
                      | (jnp.abs(inner.theta) > params.theta_threshold_radians))
        prev, seen = jnp.asarray(action, jnp.int32), obs[jnp.array([0, 2])]
        return (self._obs(seen, prev, state.seen),
                State(time=inner.time, inner=inner, prev=prev, seen=seen), reward, terminated,
                info)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2 + 2 * self.prev_action + 2 * bool(self.delta),))

    def action_space(self, params):
        return spaces.Discrete(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cartpole-novel-ppo-rnn",
                        choices=("cartpole-novel-ppo-rnn", "cartpole-novel-pqn-rnn",
                                 "cartpole-novel-ppo", "cartpole-novel-pqn"))
    parser.add_argument("--no-prev", action="store_true", help="leave the action out")
    parser.add_argument("--delta", type=float, default=0.0, metavar="SCALE",
                        help="add the positions' change since the last step x SCALE")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--cpu-devices", type=int, default=2)
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    import rljax
    from rljax.run.config import parse_assignments
    from rljax.run.presets import from_preset

    options = dict(env=NovelCartPole(not args.no_prev, args.delta), env_options={},
                   num_seeds=args.seeds, total_steps=args.total_steps,
                   cpu_devices=args.cpu_devices, solve_threshold=475.0, logdir=args.logdir,
                   tensorboard=False, **parse_assignments(args.set))
    config = from_preset(args.preset, **options)
    if config.config.anneal_lr:  # the rate annealed over this run's budget
        config = from_preset(args.preset, schedule_steps=args.total_steps, **options)
    run = rljax.train(dataclasses.replace(config, stop_on_solve=False), progress=True)
    print(run.run_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

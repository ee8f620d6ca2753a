"""The uniformly random policy's score on a JAX-native task: the floor a learning curve is
read against (a rising curve means little until it is compared with what random actions
reach).

    python -m benchmarks.random_baseline craftax:Craftax-Classic-Symbolic-v1 --steps 200000

Runs ``--num-envs`` envs with uniform random actions (for continuous tasks uniform within
the action bounds) in one jitted scan and prints the mean, median and spread of the returns
of every episode that finished, their lengths and, for Craftax, the share of those episodes
that reached each achievement.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from rljax import envs
from rljax.envs.native import achievement_rates


def random_episodes(task_id: str, num_envs: int, steps: int, seed: int = 0,
                    chunk: int = 1024) -> dict:
    """Steps ``num_envs`` envs with uniform random actions for about ``steps`` env steps
    in all; returns the finished episodes' returns and lengths (host arrays) and the
    achievement rates where the task counts achievements."""
    env = envs.make(task_id, num_envs, seed)
    spec = env.spec

    def draw(key):
        if spec.discrete:
            return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
        return jax.random.uniform(key, (num_envs, *spec.action_shape),
                                  minval=np.asarray(spec.action_low, np.float32),
                                  maxval=np.asarray(spec.action_high, np.float32))

    def body(carry, _):
        state, key = carry
        key, sub = jax.random.split(key)
        action = draw(sub)
        state, out = env.step(state, action)
        return (state, key), (out.episode_end, out.episode_return, out.episode_length)

    @jax.jit
    def run_chunk(state, key):
        return jax.lax.scan(body, (state, key), None, length=chunk)

    state, key = env.reset(), jax.random.key(seed)
    returns, lengths = [], []
    started = time.perf_counter()
    for _ in range(max(1, -(-steps // (chunk * num_envs)))):
        (state, key), (end, ret, length) = run_chunk(state, key)
        end = np.asarray(end)
        returns.append(np.asarray(ret)[end])
        lengths.append(np.asarray(length)[end])
    seconds = time.perf_counter() - started
    returns, lengths = np.concatenate(returns), np.concatenate(lengths)
    result = {"task": task_id, "env_steps": int(np.ceil(steps / (chunk * num_envs))
                                                * chunk * num_envs),
              "episodes": int(returns.size), "seconds": round(seconds, 1)}
    if returns.size:
        result.update(return_mean=float(returns.mean()), return_median=float(np.median(returns)),
                      return_std=float(returns.std()), return_max=float(returns.max()),
                      length_mean=float(lengths.mean()))
    if env.achievement_names:
        result.update(achievement_rates(env.achievement_names, jax.device_get(state.extras),
                                        None))
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", help="a JAX-native task id, e.g. gymnax:Breakout-MinAtar")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps in all")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not envs.is_native(args.task):
        parser.error(f"{args.task} is not a JAX-native task id (see `rljax envs`)")
    result = random_episodes(args.task, args.num_envs, args.steps, args.seed)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

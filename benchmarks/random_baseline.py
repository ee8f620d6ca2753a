"""The uniformly random policy's score on a task: the floor a learning curve is read against
(a rising curve means little until it is compared with what random actions reach).

    python -m benchmarks.random_baseline craftax:Craftax-Classic-Symbolic-v1 --steps 200000
    python -m benchmarks.random_baseline Reacher-v5 --steps 200000 --save

Any task id ``rljax envs`` lists: the JAX-native ones are stepped inside the program, envpool's
through its XLA call, in the same jitted scan. ``--save`` adds the measurement to
``benchmarks/results/random_scores.json`` (the random column of the results table).

Runs ``--num-envs`` envs with uniform random actions (for continuous tasks uniform within
the action bounds) in one jitted scan and prints the mean, median and spread of the returns
of every episode that finished, their lengths and, for Craftax, the share of those episodes
that reached each achievement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

from rljax import envs
from rljax.envs.native import achievement_rates

SCORES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                      "random_scores.json")


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
    parser.add_argument("task", help="a task id, e.g. gymnax:Breakout-MinAtar or Reacher-v5")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps in all")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", action="store_true",
                        help=f"add the result to {os.path.relpath(SCORES)}")
    args = parser.parse_args(argv)
    try:
        envs.check_task(args.task)
    except ValueError as e:
        parser.error(str(e))
    result = random_episodes(args.task, args.num_envs, args.steps, args.seed)
    print(json.dumps(result, indent=1))
    if args.save:
        save(result, " ".join(["python -m benchmarks.random_baseline", *(argv or sys.argv[1:])]))


def save(result: dict, command: str) -> None:
    """Adds ``result`` (with the ``command`` that measured it) to the stored scores, keyed
    by task id, the other tasks' records kept as they are."""
    with open(SCORES) as f:
        scores = json.load(f)
    record = {k: v for k, v in result.items() if k != "task"}
    record["command"] = command.replace(" --save", "")
    scores[result["task"]] = record
    with open(SCORES, "w") as f:
        json.dump(dict(sorted(scores.items())), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

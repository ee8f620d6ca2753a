"""Agents with memory: bootstrapping from the values recorded when acting (the heads run
only after the last step and on truncated steps) against running the heads after every
step, timed in interleaved rounds in one process.

    python -m benchmarks.recurrent_bootstrap [CASE ...] [--rounds 7]

Each case is built twice and its chunk compiled once each way: "recorded" as rljax runs
it, "every step" with :func:`rljax.agents.recurrent.next_values` given time limit 0 while
the chunk is traced. JAX-native envs only (two envpool pools of one task in a process can
fail), so the envpool CartPole-with-velocities-hidden presets run on gymnax's CartPole
with the same observation indices. The ratio is the median of the per-round ratios, so
load from other processes largely cancels. Writes the cases it ran into
benchmarks/results/recurrent_bootstrap.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os

from benchmarks.common import chunk_seconds, compiled_chunk, median
from rljax.agents import recurrent
from rljax.run.presets import from_preset

# name: (preset, env id or None for the preset's, chunk env steps)
CASES = {
    "ppo-rnn-cartpole": ("cartpole-novel-ppo-rnn", "gymnax:CartPole-v1", 16_384),
    "pqn-rnn-cartpole": ("cartpole-novel-pqn-rnn", "gymnax:CartPole-v1", 16_384),
    "ppo-rnn-craftax": ("craftax-classic-ppo-rnn-cpu", None, 16_384),
}
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "recurrent_bootstrap.json")


@contextlib.contextmanager
def heads_after_every_step():
    """While tracing: the recurrent agents run their heads after every step."""
    original = recurrent.bootstrap_values

    def every_step(values, truncated, value_at, time_limit):
        return original(values, truncated, value_at, 0)

    recurrent.bootstrap_values = every_step
    try:
        yield
    finally:
        recurrent.bootstrap_values = original


def compare(case: str, rounds: int) -> dict:
    preset, env_id, chunk_steps = CASES[case]
    run = from_preset(preset, tensorboard=False, chunk_steps=chunk_steps,
                      total_steps=chunk_steps * 1000)
    if env_id is not None:
        run = dataclasses.replace(run, env_id=env_id)
    programs = {"recorded": compiled_chunk(run),
                "every_step": compiled_chunk(run, heads_after_every_step)}
    seconds = chunk_seconds(programs, rounds)
    steps = programs["recorded"]["steps"]
    recorded, every = seconds["recorded"], seconds["every_step"]
    return {"preset": preset, "env_id": run.env_id, "chunk_env_steps": steps,
            "recorded_sps": steps / median(recorded), "every_step_sps": steps / median(every),
            "recorded_vs_every_step": median([e / r for r, e in zip(recorded, every,
                                                                     strict=True)]),
            "rounds": rounds}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    results = {}
    if os.path.exists(RESULTS):  # keep the other cases' figures
        with open(RESULTS) as f:
            results = json.load(f)["results"]
    for case in args.cases:
        r = results[case] = compare(case, args.rounds)
        print(f"{case:<18} {r['env_id']:<36} recorded {r['recorded_sps']:>9,.0f} env steps/s, "
              f"every step {r['every_step_sps']:>9,.0f}: {r['recorded_vs_every_step']:.3f}x",
              flush=True)
    with open(RESULTS, "w") as f:
        json.dump({"machine": os.uname().nodename, "cpu_count": os.cpu_count(),
                   "results": results}, f, indent=2)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

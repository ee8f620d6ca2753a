"""rljax's recurrent PPO against the single-file reference (benchmarks/reference_rnn.py), in
one process: PureJaxRL ppo_rnn's configuration on both sides (gymnax CartPole-v1, full
observations, 4 envs x 128 steps, 4 epochs x 4 minibatches of whole env sequences,
Dense 128 -> GRU 128 -> heads of 128, Adam 2.5e-4 annealed, no reward scaling), each a
compiled chunk of the same number of updates, called in alternating pairs; the figure is
the median of the per-pair ratios (rljax / reference: above 1 rljax is faster), of wall
time and of the process's CPU time (on one XLA thread the CPU time is the work done, less
moved by other processes' load than the wall time).

    python -m benchmarks.recurrent_speed [--pairs 15] [--updates 8] [--threads 1] [--epochs 4]

Writes benchmarks/results/recurrent_speed.json (with ``uptime``'s load before and after).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from benchmarks.common import median, timed_wall_cpu, write_results


def rljax_run(updates: int, threads: int, epochs: int = 4):
    """The memory preset with ppo_rnn's configuration, on gymnax's CartPole."""
    from rljax.records import OnPolicyLoop
    from rljax.run.presets import from_preset

    run = from_preset("cartpole-novel-ppo-rnn", env="gymnax:CartPole-v1", env_options={},
                      cpu_threads=threads, reward_scaling=False, lr=2.5e-4,
                      num_epochs=epochs)
    config = dataclasses.replace(run.config, loop=OnPolicyLoop(num_envs=4, rollout_len=128))
    steps = updates * 4 * 128
    return dataclasses.replace(run, config=config, chunk_steps=steps, total_steps=500_224)


def measure(pairs: int, updates: int, threads: int, epochs: int = 4) -> dict:
    from rljax.cpu_threads import set_cpu_threads

    set_cpu_threads(threads)  # before JAX starts its CPU client
    from benchmarks.common import compiled_chunk
    from benchmarks.reference_rnn import PPO_RNN, ReferenceRNN

    load_before = os.getloadavg()
    program = compiled_chunk(rljax_run(updates, threads, epochs))
    reference = ReferenceRNN(PPO_RNN._replace(num_epochs=epochs), updates=updates)
    assert program["steps"] == reference.steps, (program["steps"], reference.steps)

    def rljax_seconds() -> tuple[float, float]:
        def go():
            program["state"], _ = program["chunk"](program["state"])
            return program["state"]
        return timed_wall_cpu(go)

    def reference_seconds() -> tuple[float, float]:
        return timed_wall_cpu(reference.run)

    ours, theirs = [], []
    for k in range(pairs):  # alternate which goes first
        if k % 2 == 0:
            ours.append(rljax_seconds())
            theirs.append(reference_seconds())
        else:
            theirs.append(reference_seconds())
            ours.append(rljax_seconds())
    ratios = [t[0] / o[0] for o, t in zip(ours, theirs, strict=True)]
    cpu_ratios = [t[1] / o[1] for o, t in zip(ours, theirs, strict=True)]
    steps = reference.steps
    return {"rljax_sps": steps / median([o[0] for o in ours]),
            "reference_sps": steps / median([t[0] for t in theirs]),
            "ratio_median": median(ratios), "ratios": ratios,
            "cpu_ratio_median": median(cpu_ratios), "cpu_ratios": cpu_ratios, "pairs": pairs,
            "updates_per_chunk": updates, "threads": threads, "epochs": epochs,
            "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs per update on both sides (1 against 4 splits acting "
                             "from learning)")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    result = measure(args.pairs, args.updates, args.threads, args.epochs)
    path = write_results("recurrent_speed" + (f"_{args.tag}" if args.tag else ""), result)
    print(f"rljax {result['rljax_sps']:,.0f} steps/s, reference {result['reference_sps']:,.0f}"
          f"; rljax / reference, median of {args.pairs} pairs: {result['ratio_median']:.3f} "
          f"(process CPU time: {result['cpu_ratio_median']:.3f}; "
          f"load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}); {path}")


if __name__ == "__main__":
    main()

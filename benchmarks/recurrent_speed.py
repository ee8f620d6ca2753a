"""rljax's recurrent PPO and PQN against single-file references, in one process, each a
compiled chunk of the same number of updates, called in alternating pairs; the figure is
the median of the per-pair ratios (rljax / reference: above 1 rljax is faster), of wall
time and of the process's CPU time (on one XLA thread the CPU time is the work done, less
moved by other processes' load than the wall time).

- ``--algo ppo`` (benchmarks/reference_rnn.py): PureJaxRL ppo_rnn's configuration on both
  sides (gymnax CartPole-v1, full observations, 4 envs x 128 steps, 4 epochs x 4
  minibatches of whole env sequences, Dense 128 -> GRU 128 -> heads of 128, Adam 2.5e-4
  annealed, no reward scaling).
- ``--algo pqn`` (benchmarks/reference_pqn_rnn.py): purejaxql pqn_rnn's CartPole
  configuration (32 envs x 64 steps, 4 epochs x 16 minibatches of whole env sequences,
  LayerNorm 256-256 -> GRU 256 -> Q-values, RAdam 1e-4 annealed, gradient norm 10, rewards
  x 0.1, Q(0.95), epsilon 1 -> 0.2 over a fifth of the updates). The reference trains on
  sequences with a memory window of 4 steps in front of each rollout of 64 and takes its
  targets from each minibatch's own pass, as purejaxql does; rljax trains on the rollout's
  64 steps from targets taken once per update. ``--memory-window 0`` gives the reference
  rljax's sequence length.

    python -m benchmarks.recurrent_speed [--algo ppo|pqn] [--pairs 15] [--updates 8]
        [--threads 1] [--epochs 4] [--memory-window 4]

Writes benchmarks/results/recurrent_speed[_pqn].json (with the load before and after).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from benchmarks.common import median, timed_wall_cpu, write_results

# gymnax's CartPole with its full observations, in place of the presets' hidden velocities
_FULL_CARTPOLE = {"env_id": "gymnax:CartPole-v1", "env_options": ()}


def rljax_run(updates: int, threads: int, epochs: int = 4):
    """The memory preset with ppo_rnn's configuration, on gymnax's CartPole."""
    from rljax.records import OnPolicyLoop
    from rljax.run.presets import from_preset

    run = from_preset("cartpole-novel-ppo-rnn", cpu_threads=threads, reward_scaling=False,
                      lr=2.5e-4, num_epochs=epochs)
    config = dataclasses.replace(run.config, loop=OnPolicyLoop(num_envs=4, rollout_len=128))
    steps = updates * 4 * 128
    return dataclasses.replace(run, config=config, chunk_steps=steps, total_steps=500_224,
                               **_FULL_CARTPOLE)


def rljax_pqn_run(updates: int, threads: int, epochs: int = 4):
    """The memory preset with pqn_rnn's CartPole configuration, on gymnax's CartPole."""
    from rljax.records import OnPolicyLoop
    from rljax.run.presets import from_preset

    try:
        from rljax.records import Memory
        memory = {"memory": Memory(core="gru", size=256)}
    except ImportError:  # rljax before the Memory record, for before-and-after figures
        memory = {"memory": "gru", "memory_size": 256}
    per_update = 32 * 64
    total = 500_000 // per_update * per_update  # 244 updates: the reference's schedules
    run = from_preset("cartpole-novel-pqn-rnn", cpu_threads=threads, lr=1e-4,
                      hidden_sizes=(256, 256),
                      **memory, num_epochs=epochs,
                      num_minibatches=16, max_grad_norm=10.0, reward_scale=0.1,
                      q_lambda=0.95, epsilon=((0, 1.0), (total // per_update // 5, 0.2)))
    config = dataclasses.replace(run.config, loop=OnPolicyLoop(num_envs=32, rollout_len=64))
    return dataclasses.replace(run, config=config, chunk_steps=updates * per_update,
                               total_steps=total, **_FULL_CARTPOLE)


def _programs(algo: str, updates: int, threads: int, epochs: int, window: int):
    """rljax's compiled chunk and the reference's, ``updates`` updates each."""
    from benchmarks.common import compiled_chunk

    if algo == "ppo":
        from benchmarks.reference_rnn import PPO_RNN, ReferenceRNN

        return (compiled_chunk(rljax_run(updates, threads, epochs)),
                ReferenceRNN(PPO_RNN._replace(num_epochs=epochs), updates=updates))
    from benchmarks.reference_pqn_rnn import PQN_RNN, ReferencePQNRNN

    return (compiled_chunk(rljax_pqn_run(updates, threads, epochs)),
            ReferencePQNRNN(PQN_RNN._replace(num_epochs=epochs, memory_window=window),
                            updates=updates))


def measure(pairs: int, updates: int, threads: int, epochs: int = 4, algo: str = "ppo",
            window: int = 4) -> dict:
    from rljax.cpu_threads import set_cpu_threads

    set_cpu_threads(threads)  # before JAX starts its CPU client
    load_before = os.getloadavg()
    program, reference = _programs(algo, updates, threads, epochs, window)
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
            "updates_per_chunk": updates, "threads": threads, "epochs": epochs, "algo": algo,
            **({"memory_window": window} if algo == "pqn" else {}),
            "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("ppo", "pqn"), default="ppo")
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--updates", type=int, default=None,
                        help="updates per chunk (default 8 for ppo, 2 for pqn)")
    parser.add_argument("--memory-window", type=int, default=4,
                        help="pqn: steps of the previous rollout in front of each sequence "
                             "the reference trains on (purejaxql's 4; 0: rljax's length)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs per update on both sides (1 against 4 splits acting "
                             "from learning)")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    updates = args.updates or (8 if args.algo == "ppo" else 2)
    result = measure(args.pairs, updates, args.threads, args.epochs, args.algo,
                     args.memory_window)
    name = "recurrent_speed" + ("_pqn" if args.algo == "pqn" else "")
    path = write_results(name + (f"_{args.tag}" if args.tag else ""), result)
    print(f"rljax {result['rljax_sps']:,.0f} steps/s, reference {result['reference_sps']:,.0f}"
          f"; rljax / reference, median of {args.pairs} pairs: {result['ratio_median']:.3f} "
          f"(process CPU time: {result['cpu_ratio_median']:.3f}; "
          f"load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}); {path}")


if __name__ == "__main__":
    main()

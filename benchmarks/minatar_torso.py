"""MinAtar Breakout PQN with the small CNN torso (``network=
"rljax.networks.torso:MinAtarCNN"``) beside the preset's LayerNorm MLP on flattened grids.

    python -m benchmarks.minatar_torso [TOTAL_STEPS] [SEEDS] [ROUNDS]

In one process: (1) each network's training chunk compiled and timed in interleaved
rounds (env steps/s, one seed), so that machine load hits both alike; (2) each network
trained to the same budget with the same seeds (``--seeds`` in one program), and the mean
return of each seed's last 100 (training) episodes. The preset's epsilon schedule, 1 ->
0.05 over the first 10% of a 10M-step run's updates, is scaled to the first 10% of the
budget's. Writes benchmarks/results/minatar_torso.json with the machine's load average.
"""

from __future__ import annotations

import os
import sys
import tempfile

from benchmarks.common import chunk_seconds, compiled_chunk, machine, median, write_results
from rljax.run.api import train
from rljax.run.presets import from_preset

PRESET = "minatar-breakout-pqn"
NETWORKS = {"mlp": None, "cnn": "rljax.networks.torso:MinAtarCNN"}


def _epsilon(total_steps: int) -> tuple:
    """The preset's schedule, 1 -> 0.05 over the first 10% of the run's updates."""
    steps_per_update = from_preset(PRESET).config.loop.steps_per_update
    return ((0, 1.0), (max(1, total_steps // steps_per_update // 10), 0.05))


def main(total_steps: int = 200_000, seeds: int = 2, rounds: int = 5) -> dict:
    out: dict = {"preset": PRESET, "total_steps": total_steps, "seeds": seeds,
                 "machine": machine(), "load_before": os.getloadavg()}
    programs = {name: compiled_chunk(from_preset(PRESET, network=net, chunk_steps=16_384,
                                                 total_steps=total_steps))
                for name, net in NETWORKS.items()}
    seconds = chunk_seconds(programs, rounds)
    sps = {name: [programs[name]["steps"] / s for s in secs] for name, secs in seconds.items()}
    out["sps"] = {name: median(v) for name, v in sps.items()}
    out["sps_rounds"] = sps
    out["sps_ratio_cnn_over_mlp"] = out["sps"]["cnn"] / out["sps"]["mlp"]
    del programs
    write_results("minatar_torso", out)  # the timings, before the longer training runs
    out["final_return_mean"] = {}
    out["epsilon"] = epsilon = _epsilon(total_steps)
    with tempfile.TemporaryDirectory() as logdir:
        for name, net in NETWORKS.items():
            run = train(PRESET, network=net, total_steps=total_steps, num_seeds=seeds,
                        epsilon=epsilon, logdir=logdir, tensorboard=False,
                        checkpoint_every=10**9)
            members = run.summary.get("seeds") or [run.summary]
            out["final_return_mean"][name] = [m["final_return_mean"] for m in members]
    out["load_after"] = os.getloadavg()
    print(write_results("minatar_torso", out))
    return out


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))

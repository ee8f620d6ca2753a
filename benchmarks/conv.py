"""Nature-CNN gradient step: the im2col ``matmul`` convolution against XLA's (``xla``).

A double-Q DQN-like gradient step on batches of 84x84x4 uint8 frames, as the Breakout
learner takes it: the online network forward and backward on s, the online network
forward on s' (the argmax, no gradient) and the target network forward on s'; mean Huber
TD loss; a plain SGD update (no optimizer state, so the step is the networks' cost).
``--steps`` such steps on as many different batches run in one jitted call, in a rolled
``lax.scan``, for ``Conv(method="xla")`` (:func:`rljax.networks.conv.conv2d`: XLA's
convolution, custom VJP) and ``Conv(method="matmul")``
(:func:`rljax.networks.conv.conv2d_matmul`: slices, reshapes and matmuls, no conv op),
from the same parameters. The two are timed in interleaved rounds in one process;
medians. ``cpu_s / wall_s`` is how many cores a method kept busy.

    python -m benchmarks.conv [--batch-size 32] [--steps 8] [--rounds 7] [--out conv]

Writes benchmarks/results/conv.json (or NAME.json).
"""

from __future__ import annotations

import argparse
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import interleaved, machine, median, timed_wall_cpu, write_results
from rljax import losses
from rljax.networks.core import NatureCNN

METHODS = ("xla", "matmul")
NUM_ACTIONS = 4  # Breakout


class _QNetwork(nn.Module):
    conv_method: str

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(NUM_ACTIONS)(NatureCNN(conv_method=self.conv_method)(obs))


def _batches(steps: int, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    frames = lambda: rng.integers(0, 256, size=(steps, batch_size, 4, 84, 84), dtype=np.uint8)
    return {"obs": frames(), "next_obs": frames(),
            "action": rng.integers(0, NUM_ACTIONS, size=(steps, batch_size), dtype=np.int32),
            "reward": rng.normal(size=(steps, batch_size)).astype(np.float32),
            "discount": np.full((steps, batch_size), 0.99, np.float32)}


def make_train(method: str, lr: float = 1e-4):
    """``train(params, target_params, batches) -> (params, losses [steps])``, jitted: one
    gradient step per leading index of ``batches``, in a rolled scan."""
    net = _QNetwork(method)

    def loss(params, target_params, b):
        q_tm1 = net.apply(params, b["obs"])
        q_t_online = net.apply(jax.lax.stop_gradient(params), b["next_obs"])
        q_t_target = net.apply(target_params, b["next_obs"])
        td = jax.vmap(losses.double_q_learning_td)(q_tm1, b["action"], b["reward"],
                                                   b["discount"], q_t_online, q_t_target)
        return losses.weighted_td_loss(td, loss="huber", delta=1.0)

    def step(carry, b):
        params, target_params = carry
        value, grads = jax.value_and_grad(loss)(params, target_params, b)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        return (params, target_params), value

    def train(params, target_params, batches):
        (params, _), values = jax.lax.scan(step, (params, target_params), batches)
        return params, values

    return jax.jit(train)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="gradient steps per scan")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="conv", help="results name (default conv)")
    args = parser.parse_args(argv)

    batches = jax.device_put(_batches(args.steps, args.batch_size))
    params = jax.jit(_QNetwork("matmul").init)(jax.random.key(0), batches["obs"][0])
    # Both methods from these parameters (one tree); the target is a copy, as after a sync.
    target_params = jax.tree.map(jnp.copy, params)

    compiled, compile_s, first = {}, {}, {}
    for method in METHODS:
        start = time.perf_counter()
        compiled[method] = make_train(method).lower(params, target_params, batches).compile()
        compile_s[method] = time.perf_counter() - start
        first[method] = np.asarray(compiled[method](params, target_params, batches)[1])
    # Same parameters and batches: the two must learn alike (float32 rounding apart).
    loss_rel_diff = float(np.max(np.abs(first["matmul"] - first["xla"]))
                          / np.max(np.abs(first["xla"])))

    load = [os.getloadavg()[0]]
    samples = interleaved({m: (lambda m=m: timed_wall_cpu(
        lambda: compiled[m](params, target_params, batches))) for m in METHODS}, args.rounds)
    load.append(os.getloadavg()[0])

    per_step = lambda xs, i: 1e3 * median([x[i] for x in xs]) / args.steps
    result = {"machine": machine(), "batch_size": args.batch_size,
              "grad_steps_per_scan": args.steps, "rounds": args.rounds,
              "compile_s": compile_s, "loadavg_1min": load,
              "loss_max_rel_diff_matmul_vs_xla": loss_rel_diff}
    for method in METHODS:
        wall, cpu = per_step(samples[method], 0), per_step(samples[method], 1)
        result[method] = {"wall_ms_per_step": wall, "cpu_ms_per_step": cpu,
                          "cores_busy": cpu / wall}
    result["speedup_matmul_vs_xla"] = (result["xla"]["wall_ms_per_step"]
                                       / result["matmul"]["wall_ms_per_step"])
    result["samples_s"] = {m: [[float(a), float(b)] for a, b in v] for m, v in samples.items()}

    print(f"Nature-CNN double-Q gradient step, batch {args.batch_size}, "
          f"{args.steps} steps per rolled scan, median of {args.rounds} rounds:")
    for method in METHODS:
        r = result[method]
        print(f"  {method:<6} {r['wall_ms_per_step']:7.1f} ms/step wall  "
              f"{r['cpu_ms_per_step']:7.1f} ms/step cpu  ({r['cores_busy']:.2f} cores)  "
              f"compile {compile_s[method]:.1f} s")
    print(f"  xla / matmul: {result['speedup_matmul_vs_xla']:.2f}x; losses differ by "
          f"{loss_rel_diff:.1e} (relative); load {load[0]:.1f} -> {load[1]:.1f}")
    print(f"wrote {write_results(args.out, result)}")
    return result


if __name__ == "__main__":
    main()

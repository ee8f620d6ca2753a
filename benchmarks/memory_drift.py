"""How far does a change of a recurrent policy's parameters move it, as PPO's loss sees the
change and as the policy acts after it?

    python -m benchmarks.memory_drift RUN_DIR --from-checkpoint A --to-checkpoint B
        [--episodes 64] [--seq 16] [--fractions 0.01,0.03,0.1] [--label WORDS]

PPO-RNN's loss unrolls the core over sequences of ``rollout_len`` steps from the carries
acting recorded with the old parameters, so the ratio it clips measures the new policy on
carries that are at most ``rollout_len`` steps new. Acting after the update, the new
parameters make every carry of an episode anew from its first step. If the core carries a
change forward and lets it grow, the policy acts more differently late in a long episode
than the loss saw, and PPO's clipping does not hold it back.

This measures both for a run of PPO-RNN on CartPole-v1 with hidden velocities (the memory
presets; gymnax's CartPole dynamics, the run's ``obs_indices``): for each member it plays
``--episodes`` episodes of 500 steps with the sampled policy of checkpoint A (the old
parameters), then moves the parameters a fraction of the way towards checkpoint B's (a
direction training took) and reads the mean KL(old || new) per step two ways: **seq**,
the new parameters unrolled ``--seq`` steps from the old carries (what the loss sees), and
**full**, unrolled from each episode's start (how the new policy acts), in four spans of
the episode. A feed-forward policy (or ``memory.reset_every_step``) reads the same twice.
The table goes into ``benchmarks/results/memory_drift.json``.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import RESULTS_DIR, add_result
from rljax.run.rundir import member_slice

RESULTS = os.path.join(RESULTS_DIR, "memory_drift.json")
HORIZON = 500  # CartPole-v1's time limit
SPANS = ((0, 16), (16, 100), (100, 300), (300, 500))


def categorical_kl(old_logits: jax.Array, new_logits: jax.Array) -> jax.Array:
    """KL(old || new) over the last axis of two sets of logits."""
    old, new = jax.nn.log_softmax(old_logits), jax.nn.log_softmax(new_logits)
    return jnp.sum(jnp.exp(old) * (old - new), axis=-1)


def span_means(values: np.ndarray, alive: np.ndarray) -> list[float]:
    """Mean of ``values [T, N]`` over the steps ``alive [T, N]`` of each span of
    :data:`SPANS` (NaN where no episode lives so long)."""
    out = []
    for lo, hi in SPANS:
        w = alive[lo:hi]
        out.append(float((values[lo:hi] * w).sum() / w.sum()) if w.sum() else float("nan"))
    return out


def make_tools(run, seq: int):
    """``play(params, key, n)`` and ``logits(params, obs, carries, seq)`` for the run's
    network (PPO-RNN on CartPole with ``obs_indices``)."""
    from gymnax.environments.classic_control.cartpole import CartPole

    from rljax.agents import ppo_networks as heads
    from rljax.agents.recurrent import resets
    from rljax.agents.recurrent_ppo import network

    config, spec = run.config.config, run.spec
    if getattr(config, "memory", None) is None or not spec.discrete:
        raise ValueError("memory_drift reads PPO-RNN runs with discrete actions (the memory "
                         "presets)")
    if run.config.env_id != "CartPole-v1":
        raise ValueError(f"memory_drift plays CartPole-v1, the run is on {run.config.env_id!r}")
    indices = jnp.asarray(dict(run.config.env_options).get("obs_indices", range(4)))
    net, env = network(config, spec), CartPole()
    env_params = env.default_params

    def no_episode_starts(shape):  # the agent's reset flags where no episode begins
        return resets(config, jnp.zeros(shape, bool))

    steps = -(-HORIZON // seq) * seq  # whole sequences; the steps past the limit not read

    def prepare(params, obs):
        return heads.prepare(config, params["obs_stats"], obs[..., indices])

    def play(params, key, n):
        keys = jax.random.split(key, n + 1)
        obs, states = jax.vmap(env.reset_env, (0, None))(keys[1:], env_params)

        def step(carry, key):
            states, obs, hidden, alive = carry
            x = prepare(params, obs)
            new_hidden, (logits, _) = net.apply(params["net"]["net"], hidden, x,
                                                no_episode_starts((n,)))
            k_act, k_env = jax.random.split(key)
            action = jax.random.categorical(k_act, logits)
            obs2, states2, _, done, _ = jax.vmap(env.step_env, (0, 0, 0, None))(
                jax.random.split(k_env, n), states, action, env_params)
            return ((states2, obs2, new_hidden, alive & ~done),
                    (obs, hidden, logits, alive))

        init = (states, obs, net.initial_carry((n,)), jnp.ones((n,), bool))
        _, rec = jax.lax.scan(step, init, jax.random.split(keys[0], steps))
        return rec  # obs [T, N, 4], carries [T, N, H], logits [T, N, A], alive [T, N]

    def logits(params, obs, carries, seq):
        x = prepare(params, obs)
        t, n = x.shape[:2]
        full = net.unroll(params["net"]["net"], jax.tree.map(lambda c: c[0], carries), x,
                          no_episode_starts((t, n))).outputs[0]
        starts = jax.tree.map(lambda c: c[::seq], carries)
        pieces = x.reshape((t // seq, seq) + x.shape[1:])
        unroll = lambda c, xs: net.unroll(params["net"]["net"], c, xs,
                                          no_episode_starts(xs.shape[:2])).outputs[0]
        part = jax.vmap(unroll)(starts, pieces).reshape(full.shape)
        return full, part

    return jax.jit(play, static_argnums=2), jax.jit(logits, static_argnums=3)


def measure(old_run, new_run, episodes: int, seq: int, fractions: list[float],
            seed: int = 0) -> list[dict]:
    """One row per member and fraction: KL(old || new) per step in each span, seq and
    full, and the greedy actions that differ."""
    play, logits = make_tools(old_run, seq)
    members = old_run.config.num_members
    rows = []
    for i in range(members):
        old = member_slice(old_run.params, i, members)
        new = member_slice(new_run.params, i, members)
        obs, carries, old_logits, alive = play(old, jax.random.key(seed + i), episodes)
        alive = np.asarray(alive, np.float64)
        alive[HORIZON:] = 0.0
        for f in fractions:
            moved = jax.tree.map(lambda a, b, f=f: a + f * (b - a), old, new)
            full, part = logits(moved, obs, carries, seq)
            kl_full = np.asarray(categorical_kl(old_logits, full))
            kl_seq = np.asarray(categorical_kl(old_logits, part))
            flips = np.asarray(jnp.argmax(full, -1) != jnp.argmax(part, -1), np.float64)
            rows.append({"member": i, "fraction": f, "length": float(alive.sum(0).mean()),
                         "kl_seq": span_means(kl_seq, alive),
                         "kl_full": span_means(kl_full, alive),
                         "greedy_differs": span_means(flips, alive)})
    return rows


def render(rows: list[dict], seq: int) -> str:
    spans = [f"{lo}-{hi}" for lo, hi in SPANS]
    head = ("| member | fraction | mean length | " + " | ".join(
        f"KL seq/full {s}" for s in spans) + " | greedy differs 300-500 |")
    lines = [f"KL(old || new) per step x 1e3, new parameters unrolled {seq} steps from the "
             f"old carries (seq) or from the episode's start (full)", head,
             "| --- " * (4 + len(spans)) + "|"]
    for r in rows:
        cells = [f"{1e3 * s:.2f} / {1e3 * f:.2f}" for s, f in zip(r["kl_seq"], r["kl_full"],
                                                                   strict=True)]
        lines.append(f"| {r['member']} | {r['fraction']:g} | {r['length']:.0f} | "
                     + " | ".join(cells) + f" | {100 * r['greedy_differs'][-1]:.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--from-checkpoint", type=int, required=True, metavar="A")
    parser.add_argument("--to-checkpoint", type=int, required=True, metavar="B")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seq", type=int, default=16,
                        help="steps the loss unrolls (the run's rollout_len)")
    parser.add_argument("--fractions", default="0.01,0.03,0.1",
                        help="how far towards B's parameters, comma-separated")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    fractions = [float(x) for x in args.fractions.split(",")]
    if args.episodes < 1 or args.seq < 1 or not all(0 < f <= 1 for f in fractions):
        parser.error("--episodes and --seq must be >= 1 and --fractions in (0, 1]")
    import rljax

    old = rljax.load(args.run_dir, from_checkpoint=args.from_checkpoint)
    new = rljax.load(args.run_dir, from_checkpoint=args.to_checkpoint)
    rows = measure(old, new, args.episodes, args.seq, fractions)
    print(render(rows, args.seq), file=sys.stdout)
    key = " ".join(w for w in (getattr(old.config, "preset", None) or old.config.env_id,
                               f"{args.from_checkpoint}->{args.to_checkpoint}",
                               f"seq={args.seq}", args.label) if w)
    add_result(RESULTS, key, {"run_dir": os.path.basename(os.path.normpath(args.run_dir)),
                              "episodes": args.episodes, "spans": SPANS, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

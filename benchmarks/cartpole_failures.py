"""How a CartPole policy's episodes end: the pole (angle past 12 degrees) or the cart (position
past 2.4), per member of a run, with the noise-free policy.

    python -m benchmarks.cartpole_failures RUN_DIR [--episodes 10] [--from-checkpoint STEP]

Each episode runs in gymnasium's CartPole-v1, whose state holds what a run with hidden
velocities (``obs_indices``) does not see; the policy gets the observation the run was
trained on, and keeps its memory within the episode. For each member it prints the episode
lengths, how many ended by the cart and how many by the pole, and the largest cart
position reached. A policy that balances the pole but lets the cart drift to the edge
fails late and at a steady time; docs/results.md ("The memory presets: what fails") has
the figures.
"""

from __future__ import annotations

import argparse

import numpy as np

X_LIMIT, ANGLE_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole-v1's termination bounds


def episodes(run, member: int, count: int) -> list[dict]:
    import gymnasium as gym
    import jax

    params = jax.tree.map(lambda x: x[member], run.params) if run.config.num_members > 1 \
        else run.params
    indices = list(dict(run.config.env_options).get("obs_indices", range(4)))
    policy, env, out = jax.jit(run.agent.policy), gym.make("CartPole-v1"), []
    for episode in range(count):
        state, _ = env.reset(seed=episode)
        carry = run.agent.policy_init(1) if run.agent.policy_init else None
        steps, widest, done = 0, 0.0, False
        while not done:
            obs = np.asarray(state[indices], np.float32)[None]
            if carry is None:
                action = policy(params, obs)
            else:
                action, carry = policy(params, obs, carry, np.asarray([steps == 0]))
            state, _, terminated, truncated, _ = env.step(int(np.asarray(action)[0]))
            steps, widest, done = steps + 1, max(widest, abs(state[0])), terminated or truncated
        cause = ("cart" if abs(state[0]) > X_LIMIT else "pole" if abs(state[2]) > ANGLE_LIMIT
                 else "time limit")
        out.append({"length": steps, "cause": cause, "widest_x": round(float(widest), 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--from-checkpoint", type=int, default=None)
    args = parser.parse_args(argv)
    import rljax

    run = rljax.load(args.run_dir, from_checkpoint=args.from_checkpoint)
    if run.config.env_id != "CartPole-v1":
        parser.error(f"{args.run_dir} is a {run.config.env_id} run, not CartPole-v1")
    step = int(np.max(np.asarray(run.state.env_steps)))
    print(f"{args.run_dir} at env step {step:,}, noise-free policy")
    for member in range(run.config.num_members):
        eps = episodes(run, member, args.episodes)
        causes = [e["cause"] for e in eps]
        print(f"member {member}: lengths {[e['length'] for e in eps]}; "
              f"{causes.count('cart')} by the cart, {causes.count('pole')} by the pole, "
              f"{causes.count('time limit')} at 500; widest |x| "
              f"{max(e['widest_x'] for e in eps):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

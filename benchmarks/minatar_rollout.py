"""The rollout of minatar-breakout-pqn alone (32 steps of 128 envs: act, env step, record),
as the on-policy loop records it, against the same without its final observations, with
them kept as float32 instead of the env's compact bool, and against the reference's
rollout (benchmarks/reference_native.py's PQN step): where the loop's per-step work goes.

    python -m benchmarks.minatar_rollout [--rounds 5]

One XLA thread; each round calls every program 10 times, in turn; the figures are the
medians over rounds of CPU and wall milliseconds per rollout. Writes
benchmarks/results/minatar_rollout.json with the load before and after.
"""

from __future__ import annotations

import argparse
import os

from benchmarks.common import median, timed_wall_cpu, write_results

T, CALLS = 32, 10


def _rljax_rollouts(run) -> tuple[dict, object, object]:
    import jax
    import jax.numpy as jnp

    from rljax.run.build import build

    env, agent, trainer, _ = build(run)
    state = trainer.init(jax.random.key(0))

    def make(final_dtype):  # None: no final observations; "env": the loop's own choice
        dtype = env.spec.compact_obs_dtype if final_dtype == "env" else final_dtype

        def env_step(carry, key):
            agent_state, env_state = carry
            obs = env_state.obs
            action, extras, agent_state = agent.act(agent_state, obs, key, jnp.int32(100),
                                                    env_state.done)
            env_state, out = env.step(env_state, action)
            final = None if final_dtype is None else out.obs.astype(dtype or out.obs.dtype)
            return (agent_state, env_state), (obs, action, out.reward, out.terminated,
                                              out.truncated, extras, final)

        def rollout(agent_state, env_state, key):
            (_, env_state), record = jax.lax.scan(env_step, (agent_state, env_state),
                                                  jax.random.split(key, T))
            return env_state, record
        return jax.jit(rollout).lower(state.agent, state.env, jax.random.key(1)).compile()

    programs = {"rljax": make("env"), "rljax_float32_final": make(jnp.float32),
                "rljax_no_final": make(None)}
    return programs, state.agent, state.env


def _reference_rollout(run):
    import jax
    import jax.numpy as jnp

    from benchmarks import reference_native as rn

    env, params, obs_dim, num_actions = rn._env(run.env_id)
    n = run.config.loop.num_envs
    q_net = rn._MLP(run.config.hidden_sizes, num_actions, act="relu", layer_norm=True)

    def step(carry, _):  # reference_native.make_pqn's rollout step
        net, env_state, obs, key = carry
        key, k_eps, k_rand, k_env = jax.random.split(key, 4)
        q = q_net.apply(net, obs)
        greedy = jnp.argmax(q, -1)
        rand = jax.random.randint(k_rand, greedy.shape, 0, num_actions)
        action = jnp.where(jax.random.uniform(k_eps, greedy.shape) < 0.05, rand, greedy)
        nobs, env_state, reward, term, trunc, _ = jax.vmap(env.step, (0, 0, 0, None))(
            jax.random.split(k_env, n), env_state, action, params)
        done = (term | trunc).astype(jnp.float32)
        return (net, env_state, rn._flat(nobs), key), (obs, action, reward, done, q.max(-1))

    def init(key):
        k_q, k_env, key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_env, n), params)
        return q_net.init(k_q, jnp.zeros((1, obs_dim))), env_state, rn._flat(obs), key

    carry = jax.jit(init)(jax.random.key(0))
    return jax.jit(lambda c: jax.lax.scan(step, c, None, T)).lower(carry).compile(), carry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from rljax.cpu_threads import set_cpu_threads

    set_cpu_threads(1)
    import jax

    from benchmarks.originals import _run

    run = _run("minatar-breakout-pqn", {}, None, 1)
    programs, agent_state, env_state = _rljax_rollouts(run)
    reference, carry = _reference_rollout(run)
    box = {name: env_state for name in programs} | {"reference": carry}
    keys = iter(jax.random.split(jax.random.key(3), (args.rounds + 1) * CALLS * len(box)))

    def calls(name):
        def go():
            out = None
            for _ in range(CALLS):
                if name == "reference":
                    box[name], out = reference(box[name])
                else:
                    box[name], out = programs[name](agent_state, box[name], next(keys))
            return out
        return go

    for name in box:  # warm up
        timed_wall_cpu(calls(name))
    load_before = os.getloadavg()
    times = {name: [] for name in box}
    for _ in range(args.rounds):
        for name in box:
            times[name].append(timed_wall_cpu(calls(name)))
    ms = {name: {"cpu_ms": 1e3 * median([c for _, c in v]) / CALLS,
                 "wall_ms": 1e3 * median([w for w, _ in v]) / CALLS}
          for name, v in times.items()}
    for name, m in ms.items():
        print(f"{name}: {m['cpu_ms']:.2f} ms CPU, {m['wall_ms']:.2f} ms wall per rollout")
    print(write_results("minatar_rollout", {"rounds": args.rounds, "ms_per_rollout": ms,
                                            "load_before": load_before,
                                            "load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()

"""Evaluation: the noise-free policy on separate envs, one episode per env.

An evaluator steps ``episodes`` fresh envs with ``agent.policy`` inside one
compiled ``lax.while_loop`` until every env has finished its first episode (or
its time limit), and returns each episode's return and length. Scores follow the
env's episode statistics (for Atari: whole games, raw score).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.envs import Env


def make_evaluator(policy: Callable, env: Env, *,
                   policy_init: Callable[[int], Any] | None = None) -> Callable[[Any], dict]:
    """Builds ``evaluate(params) -> {"returns", "lengths", "return_mean", ...}``.

    Args:
        policy: ``policy(params, obs [B, ...]) -> action [B, ...]``; with ``policy_init``,
            an agent's stateful policy ``policy(params, obs, carry, new_episode) ->
            (action, carry)``, its carry (memory) reset where an env's previous step ended
            an episode.
        policy_init: ``policy_init(batch_size) -> carry`` of a stateful policy
            (``Agent.policy_init``); None: ``policy`` is stateless.
        env: the evaluation envs, one per episode, built by the caller (the run layer's
            ``rljax.run.build.make_env``) with a seed apart from training's and the
            training envs' options.
    """
    # Generous bound: an episode lasts at most max_episode_steps steps; Atari games
    # with episodic_life add one reset step per lost life.
    max_steps = env.spec.max_episode_steps + 16
    if policy_init is None:
        def init_carry(n):
            return ()

        def step_policy(params, obs, carry, new_episode):
            return policy(params, obs), carry
    else:
        init_carry, step_policy = policy_init, policy

    def run(params, env_state):
        def cond(carry):
            _, _, finished, _, _, t = carry
            return (~jnp.all(finished)) & (t < max_steps)

        def body(carry):
            env_state, memory, finished, returns, lengths, t = carry
            action, memory = step_policy(params, env_state.obs, memory, env_state.done)
            env_state, out = env.step(env_state, action)
            first = out.episode_end & ~finished
            returns = jnp.where(first, out.episode_return, returns)
            lengths = jnp.where(first, out.episode_length, lengths)
            return env_state, memory, finished | out.episode_end, returns, lengths, t + 1

        n = env.spec.num_envs
        init = (env_state, init_carry(n), jnp.zeros(n, bool), jnp.zeros(n, jnp.float32),
                jnp.zeros(n, jnp.int32), jnp.zeros((), jnp.int32))
        _, _, finished, returns, lengths, _ = jax.lax.while_loop(cond, body, init)
        return finished, returns, lengths

    compiled = [jax.jit(run)]

    def compile_ahead(params) -> None:
        """Compiles the evaluation for params shaped as ``params`` now, so that evaluating
        later compiles nothing (envs without ``state_shapes``: their first evaluation
        compiles)."""
        if env.state_shapes is None:
            return
        if env.pool is None:  # JAX-native: reset is a function of the seeds; compile it
            env.reset()
        compiled[0] = jax.jit(run).lower(params, env.state_shapes()).compile()

    def evaluate(params) -> dict:
        finished, returns, lengths = jax.device_get(compiled[0](params, env.reset()))
        returns = np.asarray(returns, np.float64)[finished]
        lengths = np.asarray(lengths)[finished]
        return {
            "episodes": int(finished.sum()),
            "return_mean": float(returns.mean()) if len(returns) else None,
            "return_std": float(returns.std()) if len(returns) else None,
            "length_mean": float(lengths.mean()) if len(lengths) else None,
            "returns": returns.tolist(),
        }

    evaluate.compile_ahead = compile_ahead
    return evaluate

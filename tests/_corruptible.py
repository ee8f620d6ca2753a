"""Learning tests run a correct agent and a deliberately broken one. With the breakage
switched by a flag in the train state, both runs share one compiled program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent, Update


def with_flag(agent: Agent) -> tuple[Agent, Callable[[], Any]]:
    """``agent`` with state ``(state, flag)``, and ``flag()``: inside ``update``, the
    traced boolean flag of the state being updated (a patched loss reads it to break itself
    in the runs that set it). ``init`` sets the flag False."""
    current: list = []

    def init(key):
        return agent.init(key), jnp.zeros((), bool)

    def act(state, obs, key, step, new_episode):
        action, extras, inner = agent.act(state[0], obs, key, step, new_episode)
        return action, extras, (inner, state[1])

    def update(state, batch, key):
        current.append(state[1])
        try:
            inner, metrics, td = agent.update(state[0], batch, key)
        finally:
            current.pop()
        return Update((inner, state[1]), metrics, td)

    def flag():
        if not current:
            raise RuntimeError("the flag is only known inside update")
        return current[-1]

    td_error = None if agent.td_error is None else (lambda s, tr: agent.td_error(s[0], tr))
    return Agent(init, act, update, agent.policy, lambda s: agent.params(s[0]),
                 td_error), flag


def negated_where(flag: Callable[[], Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its result negated where ``flag()`` is set."""

    def negated(*args, **kwargs):
        return jnp.where(flag(), -1.0, 1.0) * fn(*args, **kwargs)

    return negated


def with_negated_rewards(agent: Agent) -> Agent:
    """An off-policy ``agent`` with state ``(state, flag)`` whose updates, where the flag
    is set, learn from the sampled transitions' rewards with the wrong sign."""
    flagged, _ = with_flag(agent)

    def update(state, batch, key):
        tr = batch.transition
        tr = tr._replace(reward=jnp.where(state[1], -tr.reward, tr.reward))
        return flagged.update(state, batch._replace(transition=tr), key)

    return flagged._replace(update=update)


def flagged_runs(trainer: Any, seed: int, chunks: int | dict[bool, int],
                 flags=(False, True)) -> dict[bool, tuple[Any, Any]]:
    """Runs ``trainer`` (whose agent state is ``(state, flag)``) once per flag from the
    same seed with one compiled chunk, ``chunks`` chunks each (or ``chunks[flag]``).
    Returns ``{flag: (final state, last chunk's metrics)}``."""
    chunk = trainer.chunk.lower(trainer.init(jax.random.key(seed))).compile()
    out = {}
    for flag in flags:
        state = trainer.init(jax.random.key(seed))
        state = state.replace(agent=(state.agent[0], jnp.asarray(flag)))
        metrics = None
        for _ in range(chunks[flag] if isinstance(chunks, dict) else chunks):
            state, metrics = chunk(state)
        # Wait for the last chunk: the next init resets the pool that chunk is stepping
        # (envpool aborts the process on a reset while a compiled step is in flight).
        out[flag] = jax.block_until_ready((state, metrics))
    return out


def assert_finite_once_learning(loss: Any, config: Any) -> None:
    """The losses of a chunk of off-policy updates are finite from the first update that
    learned on. The loop reports NaN for the updates before the replay holds
    ``config.replay.min_replay`` transitions, so the first chunk of a run starts with them
    (no more than that many updates' worth)."""
    loss = np.asarray(loss)
    learned = ~np.isnan(loss)
    assert learned.any(), loss
    first = int(np.argmax(learned))
    assert first <= -(-config.replay.min_replay // config.loop.steps_per_update), loss
    assert np.all(np.isfinite(loss[first:])), loss


def cartpole_runs(make_agent: Callable[..., Agent], config: Any, seed: int,
                  runs: list[tuple[bool, int]], module: Any, name: str) -> list[tuple[int, float]]:
    """Trains an on-policy agent on CartPole-v1 (one pool, one compiled program), once per
    ``(negated, max_steps)`` of ``runs``, each until solved (100-episode mean >= 475) or
    ``max_steps``, with ``module.name`` (a loss or target function) negated in the
    negated runs. Returns (solved_at, best 100-episode mean) of each run."""
    import pytest

    from rljax import envs
    from rljax.envs.stats import recent_mean_return
    from rljax.loops import on_policy

    env = envs.make("CartPole-v1", config.loop.num_envs, seed)
    agent, negated = with_flag(make_agent(config, env.spec))
    trainer = on_policy.make_on_policy_trainer(
        agent, env, rollout_len=config.loop.rollout_len,
        updates_per_chunk=20_000 // config.loop.steps_per_update, threshold=475.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, name, negated_where(negated, getattr(module, name)))
        chunk = trainer.chunk.lower(trainer.init(jax.random.key(seed))).compile()
    out = []
    for negate, max_steps in runs:
        state = trainer.init(jax.random.key(seed))
        state = state.replace(agent=(state.agent[0], jnp.asarray(negate)))
        best = 0.0
        while int(state.solved_at) < 0 and int(state.env_steps) < max_steps:
            state, _ = chunk(state)
            best = max(best, float(jnp.nan_to_num(recent_mean_return(state.env.stats))))
        out.append((int(state.solved_at), best))
    return out

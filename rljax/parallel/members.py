"""Many independent runs (*members*) in one compiled program.

A single-run :class:`Trainer` is written for one agent and ``B`` envs. Built on
the env of ``M`` members (:func:`rljax.parallel.envs.members`: a JAX-native env vmapped
over the members' seeds, or one envpool pool of ``M * B`` envs whose step has a
batching rule over members), its pure pieces are vmapped over a leading member axis:
each member has its own parameters, optimizer, replay, exploration noise, PRNG key and
envs, and nothing is shared or averaged.

Members differ by seed (``--seeds``) and, in a sweep (``--sweep``), by the value
of one numeric hyperparameter, which then enters the program as a per-member
array instead of a Python constant (:mod:`rljax.parallel.sweep`). A member with
seed ``s`` computes what a single run with seed ``s`` (and its hyperparameter
value) computes, up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rljax.loops.state import Trainer


def seed_keys(seeds: Sequence[int]) -> jax.Array:
    """The root keys of runs with these seeds, as single runs make them."""
    return jax.vmap(jax.random.key)(jnp.asarray(list(seeds)))


def vectorize_members(make_trainer: Callable[[Any], Trainer], env, seeds: Sequence[int],
                      values: jax.Array | None = None) -> Trainer:
    """One trainer running ``len(seeds)`` members side by side.

    Args:
        make_trainer: ``make_trainer(value) -> Trainer`` builds a single-run trainer on
            ``env``; ``value`` is the member's hyperparameter value (a traced scalar
            inside the program) or None when members differ by seed only.
        env: the members' env, ``rljax.parallel.envs.members(task_id, num_envs, seeds)``.
        seeds: each member's run seed.
        values: ``[M]`` hyperparameter values, one per member, or None.

    Returns:
        A :class:`Trainer` whose state has a leading member axis ``[M]``;
        ``steps_per_update`` counts the env steps of one member.
    """
    num = len(seeds)
    if env.spec.num_seeds != num:
        raise ValueError(f"the env holds {env.spec.num_seeds} members' envs, not {num}")
    base = make_trainer(None)
    if base.init_state is None or base.chunk_fn is None:
        raise ValueError("this trainer cannot be vectorized over members")
    if values is None:
        trainer_for = lambda value: base  # noqa: E731
        values = jnp.zeros((num,), jnp.float32)  # unused: a placeholder vmap operand
    else:
        trainer_for = make_trainer
        if values.shape != (num,):
            raise ValueError(f"values must have shape ({num},), got {values.shape}")

    def member_init(key, env_state, value):
        return trainer_for(value).init_state(key, env_state)

    def member_chunk(state, value):
        return trainer_for(value).chunk_fn(state)

    keys = seed_keys(seeds)
    v_init, v_chunk = jax.vmap(member_init), jax.vmap(member_chunk)

    def init_state(keys: jax.Array, env_state):
        return v_init(keys, env_state, values)

    def chunk_fn(state, member_values=values):
        return v_chunk(state, member_values)

    def init(key: jax.Array | None = None):
        del key  # each member's key comes from its own seed, as in a single run
        return init_state(keys, env.reset())

    return base._replace(init=init, chunk=jax.jit(chunk_fn, donate_argnums=0),
                         init_state=init_state, chunk_fn=chunk_fn, num_seeds=num,
                         member_values=values)


def vectorize_seeds(trainer: Trainer, env, seed: int) -> Trainer:
    """Turns a trainer built on a multi-seed env into a many-seed trainer.

    Args:
        trainer: a single-seed trainer built on ``env`` (``env.spec.num_seeds > 1``).
        env: the members' env (:func:`rljax.parallel.envs.members`) of ``S`` seeds.
        seed: the first seed; member ``k`` has seed ``seed + k``.

    Returns:
        A :class:`Trainer` whose state has a leading seed axis ``[S]``.
    """
    seeds = [seed + k for k in range(env.spec.num_seeds)]
    return vectorize_members(lambda value: trainer, env, seeds)

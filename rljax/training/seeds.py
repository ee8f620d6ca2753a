"""Many independent runs in one compiled program.

A single-seed :class:`Trainer` is written for one agent and ``B`` envs. Built on
an env made with ``num_seeds=S`` (one envpool pool of ``S * B`` envs whose step
has a batching rule over seeds), its pure pieces are vmapped over a leading seed
axis: each seed has its own parameters, optimizer, replay, exploration noise,
PRNG key and envs, and nothing is shared or averaged. Seed ``k`` of the program
computes what a single run with seed ``seed + k`` computes, up to float rounding.
"""

from __future__ import annotations

import jax

from rljax.training.loop import Trainer


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """The root keys of runs ``seed .. seed + num_seeds - 1``, as single runs make them."""
    return jax.vmap(jax.random.key)(jax.numpy.arange(seed, seed + num_seeds))


def vectorize_seeds(trainer: Trainer, env, seed: int) -> Trainer:
    """Turns a trainer built on a multi-seed env into a many-seed trainer.

    Args:
        trainer: a single-seed trainer built on ``env`` (``env.spec.num_seeds > 1``).
        env: the env made with ``rljax.envs.make(..., num_seeds=S)``.
        seed: the first seed.

    Returns:
        A :class:`Trainer` whose state has a leading seed axis ``[S]``;
        ``steps_per_update`` counts the env steps of one seed.
    """
    num_seeds = env.spec.num_seeds
    if trainer.init_state is None or trainer.chunk_fn is None:
        raise ValueError("this trainer cannot be vectorized over seeds")
    init_state = jax.vmap(trainer.init_state)

    def init(key: jax.Array | None = None):
        del key  # each seed's key comes from its own seed, as in a single run
        return init_state(seed_keys(seed, num_seeds), env.reset())

    chunk_fn = jax.vmap(trainer.chunk_fn)
    return trainer._replace(init=init, chunk=jax.jit(chunk_fn, donate_argnums=0),
                            init_state=init_state, chunk_fn=chunk_fn, num_seeds=num_seeds)

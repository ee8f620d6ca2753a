"""Agents with memory: PPO-RNN (:mod:`rljax.agents.recurrent_ppo`) and PQN-RNN
(:mod:`rljax.agents.recurrent_pqn`), the ``memory`` option of PPO and PQN, and the
machinery they share.

The network is torso -> recurrent core (GRU, LSTM, simple RNN) -> heads
(:mod:`rljax.networks.recurrent`), and the memory travels through the ordinary agent
contract:

* **state**: the train state is :class:`RecurrentState`, the feed-forward agent's state
  (``learner``) and ``hidden``, the core's carry for each of the ``B`` envs as acting left
  it. It is part of every checkpoint, and of every member of a vmapped run.
* **act**: ``act(state, obs, key, step, new_episode)`` resets the carry of the envs whose
  previous step ended an episode (``new_episode``; every env with
  ``memory.reset_every_step``), steps the core and acts on its output. Beside the
  feed-forward agent's extras it returns ``extras["hidden"]``, the carry the step started
  from (before the reset), and ``extras["new_episode"]``: the loop stores both in
  ``Rollout.extras`` (``[T, B, ...]``).
* **update** replays the rollout: from ``extras["hidden"][0]`` and the ``new_episode``
  flags the core recomputes, with the acting parameters, exactly the carries and outputs
  acting saw (:func:`replay`; checked to 1e-6 by the tests). Minibatches split the envs,
  never time: each holds whole ``[T]`` sequences of ``B / num_minibatches`` envs with their
  initial carries, and the loss unrolls the core over them with the parameters being
  learned (as PureJaxRL's PPO-RNN and purejaxql's PQN-RNN do).
* **bootstrapping**: the value (or greedy Q-value) after step ``t`` is that of the
  observation step ``t`` ended in, processed from the carry step ``t`` left, without a
  reset: for envpool (``Rollout.final_obs`` None) ``obs[t + 1]``, for envs that reset in
  the same step ``final_obs[t]`` (:func:`rljax.types.next_obs`). Where the episode goes on
  that is the value acting recorded at step ``t + 1``; the heads run (one core step from
  the carry each step left: the next step's recorded carry, after the last step the
  state's ``hidden``) only after the last step and on truncated steps
  (:func:`next_values`).
* **policy**: evaluation carries memory too. ``Agent.policy_init(batch_size)`` gives the
  initial carry and ``policy(params, obs, carry, new_episode) -> (action, carry)`` steps it
  (:class:`rljax.agents.base.StatefulPolicyFn`).

With envpool, a finished episode is followed by a reset step (``new_episode`` True, action
ignored, not learned from) whose observation is the old episode's final one: the reset
clears the carry before that step, and the new episode's first real step starts from the
carry of that one step (zeros advanced by the old episode's final observation). With envs
that reset in the same step, the new episode's first step starts from zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.networks.recurrent import RecurrentNetwork, reset_carry
from rljax.types import Array, Params, Rollout, bootstrap_values, flat_steps


@struct.dataclass
class RecurrentState:
    """Train state of an agent with memory.

    Attributes:
        learner: the feed-forward agent's state (:class:`~rljax.agents.ppo.PPOState` or
            :class:`~rljax.agents.pqn.PQNState`), its ``params`` the recurrent network's.
        hidden: the core's carry for each env, ``[B, H]`` (GRU) or ``([B, H], [B, H])``
            (LSTM), as the last ``act`` left it.
    """

    learner: Any
    hidden: Any


# ------------------------------------------------------------------ shared machinery

def resets(config: Any, new_episode: Array) -> Array:
    """Where the carry is reset before a step: where an episode began, or everywhere."""
    if config.memory.reset_every_step:
        return jnp.ones_like(new_episode, bool)
    return new_episode.astype(bool)


def first(tree: Any) -> Any:
    return jax.tree.map(lambda x: x[0], tree)


def carries_after(batch: Rollout, final: Any) -> Any:
    """The carry each step of ``batch`` left, ``[T, B, H]``: the next step's recorded carry
    (``extras["hidden"][t + 1]``), and ``final`` (the state's carry) after the last step."""
    return jax.tree.map(lambda h, f: jnp.concatenate([h[1:], f[None]], axis=0),
                        batch.extras["hidden"], final)


def env_major(samples: Any) -> Any:
    """Samples of ``[T, B, ...]`` leaves and ``hidden`` ``[B, H]`` -> ``[B, 1, T, ...]`` and
    ``[B, 1, H]``: whole env sequences as the samples that
    :func:`rljax.minibatches.minibatch_epochs` shuffles."""
    seqs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1)[:, None], samples._replace(hidden=None))
    return seqs._replace(hidden=jax.tree.map(lambda x: x[:, None], samples.hidden))


def time_major(tree: Any) -> Any:
    """A minibatch's ``[b, T, ...]`` leaves -> ``[T, b, ...]``."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tree)


def next_values(config: Any, net: RecurrentNetwork, params: Params, batch: Rollout,
                final_hidden: Any, obs_next: Array, values: Array,
                value_of: Callable[[tuple], Array], time_limit: int) -> Array:
    """``[T, B]``: the value each step bootstraps from, that of the observation it ended in
    (``obs_next``, as the network takes it) from the carry it left.

    ``values``: the values acting recorded, ``[T, B]``; ``value_of(outputs) -> [N]``: the
    value in the heads' outputs. Where an episode goes on, the next step started from the
    carry this one left (no reset) on that observation, so its recorded value is the one;
    the heads run only after the last step and on the truncated steps (at most ``ceil(T /
    time_limit)`` per env, :func:`rljax.types.bootstrap_values`), in either env layout.
    ``time_limit`` 0: on every step, and ``values`` is not read.
    """
    after = carries_after(batch, final_hidden)
    if config.memory.reset_every_step:
        after = reset_carry(after, jnp.ones(batch.reward.shape, bool))
    after, obs_next = jax.tree.map(flat_steps, after), flat_steps(obs_next)

    def value_at(index: Array | None) -> Array:
        pick = (lambda x: x) if index is None else (lambda x: x[index])
        return value_of(net.step_from(params, jax.tree.map(pick, after), pick(obs_next)))

    return bootstrap_values(values, batch.truncated, value_at, time_limit)


def memory_extras(state: RecurrentState, new_episode: Array) -> dict:
    return {"hidden": state.hidden, "new_episode": new_episode.astype(bool)}


class Replay(NamedTuple):
    """The rollout replayed by the core (:func:`replay`), every leaf ``[T, B, ...]``.

    Attributes:
        hidden: the carry each step started from (before its reset).
        outputs: the heads' outputs (PPO: ``(logits or means, values)``; PQN:
            ``(q_values,)``).
    """

    hidden: Any
    outputs: tuple


def replay(net: RecurrentNetwork, config: Any, params: Params, obs: Array,
           batch: Rollout) -> Replay:
    """The core unrolled over the rollout from its first recorded carry, reset where the
    recorded ``new_episode`` flags say: with the acting parameters, the carries and outputs
    acting saw. ``obs``: the ``[T, B, ...]`` observations as the network takes them."""
    out = net.unroll(params, first(batch.extras["hidden"]), obs,
                     resets(config, batch.extras["new_episode"]))
    return Replay(out.carries, out.outputs)

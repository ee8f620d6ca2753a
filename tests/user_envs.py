"""Two envs a user writes outside rljax, with known optima, small enough to learn in
seconds (tests/run/test_env_objects.py trains on them; never imported by rljax).

* :class:`Match`, a gymnax ``Environment`` subclass with discrete actions: the observation
  is a one-hot target among 3; the matching action earns 1 and a new target, any other
  ends the episode (terminated). Episodes are cut at ``max_steps_in_episode`` = 10
  (truncated): the optimum return is 10, a uniform random policy's about 0.5.
* :class:`Reach`, a brax-style env with continuous actions: the observation is a target
  in ``[-1, 1]^2``, the reward ``1 - mean((action - target)^2)``, then a new target; it never
  terminates, so the time limit (``max_episode_steps``, 10) alone ends its episodes: the
  optimum return is 10, a uniform random policy's about a third of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

TARGETS = 3
MATCH_OPTIMUM = 10.0


@struct.dataclass
class MatchState(environment.EnvState):
    target: jax.Array


@struct.dataclass
class MatchParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class Match(environment.Environment):
    @property
    def default_params(self) -> MatchParams:
        return MatchParams()

    def reset_env(self, key, params):
        state = MatchState(time=0, target=jax.random.randint(key, (), 0, TARGETS))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        hit = action == state.target
        state = MatchState(time=state.time + 1,
                           target=jax.random.randint(key, (), 0, TARGETS))
        return self.get_obs(state), state, hit.astype(jnp.float32), ~hit, {}

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.target, TARGETS)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (TARGETS,))

    def action_space(self, params):
        return spaces.Discrete(TARGETS)


@struct.dataclass
class ReachState:
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    key: jax.Array


class Reach:
    observation_size = 2
    action_size = 2
    max_episode_steps = 10  # the time limit rljax keeps (max_episode_steps= overrides it)

    def reset(self, key):
        key, sub = jax.random.split(key)
        return ReachState(obs=jax.random.uniform(sub, (2,), minval=-1.0, maxval=1.0),
                          reward=jnp.zeros(()), done=jnp.zeros(()), key=key)

    def step(self, state, action):
        reward = 1.0 - jnp.mean((jnp.clip(action, -1.0, 1.0) - state.obs) ** 2)
        key, sub = jax.random.split(state.key)
        return ReachState(obs=jax.random.uniform(sub, (2,), minval=-1.0, maxval=1.0),
                          reward=reward, done=jnp.zeros(()), key=key)


def make_match() -> Match:
    """The factory ``--env user_envs:make_match`` calls."""
    return Match()


def make_reach() -> Reach:
    return Reach()


def broken_factory():
    raise RuntimeError("no such simulator here")


def not_an_env():
    return 42


class DictObs(Reach):
    """A brax-style env whose observation is a dict: refused."""

    def reset(self, key):
        state = super().reset(key)
        return state.replace(obs={"target": state.obs})


def make_dict_obs() -> DictObs:
    return DictObs()

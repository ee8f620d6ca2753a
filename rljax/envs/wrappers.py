"""Wrappers over a batched :class:`~rljax.envs.base.Env`, generic in the backend.

A wrapper maps the fields of the ``Env`` record it is given; it relies only on backends
never reading ``state.obs`` inside ``step`` (they keep their own observation, and
``EnvState.obs`` is what the agent sees).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from rljax.envs.base import Env, EnvState, StepResult


def check_obs_indices(indices: Sequence[int], obs_shape: Sequence[int]) -> tuple[int, ...]:
    """``indices`` as a tuple of ints, refused unless they pick distinct entries of a flat
    observation of shape ``obs_shape``."""
    if len(obs_shape) != 1:
        raise ValueError(f"obs_indices selects entries of flat observations, but the task's "
                         f"observations have shape {tuple(obs_shape)}")
    try:
        out = None if isinstance(indices, str | bytes) else tuple(int(i) for i in indices)
    except (TypeError, ValueError):
        out = None
    if (out is None or not out or any(isinstance(i, bool) for i in indices)
            or any(float(i) != int(i) for i in indices)):
        raise ValueError(f"obs_indices must be a non-empty sequence of integers, such as "
                         f"(0, 2), got {indices!r}")
    if len(set(out)) != len(out) or not all(0 <= i < obs_shape[0] for i in out):
        raise ValueError(f"obs_indices must be distinct integers in [0, {obs_shape[0]}), got "
                         f"{indices!r}")
    return out


def select_obs(env: Env, indices: Sequence[int]) -> Env:
    """``env`` whose observations keep only the entries ``indices`` (the last axis) of the
    underlying flat observations: e.g. CartPole-v1 with ``(0, 2)`` sees the cart position
    and the pole angle but not their velocities, a partially observed task.

    Maps ``spec.obs_shape``, the observations of ``reset()``, ``step`` (the new state's and
    the step result's), ``state_shapes()`` and ``host_step``; works for one run's envs and
    for states with a leading member axis alike (the last axis is selected).
    """
    idx = check_obs_indices(indices, env.spec.obs_shape)
    take = np.asarray(idx, np.int32)

    def pick(obs):
        return obs[..., take]

    def reset() -> EnvState:
        state = env.reset()
        return state.replace(obs=pick(state.obs))

    def step(state: EnvState, action) -> tuple[EnvState, StepResult]:
        new, out = env.step(state, action)
        return new.replace(obs=pick(new.obs)), out._replace(obs=pick(out.obs))

    def host_step(action) -> tuple:
        obs, *rest = env.host_step(action)
        return (np.asarray(obs)[..., take], *rest)

    state_shapes = None
    if env.state_shapes is not None:
        def state_shapes() -> EnvState:
            shapes = env.state_shapes()
            obs = shapes.obs
            return shapes.replace(obs=jax.ShapeDtypeStruct(obs.shape[:-1] + (len(idx),),
                                                           obs.dtype))

    options = dict(env.spec.options)
    options["obs_indices"] = idx
    spec = dataclasses.replace(env.spec, obs_shape=(len(idx),),
                               options=tuple(sorted(options.items())))
    return env._replace(spec=spec, reset=reset, step=step, host_step=host_step,
                        state_shapes=state_shapes)

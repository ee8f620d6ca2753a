"""JAX-native environments (gymnax 1.x, Craftax): reset and stepped inside the program.

A task id names its suite before a colon: ``gymnax:CartPole-v1``,
``gymnax:Breakout-MinAtar``, ``craftax:Craftax-Classic-Symbolic-v1``. The env is a plain
JAX function of its state, so ``reset`` and ``step`` are pure and vmappable: seeds and
sweeps vmap the env itself, and a checkpoint holds the env state (a resumed run goes on
with the episodes it was in).

Episode semantics match the envpool backend's, without its reset step: an env whose
episode ends resets *in the same step*. ``StepResult.obs`` is the real final observation
(the bootstrap target of a truncated step) and the returned state's ``obs`` is the next
episode's first; every step is a transition (``valid`` is always True). Terminated stops
bootstrapping, truncated (the suite's time limit) bootstraps from the final observation.

Each env ``i`` of run ``seed`` draws from ``PRNGKey(env_seeds(seed, n)[i])``, the
envpool backend's per-env seeds, so members (the env vmapped over their seeds) and data
shards (built from their envs' seeds; :mod:`rljax.parallel.envs`) reproduce the single
run's envs. Image observations of MinAtar (``[10, 10, C]`` float) are flattened to vectors,
as PureJaxRL's MinAtar agents take them (option ``flatten=False`` keeps the grid).

A suite is one :class:`Suite` entry: how to make an env by name, how to list names, and
how to split its ``done`` into terminated and truncated. Any gymnax-shaped suite (an env
object with ``reset_env(key, params)`` and ``step_env(key, state, action, params)``)
needs only that entry.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.envs import craftax_suite
from rljax.envs.base import Env, EnvState, StepResult, resolve_seeds
from rljax.envs.craftax_suite import achievement_rates  # noqa: F401  (the driver's name for it)
from rljax.envs.spec import EnvSpec
from rljax.envs.stats import init_stats, update_stats
from rljax.types import Array

_GYMNAX_TASKS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
                 "MountainCarContinuous-v0", "Breakout-MinAtar", "Asterix-MinAtar",
                 "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Seaquest-MinAtar")
# gymnax's own "solved" lines are not published; these are gymnasium's for the same tasks.
_THRESHOLDS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "MountainCar-v0": -110.0,
               "MountainCarContinuous-v0": 90.0}
_CRAFTAX_TASKS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1",
                  "Craftax-Classic-Pixels-v1", "Craftax-Pixels-v1")
_OPTIONS = ("flatten", "max_episode_steps", "reset_ratio")
# Tasks whose every observation entry is 0 or 1 (EnvSpec.compact_obs_dtype: bool).
_BINARY_OBS = ("Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar",
               "SpaceInvaders-MinAtar")


class Suite(NamedTuple):
    """One suite of gymnax-shaped envs.

    Attributes:
        package: the Python package that provides it (for the install hint).
        tasks: the task names rljax offers (others of the suite may work too).
        make: ``make(name) -> (env, params)``.
        split_done: ``split_done(env, params, state, done) -> (terminated, truncated)`` for
            the state after a step whose ``step_env`` returned ``done``.
        time_limit: ``time_limit(params) -> int``, the episode's step limit.
        with_time_limit: ``with_time_limit(params, steps) -> params``.
        achievements: ``achievements(state) -> [K] bool`` for suites that log them (Craftax),
            with their names in ``achievement_names()``; None otherwise.
        reset_ratio: the default of the option of that name: each step draws
            ``num_envs // reset_ratio`` fresh states for the envs that ended (1: one per env;
            Craftax 16, as Craftax's own training code does, since generating a world costs
            about 20 steps).
    """

    package: str
    tasks: tuple[str, ...]
    make: Callable[[str], tuple[Any, Any]]
    split_done: Callable[..., tuple[Array, Array]]
    time_limit: Callable[[Any], int]
    with_time_limit: Callable[[Any, int], Any]
    achievements: Callable[[Any], Array] | None = None
    achievement_names: Callable[[], tuple[str, ...]] | None = None
    reset_ratio: int = 1


def _gymnax_make(name: str):
    from rljax.envs.gymnax_import import gymnax

    return gymnax().make(name)


def _gymnax_split(env, params, state, done):
    # gymnax 1.x: step_env's done is the natural end; the time limit is separate.
    return done, env.is_truncated(state, params)


SUITES: dict[str, Suite] = {
    "gymnax": Suite("gymnax", _GYMNAX_TASKS, _gymnax_make, _gymnax_split,
                    lambda p: int(p.max_steps_in_episode),
                    lambda p, n: p.replace(max_steps_in_episode=n)),
    "craftax": Suite("craftax", _CRAFTAX_TASKS, craftax_suite.make, craftax_suite.split,
                     lambda p: int(p.max_timesteps),
                     lambda p, n: p.replace(max_timesteps=n),
                     achievements=lambda s: s.achievements,
                     achievement_names=craftax_suite.achievement_names,
                     reset_ratio=16),
}


def _backend(suite_name: str, description: str, install: str | None = None):
    """The :class:`~rljax.envs.registry.Backend` record of suite ``suite_name``."""
    from rljax.envs.registry import Backend

    suite = SUITES[suite_name]
    return Backend(
        make=lambda name, *args, **options: make(f"{suite_name}:{name}", *args, **options),
        task_ids=lambda: suite.tasks,
        spec=lambda name, **options: task_spec(f"{suite_name}:{name}", **options),
        vmappable=True, package=suite.package, install=install,
        thresholds=_THRESHOLDS if suite_name == "gymnax" else {}, description=description)


def split_task_id(task_id: str) -> tuple[str, str] | None:
    """``(suite, name)`` of a JAX-native task id, None for an envpool id."""
    if not isinstance(task_id, str) or ":" not in task_id:
        return None
    suite, _, name = task_id.partition(":")
    return suite, name


def task_ids() -> list[str]:
    """Every JAX-native task id rljax offers, whether its package is installed or not."""
    return [f"{s}:{t}" for s, suite in SUITES.items() for t in suite.tasks]


def check_task(task_id: str) -> tuple[Suite, str]:
    """The suite and name of ``task_id``; ValueError naming what is allowed otherwise."""
    suite_name, name = split_task_id(task_id) or ("", "")
    if suite_name not in SUITES:
        raise ValueError(f"unknown env backend {suite_name!r} in {task_id!r}; allowed: "
                         f"{', '.join(SUITES)} (e.g. gymnax:CartPole-v1), or a bare envpool "
                         "task id")
    suite = SUITES[suite_name]
    if importlib.util.find_spec(suite.package) is None:
        raise ValueError(f"{task_id} needs the {suite.package} package: pip install "
                         f"{suite.package}")
    if name not in suite.tasks:
        close = difflib.get_close_matches(name, suite.tasks, n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(f'{suite_name}:{c}' for c in close)}?)" if (
            close) else ""
        raise ValueError(f"unknown task id {task_id!r}{hint}; {suite_name} tasks: "
                         f"{', '.join(suite.tasks)}")
    return suite, name


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: keys the caches below
class Source:
    """One task's gymnax-shaped env: everything :func:`make_from` builds envs from.

    Attributes:
        task_id: the id its envs' specs carry.
        suite: how to split its ``done`` and set its time limit.
        env: the env object (``reset_env(key, params)``, ``step_env(key, state, action,
            params)``, ``observation_space(params)``, ``action_space(params)``).
        params: the env's params.
        threshold: the mean return that counts as solved, or None.
    """

    task_id: str
    suite: Suite
    env: Any
    params: Any
    threshold: float | None = None


@functools.cache
def _source(task_id: str, max_episode_steps: int | None) -> Source:
    suite, name = check_task(task_id)
    env, params = suite.make(name)
    threshold = _THRESHOLDS.get(name) if suite.package == "gymnax" else None
    return limited(Source(task_id, suite, env, params, threshold), max_episode_steps)


@functools.cache
def limited(source: Source, max_episode_steps: int | None) -> Source:
    """``source`` with its time limit set to ``max_episode_steps`` (None: its own)."""
    if max_episode_steps is None:
        return source
    return dataclasses.replace(source, params=source.suite.with_time_limit(
        source.params, max_episode_steps))


def check_options(task_id: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` if every one is a JAX-native env's; ValueError naming a bad one."""
    for name in options:
        if name not in _OPTIONS:
            close = difflib.get_close_matches(name, _OPTIONS, n=2)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"unknown option {name!r} for {task_id}{hint}; allowed: "
                             f"{', '.join(_OPTIONS)}")
    steps = options.get("max_episode_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or steps < 1):
        raise ValueError(f"option max_episode_steps must be an integer >= 1, got {steps!r}")
    ratio = options.get("reset_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int)
                              or ratio < 1):
        raise ValueError(f"option reset_ratio must be an integer >= 1, got {ratio!r}")
    if not isinstance(options.get("flatten", True), bool):
        raise ValueError(f"option flatten must be true or false, got {options['flatten']!r}")
    return options


def task_spec(task_id: str, num_envs: int = 1, **options: Any) -> EnvSpec:
    """The :class:`EnvSpec` of a JAX-native task (no env is stepped)."""
    options = check_options(task_id, options)
    return source_spec(_source(task_id, options.get("max_episode_steps")), num_envs, options)


def source_spec(source: Source, num_envs: int, options: dict[str, Any]) -> EnvSpec:
    """The :class:`EnvSpec` of ``num_envs`` envs of ``source`` (no env is stepped)."""
    env, params = source.env, source.params
    obs_space, act_space = env.observation_space(params), env.action_space(params)
    obs_shape = tuple(int(d) for d in obs_space.shape)
    if len(obs_shape) > 1 and options.get("flatten", True):
        obs_shape = (int(np.prod(obs_shape)),)
    if hasattr(act_space, "n"):
        num_actions, action_shape, low, high = int(act_space.n), (), None, None
    else:
        num_actions, action_shape = None, tuple(int(d) for d in act_space.shape)
        size = int(np.prod(action_shape))
        low = tuple(float(x) for x in np.broadcast_to(np.asarray(act_space.low), size))
        high = tuple(float(x) for x in np.broadcast_to(np.asarray(act_space.high), size))
    return EnvSpec(task_id=source.task_id, num_envs=int(num_envs), obs_shape=obs_shape,
                   obs_dtype=np.dtype(np.float32), num_actions=num_actions,
                   action_shape=action_shape, action_low=low, action_high=high,
                   max_episode_steps=source.suite.time_limit(params),
                   reward_threshold=source.threshold,
                   is_atari=False, options=tuple(sorted(options.items())),
                   resets_in_step=True, vmappable=True,
                   compact_obs_dtype=_compact_obs_dtype(source))


def _compact_obs_dtype(source: Source) -> np.dtype | None:
    """bool for the tasks whose observations are 0/1 grids (gymnax builds them as bool
    or 0/1 integers and returns them as float32), None for the others."""
    name = source.task_id.partition(":")[2]
    return np.dtype(bool) if source.suite.package == "gymnax" and name in _BINARY_OBS else None


# The suites as env backends (rljax.envs.registry registers them under their prefixes).
BACKENDS = {
    "gymnax": _backend("gymnax", "JAX-native, stepped in the program"),
    "craftax": _backend("craftax", "JAX-native, stepped in the program",
                        install="pip install 'rljax[craftax]'"),
}


def achievement_names(task_id: str) -> tuple[str, ...] | None:
    """Names of the achievements a task's env counts (Craftax), else None."""
    parts = split_task_id(task_id)
    suite = SUITES.get(parts[0]) if parts else None
    if suite is None or suite.achievement_names is None:
        return None
    return suite.achievement_names()


@struct.dataclass
class Handle:
    """The envs' own state, every leaf ``[B, ...]``.

    Attributes:
        inner: the suite's env states.
        key: ``[B, 2]`` uint32 PRNG keys, one stream per env.
    """

    inner: Any
    key: Array


def make(task_id: str, num_envs: int = 8, seed: int | Sequence[int] = 0,
         **options: Any) -> Env:
    """Builds ``num_envs`` JAX-native envs of ``task_id`` (see the module docstring).

    ``seed`` is the run's seed or every env's own (:func:`rljax.envs.base.resolve_seeds`).
    The env is ``spec.vmappable``: its ``step`` is the same function for every seed, and
    :mod:`rljax.parallel.envs` vmaps it over members.
    """
    options = check_options(task_id, options)
    return make_from(_source(task_id, options.get("max_episode_steps")), num_envs, seed,
                     options)


def make_from(source: Source, num_envs: int, seed: int | Sequence[int],
              options: dict[str, Any]) -> Env:
    """``num_envs`` envs of ``source`` (checked ``options``, as :func:`make` takes them),
    seeded as :func:`make` seeds them; how env objects (:mod:`rljax.envs.objects`) are
    built too."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or (
            num_envs < 1):
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    n = int(num_envs)
    spec = source_spec(source, n, options)
    seeds = np.asarray(resolve_seeds(seed, n), np.int64)
    initial, step = _functions(source, n, tuple(sorted(options.items())))

    def reset() -> EnvState:
        return initial(seeds)

    def state_shapes() -> EnvState:
        return jax.eval_shape(initial, seeds)

    names = source.suite.achievement_names
    return Env(spec=spec, pool=None, reset=reset, step=step, host_step=None,
               state_shapes=state_shapes, achievement_names=None if names is None else names())


@functools.cache
def _functions(source: Source, n: int, options: tuple) -> tuple[Callable, Callable]:
    """``(initial, step)`` of ``n`` envs of ``source``: ``initial(seeds [n])`` (jitted) and
    ``step``, shared by every env built alike, whatever its seeds (members' envs compile
    their reset once)."""
    options = dict(options)
    spec = source_spec(source, n, options)
    suite, env, params = source.suite, source.env, source.params
    flat = len(spec.obs_shape) == 1
    ach = suite.achievements
    resets = max(1, n // options.get("reset_ratio", suite.reset_ratio))

    def observe(obs):
        return obs.reshape(spec.obs_shape).astype(jnp.float32) if flat else obs.astype(
            jnp.float32)

    def reset_one(key):
        key, sub = jax.random.split(key)
        obs, inner = env.reset_env(sub, params)
        return observe(obs), inner, key

    def advance(inner, key, action):
        key, k_step, k_reset = jax.random.split(key, 3)
        obs, stepped, reward, done, _ = env.step_env(k_step, inner, action, params)
        terminated, truncated = suite.split_done(env, params, stepped, done)
        achieved = ach(stepped) if ach is not None else jnp.zeros((0,), bool)
        return (stepped, key, k_reset, observe(obs), reward.astype(jnp.float32),
                terminated.astype(bool), truncated.astype(bool), achieved)

    def step_all(inner, keys, action):
        """Every env one step, then the ended ones reset from fresh states: each env its
        own (``reset_ratio`` 1), or the first ``n // reset_ratio`` envs' reset keys drawn
        and shared out in env order (Craftax's world generation costs 20x a step)."""
        stepped, keys, k_reset, final, reward, terminated, truncated, achieved = jax.vmap(
            advance)(inner, keys, action)
        ended = terminated | truncated
        first_obs, fresh = jax.vmap(env.reset_env, (0, None))(k_reset[:resets], params)
        first_obs = jax.vmap(observe)(first_obs)
        if resets < n:
            slot = jnp.clip(jnp.cumsum(ended) - 1, 0, resets - 1)
            first_obs, fresh = jax.tree.map(lambda x: x[slot], (first_obs, fresh))

        def pick(r, s):
            return jnp.where(ended.reshape((-1,) + (1,) * (s.ndim - 1)), r, s)

        inner = jax.tree.map(pick, fresh, stepped)
        return inner, keys, final, pick(first_obs, final), reward, terminated, truncated, achieved

    def initial(env_seeds: Array) -> EnvState:
        seeds = jnp.asarray(env_seeds, jnp.uint32)
        obs, inner, keys = jax.vmap(reset_one)(jax.vmap(jax.random.PRNGKey)(seeds))
        extras = None
        if ach is not None:
            k = len(suite.achievement_names())
            extras = {"achieved": jnp.zeros((k,), jnp.float32),
                      "episodes": jnp.zeros((), jnp.float32)}
        return EnvState(handle=Handle(inner=inner, key=keys), obs=obs,
                        done=jnp.zeros((n,), bool), stats=init_stats(n), extras=extras)

    def step(state: EnvState, action: Array) -> tuple[EnvState, StepResult]:
        inner, keys, final, next_obs, reward, terminated, truncated, achieved = step_all(
            state.handle.inner, state.handle.key, action)
        valid = jnp.ones_like(terminated)
        episode_end = terminated | truncated
        stats, ep_ret, ep_len = update_stats(state.stats, reward, valid, episode_end)
        extras = state.extras
        if extras is not None:
            ended = episode_end.astype(jnp.float32)
            extras = {"achieved": extras["achieved"] + ended @ achieved.astype(jnp.float32),
                      "episodes": extras["episodes"] + ended.sum()}
        new_state = EnvState(handle=Handle(inner=inner, key=keys), obs=next_obs,
                             done=episode_end, stats=stats, extras=extras)
        return new_state, StepResult(final, reward, terminated, truncated, valid, episode_end,
                                     ep_ret, ep_len, reward)

    return jax.jit(initial), step

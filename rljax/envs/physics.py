"""Physics written in JAX: Brax's envs (``brax:NAME``) and MuJoCo Playground's DM Control
suite (``playground:NAME``), reset and stepped inside the program.

Both libraries' envs are objects with ``reset(key) -> State`` and ``step(state, action) ->
State`` (``State.obs``, ``.reward``, ``.done``). rljax takes the *raw* env, without Brax's
``EpisodeWrapper``/``AutoResetWrapper`` (which fold the time limit into ``done``), and keeps
the episode itself as the other JAX-native backends do (:mod:`rljax.envs.native`):

- ``done`` of the raw env is a termination (Brax: the body fell, ``terminate_when_unhealthy``;
  Playground: a NaN in the simulation): no bootstrap;
- the time limit is rljax's own step counter (``max_episode_steps``; Brax 1000 as in brax's
  training configs, Playground its config's ``episode_length / action_repeat``): truncated,
  bootstrapped from the real final observation;
- an env whose episode ended resets in the same step from its own key stream;
  ``StepResult.obs`` is the final observation, the state's ``obs`` the next episode's first.

Actions are clipped to the bounds the spec gives, to which the agents scale their outputs:
Brax ``[-1, 1]`` for every env (its convention: inverted_pendulum, pusher and humanoid map
that onto their actuators' wider or narrower control range inside ``step``; the others'
range is ``[-1, 1]``), Playground its actuators' control range. A dict observation
(Playground's ``{"state": ..., "privileged_state": ...}`` kind) is flattened by
concatenating its entries' raveled arrays in sorted key order. The envs' states (physics
data, key, step count) are part of ``EnvState`` and so of a checkpoint: a resumed run
continues its episodes.

Options: ``max_episode_steps``; Brax ``backend`` (its physics pipeline: ``positional``,
the default, ``generalized``, ``spring`` or ``mjx``; swimmer runs only on, and defaults
to, ``generalized``); Playground ``impl`` (``jax``, the default, the MJX implementation
that runs anywhere; ``warp`` needs an NVIDIA GPU).
Playground's locomotion and manipulation robots are downloaded on first load (mujoco
menagerie), so they are refused with that reason; the DM Control suite's models ship with
the package.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.envs.base import Env, EnvState, StepResult, resolve_seeds
from rljax.envs.spec import EnvSpec
from rljax.envs.stats import init_stats, update_stats
from rljax.types import Array

BRAX_TASKS = ("ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup",
              "inverted_pendulum", "inverted_double_pendulum", "pusher", "reacher", "swimmer",
              "walker2d")
BRAX_PIPELINES = ("positional", "generalized", "spring", "mjx")
PLAYGROUND_TASKS = ("AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance",
                    "CartpoleBalanceSparse", "CartpoleSwingup", "CartpoleSwingupSparse",
                    "CheetahRun", "FingerSpin", "FingerTurnEasy", "FingerTurnHard", "FishSwim",
                    "HopperHop", "HopperStand", "HumanoidRun", "HumanoidStand", "HumanoidWalk",
                    "PendulumSwingup", "PointMass", "ReacherEasy", "ReacherHard",
                    "SwimmerSwimmer6", "WalkerRun", "WalkerStand", "WalkerWalk")
PLAYGROUND_IMPLS = ("jax", "warp")
BRAX_EPISODE_STEPS = 1000  # brax's training configs' episode_length
# "Solved" lines rljax uses (no library publishes one): about the return of a policy that
# holds the goal for most of an episode; docs/environments.md gives the random baselines.
THRESHOLDS = {"brax:inverted_pendulum": 950.0, "playground:CartpoleBalance": 900.0,
              "playground:ReacherEasy": 800.0}


class Suite(NamedTuple):
    """One library of brax-style envs.

    Attributes:
        package: the Python package (the pip extra has the same name).
        tasks: the task names offered.
        options: the options ``make(name, **options)`` takes, with their allowed values
            (None: any positive integer).
        make: ``make(name, options) -> env``, a brax-style env object.
        time_limit: ``time_limit(env) -> int``, the default ``max_episode_steps``.
        refuse: ``refuse(name) -> reason | None`` for names the library has but rljax
            cannot offer here.
    """

    package: str
    tasks: tuple[str, ...]
    options: dict[str, tuple[str, ...] | None]
    make: Callable[[str, dict], Any]
    time_limit: Callable[[Any], int]
    refuse: Callable[[str], str | None]


BRAX_ONLY_PIPELINE = {"swimmer": "generalized"}  # brax's swimmer refuses the others


def _brax_make(name: str, options: dict) -> Any:
    import warnings

    from brax import envs as brax_envs

    only = BRAX_ONLY_PIPELINE.get(name)
    backend = options.get("backend", only or "positional")
    if only is not None and backend != only:
        raise ValueError(f"brax:{name} runs only on brax's {only} pipeline, got "
                         f"backend={backend!r}")
    with warnings.catch_warnings():  # brax 0.14 warns on every env that it is unmaintained
        warnings.filterwarnings("ignore", message=".*not actively being maintained.*")
        return brax_envs.get_environment(name, backend=backend)


def _playground_make(name: str, options: dict) -> Any:
    from mujoco_playground import registry

    return registry.load(name, config_overrides={"impl": options.get("impl", "jax")})


def _playground_limit(env: Any) -> int:
    config = env._config  # noqa: SLF001 - Playground keeps the episode length only there
    return int(config.episode_length) // int(config.get("action_repeat", 1))


def _playground_refuse(name: str) -> str | None:
    from mujoco_playground import locomotion, manipulation

    if name in locomotion.ALL_ENVS or name in manipulation.ALL_ENVS:
        return (f"playground:{name} is a Playground locomotion/manipulation task whose robot "
                "model is downloaded on first load (mujoco_menagerie), which this offline "
                f"backend cannot do; playground tasks: {', '.join(PLAYGROUND_TASKS)}")
    return None


SUITES: dict[str, Suite] = {
    "brax": Suite("brax", BRAX_TASKS, {"backend": BRAX_PIPELINES, "max_episode_steps": None},
                  _brax_make, lambda env: BRAX_EPISODE_STEPS, lambda name: None),
    "playground": Suite("playground", PLAYGROUND_TASKS,
                        {"impl": PLAYGROUND_IMPLS, "max_episode_steps": None},
                        _playground_make, _playground_limit, _playground_refuse),
}
_MODULES = {"brax": "brax", "playground": "mujoco_playground"}


def _backend(prefix: str, description: str):
    """The :class:`~rljax.envs.registry.Backend` record of suite ``prefix``."""
    from rljax.envs.registry import Backend

    suite = SUITES[prefix]
    return Backend(
        make=lambda name, *args, **options: make(f"{prefix}:{name}", *args, **options),
        task_ids=lambda: suite.tasks,
        spec=lambda name, **options: task_spec(f"{prefix}:{name}", **options),
        vmappable=True, package=_MODULES[prefix],
        install=f"pip install 'rljax[{suite.package}]'",
        thresholds={k.partition(":")[2]: v for k, v in THRESHOLDS.items()
                    if k.startswith(f"{prefix}:")},
        description=description)


def task_ids() -> list[str]:
    """Every ``brax:`` and ``playground:`` task id rljax offers."""
    return [f"{s}:{t}" for s, suite in SUITES.items() for t in suite.tasks]


def check_task(task_id: str, options: dict[str, Any] | None = None) -> tuple[Suite, str]:
    """The suite and name of ``task_id`` with valid ``options``; ValueError naming what is
    allowed otherwise (an unknown task with close matches, a missing package)."""
    prefix, _, name = task_id.partition(":")
    suite = SUITES[prefix]
    if importlib.util.find_spec(_MODULES[prefix]) is None:
        raise ValueError(f"{task_id} needs the {_MODULES[prefix]} package: pip install "
                         f"'rljax[{suite.package}]'")
    if name not in suite.tasks:
        reason = suite.refuse(name)
        if reason is not None:
            raise ValueError(reason)
        close = difflib.get_close_matches(name, suite.tasks, n=3, cutoff=0.4) or [
            t for t in suite.tasks if name.lower() and name.lower() in t.lower()][:3]
        hint = f" (did you mean {', '.join(f'{prefix}:{c}' for c in close)}?)" if close else ""
        raise ValueError(f"unknown task id {task_id!r}{hint}; {prefix} tasks: "
                         f"{', '.join(suite.tasks)}")
    for key, value in (options or {}).items():
        if key not in suite.options:
            close = difflib.get_close_matches(key, list(suite.options), n=2)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"unknown option {key!r} for {task_id}{hint}; allowed: "
                             f"{', '.join(suite.options)}")
        allowed = suite.options[key]
        if allowed is None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
            raise ValueError(f"option {key} must be an integer >= 1, got {value!r}")
        if allowed is not None and value not in allowed:
            raise ValueError(f"option {key} of {task_id} must be one of "
                             f"{', '.join(allowed)}, got {value!r}")
    return suite, name


@functools.cache
def _env(task_id: str, options: tuple) -> Any:
    suite, name = check_task(task_id, dict(options))
    return suite.make(name, {k: v for k, v in options if k != "max_episode_steps"})


def _make_options(options: tuple) -> tuple:
    """The options that choose the env object (the time limit is rljax's own)."""
    return tuple((k, v) for k, v in options if k != "max_episode_steps")


def flatten_obs(obs: Any) -> Array:
    """One observation as a float32 vector: an array raveled, a dict's entries raveled and
    concatenated in sorted key order."""
    if isinstance(obs, dict):
        return jnp.concatenate([flatten_obs(obs[k]) for k in sorted(obs)])
    return jnp.ravel(obs).astype(jnp.float32)


def _bounds(env: Any) -> tuple[np.ndarray, np.ndarray]:
    """The action bounds ``(low [A], high [A])``: Playground's actuators' control range
    (MuJoCo clips ``ctrl`` to it); ``[-1, 1]`` for anything else, Brax's convention: its
    envs map ``[-1, 1]`` onto a wider control range themselves (inverted_pendulum's
    ``[-3, 3]``, pusher's ``[-2, 2]``, humanoid's ``[-0.4, 0.4]``) and its pipeline clips
    the rest to ``[-1, 1]``."""
    size = int(env.action_size)
    rng = None
    if hasattr(env, "mj_model"):  # Playground
        model = env.mj_model
        rng = np.where(np.asarray(model.actuator_ctrllimited, bool)[:, None],
                       np.asarray(model.actuator_ctrlrange, np.float64), [-1.0, 1.0])
    if rng is None or rng.shape != (size, 2) or not np.all(rng[:, 0] < rng[:, 1]):
        rng = np.tile([-1.0, 1.0], (size, 1))
    return rng[:, 0], rng[:, 1]


def task_spec(task_id: str, num_envs: int = 1, **options: Any) -> EnvSpec:
    """The :class:`EnvSpec` of a brax/playground task (no env is stepped)."""
    suite, _ = check_task(task_id, options)
    key = tuple(sorted(options.items()))
    env = _env(task_id, _make_options(key))
    return object_spec(task_id, env, num_envs,
                       options.get("max_episode_steps") or suite.time_limit(env),
                       THRESHOLDS.get(task_id), key)


def object_spec(task_id: str, env: Any, num_envs: int, max_episode_steps: int,
                threshold: float | None = None, options: tuple = ()) -> EnvSpec:
    """The :class:`EnvSpec` of ``num_envs`` copies of a brax-style ``env`` object (one
    ``reset`` traced, none run): flattened observations, the actuators' bounds."""
    obs = jax.eval_shape(lambda k: flatten_obs(env.reset(k).obs), jax.random.PRNGKey(0))
    low, high = _bounds(env)
    return EnvSpec(task_id=task_id, num_envs=int(num_envs), obs_shape=tuple(obs.shape),
                   obs_dtype=np.dtype(np.float32), num_actions=None,
                   action_shape=(int(env.action_size),),
                   action_low=tuple(float(x) for x in low),
                   action_high=tuple(float(x) for x in high),
                   max_episode_steps=int(max_episode_steps), reward_threshold=threshold,
                   is_atari=False, options=options, resets_in_step=True, vmappable=True)


@struct.dataclass
class Handle:
    """The envs' own state, every leaf ``[B, ...]``.

    Attributes:
        inner: the library's env states (physics data, its own ``info`` and metrics).
        key: ``[B, 2]`` uint32 PRNG keys, one stream per env (resets draw from it).
        t: ``[B]`` int32 steps taken in the current episode (rljax's time limit).
    """

    inner: Any
    key: Array
    t: Array


def make(task_id: str, num_envs: int = 8, seed: int | Sequence[int] = 0,
         **options: Any) -> Env:
    """Builds ``num_envs`` envs of a ``brax:`` or ``playground:`` task (module docstring).

    Env ``i`` draws from ``PRNGKey(seeds[i])`` with the per-env seeds of
    :func:`rljax.envs.base.resolve_seeds`, like every backend; the env is vmappable.
    """
    n = int(num_envs)
    if n < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    spec = task_spec(task_id, n, **options)
    return object_env(spec, seed, _functions(task_id, n, spec.options))


def object_env(spec: EnvSpec, seed: int | Sequence[int],
               functions: tuple[Callable, Callable]) -> Env:
    """The :class:`Env` of ``spec.num_envs`` envs seeded by ``seed`` (a run's seed or every
    env's own) from :func:`brax_style_functions`' ``(initial, step)``."""
    initial, step = functions
    seeds = np.asarray(resolve_seeds(seed, spec.num_envs), np.int64)

    def state_shapes() -> EnvState:
        return jax.eval_shape(initial, seeds)

    return Env(spec=spec, pool=None, reset=lambda: initial(seeds), step=step, host_step=None,
               state_shapes=state_shapes)


@functools.cache
def _functions(task_id: str, n: int, options: tuple) -> tuple[Callable, Callable]:
    """``(initial, step)`` for ``n`` envs: ``initial(seeds [n])`` (jitted) and ``step``."""
    spec = task_spec(task_id, n, **dict(options))
    env = _env(task_id, _make_options(options))
    return brax_style_functions(env, n, spec.max_episode_steps,
                                jnp.asarray(spec.action_low, jnp.float32),
                                jnp.asarray(spec.action_high, jnp.float32))


def brax_style_functions(env: Any, n: int, limit: int, low: Array,
                         high: Array) -> tuple[Callable, Callable]:
    """``(initial, step)`` of ``n`` copies of a brax-style ``env`` (``reset(key)``,
    ``step(state, action)``, ``State.obs/.reward/.done``) with rljax's episode rules:
    ``done`` terminates, ``limit`` steps truncate, ended envs reset in the step."""

    def reset_one(key):
        inner = env.reset(key)
        return flatten_obs(inner.obs), inner

    def advance(inner, key, t, action):
        key, k_reset = jax.random.split(key)
        stepped = env.step(inner, jnp.clip(action, low, high))
        terminated = jnp.asarray(stepped.done) > 0  # brax: a Python float at times
        t = t + 1
        truncated = (t >= limit) & ~terminated
        return (stepped, key, k_reset, t, flatten_obs(stepped.obs),
                jnp.asarray(stepped.reward, jnp.float32), terminated, truncated)

    def step_all(inner, keys, t, action):
        """Every env one step; if any episode ended, every env draws a fresh state from its
        own reset key and the ended ones take it; the draw is skipped on steps where none
        ended (the physics' reset costs about a step). Every env splits its key each step
        whether it resets or not, so an env's stream is its own, whatever its batch."""
        stepped, keys, k_reset, t, final, reward, terminated, truncated = jax.vmap(advance)(
            inner, keys, t, action)
        ended = terminated | truncated
        first_obs, fresh = jax.lax.cond(
            ended.any(), jax.vmap(reset_one), lambda k: (final, stepped), k_reset)

        def pick(r, s):
            return jnp.where(ended.reshape((-1,) + (1,) * (s.ndim - 1)), r, s)

        inner = jax.tree.map(pick, fresh, stepped)
        return (inner, keys, jnp.where(ended, 0, t), final, pick(first_obs, final), reward,
                terminated, truncated)

    def initial(env_seeds: Array) -> EnvState:
        keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(env_seeds, jnp.uint32))
        keys, first = jax.vmap(jax.random.split, out_axes=1)(keys)
        obs, inner = jax.vmap(reset_one)(first)
        return EnvState(handle=Handle(inner=inner, key=keys, t=jnp.zeros((n,), jnp.int32)),
                        obs=obs, done=jnp.zeros((n,), bool), stats=init_stats(n))

    def step(state: EnvState, action: Array) -> tuple[EnvState, StepResult]:
        h = state.handle
        inner, keys, t, final, next_obs, reward, terminated, truncated = step_all(
            h.inner, h.key, h.t, action)
        valid = jnp.ones_like(terminated)
        episode_end = terminated | truncated
        stats, ep_ret, ep_len = update_stats(state.stats, reward, valid, episode_end)
        new_state = EnvState(handle=Handle(inner=inner, key=keys, t=t), obs=next_obs,
                             done=episode_end, stats=stats)
        return new_state, StepResult(final, reward, terminated, truncated, valid, episode_end,
                                     ep_ret, ep_len, reward)

    return jax.jit(initial), step


BACKENDS = {
    "brax": _backend("brax", "Brax's physics in JAX, stepped in the program"),
    "playground": _backend("playground", "MuJoCo Playground's DM Control suite (MJX), "
                                         "stepped in the program"),
}

"""A user's env object as a task id: ``rljax.train(..., env=OBJ)``, ``--env module:factory``.

Three kinds of object are adapted, once, into the :class:`~rljax.envs.Env` contract:

* a gymnax 1.x ``Environment`` (``reset_env`` / ``step_env``, its ``default_params``
  unless ``env_params`` is given), a user's own subclass included: stepped by
  :mod:`rljax.envs.native` exactly as gymnax's own envs;
* a brax-style env (``reset(key)`` / ``step(state, action)``, :mod:`rljax.envs.brax_style`),
  with the time limit ``max_episode_steps`` kept apart from termination;
* an rljax ``Env`` as built (one run's envs, seeded by whoever built it).

An object given to the API becomes the task ``object:NAME`` of the ``object`` backend
(:data:`BACKEND`) while the process lives; a run's record stores that id and the object's
spaces (option ``spaces``), so a resume needs the object again and refuses one of other
spaces. A factory named ``module:callable`` is a task id of its own: the registry
(:func:`rljax.envs.registry.lookup`) calls it when no backend has the prefix, so a run
record holding it rebuilds the env in any process.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import jax

from rljax.envs import brax_style, native
from rljax.envs.base import Env
from rljax.envs.registry import Backend

PREFIX = "object"
KINDS = ("a gymnax Environment (reset_env/step_env), a brax-style env (reset(key), "
         "step(state, action), observation_size, action_size) or an rljax.envs.Env")
_OBJECTS: dict[str, Backend] = {}  # name -> the object's own one-task backend


def kind(obj: Any) -> str:
    """``"gymnax"``, ``"brax"`` or ``"rljax"``; ValueError naming what an env must be."""
    if isinstance(obj, Env):
        return "rljax"
    if all(callable(getattr(obj, m, None)) for m in ("reset_env", "step_env",
                                                      "observation_space", "action_space")):
        return "gymnax"
    if brax_style.is_brax_style(obj):
        return "brax"
    raise ValueError(f"env {_short(obj)} is not an env rljax can adapt: give {KINDS}")


def _short(obj: Any) -> str:
    text = repr(obj).splitlines()[0] if repr(obj) else type(obj).__name__
    return text if len(text) <= 60 else f"<{type(obj).__name__} object>"


def backend_of(obj: Any, task_id: str, env_params: Any = None,
               threshold: float | None = None) -> Backend:
    """``obj`` adapted as a backend of one task, ``task_id``, made by any name.

    Raises:
        ValueError: ``obj`` is no kind of env (:func:`kind`), ``env_params`` given for an
            env that takes none, or an observation that is not one array.
    """
    what = kind(obj)
    if env_params is not None and what != "gymnax":
        raise ValueError(f"env_params applies to a gymnax Environment; {_short(obj)} is "
                         f"{'a brax-style env' if what == 'brax' else 'an rljax Env'}")
    if what == "rljax":
        return _env_backend(obj, task_id)
    if what == "gymnax":
        params = obj.default_params if env_params is None else env_params
        if threshold is None:  # gymnax's own task by its name: the threshold of its id
            threshold = native._THRESHOLDS.get(str(getattr(obj, "name", "")))
        source = native.Source(task_id, native.SUITES["gymnax"], obj, params, threshold)
    else:
        source = brax_style.source(obj, task_id, threshold=threshold)
    _check_observation(source)
    spaces = describe_spaces(native.source_spec(source, 1, {}))

    def make(name: str, num_envs: int, seed: Any, **options: Any) -> Env:
        options = _checked(options, spaces)
        return native.make_from(native.limited(source, options.get("max_episode_steps")),
                                num_envs, seed, options)

    def spec(name: str, **options: Any):
        options = _checked(options, spaces)
        return native.source_spec(native.limited(source, options.get("max_episode_steps")),
                                  1, options)

    return Backend(make=make, task_ids=lambda: (task_id.partition(":")[2],), spec=spec,
                   vmappable=True, description=f"{what} env object")


def _check_observation(source: native.Source) -> None:
    """Refuses an env whose reset gives anything but one array as the observation."""
    obs, _ = jax.eval_shape(source.env.reset_env, jax.random.PRNGKey(0), source.params)
    if not isinstance(obs, jax.ShapeDtypeStruct):
        raise ValueError(f"env {type(source.env).__name__}'s observation must be one array, "
                         f"got {type(obs).__name__} (flatten it in the env)")


def describe_spaces(spec) -> str:
    """An env's spaces in words: what a resumed run's env must have again."""
    actions = (f"{spec.num_actions} actions" if spec.discrete else
               f"actions {spec.action_shape} in [{min(spec.action_low):g}, "
               f"{max(spec.action_high):g}]")
    return f"obs {spec.obs_shape}, {actions}"


def _checked(options: dict[str, Any], spaces: str) -> dict[str, Any]:
    """``options`` without ``spaces``, after checking it names the object's spaces."""
    options = dict(options)
    recorded = options.pop("spaces", None)
    if recorded is not None and recorded != spaces:
        raise ValueError(f"the run's env had {recorded}; this env object has {spaces}")
    return native.check_options("an env object", options)


def _env_backend(env: Env, task_id: str) -> Backend:
    """An rljax Env as built: one run's envs, refused where a run asks for others."""
    def make(name: str, num_envs: int, seed: Any, **options: Any) -> Env:
        options.pop("spaces", None)
        if options or num_envs != env.spec.num_envs or not isinstance(seed, int):
            raise ValueError(
                f"an rljax Env object is {env.spec.num_envs} envs seeded as it was built: it "
                f"serves one run of num_envs={env.spec.num_envs} without options, seeds, "
                "sweeps, devices or evaluation envs (give a gymnax or brax-style env, or "
                "register a Backend, for those)")
        return env

    return Backend(make=make, task_ids=lambda: (task_id.partition(":")[2],),
                   spec=lambda name, **options: env.spec, vmappable=False,
                   description="rljax Env object")


def add(obj: Any, env_params: Any = None, threshold: float | None = None
        ) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """Makes ``obj`` the task ``object:NAME`` (``NAME`` its ``name`` or class name,
    replacing an earlier object of that name); returns the id and the options a run
    records: the object's spaces."""
    name = getattr(obj, "name", None)
    name = name if isinstance(name, str) and name and ":" not in name else type(obj).__name__
    task_id = f"{PREFIX}:{name}"
    backend = backend_of(obj, task_id, env_params, threshold)
    _OBJECTS[name] = backend
    spec = backend.spec(name)
    return task_id, (("spaces", describe_spaces(spec)),)


def _object(name: str) -> Backend:
    if name not in _OBJECTS:
        raise ValueError(f"the run's env was the env object {PREFIX}:{name}, which this "
                         f"process has not been given: pass it again, "
                         f"rljax.train(resume=RUN_DIR, env=OBJ)")
    return _OBJECTS[name]


# The backend of every object given in this process (rljax.envs.registry registers it).
BACKEND = Backend(
    make=lambda name, *args, **options: _object(name).make(name, *args, **options),
    task_ids=lambda: tuple(_OBJECTS),
    spec=lambda name, **options: _object(name).spec(name, **options),
    vmappable=True, description="env objects given to rljax.train(env=...) in this process")


@functools.cache
def factory_backend(prefix: str, name: str, known: tuple[str, ...]) -> Backend:
    """The backend of the env that ``prefix.name()`` returns (a task id
    ``module:callable``), called once per process.

    Raises:
        ValueError: no such module (naming the registered backends), no such callable,
            the factory raised, or returned no kind of env.
    """
    task_id = f"{prefix}:{name}"
    try:
        found = importlib.util.find_spec(prefix) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"unknown env backend {prefix!r} in {task_id!r}; allowed: "
                         f"{', '.join(known)} (e.g. gymnax:CartPole-v1), a bare envpool task "
                         f"id, or module:callable of an env factory")
    try:
        factory = getattr(importlib.import_module(prefix), name, None)
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        raise ValueError(f"env factory {task_id}: importing {prefix} raised "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    if not callable(factory):
        raise ValueError(f"env factory {task_id}: module {prefix} has no callable {name!r}")
    try:
        obj = factory()
    except Exception as e:  # noqa: BLE001 - the user's factory failed
        raise ValueError(f"env factory {task_id} raised {type(e).__name__}: "
                         f"{_first_line(e)}") from None
    return backend_of(obj, task_id)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else "(no message)"

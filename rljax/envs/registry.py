"""Env backends as records in one table: ``register(prefix, backend)``.

A task id names its backend by a prefix before a colon (``gymnax:CartPole-v1``); a bare
id (``CartPole-v1``) is the backend registered under the empty prefix, envpool. Every
question the library asks of a task id (make, vmappable, check, threshold, the list of
ids) is one lookup here, :func:`lookup`, and then a field of the :class:`Backend` record.
envpool, gymnax and craftax are registered below exactly as a user registers their own
(docs/environments.md shows a complete one outside rljax)::

    rljax.envs.register("mine", rljax.envs.Backend(
        make=make_mine, task_ids=lambda: ("Maze-v0",), spec=spec_of_mine))
    rljax.train("cartpole-ppo", env="mine:Maze-v0")

A prefix that names no backend but an importable module is a factory: ``--env
my_pkg.envs:make_maze`` calls ``my_pkg.envs.make_maze()`` and adapts the env object it
returns (:mod:`rljax.envs.objects`), so a run record holding that id rebuilds the env.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from rljax.envs.base import Env
from rljax.envs.spec import EnvSpec

NO_THRESHOLDS: Mapping[str, float] = MappingProxyType({})


class Backend(NamedTuple):
    """How the task ids of one prefix become envs.

    Attributes:
        make: ``make(name, num_envs, seed, **options) -> Env``: ``num_envs`` envs of task
            ``name`` (the id without its prefix); ``seed`` is a run's seed or a sequence of
            every env's own (:func:`rljax.envs.base.resolve_seeds`).
        task_ids: ``task_ids() -> names``: the tasks the backend offers (``rljax envs``
            lists them; others may work too).
        spec: ``spec(name, **options) -> EnvSpec`` of one env, without stepping one;
            raises ValueError naming what is allowed for an unknown name or option.
        vmappable: ``make``'s envs are plain JAX functions of their state, so seeds and
            sweeps vmap one run's env (False: one env of every member's envs is asked of
            ``make``, each env seeded as in its own run, as envpool does).
        package: the Python package the backend needs (None: nothing beyond rljax); when
            it is not importable, using the backend says ``needs the X package: INSTALL``.
        install: that command (default ``pip install X``; craftax's ``pip install
            'rljax[craftax]'``).
        thresholds: ``{name: mean return}`` that counts as solved, over ``spec``'s
            ``reward_threshold``.
        description: one line for ``rljax envs``.
    """

    make: Callable[..., Env]
    task_ids: Callable[[], Sequence[str]]
    spec: Callable[..., EnvSpec]
    vmappable: bool = True
    package: str | None = None
    install: str | None = None
    thresholds: Mapping[str, float] = NO_THRESHOLDS
    description: str = ""


_BACKENDS: dict[str, Backend] = {}
_BUILTIN = ("", "gymnax", "craftax", "object", "brax", "playground")


def register(prefix: str, backend: Backend) -> None:
    """Makes ``prefix:NAME`` task ids mean ``backend``'s task ``NAME`` (``""``: bare ids).

    Registering a prefix again replaces its backend (a module reloaded, a test's own).

    Raises:
        ValueError: a prefix that is not a string without ``:``, or a backend that is not
            a :class:`Backend`.
    """
    if not isinstance(prefix, str) or ":" in prefix or prefix != prefix.strip():
        raise ValueError(f"an env backend's prefix must be a string without ':' or spaces "
                         f"around it, got {prefix!r}")
    if not isinstance(backend, Backend):
        raise ValueError(f"register({prefix!r}, ...) takes an rljax.envs.Backend record, got "
                         f"{type(backend).__name__}")
    _BACKENDS[prefix] = backend


def backends() -> dict[str, Backend]:
    """Every registered backend by prefix (the built-in ones first)."""
    _ensure_builtin()
    order = [p for p in _BUILTIN] + [p for p in _BACKENDS if p not in _BUILTIN]
    return {p: _BACKENDS[p] for p in order}


def lookup(task_id: str) -> tuple[Backend, str]:
    """``(backend, name)`` of ``task_id``: the one place a task id is taken apart.

    Raises:
        ValueError: not a string, an unknown prefix (naming the registered ones), or a
            backend whose package is not installed.
    """
    _ensure_builtin()
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"a task id must be a non-empty string, got {task_id!r}")
    prefix, sep, name = task_id.partition(":")
    if not sep:  # a bare id
        prefix, name = "", task_id
    backend = _BACKENDS.get(prefix)
    if backend is None:  # module:callable, an env factory (or an unknown prefix)
        from rljax.envs import objects

        backend = objects.factory_backend(prefix, name, tuple(p for p in backends() if p))
    if backend.package is not None and importlib.util.find_spec(backend.package) is None:
        raise ValueError(f"{task_id} needs the {backend.package} package: "
                         f"{install_command(backend)}")
    return backend, name


def install_command(backend: Backend) -> str:
    """The command that installs ``backend``'s package."""
    return backend.install or f"pip install {backend.package}"


def check_name(task_id: str, name: str, names: Sequence[str]) -> None:
    """Refuses ``name`` unless it is one of ``names``, suggesting close matches (for
    backends whose ``spec`` accepts only the tasks they list)."""
    if name in names:
        return
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.4)
    prefix = task_id[: len(task_id) - len(name)]
    hint = f" (did you mean {', '.join(prefix + c for c in close)}?)" if close else ""
    raise ValueError(f"unknown task id {task_id!r}{hint}; {prefix[:-1] or 'these'} tasks: "
                     f"{', '.join(names)}")


def _ensure_builtin() -> None:
    """Registers envpool, gymnax, craftax, the env objects' backend, brax and playground
    on first use, unless a user's registration already took the prefix."""
    if all(p in _BACKENDS for p in _BUILTIN):
        return
    from rljax.envs import native, objects, physics, pool

    builtin: dict[str, Any] = {"": pool.BACKEND, **native.BACKENDS,
                               objects.PREFIX: objects.BACKEND, **physics.BACKENDS}
    for prefix, backend in builtin.items():
        _BACKENDS.setdefault(prefix, backend)

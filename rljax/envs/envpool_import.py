"""Imports envpool's registry with only the task families a run needs.

``import envpool`` registers every family it ships, and some registrations import a great
deal: Jumanji's imports its renderer, and with it ``matplotlib.pyplot`` (1.5-3 s of a
CartPole run's start-up on two cores, more under load). Here the package is loaded
without running its ``__init__``: its registry and the light families below are imported
first, and the rest only when a task id is not among them (or when all ids are asked
for). A later ``import envpool`` anywhere gets the same module, and any attribute it reads
(``envpool.make``, ``envpool.__version__``) finishes the import there and then, so envpool
behaves as if imported whole. If envpool's layout is not the one this expects, the
package is imported whole as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

# Families whose registration imports nothing heavy (their ids: CartPole-v1, Breakout-v5,
# LunarLander-v3, FrozenLake-v1, HalfCheetah-v5, ...).
LIGHT_FAMILIES = ("classic_control", "atari", "box2d", "toy_text", "mujoco.gym")

_lock = threading.RLock()
_complete = False


def registry(task_id: str | None = None) -> Any:
    """envpool's registry module (``make``, ``make_spec``, ``list_all_envs``) with
    ``task_id``'s family registered; with no ``task_id``, every family.

    Raises:
        ImportError: envpool is not installed.
    """
    with _lock:
        if not _complete and "envpool" not in sys.modules:
            _load_light()
        registration = sys.modules.get("envpool.registration")
        if registration is None or task_id is None or task_id not in _known(registration):
            import_whole()
            registration = sys.modules["envpool.registration"]
        return registration


def import_whole() -> ModuleType:
    """``import envpool``, finishing a light import if one was made."""
    global _complete
    with _lock:
        module = sys.modules.get("envpool")
        if module is not None and "__getattr__" in vars(module):
            del module.__getattr__  # run the package's own __init__ in the same module
            module.__spec__.loader.exec_module(module)
        import envpool

        _complete = True
        return envpool


def _known(registration: ModuleType) -> Any:
    return getattr(getattr(registration, "registry", None), "specs", ())


def _load_light() -> None:
    spec = importlib.util.find_spec("envpool")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        import_whole()  # raises the usual ImportError where envpool is missing
        return
    module = importlib.util.module_from_spec(spec)
    module.__getattr__ = _finish  # PEP 562: the first other attribute imports the rest
    sys.modules["envpool"] = module
    try:
        glfw = importlib.import_module("envpool.python.glfw_context")
        glfw.preload_windows_gl_dlls()  # as envpool's __init__ does first
        importlib.import_module("envpool.registration")
        for family in LIGHT_FAMILIES:
            importlib.import_module(f"envpool.{family}.registration")
    except Exception:  # noqa: BLE001 - another envpool layout: import it the usual way
        for name in [n for n in sys.modules if n == "envpool" or n.startswith("envpool.")]:
            del sys.modules[name]
        import_whole()


def _finish(name: str) -> Any:
    return getattr(import_whole(), name)

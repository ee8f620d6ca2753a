"""Imports gymnax with its plotting modules deferred until a renderer uses them.

``import gymnax`` imports every environment it ships, and two of them (misc's Pong and
Rooms) import ``matplotlib.pyplot`` and ``seaborn`` at the top of their modules for their
renderers; seaborn brings ``scipy.stats``. That is 2.5-3.5 s of a gymnax run's start-up
on two cores (gymnax's import 3.7-5.1 s whole, 1.2-1.5 s without them). Here, while gymnax
is imported, each of those two modules that is not imported yet is stood in for by a
module object that imports the real one on the first attribute read (a renderer's
``plt.figure``); the stand-ins leave ``sys.modules`` once gymnax is in, so any later
``import seaborn`` is the real import, and gymnax's renderers work as before.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType

DEFERRED = ("matplotlib.pyplot", "seaborn")

_lock = threading.Lock()


class _OnFirstUse(ModuleType):
    """Stands in for a module: the first attribute read imports the real one."""

    def __getattr__(self, attr: str):
        with _lock:
            real = sys.modules.get(self.__name__)
            if real is None or real is self:
                sys.modules.pop(self.__name__, None)
                real = importlib.import_module(self.__name__)
        return getattr(real, attr)


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def gymnax() -> ModuleType:
    """The ``gymnax`` package, imported with :data:`DEFERRED` left for its renderers.

    Raises:
        ImportError: gymnax (or a module it needs) is not installed.
    """
    with _lock:
        if "gymnax" in sys.modules:
            return sys.modules["gymnax"]
        stand_ins = []
        for name in DEFERRED:
            if name not in sys.modules and _findable(name):
                sys.modules[name] = _OnFirstUse(name)
                stand_ins.append(sys.modules[name])
        try:
            return importlib.import_module("gymnax")
        finally:
            for module in stand_ins:
                if sys.modules.get(module.__name__) is module:
                    del sys.modules[module.__name__]

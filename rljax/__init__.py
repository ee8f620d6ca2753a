"""rljax: deep reinforcement-learning agents as pure JAX functions."""

__version__ = "0.1.0"

from rljax.api import Run
from rljax.api import evaluate
from rljax.api import load
from rljax.api import train
from rljax.config import RunConfig
from rljax.presets import PRESETS
from rljax.presets import Preset
from rljax.training.multihost import initialize as initialize_distributed

__all__ = [
    "PRESETS",
    "Preset",
    "Run",
    "RunConfig",
    "__version__",
    "evaluate",
    "initialize_distributed",
    "load",
    "train",
]

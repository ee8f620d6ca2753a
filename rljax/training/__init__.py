"""Compiled training loops and the host driver."""

from rljax.training.loop import LoopState
from rljax.training.loop import Trainer
from rljax.training.on_policy import make_on_policy_trainer

__all__ = [
    "LoopState",
    "Trainer",
    "make_on_policy_trainer",
]

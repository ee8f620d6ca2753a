"""Replay memory: uniform, prioritized, n-step and Atari frame-stack buffers as pure functions."""

from rljax.buffers import atari as atari
from rljax.buffers import nstep as nstep
from rljax.buffers import prioritized as prioritized
from rljax.buffers import replay as replay
from rljax.buffers import sum_tree as sum_tree
from rljax.buffers.atari import AtariBuffer as AtariBuffer
from rljax.buffers.atari import AtariState as AtariState
from rljax.buffers.atari import make_atari_replay as make_atari_replay
from rljax.buffers.nstep import NStep as NStep
from rljax.buffers.nstep import NStepState as NStepState
from rljax.buffers.nstep import NStepTransition as NStepTransition
from rljax.buffers.nstep import make_nstep as make_nstep
from rljax.buffers.prioritized import PrioritizedBuffer as PrioritizedBuffer
from rljax.buffers.prioritized import PrioritizedSample as PrioritizedSample
from rljax.buffers.prioritized import PrioritizedState as PrioritizedState
from rljax.buffers.prioritized import make_prioritized as make_prioritized
from rljax.buffers.replay import ReplayBuffer as ReplayBuffer
from rljax.buffers.replay import ReplaySample as ReplaySample
from rljax.buffers.replay import ReplayState as ReplayState
from rljax.buffers.replay import make_replay as make_replay
from rljax.buffers.sum_tree import SumTreeState as SumTreeState

__all__ = [
    "AtariBuffer",
    "AtariState",
    "NStep",
    "NStepState",
    "NStepTransition",
    "PrioritizedBuffer",
    "PrioritizedSample",
    "PrioritizedState",
    "ReplayBuffer",
    "ReplaySample",
    "ReplayState",
    "SumTreeState",
    "atari",
    "make_atari_replay",
    "make_nstep",
    "make_prioritized",
    "make_replay",
    "nstep",
    "prioritized",
    "replay",
    "sum_tree",
]

"""Torsos of a user's own, outside rljax, for the tests of ``network=``
(tests/networks/test_torso.py)."""

from __future__ import annotations

import flax.linen as nn


class TinyTorso(nn.Module):
    """One dense layer of 16 tanh units: observations ``[B, D]`` -> features ``[B, 16]``."""

    @nn.compact
    def __call__(self, x):
        return nn.tanh(nn.Dense(16)(x))


class PerFeature(nn.Module):
    """A wrong torso: ``[B, D]`` -> ``[B, D, 3]`` (features not flattened)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x[..., None])


class Broken(nn.Module):
    """A wrong torso: it raises when applied."""

    @nn.compact
    def __call__(self, x):
        raise RuntimeError("no torso here")


NOT_A_MODULE = 42

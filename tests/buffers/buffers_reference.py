"""Plain NumPy / Python references shared by the buffer tests."""

from __future__ import annotations

import math

import numpy as np


def chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper critical value of chi-square with ``df`` degrees of freedom (Wilson-Hilferty).

    ``z = 3.719`` is the standard-normal quantile of 1 - 1e-4, so a correct sampler fails a
    test with probability about 1e-4 (and the tests use fixed seeds, so never flakily).
    """
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_statistic(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson statistic and degrees of freedom over the cells with positive probability."""
    counts = np.asarray(counts, np.float64)
    probs = np.asarray(probs, np.float64)
    assert counts[probs == 0].sum() == 0, "a zero-probability cell was drawn"
    pos = probs > 0
    expected = counts.sum() * probs[pos] / probs[pos].sum()
    stat = float(((counts[pos] - expected) ** 2 / expected).sum())
    return stat, int(pos.sum()) - 1


def assert_frequencies(indices: np.ndarray, probs: np.ndarray) -> None:
    """Chi-square goodness of fit of drawn ``indices`` to ``probs`` at level 1e-4."""
    counts = np.bincount(np.asarray(indices).ravel(), minlength=len(probs))
    stat, df = chi2_statistic(counts, probs)
    if df == 0:
        return
    crit = chi2_critical(df)
    assert stat < crit, f"chi-square {stat:.1f} >= critical {crit:.1f} (df={df})"


def nstep_windows(
    reward, terminated, truncated, valid, n: int, gamma: float
) -> list[tuple[int, float, float, int]]:
    """One env's n-step windows, Python loops: ``(start, return, discount, last_step)``.

    Emitted for every valid start step whose ``n`` steps are all in the stream.
    """
    out = []
    for t in range(len(reward) - n + 1):
        if not valid[t]:
            continue
        ret, m = 0.0, 0
        for j in range(n):
            ret += gamma**j * float(reward[t + j])
            m = j + 1
            if terminated[t + j] or truncated[t + j]:
                break
        discount = 0.0 if terminated[t + m - 1] else gamma**m
        out.append((t, ret, discount, t + m - 1))
    return out

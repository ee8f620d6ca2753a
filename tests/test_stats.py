"""rljax.stats against plain-Python references and SciPy on fixed score matrices."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rljax import stats


def _scipy_stats():
    # Imported where used: at the top it would add ~1.4 s to every pytest-xdist worker's
    # collection of the whole suite.
    import scipy.stats

    return scipy.stats

RNG = np.random.default_rng(7)
SCORES = RNG.normal(size=(10, 3)) * [1.0, 5.0, 0.3] + [0.0, 2.0, -1.0]  # [runs, tasks]
OTHER = RNG.normal(size=(7, 3)) * [1.0, 5.0, 0.3] + [0.3, 1.0, -1.0]


def ref_iqm(values) -> float:
    """Sort, drop the bottom and top quarter (rounded down), average the rest."""
    v = sorted(float(x) for x in values)
    k = len(v) // 4
    kept = v[k:len(v) - k]
    return sum(kept) / len(kept)


def ref_improvement(x, y) -> float:
    """Per task, the share of pairs where x beats y (ties half), then the mean over tasks."""
    per_task = []
    for t in range(x.shape[1]):
        wins = [1.0 if a > b else 0.5 if a == b else 0.0
                for a, b in itertools.product(x[:, t], y[:, t])]
        per_task.append(sum(wins) / len(wins))
    return sum(per_task) / len(per_task)


def ref_percentile_ci(scores, statistic, indices, level=0.95):
    """The same resamples, one at a time, built with Python loops."""
    samples = []
    for idx in indices:
        resampled = np.array([[scores[idx[r, t], t] for t in range(scores.shape[1])]
                              for r in range(scores.shape[0])])
        samples.append(statistic(resampled))
    tail = 100 * (1 - level) / 2
    return np.percentile(samples, tail), np.percentile(samples, 100 - tail)


def test_point_estimates_match_references():
    flat = SCORES.ravel()
    assert stats.iqm(SCORES) == pytest.approx(ref_iqm(flat), abs=1e-9)
    assert stats.iqm(SCORES) == pytest.approx(_scipy_stats().trim_mean(flat, 0.25), abs=1e-9)
    task_means = [sum(SCORES[:, t]) / len(SCORES) for t in range(3)]
    assert stats.mean(SCORES) == pytest.approx(sum(task_means) / 3, abs=1e-9)
    assert stats.median(SCORES) == pytest.approx(sorted(task_means)[1], abs=1e-9)
    assert stats.run_median(SCORES) == pytest.approx(np.median(flat), abs=1e-9)
    gap = sum(1 - min(s, 1) for s in flat) / flat.size
    assert stats.optimality_gap(SCORES) == pytest.approx(gap, abs=1e-9)
    assert stats.improvement(SCORES, OTHER) == pytest.approx(ref_improvement(SCORES, OTHER),
                                                             abs=1e-9)
    u = [_scipy_stats().mannwhitneyu(SCORES[:, t], OTHER[:, t]).statistic for t in range(3)]
    assert stats.improvement(SCORES, OTHER) == pytest.approx(np.mean(u) / (10 * 7), abs=1e-9)
    taus = np.array([-1.0, 0.0, 2.5])
    want = [np.mean([np.mean(SCORES[:, t] > tau) for t in range(3)]) for tau in taus]
    np.testing.assert_allclose(stats.profile(SCORES, taus), want, atol=1e-9)


@pytest.mark.parametrize("n,kept", [(8, [0, 0, 1, 2]), (10, [0, 0, 1, 2, 10, 100])])
def test_iqm_trims_a_quarter_from_each_end(n, kept):
    # Skewed values: trimming one value more or less per end changes the answer.
    values = np.array([-50, -5, 0, 0, 1, 2, 10, 100, 1000, 5000][:n], float)
    assert stats.iqm(values[:, None]) == pytest.approx(np.mean(kept), abs=1e-12)
    for wrong in (0.2, 0.3, 0.125, 0.0):
        if int(wrong * n) != n // 4:
            assert stats.trimmed_mean(values, wrong) != pytest.approx(np.mean(kept))


def test_stratified_indices_stay_within_each_task():
    idx = stats.bootstrap_indices(5, 3, reps=200, seed=1)
    assert idx.shape == (200, 5, 3) and idx.min() == 0 and idx.max() == 4
    scores = np.arange(15.0).reshape(5, 3) * 10 + np.arange(3)  # column t ends in digit t
    resampled = stats.resample(scores, idx)
    np.testing.assert_array_equal(resampled % 10, np.broadcast_to(np.arange(3), (200, 5, 3)))
    assert stats.bootstrap_indices(5, 3, reps=4, seed=1).tolist() == idx[:4].tolist()


@pytest.mark.parametrize("name", ["iqm", "mean", "median", "optimality_gap"])
def test_intervals_equal_a_loop_over_the_same_indices(name):
    statistic = stats.AGGREGATES[name]
    indices = stats.bootstrap_indices(*SCORES.shape, reps=300, seed=3)
    est = stats.interval(SCORES, statistic, indices=indices)
    low, high = ref_percentile_ci(SCORES, statistic, indices)
    assert est.point == pytest.approx(float(statistic(SCORES)), abs=1e-12)
    assert (est.low, est.high) == pytest.approx((low, high), abs=1e-12)
    assert est.low <= est.point <= est.high


def test_improvement_interval_equals_a_loop_over_the_same_indices():
    ix = stats.bootstrap_indices(*SCORES.shape, reps=200, seed=4)
    iy = stats.bootstrap_indices(*OTHER.shape, reps=200, seed=5)
    est = stats.improvement_interval(SCORES, OTHER, indices=(ix, iy))
    samples = [ref_improvement(SCORES[a, np.arange(3)], OTHER[b, np.arange(3)])
               for a, b in zip(ix, iy, strict=True)]
    assert est.point == pytest.approx(ref_improvement(SCORES, OTHER), abs=1e-9)
    assert (est.low, est.high) == pytest.approx(tuple(np.percentile(samples, [2.5, 97.5])),
                                                abs=1e-12)


def test_interval_agrees_with_scipy_bootstrap():
    """One task: the stratified bootstrap is the ordinary one; SciPy's percentile interval
    from other resamples agrees to within the resampling noise."""
    x = RNG.gamma(2.0, size=40)
    ours = stats.interval(x[:, None], stats.iqm, reps=4000, seed=0)
    scipy_stats = _scipy_stats()
    theirs = scipy_stats.bootstrap((x,), lambda v, axis: scipy_stats.trim_mean(v, 0.25, axis),
                                   n_resamples=4000, method="percentile",
                                   rng=np.random.default_rng(1)).confidence_interval
    width = theirs.high - theirs.low
    assert abs(ours.low - theirs.low) < 0.1 * width
    assert abs(ours.high - theirs.high) < 0.1 * width


def test_one_run_has_no_interval_and_bad_shapes_are_refused():
    est = stats.interval(np.array([[3.0, 4.0]]), stats.mean)
    assert est.point == 3.5 and np.isnan(est.low) and np.isnan(est.high)
    with pytest.raises(ValueError, match=r"\[runs, tasks\]"):
        stats.interval(np.zeros(4), stats.mean)
    with pytest.raises(ValueError, match="not finite"):
        stats.interval(np.array([[1.0], [np.nan]]), stats.mean)
    with pytest.raises(ValueError, match="same tasks"):
        stats.improvement_interval(np.zeros((3, 2)), np.zeros((3, 1)))


def test_normalize():
    np.testing.assert_allclose(stats.normalize([[22.0, -500.0]], [22.0, -500.0],
                                               [500.0, -100.0]), [[0.0, 0.0]])
    np.testing.assert_allclose(stats.normalize([[261.0]], [22.0], [500.0]), [[0.5]])
    with pytest.raises(ValueError, match="equals"):
        stats.normalize([[1.0]], [2.0], [2.0])

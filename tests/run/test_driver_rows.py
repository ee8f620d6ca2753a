"""A chunk's metrics row: each metric's mean over the chunk's updates, skipping NaN."""

import warnings

import numpy as np

from rljax.run.driver import _mean_of_logged


def test_mean_skips_nan_and_is_nan_without_a_warning_when_nothing_learned():
    parts = [np.array([1.0, np.nan, 2.0], np.float32), np.array([np.nan, 6.0], np.float32)]
    assert _mean_of_logged(parts) == float(np.nanmean(np.concatenate(parts))) == 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" would raise here
        assert np.isnan(_mean_of_logged([np.full(4, np.nan, np.float32)]))
    assert _mean_of_logged([np.array([3, 4]), np.array([5])]) == 4.0

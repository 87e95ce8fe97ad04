"""Threshold shift: known answers and consistency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.thresholds import (
    equivalent_threshold,
    precision_recall_vs_conf,
    threshold_shift,
)


def _sig(z, t=1.0):
    return 1 / (1 + np.exp(-np.asarray(z) / t))


def test_known_answer():
    before = np.array([0.9, 0.3, 0.26, 0.2, 0.1])
    after = np.array([0.8, 0.24, 0.22, 0.3, 0.05])
    correct = np.array([True, True, False, True, False])
    s = threshold_shift(before, after, correct, conf=0.25, n_gt=4)
    assert (s.kept_before, s.kept_after) == (3, 2)
    assert (s.added, s.added_correct, s.removed, s.removed_correct) == (1, 1, 2, 1)
    assert s.precision_before == pytest.approx(2 / 3) and s.precision_after == pytest.approx(1.0)
    assert s.recall_before == pytest.approx(0.5) and s.recall_after == pytest.approx(0.5)
    assert s.equivalent_conf is None


@pytest.mark.parametrize("t", [0.5, 0.8, 1.3, 2.5])
def test_shared_temperature_shift_is_one_sided_and_equivalent_threshold_keeps_the_set(t):
    rng = np.random.default_rng(0)
    z = rng.normal(-2, 3, 5000)
    y = rng.random(5000) < _sig(z, 1.5)
    p0, p1 = _sig(z), _sig(z, t)
    s = threshold_shift(p0, p1, y, conf=0.25, n_gt=3000, temperature=t)
    # below 0.5, T > 1 only adds boxes and T < 1 only removes them
    assert (s.removed == 0) if t > 1 else (s.added == 0)
    assert s.kept_after == s.kept_before + s.added - s.removed
    eq = equivalent_threshold(0.25, t)
    assert eq == pytest.approx(_sig(math.log(0.25 / 0.75), t))
    assert ((p1 > eq) == (p0 > 0.25)).mean() > 0.999  # identical up to float ties at the edge


def test_equivalent_threshold_bad_input():
    with pytest.raises(InputError, match="`conf`"):
        equivalent_threshold(0.0, 1.0)
    with pytest.raises(InputError, match="`temperature`"):
        equivalent_threshold(0.25, 0.0)
    with pytest.raises(InputError, match="one shape"):
        threshold_shift(np.zeros(3), np.zeros(2), np.zeros(3, bool), conf=0.25, n_gt=1)


def test_precision_recall_curve_matches_direct_count():
    rng = np.random.default_rng(1)
    c = rng.random(1000)
    y = rng.random(1000) < c
    grid, prec, rec, kept = precision_recall_vs_conf(c, y, n_gt=700)
    for k in (0, 37, 100, 150, 200):
        m = c > grid[k]
        assert kept[k] == m.sum()
        assert rec[k] == pytest.approx(y[m].sum() / 700)
        if m.any():
            assert prec[k] == pytest.approx(y[m].mean())
    assert np.isnan(prec[-1])  # nothing above 1.0

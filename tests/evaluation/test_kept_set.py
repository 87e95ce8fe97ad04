"""Threshold shift: known answers and consistency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from det_calib.calibrators.registry import methods as registered_methods
from det_calib.errors import InputError
from det_calib.evaluation.kept_set import (
    equivalent_threshold,
    precision_recall_vs_conf,
    threshold_shift,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


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


def test_precision_recall_curve_counts_every_threshold_exactly():
    """Every grid point, scores on the grid points themselves (kept only strictly above), and a grid
    given unsorted with a repeated point: the exact counts of ``conf > t``."""
    rng = np.random.default_rng(2)
    c = np.concatenate([np.round(rng.random(3000), 2), [0.0, 1.0, 0.25, 0.25]])
    y = rng.random(c.size) < c
    for grid in (None, np.array([0.5, 0.1, 0.25, 0.25, 1.0, 0.0, 0.999])):
        g, prec, rec, kept = precision_recall_vs_conf(c, y, n_gt=2000, grid=grid)
        for k, t in enumerate(g):
            m = c > t
            assert kept[k] == m.sum() and rec[k] == y[m].sum() / 2000
            assert prec[k] == y[m].sum() / m.sum() if m.any() else np.isnan(prec[k])


@pytest.mark.parametrize("method", [m for m in registered_methods() if m != "none"])
def test_equivalent_conf_keeps_exactly_the_raw_set(method):
    """For every map the equivalent threshold keeps exactly the boxes above the raw threshold:
    over all classes for a global map, class by class for a per-class one (None over all)."""
    from det_calib.calibrators.base import calibrated_logits, equivalent_conf
    from det_calib.calibrators.registry import method_spec
    from det_calib.selection.cross_validation import fit_calibrator

    rng = np.random.default_rng(4)
    n = 20_000
    k = rng.integers(0, 3, n)
    z = rng.normal(-2.0, 2.0, n)
    y = rng.uniform(size=n) < _sig(1.4 * z + 0.3 + 0.5 * k)  # under-confident, class-dependent
    # a box's calibrated conf depends on its size: no one threshold is equivalent
    if method_spec(method).uses_size:
        cal = fit_calibrator(method, z, y, log_area=rng.uniform(-8, -1, n))
        assert all(
            equivalent_conf(cal, t) is None and equivalent_conf(cal, t, 0) is None
            for t in (0.1, 0.5)
        )
        return
    cal = fit_calibrator(method, z, y, classes=k, groups=np.arange(n) // 20)
    zt = rng.normal(-1.0, 2.0, n)  # fresh boxes
    kt = rng.integers(0, 3, n)
    p1 = _sig(calibrated_logits(cal, zt, kt))
    for t in (0.1, 0.25, 0.5, 0.8):
        raw = _sig(zt) > t
        eq = equivalent_conf(cal, t)
        if method_spec(method).per_class:
            assert eq is None
            eqs = [equivalent_conf(cal, t, c) for c in range(3)]
            # one threshold per class (raw 0.5, logit 0, is a fixed point of every z / T_c)
            assert len(set(eqs)) == (1 if method == "class-temperature" and t == 0.5 else 3)
            for c, e in enumerate(eqs):
                m = kt == c
                assert np.array_equal(p1[m] > e, raw[m])
        else:
            assert eq is not None
            assert abs(eq - t) > 1e-3 or (
                method == "temperature" and t == 0.5
            )  # logit(0.5) / T = 0
            assert np.array_equal(p1 > eq, raw)
            assert raw.sum() > 100
    assert equivalent_conf(cal, 0.0) is None and equivalent_conf(cal, 1.0) is None


def test_equivalent_conf_none_where_the_map_is_flat():
    """A map that does not rise just above the threshold has no equivalent threshold."""
    from det_calib.calibrators.base import LogitCalibrator, equivalent_conf

    class Flat(
        LogitCalibrator
    ):  # calibrated logit constant below 0: boxes just above raw 0.3 tie with it
        def transform_logits(self, z, *, classes=None):
            return np.maximum(np.asarray(z, dtype=np.float64), 0.0)

    assert equivalent_conf(Flat(), 0.3) is None
    assert equivalent_conf(Flat(), 0.7) == pytest.approx(0.7)


def test_threshold_shift_takes_an_equivalent_threshold():
    s = threshold_shift(
        np.array([0.9, 0.1]),
        np.array([0.8, 0.2]),
        np.array([True, False]),
        conf=0.5,
        n_gt=2,
        equivalent_conf=0.42,
    )
    assert s.equivalent_conf == 0.42
    with pytest.raises(InputError, match="not both"):
        threshold_shift(
            np.array([0.9]),
            np.array([0.8]),
            np.array([True]),
            conf=0.5,
            n_gt=1,
            temperature=2.0,
            equivalent_conf=0.5,
        )

"""Soft labels (``--target iou``): every calibrator's fit against a target in [0, 1].

Parity: a soft label ``y`` is the same cross-entropy as two rows, label 1 with weight ``y`` and label
0 with weight ``1 - y``, which scikit-learn's logistic regression fits with sample weights; PAV of
soft labels is scikit-learn's ``IsotonicRegression``; the temperature is scipy's 1-D minimiser of
the cross-entropy. Known answers: a planted map from the logit to the expected IoU is recovered.
Invariants: every map ``auto`` chooses among for this target keeps the boxes' ranking.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from det_calib.calibrators import registry
from det_calib.calibrators.affine import PlattScaler
from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.fit_support import check_fit
from det_calib.calibrators.isotonic import IsotonicCalibrator, _isotonic_regression
from det_calib.calibrators.spline import SplineCalibrator, _spline_knots
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.errors import InputError
from det_calib.numeric import binary_nll_logits, sigmoid
from det_calib.selection.cross_validation import _soft_ece, fit_calibrator, select_calibrator

pytestmark = pytest.mark.fast


def _planted_iou(a: float, b: float, n: int = 40_000, seed: int = 0, spread: float = 6.0):
    """Logits and soft labels whose expected value is ``sigmoid(a z + b)``: a Beta label of that mean
    (``spread`` its concentration), as an IoU target scatters around the expected IoU."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.0, 2.5, n)
    m = sigmoid(a * z + b)
    y = rng.beta(spread * m, spread * (1 - m))
    return z, y


def _duplicated(z, y, w=None):
    """The two-row form of soft labels: (z, 1) weighted y and (z, 0) weighted 1 - y."""
    w = np.ones(z.size) if w is None else w
    return np.r_[z, z], np.r_[np.ones(z.size), np.zeros(z.size)], np.r_[w * y, w * (1 - y)]


@pytest.mark.parametrize("seed", [0, 1])
def test_soft_platt_matches_sklearn_logistic_regression_on_duplicated_rows(seed):
    sk = pytest.importorskip("sklearn.linear_model")
    z, y = _planted_iou(0.7, -0.3, n=5000, seed=seed)
    w = np.random.default_rng(seed + 10).uniform(0.2, 2.0, z.size)
    zz, yy, ww = _duplicated(z, y, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(
            zz[:, None], yy, sample_weight=ww
        )
    p = PlattScaler().fit(z, y, weights=w)
    assert p.a_ == pytest.approx(ref.coef_[0, 0], rel=1e-6)
    assert p.b_ == pytest.approx(ref.intercept_[0], abs=1e-6)


def test_soft_spline_matches_sklearn_on_the_same_hinges():
    sk = pytest.importorskip("sklearn.linear_model")
    z, y = _planted_iou(0.8, -0.5, n=20_000, seed=3)
    s = SplineCalibrator(n_knots=2, ridge=0.0, tol=1e-12).fit(z, y)
    x = np.column_stack([z] + [np.maximum(z - k, 0.0) for k in s.knots_])
    zz = np.r_[x, x]
    yy = np.r_[np.ones(z.size), np.zeros(z.size)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk.LogisticRegression(C=1e12, tol=1e-12, max_iter=100_000).fit(
            zz, yy, sample_weight=np.r_[y, 1 - y]
        )
    assert s.b_ == pytest.approx(ref.intercept_[0], abs=2e-5)
    np.testing.assert_allclose(np.r_[s.a_, s.c_], ref.coef_[0], atol=2e-5)


def test_spline_knots_of_soft_labels_are_quantiles_of_the_label_mass():
    z = np.arange(10.0)
    y = np.array([0, 0, 0.5, 0.5, 1, 1, 1, 1, 0, 0])
    # the label mass: 0.5 at 2 and 3, 1 at 4..7; with 0/1 labels (y > 0) the same knots would be
    # the quantiles of 2..7 unweighted
    hard = _spline_knots(z, (y > 0).astype(float), 1)
    soft = _spline_knots(z, y, 1)
    assert hard.tolist() == [4.0] and soft.tolist() == [5.0]


def test_soft_temperature_matches_scipy_minimiser_of_the_cross_entropy():
    z, y = _planted_iou(0.6, 0.0, n=8000, seed=4)

    def ce(log_t):
        return binary_nll_logits(z / math.exp(log_t), y)

    ref = math.exp(
        minimize_scalar(ce, bounds=(-5, 5), method="bounded", options={"xatol": 1e-10}).x
    )
    t = TemperatureScaler().fit(z, y).temperature_
    assert t == pytest.approx(ref, rel=1e-6)
    assert t == pytest.approx(1 / 0.6, rel=0.03)  # the planted temperature


def test_soft_pav_matches_sklearn_isotonic_regression():
    sk = pytest.importorskip("sklearn.isotonic")
    z, y = _planted_iou(1.0, -0.2, n=3000, seed=5)
    w = np.random.default_rng(6).uniform(0.5, 1.5, z.size)
    ref = sk.IsotonicRegression().fit(z, y, sample_weight=w).predict(z)
    np.testing.assert_allclose(_isotonic_regression(z, y, weights=w), ref, atol=1e-12)


@pytest.mark.parametrize("method", ["temperature", "platt", "spline", "isotonic"])
def test_a_planted_iou_linear_score_is_recovered(method):
    """The expected IoU is ``sigmoid(0.6 z - 0.4)`` (``temperature``: ``sigmoid(0.6 z)``); the fit to
    the scattered IoU labels gives that expected IoU back, as probabilities on the range of the boxes."""
    b = 0.0 if method == "temperature" else -0.4
    z, y = _planted_iou(0.6, b, n=60_000, seed=7)
    cal = fit_calibrator(method, z, y)
    grid = np.linspace(-5, 3, 81)
    err = np.abs(cal.predict_proba(grid) - sigmoid(0.6 * grid + b))
    assert err.max() < (0.03 if method == "isotonic" else 0.01)
    if method == "platt":
        assert (cal.a_, cal.b_) == (pytest.approx(0.6, rel=0.02), pytest.approx(b, abs=0.02))


def test_auto_chooses_a_ranking_map_that_recovers_the_planted_iou():
    z, y = _planted_iou(0.6, -0.4, n=20_000, seed=8)
    groups = np.arange(z.size) // 8
    sel = select_calibrator(
        z,
        y,
        groups=groups,
        methods=registry.global_methods("iou"),
        min_conf=0.25,
        n_repeats=1,
        seed=0,
    )
    assert sel.chosen.method != "none"
    grid = np.linspace(-3, 3, 31)
    assert np.abs(sel.calibrator.predict_proba(grid) - sigmoid(0.6 * grid - 0.4)).max() < 0.02
    # the soft ECE criterion runs as well and picks a calibrator over the planted miscalibration
    sel_e = select_calibrator(
        z,
        y,
        groups=groups,
        methods=("temperature", "platt"),
        min_conf=0.25,
        criterion="ece",
        n_repeats=1,
        seed=0,
    )
    assert sel_e.chosen.method != "none"


@pytest.mark.parametrize("method", registry.global_methods("iou"))
def test_every_map_of_the_iou_choice_keeps_the_ranking(method):
    z, y = _planted_iou(0.9, -0.6, n=6000, seed=9)
    cal = fit_calibrator(method, z, y, fit_min_conf=0.0)
    probe = np.sort(np.random.default_rng(1).normal(-1, 3, 2000))
    t = cal.transform_logits(probe)
    assert np.all(np.diff(t) > 0) if method != "none" else np.array_equal(t, probe)


def test_every_builtin_calibrator_fits_soft_labels():
    assert registry.target_methods("iou") == registry.methods()
    assert registry.excluded_methods("iou") == {}
    assert "none" in registry.global_methods("iou")


def test_a_calibrator_without_soft_labels_is_left_out_of_the_iou_choice_with_its_reason():
    @registry.register("hard-only", order=95)
    class HardOnly(LogitCalibrator):
        format = "test.HardOnly"

    try:
        assert "hard-only" in registry.target_methods("correct")
        assert "hard-only" in registry.global_methods("correct")
        assert "hard-only" not in registry.target_methods("iou")
        assert "hard-only" not in registry.global_methods("iou")
        assert "0/1 labels only" in registry.excluded_methods("iou")["hard-only"]
    finally:
        registry._unregister("hard-only")
    with pytest.raises(InputError, match="`target`"):
        registry.target_methods("box")


def test_labels_may_be_soft_but_stay_in_the_unit_interval():
    _, y, _ = check_fit(np.zeros(3), [0.0, 0.25, 1.0])
    np.testing.assert_array_equal(y, [0.0, 0.25, 1.0])
    with pytest.raises(InputError, match="`labels` to hold only 0/1"):
        check_fit(np.zeros(2), [0.0, 1.5])
    with pytest.raises(InputError, match="`labels` to hold only 0/1"):
        check_fit(np.zeros(2), np.array([0, 2]))


def test_soft_cross_entropy_and_binned_gap_reduce_to_the_binary_ones():
    z = np.array([-3.0, -0.5, 0.2, 2.0, 40.0])
    y01 = np.array([0, 1, 0, 1, 1])
    assert binary_nll_logits(z, y01.astype(float) * 1.0) == binary_nll_logits(z, y01.astype(bool))
    ys = np.array([0.1, 0.7, 0.0, 0.9, 1.0])
    want = np.mean(ys * np.logaddexp(0, -z) + (1 - ys) * np.logaddexp(0, z))
    assert binary_nll_logits(z, ys) == pytest.approx(want, rel=1e-14)
    from det_calib.metrics.calibration import ece

    p = sigmoid(z)
    assert _soft_ece(p, y01.astype(float), np.ones(5), n_bins=15) == pytest.approx(
        ece(p, y01, n_bins=15), abs=1e-15
    )


def test_isotonic_soft_fit_refuses_all_zero_targets_and_accepts_a_single_soft_one():
    from det_calib.errors import DegenerateFitError

    z = np.linspace(-2, 2, 20)
    with pytest.raises(DegenerateFitError, match="no correct"):
        IsotonicCalibrator().fit(z, np.zeros(20))
    y = np.zeros(20)
    y[-1] = 0.6
    assert IsotonicCalibrator().fit(z, y).predict_proba(np.array([2.0]))[0] > 0.3

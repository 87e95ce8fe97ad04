"""Isotonic calibrators: PAV parity with scikit-learn, a strictly increasing logit map, shrinkage."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from det_calib.calibrators.affine import sigmoid
from det_calib.calibrators.isotonic import (
    ClassIsotonicCalibrator,
    IsotonicCalibrator,
    PiecewiseLinear,
    _isotonic_regression,
)
from det_calib.errors import DegenerateFitError, InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pav_matches_sklearn_isotonic_regression(seed):
    sk = pytest.importorskip("sklearn.isotonic")
    rng = np.random.default_rng(seed)
    n = 3000
    z = np.round(rng.normal(0, 2, n), 1 if seed % 2 else 6)  # with and without ties in x
    y = (rng.random(n) < sigmoid(z)).astype(float)
    w = rng.uniform(0.1, 3, n) if seed >= 2 else None
    ref = sk.IsotonicRegression().fit(z, y, sample_weight=w).predict(z)
    np.testing.assert_allclose(_isotonic_regression(z, y, weights=w), ref, atol=1e-12)


def test_pav_known_answer_and_bad_input():
    assert _isotonic_regression([3, 1, 2, 4], [0, 0, 1, 1]).tolist() == [0.5, 0.0, 0.5, 1.0]
    with pytest.raises(InputError, match="`x` and `y`"):
        _isotonic_regression([1, 2], [1])


def test_isotonic_map_is_strictly_increasing_and_calibrates():
    rng = np.random.default_rng(0)
    z = rng.normal(-2, 3, 100_000)
    true_logit = np.where(z < 0, 0.5 * z - 1, 2.0 * z - 1)  # a kink: no affine map fits
    y = rng.random(z.size) < sigmoid(true_logit)
    cal = IsotonicCalibrator().fit(z, y)
    grid = np.linspace(-20, 20, 4001)
    out = cal.transform_logits(grid)
    assert (np.diff(out) > 0).all()
    assert cal.map_.x.size <= 32
    mid = (grid > -4) & (grid < 3)
    t = np.where(grid < 0, 0.5 * grid - 1, 2.0 * grid - 1)
    assert np.abs(sigmoid(out[mid]) - sigmoid(t[mid])).max() < 0.06
    back = IsotonicCalibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(back.transform_logits(grid), out)


def test_piecewise_linear_hinges_reproduce_the_map():
    for m in (
        PiecewiseLinear([-2.0, 0.0, 3.0], [-4.0, -1.0, 5.0], 0.05),
        PiecewiseLinear([-2.0, 0.0, 3.0], [-4.0, -1.0, 5.0], 1.0, right_slope=0.01),
    ):
        c0, s0, x, coef = m.hinges()
        z = np.linspace(-10, 10, 101)
        manual = c0 + s0 * z + (coef[None, :] * np.maximum(z[:, None] - x[None, :], 0)).sum(axis=1)
        np.testing.assert_allclose(manual, m(z), atol=1e-12)
    with pytest.raises(InputError, match="strictly increasing"):
        PiecewiseLinear([0.0, 0.0], [1.0, 2.0], 0.1)


def test_isotonic_refuses_one_label():
    with pytest.raises(DegenerateFitError, match="no correct"):
        IsotonicCalibrator().fit(np.arange(20.0), np.zeros(20))


def test_class_isotonic_shrinks_toward_global():
    rng = np.random.default_rng(1)
    k = np.repeat([0, 1, 2], [40_000, 40_000, 15])
    z = rng.normal(-1, 3, k.size)
    shift = np.array([-1.0, 1.0, 3.0])
    y = rng.random(k.size) < sigmoid(z + shift[k])
    cal = ClassIsotonicCalibrator().fit(z, y, classes=k, groups=np.arange(k.size) // 10)
    assert math.isfinite(cal.blend_)
    assert cal.weights_[0] > 0.9 and cal.weights_[1] > 0.9 and cal.weights_[2] < 0.5
    probe = np.array([0.0])
    # the big classes get their own curve (planted logit at z=0: -1 and +1)
    assert cal.transform_logits(probe, classes=[0])[0] == pytest.approx(-1.0, abs=0.25)
    assert cal.transform_logits(probe, classes=[1])[0] == pytest.approx(1.0, abs=0.25)
    # the tiny class stays close to the global curve, far from its own +3
    g = cal.global_(probe)[0]
    assert abs(cal.transform_logits(probe, classes=[2])[0] - g) < 0.5 * abs(3.0 - g)
    back = ClassIsotonicCalibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(
        back.transform_logits(z[:99], classes=k[:99]), cal.transform_logits(z[:99], classes=k[:99])
    )


def test_block_values_carry_a_jeffreys_prior():
    """Each knot is logit((k + 1/2) / (n + 1)) of its block: all-wrong and all-correct blocks stay
    off 0 and 1 (the raw block means would give logit(1e-6) and logit(1 - 1e-6), +-13.8)."""
    z = np.arange(20.0)
    y = np.repeat([0.0, 1.0], 10)
    cal = IsotonicCalibrator().fit(z, y)
    np.testing.assert_allclose(cal.map_.x, [4.5, 14.5])
    np.testing.assert_allclose(cal.map_.y, [math.log(0.5 / 10.5), math.log(10.5 / 0.5)], rtol=1e-12)
    # a big block barely moves: 300 correct of 1,000 -> (300.5 / 1001), not 0.3
    z2 = np.concatenate([np.zeros(1000), np.ones(1000)])
    y2 = np.concatenate([np.arange(1000) < 300, np.arange(1000) < 700]).astype(float)
    m = IsotonicCalibrator().fit(z2, y2).map_
    np.testing.assert_allclose(sigmoid(m.y), [300.5 / 1001, 700.5 / 1001], rtol=1e-9)


def test_fit_above_a_floor_keeps_the_raw_spacing_below_it():
    """Fitted above a floor, the map has slope 1 left of its first knot: boxes below the floor,
    never seen by the fit, keep their raw spacing (with the old slope 0.01 they all took about
    the value of the lowest fitted block, and their NLL exploded)."""
    from det_calib.selection.cross_validation import fit_calibrator

    rng = np.random.default_rng(5)
    z = rng.normal(-3.0, 2.0, 50_000)
    y = rng.random(z.size) < sigmoid(1.3 * z + 0.4)
    floor = 0.2
    cal = fit_calibrator("isotonic", z, y, fit_min_conf=floor)
    assert cal.map_.tail_slope == 1.0 and cal.map_.right_slope == 0.01 and cal.left_slope == 1.0
    below = np.linspace(-9.0, math.log(floor / (1 - floor)), 50)
    below = below[below < cal.map_.x[0]]
    np.testing.assert_allclose(np.diff(cal.transform_logits(below)), np.diff(below), rtol=1e-9)
    low = z < math.log(floor / (1 - floor))
    old = IsotonicCalibrator().fit(z[~low], y[~low])  # the same fit, slope 0.01 on the left
    assert old.map_.tail_slope == 0.01

    def nll(t):
        p = sigmoid(t)
        return -np.mean(np.where(y[low], np.log(p), np.log1p(-p)))

    # below the floor: better than the raw scores (the planted map is 1.3 z + 0.4; true 0.1249,
    # raw 0.1283), where the old tail cost 0.207
    assert nll(cal.transform_logits(z[low])) < nll(z[low]) < nll(1.3 * z[low] + 0.4) + 0.005
    assert nll(old.transform_logits(z[low])) > 1.5 * nll(cal.transform_logits(z[low]))
    inside = z >= cal.map_.x[0]  # from the first knot on, the two maps are the same
    np.testing.assert_array_equal(cal.transform_logits(z[inside]), old.transform_logits(z[inside]))
    back = IsotonicCalibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back.left_slope == 1.0 and back.tail_slope == 0.01
    np.testing.assert_array_equal(back.transform_logits(below), cal.transform_logits(below))
    # on all boxes (no floor) the left tail keeps the default slope
    assert fit_calibrator("isotonic", z, y).map_.tail_slope == 0.01
    cls = rng.integers(0, 3, z.size)
    ccal = fit_calibrator("class-isotonic", z, y, classes=cls, fit_min_conf=floor)
    assert ccal.global_.tail_slope == 1.0 and all(m.tail_slope == 1.0 for m in ccal.maps_)
    cback = ClassIsotonicCalibrator.from_dict(json.loads(json.dumps(ccal.to_dict())))
    assert cback.left_slope == 1.0
    np.testing.assert_array_equal(
        cback.transform_logits(below, classes=np.zeros(below.size, int)),
        ccal.transform_logits(below, classes=np.zeros(below.size, int)),
    )
    with pytest.raises(InputError, match="left_slope"):
        IsotonicCalibrator(left_slope=0.0).fit(z, y)


def _planted(n=3000, seed=0, n_cls=3):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, n)
    k = rng.integers(0, n_cls, n)
    y = (rng.uniform(size=n) < sigmoid(np.tanh(z) + 0.4 * z + 0.3 * k)).astype(float)
    return z, y, k


def test_defaults_options_and_empty_input():
    assert IsotonicCalibrator().max_knots == 32 and IsotonicCalibrator().min_samples == 10
    assert ClassIsotonicCalibrator().min_samples == 10 and ClassIsotonicCalibrator().max_knots == 32
    assert _isotonic_regression([], []).shape == (0,)
    z, y, k = _planted()
    for bad in (dict(max_knots=1), dict(max_knots=True), dict(max_knots=2.0)):
        with pytest.raises(InputError, match="max_knots"):
            IsotonicCalibrator(**bad).fit(z, y)
    with pytest.raises(InputError, match="left_slope"):
        ClassIsotonicCalibrator(left_slope=-1.0).fit(z, y, classes=k)


def test_maps_repr_and_persisted_fields():
    z, y, k = _planted()
    iso = IsotonicCalibrator().fit(z, y)
    assert repr(iso).endswith(f", knots={iso.map_.x.size})")
    maps = iso.hinge_maps(3)
    assert len(maps) == 3 and all(m is iso.map_ for m in maps)
    d = iso.to_dict()
    assert (
        d["max_knots"] == 32
        and IsotonicCalibrator.from_dict(json.loads(json.dumps(d))).max_knots == 32
    )
    cls = ClassIsotonicCalibrator(blend=math.inf).fit(z, y, classes=k)
    assert (
        repr(cls) == "ClassIsotonicCalibrator(blend=inf, blend_=inf)"
        and len(cls.hinge_maps(3)) == 3
    )
    d = cls.to_dict()
    assert d["class_counts"] == np.bincount(k, minlength=3).tolist()
    back = ClassIsotonicCalibrator.from_dict(json.loads(json.dumps(d)))
    assert back.blend_ == math.inf and back.class_counts_.tolist() == d["class_counts"]
    np.testing.assert_allclose(
        back.transform_logits(z, classes=k), cls.transform_logits(z, classes=k), atol=1e-12
    )
    with pytest.raises(InputError):
        PiecewiseLinear.from_dict({"x": [0.0, 1.0], "y": [0.0, 1.0]})  # a dict without tail_slope


def test_a_class_of_exactly_min_samples_boxes_gets_its_own_map():
    """``min_samples`` boxes are enough for a class's own curve (fewer: the global map)."""
    rng = np.random.default_rng(3)
    z0 = rng.normal(0, 2, 2000)
    y0 = (rng.uniform(size=z0.size) < sigmoid(z0)).astype(float)
    z1, y1 = (
        np.linspace(-2, 2, 10),
        np.array([1, 1, 1, 0, 0, 1, 0, 0, 0, 0], float),
    )  # the other way round
    t = np.linspace(-3, 3, 13)
    for n1, own in ((10, True), (9, False)):
        z, y = np.r_[z0, z1[:n1]], np.r_[y0, y1[:n1]]
        k = np.r_[np.zeros(z0.size, int), np.ones(n1, int)]
        alone = ClassIsotonicCalibrator(blend=0.0, min_samples=10).fit(z, y, classes=k)
        pooled = ClassIsotonicCalibrator(blend=math.inf, min_samples=10).fit(z, y, classes=k)
        same = np.allclose(
            alone.transform_logits(t, classes=np.ones(t.size, int)),
            pooled.transform_logits(t, classes=np.ones(t.size, int)),
            atol=1e-9,
        )
        assert same is not own, n1


@pytest.mark.fast
@pytest.mark.parametrize("method", ["isotonic", "spline"])
def test_planted_flat_steps_keep_the_raw_order_box_for_box(method):
    """Labels whose frequency is a staircase (PAV's flat steps, a spline's flat end): the calibrated scores
    order every box as its raw score does, strictly, in float64 and in float32 probabilities."""
    from det_calib.calibrators.registry import make_calibrator

    rng = np.random.default_rng(3)
    z = np.sort(rng.uniform(-4.0, 2.0, 6000))
    z = z[np.concatenate([[True], np.diff(z) > 1e-3])]  # boxes 1e-3 logit apart at least
    p = np.select([z < -2.0, z < 0.0], [0.05, 0.3], 0.6)  # three flat steps
    y = (rng.random(z.size) < p).astype(float)
    cal = make_calibrator(method).fit(z, y)
    out = cal.transform_logits(z)
    order = np.argsort(z, kind="stable")
    assert np.array_equal(np.argsort(out, kind="stable"), order)
    assert (np.diff(out[order]) > 0).all()
    prob32 = (1.0 / (1.0 + np.exp(-out))).astype(np.float32)
    assert (np.diff(prob32[order]) > 0).all(), "two boxes the raw scores rank apart tie in float32"

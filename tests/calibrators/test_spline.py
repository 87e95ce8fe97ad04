"""The monotone spline calibrator: parity with scikit-learn, a planted map recovered, monotonicity,
persistence, bad input, and its place in the CV selection."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from det_calib.calibrators.affine import PlattScaler, sigmoid
from det_calib.calibrators.isotonic import PiecewiseLinear
from det_calib.calibrators.registry import calibrator_from_dict, methods
from det_calib.calibrators.spline import _MIN_SLOPE, SplineCalibrator, _spline_knots
from det_calib.errors import DegenerateFitError, InputError
from det_calib.selection.cross_validation import select_calibrator

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _planted(n=200_000, seed=0):
    """Slope 0.8 below z = -1, 1.6 between -1 and 1.5, 0.5 above (an S-shaped miscalibration)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.0, 3.0, n)
    g = -0.4 + 0.8 * z + 0.8 * np.maximum(z + 1.0, 0.0) - 1.1 * np.maximum(z - 1.5, 0.0)
    y = rng.random(n) < sigmoid(g)
    return z, y, g


def _features(z, knots):
    return np.column_stack([z] + [np.maximum(z - k, 0.0) for k in knots])


@pytest.mark.parametrize("n_knots", [1, 2, 4])
def test_unpenalised_fit_matches_sklearn_logistic_regression_on_the_same_hinges(n_knots):
    sklearn = pytest.importorskip("sklearn.linear_model")
    z, y, _ = _planted(n=40_000, seed=n_knots)
    w = (
        np.random.default_rng(7).integers(1, 4, z.size).astype(float)
    )  # weights: the CV pools rows into them
    s = SplineCalibrator(n_knots=n_knots, ridge=0.0, tol=1e-12).fit(z, y, weights=w)
    assert s.knots_.size == n_knots
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lr = sklearn.LogisticRegression(C=1e12, tol=1e-12, max_iter=100_000).fit(
            _features(z, s.knots_), y, sample_weight=w
        )
    assert s.b_ == pytest.approx(lr.intercept_[0], abs=2e-5)
    np.testing.assert_allclose(np.r_[s.a_, s.c_], lr.coef_[0], atol=2e-5)
    t = np.linspace(-12, 12, 97)
    np.testing.assert_allclose(
        s.predict_proba(t), lr.predict_proba(_features(t, s.knots_))[:, 1], atol=1e-6
    )


def test_a_planted_piecewise_linear_map_is_recovered():
    z, y, g = _planted()
    s = SplineCalibrator(knots=[-1.0, 1.5], ridge=0.0).fit(z, y)
    assert s.b_ == pytest.approx(-0.4, abs=0.05)
    np.testing.assert_allclose(s.slopes_, [0.8, 1.6, 0.5], atol=0.06)
    t = np.linspace(-8, 8, 161)
    true = -0.4 + 0.8 * t + 0.8 * np.maximum(t + 1.0, 0.0) - 1.1 * np.maximum(t - 1.5, 0.0)
    assert np.max(np.abs(sigmoid(s.transform_logits(t)) - sigmoid(true))) < 0.01
    # with data-placed knots (not the true ones) it still beats Platt clearly where boxes are kept
    zt, _, gt = _planted(seed=1)
    kept = sigmoid(gt) > 0.25
    auto = SplineCalibrator(n_knots=4).fit(z, y)
    platt = PlattScaler().fit(z, y)
    err = np.abs(auto.predict_proba(zt) - sigmoid(gt))[kept].mean()
    assert err < 0.6 * np.abs(platt.predict_proba(zt) - sigmoid(gt))[kept].mean()


def test_knots_are_quantiles_of_the_correct_boxes():
    z, y, _ = _planted(n=50_000)
    k = _spline_knots(z, y, 3)
    np.testing.assert_allclose(k, np.quantile(z[y], [0.25, 0.5, 0.75]), atol=1e-3)
    assert _spline_knots(z, y, 0).size == 0
    # weights count as repeated rows
    zz, yy = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1, 1, 1, 1])
    assert _spline_knots(zz, yy, 1, weights=[1, 1, 5, 1]).tolist() == [2.0]


def test_the_map_is_strictly_increasing_even_where_the_data_are_not():
    # labels that fall with the logit above z = 1: an unpenalised fit would give a negative slope there
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 2.0, 50_000)
    g = np.where(z < 1.0, 1.2 * z, 1.2 - 1.5 * (z - 1.0))
    y = rng.random(z.size) < sigmoid(g)
    s = SplineCalibrator(knots=[1.0], ridge=0.0).fit(z, y)
    assert (s.slopes_ >= _MIN_SLOPE).all()
    t = np.linspace(-20, 20, 2001)
    assert (np.diff(s.transform_logits(t)) > 0).all()
    assert s.ridge_ > 0 or s.knots_.size == 0  # the ridge was raised, or the knot dropped


def test_the_map_is_an_exact_piecewise_linear_with_two_tail_slopes():
    z, y, _ = _planted(n=50_000)
    s = SplineCalibrator(n_knots=3).fit(z, y)
    m = s.map_
    assert isinstance(m, PiecewiseLinear)
    t = np.linspace(-30, 30, 1201)
    np.testing.assert_allclose(m(t), s.transform_logits(t), atol=1e-10)
    c0, s0, x, coef = m.hinges()
    np.testing.assert_allclose(
        c0 + s0 * t + (coef[None, :] * np.maximum(t[:, None] - x[None, :], 0)).sum(1),
        s.transform_logits(t),
        atol=1e-9,
    )
    assert m.tail_slope == pytest.approx(s.a_) and m.right_slope == pytest.approx(s.slopes_[-1])
    assert PiecewiseLinear.from_dict(m.to_dict()).right_slope == m.right_slope


def test_zero_knots_is_platt():
    z, y, _ = _planted(n=30_000)
    s = SplineCalibrator(n_knots=0).fit(z, y)
    p = PlattScaler().fit(z, y)
    assert s.a_ == pytest.approx(p.a_, rel=1e-7) and s.b_ == pytest.approx(p.b_, abs=1e-7)


def test_a_large_ridge_shrinks_toward_platt():
    z, y, _ = _planted(n=30_000)
    p = PlattScaler().fit(z, y)
    free = SplineCalibrator(n_knots=2, ridge=0.0).fit(z, y)
    tight = SplineCalibrator(n_knots=2, ridge=1e7).fit(z, y)
    assert np.abs(tight.c_).max() < 1e-2 < np.abs(free.c_).max()
    assert tight.a_ == pytest.approx(p.a_, rel=1e-2)


def test_persistence_round_trip_through_json():
    z, y, _ = _planted(n=30_000)
    s = SplineCalibrator(n_knots=3, ridge=5.0).fit(z, y)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["format"] == "det_calib.SplineCalibrator" and d["version"] == 1
    back = calibrator_from_dict(d)
    assert isinstance(back, SplineCalibrator)
    t = np.linspace(-15, 15, 301)
    np.testing.assert_array_equal(back.transform_logits(t), s.transform_logits(t))
    assert back.to_dict() == s.to_dict()
    bad = dict(d, c=[-100.0] * len(d["c"]))
    with pytest.raises(InputError, match="slope"):
        SplineCalibrator.from_dict(bad)
    with pytest.raises(InputError, match="version"):
        SplineCalibrator.from_dict(dict(d, version=2))
    with pytest.raises(InputError, match="same length"):
        SplineCalibrator.from_dict(dict(d, c=d["c"][:-1]))


def test_degenerate_input_and_bad_arguments_are_refused():
    z = np.linspace(-3, 3, 100)
    with pytest.raises(DegenerateFitError, match="no correct"):
        SplineCalibrator().fit(z, np.zeros(100))
    with pytest.raises(DegenerateFitError, match="separable"):
        SplineCalibrator().fit(z, z > 0)
    with pytest.raises(DegenerateFitError, match="at least"):
        SplineCalibrator().fit(z[:3], [0, 1, 0])
    with pytest.raises(DegenerateFitError, match="slope"):  # anti-correlated
        rng = np.random.default_rng(0)
        zz = rng.normal(0, 2, 5000)
        SplineCalibrator().fit(zz, rng.random(5000) < sigmoid(-zz))
    with pytest.raises(InputError, match="n_knots"):
        SplineCalibrator(n_knots=-1).fit(z, z > 0.5)
    with pytest.raises(InputError, match="ridge"):
        SplineCalibrator(ridge=-1.0).fit(z, z > 0.5)
    with pytest.raises(InputError, match="`knots`"):
        SplineCalibrator(knots=[1.0, 0.0]).fit(z, z > 0.5)
    with pytest.raises(InputError, match="logits|labels"):
        SplineCalibrator().fit(z, np.ones(99))


def test_selection_tries_the_spline_and_picks_it_for_an_s_shaped_miscalibration():
    assert (
        methods().index("platt") < methods().index("spline") < methods().index("class-temperature")
    )
    rng = np.random.default_rng(0)
    n = 80_000
    z = rng.normal(-2.0, 3.0, n)
    g = -0.3 + 0.7 * z + 1.0 * np.maximum(z + 1.0, 0.0) - 1.2 * np.maximum(z - 1.5, 0.0)
    y = rng.random(n) < sigmoid(g)
    k = rng.integers(0, 4, n)
    sel = select_calibrator(
        z,
        y,
        classes=k,
        groups=np.arange(n) // 20,
        min_conf=0.25,
        methods=("temperature", "platt", "spline"),
    )
    assert {c.method for c in sel.candidates} >= {"spline"}
    assert sel.chosen.method == "spline", sel.reason
    assert isinstance(sel.calibrator, SplineCalibrator)
    platt = min((c for c in sel.candidates if c.method == "platt"), key=lambda c: c.mean)
    assert (
        platt.diff > platt.diff_se
    )  # the affine map is worse fold by fold, beyond its standard error
    # with isotonic too, a map that bends wins (the spline's knots are at quantiles of the correct
    # boxes, not at the planted -1 and 1.5: on 80k boxes isotonic's exact bends may beat it)
    sel = select_calibrator(
        z,
        y,
        classes=k,
        groups=np.arange(n) // 20,
        min_conf=0.25,
        methods=("temperature", "platt", "spline", "isotonic"),
    )
    assert sel.chosen.method in ("spline", "isotonic"), sel.reason


def test_knot_quantile_on_the_heaviest_first_box():
    """A correct box carrying two thirds of the weight is the smallest value whose cumulative weight
    reaches both quantile levels (1/3 and 2/3): the two knots coincide on it and are merged."""
    z = np.array([-3.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    assert _spline_knots(z, np.ones(6), 2, weights=[10.0, 1, 1, 1, 1, 1]).tolist() == [-3.0]


def test_defaults_repr_and_hinge_maps():
    cal = SplineCalibrator()
    assert cal.n_knots == 2 and repr(cal) == f"SplineCalibrator(n_knots=2, ridge={cal.ridge!r})"
    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, 4000)
    y = (rng.uniform(size=z.size) < sigmoid(np.tanh(z) + 0.5 * z)).astype(float)
    cal.fit(z, y)
    assert repr(cal).endswith(f", knots_={np.round(cal.knots_, 4).tolist()})")
    maps = cal.hinge_maps(3)
    assert len(maps) == 3 and all(m is maps[0] for m in maps)
    t = np.linspace(-6, 6, 25)
    np.testing.assert_allclose(maps[0](t), cal.transform_logits(t), rtol=0, atol=1e-12)
    platt = SplineCalibrator(n_knots=0).fit(z, y)  # no knot: one affine segment, through (0, b)
    np.testing.assert_allclose(
        platt.hinge_maps(1)[0](t), platt.a_ * t + platt.b_, rtol=0, atol=1e-12
    )


def test_weighted_nll_before_and_after():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, 3000)
    y = (rng.uniform(size=z.size) < sigmoid(0.6 * z)).astype(float)
    w = rng.uniform(0.2, 3.0, z.size)
    cal = SplineCalibrator().fit(z, y, weights=w)

    def nll(t):
        p = sigmoid(t)
        return float(-np.sum(w * (y * np.log(p) + (1 - y) * np.log1p(-p))) / w.sum())

    assert cal.nll_before_ == pytest.approx(nll(z), rel=1e-9)
    assert (
        cal.nll_after_ == pytest.approx(nll(cal.transform_logits(z)), rel=1e-9)
        and cal.nll_after_ < cal.nll_before_
    )


def test_from_dict_checks_each_field_by_name():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 2, 3000)
    d = SplineCalibrator().fit(z, (rng.uniform(size=z.size) < sigmoid(z)).astype(float)).to_dict()
    no_ridge = {k: v for k, v in d.items() if k != "ridge"}
    assert SplineCalibrator.from_dict(no_ridge).ridge == 0.0
    with pytest.raises(InputError, match="`knots`"):
        SplineCalibrator.from_dict({**d, "knots": [float("nan")] * len(d["knots"])})
    with pytest.raises(InputError, match="`b`"):
        SplineCalibrator.from_dict({**d, "b": float("nan")})
    with pytest.raises(InputError):
        SplineCalibrator.from_dict({**d, "c": tuple(d["c"])})  # not a list, though the knots are

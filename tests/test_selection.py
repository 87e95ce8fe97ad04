"""CV selection of calibrator and fit range: `none` on calibrated data, the right method otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.scaling import sigmoid
from det_calib.selection import (
    METHODS,
    calibrator_from_dict,
    make_calibrator,
    select_calibrator,
)


def _boxes(true_logit, *, n=60_000, seed=0, nc=4, classes=None):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    k = rng.integers(0, nc, n) if classes is None else classes
    y = rng.random(n) < sigmoid(true_logit(z, k))
    groups = np.arange(n) // 20  # 20 boxes per image
    return z, y, k, groups


def test_perfectly_calibrated_data_keeps_raw_scores():
    z, y, k, g = _boxes(lambda z, k: z)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "none"
    assert "none" in sel.reason
    assert {c.method for c in sel.candidates} == set(METHODS)
    np.testing.assert_array_equal(sel.calibrator.transform_logits(z[:5]), z[:5])


def test_planted_affine_miscalibration_picks_platt():
    z, y, k, g = _boxes(lambda z, k: 1.5 * z - 0.7)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "platt", sel.reason
    assert sel.calibrator.a_ == pytest.approx(1.5, rel=0.03)


def test_planted_temperature_picks_temperature():
    z, y, k, g = _boxes(lambda z, k: z / 1.6)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "temperature", sel.reason


def test_planted_per_class_maps_pick_a_per_class_method():
    a = np.array([0.6, 1.0, 1.6, 2.2])
    b = np.array([0.8, -0.5, 0.0, -1.2])
    z, y, k, g = _boxes(lambda z, k: a[k] * z + b[k])
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "class-platt", sel.reason


def test_planted_nonlinear_map_picks_isotonic():
    z, y, k, g = _boxes(lambda z, k: np.where(z < 0, 0.4 * z - 2.0, 3.0 * z - 2.0), n=80_000)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25, methods=("temperature", "platt", "isotonic"))
    assert sel.chosen.method == "isotonic", sel.reason


def test_selection_result_is_json_and_the_calibrator_round_trips():
    z, y, k, g = _boxes(lambda z, k: 1.3 * z + 0.3, n=10_000)
    sel = select_calibrator(z, y, classes=k, groups=g, fit_min_confs=(0.0, 0.05), n_folds=3, n_repeats=2)
    d = json.loads(json.dumps(sel.to_dict()))
    assert d["criterion"] == "nll" and d["n_folds"] == 3 and d["n_repeats"] == 2
    names = {(c["method"], c["fit_min_conf"]) for c in d["candidates"]}
    assert ("platt", 0.05) in names and ("none", 0.0) in names
    for c in d["candidates"]:
        if c["error"] is None:
            assert len(c["fold_scores"]) == 3 * 2
            assert c["cv_diff"] >= 0.0 and c["cv_diff_se"] >= 0.0
    cal = calibrator_from_dict(d["calibrator"])
    np.testing.assert_allclose(
        cal.transform_logits(z[:20], classes=k[:20]), sel.calibrator.transform_logits(z[:20], classes=k[:20])
    )


def test_repeats_are_fresh_fold_assignments_scored_fold_by_fold():
    """Repeat r uses the fold assignment of seed + r: the first K scores are the single run's, the
    next K those of a single run at seed + 1; the mean and the corrected SE cover all R x K."""
    z, y, k, g = _boxes(lambda z, k: 1.3 * z + 0.3, n=10_000)
    kw = dict(classes=k, groups=g, methods=("temperature", "platt"), fit_min_confs=(0.0,), n_folds=4)
    three = select_calibrator(z, y, n_repeats=3, seed=7, **kw)
    firsts = [select_calibrator(z, y, n_repeats=1, seed=s, **kw) for s in (7, 8, 9)]
    for j, c in enumerate(three.candidates):
        parts = [f.candidates[j].fold_scores for f in firsts]
        assert c.fold_scores == parts[0] + parts[1] + parts[2]
        d = np.asarray(c.fold_scores)
        assert c.mean == pytest.approx(d.mean(), rel=1e-12)
        assert c.se == pytest.approx(d.std(ddof=1) * np.sqrt(1 / 12 + 1 / 3), rel=1e-12)
    best = min(three.candidates, key=lambda c: c.mean)
    for c in three.candidates:
        d = np.asarray(c.fold_scores) - np.asarray(best.fold_scores)
        assert c.diff == pytest.approx(d.mean(), abs=1e-15)
        assert c.diff_se == pytest.approx(d.std(ddof=1) * np.sqrt(1 / 12 + 1 / 3), abs=1e-15)
    assert three.n_repeats == 3 and "3x4 folds" in three.reason
    with pytest.raises(InputError, match="`n_repeats`"):
        select_calibrator(z, y, n_repeats=0, **kw)


def test_one_se_rule_uses_the_standard_error_of_the_cv_estimate():
    """The rule compares means with one (corrected) standard error of the best's CV estimate, which
    includes how much the folds differ: a candidate worse on every fold by a steady 0.01 is still
    within it when folds differ by 0.05, and the simpler one is kept; the fold-by-fold difference
    (0.01 ± 0) is recorded beside it. A candidate beyond that standard error is not chosen."""
    from det_calib.selection import Candidate, _one_se_choice

    hard = np.array([0.45, 0.52, 0.58, 0.47, 0.50] * 5)  # 5 repeats x 5 folds, folds differ by ~0.05
    se = float(np.std(hard, ddof=1) * np.sqrt(1 / 25 + 1 / 4))
    none = Candidate("none", 0.0, float((hard + 0.01).mean()), se, list(hard + 0.01))
    spline = Candidate("spline", 0.0, float(hard.mean()), se, list(hard))
    chosen, best = _one_se_choice([none, spline], (0.0,), 5)
    assert best is spline and chosen is none
    assert none.diff == pytest.approx(0.01) and none.diff_se == pytest.approx(0.0, abs=1e-12)
    assert spline.diff == 0.0 and spline.diff_se == 0.0
    far = Candidate("none", 0.0, float((hard + 2 * se).mean()), se, list(hard + 2 * se))
    chosen, best = _one_se_choice([far, spline], (0.0,), 5)
    assert best is spline and chosen is spline


def test_selection_bad_input():
    z, y, _k, _g = _boxes(lambda z, k: z, n=200)
    with pytest.raises(InputError, match="`criterion`"):
        select_calibrator(z, y, criterion="auc")
    with pytest.raises(InputError, match="`methods`"):
        select_calibrator(z, y, methods=("beta",))
    with pytest.raises(InputError, match="`method`"):
        make_calibrator("beta")


def test_fit_calibrator_uses_only_its_fit_range():
    from det_calib.selection import fit_calibrator

    z, y, _k, _g = _boxes(lambda z, k: 1.4 * z + 0.2, n=20_000)
    above = z > np.log(0.1 / 0.9)
    cal = fit_calibrator("platt", z, y, fit_min_conf=0.1)
    ref = make_calibrator("platt").fit(z[above], y[above])
    assert (cal.a_, cal.b_) == (ref.a_, ref.b_)
    with pytest.raises(InputError, match="`classes`"):
        fit_calibrator("class-platt", z, y)

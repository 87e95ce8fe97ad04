"""Platt and per-class affine calibrators: parity with scikit-learn, planted maps, shrinkage, errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from det_calib.errors import DegenerateFitError, InputError
from det_calib.scaling import ClassAffineScaler, PlattScaler, group_folds, sigmoid


def _planted(a, b, n=50_000, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.5, 3.0, n)
    y = rng.random(n) < sigmoid(a * z + b)
    return z, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_platt_matches_unpenalised_logistic_regression(seed):
    sklearn_lm = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(seed)
    n = 5000
    z = rng.normal(rng.uniform(-3, 1), rng.uniform(1, 4), n)
    y = rng.random(n) < sigmoid(rng.uniform(0.5, 2) * z + rng.uniform(-1, 1))
    w = rng.uniform(0.1, 2.0, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sklearn_lm.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(z[:, None], y, sample_weight=w)
    p = PlattScaler().fit(z, y, weights=w)
    assert p.a_ == pytest.approx(ref.coef_[0, 0], rel=1e-6)
    assert p.b_ == pytest.approx(ref.intercept_[0], abs=1e-6)
    np.testing.assert_allclose(p.predict_proba(z), ref.predict_proba(z[:, None])[:, 1], atol=1e-7)


def test_platt_recovers_a_planted_map_and_round_trips_json():
    z, y = _planted(1.5, -0.7, n=200_000)
    p = PlattScaler().fit(z, y)
    assert p.a_ == pytest.approx(1.5, rel=0.02) and p.b_ == pytest.approx(-0.7, rel=0.05)
    assert p.nll_after_ < p.nll_before_
    q = PlattScaler.from_dict(json.loads(json.dumps(p.to_dict())))
    np.testing.assert_array_equal(q.transform_logits(z[:10]), p.transform_logits(z[:10]))


@pytest.mark.parametrize(
    ("z", "y", "match"),
    [
        ([0.1, 0.2, 0.3] * 5, [0] * 15, "no correct boxes"),
        ([0.1, 0.2, 0.3] * 5, [1] * 15, "no incorrect boxes"),
        ([1.0] * 12, [0, 1] * 6, "one logit value"),
        (list(range(-6, 6)), [0] * 6 + [1] * 6, "separable"),
        ([0.0, 1.0], [0, 1], "at least 10"),
        (list(range(12)), [1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0], "a = .* <= 0"),
    ],
)
def test_platt_refuses_degenerate_input(z, y, match):
    with pytest.raises(DegenerateFitError, match=match):
        PlattScaler().fit(np.asarray(z, dtype=float), np.asarray(y))


def test_platt_bad_input_names_the_argument():
    with pytest.raises(InputError, match="`labels`"):
        PlattScaler().fit([0.0, 1.0, 2.0], [0, 1])
    with pytest.raises(InputError, match="`labels`"):
        PlattScaler().fit([0.0, 1.0, 2.0], [0, 2, 1])


def _per_class(n_big=30_000, n_small=25, seed=0):
    rng = np.random.default_rng(seed)
    a = np.array([1.5, 0.8, 1.2, 2.0])
    b = np.array([-0.7, 0.4, 0.0, -1.2])
    counts = np.array([n_big, n_big, n_big, n_small])
    k = np.repeat(np.arange(4), counts)
    z = rng.normal(-1.5, 3.0, k.size)
    y = rng.random(k.size) < sigmoid(a[k] * z + b[k])
    groups = np.arange(k.size) // 10
    return z, y, k, groups, a, b


def test_class_platt_recovers_big_classes_and_shrinks_small_ones():
    z, y, k, g, a, b = _per_class()
    cal = ClassAffineScaler(kind="platt").fit(z, y, classes=k, groups=g)
    assert math.isfinite(cal.shrinkage_)  # the CV keeps per-class maps here
    np.testing.assert_allclose(cal.a_[:3], a[:3], rtol=0.05)
    np.testing.assert_allclose(cal.b_[:3], b[:3], atol=0.12)  # sampling noise of b is ~0.04
    # class 3 has 25 boxes: its map lies between its planted map and the global one, near the global
    unshrunk_gap = abs(a[3] - cal.global_a_)
    assert abs(cal.a_[3] - cal.global_a_) < 0.5 * unshrunk_gap
    assert cal.cv_nll_ is not None and set(cal.cv_nll_) == {1.0, 10.0, 100.0, 1000.0, 10000.0, math.inf}
    # an unseen class id gets the global map
    np.testing.assert_allclose(cal.transform_logits([1.0], classes=[9]), [cal.global_a_ + cal.global_b_])
    back = ClassAffineScaler.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(back.transform_logits(z[:50], classes=k[:50]),
                                  cal.transform_logits(z[:50], classes=k[:50]))


def test_class_platt_with_infinite_shrinkage_is_the_global_platt():
    z, y, k, *_ = _per_class(n_big=3000)
    cal = ClassAffineScaler(kind="platt", shrinkage=math.inf).fit(z, y, classes=k)
    glob = PlattScaler().fit(z, y)
    np.testing.assert_allclose(cal.a_, glob.a_, rtol=1e-9)
    np.testing.assert_allclose(cal.b_, glob.b_, rtol=1e-9, atol=1e-12)


def test_class_temperature_has_no_bias_and_recovers_temperatures():
    rng = np.random.default_rng(3)
    t = np.array([0.6, 1.0, 2.0])
    k = rng.integers(0, 3, 60_000)
    z = rng.normal(-1.0, 3.0, k.size)
    y = rng.random(k.size) < sigmoid(z / t[k])
    cal = ClassAffineScaler(kind="temperature").fit(z, y, classes=k, groups=np.arange(k.size) // 20)
    np.testing.assert_array_equal(cal.b_, 0.0)
    np.testing.assert_allclose(cal.temperatures_, t, rtol=0.05)


def test_class_affine_needs_classes_and_valid_options():
    z, y = _planted(1.0, 0.0, n=100)
    with pytest.raises(InputError, match="`classes`"):
        ClassAffineScaler().fit(z, y)
    with pytest.raises(InputError, match="`kind`"):
        ClassAffineScaler(kind="beta").fit(z, y, classes=np.zeros(100, int))
    with pytest.raises(InputError, match="`shrinkage`"):
        ClassAffineScaler(shrinkage=-1.0).fit(z, y, classes=np.zeros(100, int))


def test_group_folds_keep_groups_together():
    g = np.repeat(np.arange(50), 7)
    f = group_folds(g.size, 5, g, seed=1)
    for gid in range(50):
        assert np.unique(f[g == gid]).size == 1
    assert np.bincount(f).tolist() == [70] * 5
    with pytest.raises(InputError, match="n_folds"):
        group_folds(10, 1)
    with pytest.raises(InputError, match="at least"):
        group_folds(10, 5, np.zeros(10))

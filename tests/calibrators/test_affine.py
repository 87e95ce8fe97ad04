"""Platt and per-class affine calibrators: parity with scikit-learn, planted maps, shrinkage, errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from det_calib.calibrators.affine import ClassAffineScaler, PlattScaler, group_folds, sigmoid
from det_calib.errors import DegenerateFitError, InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


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
        ref = sklearn_lm.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(
            z[:, None], y, sample_weight=w
        )
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
    assert cal.cv_nll_ is not None and set(cal.cv_nll_) == {
        1.0,
        10.0,
        100.0,
        1000.0,
        10000.0,
        math.inf,
    }
    # an unseen class id gets the global map
    np.testing.assert_allclose(
        cal.transform_logits([1.0], classes=[9]), [cal.global_a_ + cal.global_b_]
    )
    back = ClassAffineScaler.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(
        back.transform_logits(z[:50], classes=k[:50]), cal.transform_logits(z[:50], classes=k[:50])
    )


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


def test_platt_json_keeps_its_diagnostics_and_refuses_bad_values():
    z, y = _planted(1.5, -0.7, n=5000)
    p = PlattScaler().fit(z, y)
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert d == {
        "format": "det_calib.PlattScaler",
        "version": 1,
        "a": p.a_,
        "b": p.b_,
        "n_samples": 5000,
        "nll_before": p.nll_before_,
        "nll_after": p.nll_after_,
    }
    q = PlattScaler.from_dict(d)
    assert (q.a_, q.b_, q.n_samples_, q.nll_before_, q.nll_after_) == (
        p.a_,
        p.b_,
        5000,
        p.nll_before_,
        p.nll_after_,
    )
    # only the map is required; the diagnostics come back as null
    m = PlattScaler.from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": 2.0, "b": -1.0}
    )
    assert not hasattr(m, "n_samples_")
    assert m.to_dict() == {
        "format": "det_calib.PlattScaler",
        "version": 1,
        "a": 2.0,
        "b": -1.0,
        "n_samples": None,
        "nll_before": None,
        "nll_after": None,
    }
    np.testing.assert_array_equal(m.transform_logits([0.0, 1.5]), [-1.0, 2.0])
    base = {"format": "det_calib.PlattScaler", "version": 1, "a": 2.0, "b": -1.0}
    for patch, name in (
        ({"a": 0.0}, "`a` to be finite and > 0"),
        ({"a": -1.0}, "`a` to be finite and > 0"),
        ({"b": math.inf}, "`b` to be finite"),
        ({"b": "x"}, "`b` to be a number"),
    ):
        with pytest.raises(InputError, match=name):
            PlattScaler.from_dict({**base, **patch})


@pytest.mark.parametrize("shrinkage", ["auto", math.inf])
def test_class_affine_json_round_trip_is_exact(shrinkage):
    z, y, k, g, *_ = _per_class(n_big=2000, seed=2)
    cal = ClassAffineScaler(kind="platt", shrinkage=shrinkage).fit(z, y, classes=k, groups=g)
    d = json.loads(json.dumps(cal.to_dict(), allow_nan=False))
    assert set(d) == {
        "format",
        "version",
        "kind",
        "a",
        "b",
        "global_a",
        "global_b",
        "shrinkage",
        "class_counts",
        "cv_nll",
    }
    assert d["class_counts"] == [2000, 2000, 2000, 25]
    if shrinkage == "auto":
        assert d["shrinkage"] == cal.shrinkage_ and math.isfinite(d["shrinkage"])
        assert (
            d["cv_nll"] == {str(lam): v for lam, v in cal.cv_nll_.items()} and "inf" in d["cv_nll"]
        )
    else:
        assert d["shrinkage"] == "inf" and d["cv_nll"] is None
    back = ClassAffineScaler.from_dict(d)
    assert back.shrinkage_ == cal.shrinkage_ and back.cv_nll_ == cal.cv_nll_
    np.testing.assert_array_equal(back.class_counts_, cal.class_counts_)
    assert back.to_dict() == d


def test_class_affine_transform_known_answer():
    cal = ClassAffineScaler.from_dict(
        {
            "format": "det_calib.ClassAffineScaler",
            "version": 1,
            "kind": "platt",
            "a": [2.0, 0.5],
            "b": [1.0, -1.0],
            "global_a": 1.5,
            "global_b": 0.25,
        }
    )
    # class 5 was never fitted: the global map
    np.testing.assert_array_equal(
        cal.transform_logits([1.0, 2.0, 3.0], classes=[0, 1, 5]), [3.0, 0.0, 4.75]
    )
    assert cal.transform_logits([], classes=[]).shape == (0,)
    assert cal.to_dict()["class_counts"] == [0, 0] and cal.to_dict()["shrinkage"] == "inf"
    with pytest.raises(InputError, match="`logits`"):
        cal.transform_logits([[1.0], [2.0]], classes=[0, 1])


def test_reprs():
    assert repr(PlattScaler(tol=1e-7, max_iter=5)) == "PlattScaler(tol=1e-07, max_iter=5)"
    p = PlattScaler.from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": 1.25, "b": -0.5}
    )
    assert repr(p) == "PlattScaler(tol=1e-09, max_iter=100, a_=1.25, b_=-0.5)"
    assert repr(ClassAffineScaler(kind="temperature", shrinkage=10.0)) == (
        "ClassAffineScaler(kind='temperature', shrinkage=10.0)"
    )
    c = ClassAffineScaler.from_dict(
        {
            "format": "det_calib.ClassAffineScaler",
            "version": 1,
            "kind": "platt",
            "a": [1.0],
            "b": [0.0],
            "global_a": 1.0,
            "global_b": 0.0,
            "shrinkage": 100.0,
        }
    )
    assert repr(c) == "ClassAffineScaler(kind='platt', shrinkage='auto', shrinkage_=100)"


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"a": [1.0, 0.0]}, "`a` to be finite and > 0"),
        ({"b": [0.0, math.nan]}, "`b` to be finite"),
        ({"global_a": -1.0}, "`global_a` to be finite and > 0"),
        ({"global_b": math.inf}, "`global_b` to be finite"),
        ({"b": [0.0]}, "`a` and `b` differ in length"),
    ],
)
def test_class_affine_from_dict_refuses_bad_values(patch, match):
    d = {
        "format": "det_calib.ClassAffineScaler",
        "version": 1,
        "kind": "platt",
        "a": [2.0, 0.5],
        "b": [1.0, -1.0],
        "global_a": 1.5,
        "global_b": 0.25,
    }
    with pytest.raises(InputError, match=match):
        ClassAffineScaler.from_dict({**d, **patch})


def test_class_affine_from_dict_without_class_maps_uses_the_global_map():
    cal = ClassAffineScaler.from_dict(
        {
            "format": "det_calib.ClassAffineScaler",
            "version": 1,
            "kind": "temperature",
            "global_a": 0.5,
            "global_b": 0.0,
        }
    )
    assert cal.n_classes_ == 0
    np.testing.assert_array_equal(cal.transform_logits([2.0, -4.0], classes=[0, 3]), [1.0, -2.0])


def test_group_folds_follow_the_documented_deal():
    g = np.array([5, 5, 9, 2, 2, 2, 7, 9, 11, 4])
    for seed in (0, 3):
        uniq, inv = np.unique(g, return_inverse=True)
        fold_of_group = np.empty(uniq.size, dtype=np.int64)
        fold_of_group[np.random.default_rng(seed).permutation(uniq.size)] = np.arange(uniq.size) % 3
        np.testing.assert_array_equal(group_folds(10, 3, g, seed=seed), fold_of_group[inv])
    np.testing.assert_array_equal(group_folds(10, 3, g), group_folds(10, 3, g, seed=0))
    # without groups each row is its own group; two folds and as many folds as groups are fine
    assert np.bincount(group_folds(9, 3)).tolist() == [3, 3, 3]
    assert sorted(group_folds(3, 3).tolist()) == [0, 1, 2] and set(group_folds(4, 2).tolist()) == {
        0,
        1,
    }
    with pytest.raises(InputError, match="`groups`"):
        group_folds(4, 2, np.zeros((4, 1)))


def test_class_affine_cv_recomputed_independently():
    """The held-out NLL per shrinkage: K-fold by image groups, each fold's fit on the other folds
    (its own global map as the prior), the mean NLL of the held-out boxes; then the strongest
    shrinkage within one standard error (ddof 1) of the best."""
    z, y, k, g, *_ = _per_class(n_big=400, n_small=40, seed=5)
    grid = (1.0, 30.0, 1000.0, math.inf)
    cal = ClassAffineScaler(kind="platt", shrinkage_grid=grid, n_folds=3, seed=3).fit(
        z, y, classes=k, groups=g
    )
    folds = group_folds(z.size, 3, g, seed=3)
    scores = np.zeros((3, len(grid)))
    for f in range(3):
        tr, te = folds != f, folds == f
        for j, lam in enumerate(grid):
            m = ClassAffineScaler(kind="platt", shrinkage=lam).fit(z[tr], y[tr], classes=k[tr])
            t = m.transform_logits(z[te], classes=k[te])
            scores[f, j] = np.mean(np.logaddexp(0.0, t) - y[te] * t)
    mean = scores.mean(axis=0)
    assert set(cal.cv_nll_) == set(grid)
    assert [cal.cv_nll_[lam] for lam in grid] == pytest.approx(mean.tolist(), rel=1e-6)
    se = scores.std(axis=0, ddof=1) / math.sqrt(3)
    best = int(np.argmin(mean))
    order = sorted(range(len(grid)), key=lambda j: -grid[j])
    assert cal.shrinkage_ == grid[next(j for j in order if mean[j] <= mean[best] + se[best])]
    # a fixed shrinkage has no CV record
    assert ClassAffineScaler(kind="platt", shrinkage=0.0).fit(z, y, classes=k).cv_nll_ is None


def test_class_affine_options_classes_and_defaults():
    z, y, k, *_ = _per_class(n_big=300, n_small=30, seed=6)
    c = ClassAffineScaler()
    assert (c.kind, c.shrinkage, c.n_folds, c.min_samples, c.seed) == ("platt", "auto", 3, 10, 0)
    with pytest.raises(InputError, match="`shrinkage`"):
        ClassAffineScaler(shrinkage="strong").fit(z, y, classes=k)
    np.testing.assert_array_equal(
        ClassAffineScaler(shrinkage=5.0).fit(z, y, classes=k.astype(float)).a_,
        ClassAffineScaler(shrinkage=5.0).fit(z, y, classes=k).a_,
    )
    for bad in (k + 0.5, k[:, None], k[:-1]):
        with pytest.raises(InputError, match="`classes`"):
            ClassAffineScaler(shrinkage=5.0).fit(z, y, classes=bad)
    with pytest.raises(DegenerateFitError, match="global slope"):
        ClassAffineScaler(shrinkage=5.0).fit(-z, y, classes=k)


def test_class_affine_predict_proba_passes_the_classes_and_options_are_checked():
    cal = ClassAffineScaler.from_dict(
        {
            "format": "det_calib.ClassAffineScaler",
            "version": 1,
            "kind": "platt",
            "a": [2.0, 0.5],
            "b": [1.0, -1.0],
            "global_a": 1.5,
            "global_b": 0.25,
        }
    )
    np.testing.assert_allclose(
        cal.predict_proba([1.0, 2.0], classes=[0, 1]), sigmoid(np.array([3.0, 0.0]))
    )
    z, y, k, *_ = _per_class(n_big=300, n_small=30, seed=6)
    with pytest.raises(InputError, match="`shrinkage_grid`"):
        ClassAffineScaler(shrinkage_grid=(0.0, 10.0)).fit(z, y, classes=k)
    with pytest.raises(InputError, match="`n_folds`"):
        group_folds(10, True)


def test_platt_with_integer_weights_is_platt_on_repeated_rows():
    """Weights are counts: the fit, its iterations and its NLL diagnostics equal those of the fit
    on the rows repeated that many times."""
    rng = np.random.default_rng(11)
    z = rng.normal(0, 2, 300)
    y = rng.random(300) < sigmoid(0.7 * z - 0.4)
    w = rng.integers(0, 4, 300).astype(float)
    a = PlattScaler().fit(z, y, weights=w)
    rep = np.repeat(np.arange(300), w.astype(int))
    b = PlattScaler().fit(z[rep], y[rep])
    assert a.a_ == pytest.approx(b.a_, rel=1e-9) and a.b_ == pytest.approx(
        b.b_, rel=1e-9, abs=1e-12
    )
    assert a.nll_before_ == pytest.approx(b.nll_before_, rel=1e-12)
    assert a.nll_after_ == pytest.approx(b.nll_after_, rel=1e-12)
    nll = lambda t, yy, ww: float(np.sum(ww * (np.logaddexp(0, t) - yy * t)) / ww.sum())  # noqa: E731
    assert a.nll_before_ == pytest.approx(nll(z, y, w), rel=1e-12)
    assert a.nll_after_ == pytest.approx(nll(a.a_ * z + a.b_, y, w), rel=1e-12)
    assert a.nll_after_ < a.nll_before_
    assert 1 <= a.n_iter_ == b.n_iter_ <= a.max_iter
    assert a.n_samples_ == 300


@pytest.mark.parametrize("case", ["all_correct", "separable", "anti", "fine"])
def test_platt_ignores_weight_zero_boxes_in_its_checks(case):
    rng = np.random.default_rng(2)
    z = rng.normal(0, 2, 40)
    y = rng.random(40) < sigmoid(z)
    if case == "all_correct":
        y[:] = True
    elif case == "separable":
        y = z > 0.3
    elif case == "anti":
        y = rng.random(40) < sigmoid(-2 * z)
    z0, y0 = np.array([-3.0, 3.0, 2.5, -2.5]), np.array([True, False, True, False])
    w = np.concatenate([np.ones(40), np.zeros(4)])

    def outcome(fit):
        try:
            s = fit()
            return "ok", round(s.a_, 6), round(s.b_, 6)
        except DegenerateFitError as e:
            return "refused", str(e)

    weighted = outcome(
        lambda: PlattScaler().fit(np.concatenate([z, z0]), np.concatenate([y, y0]), weights=w)
    )
    assert weighted == outcome(lambda: PlattScaler().fit(z, y))
    assert weighted[0] == ("ok" if case == "fine" else "refused")


@pytest.mark.parametrize("kind", ["platt", "temperature"])
def test_class_affine_refuses_a_class_driven_to_a_negative_slope(kind):
    """Without shrinkage a class whose logits are anti-correlated with correctness would get a
    slope <= 0 (a decreasing map): refused, naming that class; enough shrinkage keeps it positive."""
    rng = np.random.default_rng(8)
    z = rng.normal(0, 2, 3000)
    k = np.repeat([0, 1, 2], 1000)
    p = sigmoid(
        np.select([k == 0, k == 1], [0.8 * z, -1.5 * z], 1.4 * z)
    )  # class 0: a slope below 1
    y = rng.random(3000) < p
    with pytest.raises(
        DegenerateFitError, match=rf"per-class {kind} fit gave a non-positive .*\(class 1\)"
    ):
        ClassAffineScaler(kind=kind, shrinkage=0.0).fit(z, y, classes=k)
    s = ClassAffineScaler(kind=kind, shrinkage=1e7).fit(z, y, classes=k)
    assert (s.a_ > 0).all() and s.a_[1] == pytest.approx(s.global_a_, rel=1e-3)

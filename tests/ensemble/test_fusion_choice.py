"""The ensemble's fusion choice on the fit split's folds: out-of-fold scores, the rule."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from det_calib.ensemble.fusion_choice import (
    _MAP_TOLERANCE,
    Z_SIMPLER,
    FusionCandidate,
    _paired_se,
    choose,
    image_folds,
    out_of_fold,
)
from det_calib.errors import DegenerateFitError
from det_calib.metrics.operating_point import kept_ece
from det_calib.selection.cross_validation import fit_calibrator

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

ORDERS = ("fuse-then-calibrate", "calibrate-then-fuse")


def _boxes(n_img: int = 200, per: int = 12, t: float = 2.0, seed: int = 0) -> pl.DataFrame:
    """Boxes whose labels are drawn from ``sigmoid(z / t)``: raw scores over-confident by a planted ``t``."""
    rng = np.random.default_rng(seed)
    n = n_img * per
    z = rng.normal(0.0, 3.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-z / t))
    return pl.DataFrame(
        {
            "image_id": np.repeat(np.arange(n_img), per),
            "logit": z,
            "conf": 1 / (1 + np.exp(-z)),
            "cls": rng.integers(0, 3, n),
            "correct": y,
            "ignore": rng.random(n) < 0.02,
        }
    )


def test_image_folds_deal_every_image_to_one_fold():
    f = image_folds(103, 5, seed=3)
    assert f.shape == (103,) and set(np.unique(f)) == set(range(5))
    assert np.bincount(f).max() - np.bincount(f).min() <= 1
    assert not np.array_equal(f, image_folds(103, 5, seed=4))


def test_out_of_fold_refits_without_the_held_out_images():
    b = _boxes()
    folds = image_folds(200, 5, seed=0)
    p = out_of_fold(b, "temperature", 0.0, folds, seed=0)
    z, y, img, ign = (b[c].to_numpy() for c in ("logit", "correct", "image_id", "ignore"))
    for f in range(
        5
    ):  # each fold's scores are the map fitted on the other folds (crowd-matched left out)
        train = (folds[img] != f) & ~ign
        cal = fit_calibrator("temperature", z[train], y[train], fit_min_conf=0.0)
        test = folds[img] == f
        np.testing.assert_allclose(
            p[test], cal.deployed_conf(z[test], b["cls"].to_numpy()[test], None), atol=1e-12
        )
    # the planted over-confidence is removed out of fold: the kept-set ECE falls well below the raw one
    raw = kept_ece(b["conf"].to_numpy(), y, threshold=0.25)
    assert kept_ece(p, y, threshold=0.25) < 0.4 * raw
    np.testing.assert_array_equal(out_of_fold(b, "none", 0.0, folds, seed=0), b["conf"].to_numpy())


def _cand(order, score, fit_map, p, y, img) -> FusionCandidate:
    c = FusionCandidate(order, score, "platt", 0.0, fit_map)
    c.cv_scores = [kept_ece(p, y, threshold=0.25)]
    c.oof = (p, y, img)
    return c


def test_rule_accuracy_first_then_kept_ece_then_simpler():
    rng = np.random.default_rng(1)
    n_img, per = 300, 8
    img = np.repeat(np.arange(n_img), per)
    p = rng.uniform(0.05, 0.99, img.size)
    calibrated = rng.random(img.size) < p  # labels drawn from p: p is calibrated
    overconf = rng.random(img.size) < p**2  # p is over-confident for these
    # the best calibrated candidate loses more than MAP_TOLERANCE mAP: not eligible
    low_map = _cand(ORDERS[0], "present", 0.50 - 2 * _MAP_TOLERANCE, p, calibrated, img)
    simple = _cand(ORDERS[0], "agree", 0.50, p, overconf, img)
    better = _cand(ORDERS[1], "agree", 0.50, p, calibrated, img)
    got = choose([low_map, simple, better], orders=ORDERS, threshold=0.25, n_bins=15, seed=0)
    assert got is better and got.verdict.startswith("chosen: lowest")
    assert "below the best" in low_map.verdict and simple.diff > 0 and simple.diff_se > 0
    # a simpler candidate as good as the best (the same scores, other label noise) is preferred
    twin = _cand(ORDERS[0], "agree", 0.50, p, rng.random(img.size) < p, img)
    got = choose([twin, better], orders=ORDERS, threshold=0.25, n_bins=15, seed=0)
    if twin.cv_mean > better.cv_mean:
        assert got is twin and "preferred" in twin.verdict and twin.diff < twin.diff_se
    else:
        assert got is twin and twin.verdict.startswith("chosen: lowest")
    # within an order, the rules in their order of preference (agree first), whatever their mAP
    a = _cand(ORDERS[0], "max", 0.50, p, calibrated, img)
    b = _cand(ORDERS[0], "agree", 0.495, p, calibrated, img)
    assert choose([a, b], orders=ORDERS, threshold=0.25, n_bins=15, seed=0) is b
    # ... unless another is better by more than Z_SIMPLER paired standard errors
    c = _cand(ORDERS[0], "agree", 0.50, p, overconf, img)
    assert choose([a, c], orders=ORDERS, threshold=0.25, n_bins=15, seed=0) is a
    assert c.diff > Z_SIMPLER * c.diff_se


def test_rule_refuses_when_nothing_could_be_scored():
    c = FusionCandidate(ORDERS[0], "agree", "platt", 0.0, 0.5, error="too few boxes")
    with pytest.raises(DegenerateFitError):
        choose([c], orders=ORDERS, threshold=0.25, n_bins=15, seed=0)


def test_paired_se_is_zero_for_identical_and_positive_for_different():
    rng = np.random.default_rng(2)
    img = np.repeat(np.arange(100), 5)
    p = rng.uniform(0.3, 1.0, img.size)
    y = rng.random(img.size) < p
    a = (p, y, img)
    assert _paired_se(a, a, 0.25, 15, seed=0) == 0.0
    assert _paired_se(a, (p, ~y, img), 0.25, 15, seed=0) > 0.0


def test_record_fusion_of_each_head_and_of_runs_written_before_the_choice():
    from det_calib.ensemble.ensemble_record import EnsembleRecord

    fusion = {"iou": 0.55, "score": "auto", "order": "auto"}
    ens = {"name": "ensemble", "method": "platt", "map50_95": 0.5, "map50": 0.6}
    rec = EnsembleRecord.from_dict(
        {
            "fusion": fusion,
            "heads": {
                "nms": {"ensemble": ens, "order": "calibrate-then-fuse", "score": "avg"},
                "e2e": {"ensemble": ens, "order": "fuse-then-calibrate", "score": "max"},
            },
        }
    )
    assert rec.fusion_of("nms") == ("calibrate-then-fuse", "avg") and rec.fusion_of("e2e") == (
        "fuse-then-calibrate",
        "max",
    )
    back = EnsembleRecord.from_dict(rec.to_dict())
    assert back.heads["nms"].order == "calibrate-then-fuse" and back.fusion.score == "auto"
    # a run written before the choice has the fusion in its settings only
    old = EnsembleRecord.from_dict(
        {
            "fusion": {"iou": 0.55, "score": "agree", "order": "fuse-then-calibrate"},
            "heads": {"nms": {"ensemble": ens}},
        }
    )
    assert old.fusion_of("nms") == ("fuse-then-calibrate", "agree")

"""Why a calibrated kept set stays above its sampling floor (det_calib/evaluation/floor_gap.py), on planted
box tables: a few images, the fit split's sampling noise, and a miscalibration that depends on the class."""

from __future__ import annotations

import time

import numpy as np

from det_calib.calibrators.identity import Identity
from det_calib.data.box_view import BoxView
from det_calib.evaluation.floor_gap import _floor_gap
from det_calib.metrics.operating_point import kept_ece, kept_ece_floor
from det_calib.record.eval_record import ClassResult, EvalResult, FloorGap
from det_calib.record.run_result import HeadResult
from det_calib.report.record_words import floor_gap_short, floor_gap_words


def _view(p_score: np.ndarray, y: np.ndarray, cls: np.ndarray, img: np.ndarray) -> BoxView:
    z = np.log(p_score / (1 - p_score))
    return BoxView(
        logit=z,
        conf=p_score,
        correct=y.astype(bool),
        cls=cls.astype(np.int64),
        image_id=img.astype(np.int64),
    )


def _gap(view: BoxView, method: str) -> FloorGap | None:
    cal = Identity().fit(view.logit, view.correct.astype(float))
    scored = view.scored(cal)
    e = kept_ece(scored.conf, scored.correct, threshold=0.25, n_bins=15)
    fl = kept_ece_floor(scored.conf, threshold=0.25, n_bins=15)
    assert e > fl.high  # planted above its floor
    names = [f"img_{i:04d}.png" for i in range(int(view.image_id.max()) + 1)]
    return _floor_gap(
        view,
        scored,
        cal,
        threshold=0.25,
        n_bins=15,
        floor_high=fl.high,
        image_names=names,
        method=method,
    )


def test_one_image_of_confident_false_positives_is_named():
    rng = np.random.default_rng(0)
    n = 2000
    p = rng.uniform(0.3, 0.99, n)
    y = rng.random(n) < p  # calibrated
    p = np.r_[p, np.full(70, 0.97)]
    y = np.r_[y, np.zeros(70, bool)]  # one image: 70 confident boxes, none correct
    img = np.r_[np.arange(n) // 5, np.full(70, 400)]
    g = _gap(_view(p, y, np.zeros(p.size), img), "platt")
    assert g.reason == "images" and g.images == "img_0400.png" and g.image_count == 1
    assert (g.image_boxes, g.image_correct, g.kept_boxes) == (70, 0, 2070)
    assert g.ece_without <= g.floor_without_range[1]
    words = floor_gap_words(HeadResult(), EvalResult(floor_gap=g))
    assert words.startswith(
        "why above its floor: one eval image holds the gap, img_0400.png (70 of the 2070 kept"
    )
    assert "inside its floor's range" in words
    assert floor_gap_short(EvalResult(floor_gap=g)).startswith(
        "one eval image (img_0400.png) holds the gap"
    )


def test_a_map_of_the_score_fixes_it_then_the_gap_is_sampling_noise():
    """Scores too extreme by a fixed Platt map: a Platt map fitted on the eval boxes reaches the floor."""
    rng = np.random.default_rng(1)
    n = 4000
    z = rng.normal(0.5, 2.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(0.5 * z + 0.3)))
    p = 1 / (1 + np.exp(-z))
    g = _gap(_view(p, y, rng.integers(0, 3, n), np.arange(n) // 4), "platt")
    assert g.reason == "sampling" and g.refit_method == "platt"
    assert g.refit_ece <= g.refit_floor_range[1]
    words = floor_gap_words(HeadResult(), EvalResult(floor_gap=g))
    assert words.startswith(
        "why above its floor: a platt map fitted on the eval split itself scores ECE"
    )
    assert words.endswith(
        "the gap is the fit split's sampling noise, and more calibration images would close it"
    )


def test_a_miscalibration_by_class_alone_is_no_map_of_the_score():
    """Class 0 scores low and is mostly right, class 1 scores high and is mostly wrong: correctness depends on
    the class, and no monotone map of the score (isotonic, fitted on the eval boxes themselves) reaches the floor."""
    rng = np.random.default_rng(2)
    n = 3000
    cls = rng.integers(0, 2, n)
    p = np.where(cls == 0, rng.uniform(0.3, 0.6, n), rng.uniform(0.6, 0.99, n))
    y = rng.random(n) < np.where(cls == 0, 0.85, 0.45)
    g = _gap(_view(p, y, cls, np.arange(n) // 4), "isotonic")
    assert g.reason == "score" and g.refit_method == "isotonic"
    assert g.refit_ece > g.refit_floor_range[1]
    h = HeadResult(
        per_class=[
            ClassResult(cls=0, name="low", kept_ece_after=0.35, few_boxes=False),
            ClassResult(cls=1, name="high", kept_ece_after=0.35, few_boxes=False),
        ]
    )
    words = floor_gap_words(h, EvalResult(floor_gap=g))
    assert words.startswith(
        "why above its floor: no map of the score alone reaches it here: a isotonic map fitted"
    )
    assert "the rest depends on more than the score (worst classes: low 0.350, high 0.350)" in words
    assert floor_gap_short(EvalResult(floor_gap=g)) == "no map of the score alone reaches the floor"


def test_the_measurement_is_cheap_and_round_trips():
    rng = np.random.default_rng(3)
    n = 15000
    p = rng.uniform(0.01, 0.99, n)
    y = rng.random(n) < np.clip(p + 0.08, 0, 1)
    v = _view(p, y, rng.integers(0, 8, n), np.arange(n) // 40)
    t = time.perf_counter()
    g = _gap(v, "platt")
    assert time.perf_counter() - t < 1.0
    e = EvalResult(floor_gap=g)
    back = EvalResult.from_dict(e.to_dict(), "eval.nms")
    assert back.floor_gap == g
    assert (
        "floor_gap" not in EvalResult().to_dict()
        and EvalResult.from_dict(EvalResult().to_dict(), "e").floor_gap is None
    )

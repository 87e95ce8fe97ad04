"""``--target iou`` through the run's own steps: the IoU targets from real matching, a planted map from
the logit to the IoU recovered by the fit, the choice among ranking maps, mAP unchanged.

The boxes are built so that each image's detection overlaps its ground truth by a known IoU: a
100 x 100 box shifted by ``dx`` pixels has IoU ``(100 - dx) / (100 + dx)`` with it. The planted IoU
is ``sigmoid(A z + B)`` of the detection's logit, so the IoU-target fit must give back ``(A, B)``.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from det_calib.data.ground_truth import Split
from det_calib.job.settings import Settings
from det_calib.matching.one_to_one import match_boxes
from det_calib.numeric import sigmoid
from det_calib.pipeline.fitting import _fit_boxes, _fit_labels, fit_head

pytestmark = pytest.mark.fast

A, B = 0.8, 0.3
N = 400


def _planted(n: int = N, seed: int = 0) -> tuple[pl.DataFrame, Split, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.uniform(-4.0, 3.0, n)
    v = sigmoid(A * z + B)
    dx = 100.0 * (1.0 - v) / (1.0 + v)
    img = np.arange(n)
    gt = pl.DataFrame(
        {
            "image_id": img,
            "cls": np.zeros(n, dtype=np.int64),
            "x1": np.full(n, 100.0),
            "y1": np.full(n, 100.0),
            "x2": np.full(n, 200.0),
            "y2": np.full(n, 200.0),
            "crowd": np.zeros(n, dtype=bool),
        }
    )
    raw = pl.DataFrame(
        {
            "image_id": img,
            "cls": np.zeros(n, dtype=np.int32),
            "x1": 100.0 + dx,
            "y1": np.full(n, 100.0),
            "x2": 200.0 + dx,
            "y2": np.full(n, 200.0),
            "logit": z,
            "conf": sigmoid(z),
        }
    )
    boxes = match_boxes(raw, gt, iou=0.5, loc_iou=0.1)
    split = Split(name="calib", images=[], sizes=np.full((n, 2), 400), gt=gt)
    return boxes, split, v


def test_the_iou_target_is_the_iou_of_the_laece0_match():
    boxes, split, v = _planted()
    s = Settings(target="iou", method="platt")
    view = _fit_boxes(boxes, s, 0.0, split.gt)
    np.testing.assert_allclose(_fit_labels(view, "iou"), v, atol=1e-12)
    # the box table's own columns: `iou` is the best IoU (also of boxes unmatched at --iou 0.5), `loc_iou`
    # the IoU of the match at 0.1 (0 below it); the target is the match at IoU >= 0, as LaECE_0's
    np.testing.assert_allclose(boxes["iou"].to_numpy(), v, atol=1e-12)
    low = v < 0.1
    assert low.any() and (boxes["loc_iou"].to_numpy()[low] == 0).all()
    np.testing.assert_array_equal(_fit_labels(view, "correct"), v >= 0.5)
    with pytest.raises(Exception, match="ground truth"):
        _fit_boxes(boxes, s, 0.0)


def test_a_planted_iou_map_is_recovered_through_the_run_steps():
    boxes, split, _ = _planted()
    choice = fit_head(boxes, Settings(target="iou", method="platt"), split.gt)
    cal = choice.calibrator
    assert cal.a_ == pytest.approx(A, abs=1e-4)
    assert cal.b_ == pytest.approx(B, abs=1e-4)
    # the default target on the same boxes is the matched flag, here a step in the logit (IoU >= 0.5):
    # separable, which the fit refuses rather than return an unbounded slope
    from det_calib.errors import DegenerateFitError

    with pytest.raises(DegenerateFitError, match="separable"):
        fit_head(boxes, Settings(method="platt"), split.gt)


def test_auto_under_the_iou_target_keeps_the_ranking_and_the_map():
    from det_calib.calibrators import registry
    from det_calib.evaluation import figures

    boxes, split, _ = _planted(seed=1)
    s = Settings(target="iou", cv_repeats=1)
    choice = fit_head(boxes, s, split.gt)
    assert choice.method in registry.global_methods("iou") and choice.method != "none"
    assert {c.method for c in choice.selection.candidates} <= set(registry.global_methods("iou"))
    z = boxes["logit"].to_numpy()
    t = choice.calibrator.transform_logits(z)
    assert np.array_equal(np.argsort(z, kind="stable"), np.argsort(t, kind="stable"))
    m = figures.map_check(boxes, split, choice.calibrator, s)
    assert (m["map50_95_before"], m["map50_before"]) == (m["map50_95_after"], m["map50_after"])
    grid = np.linspace(-2.5, 2.5, 11)
    assert np.abs(choice.calibrator.predict_proba(grid) - sigmoid(A * grid + B)).max() < 0.02


def test_the_target_is_recorded_only_where_it_is_iou_and_read_back():
    import json
    from pathlib import Path

    from det_calib.errors import InputError
    from det_calib.record.run_result import RunResult

    ref = json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "fixture_calibration.json").read_text()
    )
    assert "target" not in ref and RunResult.from_dict(ref).settings.target == "correct"
    ref["target"] = "iou"
    r = RunResult.from_dict(ref)
    assert r.settings.target == "iou" and r.to_dict()["target"] == "iou"
    ref["target"] = "box"
    with pytest.raises(InputError, match="`target` must be one of correct, iou"):
        RunResult.from_dict(ref)
    with pytest.raises(InputError, match="target"):
        Settings(target="box").validate()

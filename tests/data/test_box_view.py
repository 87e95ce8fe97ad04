"""The box view (det_calib.data.box_view): built from the box table, it leaves out crowd-matched
boxes and counts them, keeps ``conf > threshold`` strictly, scores boxes by a calibrator exactly as
the calibrator deploys them, and carries extra columns through every subset."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.affine import PlattScaler
from det_calib.calibrators.identity import Identity
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.data.box_view import BoxView, kept_mask, usable_rows, with_calibrated
from det_calib.errors import InputError
from det_calib.numeric import sigmoid

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _table() -> pl.DataFrame:
    z = np.array([-2.0, 0.0, 1.5, 3.0, -1.0, 0.5])
    return pl.DataFrame(
        {
            "head": ["nms", "nms", "nms", "e2e", "nms", "nms"],
            "split": ["test", "test", "test", "test", "calib", "test"],
            "logit": z,
            "conf": sigmoid(z).astype(np.float32).astype(np.float64),
            "correct": [False, True, True, True, False, False],
            "cls": [0, 1, 0, 1, 0, 2],
            "image_id": [0, 0, 1, 1, 2, 3],
            "iou": [0.1, 0.8, 0.7, 0.9, 0.0, 0.6],
            "ignore": [False, False, False, False, False, True],
            "loc_iou": [0.2, 0.8, 0.7, 0.9, 0.0, 0.6],
            "x1": [0.0, 1, 2, 3, 4, 5],
            "y1": [0.0, 1, 2, 3, 4, 5],
            "x2": [10.0, 11, 12, 13, 14, 15],
            "y2": [10.0, 11, 12, 13, 14, 15],
            "img_w": [640] * 6,
            "img_h": [480] * 6,
        }
    )


def test_the_view_of_a_head_and_split_leaves_out_crowd_matched_boxes_and_counts_them():
    v = BoxView.from_boxes(_table(), head="nms", split="test", extra=("img_w",))
    assert (v.head, v.split, v.n, v.ignored) == ("nms", "test", 3, 1)
    assert v.logit.tolist() == [-2.0, 0.0, 1.5] and v.correct.tolist() == [False, True, True]
    assert v.cls.dtype == np.int64 and v.image_id.tolist() == [0, 0, 1]
    assert v.xyxy.shape == (3, 4) and v.xyxy[2].tolist() == [2.0, 2.0, 12.0, 12.0]
    assert v.iou.tolist() == [0.1, 0.8, 0.7] and v.extra["img_w"].tolist() == [640] * 3
    every = BoxView.from_boxes(_table(), head="nms", split="test", ignore=False, geometry=False)
    assert (every.n, every.ignored, every.xyxy, every.iou) == (4, 0, None, None)
    assert usable_rows(_table(), head="nms").height == 4


def test_kept_is_strictly_above_the_threshold():
    conf = np.array([0.25, np.nextafter(0.25, 1), 0.9, 0.1])
    assert kept_mask(conf, 0.25).tolist() == [False, True, True, False]
    v = BoxView(
        logit=np.zeros(4),
        conf=conf,
        correct=np.array([1, 0, 1, 1], bool),
        cls=np.arange(4),
        image_id=np.arange(4),
        extra={"angle": np.array([0.1, 0.2, 0.3, 0.4])},
    )
    k = v.kept(0.25)
    assert (
        k.n == 2 and k.correct.tolist() == [False, True] and k.extra["angle"].tolist() == [0.2, 0.3]
    )
    assert v.kept(0.9).n == 0 and v.kept(0.0).n == 4


def test_scored_is_the_conf_the_calibrator_deploys():
    v = BoxView.from_boxes(_table(), head="nms", split="test")
    t = TemperatureScaler.of_temperature(2.0)
    s = v.scored(t)
    np.testing.assert_array_equal(s.logit, v.logit / 2.0)
    np.testing.assert_array_equal(s.conf, sigmoid(v.logit / 2.0))
    assert s.raw_conf is v.conf and s.calibrator is t and s.scored(None) is not s
    np.testing.assert_array_equal(s.scored(None).conf, v.conf)
    platt = PlattScaler.from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": 0.5, "b": 0.3}
    )
    np.testing.assert_array_equal(
        s.scored(platt).conf, sigmoid(0.5 * v.logit + 0.3)
    )  # from the raw scores
    none = Identity().fit(None, None)
    assert v.scored(none).conf.tolist() == v.conf.tolist()  # the float32 conf Ultralytics reports
    np.testing.assert_array_equal(v.scored(none, from_logit=True).conf, sigmoid(v.logit))
    assert v.scored(t).kept(0.5).n == int((sigmoid(v.logit / 2.0) > 0.5).sum()) == 1


def test_recorded_scores_are_read_back_not_recomputed():
    b = with_calibrated(_table(), TemperatureScaler.of_temperature(2.0))
    np.testing.assert_array_equal(b["calibrated"].to_numpy(), sigmoid(b["logit"].to_numpy() / 2.0))
    b = b.with_columns(pl.col("calibrated") * 0.5)
    v = BoxView.from_boxes(b, head="nms", split="test")
    np.testing.assert_array_equal(
        v.scored(TemperatureScaler.of_temperature(2.0), recorded=True).conf, v.extra["calibrated"]
    )
    np.testing.assert_array_equal(v.as_recorded().conf, v.extra["calibrated"])


def test_a_label_table_scored_elsewhere():
    df = pl.DataFrame(
        {"image_id": [0, 1], "cls": [0, 0], "correct": [True, False], "iou": [0.9, 0.1]}
    )
    v = BoxView.from_boxes(df, conf=[0.8, 0.3], ignore=False)
    assert v.conf.tolist() == [0.8, 0.3] and v.logit == pytest.approx(np.log([4.0, 3 / 7]))
    with pytest.raises(InputError, match="length 2"):
        BoxView.from_boxes(df, conf=[0.8], ignore=False)
    with pytest.raises(InputError, match="missing columns"):
        BoxView.from_boxes(df.drop("cls"), conf=[0.8, 0.3], ignore=False)


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(InputError, match="`correct` has shape"):
        BoxView(
            logit=np.zeros(3),
            conf=np.zeros(3),
            correct=np.zeros(2, bool),
            cls=np.zeros(3),
            image_id=np.zeros(3),
        )
    with pytest.raises(InputError, match="`xyxy` has shape"):
        BoxView(
            logit=np.zeros(3),
            conf=np.zeros(3),
            correct=None,
            cls=np.zeros(3),
            image_id=np.zeros(3),
            xyxy=np.zeros((3, 2)),
        )

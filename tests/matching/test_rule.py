"""The run's matching rule (``--match``): which overlap labels the boxes, chosen once, recorded, and applied."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from det_calib.capture.mask_rebuild import encode_masks
from det_calib.data.box_table import CAPTURE_COLUMNS, SCHEMA
from det_calib.data.ground_truth import GT_SCHEMA, Split
from det_calib.errors import InputError
from det_calib.matching.rule import MATCH_CHOICES, MatchingRule, choose_matching, match_split

pytestmark = pytest.mark.fast

H, W = 30, 60


def _ring(x1, y1, x2, y2, width=1) -> np.ndarray:
    """A hollow rectangle: its box is (x1, y1, x2, y2), its area a thin outline."""
    m = np.zeros((H, W), np.uint8)
    m[y1:y2, x1:x2] = 1
    m[y1 + width:y2 - width, x1 + width:x2 - width] = 0
    return m


def _filled(x1, y1, x2, y2) -> np.ndarray:
    m = np.zeros((H, W), np.uint8)
    m[y1:y2, x1:x2] = 1
    return m


def _split(masks: list[np.ndarray | None], boxes: list[tuple], name: str = "calib") -> Split:
    gt = pl.DataFrame({"image_id": [0] * len(boxes), "x1": [b[0] for b in boxes], "y1": [b[1] for b in boxes],
                       "x2": [b[2] for b in boxes], "y2": [b[3] for b in boxes], "cls": [0] * len(boxes),
                       "crowd": [False] * len(boxes)}, schema=GT_SCHEMA)
    counts = [None if m is None else encode_masks(m[None])[0] for m in masks]
    gt = gt.with_columns(pl.Series("segm", counts, dtype=pl.Binary))
    return Split(name=name, images=[], sizes=np.array([[W, H]]), gt=gt)


def _boxes(masks: list[np.ndarray], boxes: list[tuple], conf: list[float]) -> pl.DataFrame:
    n = len(boxes)
    cols = {"image": ["a.png"] * n, "image_id": [0] * n, "split": ["calib"] * n, "head": ["nms"] * n,
            "x1": [b[0] for b in boxes], "y1": [b[1] for b in boxes], "x2": [b[2] for b in boxes],
            "y2": [b[3] for b in boxes], "img_w": [W] * n, "img_h": [H] * n, "cls": [0] * n, "conf": conf,
            "logit": [float(np.log(c / (1 - c))) for c in conf]}
    df = pl.DataFrame(cols, schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS})
    return df.with_columns(pl.Series("segm", encode_masks(np.stack(masks)), dtype=pl.Binary))


def _case():
    """Two GTs and two detections that box IoU and mask IoU label oppositely.

    GT A: a 1-px hollow square, box (5, 5, 25, 25), 76 pixels; detection 1 fills that box (box IoU 1,
    mask IoU 76 / 400). GT B: a filled 10 x 10 square at (35, 5) and one stray pixel at (54, 24), box
    (35, 5, 55, 25); detection 2 is the square alone (box IoU 100 / 400, mask IoU 100 / 101).
    """
    b = _filled(35, 5, 45, 15)
    b[24, 54] = 1
    split = _split([_ring(5, 5, 25, 25), b], [(5, 5, 25, 25), (35, 5, 55, 25)])
    boxes = _boxes([_filled(5, 5, 25, 25), _filled(35, 5, 45, 15)], [(5, 5, 25, 25), (35, 5, 45, 15)], [0.9, 0.8])
    return split, boxes


def test_box_and_mask_iou_label_the_same_boxes_differently():
    split, boxes = _case()
    by_box = match_split(boxes, split, MatchingRule("box"), iou=0.5, loc_iou=0.1)
    by_mask = match_split(boxes, split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)
    assert by_box["correct"].to_list() == [True, False]
    assert by_box["iou"].to_list() == pytest.approx([1.0, 0.25])
    assert by_mask["correct"].to_list() == [False, True]
    assert by_mask["iou"].to_list() == pytest.approx([76 / 400, 100 / 101])
    assert by_mask["loc_iou"].to_list() == pytest.approx([76 / 400, 100 / 101])  # both match at 0.1
    assert match_split(boxes, split, None, iou=0.5, loc_iou=0.1).equals(by_box)  # no rule: box IoU
    for col in ("correct", "iou", "ignore", "loc_iou"):  # the box table's types
        assert by_mask[col].dtype == SCHEMA[col]


def test_mask_matching_needs_the_boxes_masks():
    split, boxes = _case()
    with pytest.raises(InputError, match="no `segm` column"):
        match_split(boxes.drop("segm"), split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)


def test_choose_matching():
    with_masks = _split([_ring(5, 5, 25, 25)], [(5, 5, 25, 25)])
    box_only = _split([None], [(5, 5, 25, 25)], name="test")
    assert choose_matching("auto", task="segment", splits=[with_masks, with_masks]).by == "mask"
    rule = choose_matching("auto", task="segment", splits=[with_masks, box_only])
    assert (rule.by, rule.reason) == ("box", "a segment model on box-only labels")
    assert choose_matching("box", task="segment", splits=[with_masks]).words(0.5) == \
        "box IoU >= 0.5 (chosen by --match box)"
    assert choose_matching("mask", task="segment", splits=[with_masks]).masks
    assert choose_matching("auto", task="detect", splits=[with_masks]).by == "box"
    with pytest.raises(InputError, match=r"split `test` has 1 of 1 without one"):
        choose_matching("mask", task="segment", splits=[with_masks, box_only])
    with pytest.raises(InputError, match="needs a segment model"):
        choose_matching("mask", task="detect", splits=[with_masks])
    with pytest.raises(InputError, match="Expected `match`"):
        choose_matching("polygon", task="segment", splits=[])
    assert MATCH_CHOICES == ("auto", "box", "mask", "oks", "rotated")


def test_rule_round_trip():
    rule = MatchingRule("mask", "auto", "a segment model, every ground truth has a mask")
    assert MatchingRule.from_dict(rule.to_dict()) == rule
    assert MatchingRule.from_dict(None) is None
    with pytest.raises(InputError, match="one of"):
        MatchingRule.from_dict({"by": "polygon"})
    with pytest.raises(InputError, match="must be a string"):
        MatchingRule.from_dict({"by": 1})

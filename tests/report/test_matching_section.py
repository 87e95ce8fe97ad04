"""The Matching section's words for each rule a run can record."""

from __future__ import annotations

import pytest

from det_calib.data.matching_rule import MatchingRule
from det_calib.report.matching_section import _matching_words
from det_calib.tasks.match_rule import choose_matching

pytestmark = pytest.mark.fast


def test_each_rule_in_words():
    oks = _matching_words(
        MatchingRule("oks", "auto", "a pose model, 5 keypoints", sigmas=(0.2,) * 5), 0.5
    )
    assert oks.startswith(
        "A box counts as correct when its keypoints match a ground truth of the same class with "
        "OKS >= 0.5"
    )
    assert (
        "Sigmas: 0.2, 0.2, 0.2, 0.2, 0.2. Why OKS: a pose model, 5 keypoints (--match auto)." in oks
    )
    rotated = _matching_words(MatchingRule("rotated", "rotated", "an OBB model"), 0.75)
    assert (
        "rotated IoU >= 0.75" in rotated and "ProbIoU" in rotated and "(--match rotated)" in rotated
    )
    mask = _matching_words(
        MatchingRule("mask", "auto", "a segment model, every ground truth has a mask"), 0.5
    )
    assert "its mask overlaps a ground-truth mask of the same class with IoU >= 0.5" in mask


@pytest.mark.parametrize(
    "task,says",
    [
        ("segment", "the masks of the model's boxes are not compared"),
        ("pose", "the keypoints of the model's boxes are not compared"),
        (
            "obb",
            "each box is the axis-aligned box around its rotated box, predicted and ground truth",
        ),
    ],
)
def test_box_iou_says_what_it_leaves_out(task, says):
    words = _matching_words(choose_matching("box", task=task, splits=[]), 0.5)
    assert "COCO's `bbox` protocol" in words and says in words and "(--match box)" in words

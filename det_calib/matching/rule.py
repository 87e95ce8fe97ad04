"""Which overlap labels a run's boxes: box IoU or mask IoU (``--match``), chosen once per run.

A detector's boxes are matched by box IoU (:func:`~det_calib.matching.one_to_one.match_boxes`).
A segment model's boxes each carry a mask (the box table's ``segm`` column); where the ground
truth has a mask for every row, the COCO ``segm`` protocol matches them by mask IoU
(:func:`~det_calib.matching.masks.match_boxes_by_masks`). ``--match``:

* ``auto`` (default): mask IoU for a segment model on data with a mask for every ground-truth row
  of both splits; box IoU otherwise (a detector; or box-only labels, which are common for seg
  models);
* ``mask``: mask IoU; refused (one line) for a detector or where a ground-truth row has no mask;
* ``box``: box IoU, for any model.

>>> rule = choose_matching("auto", task="detect", splits=())
>>> rule.by, rule.words(0.5)
('box', 'box IoU >= 0.5 (a detect model)')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import polars as pl

from det_calib.data.ground_truth import Split
from det_calib.data.matching_rule import MATCH_CHOICES, MatchBy, MatchingRule
from det_calib.data.segments import SEGM_COLUMN, has_masks
from det_calib.errors import InputError
from det_calib.matching.masks import match_boxes_by_masks
from det_calib.matching.one_to_one import match_boxes

log = logging.getLogger(__name__)

__all__ = ["MATCH_CHOICES", "MatchBy", "MatchingRule", "choose_matching", "match_split"]

def choose_matching(option: str, *, task: str, splits: Sequence[Split]) -> MatchingRule:
    """The matching of a run (see the module docstring).

    Args:
        option: ``auto``, ``mask`` or ``box`` (``--match``).
        task: The model's Ultralytics task (``detect``, ``segment``).
        splits: The splits the run labels (read by
            :func:`~det_calib.data.segments.load_segment_split` for a segment model).

    Raises:
        InputError: An unknown option; ``mask`` for a detector, or where a ground-truth row has no mask.
    """
    if option not in MATCH_CHOICES:
        raise InputError(f"Expected `match` to be one of {', '.join(MATCH_CHOICES)}, but got {option!r}")
    if task != "segment":
        if option == "mask":
            raise InputError(f"--match mask needs a segment model (its boxes' masks); this model's task is "
                             f"`{task}`: use --match box or auto")
        return MatchingRule("box", option, f"a {task} model")
    if option == "box":
        return MatchingRule("box", option, "chosen by --match box")
    lacking = [sp for sp in splits if not has_masks(sp)]
    if not lacking:
        return MatchingRule("mask", option, "a segment model, every ground truth has a mask")
    sp = lacking[0]
    n = sp.gt[SEGM_COLUMN].null_count() if SEGM_COLUMN in sp.gt.columns else sp.gt.height
    if option == "mask":
        raise InputError(f"--match mask needs a mask for every ground truth; split `{sp.name}` has {n} of "
                         f"{sp.gt.height} without one (box-only labels): use --match box or auto")
    log.info("split `%s`: %d of %d ground truths have no mask: matching by box IoU", sp.name, n, sp.gt.height)
    return MatchingRule("box", option, "a segment model on box-only labels")


def match_split(boxes: pl.DataFrame, split: Split, rule: MatchingRule | None, *, iou: float,
                loc_iou: float) -> pl.DataFrame:
    """One head's captured boxes on one split labelled by the run's rule (None: box IoU):
    ``correct``, ``iou``, ``ignore`` at ``iou`` and ``loc_iou`` at ``loc_iou``.

    Raises:
        InputError: Mask matching of boxes without masks (a box table captured by a detector).
    """
    if rule is None or not rule.masks:
        return match_boxes(boxes, split.gt, iou=iou, loc_iou=loc_iou)
    if SEGM_COLUMN not in boxes.columns:
        raise InputError(f"matching by mask IoU needs each box's mask; the boxes of split `{split.name}` have no "
                         f"`{SEGM_COLUMN}` column (boxes of a detector, or captured before masks were kept): "
                         "use --match box")
    return match_boxes_by_masks(boxes, split.gt, split.sizes, iou=iou, loc_iou=loc_iou)

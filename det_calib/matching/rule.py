"""Which overlap labels a run's boxes (``--match``), chosen once per run: each task's own rule, or box IoU.

A detector's boxes are matched by box IoU (:func:`~det_calib.matching.one_to_one.match_boxes`).
The other tasks' boxes each carry a payload beside the box, and their own protocol compares it:

* segment (the box table's ``segm`` column): mask IoU, COCO's ``segm`` protocol
  (:func:`~det_calib.matching.masks.match_boxes_by_masks`), where the ground truth has a mask for every row;
* pose (``kpts``): OKS, COCO's ``keypoints`` protocol
  (:func:`~det_calib.matching.oks.match_boxes_by_keypoints`), with the dataset's ``kpt_oks_sigmas``,
  COCO's 17 sigmas for 17 keypoints, else ``1/K`` each (Ultralytics' rule);
* obb (``xywhr``): rotated IoU, the ProbIoU Ultralytics' OBB validator matches by
  (:func:`~det_calib.matching.rotated.match_boxes_by_rotated`).

``--match``:

* ``auto`` (default): the task's own rule; for a segment model on data without a mask for every
  ground-truth row of both splits, box IoU (box-only labels are common for seg models);
* ``mask``, ``oks``, ``rotated``: that rule; refused (one line) for a model of another task, or where
  the ground truth lacks the payload;
* ``box``: box IoU, for any model (an OBB model: the axis-aligned box around each predicted and
  ground-truth rotated box).

>>> rule = choose_matching("auto", task="detect", splits=())
>>> rule.by, rule.words(0.5)
('box', 'box IoU >= 0.5 (a detect model)')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import polars as pl

from det_calib.data.ground_truth import Split
from det_calib.data.matching_rule import MATCH_CHOICES, TASK_RULE, MatchBy, MatchingRule
from det_calib.data.obb import XYWHR_COLUMN, has_rotated_boxes
from det_calib.data.pose import KPTS_COLUMN, has_keypoints
from det_calib.data.segments import SEGM_COLUMN, has_masks
from det_calib.errors import InputError
from det_calib.matching.masks import match_boxes_by_masks
from det_calib.matching.oks import COCO_SIGMAS, match_boxes_by_keypoints, oks_sigmas
from det_calib.matching.one_to_one import match_boxes
from det_calib.matching.rotated import match_boxes_by_rotated

log = logging.getLogger(__name__)

__all__ = ["MATCH_CHOICES", "MatchBy", "MatchingRule", "choose_matching", "match_split"]

_TASK_WORDS = {"segment": "a segment model (its boxes' masks)", "pose": "a pose model (its boxes' keypoints)",
               "obb": "an OBB model (its rotated boxes)"}
_BOX_REASON = {"pose": "a pose model, chosen by --match box",
               "obb": "an OBB model, the axis-aligned boxes around the rotated ones, chosen by --match box"}


def choose_matching(option: str, *, task: str, splits: Sequence[Split],
                    kpt_sigmas: Sequence[float] | None = None) -> MatchingRule:
    """The matching of a run (see the module docstring).

    Args:
        option: ``auto``, ``box``, ``mask``, ``oks`` or ``rotated`` (``--match``).
        task: The model's Ultralytics task (``detect``, ``segment``, ``pose``, ``obb``).
        splits: The splits the run labels (read by :func:`~det_calib.data.task_splits.load_task_split`).
        kpt_sigmas: A pose dataset's own OKS sigmas (data.yaml's ``kpt_oks_sigmas``), if any.

    Raises:
        InputError: An unknown option; a task's rule for a model of another task, or where a
            ground-truth row lacks what the rule compares.
    """
    if option not in MATCH_CHOICES:
        raise InputError(f"Expected `match` to be one of {', '.join(MATCH_CHOICES)}, but got {option!r}")
    own = TASK_RULE.get(task, "box")
    if option not in ("auto", "box", own):
        needs = next(t for t, r in TASK_RULE.items() if r == option)
        raise InputError(f"--match {option} needs {_TASK_WORDS[needs]}; this model's task is `{task}`: use "
                         f"--match box or auto")
    if option == "box":
        return MatchingRule("box", option, _BOX_REASON.get(task, "chosen by --match box"))
    if task == "segment":
        return _segment_rule(option, splits)
    if task == "pose":
        return _pose_rule(option, splits, kpt_sigmas)
    if task == "obb":
        lacking = [sp.name for sp in splits if not has_rotated_boxes(sp)]
        if lacking:
            raise InputError(f"rotated IoU needs a rotated box for every ground truth; split `{lacking[0]}` was read "
                             "without them: use --match box")
        return MatchingRule("rotated", option, "an OBB model")
    return MatchingRule("box", option, f"a {task} model")


def _segment_rule(option: str, splits: Sequence[Split]) -> MatchingRule:
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


def _pose_rule(option: str, splits: Sequence[Split], kpt_sigmas: Sequence[float] | None) -> MatchingRule:
    lacking = [sp.name for sp in splits if not has_keypoints(sp)]
    if lacking or not splits:
        raise InputError(f"OKS needs the keypoints of every ground truth; split `{(lacking or ['?'])[0]}` was read "
                         "without them: use --match box")
    k = splits[0].gt[KPTS_COLUMN].dtype.size // 3
    sigmas = oks_sigmas(k, kpt_sigmas)
    if kpt_sigmas is not None:
        how = "data.yaml's kpt_oks_sigmas"
    elif k == len(COCO_SIGMAS):
        how = "COCO's 17 person-keypoint sigmas"
    else:
        how = f"1/K = {1 / k:.4g} each (Ultralytics' rule for other than 17 keypoints)"
    return MatchingRule("oks", option, f"a pose model, {k} keypoints, sigmas {how}",
                        sigmas=tuple(float(x) for x in np.asarray(sigmas)))


def match_split(boxes: pl.DataFrame, split: Split, rule: MatchingRule | None, *, iou: float,
                loc_iou: float) -> pl.DataFrame:
    """One head's captured boxes on one split labelled by the run's rule (None: box IoU):
    ``correct``, ``iou`` (the rule's overlap of the match: IoU, mask IoU, OKS or ProbIoU), ``ignore`` at
    ``iou`` and ``loc_iou`` at ``loc_iou``.

    Raises:
        InputError: Matching by a task's payload of boxes without it (a box table captured by a detector).
    """
    if rule is None or rule.by == "box":
        return match_boxes(boxes, split.gt, iou=iou, loc_iou=loc_iou)
    column = {"mask": SEGM_COLUMN, "oks": KPTS_COLUMN, "rotated": XYWHR_COLUMN}[rule.by]
    if column not in boxes.columns:
        raise InputError(f"matching by {rule.measure} needs each box's `{column}`; the boxes of split `{split.name}` "
                         f"have no `{column}` column (boxes of another task's model, or captured before "
                         f"`{column}` was kept): use --match box")
    if boxes[column].null_count():
        raise InputError(f"matching by {rule.measure} needs each box's `{column}`; {boxes[column].null_count()} boxes "
                         f"of split `{split.name}` were captured without it (on box labels): capture them again")
    if rule.by == "oks":
        return match_boxes_by_keypoints(boxes, split.gt, iou=iou, loc_iou=loc_iou, sigmas=rule.sigmas)
    if rule.by == "rotated":
        return match_boxes_by_rotated(boxes, split.gt, iou=iou, loc_iou=loc_iou)
    return match_boxes_by_masks(boxes, split.gt, split.sizes, iou=iou, loc_iou=loc_iou)

"""Which overlap labels a run's boxes (``--match``), chosen once per run: each task's own rule, or box IoU.

A detector's boxes are matched by box IoU (:func:`~det_calib.matching.one_to_one.match_boxes`).
The other tasks' boxes each carry a payload beside the box, and their own protocol compares it
(each task's :meth:`~det_calib.tasks.contract.Task.match`):

* segment (the box table's ``segm`` column): mask IoU, COCO's ``segm`` protocol, where the ground truth
  has a mask for every row;
* pose (``kpts``): OKS, COCO's ``keypoints`` protocol, with the dataset's ``kpt_oks_sigmas``,
  COCO's 17 sigmas for 17 keypoints, else ``1/K`` each (Ultralytics' rule);
* obb (``xywhr``): rotated IoU, the ProbIoU Ultralytics' OBB validator matches by.

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

from collections.abc import Sequence

import polars as pl

from det_calib.data.ground_truth import Split
from det_calib.data.matching_rule import MATCH_CHOICES, MatchBy, MatchingRule
from det_calib.errors import InputError
from det_calib.matching.one_to_one import match_boxes
from det_calib.tasks import TASKS, get_task

__all__ = ["MATCH_CHOICES", "MatchBy", "MatchingRule", "choose_matching", "match_split"]


def choose_matching(
    option: str, *, task: str, splits: Sequence[Split], sigmas: Sequence[float] | None = None
) -> MatchingRule:
    """The matching of a run (see the module docstring).

    Args:
        option: ``auto``, ``box``, ``mask``, ``oks`` or ``rotated`` (``--match``).
        task: The model's task (``detect``, ``segment``, ``pose``, ``obb``, or another registered one).
        splits: The splits the run labels (read by :func:`~det_calib.tasks.task_splits.load_task_split`).
        sigmas: The dataset's own constants of the task's rule (a pose dataset's OKS sigmas), if any.

    Raises:
        InputError: An unknown option; a task's rule for a model of another task, or where a
            ground-truth row lacks what the rule compares.
    """
    if option not in MATCH_CHOICES:
        raise InputError(
            f"Expected `match` to be one of {', '.join(MATCH_CHOICES)}, but got {option!r}"
        )
    own = get_task(task)
    if option not in ("auto", "box", own.rule):
        needs = next(t for t in TASKS.values() if t.rule == option)
        raise InputError(
            f"--match {option} needs {needs.rule_words}; this model's task is `{task}`: use "
            f"--match box or auto"
        )
    if option == "box":
        return MatchingRule("box", option, own.box_reason)
    return own.choose_rule(option, splits, sigmas)


def match_split(
    boxes: pl.DataFrame, split: Split, rule: MatchingRule | None, *, iou: float, loc_iou: float
) -> pl.DataFrame:
    """One head's captured boxes on one split labelled by the run's rule (None: box IoU):
    ``correct``, ``iou`` (the rule's overlap of the match: IoU, mask IoU, OKS or ProbIoU), ``ignore`` at
    ``iou`` and ``loc_iou`` at ``loc_iou``.

    Raises:
        InputError: Matching by a task's payload of boxes without it (a box table captured by a detector).
    """
    if rule is None or rule.by == "box":
        return match_boxes(boxes, split.gt, iou=iou, loc_iou=loc_iou)
    task = next(t for t in TASKS.values() if t.rule == rule.by)
    column = task.payload
    if column not in boxes.columns:
        raise InputError(
            f"matching by {rule.measure} needs each box's `{column}`; the boxes of split "
            f"`{split.name}` "
            f"have no `{column}` column (boxes of another task's model, or captured before "
            f"`{column}` was kept): use --match box"
        )
    if boxes[column].null_count():
        raise InputError(
            f"matching by {rule.measure} needs each box's `{column}`; {boxes[column].null_count()} "
            "boxes "
            f"of split `{split.name}` were captured without it (on box labels): capture them again"
        )
    return task.match(boxes, split, rule, iou=iou, loc_iou=loc_iou)

"""One split read for a model's task: box labels for a detector, and each task's own ground truth
(masks, keypoints, rotated boxes) where its matching rule needs it (``--match``), by the task's
:meth:`~det_calib.tasks.contract.Task.read_split`.

:func:`load_task_split` is the one reader the calibration run (and ``check``) calls; it refuses in one
line the data that does not fit the model:

* a ``data.yaml`` with ``kpt_shape`` (pose labels) for a model that is not a pose model;
* for a pose model: a data.yaml without ``kpt_shape`` (box labels), unless ``--match box``; a
  ``kpt_shape`` whose keypoint count is not the model's;
* for an OBB model: box labels (``cls cx cy w h``), unless ``--match box``, which then matches the
  axis-aligned box around each predicted rotated box against them.

A segment model on box-only labels is read as ever (``auto`` then matches by box IoU).
"""

from __future__ import annotations

from pathlib import Path

from det_calib.data.ground_truth import Dataset, Split
from det_calib.tasks import get_task

__all__ = ["load_task_split"]


def load_task_split(
    data: Dataset,
    split: str,
    *,
    task: str,
    match: str = "auto",
    payload_shape: tuple[int, int] | None = None,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
) -> Split:
    """One split for a model of ``task`` matched by ``match`` (``--match``; a recorded rule's ``by``).

    Args:
        data: Parsed data.yaml.
        split: Split key in the yaml.
        task: The model's task (a registered name: ``detect``, ``segment``, ...).
        match: ``auto``, ``box`` or a task's own rule: ``box`` reads no task payload a segment model
            does not need, and lets a pose or OBB model run on box labels.
        kpt_shape: The shape of the model's payload (a pose model's ``(K, ndim)``), checked against the data's.
        coco_gt, limit: As :func:`~det_calib.data.ground_truth.load_split`.

    Raises:
        InputError: The data does not fit the model (see the module docstring), or what the task's
            reader raises.
    """
    return get_task(task).read_split(
        data, split, match=match, shape=payload_shape, coco_gt=coco_gt, limit=limit
    )

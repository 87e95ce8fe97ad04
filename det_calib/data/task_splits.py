"""One split read for a model's task: box labels for a detector, and each task's own ground truth
(masks, keypoints, rotated boxes) where its matching rule needs it (``--match``).

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

from det_calib.data.ground_truth import Dataset, Split, label_path, list_images, load_split
from det_calib.data.obb import load_obb_split
from det_calib.data.pose import PoseSpec, load_pose_split, pose_spec
from det_calib.data.segments import load_segment_split
from det_calib.errors import InputError

__all__ = ["captured_split", "load_task_split", "label_values"]


def label_values(data: Dataset, split: str) -> int | None:
    """The number of values on the first label line of ``split`` (its files in image order); None
    when no label file of the split has a line."""
    if split not in data.splits:
        raise InputError(f"split `{split}` not in {data.yaml_path} (splits: {sorted(data.splits)})")
    for img in list_images(data.splits[split], split=split):
        lp = label_path(img)
        if not lp.is_file():
            continue
        for line in lp.read_text(encoding="utf-8-sig").splitlines():
            if line.split():
                return len(line.split())
    return None


def load_task_split(data: Dataset, split: str, *, task: str, match: str = "auto",
                    kpt_shape: tuple[int, int] | None = None, coco_gt: str | Path | None = None,
                    limit: int | None = None) -> Split:
    """One split for a model of ``task`` matched by ``match`` (``--match``; a recorded rule's ``by``).

    Args:
        data: Parsed data.yaml.
        split: Split key in the yaml.
        task: The model's Ultralytics task (``detect``, ``segment``, ``pose``, ``obb``).
        match: ``auto``, ``box``, ``mask``, ``oks`` or ``rotated``: ``box`` reads no task payload a
            segment model does not need, and lets a pose or OBB model run on box labels.
        kpt_shape: A pose model's ``(K, ndim)``, checked against data.yaml's.
        coco_gt, limit: As :func:`~det_calib.data.ground_truth.load_split`.

    Raises:
        InputError: The data does not fit the model (see the module docstring), or what the task's
            reader raises.
    """
    if task == "pose":
        return _pose_split(data, split, match=match, kpt_shape=kpt_shape, coco_gt=coco_gt, limit=limit)
    declared = pose_spec(data)
    if declared is not None:
        raise InputError(f"{data.yaml_path} declares kpt_shape {[declared.nkpt, declared.ndim]} (pose labels), but "
                         f"the model's task is `{task}`: calibrate a pose model on it, or give box labels")
    if task == "obb":
        return _obb_split(data, split, match=match, coco_gt=coco_gt, limit=limit)
    if task == "segment" and match != "box":
        return load_segment_split(data, split, coco_gt=coco_gt, limit=limit)
    return load_split(data, split, coco_gt=coco_gt, limit=limit)


def captured_split(data: Dataset, split: str, *, task: str, kpt_shape: tuple[int, int] | None = None,
                   coco_gt: str | Path | None = None, limit: int | None = None) -> Split:
    """The split a capture to parts runs over (and that a run reusing the parts fingerprints): its
    images and labels read as the task's (a pose or OBB model's keypoint and rotated-box lines; a
    detect or segment model's labels as boxes, masks not needed). A capture matches nothing, so a pose
    or OBB model's split with box labels is read as boxes here; the run that uses the parts decides
    (and refuses) by its ``--match``."""
    box = task in ("detect", "segment") or _box_labels_only(data, split, task, coco_gt)
    return load_task_split(data, split, task=task, match="box" if box else "auto", kpt_shape=kpt_shape,
                           coco_gt=coco_gt, limit=limit)


def _box_labels_only(data: Dataset, split: str, task: str, coco_gt: str | Path | None) -> bool:
    """Whether a pose or OBB model's split holds box labels only: YOLO labels (no ``--coco-gt``) of a
    data.yaml without ``kpt_shape`` (pose), or whose lines are ``cls cx cy w h`` (OBB)."""
    if coco_gt is not None:
        return False
    if task == "pose":
        return pose_spec(data) is None
    return task == "obb" and label_values(data, split) == 5


def _pose_split(data: Dataset, split: str, *, match: str, kpt_shape: tuple[int, int] | None,
                coco_gt: str | Path | None, limit: int | None) -> Split:
    declared = pose_spec(data)
    if _box_labels_only(data, split, "pose", coco_gt):
        if match == "box":
            return load_split(data, split, limit=limit)
        raise InputError(f"{data.yaml_path} has no `kpt_shape`: box labels for a pose model, and OKS needs "
                         "keypoints (pose labels `cls cx cy w h x1 y1 v1 ...` with kpt_shape in the data.yaml); "
                         "use --match box to match the boxes alone")
    if declared is not None and kpt_shape is not None and declared.nkpt != kpt_shape[0]:
        raise InputError(f"{data.yaml_path}: kpt_shape [{declared.nkpt}, {declared.ndim}] but the model's is "
                         f"[{kpt_shape[0]}, {kpt_shape[1]}] ({kpt_shape[0]} keypoints)")
    spec = None if declared is not None or kpt_shape is None else PoseSpec(nkpt=kpt_shape[0], ndim=3)
    return load_pose_split(data, split, spec=spec, coco_gt=coco_gt, limit=limit)


def _obb_split(data: Dataset, split: str, *, match: str, coco_gt: str | Path | None, limit: int | None) -> Split:
    if match == "box" and coco_gt is not None:
        return load_split(data, split, coco_gt=coco_gt, limit=limit)
    if _box_labels_only(data, split, "obb", coco_gt):
        if match == "box":
            return load_split(data, split, limit=limit)
        raise InputError(f"split `{split}` of {data.yaml_path} has box labels (`cls cx cy w h`) for an OBB model: "
                         "rotated IoU needs OBB labels `cls x1 y1 x2 y2 x3 y3 x4 y4`; use --match box to match the "
                         "axis-aligned boxes around the predicted rotated ones")
    return load_obb_split(data, split, coco_gt=coco_gt, limit=limit)

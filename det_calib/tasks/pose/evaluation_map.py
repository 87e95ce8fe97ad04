"""Keypoint mAP of a pose model's boxes, before and after calibration (pycocotools ``keypoints``).

A pose model's box table carries each box's keypoints (column ``kpts``: K lists ``[x, y, conf]`` in
image pixels, :meth:`det_calib.tasks.pose.Pose.decode`); the split's ground-truth keypoints, OKS areas
and labelled-keypoint counts come from :func:`det_calib.tasks.pose.labels.load_pose_split`. :func:`coco_keypoint_maps`
scores the same boxes under several scorings by ``COCOeval(iouType="keypoints")``:

* ground truth as COCO stores it: ``keypoints`` ``x, y, v`` triples, ``num_keypoints`` (COCO ignores a ground
  truth with none, as a crowd), ``area`` (COCO's, or 0.53 x the box for YOLO labels: Ultralytics' rule),
  ``bbox`` and ``iscrowd``;
* detections as Ultralytics' own ``pred_to_json`` writes them: ``x, y, conf`` per keypoint (COCOeval reads
  only ``x, y`` of a detection; ``[K, 2]`` keypoints get 1), the score, the class;
* OKS sigmas (:func:`det_calib.tasks.pose.matching.oks_sigmas`): the dataset's ``kpt_oks_sigmas`` when given,
  COCO's 17 for 17 keypoints, ``1 / K`` otherwise, as Ultralytics' ``PoseValidator``;
* ``maxDets`` the capture's ``max_det`` (COCO's keypoint default, 20, would drop boxes), area range ``all``.

:func:`det_calib.evaluation.figures.pose_map_check` is the run's check: the box mAP as a detector's plus this
keypoint mAP, from the raw and the calibrated scores. COCOeval reads scores only to sort them, so a
calibrator that keeps every box's rank leaves the keypoint mAP identical; the check states which it was.
"""

from __future__ import annotations

import contextlib
import functools
import io
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.ground_truth import Split
from det_calib.errors import InputError
from det_calib.evaluation.figures import EvalSettings, before_after, map_check
from det_calib.evaluation.map_check import eval_figures
from det_calib.tasks.pose.labels import (
    AREA_COLUMN,
    KPTS_COLUMN,
    NUM_KEYPOINTS_COLUMN,
    has_keypoints,
    split_keypoints,
)
from det_calib.tasks.pose.matching import oks_sigmas

__all__ = [
    "MAP_CHECK",
    "POSE_MAP_KEYS",
    "pose_map_check",
    "coco_keypoint_dataset",
    "coco_keypoint_detections",
    "coco_keypoint_maps",
    "detection_keypoints",
]

POSE_MAP_KEYS = (
    "pose_map50_95_before",
    "pose_map50_95_after",
    "pose_map50_before",
    "pose_map50_after",
    "pose_map_identical",
)
"""The keys :func:`det_calib.evaluation.figures.pose_map_check` adds to the box check's (None each where the
split has no keypoints)."""


def coco_keypoint_dataset(split: Split, classes: list[int]) -> dict[str, Any]:
    """The split's ground truth as a pycocotools keypoints dataset (``COCO().dataset``).

    Args:
        split: Read by :func:`~det_calib.tasks.pose.labels.load_pose_split`.
        classes: The category ids to declare (every class of the ground truth and of the detections).
    """
    if not has_keypoints(split):
        raise InputError(
            f"split `{split.name}` has no ground-truth keypoints: keypoint mAP needs "
            "load_pose_split"
        )
    g = split.gt
    kpts = split_keypoints(split).reshape(g.height, -1)
    xyxy = g.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float64)
    crowd = g["crowd"].to_list() if "crowd" in g.columns else [False] * g.height
    anns = [
        {
            "id": k + 1,
            "image_id": int(i),
            "category_id": int(c),
            "keypoints": kp.tolist(),
            "num_keypoints": int(nk),
            "area": float(a),
            "iscrowd": int(cr),
            "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
        }
        for k, (i, c, kp, nk, a, cr, b) in enumerate(
            zip(
                g["image_id"].to_list(),
                g["cls"].to_list(),
                kpts,
                g[NUM_KEYPOINTS_COLUMN].to_list(),
                g[AREA_COLUMN].to_list(),
                crowd,
                xyxy,
            )
        )
    ]
    return {
        "images": [
            {"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(split.sizes)
        ],
        "annotations": anns,
        "categories": [{"id": int(c), "name": str(c)} for c in classes],
    }


def detection_keypoints(boxes: pl.DataFrame, column: str = KPTS_COLUMN) -> np.ndarray:
    """(n, 3K) ``x, y, conf`` of each box's keypoints (conf 1 for ``[K, 2]`` keypoints), float64."""
    if column not in boxes.columns or boxes[column].null_count():
        raise InputError(
            f"the box table needs the keypoints of every box in column `{column}` for keypoint mAP"
        )
    if not boxes.height:
        return np.zeros((0, 0))
    rows = boxes[column].to_list()
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] not in (2, 3):
        raise InputError(
            f"column `{column}` must hold K keypoints [x, y] or [x, y, conf] per box, the same K "
            "for all"
        )
    if arr.shape[2] == 2:
        arr = np.concatenate([arr, np.ones(arr.shape[:2] + (1,))], axis=2)
    return arr.reshape(len(arr), -1)


def coco_keypoint_detections(
    boxes: pl.DataFrame,
    scores: np.ndarray,
    column: str = KPTS_COLUMN,
    *,
    keypoints: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One COCO keypoint result per box (``image_id``, ``category_id``, ``keypoints``, ``score``), as
    Ultralytics' ``pred_to_json`` writes them (``keypoints``: :func:`detection_keypoints` when given)."""
    kp = detection_keypoints(boxes, column) if keypoints is None else keypoints
    return [
        {"image_id": int(i), "category_id": int(c), "keypoints": k.tolist(), "score": float(s)}
        for i, c, k, s in zip(boxes["image_id"].to_list(), boxes["cls"].to_list(), kp, scores)
    ]


def coco_keypoint_maps(
    boxes: pl.DataFrame,
    split: Split,
    scores: list[np.ndarray],
    *,
    max_dets: int = 300,
    sigmas: Any = None,
    column: str = KPTS_COLUMN,
) -> list[dict[str, float]]:
    """pycocotools ``keypoints`` mAP of one head's boxes on one split, once per scoring.

    Args:
        boxes: One head's box table on ``split`` (``image_id``, ``cls``, ``column``: each box's keypoints).
        split: The split, read with keypoints (:func:`det_calib.tasks.pose.labels.load_pose_split`).
        scores: One (n_boxes,) score vector per scoring.
        max_dets: COCOeval's maxDets (the capture's ``max_det``, so that no box is dropped).
        sigmas: The dataset's per-keypoint OKS sigmas (data.yaml ``kpt_oks_sigmas``); None: COCO's for 17
            keypoints, ``1 / K`` otherwise (:func:`det_calib.tasks.pose.matching.oks_sigmas`).
        column: The box table's keypoint column.

    Returns:
        One ``{"map50_95", "map50", "map75"}`` per scoring (-1 where undefined, as COCOeval).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    nkpt = split_keypoints(split).shape[1]
    kp = detection_keypoints(boxes, column)
    if kp.size and kp.shape[1] != 3 * nkpt:
        raise InputError(f"the boxes have {kp.shape[1] // 3} keypoints, the ground truth {nkpt}")
    sig = oks_sigmas(nkpt, sigmas)
    classes = sorted(set(split.gt["cls"].to_list()) | set(boxes["cls"].to_list()))
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = coco_keypoint_dataset(split, classes)
        coco.createIndex()
    out = []
    for sc in scores:
        sc = np.asarray(sc, dtype=np.float64).reshape(-1)
        if sc.shape != (boxes.height,):
            raise InputError(f"Expected scores of length {boxes.height}, but got {sc.shape[0]}")
        if not boxes.height:
            out.append({"map50_95": 0.0, "map50": 0.0, "map75": 0.0})
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            ev = COCOeval(
                coco, coco.loadRes(coco_keypoint_detections(boxes, sc, keypoints=kp)), "keypoints"
            )
            ev.params.kpt_oks_sigmas = sig
            ev.params.maxDets = [max_dets]
            ev.evaluate()
            ev.accumulate()
        out.append(eval_figures(ev))
    return out


def pose_map_check(
    boxes: pl.DataFrame,
    split: Split,
    calibrator: LogitCalibrator,
    s: EvalSettings,
    *,
    sigmas: Any = None,
) -> dict[str, Any]:
    """The mAP check of a pose model's head: box mAP as :func:`map_check` gives it, and keypoint mAP by
    pycocotools ``keypoints`` (:func:`det_calib.tasks.pose.evaluation_map.coco_keypoint_maps`) from the same raw
    and calibrated scores (:data:`~det_calib.tasks.pose.evaluation_map.POSE_MAP_KEYS`).

    Args:
        boxes: One head's box table on ``split``, every row, with the ``kpts`` column of the capture.
        split: The eval split as :func:`det_calib.tasks.pose.labels.load_pose_split` reads it.
        calibrator, s: As :func:`det_calib.tasks.segment.evaluation_map.segment_map_check`.
        sigmas: The dataset's OKS sigmas (data.yaml ``kpt_oks_sigmas``; None: COCO's for 17 keypoints,
            ``1 / K`` otherwise, as Ultralytics' pose validator).

    Returns:
        The box check's dict plus ``POSE_MAP_KEYS``; those are None when the split was read without keypoints.
    """
    out = map_check(boxes, split, calibrator, s)
    if not has_keypoints(split):
        return {**out, **dict.fromkeys(POSE_MAP_KEYS)}
    maps = functools.partial(coco_keypoint_maps, boxes, split, max_dets=s.max_det, sigmas=sigmas)
    return {**out, **before_after(boxes, calibrator, maps, POSE_MAP_KEYS)}


MAP_CHECK = pose_map_check
"""The task's mAP check (:func:`det_calib.evaluation.figures.task_map_check` calls it)."""

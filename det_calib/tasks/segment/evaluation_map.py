"""Box and mask mAP of a segment model's boxes, before and after calibration (pycocotools ``bbox`` and ``segm``).

A segment model's box table carries each box's mask as compressed RLE counts at its image's size
(column ``segm``, :mod:`det_calib.tasks.segment.mask_rebuild`); the split's ground-truth masks come from
:func:`det_calib.tasks.segment.labels.load_segment_split`. :func:`segment_maps` scores the same boxes under
several scorings by COCO's two protocols; :func:`det_calib.evaluation.figures.segment_map_check`
is the run's check: the box mAP as a detector's (:func:`det_calib.evaluation.figures.map_check`,
the run's engine) plus the mask mAP by pycocotools ``COCOeval(iouType="segm")``, both from the raw and
the calibrated scores.

COCOeval reads scores only to sort them, so a calibrator that keeps every box's rank (any single
increasing map) leaves both mAPs identical; the check states which it was.
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
from det_calib.evaluation.map_check import coco_maps, eval_figures
from det_calib.tasks.segment.labels import SEGM_COLUMN, has_masks, segment_rles

__all__ = ["MAP_CHECK", "MASK_MAP_KEYS", "coco_mask_maps", "segment_map_check", "segment_maps"]

MASK_MAP_KEYS = (
    "mask_map50_95_before",
    "mask_map50_95_after",
    "mask_map50_before",
    "mask_map50_after",
    "mask_map_identical",
)
"""The keys :func:`det_calib.evaluation.figures.segment_map_check` adds to the box check's (None each
where the split has no masks)."""


def _mask_gt(split: Split) -> dict[str, Any]:
    """The split's ground truth as a pycocotools dataset of masks (area: the mask's pixels, as COCO's)."""
    from pycocotools import mask as mask_utils

    rles = segment_rles(split)
    if any(r is None for r in rles):
        raise InputError(
            f"split `{split.name}` has ground-truth rows without a mask: mask mAP needs a mask for "
            "each"
        )
    g = split.gt
    crowd = g["crowd"].to_list() if "crowd" in g.columns else [False] * g.height
    anns = [
        {
            "id": k + 1,
            "image_id": int(i),
            "category_id": int(c),
            "segmentation": r,
            "area": float(mask_utils.area(r)),
            "bbox": [float(v) for v in mask_utils.toBbox(r)],
            "iscrowd": int(cr),
        }
        for k, (i, c, r, cr) in enumerate(
            zip(g["image_id"].to_list(), g["cls"].to_list(), rles, crowd)
        )
    ]
    return {
        "images": [
            {"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(split.sizes)
        ],
        "annotations": anns,
        "categories": [],
    }


def coco_mask_maps(
    boxes: pl.DataFrame,
    split: Split,
    scores: list[np.ndarray],
    *,
    max_dets: int = 300,
    column: str = SEGM_COLUMN,
) -> list[dict[str, float]]:
    """pycocotools ``segm`` mAP of one head's boxes on one split, once per scoring.

    Args:
        boxes: One head's box table on ``split`` (``image_id``, ``cls``, ``column``: each box's mask as
            compressed RLE counts at its image's size).
        split: The split, read with masks (:func:`det_calib.tasks.segment.labels.load_segment_split`).
        scores: One (n_boxes,) score vector per scoring.
        max_dets: COCOeval's maxDets (the capture's ``max_det``, so that no box is dropped).
        column: The box table's mask column.

    Returns:
        One ``{"map50_95", "map50", "map75"}`` per scoring (-1 where undefined, as COCOeval).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if column not in boxes.columns or boxes[column].null_count():
        raise InputError(
            f"the box table needs a mask for every box in column `{column}` for mask mAP"
        )
    dataset = _mask_gt(split)
    classes = sorted(set(split.gt["cls"].to_list()) | set(boxes["cls"].to_list()))
    dataset["categories"] = [{"id": int(c), "name": str(c)} for c in classes]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = dataset
        coco.createIndex()
    sizes = np.asarray(split.sizes, dtype=np.int64).reshape(-1, 2)
    img, cls, counts = boxes["image_id"].to_list(), boxes["cls"].to_list(), boxes[column].to_list()
    out = []
    for sc in scores:
        sc = np.asarray(sc, dtype=np.float64).reshape(-1)
        if sc.shape != (boxes.height,):
            raise InputError(f"Expected scores of length {boxes.height}, but got {sc.shape[0]}")
        if not boxes.height:
            out.append({"map50_95": 0.0, "map50": 0.0, "map75": 0.0})
            continue
        dets = [
            {
                "image_id": int(i),
                "category_id": int(c),
                "score": float(s),
                "segmentation": {"size": [int(sizes[i, 1]), int(sizes[i, 0])], "counts": r},
            }
            for i, c, s, r in zip(img, cls, sc, counts)
        ]
        with contextlib.redirect_stdout(io.StringIO()):
            ev = COCOeval(coco, coco.loadRes(dets), "segm")
            ev.params.maxDets = [max_dets]
            ev.evaluate()
            ev.accumulate()
        out.append(eval_figures(ev))
    return out


def segment_maps(
    boxes: pl.DataFrame,
    split: Split,
    scores: list[np.ndarray],
    *,
    max_dets: int = 300,
    engine: str = "pycocotools",
) -> list[dict[str, dict[str, float]]]:
    """Box and mask mAP of the same boxes under several scorings.

    Args:
        boxes, split, scores, max_dets: As :func:`coco_mask_maps` (the table also needs ``x1..y2``).
        engine: What scores the box mAP (:func:`det_calib.evaluation.map_check.coco_maps`); the mask mAP is
            pycocotools' always.

    Returns:
        One ``{"bbox": figures, "segm": figures}`` per scoring, each as :func:`coco_mask_maps` gives it.
    """
    bbox = coco_maps(boxes, split.gt, split.sizes, scores, max_dets=max_dets, engine=engine)
    segm = coco_mask_maps(boxes, split, scores, max_dets=max_dets)
    return [{"bbox": b, "segm": m} for b, m in zip(bbox, segm)]


def segment_map_check(
    boxes: pl.DataFrame,
    split: Split,
    calibrator: LogitCalibrator,
    s: EvalSettings,
    *,
    sigmas: Any = None,
) -> dict[str, Any]:
    """The mAP check of a segment model's head: box mAP as :func:`det_calib.evaluation.figures.map_check`
    gives it (its keys: ``map50_95_before`` ... ``map_identical``, ``map_engine``), and mask mAP by
    pycocotools ``segm`` from the same raw and calibrated scores (:data:`MASK_MAP_KEYS`).

    Args:
        boxes: One head's box table on ``split``, every row (crowd-matched ones too: COCOeval ignores them
            itself), with the ``segm`` column of the capture.
        split: The eval split as :func:`det_calib.tasks.segment.labels.load_segment_split` reads it.
        calibrator: The head's fitted calibrator.
        s: The run's settings (``max_det``, ``map_engine``).
        sigmas: Unused (a mask has no per-part constants); the mAP checks' one signature.

    Returns:
        The box check's dict plus :data:`MASK_MAP_KEYS`; those are None when the split has box labels only
        (no mask mAP without ground-truth masks).
    """
    out = map_check(boxes, split, calibrator, s)
    if not has_masks(split):
        return {**out, **dict.fromkeys(MASK_MAP_KEYS)}
    maps = functools.partial(coco_mask_maps, boxes, split, max_dets=s.max_det)
    return {**out, **before_after(boxes, calibrator, maps, MASK_MAP_KEYS)}


MAP_CHECK = segment_map_check
"""The task's mAP check (:func:`det_calib.evaluation.figures.task_map_check` calls it)."""

"""Check that calibration leaves mAP unchanged.

Two independent checks:

- :func:`coco_map`: pycocotools COCOeval on the captured boxes of a split, scored with the raw
  and with the calibrated confidences. A shared monotone temperature keeps every ranking, so the
  two results must be identical.
- :func:`ultralytics_val`: Ultralytics' own ``model.val()`` on a checkpoint: the original at val's
  floor ``conf=0.001``, and the calibrated one at the equivalent floor ``sigmoid(logit(0.001) / T)``,
  where the candidate set is the original one and mAP must match. (At val's own floor a
  temperature below 1 pushes some boxes under it, above 1 lifts extra ones over it, so mAP can
  move slightly; the pipeline no longer runs that third val.)
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.matching import collapse_inverted

log = logging.getLogger(__name__)


def coco_map(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    scores: np.ndarray | None = None,
    *,
    max_dets: int = 300,
) -> dict[str, float]:
    """COCO bbox mAP of one head's boxes on one split, with pycocotools.

    Args:
        boxes: Box table of one head and one split (``image_id``, ``x1..y2``, ``cls``, ``conf``).
        gt: Ground-truth table of the split (``image_id``, ``x1..y2``, ``cls``, ``crowd``).
        sizes: (n_images, 2) (width, height) per image id.
        scores: Scores to rank by (default ``boxes["conf"]``).
        max_dets: COCOeval's maxDets (the capture's max_det, so that no box is dropped).

    Returns:
        ``{"map50_95": ..., "map50": ..., "map75": ...}`` (-1 where undefined, as COCOeval).
    """
    return coco_maps(boxes, gt, sizes, [boxes["conf"].to_numpy() if scores is None else scores],
                     max_dets=max_dets)[0]


def same_ranking(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two scorings of the same boxes order every pair of boxes the same way.

    True when ``a_i > a_j`` exactly when ``b_i > b_j`` and ``a_i == a_j`` exactly when
    ``b_i == b_j``: the same weak order, ties included. COCOeval uses scores only to sort
    (per image and class, then per class across images), so under the same weak order every sort,
    every precision/recall curve and the mAP are identical: one evaluation proves both.

    Args:
        a, b: (n,) scores of the same boxes.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    order = np.argsort(-a, kind="mergesort")
    sa, sb = a[order], b[order]
    # b must be non-increasing along a's order, with its ties exactly where a has its ties
    return bool(np.all(np.diff(sb) <= 0) and np.array_equal(np.diff(sa) == 0, np.diff(sb) == 0))


def coco_maps(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    scores: list[np.ndarray],
    *,
    max_dets: int = 300,
) -> list[dict[str, float]]:
    """:func:`coco_map` of the same boxes under several scorings (raw, calibrated...), with the
    ground-truth index built once.

    Args:
        boxes, gt, sizes, max_dets: As :func:`coco_map`.
        scores: One (n_boxes,) score vector per scoring.

    Returns:
        One :func:`coco_map` result per score vector.
    """
    from pycocotools.coco import COCO

    n_img = len(sizes)
    classes = sorted(set(gt["cls"].to_list()) | set(boxes["cls"].to_list()))
    g = gt.to_dict(as_series=False)
    anns = []
    for k in range(gt.height):
        w, h = g["x2"][k] - g["x1"][k], g["y2"][k] - g["y1"][k]
        anns.append(
            {
                "id": k + 1,
                "image_id": int(g["image_id"][k]),
                "category_id": int(g["cls"][k]),
                "bbox": [g["x1"][k], g["y1"][k], w, h],
                "area": w * h,
                "iscrowd": int(g["crowd"][k]),
            }
        )
    dataset = {
        "images": [{"id": i, "width": int(sizes[i][0]), "height": int(sizes[i][1])} for i in range(n_img)],
        "annotations": anns,
        "categories": [{"id": c, "name": str(c)} for c in classes],
    }
    # inverted boxes (x2 < x1) become zero-area boxes, as in matching: they overlap nothing
    b = collapse_inverted(boxes).select("image_id", "x1", "y1", "x2", "y2", "cls").to_numpy()
    w, h = b[:, 3] - b[:, 1], b[:, 4] - b[:, 2]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = dataset
        coco.createIndex()
    out = []
    for sc in scores:
        sc = np.asarray(sc, dtype=np.float64)
        dets = np.column_stack([b[:, 0], b[:, 1], b[:, 2], w, h, sc, b[:, 5]])
        out.append(_evaluate(coco, dets, max_dets))
    return out


def _evaluate(coco, dets: np.ndarray, max_dets: int) -> dict[str, float]:
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        res = coco.loadRes(dets) if len(dets) else None
        if res is None:
            return {"map50_95": 0.0, "map50": 0.0, "map75": 0.0}
        ev = COCOeval(coco, res, "bbox")
        ev.params.maxDets = [max_dets]
        ev.evaluate()
        ev.accumulate()
    # precision[T, R, K, A, M]: IoU thresholds x 101 recall points x classes x area ranges x maxDets;
    # area range 0 is "all". COCO's summarize() hard-codes maxDets=100 for mAP50-95, so read it here.
    prec = ev.eval["precision"][:, :, :, 0, 0]

    def mean_valid(x: np.ndarray) -> float:
        v = x[x > -1]
        return float(v.mean()) if v.size else -1.0

    iou_thrs = ev.params.iouThrs
    return {
        "map50_95": mean_valid(prec),
        "map50": mean_valid(prec[np.isclose(iou_thrs, 0.5)]),
        "map75": mean_valid(prec[np.isclose(iou_thrs, 0.75)]),
    }

def ultralytics_val(
    model: str | Path,
    data: str | Path,
    *,
    split: str,
    head: str = "nms",
    conf: float = 0.001,
    imgsz: int | None = None,
    batch: int = 16,
    device: str | None = None,
) -> dict[str, float]:
    """Ultralytics ``model.val()`` mAP50-95 and mAP50 of a checkpoint on a split.

    Args:
        model: Checkpoint path.
        data: data.yaml path.
        split: Split key of the yaml.
        head: ``"nms"`` (default head + NMS) or ``"e2e"`` (``nms=False``).
        conf: Val's conf pre-filter (Ultralytics' default for val is 0.001).
    """
    from ultralytics import YOLO

    from det_calib.capture import default_imgsz

    yolo = YOLO(str(model))
    kw = dict(
        data=str(data),
        split=split,
        conf=conf,
        imgsz=imgsz or default_imgsz(yolo),
        batch=batch,
        plots=False,
        save_json=False,
        verbose=False,
        nms=False if head == "e2e" else None,
    )
    if device is not None:
        kw["device"] = device
    import tempfile

    from ultralytics.utils import LOGGER

    level = LOGGER.level
    LOGGER.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="det_calib_val_") as tmp:  # keep runs/ out of the cwd
            m = yolo.val(project=tmp, name="val", **kw)
    finally:
        LOGGER.setLevel(level)
    return {"conf": float(conf), "map50_95": float(m.box.map), "map50": float(m.box.map50)}

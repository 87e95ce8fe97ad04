"""Label OBB detections correct / incorrect by rotated-box overlap, as Ultralytics' OBB validator does.

Ultralytics' ``OBBValidator`` (8.4) decides a rotated detection's correctness, and so its mAP, with:

* **ProbIoU** (:func:`probiou`), not the polygon IoU: each rotated box ``cx, cy, w, h, angle`` is
  the Gaussian of a uniform distribution over it (mean the centre, covariance
  ``R diag(w^2, h^2) R^T / 12``), and ``ProbIoU = 1 - H``, ``H`` the Hellinger distance
  ``sqrt(1 - exp(-B))`` for the Bhattacharyya distance ``B`` between the two Gaussians (Llerena
  et al., 2021). A box turned by a right angle with its sides swapped, or by half a turn, is the
  same Gaussian, so near-square boxes and angles either side of ``+-pi/2`` compare as the boxes
  they are. The validator's numerical guards are kept (``1e-7`` in the denominators, ``B`` clipped
  to ``[1e-7, 100]``, ``1e-7`` under the square root), so that two identical boxes score
  ``1 - sqrt(2e-7) ~ 0.99955``, as there.
* **Matching** (``BaseValidator.match_predictions``, the default greedy path): per image,
  detections in descending score (ties in input order, which for Ultralytics is its NMS output
  order); each takes the free same-class ground truth of highest ProbIoU, correct when that is
  ``>= t``. Unlike COCO, an overlap tie goes to the **earlier** ground truth (``argmax``), there is
  no crowd and no per-class detection cap (Ultralytics caps detections per image at NMS).

The assignment is :func:`~det_calib.matching.one_to_one.greedy_match`'s (the ground truth passed in
reverse order, so that its "later ground truth wins a tie" is Ultralytics' "earlier wins").
"""

from __future__ import annotations

import numpy as np
import polars as pl

from det_calib.errors import InputError
from det_calib.matching.one_to_one import MatchResult, checked_ids, greedy_match
from det_calib.validation import as_real

__all__ = ["pair_probiou", "match_rotated", "match_boxes_by_rotated"]

_PROBIOU_EPS = 1e-7
"""Ultralytics' guard in ProbIoU (``batch_probiou``'s ``eps``)."""


def _covariance(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries ``a, b, c`` of the covariance ``[[a, c], [c, b]]`` of boxes ``(..., 5)``."""
    sx, sy = b[..., 2] ** 2 / 12, b[..., 3] ** 2 / 12
    cos, sin = np.cos(b[..., 4]), np.sin(b[..., 4])
    return sx * cos**2 + sy * sin**2, sx * sin**2 + sy * cos**2, (sx - sy) * cos * sin


def pair_probiou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ProbIoU of box ``a[k]`` with box ``b[k]`` (elementwise, broadcast), boxes ``cx, cy, w, h, angle``."""
    eps = _PROBIOU_EPS
    a1, b1, c1 = _covariance(a)
    a2, b2, c2 = _covariance(b)
    dx, dy = a[..., 0] - b[..., 0], a[..., 1] - b[..., 1]
    sa, sb, sc = a1 + a2, b1 + b2, c1 + c2
    det = sa * sb - sc**2
    mahalanobis = (sa * dy**2 + sb * dx**2) / (det + eps) * 0.25 + (sc * -dx * dy) / (
        det + eps
    ) * 0.5
    spread = (
        np.log(
            det
            / (
                4 * np.sqrt(np.clip(a1 * b1 - c1**2, 0, None) * np.clip(a2 * b2 - c2**2, 0, None))
                + eps
            )
            + eps
        )
        * 0.5
    )
    bhattacharyya = np.clip(mahalanobis + spread, eps, 100.0)
    return 1 - np.sqrt(1 - np.exp(-bhattacharyya) + eps)


def _xywhr(x, name: str, n: int | None = None, ref: str | None = None) -> np.ndarray:
    arr = as_real(np.asarray(x, dtype=np.float64), name)
    if arr.size == 0:
        arr = arr.reshape(0, 5)
    if arr.ndim != 2 or arr.shape[1] != 5 or (n is not None and len(arr) != n):
        want = f"({n}, 5), the length of `{ref}`" if n is not None else "(n, 5)"
        raise InputError(
            f"Expected argument `{name}` to be of shape {want} (cx, cy, w, h, angle), but got "
            f"{arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise InputError(f"Expected argument `{name}` to hold finite values, but some are not")
    if (arr[:, 2:4] < 0).any():
        raise InputError(
            f"Expected argument `{name}` to hold sizes w, h >= 0, but some are negative"
        )
    return arr


def _probiou(a, b) -> np.ndarray:
    """Pairwise ProbIoU of rotated boxes ``a`` (rows) and ``b`` (columns), ``cx, cy, w, h, angle`` (radians).

    >>> float(_probiou([[10, 10, 8, 2, 0.0]], [[10, 10, 2, 8, np.pi / 2]])[0, 0]) > 0.999
    True
    """
    a, b = _xywhr(a, "a"), _xywhr(b, "b")
    return pair_probiou(a[:, None, :], b[None, :, :])


def match_rotated(
    det_image,
    det_cls,
    det_score,
    det_xywhr,
    gt_image,
    gt_cls,
    gt_xywhr,
    *,
    iou_threshold: float = 0.5,
) -> MatchResult:
    """Match rotated detections one-to-one to same-class ground truth by ProbIoU, as Ultralytics' OBB validator.

    Args:
        det_image, det_cls, det_score: (n,) image id, predicted class and score of each detection.
        det_xywhr: (n, 5) rotated boxes ``cx, cy, w, h, angle`` (pixels, radians).
        gt_image, gt_cls: (m,) image id and class of each ground truth.
        gt_xywhr: (m, 5) rotated ground-truth boxes.
        iou_threshold: Correct when ``ProbIoU >= iou_threshold``; in [0, 1].

    Returns:
        A :class:`~det_calib.matching.one_to_one.MatchResult` in the input order (``iou``: the
        ProbIoU of the match, else the best with a same-class ground truth; ``ignore`` all False).

    >>> r = match_rotated([0, 0], [1, 1], [0.9, 0.8], [[5, 5, 4, 2, 0.1], [5, 5, 4, 2, 0.1]],
    ...                   [0], [1], [[5, 5, 4, 2, 0.1 + np.pi]])
    >>> r.correct.tolist(), r.gt_index.tolist()
    ([True, False], [0, -1])
    """
    d_img, d_cls, d_score, g_img, g_cls, _ = checked_ids(
        det_image, det_cls, det_score, gt_image, gt_cls
    )
    n, m = len(d_img), len(g_img)
    d_box = _xywhr(det_xywhr, "det_xywhr", n, "det_image")
    g_box = _xywhr(gt_xywhr, "gt_xywhr", m, "gt_image")
    rev = np.arange(m)[::-1]

    def pair(p_det: np.ndarray, p_gt: np.ndarray, _crowd: np.ndarray) -> np.ndarray:
        return pair_probiou(d_box[p_det], g_box[rev[p_gt]])

    r = greedy_match(
        d_img,
        d_cls,
        d_score,
        g_img[rev],
        g_cls[rev],
        np.zeros(m, dtype=bool),
        pair_iou=pair,
        iou_threshold=iou_threshold,
    )
    gt_index = np.where(r.gt_index >= 0, rev[np.maximum(r.gt_index, 0)] if m else -1, -1)
    return MatchResult(correct=r.correct, iou=r.iou, gt_index=gt_index, ignore=r.ignore)


def _match_rotated_table(
    boxes: pl.DataFrame, gt: pl.DataFrame, *, iou_threshold: float = 0.5, column: str = "xywhr"
) -> pl.DataFrame:
    """Fill ``correct``, ``iou`` (the ProbIoU) and ``ignore`` of one head's box table by rotated IoU
    (:func:`match_rotated`).

    Args:
        boxes: Box table with ``image_id``, ``cls``, ``conf`` and ``column`` (each box's ``cx, cy, w, h,
            angle``, as the capture of an OBB model writes it).
        gt: Ground truth with ``image_id``, ``cls`` and ``column``, as
            :func:`det_calib.tasks.obb.labels.load_obb_split` gives it.
        iou_threshold: See :func:`match_rotated`.
        column: Name of the rotated-box column in both tables.

    Returns:
        ``boxes`` with ``correct``, ``iou`` (ProbIoU, at least 0: Ultralytics' guard under the square root
        makes boxes far apart score ``-5e-8``) and ``ignore`` (all False).

    Raises:
        InputError: A column is missing or has nulls.
    """
    for df, what in ((boxes, "box table"), (gt, "GT table")):
        missing = [
            c
            for c in ("image_id", "cls", *(("conf",) if df is boxes else ()), column)
            if c not in df.columns
        ]
        if missing:
            raise InputError(f"{what} is missing columns {missing}; has {df.columns}")
        if df[column].null_count():
            raise InputError(
                f"{what} column `{column}` has {df[column].null_count()} rows without a rotated box"
            )

    def xywhr(df: pl.DataFrame) -> np.ndarray:
        return (
            df[column].explode().to_numpy().astype(np.float64).reshape(-1, 5)
            if df.height
            else np.zeros((0, 5))
        )

    r = match_rotated(
        boxes["image_id"].to_numpy(),
        boxes["cls"].to_numpy(),
        boxes["conf"].to_numpy(),
        xywhr(boxes),
        gt["image_id"].to_numpy(),
        gt["cls"].to_numpy(),
        xywhr(gt),
        iou_threshold=iou_threshold,
    )
    return boxes.with_columns(
        pl.Series("correct", r.correct, dtype=pl.Boolean),
        pl.Series(
            "iou", np.maximum(r.iou, 0.0), dtype=pl.Float64
        ),  # the guard under the root: far apart is -5e-8
        pl.Series("ignore", r.ignore, dtype=pl.Boolean),
    )


def match_boxes_by_rotated(
    boxes: pl.DataFrame, gt: pl.DataFrame, *, iou: float, loc_iou: float, column: str = "xywhr"
) -> pl.DataFrame:
    """:func:`det_calib.matching.one_to_one.match_boxes` by rotated IoU (ProbIoU): ``correct``, ``iou``,
    ``ignore`` (at ``iou``) and ``loc_iou`` (the ProbIoU of the match at ``loc_iou``, 0 if none).

    Args:
        boxes: One head's boxes with their rotated boxes (see :func:`match_rotated_table`).
        gt: Ground truth with rotated boxes (:func:`det_calib.tasks.obb.labels.load_obb_split`).
        iou: ProbIoU a box needs with a same-class ground truth to be correct.
        loc_iou: Threshold of the second matching, whose ProbIoU feeds the localisation-aware metrics.
    """
    at_iou = _match_rotated_table(boxes, gt, iou_threshold=iou, column=column)
    loc = _match_rotated_table(boxes, gt, iou_threshold=loc_iou, column=column)
    loc_target = np.where(loc["correct"].to_numpy(), loc["iou"].to_numpy(), 0.0)
    return boxes.with_columns(
        at_iou["correct"],
        at_iou["iou"],
        at_iou["ignore"],
        pl.Series("loc_iou", loc_target, dtype=pl.Float64),
    )

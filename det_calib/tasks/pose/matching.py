"""Label pose detections correct / incorrect by OKS, as COCO's ``keypoints`` protocol does.

The rule is pycocotools' ``COCOeval(iouType="keypoints")`` ``evaluateImg`` (``dtMatches`` /
``dtIgnore``) at one OKS threshold, area range "all", with the object keypoint similarity (OKS)
in place of the IoU:

* **OKS** of a detection's keypoints ``(xd, yd)`` with a ground truth's ``(xg, yg, v)``:
  ``e = d^2 / (2 sigma)^2 / (area + eps) / 2`` per keypoint, ``d`` the distance, ``area`` the ground
  truth's area (COCO's annotation ``area``; 0.53 x the box for YOLO labels, Ultralytics' rule);
  OKS is the mean of ``exp(-e)`` over the ground truth's **labelled** keypoints (``v > 0``; a
  keypoint labelled but not visible, ``v = 1``, counts like a visible one). A ground truth with no
  labelled keypoint uses, for every keypoint, the detection's distance outside the ground truth's
  box enlarged by its size on each side (pycocotools' ``computeOks``).
* **Sigmas** (:func:`oks_sigmas`): the dataset's own (data.yaml ``kpt_oks_sigmas``) when given; COCO's
  17 person-keypoint sigmas for 17 keypoints; ``1 / K`` each for any other count ``K``, as
  Ultralytics' pose validator and loss do.
* **Matching** as COCO: same (image, class) only; detections in descending score, ties in input
  order, the first ``max_dets`` of each group (COCO's keypoint default is 20; None: all); each takes
  the free regular ground truth of highest OKS at ``OKS >= min(t, 1 - 1e-10)`` (OKS ties: the later
  ground truth), one-to-one, with :func:`~det_calib.matching.one_to_one.greedy_match`.
* **Ignored ground truth**: a crowd (``iscrowd``) and, for keypoints, a ground truth with no
  labelled keypoint (``num_keypoints = 0``) are ignored. A detection with no regular match may
  fall on an ignored ground truth at ``OKS >= t`` (the best, ties the later; a crowd absorbs any
  number of detections, an ignored non-crowd one only one), and is then ignored itself
  (``ignore=True``, neither true nor false positive). Unlike boxes, a crowd's OKS is computed as any
  other's.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from det_calib.errors import InputError
from det_calib.matching.one_to_one import (
    MatchResult,
    checked_ids,
    greedy_match,
    group_keys,
)
from det_calib.validation import as_integers, as_real

__all__ = [
    "COCO_SIGMAS",
    "oks_sigmas",
    "oks",
    "match_keypoints",
    "table_keypoints",
    "match_boxes_by_keypoints",
]

COCO_SIGMAS = (
    np.array(
        [
            0.26,
            0.25,
            0.25,
            0.35,
            0.35,
            0.79,
            0.79,
            0.72,
            0.72,
            0.62,
            0.62,
            1.07,
            1.07,
            0.87,
            0.87,
            0.89,
            0.89,
        ]
    )
    / 10.0
)
"""COCO's per-keypoint OKS sigmas of its 17 person keypoints (nose, eyes, ears, shoulders, elbows,
wrists, hips, knees, ankles)."""

_COCO_T_CAP = 1 - 1e-10


def oks_sigmas(nkpt: int, sigmas=None) -> np.ndarray:
    """Per-keypoint OKS sigmas: ``sigmas`` when given, COCO's for 17 keypoints, else ``1 / nkpt`` each.

    >>> oks_sigmas(4).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    if isinstance(nkpt, bool) or not isinstance(nkpt, (int, np.integer)) or nkpt < 1:
        raise InputError(
            f"Expected argument `nkpt` to be an integer larger than 0, but got {nkpt!r}"
        )
    if sigmas is not None:
        s = as_real(np.asarray(sigmas, dtype=np.float64).reshape(-1), "sigmas")
        if len(s) != nkpt or not (np.isfinite(s) & (s > 0)).all():
            raise InputError(
                f"Expected argument `sigmas` to be {nkpt} positive numbers, but got {list(s)}"
            )
        return s
    return COCO_SIGMAS.copy() if nkpt == 17 else np.full(nkpt, 1.0 / nkpt)


def _pair_oks(
    d_xy: np.ndarray, g_kpts: np.ndarray, g_area: np.ndarray, g_xyxy: np.ndarray, sigmas: np.ndarray
) -> np.ndarray:
    """OKS of detection ``k`` with ground truth ``k`` (elementwise), as pycocotools' ``computeOks``.

    Args:
        d_xy: (p, K, 2) detection keypoints ``x, y`` (a third column, the keypoint score, is ignored).
        g_kpts: (p, K, 3) ground-truth keypoints ``x, y, v``.
        g_area: (p,) ground-truth areas.
        g_xyxy: (p, 4) ground-truth boxes (used where a ground truth has no labelled keypoint).
        sigmas: (K,) per-keypoint sigmas.

    Returns:
        (p,) float64.
    """
    xd, yd = d_xy[..., 0], d_xy[..., 1]
    xg, yg, vg = g_kpts[..., 0], g_kpts[..., 1], g_kpts[..., 2]
    labelled = vg > 0
    k1 = labelled.sum(1)
    bw, bh = (g_xyxy[:, 2] - g_xyxy[:, 0])[:, None], (g_xyxy[:, 3] - g_xyxy[:, 1])[:, None]
    x0, x1 = (
        g_xyxy[:, :1] - bw,
        g_xyxy[:, :1] + bw * 2,
    )  # pycocotools: bb[0] - bb[2], bb[0] + bb[2] * 2
    y0, y1 = g_xyxy[:, 1:2] - bh, g_xyxy[:, 1:2] + bh * 2
    out_x = np.maximum(0, x0 - xd) + np.maximum(0, xd - x1)
    out_y = np.maximum(0, y0 - yd) + np.maximum(0, yd - y1)
    none = (k1 == 0)[:, None]
    dx = np.where(none, out_x, xd - xg)
    dy = np.where(none, out_y, yd - yg)
    variances = (sigmas * 2) ** 2
    e = (dx**2 + dy**2) / variances / (g_area[:, None] + np.spacing(1)) / 2
    used = labelled | none
    return np.where(used, np.exp(-e), 0.0).sum(1) / used.sum(1)


def oks(det_kpts, gt_kpts, gt_area, gt_xyxy, *, sigmas=None) -> np.ndarray:
    """Pairwise OKS of detections (rows) with ground truths (columns).

    Args:
        det_kpts: (n, K, 2 or 3) detection keypoints.
        gt_kpts: (m, K, 3) ground-truth keypoints ``x, y, v``.
        gt_area: (m,) ground-truth areas.
        gt_xyxy: (m, 4) ground-truth boxes.
        sigmas: Per-keypoint sigmas (default :func:`oks_sigmas` of K).

    >>> g = np.array([[[10.0, 10.0, 2], [20.0, 10.0, 0]]])
    >>> oks(np.array([[[10.0, 10.0], [0.0, 0.0]]]), g, [100.0], [[5, 5, 25, 15]]).round(6).tolist()
    [[1.0]]
    """
    d, g, area, box = _checked_keypoints(det_kpts, gt_kpts, gt_area, gt_xyxy)
    s = oks_sigmas(g.shape[1], sigmas)
    n, m = len(d), len(g)
    di, gi = np.repeat(np.arange(n), m), np.tile(np.arange(m), n)
    return _pair_oks(d[di], g[gi], area[gi], box[gi], s).reshape(n, m)


def _checked_keypoints(
    det_kpts, gt_kpts, gt_area, gt_xyxy, n: int | None = None, m: int | None = None
):
    d = as_real(np.asarray(det_kpts, dtype=np.float64), "det_kpts")
    g = as_real(np.asarray(gt_kpts, dtype=np.float64), "gt_kpts")
    if d.ndim != 3 or d.shape[2] not in (2, 3) or (n is not None and len(d) != n):
        raise InputError(
            f"Expected argument `det_kpts` to be of shape ({n if n is not None else 'n'}, K, 2 or "
            "3), "
            f"but got {d.shape}"
        )
    if (
        g.ndim != 3
        or g.shape[2] != 3
        or g.shape[1] != d.shape[1]
        or (m is not None and len(g) != m)
    ):
        raise InputError(
            f"Expected argument `gt_kpts` to be of shape ({m if m is not None else 'm'}, "
            f"{d.shape[1]}, 3) (x, y, v), but got {g.shape}"
        )
    area = as_real(np.asarray(gt_area, dtype=np.float64).reshape(-1), "gt_area")
    box = as_real(np.asarray(gt_xyxy, dtype=np.float64), "gt_xyxy")
    if len(area) != len(g) or box.shape != (len(g), 4):
        raise InputError(
            f"Expected arguments `gt_area` ({len(g)},) and `gt_xyxy` ({len(g)}, 4), but got "
            f"{area.shape} and {box.shape}"
        )
    if not (
        np.isfinite(d).all()
        and np.isfinite(g).all()
        and np.isfinite(area).all()
        and np.isfinite(box).all()
    ):
        raise InputError("Expected keypoints, areas and boxes to be finite, but some are not")
    return d, g, area, box


def _coco_rank(d_img, d_cls, d_score, g_img, g_cls) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Detections in COCO's order (group, descending score, input order), their group keys, each
    detection's rank within its group, and the GTs' group keys."""
    key_d, key_g = group_keys(d_img, d_cls, g_img, g_cls)
    by_score = np.argsort(-d_score, kind="stable")
    order = by_score[np.argsort(key_d[by_score], kind="stable")]
    kd = key_d[order]
    rank = np.empty(len(kd), dtype=np.int64)
    rank[order] = np.arange(len(kd)) - np.searchsorted(kd, kd, side="left")
    return order, rank, key_g


def _match_ignored(
    order: np.ndarray,
    key_d: np.ndarray,
    key_g: np.ndarray,
    left: np.ndarray,
    ignored: np.ndarray,
    crowd: np.ndarray,
    pair,
    thr: float,
) -> np.ndarray:
    """The ignored GT each detection in ``left`` (in COCO's ``order``) falls on: the best (ties the
    later) at OKS >= ``thr`` among crowds and the ignored non-crowd GTs not yet taken; -1 for none."""
    out = np.full(len(key_d), -1, dtype=np.int64)
    ig = np.flatnonzero(ignored)
    if ig.size == 0:
        return out
    taken: set[int] = set()
    for det in order[left[order]]:
        cand = ig[key_g[ig] == key_d[det]]
        if cand.size == 0:
            continue
        val = pair(np.full(cand.size, det), cand)
        best, pick = thr, -1
        for g, v in zip(cand, val):
            if v >= best and (crowd[g] or g not in taken):
                best, pick = v, g
        if pick >= 0:
            out[det] = pick
            taken.add(int(pick))
    return out


def match_keypoints(
    det_image,
    det_cls,
    det_score,
    det_kpts,
    gt_image,
    gt_cls,
    gt_kpts,
    gt_area,
    gt_xyxy,
    gt_crowd=None,
    gt_num_keypoints=None,
    *,
    oks_threshold: float = 0.5,
    max_dets: int | None = None,
    sigmas=None,
) -> MatchResult:
    """Match pose detections one-to-one to same-class ground truth by OKS, exactly as COCOeval ``keypoints``.

    Args:
        det_image, det_cls, det_score: (n,) image id, predicted class and score of each detection.
        det_kpts: (n, K, 2 or 3) detection keypoints (a keypoint score column is ignored).
        gt_image, gt_cls: (m,) image id and class of each ground truth.
        gt_kpts: (m, K, 3) ground-truth keypoints ``x, y, v``.
        gt_area: (m,) ground-truth areas (COCO ``area``).
        gt_xyxy: (m, 4) ground-truth boxes.
        gt_crowd: (m,) bool crowd flags, or None.
        gt_num_keypoints: (m,) COCO ``num_keypoints`` (default: the count of ``v > 0``); 0 ignores a GT.
        oks_threshold: Match when ``OKS >= min(oks_threshold, 1 - 1e-10)``; in [0, 1].
        max_dets: Only the top ``max_dets`` detections of each (image, class) take part (COCO's
            keypoint protocol uses 20); None: all.
        sigmas: Per-keypoint sigmas (default :func:`oks_sigmas`).

    Returns:
        A :class:`~det_calib.matching.one_to_one.MatchResult` in the input order: ``iou`` holds the
        OKS of the match, else the best OKS with a same-class regular ground truth; ``ignore``
        marks the detections that fell on an ignored ground truth.

    >>> g = np.array([[[10.0, 10.0, 2], [20.0, 10.0, 2]]])
    >>> d = np.array([[[10.0, 10.0], [20.0, 10.0]], [[10.0, 11.0], [20.0, 10.0]]])
    >>> r = match_keypoints([0, 0], [1, 1], [0.9, 0.8], d, [0], [1], g, [100.0], [[5, 5, 25, 15]])
    >>> r.correct.tolist(), r.gt_index.tolist()
    ([True, False], [0, -1])
    """
    (d_img, d_cls, d_score, d), (g_img, g_cls, g, area, box, crowd, ignored) = _checked_inputs(
        det_image,
        det_cls,
        det_score,
        det_kpts,
        gt_image,
        gt_cls,
        gt_kpts,
        gt_area,
        gt_xyxy,
        gt_crowd,
        gt_num_keypoints,
    )
    s = oks_sigmas(g.shape[1], sigmas)

    def pair(p_det: np.ndarray, p_gt: np.ndarray) -> np.ndarray:
        return _pair_oks(d[p_det], g[p_gt], area[p_gt], box[p_gt], s)

    res = _match_regular(
        d_img, d_cls, d_score, g_img, g_cls, ignored, pair, oks_threshold, max_dets
    )
    n = len(d_img)
    if n == 0 or len(g_img) == 0 or not ignored.any():
        return res
    order, rank, key_g = _coco_rank(d_img, d_cls, d_score, g_img, g_cls)
    key_d = group_keys(d_img, d_cls, g_img, g_cls)[0]
    left = ~res.correct & (rank < (max_dets if max_dets is not None else n))
    thr = min(float(oks_threshold), _COCO_T_CAP)
    on_ignored = _match_ignored(order, key_d, key_g, left, ignored, crowd, pair, thr)
    return MatchResult(
        correct=res.correct,
        iou=res.iou,
        gt_index=np.where(on_ignored >= 0, on_ignored, res.gt_index),
        ignore=on_ignored >= 0,
    )


def _checked_inputs(
    det_image,
    det_cls,
    det_score,
    det_kpts,
    gt_image,
    gt_cls,
    gt_kpts,
    gt_area,
    gt_xyxy,
    gt_crowd,
    gt_num_keypoints,
):
    """The checked detection arrays (image, class, score, keypoints) and GT arrays (image, class,
    keypoints, area, box, crowd, ignored: a crowd or no labelled keypoint)."""
    d_img, d_cls, d_score, g_img, g_cls, crowd = checked_ids(
        det_image, det_cls, det_score, gt_image, gt_cls, gt_crowd
    )
    n, m = len(d_img), len(g_img)
    d, g, area, box = _checked_keypoints(det_kpts, gt_kpts, gt_area, gt_xyxy, n, m)
    nk = (
        (g[:, :, 2] > 0).sum(1)
        if gt_num_keypoints is None
        else as_integers(gt_num_keypoints, "gt_num_keypoints", m, "gt_image")
    )
    return (d_img, d_cls, d_score, d), (g_img, g_cls, g, area, box, crowd, crowd | (nk == 0))


def _match_regular(
    d_img, d_cls, d_score, g_img, g_cls, ignored, pair, oks_threshold, max_dets
) -> MatchResult:
    """COCO's greedy matching to the regular (not ignored) GTs; ``gt_index`` in the full GT numbering."""
    regular = np.flatnonzero(~ignored)
    res = greedy_match(
        d_img,
        d_cls,
        d_score,
        g_img[regular],
        g_cls[regular],
        np.zeros(len(regular), dtype=bool),
        pair_iou=lambda pd, pg, _c: pair(pd, regular[pg]),
        iou_threshold=oks_threshold,
        max_dets=max_dets,
    )
    gt_index = np.where(
        res.correct, regular[np.maximum(res.gt_index, 0)] if len(regular) else -1, -1
    )
    return MatchResult(correct=res.correct, iou=res.iou, gt_index=gt_index, ignore=res.ignore)


def table_keypoints(boxes: pl.DataFrame, column: str, nkpt: int) -> np.ndarray:
    """(n, K, 2 or 3) keypoints of a box table's ``column`` (per box K lists ``[x, y(, conf)]``, as the
    capture of a pose model writes them).

    Raises:
        InputError: The column is missing, has nulls, or its boxes hold different keypoint counts.
    """
    if column not in boxes.columns:
        raise InputError(
            f"box table is missing the keypoint column `{column}`; has {boxes.columns}"
        )
    s = boxes[column]
    if s.null_count():
        raise InputError(f"box table column `{column}` has {s.null_count()} rows without keypoints")
    if boxes.height == 0:
        return np.zeros((0, nkpt, 3))
    counts = s.list.len()
    if counts.n_unique() != 1:
        raise InputError(
            f"box table column `{column}` holds boxes of different keypoint counts "
            f"{sorted(counts.unique().to_list())}"
        )
    flat = s.explode().explode().to_numpy().astype(np.float64)
    return flat.reshape(boxes.height, int(counts[0]), -1)


def _match_keypoint_table(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    *,
    oks_threshold: float = 0.5,
    sigmas=None,
    max_dets: int | None = None,
    column: str = "kpts",
) -> pl.DataFrame:
    """Fill ``correct``, ``iou`` (the OKS) and ``ignore`` of one head's box table by OKS (:func:`match_keypoints`).

    Args:
        boxes: Box table with ``image_id``, ``cls``, ``conf`` and ``column`` (each box's K keypoints,
            ``[x, y, conf]`` in image pixels).
        gt: Ground truth with ``image_id``, ``cls``, ``x1``..``y2``, ``column`` (``3K`` values
            ``x, y, v``), ``area``, ``num_keypoints`` and optionally ``crowd``, as
            :func:`det_calib.tasks.pose.labels.load_pose_split` gives it.
        oks_threshold, sigmas, max_dets: See :func:`match_keypoints`.
        column: Name of the keypoint column in both tables.

    Raises:
        InputError: A column is missing or null, or the keypoint counts of boxes and ground truth differ.
    """
    for df, need, what in (
        (boxes, ("image_id", "cls", "conf"), "box table"),
        (gt, ("image_id", "cls", "x1", "y1", "x2", "y2", column, "area"), "GT table"),
    ):
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise InputError(f"{what} is missing columns {missing}; has {df.columns}")
    g = np.asarray(gt[column].to_numpy(), dtype=np.float64).reshape(gt.height, -1, 3)
    d = table_keypoints(boxes, column, g.shape[1])
    if boxes.height and gt.height and d.shape[1] != g.shape[1]:
        raise InputError(
            f"the boxes have {d.shape[1]} keypoints each, the ground truth {g.shape[1]}"
        )
    r = match_keypoints(
        boxes["image_id"].to_numpy(),
        boxes["cls"].to_numpy(),
        boxes["conf"].to_numpy(),
        d,
        gt["image_id"].to_numpy(),
        gt["cls"].to_numpy(),
        g,
        gt["area"].to_numpy(),
        gt.select("x1", "y1", "x2", "y2").to_numpy().reshape(-1, 4),
        gt["crowd"].to_numpy() if "crowd" in gt.columns else None,
        gt["num_keypoints"].to_numpy() if "num_keypoints" in gt.columns else None,
        oks_threshold=oks_threshold,
        max_dets=max_dets,
        sigmas=sigmas,
    )
    return boxes.with_columns(
        pl.Series("correct", r.correct, dtype=pl.Boolean),
        pl.Series("iou", r.iou, dtype=pl.Float64),
        pl.Series("ignore", r.ignore, dtype=pl.Boolean),
    )


def match_boxes_by_keypoints(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    *,
    iou: float,
    loc_iou: float,
    sigmas=None,
    column: str = "kpts",
) -> pl.DataFrame:
    """:func:`det_calib.matching.one_to_one.match_boxes` by OKS: ``correct``, ``iou`` (the OKS), ``ignore``
    (at ``iou``) and ``loc_iou`` (the OKS of the match at ``loc_iou``, 0 if none).

    Args:
        boxes: One head's boxes with their keypoints (see :func:`match_keypoint_table`).
        gt: Ground truth with keypoints (:func:`det_calib.tasks.pose.labels.load_pose_split`).
        iou: OKS a box needs with a same-class ground truth to be correct.
        loc_iou: Threshold of the second matching, whose OKS feeds the localisation-aware metrics.
        sigmas: Per-keypoint sigmas (default :func:`oks_sigmas`).
    """
    at_iou = _match_keypoint_table(boxes, gt, oks_threshold=iou, sigmas=sigmas, column=column)
    loc = _match_keypoint_table(boxes, gt, oks_threshold=loc_iou, sigmas=sigmas, column=column)
    loc_target = np.where(loc["correct"].to_numpy(), loc["iou"].to_numpy(), 0.0)
    return boxes.with_columns(
        at_iou["correct"],
        at_iou["iou"],
        at_iou["ignore"],
        pl.Series("loc_iou", loc_target, dtype=pl.Float64),
    )

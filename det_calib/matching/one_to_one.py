"""Label detections correct / incorrect by one-to-one IoU matching, exactly as COCO does.

The label is the one ``pycocotools.cocoeval.COCOeval.evaluateImg`` gives a detection for one
IoU threshold, area range "all" (``dtMatches`` / ``dtIgnore``):

* Detections and ground truth (GT) are grouped by (image, class); groups never interact.
* Within a group, detections are visited in descending score. Ties keep the input order: the
  order is ``np.argsort(-score, kind="mergesort")`` over the group's detections in input order,
  as pycocotools sorts them.
* ``max_dets`` (COCO's ``maxDets``): only the first ``max_dets`` detections of each
  (image, class) group in that order take part; the others are unmatched.
* Each detection takes the still-unmatched non-crowd GT with the highest IoU, provided
  ``IoU >= min(iou_threshold, 1 - 1e-10)`` (COCO skips ``iou < min(t, 1-1e-10)``). When two GTs
  tie on IoU the later one (in input order) wins, as in COCO's scan.
* A detection that finds no free non-crowd GT may fall on a crowd GT instead. Crowd GTs use
  ``IoU = intersection / area(detection)`` (pycocotools' ``iscrowd`` convention), can absorb
  any number of detections, and the detection is then *ignored* (``ignore=True``,
  ``correct=False``): COCO counts it neither as a true nor as a false positive.
* Boxes are in continuous pixel coordinates: ``area = (x2 - x1) * (y2 - y1)``, no ``+1``.
* No area range: COCO's "all" range ``[0, 1e10]`` px² only drops boxes of area > 1e10 px²,
  which are kept here.

With ``iou_threshold=0`` every same-class GT is a candidate whatever its IoU (COCO's rule
``iou < 0`` never skips), which is the tau = 0 matching of LaECE_0.

The IoU arithmetic follows pycocotools' ``bbIou`` operation by operation, so on boxes whose
coordinates are exactly representable both ways (for example on a 1/8-pixel grid) the results
are bit-identical; pycocotools works from ``xywh`` and recomputes ``x + w``, which on arbitrary
floats can differ from ``x2`` by one ulp and so flip an exact tie or an IoU that sits exactly on
the threshold.

Algorithm (vectorised, no Python loop over groups): detections and GTs are sorted by
(image, class); every same-group (detection, GT) pair is formed with ``searchsorted`` ranges and
its IoU computed in one pass. The greedy assignment (a "serial dictatorship" in score order) is
then resolved in rounds across all groups at once: in each round every undecided detection
points at its best free candidate GT, and the pointer is final when the detection is the
highest-scored undecided detection that still has that GT as a candidate, because no earlier
detection can take that GT any more. The highest-scored undecided detection of each group
always finalises, so the loop ends, and in practice after a handful of rounds (chains of
detections competing for overlapping GTs are short).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from det_calib.errors import InputError
from det_calib.validation import as_1d, as_integers, as_real, check_length

__all__ = ["MatchResult", "box_iou", "greedy_match", "match_detections", "match_table"]

_logger = logging.getLogger(__name__)

#: COCO caps the threshold at ``1 - 1e-10`` so that IoU = 1 boxes still match at t = 1.
_COCO_T_CAP = 1 - 1e-10


@dataclass(frozen=True)
class MatchResult:
    """Per-detection matching result, in the input order of the detections.

    Attributes:
        correct: (n,) bool. Matched to a non-crowd same-class GT at IoU >= threshold.
        iou: (n,) float64. IoU with the matched GT when ``correct``; otherwise the best IoU with
            any same-class non-crowd GT of the image, taken or not (0 if there is none).
        gt_index: (n,) int64. Index into the GT arrays of the GT the detection was matched to
            (a non-crowd GT when ``correct``, a crowd GT when ``ignore``); -1 if none.
        ignore: (n,) bool. Matched to a crowd GT: COCO excludes these detections.
    """

    correct: np.ndarray
    iou: np.ndarray
    gt_index: np.ndarray
    ignore: np.ndarray

    def __len__(self) -> int:
        return len(self.correct)


# ---------------------------------------------------------------------------------------------
# IoU


def _pair_iou(
    d: tuple[np.ndarray, ...], g: tuple[np.ndarray, ...], crowd: np.ndarray | None
) -> np.ndarray:
    """Elementwise (broadcast) IoU of detection boxes ``d`` and GT boxes ``g``.

    Mirrors pycocotools ``bbIou``: ``w = min(right) - max(left)``, zero unless ``w > 0`` and
    ``h > 0``; ``union = da + ga - inter`` (or ``da`` for a crowd GT); ``iou = inter / union``.
    """
    dx1, dy1, dx2, dy2 = d
    gx1, gy1, gx2, gy2 = g
    w = np.minimum(dx2, gx2) - np.maximum(dx1, gx1)
    h = np.minimum(dy2, gy2) - np.maximum(dy1, gy1)
    inter = w * h
    da = (dx2 - dx1) * (dy2 - dy1)
    union = da + (gx2 - gx1) * (gy2 - gy1) - inter
    if crowd is not None:
        union = np.where(crowd, da, union)
    ok = (w > 0) & (h > 0) & (union > 0)
    out = np.zeros(np.broadcast(inter, union).shape, dtype=np.float64)
    np.divide(inter, union, out=out, where=ok)
    return out


def box_iou(a, b, *, crowd=None) -> np.ndarray:
    """Pairwise IoU of two sets of ``xyxy`` boxes.

    Args:
        a: (n, 4) boxes ``x1, y1, x2, y2`` (the detections when ``crowd`` is given).
        b: (m, 4) boxes.
        crowd: Optional (m,) bool. Where true, the IoU with that box of ``b`` is
            ``intersection / area(a)`` (pycocotools' ``iscrowd`` convention).

    Returns:
        (n, m) float64 IoU matrix.

    Raises:
        InputError: Wrong shapes or non-finite coordinates.

    >>> box_iou([[0, 0, 10, 10]], [[0, 0, 5, 10], [20, 20, 30, 30]]).tolist()
    [[0.5, 0.0]]
    """
    a = _boxes(a, "a", None)
    b = _boxes(b, "b", None)
    c = None if crowd is None else _checked_flags(crowd, "crowd", len(b), "b")[None, :]
    return _pair_iou(
        tuple(a[:, k, None] for k in range(4)), tuple(b[None, :, k] for k in range(4)), c
    )


# ---------------------------------------------------------------------------------------------
# Input validation


def _boxes(x, name: str, n: int | None, ref: str | None = None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.size == 0 and arr.ndim <= 2 and (arr.ndim < 2 or arr.shape[1] in (0, 4)):
        arr = arr.reshape(0, 4)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise InputError(
            f"Expected argument `{name}` of shape (n, 4) (x1, y1, x2, y2), but got shape "
            f"{arr.shape}"
        )
    check_length(arr, name, n, ref)
    arr = as_real(arr, name)
    if not np.isfinite(arr).all():
        raise InputError(
            f"Expected argument `{name}` to have finite coordinates, but it contains nan or inf"
        )
    if ((arr[:, 2] < arr[:, 0]) | (arr[:, 3] < arr[:, 1])).any():
        raise InputError(
            f"Expected argument `{name}` to hold boxes x1, y1, x2, y2 with x2 >= x1 and y2 >= y1, "
            "but some have x2 < x1 or y2 < y1"
        )
    return arr


def checked_ids(
    det_image, det_cls, det_score, gt_image, gt_cls, gt_crowd=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The checked arrays every matching call takes, whatever it matches by: the detections' (n,)
    int64 image ids, classes and float scores (no NaN), and the GTs' (m,) int64 image ids, classes
    and bool crowd flags (``gt_crowd`` None: no crowd), each of the length of its image ids.
    The box IoU's (:func:`match_detections`) and each task's matcher check their inputs with it."""
    d_img = as_integers(det_image, "det_image")
    n = len(d_img)
    d_cls = as_integers(det_cls, "det_cls", n, "det_image")
    d_score = _checked_scores(det_score, "det_score", n, "det_image")
    g_img = as_integers(gt_image, "gt_image")
    m = len(g_img)
    g_cls = as_integers(gt_cls, "gt_cls", m, "gt_image")
    g_crowd = (
        np.zeros(m, dtype=bool)
        if gt_crowd is None
        else _checked_flags(gt_crowd, "gt_crowd", m, "gt_image")
    )
    return d_img, d_cls, d_score, g_img, g_cls, g_crowd


def _checked_scores(x, name: str, n: int, ref: str) -> np.ndarray:
    """(n,) float scores named ``name`` (length that of ``ref``), finite or inf, no NaN."""
    arr = as_1d(x, name, n, ref)
    if arr.size == 0:
        return arr.astype(np.float64)
    arr = as_real(arr, name)
    if np.isnan(arr).any():
        raise InputError(f"Expected argument `{name}` to hold no nan, but it does")
    return arr


def _checked_flags(x, name: str, n: int, ref: str) -> np.ndarray:
    """(n,) bool flags named ``name`` (length that of ``ref``): booleans, or integers 0/1."""
    arr = as_1d(x, name, n, ref)
    if arr.size == 0:
        return arr.astype(bool)
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.integer) or not np.isin(arr, (0, 1)).all():
            # this wording is pinned by tests/system/test_boundaries.py (the one message not yet in the
            # house style; see det_calib/validation.py)
            raise InputError(f"`{name}` must hold booleans (or 0/1), got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def _check_threshold(t) -> float:
    try:
        tf = float(t)
    except (TypeError, ValueError):
        raise InputError(
            f"Expected argument `iou_threshold` to be a number in [0, 1], but got {t!r}"
        ) from None
    if isinstance(t, bool) or not (0.0 <= tf <= 1.0):
        raise InputError(
            f"Expected argument `iou_threshold` to be a number in [0, 1], but got {t!r}"
        )
    return tf


def _check_max_dets(k) -> int | None:
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(
            f"Expected argument `max_dets` to be None or an integer larger than 0, but got {k!r}"
        )
    return int(k)


# ---------------------------------------------------------------------------------------------
# Matching


def group_keys(d_img, d_cls, g_img, g_cls) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per (image, class), comparable between detections and GTs."""
    img = np.concatenate([d_img, g_img])
    cls = np.concatenate([d_cls, g_cls])
    i_lo, i_hi = int(img.min()), int(img.max())
    c_lo, c_hi = int(cls.min()), int(cls.max())
    span_c = c_hi - c_lo + 1
    if (i_hi - i_lo + 1) * span_c < 2**62:  # direct arithmetic key, no overflow possible
        key = (img - i_lo) * span_c + (cls - c_lo)
    else:  # huge id ranges: factorise first
        _, ic = np.unique(img, return_inverse=True)
        _, cc = np.unique(cls, return_inverse=True)
        key = ic.astype(np.int64) * (int(cc.max()) + 1) + cc
    n = len(d_img)
    return key[:n], key[n:]


def _first_of_runs(x: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal values in ``x``."""
    first = np.empty(len(x), dtype=bool)
    if len(x):
        first[0] = True
        np.not_equal(x[1:], x[:-1], out=first[1:])
    return first


def last_best_per_run(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Positions, one per run of equal ``keys``, of the LAST maximum of ``values`` in the run.

    Within a detection's run the GTs are in input order, so "last maximum" is COCO's choice
    among equal IoUs (its scan replaces the best so far unless ``iou < best``).
    """
    starts = np.flatnonzero(_first_of_runs(keys))
    run_id = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(keys))))
    is_max = values == np.maximum.reduceat(values, starts)[run_id]
    return np.maximum.reduceat(np.where(is_max, np.arange(len(keys)), -1), starts)


def match_detections(
    det_image,
    det_xyxy,
    det_cls,
    det_score,
    gt_image,
    gt_xyxy,
    gt_cls,
    gt_crowd=None,
    *,
    iou_threshold: float = 0.5,
    max_dets: int | None = None,
) -> MatchResult:
    """Match detections one-to-one to same-class ground truth, exactly as COCOeval does.

    See the module docstring for the rule. Equals pycocotools' ``evaluateImg`` ``dtMatches``/``dtIgnore``
    at one IoU threshold, area range "all", ``maxDets=[max_dets]``, ``useCats=1``.

    Args:
        det_image: (n,) int image id of each detection.
        det_xyxy: (n, 4) float detection boxes ``x1, y1, x2, y2`` in pixels.
        det_cls: (n,) int predicted class.
        det_score: (n,) float score; only its order within (image, class) matters.
        gt_image: (m,) int image id of each GT box.
        gt_xyxy: (m, 4) float GT boxes ``x1, y1, x2, y2``.
        gt_cls: (m,) int GT class.
        gt_crowd: (m,) bool crowd flag (COCO ``iscrowd``), or None for no crowd boxes.
        iou_threshold: Match when ``IoU >= min(iou_threshold, 1 - 1e-10)``; in [0, 1].
        max_dets: If given, only the top ``max_dets`` detections by score of each
            (image, class) are matched; the rest are unmatched (COCO ``maxDets``).

    Returns:
        A :class:`MatchResult`, arrays in the input order of the detections.

    Raises:
        InputError: Lengths or shapes disagree, non-integer ids or classes, non-finite or
            inverted boxes, NaN scores, or an option out of range.

    >>> r = match_detections([0, 0], [[0, 0, 10, 10], [0, 0, 10, 10]], [1, 1], [0.9, 0.8],
    ...                      [0], [[0, 0, 10, 10]], [1])
    >>> r.correct.tolist(), r.gt_index.tolist()
    ([True, False], [0, -1])
    """
    return _match_detections_at(
        det_image,
        det_xyxy,
        det_cls,
        det_score,
        gt_image,
        gt_xyxy,
        gt_cls,
        gt_crowd,
        thresholds=(iou_threshold,),
        max_dets=max_dets,
    )[0]


def _match_detections_at(
    det_image,
    det_xyxy,
    det_cls,
    det_score,
    gt_image,
    gt_xyxy,
    gt_cls,
    gt_crowd,
    *,
    thresholds: tuple[float, ...],
    max_dets: int | None,
) -> list[MatchResult]:
    """:func:`match_detections` at each IoU threshold of ``thresholds``, the inputs checked, grouped,
    ordered and paired, and the pairs' IoUs computed, once for all of them."""
    d_img, d_cls, d_score, g_img, g_cls, g_crowd = checked_ids(
        det_image, det_cls, det_score, gt_image, gt_cls, gt_crowd
    )
    d_box = _boxes(det_xyxy, "det_xyxy", len(d_img), "det_image")
    g_box = _boxes(gt_xyxy, "gt_xyxy", len(g_img), "gt_image")
    d_cols, g_cols = (
        np.ascontiguousarray(d_box.T),
        np.ascontiguousarray(g_box.T),
    )  # (4, n): cheaper gathers

    def pair_iou(p_det: np.ndarray, p_gt: np.ndarray, p_crowd: np.ndarray) -> np.ndarray:
        return _pair_iou(
            tuple(np.take(d_cols, p_det, axis=1)), tuple(np.take(g_cols, p_gt, axis=1)), p_crowd
        )

    return _greedy_match_at(
        d_img,
        d_cls,
        d_score,
        g_img,
        g_cls,
        g_crowd,
        pair_iou=pair_iou,
        thresholds=thresholds,
        max_dets=max_dets,
    )


_PairIoU = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``pair_iou(det, gt, crowd) -> iou``: the IoU of detection ``det[k]`` (index in the input order)
with GT ``gt[k]``, with the crowd convention (``intersection / area(detection)``) where ``crowd[k]``."""


def greedy_match(
    d_img: np.ndarray,
    d_cls: np.ndarray,
    d_score: np.ndarray,
    g_img: np.ndarray,
    g_cls: np.ndarray,
    g_crowd: np.ndarray,
    *,
    pair_iou: _PairIoU,
    iou_threshold: float = 0.5,
    max_dets: int | None = None,
) -> MatchResult:
    """COCO's one-to-one matching (see the module docstring) for any overlap measure.

    :func:`match_detections` (boxes) and :func:`det_calib.tasks.segment.matching.match_masks` (masks)
    check their inputs and call this with their ``pair_iou``. It is called once, with every
    same-(image, class) pair: pairs come grouped by group, then by detection in COCO's order
    (descending score, ties in input order), then by GT in input order; so each group's pairs
    are its (detections x GTs) IoU matrix, row-major.

    Args:
        d_img, d_cls, d_score: (n,) checked detection image ids, classes and scores.
        g_img, g_cls, g_crowd: (m,) checked GT image ids, classes and crowd flags.
        pair_iou: See :data:`PairIoU`.
        iou_threshold: See :func:`match_detections`.
        max_dets: See :func:`match_detections`.
    """
    return _greedy_match_at(
        d_img,
        d_cls,
        d_score,
        g_img,
        g_cls,
        g_crowd,
        pair_iou=pair_iou,
        thresholds=(iou_threshold,),
        max_dets=max_dets,
    )[0]


def _greedy_match_at(
    d_img: np.ndarray,
    d_cls: np.ndarray,
    d_score: np.ndarray,
    g_img: np.ndarray,
    g_cls: np.ndarray,
    g_crowd: np.ndarray,
    *,
    pair_iou: _PairIoU,
    thresholds: tuple[float, ...],
    max_dets: int | None,
) -> list[MatchResult]:
    """:func:`greedy_match` at each IoU threshold of ``thresholds``: the groups, COCO's order, the
    same-group pairs and their IoUs are built once; only the assignment is made per threshold."""
    n, m = len(d_img), len(g_img)
    thrs = [min(_check_threshold(t), _COCO_T_CAP) for t in thresholds]
    max_dets = _check_max_dets(max_dets)
    if n == 0 or m == 0:
        return [_unmatched(n) for _ in thrs]
    key_d, key_g = group_keys(d_img, d_cls, g_img, g_cls)
    order, kd = _coco_order(key_d, d_score)
    p_det, p_gt = _same_group_pairs(kd, key_g)
    if p_det.size == 0:
        return [_unmatched(n) for _ in thrs]
    p_crowd = g_crowd[p_gt]
    p_iou = np.asarray(pair_iou(order[p_det], p_gt, p_crowd), dtype=np.float64)
    best = _best_regular_iou(p_det, p_iou, ~p_crowd, n)
    return [
        _assign(p_det, p_gt, p_iou, p_crowd, best, order, kd, n=n, m=m, thr=t, max_dets=max_dets)
        for t in thrs
    ]


def _assign(
    p_det: np.ndarray,
    p_gt: np.ndarray,
    p_iou: np.ndarray,
    p_crowd: np.ndarray,
    best: np.ndarray,
    order: np.ndarray,
    kd: np.ndarray,
    *,
    n: int,
    m: int,
    thr: float,
    max_dets: int | None,
) -> MatchResult:
    """The match at one (capped) IoU threshold ``thr`` of :func:`_greedy_match_at`'s pairs."""
    eligible = _eligible(p_iou, p_det, kd, thr=thr, max_dets=max_dets)

    # Greedy one-to-one assignment to non-crowd GTs, resolved in rounds across all groups.
    sel = ~p_crowd & eligible
    m_gt, m_iou, rounds = _assign_in_rounds(p_det[sel], p_gt[sel], p_iou[sel], n, m)
    _logger.debug("matching: %d detections, %d GT, %d pairs, %d rounds", n, m, len(p_det), rounds)
    matched = m_gt >= 0
    crowd_gt = _best_crowd_gt(p_det, p_gt, p_iou, p_crowd & eligible & ~matched[p_det], n)

    out = _unmatched(n)
    out.correct[order] = matched
    out.ignore[order] = crowd_gt >= 0
    out.gt_index[order] = np.where(matched, m_gt, crowd_gt)
    out.iou[order] = np.where(matched, m_iou, best)
    return out


def _unmatched(n: int) -> MatchResult:
    return MatchResult(
        correct=np.zeros(n, dtype=bool),
        iou=np.zeros(n, dtype=np.float64),
        gt_index=np.full(n, -1, dtype=np.int64),
        ignore=np.zeros(n, dtype=bool),
    )


def _coco_order(key_d: np.ndarray, d_score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Detection "rank" r = position in the order (group, -score, input order): two stable sorts
    give exactly pycocotools' mergesort on -score within each group. Returns the order and the
    group keys in it."""
    by_score = np.argsort(-d_score, kind="stable")
    order = by_score[_stable_order(key_d[by_score])]
    return order, key_d[order]


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of int64 keys: for non-negative keys (the group keys), as
    16-bit radix passes from the lowest digit up (numpy sorts 16-bit integers by radix, a stable
    sort in linear time), the same permutation without a comparison sort of the keys.

    >>> k = np.array([70000, 3, 70000, 65539, 3])
    >>> _stable_order(k).tolist() == np.argsort(k, kind="stable").tolist()
    True
    """
    if not keys.size or int(keys.min()) < 0:
        return np.argsort(keys, kind="stable")
    top, shift, order = int(keys.max()), 0, None
    while order is None or top >> shift:
        digit = (((keys if order is None else keys[order]) >> shift) & 0xFFFF).astype(np.uint16)
        step = np.argsort(digit, kind="stable")
        order = step if order is None else order[step]
        shift += 16
    return order


def _same_group_pairs(kd: np.ndarray, key_g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All same-group (detection rank, GT index) pairs, grouped by detection rank; within a group,
    GTs keep input order."""
    g_order = np.argsort(key_g, kind="stable")
    kg = key_g[g_order]
    lo = np.searchsorted(kg, kd, side="left")
    cnt = np.searchsorted(kg, kd, side="right") - lo
    n_pairs = int(cnt.sum())
    p_det = np.repeat(np.arange(len(kd), dtype=np.int64), cnt)
    p_gt = g_order[np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(n_pairs)]
    return p_det, p_gt


def _best_regular_iou(
    p_det: np.ndarray, p_iou: np.ndarray, regular: np.ndarray, n: int
) -> np.ndarray:
    """Best IoU of each detection (by rank) with any non-crowd GT of its group (reported for
    unmatched detections); 0 without one."""
    r_det = p_det[regular]
    best = np.zeros(n, dtype=np.float64)
    if r_det.size:
        starts = np.flatnonzero(_first_of_runs(r_det))
        best[r_det[starts]] = np.maximum.reduceat(p_iou[regular], starts)
    return best


def _eligible(
    p_iou: np.ndarray, p_det: np.ndarray, kd: np.ndarray, *, thr: float, max_dets: int | None
) -> np.ndarray:
    """The pairs at IoU >= ``thr`` whose detection is among the first ``max_dets`` of its group."""
    eligible = p_iou >= thr  # COCO: `if ious[d, g] < iou: continue` with iou = min(t, 1-1e-10)
    if max_dets is not None:
        group_start = np.searchsorted(kd, kd, side="left")
        considered = (np.arange(len(kd)) - group_start) < max_dets
        eligible &= considered[p_det]
    return eligible


def _assign_in_rounds(
    c_det: np.ndarray, c_gt: np.ndarray, c_iou: np.ndarray, n: int, m: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The greedy one-to-one assignment of candidate pairs (grouped by detection rank): in each
    round, a detection's best free GT goes to it when no earlier undecided detection wants that GT.
    Returns each detection's GT (-1: none) and IoU, by rank, and the number of rounds."""
    m_gt = np.full(n, -1, dtype=np.int64)  # by rank
    m_iou = np.zeros(n, dtype=np.float64)
    taken = np.zeros(m, dtype=bool)
    g_min = np.empty(m, dtype=np.int64)
    rounds = 0
    while c_det.size:
        rounds += 1
        top = np.zeros(len(c_det), dtype=bool)  # each detection's best free candidate
        top[last_best_per_run(c_det, c_iou)] = True
        g_min[c_gt] = n
        np.minimum.at(g_min, c_gt, c_det)  # earliest undecided detection wanting each GT
        win = top & (g_min[c_gt] == c_det)
        w_det, w_gt = c_det[win], c_gt[win]
        m_gt[w_det] = w_gt
        m_iou[w_det] = c_iou[win]
        taken[w_gt] = True
        keep = ~taken[c_gt] & (m_gt[c_det] < 0)
        c_det, c_gt, c_iou = c_det[keep], c_gt[keep], c_iou[keep]
    return m_gt, m_iou, rounds


def _best_crowd_gt(
    p_det: np.ndarray, p_gt: np.ndarray, p_iou: np.ndarray, sel: np.ndarray, n: int
) -> np.ndarray:
    """Detections left without a non-crowd GT fall on the best crowd GT of the pairs ``sel``, if
    any (ties: later GT); -1 for none, by rank."""
    k_det, k_gt, k_iou = p_det[sel], p_gt[sel], p_iou[sel]
    crowd_gt = np.full(n, -1, dtype=np.int64)
    if k_det.size:
        pick = last_best_per_run(k_det, k_iou)
        crowd_gt[k_det[pick]] = k_gt[pick]
    return crowd_gt


# ---------------------------------------------------------------------------------------------
# Tables

_BOX_COLUMNS = ("image_id", "x1", "y1", "x2", "y2", "cls", "conf")
_GT_COLUMNS = ("image_id", "x1", "y1", "x2", "y2", "cls")
_ARG_TO_COLUMN = {
    "det_image": "box table column `image_id`",
    "det_xyxy": "box table columns `x1, y1, x2, y2`",
    "det_cls": "box table column `cls`",
    "det_score": "box table column `conf`",
    "gt_image": "GT table column `image_id`",
    "gt_xyxy": "GT table columns `x1, y1, x2, y2`",
    "gt_cls": "GT table column `cls`",
    "gt_crowd": "GT table column `crowd`",
}


def _column(df: pl.DataFrame, col: str, what: str) -> np.ndarray:
    s = df[col]
    if s.null_count():
        raise InputError(f"{what} column `{col}` has {s.null_count()} null values")
    return s.to_numpy()


def _check_tables(boxes: pl.DataFrame, gt: pl.DataFrame) -> None:
    """:func:`match_table`'s tables: polars frames with the columns it reads, one head only."""
    for df, need, what in ((boxes, _BOX_COLUMNS, "box table"), (gt, _GT_COLUMNS, "GT table")):
        if not isinstance(df, pl.DataFrame):
            raise InputError(f"{what} must be a polars DataFrame, got {type(df).__name__}")
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise InputError(f"{what} is missing columns {missing}; has {df.columns}")
    if "head" in boxes.columns and boxes["head"].n_unique() > 1:
        raise InputError(
            f"box table mixes heads {boxes['head'].unique().sort().to_list()}; match one head at a "
            "time"
        )


def match_table(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    *,
    iou_threshold: float = 0.5,
    max_dets: int | None = None,
) -> pl.DataFrame:
    """Fill the ``correct``, ``iou`` and ``ignore`` columns of a box table.

    Args:
        boxes: Box table (see :mod:`det_calib.data.box_table`) for ONE head: columns ``image_id``,
            ``x1``, ``y1``, ``x2``, ``y2``, ``cls``, ``conf`` at least; ``conf`` is the score.
        gt: GT table with columns ``image_id``, ``x1``, ``y1``, ``x2``, ``y2``, ``cls`` and
            optionally ``crowd`` (bool; all false when absent). Same ``image_id`` space.
        iou_threshold: See :func:`match_detections`.
        max_dets: See :func:`match_detections`.

    Returns:
        ``boxes`` with ``correct`` (bool), ``iou`` (float64) and ``ignore`` (bool) added or
        replaced; row order and other columns unchanged.

    Raises:
        InputError: A column is missing or has nulls, the table mixes heads, or any check of
            :func:`match_detections` fails.
    """
    (r,) = _match_results(boxes, gt, (iou_threshold,), max_dets=max_dets)
    return _with_match(boxes, r)


def _with_match(boxes: pl.DataFrame, r: MatchResult) -> pl.DataFrame:
    return boxes.with_columns(
        pl.Series("correct", r.correct, dtype=pl.Boolean),
        pl.Series("iou", r.iou, dtype=pl.Float64),
        pl.Series("ignore", r.ignore, dtype=pl.Boolean),
    )


def _match_results(
    boxes: pl.DataFrame, gt: pl.DataFrame, thresholds: tuple[float, ...], *, max_dets: int | None
) -> list[MatchResult]:
    """:func:`match_table`'s matches at each IoU threshold of ``thresholds`` (checked, and paired,
    once)."""
    _check_tables(boxes, gt)
    xyxy = ("x1", "y1", "x2", "y2")
    det_xyxy = (
        np.column_stack([_column(boxes, c, "box table") for c in xyxy])
        if boxes.height
        else np.zeros((0, 4))
    )
    gt_xyxy = (
        np.column_stack([_column(gt, c, "GT table") for c in xyxy])
        if gt.height
        else np.zeros((0, 4))
    )
    try:
        return _match_detections_at(
            _column(boxes, "image_id", "box table"),
            det_xyxy,
            _column(boxes, "cls", "box table"),
            _column(boxes, "conf", "box table"),
            _column(gt, "image_id", "GT table"),
            gt_xyxy,
            _column(gt, "cls", "GT table"),
            _column(gt, "crowd", "GT table") if "crowd" in gt.columns else None,
            thresholds=thresholds,
            max_dets=max_dets,
        )
    except InputError as e:  # name the table columns rather than the array arguments
        msg = str(e)
        for arg, col in _ARG_TO_COLUMN.items():
            msg = msg.replace(f"`{arg}`", col)
        raise InputError(msg) from None


def collapse_inverted(boxes: pl.DataFrame) -> pl.DataFrame:
    """The inverted-box policy: a box with x2 < x1 or y2 < y1 (an immature one-to-one head can
    output them) is a zero-area box at (x1, y1): it overlaps nothing. Matching and the mAP check
    both apply it through this function; the box table keeps the coordinates as output."""
    return boxes.with_columns(
        pl.max_horizontal("x1", "x2").alias("x2"), pl.max_horizontal("y1", "y2").alias("y2")
    )


def match_boxes(
    boxes: pl.DataFrame, gt: pl.DataFrame, *, iou: float, loc_iou: float
) -> pl.DataFrame:
    """Add ``correct``, ``iou``, ``ignore`` (at ``iou``) and ``loc_iou`` (at ``loc_iou``) to one head's boxes.

    Args:
        boxes: Captured boxes of one head on one split (the box table's capture columns).
        gt: That split's ground truth (``image_id``, ``cls``, ``x1``..``y2``, ``crowd``), as
            :attr:`det_calib.data.ground_truth.Split.gt`.
        iou: IoU a box needs with a same-class ground truth to be correct.
        loc_iou: IoU threshold of the second matching, whose IoU feeds the localisation-aware
            metrics (``loc_iou`` column: the IoU of the match, 0 if none).

    Inverted boxes (x2 < x1 or y2 < y1, which an immature one-to-one head can output) are matched
    as zero-area boxes (:func:`collapse_inverted`): they overlap nothing and count as incorrect.
    Their coordinates are kept.
    """
    inverted = (boxes["x2"] < boxes["x1"]) | (boxes["y2"] < boxes["y1"])
    if inverted.any():
        _logger.warning(
            "%d inverted box(es) (x2 < x1 or y2 < y1): counted as incorrect", inverted.sum()
        )
    at_iou, loc = _match_results(collapse_inverted(boxes), gt, (iou, loc_iou), max_dets=None)
    loc_target = np.where(loc.correct, loc.iou, 0.0)
    return _with_match(boxes, at_iou).with_columns(
        pl.Series("loc_iou", loc_target, dtype=pl.Float64)
    )

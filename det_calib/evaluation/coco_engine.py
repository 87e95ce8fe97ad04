"""COCO bbox mAP on the project's own vectorised matching: pycocotools' numbers, without its loops.

:func:`coco_eval` computes what ``pycocotools.cocoeval.COCOeval`` computes for ``iouType="bbox"``
(``evaluate()`` then ``accumulate()``): the ``precision`` array ``[T, R, K, A, M]`` (IoU
thresholds x 101 recall points x classes x area ranges x ``maxDets``) and ``recall`` ``[T, K, A,
M]``, ``-1`` where a class has no ground truth that counts. It follows pycocotools step by step,
only with arrays instead of one Python object per box:

* boxes are ``x, y, w, h`` as COCO stores them, and the IoU is pycocotools' ``bbIou`` operation by
  operation (``min(x + w, ...) - max(x, ...)``, the area as ``w * h``, a crowd box's union as the
  detection's area), so the IoUs are bit-identical;
* per (image, class), detections in descending score (a stable sort: ties keep input order), the
  first ``maxDets[-1]`` of them; ground truth *ignored* in an area range when it is crowd or its
  area lies outside the range, and visited after the rest;
* each detection, in score order, takes the still-free non-ignored ground truth of highest IoU at
  or above ``min(t, 1 - 1e-10)`` (the later one on equal IoU, as COCO's scan); failing that, the
  ignored ground truth of highest IoU (crowd ones can take any number), and is then ignored
  itself; an unmatched detection outside the area range is ignored too;
* per class, the detections of every image (the first ``m`` of each image for ``maxDets`` ``m``)
  in descending score, ties by image then by rank, cumulative true and false positives, the
  precision envelope, and the precision at the first point reaching each recall threshold.

The greedy assignment runs for all (image, class) groups at once, in rounds
(:mod:`det_calib.matching.one_to_one` explains the rule), and the per-class curves for all classes with one
sort. ``tests/evaluation/test_coco_engine.py`` checks the arrays against pycocotools (to 1e-12, in practice
equal) on the demo, the fixture and planted sets (crowd, ties, empty images, ``maxDets``, area
ranges). The run's mAP check scores with it by default (``--map-engine det_calib``; ``--map-engine
pycocotools`` runs COCOeval itself, :func:`det_calib.evaluation.map_check.coco_maps`), and ``calibration.json``
records which one scored (``eval.{head}.map_engine``); pycocotools stays the reference in the tests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np

from det_calib.matching.one_to_one import collapse_inverted, group_keys, last_best_per_run

__all__ = ["CocoEval"]

_log = logging.getLogger(__name__)

_IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
"""pycocotools' ``Params.iouThrs`` (computed the same way, so the same floats)."""
_RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
"""pycocotools' ``Params.recThrs``."""
_AREA_RANGES = ((0**2, 1e5**2), (0**2, 32**2), (32**2, 96**2), (96**2, 1e5**2))
"""pycocotools' ``Params.areaRng`` (all, small, medium, large), in px²."""

_T_CAP = 1 - 1e-10


@dataclass(frozen=True)
class CocoEval:
    """What ``COCOeval.accumulate`` leaves in ``eval``: ``precision`` (T, R, K, A, M), ``recall`` (T, K, A, M);
    with ``matches`` asked for, what ``evaluate`` leaves in ``evalImgs``' ``dtMatches`` for the first
    area range: ``(T, n)``, per IoU threshold and input detection, the input index of the ground truth
    it took (ignored ground truth included, as ``dtMatches``), -1 for none or a detection that takes
    no part (another class, past ``maxDets``)."""

    precision: np.ndarray
    recall: np.ndarray
    iou_thresholds: np.ndarray
    categories: np.ndarray
    max_dets: tuple[int, ...]
    matches: np.ndarray | None = None


def _pair_iou_xywh(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """pycocotools' ``bbIou`` for paired rows of (k, 4) ``x, y, w, h`` arrays."""
    w = np.minimum(d[:, 2] + d[:, 0], g[:, 2] + g[:, 0]) - np.maximum(d[:, 0], g[:, 0])
    h = np.minimum(d[:, 3] + d[:, 1], g[:, 3] + g[:, 1]) - np.maximum(d[:, 1], g[:, 1])
    inter = w * h
    da = d[:, 2] * d[:, 3]
    union = np.where(crowd, da, da + g[:, 2] * g[:, 3] - inter)
    out = np.zeros(len(d), dtype=np.float64)
    np.divide(inter, union, out=out, where=(w > 0) & (h > 0))
    return out


def _greedy(
    c_det: np.ndarray,
    c_gt: np.ndarray,
    c_iou: np.ndarray,
    reusable: np.ndarray,
    n_det: int,
    n_gt: int,
) -> np.ndarray:
    """COCO's greedy assignment over candidate pairs grouped by detection rank (ascending), each
    detection's candidates in the ground truth's scan order. A ``reusable`` (crowd) ground truth
    takes any number of detections. Returns, per detection rank, the ground truth it took or -1."""
    m_gt = np.full(n_det, -1, dtype=np.int64)
    taken = np.zeros(n_gt, dtype=bool)
    g_min = np.empty(n_gt, dtype=np.int64)
    while c_det.size:
        top = np.zeros(
            len(c_det), dtype=bool
        )  # each detection's best free candidate (last on ties)
        top[last_best_per_run(c_det, c_iou)] = True
        g_min[c_gt] = n_det
        np.minimum.at(g_min, c_gt, c_det)  # the earliest undecided detection wanting each one
        win = top & ((g_min[c_gt] == c_det) | reusable[c_gt])
        m_gt[c_det[win]] = c_gt[win]
        w_gt = c_gt[win]
        taken[w_gt[~reusable[w_gt]]] = True
        keep = ~taken[c_gt] & (m_gt[c_det] < 0)
        c_det, c_gt, c_iou = c_det[keep], c_gt[keep], c_iou[keep]
    return m_gt


def _cumulative_curves(tp: np.ndarray, fp: np.ndarray, npig: int, rec_thrs: np.ndarray):
    """accumulate's curves for one (class, area, maxDets): (T, nd) true/false positive flags ->
    (T, R) precision at the recall thresholds and (T,) final recall."""
    t_n = tp.shape[0]
    nd = tp.shape[1]
    if nd == 0:
        return np.zeros((t_n, len(rec_thrs))), np.zeros(t_n)
    tp_sum = np.cumsum(tp, axis=1).astype(float)
    fp_sum = np.cumsum(fp, axis=1).astype(float)
    rc = tp_sum / npig
    pr = tp_sum / (fp_sum + tp_sum + np.spacing(1))
    pr = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]  # the envelope, right to left
    q = np.zeros((t_n, len(rec_thrs)))
    for t in range(t_n):
        inds = np.searchsorted(rc[t], rec_thrs, side="left")
        ok = inds < nd
        q[t, ok] = pr[t, inds[ok]]
    return q, rc[:, -1]


def _coco_eval(
    det_image,
    det_xywh,
    det_score,
    det_cls,
    gt_image,
    gt_xywh,
    gt_cls,
    gt_crowd=None,
    gt_area=None,
    *,
    categories=None,
    max_dets=(1, 10, 100),
    area_ranges=_AREA_RANGES,
    iou_thresholds=_IOU_THRESHOLDS,
    matches: bool = False,
) -> CocoEval:
    """COCOeval (bbox) ``evaluate`` + ``accumulate`` on arrays.

    Args:
        det_image, det_cls: (n,) integer image id and class of each detection.
        det_xywh: (n, 4) float detection boxes ``x, y, w, h`` (as COCO results hold them).
        det_score: (n,) float scores.
        gt_image, gt_cls: (m,) integer image id and class of each ground-truth box.
        gt_xywh: (m, 4) ground-truth boxes ``x, y, w, h``.
        gt_crowd: (m,) bool ``iscrowd`` (default none).
        gt_area: (m,) the annotations' ``area`` (default ``w * h``), for the area ranges.
        categories: Class ids of the K axis (default: every class of ground truth or detections),
            sorted; detections of other classes take no part, as in COCOeval.
        max_dets: COCOeval's ``maxDets`` (its default ``[1, 10, 100]``).
        area_ranges: COCOeval's ``areaRng``.
        iou_thresholds: COCOeval's ``iouThrs``.
        matches: Also return each detection's match in the first area range (``dtMatches``: for a
            comparison with other COCO implementations, ``benchmarks/bench_coco_engines.py``).

    Returns:
        A :class:`CocoEval` with COCOeval's ``eval["precision"]`` and ``eval["recall"]``.
    """
    d_img, d_box, d_score, d_cls = _det_arrays(det_image, det_xywh, det_score, det_cls)
    g_img, g_box, g_cls, g_crowd, g_area = _gt_arrays(gt_image, gt_xywh, gt_cls, gt_crowd, gt_area)
    cats = (
        np.unique(np.concatenate([g_cls, d_cls]))
        if categories is None
        else np.unique(np.asarray(categories))
    )
    max_dets = tuple(int(m) for m in max_dets)
    t_thr = np.minimum(np.asarray(iou_thresholds, dtype=np.float64), _T_CAP)
    n_t, n_r, n_k, n_a, n_m = (
        len(t_thr),
        len(_RECALL_THRESHOLDS),
        len(cats),
        len(area_ranges),
        len(max_dets),
    )
    precision = -np.ones((n_t, n_r, n_k, n_a, n_m))
    recall = -np.ones((n_t, n_k, n_a, n_m))
    out = CocoEval(precision, recall, np.asarray(iou_thresholds, dtype=np.float64), cats, max_dets)
    n_input = len(d_img)
    d_in, g_in = np.flatnonzero(np.isin(d_cls, cats)), np.flatnonzero(np.isin(g_cls, cats))
    d_img, d_box, d_score, d_cls = _rows(d_in, d_img, d_box, d_score, d_cls)
    g_img, g_box, g_cls, g_crowd, g_area = _rows(g_in, g_img, g_box, g_cls, g_crowd, g_area)
    n, m = len(d_img), len(g_img)
    if n + m == 0:
        return replace(out, matches=np.full((n_t, n_input), -1)) if matches else out
    key_d, key_g = group_keys(d_img, d_cls, g_img, g_cls)
    order, rank = _ranked(key_d, d_score, max_dets[-1])
    n = len(order)
    d_in = d_in[order]
    d_img, d_box, d_score, d_cls = d_img[order], d_box[order], d_score[order], d_cls[order]
    d_area = d_box[:, 2] * d_box[:, 3]
    p_det, p_gt, p_iou = _group_pairs(key_d[order], key_g, d_box, g_box, g_crowd)
    del order, key_d, d_box  # at COCO scale: free them before the loops
    acc, seg_start, seg_end = _class_order(np.searchsorted(cats, d_cls), d_score, n_k)
    rank_acc = rank[acc]
    gk_idx = np.searchsorted(cats, g_cls)
    taken: list[np.ndarray] | None = [] if matches else None
    for a, (a_lo, a_hi) in enumerate(area_ranges):
        g_ig = g_crowd | (g_area < a_lo) | (g_area > a_hi)
        npig = np.bincount(gk_idx[~g_ig], minlength=n_k)
        outside = (d_area < a_lo) | (d_area > a_hi)
        tp, fp = _area_flags(
            p_det, p_gt, p_iou, g_ig, g_crowd, outside, t_thr, acc, m, taken if a == 0 else None
        )
        _fill_curves(out, a, tp, fp, npig, seg_start, seg_end, rank_acc)
    _log.debug(
        "coco_eval: %d detections, %d ground truth, %d pairs, %d classes", n, m, len(p_det), n_k
    )
    return (
        out if taken is None else replace(out, matches=_input_matches(taken, d_in, g_in, n_input))
    )


def _input_matches(
    taken: list[np.ndarray], d_in: np.ndarray, g_in: np.ndarray, n_input: int
) -> np.ndarray:
    """The ``(T, n_input)`` match table of :class:`CocoEval` from the per-threshold matches by rank
    (``d_in``, ``g_in``: the input index of each ranked detection and of each ground truth)."""
    out = np.full((len(taken), n_input), -1, dtype=np.int64)
    for t, m_gt in enumerate(taken):
        hit = m_gt >= 0
        out[t, d_in[hit]] = g_in[m_gt[hit]]
    return out


def _det_arrays(det_image, det_xywh, det_score, det_cls):
    """:func:`coco_eval`'s detections as flat int64/float64 arrays: image, ``(n, 4)`` box, score, class."""
    d_img = np.asarray(det_image, dtype=np.int64).ravel()
    d_box = np.asarray(det_xywh, dtype=np.float64).reshape(-1, 4)
    d_score = np.asarray(det_score, dtype=np.float64).ravel()
    d_cls = np.asarray(det_cls, dtype=np.int64).ravel()
    return d_img, d_box, d_score, d_cls


def _gt_arrays(gt_image, gt_xywh, gt_cls, gt_crowd, gt_area):
    """:func:`coco_eval`'s ground truth as flat arrays: image, ``(m, 4)`` box, class, crowd flag (default
    none) and area (default ``w * h``)."""
    g_img = np.asarray(gt_image, dtype=np.int64).ravel()
    g_box = np.asarray(gt_xywh, dtype=np.float64).reshape(-1, 4)
    g_cls = np.asarray(gt_cls, dtype=np.int64).ravel()
    g_crowd = (
        np.zeros(len(g_img), dtype=bool)
        if gt_crowd is None
        else np.asarray(gt_crowd, dtype=bool).ravel()
    )
    g_area = (
        g_box[:, 2] * g_box[:, 3]
        if gt_area is None
        else np.asarray(gt_area, dtype=np.float64).ravel()
    )
    return g_img, g_box, g_cls, g_crowd, g_area


def _rows(keep: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(x[keep] for x in arrays)


def _ranked(key_d: np.ndarray, d_score: np.ndarray, max_det: int) -> tuple[np.ndarray, np.ndarray]:
    """Detection rank: (group, -score, input order); returns the order of the first ``max_det`` of
    each group, which take part, and their rank within the group."""
    by_score = np.argsort(-d_score, kind="stable")
    order = by_score[np.argsort(key_d[by_score], kind="stable")]
    kd = key_d[order]
    rank = np.arange(len(order)) - np.searchsorted(kd, kd, side="left")
    inside = rank < max_det
    return order[inside], rank[inside]


def _group_pairs(
    kd: np.ndarray, key_g: np.ndarray, d_box: np.ndarray, g_box: np.ndarray, g_crowd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every same-group (detection, ground truth) pair, by detection rank (``kd``: the ranked
    detections' sorted group keys), ground truth in input order: ``(detection, ground truth, IoU)``."""
    g_order = np.argsort(key_g, kind="stable")
    kg = key_g[g_order]
    lo = np.searchsorted(kg, kd, side="left")
    cnt = np.searchsorted(kg, kd, side="right") - lo
    n_pairs = int(cnt.sum())
    p_det = np.repeat(np.arange(len(kd), dtype=np.int64), cnt)
    p_gt = g_order[np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(n_pairs)]
    return p_det, p_gt, _pair_iou_xywh(d_box[p_det], g_box[p_gt], g_crowd[p_gt])


def _class_order(
    k_idx: np.ndarray, d_score: np.ndarray, n_k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class: the detections of all images in descending score, ties by image, then by rank;
    returns that order and where each class's segment starts and ends in it.

    The detections come in group order, (image, class, rank) (:func:`_ranked`'s), so two stable sorts
    give ``np.lexsort((rank, d_img, -d_score, k_idx))``: by descending score (ties keep the group
    order: by image, then rank, within a class), then by class (a 16-bit key where the classes allow:
    numpy sorts it by radix), half the time of the four-key sort."""
    by_score = np.argsort(-d_score, kind="stable")
    k = k_idx.astype(np.int16) if n_k <= np.iinfo(np.int16).max else k_idx
    acc = by_score[np.argsort(k[by_score], kind="stable")]
    seg_start = np.searchsorted(k_idx[acc], np.arange(n_k), side="left")
    seg_end = np.searchsorted(k_idx[acc], np.arange(n_k), side="right")
    return acc, seg_start, seg_end


def _area_flags(
    p_det, p_gt, p_iou, g_ig, g_crowd, outside, t_thr, acc, m, taken=None
) -> tuple[np.ndarray, np.ndarray]:
    """evaluate's matching in one area range (``g_ig``: ignored ground truth, ``outside``: detections
    outside the range): ``(T, n)`` true and false positive flags, in the per-class order ``acc``;
    each threshold's ground truth taken per detection rank (-1: none) appended to ``taken`` if
    given."""
    n = len(acc)
    tp = np.zeros((len(t_thr), n), dtype=bool)
    fp = np.zeros((len(t_thr), n), dtype=bool)
    for t, thr in enumerate(t_thr):
        ok = p_iou >= thr
        first = ok & ~g_ig[p_gt]
        m1 = _greedy(p_det[first], p_gt[first], p_iou[first], g_crowd, n, m)
        second = ok & g_ig[p_gt] & (m1[p_det] < 0)
        m2 = _greedy(p_det[second], p_gt[second], p_iou[second], g_crowd, n, m)
        matched = m1 >= 0
        if taken is not None:
            taken.append(np.where(matched, m1, m2))
        ignored = (m2 >= 0) | (~matched & outside)
        tp[t] = matched[acc]
        fp[t] = (~matched & ~ignored)[acc]
    return tp, fp


def _fill_curves(
    out: CocoEval,
    a: int,
    tp: np.ndarray,
    fp: np.ndarray,
    npig: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    rank_acc: np.ndarray,
) -> None:
    """accumulate for area range ``a``: every class's precision and recall at each ``maxDets``, from
    the ``(T, n)`` flags in per-class order; a class without ground truth that counts stays -1."""
    for k in range(len(npig)):
        if npig[k] == 0:
            continue
        s0, s1 = seg_start[k], seg_end[k]
        for mi, md in enumerate(out.max_dets):
            sel = rank_acc[s0:s1] < md
            q, rc = _cumulative_curves(
                tp[:, s0:s1][:, sel], fp[:, s0:s1][:, sel], int(npig[k]), _RECALL_THRESHOLDS
            )
            out.precision[:, :, k, a, mi] = q
            out.recall[:, k, a, mi] = rc


def _map_figures(ev: CocoEval, *, area: int = 0, max_det: int = -1) -> dict[str, float]:
    """mAP50-95, mAP50 and mAP75 of one area range and ``maxDets`` entry: the mean precision over
    IoU thresholds, recall points and classes where defined (-1 where none is), as
    :func:`det_calib.evaluation.map_check.coco_map` reads COCOeval's array."""
    prec = ev.precision[:, :, :, area, max_det]

    def mean_valid(x: np.ndarray) -> float:
        v = x[x > -1]
        return float(v.mean()) if v.size else -1.0

    thr = ev.iou_thresholds
    return {
        "map50_95": mean_valid(prec),
        "map50": mean_valid(prec[np.isclose(thr, 0.5)]),
        "map75": mean_valid(prec[np.isclose(thr, 0.75)]),
    }


def table_maps(
    boxes, gt, scores: list[np.ndarray], *, max_dets: int = 300
) -> list[dict[str, float]]:
    """:func:`det_calib.evaluation.map_check.coco_maps` on this engine: one head's box table and a split's
    ground-truth table, one result per score vector, area range "all", ``maxDets=[max_dets]``.

    The boxes are given to the engine as :func:`det_calib.evaluation.map_check.coco_maps` gives them to
    pycocotools: inverted boxes collapsed (:func:`det_calib.matching.one_to_one.collapse_inverted`), ``x, y,
    x2 - x, y2 - y``, the classes of ground truth and boxes as categories.
    """

    b = collapse_inverted(boxes)
    x1, y1 = b["x1"].to_numpy(), b["y1"].to_numpy()
    d_xywh = np.column_stack([x1, y1, b["x2"].to_numpy() - x1, b["y2"].to_numpy() - y1])
    gx1, gy1 = gt["x1"].to_numpy(), gt["y1"].to_numpy()
    g_xywh = np.column_stack([gx1, gy1, gt["x2"].to_numpy() - gx1, gt["y2"].to_numpy() - gy1])
    d_img, d_cls = b["image_id"].to_numpy(), b["cls"].to_numpy()
    g_cls = gt["cls"].to_numpy()
    cats = np.unique(np.concatenate([g_cls.astype(np.int64), d_cls.astype(np.int64)]))
    out = []
    for sc in scores:
        if len(d_img) == 0:
            out.append(
                {"map50_95": 0.0, "map50": 0.0, "map75": 0.0}
            )  # as verify's pycocotools path
            continue
        ev = _coco_eval(
            d_img,
            d_xywh,
            np.asarray(sc, dtype=np.float64),
            d_cls,
            gt["image_id"].to_numpy(),
            g_xywh,
            g_cls,
            gt["crowd"].to_numpy(),
            categories=cats,
            max_dets=(max_dets,),
            area_ranges=_AREA_RANGES[:1],
        )
        out.append(_map_figures(ev))
    return out

"""Label detections correct / incorrect by one-to-one *mask* IoU, as COCO's ``segm`` protocol does.

The rule is :mod:`det_calib.matching.one_to_one`'s (the same code: :func:`greedy_match`), with
the IoU of two instance masks in place of two boxes; it equals pycocotools'
``COCOeval(iouType="segm")`` ``evaluateImg`` ``dtMatches`` / ``dtIgnore`` at one IoU threshold,
area range "all":

* same (image, class) only; detections in descending score, ties in input order;
* each takes the free non-crowd GT mask of highest IoU at ``IoU >= min(t, 1 - 1e-10)``
  (IoU ties: the later GT);
* a detection with no free non-crowd GT may fall on a crowd region, whose IoU is
  ``intersection / area(detection mask)``; it is then ignored (neither true nor false positive),
  and a crowd region absorbs any number of detections. (COCO ignores a GT exactly when it is a
  crowd in area range "all": ``_prepare`` sets ``ignore = iscrowd``.)

Masks are pycocotools RLEs (``{"size": [h, w], "counts": ...}``) at the image's size; the
IoU is ``pycocotools.mask.iou``, computed once per (image, class) group on its
(detections x GTs) matrix.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from det_calib.errors import InputError
from det_calib.matching.one_to_one import MatchResult, checked_ids, greedy_match

__all__ = ["match_boxes_by_masks", "match_masks"]


def _rles(x, name: str, n: int | None = None, ref: str | None = None) -> list[dict]:
    """Checked RLE dicts (compressed ``counts`` as bytes; uncompressed lists are compressed)."""
    from pycocotools import mask as mask_utils

    if isinstance(x, dict) or not hasattr(x, "__len__"):
        raise InputError(
            f"Expected argument `{name}` to be a list of RLE dicts, but got {type(x).__name__}"
        )
    out = list(x)
    if n is not None and len(out) != n:
        raise InputError(
            f"Expected argument `{name}` to have the length of `{ref}` ({n}), but got {len(out)}"
        )
    for k, r in enumerate(out):
        if not isinstance(r, dict) or "size" not in r or "counts" not in r:
            raise InputError(
                f"Expected argument `{name}` to hold RLE dicts with `size` and `counts`, but item "
                f"{k} "
                f"is {type(r).__name__}"
            )
        counts = r["counts"]
        if isinstance(counts, list):
            h, w = r["size"]
            out[k] = mask_utils.frPyObjects(r, int(h), int(w))
        elif isinstance(counts, str):
            out[k] = {"size": list(r["size"]), "counts": counts.encode()}
        elif not isinstance(counts, bytes):
            raise InputError(
                f"Expected argument `{name}` item {k} `counts` to be bytes, str or a list of runs, "
                f"but got {type(counts).__name__}"
            )
    return out


def _mask_iou(a, b, *, crowd=None) -> np.ndarray:
    """Pairwise IoU of two lists of RLE masks (all of one size).

    Args:
        a: n RLEs (the detections when ``crowd`` is given).
        b: m RLEs.
        crowd: Optional (m,) bool: where true, the IoU with that mask of ``b`` is
            ``intersection / area(a)`` (pycocotools' ``iscrowd`` convention).

    Returns:
        (n, m) float64 IoU matrix.

    >>> from pycocotools import mask as mask_utils
    >>> m = np.zeros((4, 4), np.uint8, order="F"); m[:2, :] = 1
    >>> full = mask_utils.encode(np.ones((4, 4), np.uint8, order="F"))
    >>> _mask_iou([mask_utils.encode(m)], [full]).tolist()
    [[0.5]]
    """
    from pycocotools import mask as mask_utils

    a, b = _rles(a, "a"), _rles(b, "b")
    c = np.zeros(len(b), dtype=bool) if crowd is None else np.asarray(crowd, dtype=bool).reshape(-1)
    if len(c) != len(b):
        raise InputError(
            f"Expected argument `crowd` to have the length of `b` ({len(b)}), but got {len(c)}"
        )
    if not a or not b:
        return np.zeros((len(a), len(b)), dtype=np.float64)
    sizes = {tuple(r["size"]) for r in a + b}
    if len(sizes) > 1:
        raise InputError(f"Expected masks of one size, but got sizes {sorted(sizes)}")
    return np.asarray(mask_utils.iou(a, b, c.astype(np.uint8).tolist()), dtype=np.float64).reshape(
        len(a), len(b)
    )


def _mask_pair_iou(d_img: np.ndarray, d_cls: np.ndarray, d_rles: list[dict], g_rles: list[dict]):
    """The ``pair_iou`` of :func:`~det_calib.matching.one_to_one.greedy_match` for masks: pycocotools' mask IoU
    of each (image, class) group's detections x GTs, one call per group."""
    from pycocotools import mask as mask_utils

    def pair_iou(p_det: np.ndarray, p_gt: np.ndarray, p_crowd: np.ndarray) -> np.ndarray:
        out = np.empty(len(p_det), dtype=np.float64)
        key_img, key_cls = d_img[p_det], d_cls[p_det]
        new_group = np.r_[True, (key_img[1:] != key_img[:-1]) | (key_cls[1:] != key_cls[:-1])]
        starts = np.r_[np.flatnonzero(new_group), len(p_det)]
        for lo, hi in zip(starts[:-1], starts[1:]):
            # the group's pairs are its (detections x GTs) matrix, row-major: ng GTs per detection
            ng = int(np.searchsorted(p_det[lo:hi] != p_det[lo], True))
            dets, gts = p_det[lo:hi:ng], p_gt[lo : lo + ng]
            dr, gr = [d_rles[i] for i in dets], [g_rles[j] for j in gts]
            sizes = {tuple(r["size"]) for r in dr + gr}
            if len(sizes) > 1:
                raise InputError(
                    f"image {int(key_img[lo])}: detection and GT masks of different sizes "
                    f"{sorted(sizes)} (masks must be at the image's size)"
                )
            iou = mask_utils.iou(dr, gr, p_crowd[lo : lo + ng].astype(np.uint8).tolist())
            out[lo:hi] = np.asarray(iou, dtype=np.float64).reshape(-1)
        return out

    return pair_iou


def match_masks(
    det_image,
    det_cls,
    det_score,
    det_rles,
    gt_image,
    gt_cls,
    gt_rles,
    gt_crowd=None,
    *,
    iou_threshold: float = 0.5,
    max_dets: int | None = None,
) -> MatchResult:
    """Match detection masks one-to-one to same-class GT masks, exactly as COCOeval ``segm`` does.

    Args:
        det_image: (n,) int image id of each detection.
        det_cls: (n,) int predicted class.
        det_score: (n,) float score; only its order within (image, class) matters.
        det_rles: n RLE dicts, each at its image's size.
        gt_image: (m,) int image id of each GT.
        gt_cls: (m,) int GT class.
        gt_rles: m RLE dicts.
        gt_crowd: (m,) bool crowd flag (COCO ``iscrowd``), or None.
        iou_threshold: Match when ``mask IoU >= min(iou_threshold, 1 - 1e-10)``; in [0, 1].
        max_dets: If given, only the top ``max_dets`` detections by score of each (image, class)
            take part (COCO ``maxDets``).

    Returns:
        A :class:`~det_calib.matching.one_to_one.MatchResult` in the input order of the
        detections (``iou``: the mask IoU of the match, else the best mask IoU with a same-class
        non-crowd GT).

    Raises:
        InputError: Lengths disagree, non-integer ids or classes, NaN scores, malformed RLEs, a
            detection and a GT of one image with masks of different sizes, or an option out of range.

    >>> from pycocotools import mask as mask_utils
    >>> m = np.zeros((8, 8), np.uint8, order="F"); m[:4, :4] = 1
    >>> r = mask_utils.encode(m)
    >>> match_masks([0, 0], [1, 1], [0.9, 0.8], [r, r], [0], [1], [r]).correct.tolist()
    [True, False]
    """

    d_img, d_cls, d_score, g_img, g_cls, g_crowd = checked_ids(
        det_image, det_cls, det_score, gt_image, gt_cls, gt_crowd
    )
    d_rles = _rles(det_rles, "det_rles", len(d_img), "det_image")
    g_rles = _rles(gt_rles, "gt_rles", len(g_img), "gt_image")
    pair_iou = _mask_pair_iou(d_img, d_cls, d_rles, g_rles)
    return greedy_match(
        d_img,
        d_cls,
        d_score,
        g_img,
        g_cls,
        g_crowd,
        pair_iou=pair_iou,
        iou_threshold=iou_threshold,
        max_dets=max_dets,
    )


def _match_mask_table(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    *,
    iou_threshold: float = 0.5,
    max_dets: int | None = None,
    column: str = "segm",
) -> pl.DataFrame:
    """Fill ``correct``, ``iou`` and ``ignore`` of one head's box table by mask IoU.

    Args:
        boxes: Box table with ``image_id``, ``cls``, ``conf`` and ``column`` (compressed RLE counts
            of each box's mask at its image's size).
        gt: Ground truth with ``image_id``, ``cls``, ``column`` (as
            :func:`det_calib.tasks.segment.labels.load_segment_split` gives it) and optionally ``crowd``.
        sizes: (n_images, 2) ``width, height`` per ``image_id``.
        iou_threshold: See :func:`match_masks`.
        max_dets: See :func:`match_masks`.
        column: Name of the RLE counts column in both tables.

    Returns:
        ``boxes`` with ``correct`` (bool), ``iou`` (float64, mask IoU) and ``ignore`` (bool).

    Raises:
        InputError: A column is missing or a mask is null (a GT without a mask: match by boxes).
    """
    for df, need, what in (
        (boxes, ("image_id", "cls", "conf", column), "box table"),
        (gt, ("image_id", "cls", column), "GT table"),
    ):
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise InputError(f"{what} is missing columns {missing}; has {df.columns}")
        if df[column].null_count():
            raise InputError(
                f"{what} column `{column}` has {df[column].null_count()} rows without a mask"
            )
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)

    def rles(df: pl.DataFrame) -> list[dict]:
        return [
            {"size": [int(sizes[i, 1]), int(sizes[i, 0])], "counts": c}
            for i, c in zip(df["image_id"].to_list(), df[column].to_list())
        ]

    r = match_masks(
        boxes["image_id"].to_numpy(),
        boxes["cls"].to_numpy(),
        boxes["conf"].to_numpy(),
        rles(boxes),
        gt["image_id"].to_numpy(),
        gt["cls"].to_numpy(),
        rles(gt),
        gt["crowd"].to_numpy() if "crowd" in gt.columns else None,
        iou_threshold=iou_threshold,
        max_dets=max_dets,
    )
    return boxes.with_columns(
        pl.Series("correct", r.correct, dtype=pl.Boolean),
        pl.Series("iou", r.iou, dtype=pl.Float64),
        pl.Series("ignore", r.ignore, dtype=pl.Boolean),
    )


def match_boxes_by_masks(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    *,
    iou: float,
    loc_iou: float,
    column: str = "segm",
) -> pl.DataFrame:
    """:func:`det_calib.matching.one_to_one.match_boxes` by mask IoU: ``correct``, ``iou``, ``ignore``
    (at ``iou``) and ``loc_iou`` (the mask IoU of the match at ``loc_iou``, 0 if none).

    Args:
        boxes: One head's boxes with a ``column`` of RLE counts (see :func:`match_mask_table`).
        gt: Ground truth with masks (:func:`det_calib.tasks.segment.labels.load_segment_split`).
        sizes: (n_images, 2) ``width, height``.
        iou: Mask IoU a box needs with a same-class ground truth to be correct.
        loc_iou: Threshold of the second matching, whose IoU feeds the localisation-aware metrics.
    """
    at_iou = _match_mask_table(boxes, gt, sizes, iou_threshold=iou, column=column)
    loc = _match_mask_table(boxes, gt, sizes, iou_threshold=loc_iou, column=column)
    loc_target = np.where(loc["correct"].to_numpy(), loc["iou"].to_numpy(), 0.0)
    return boxes.with_columns(
        at_iou["correct"],
        at_iou["iou"],
        at_iou["ignore"],
        pl.Series("loc_iou", loc_target, dtype=pl.Float64),
    )

"""Calibration at the operating point: the boxes a user keeps at a conf threshold.

:func:`kept_ece` is the ECE of the boxes with ``conf > threshold`` (Ultralytics keeps
``conf > thres``, strictly). :func:`laece0` is the localisation-aware ECE with the exact
conventions of the reference toolkit of Kuzucu et al. (ECCV 2024), see ``laece0``'s docstring.
The all-box figures (:func:`det_calib.metrics.ece` on every box down to the capture floor)
remain available; name them "all-box".
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np

from det_calib.data.box_view import kept_mask
from det_calib.errors import InputError
from det_calib.matching.one_to_one import match_detections
from det_calib.metrics.binning import uniform_index
from det_calib.metrics.bootstrap_tables import csr_product, csr_table
from det_calib.metrics.calibration import ece, prepare_ece

__all__ = ["ECEFloor", "LaECE0Targets", "kept_ece", "kept_ece_floor", "kept_laece_floor", "laece0"]


def kept_ece(
    conf: Any, correct: Any, *, threshold: float, n_bins: int = 15, weights: Any = None
) -> float:
    """ECE (equal-width bins, see :func:`det_calib.metrics.ece`) of the boxes with ``conf > threshold``.

    Returns nan when no box is kept.

    >>> round(kept_ece([0.1, 0.3, 0.9], [0, 0, 1], threshold=0.25, n_bins=10), 6)  # (0.3 + 0.1) / 2
    0.2
    """
    c, y, keep = _kept(conf, correct, threshold)
    if not keep.any():
        return float("nan")
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[keep]
    return ece(c[keep], y[keep], n_bins=n_bins, weights=w)


def _kept(conf: Any, correct: Any, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = np.asarray(conf, dtype=np.float64)
    y = np.asarray(correct)
    if c.shape != y.shape or c.ndim != 1:
        raise InputError(
            f"Expected arguments `conf` and `correct` of the same shape (n,), but got {c.shape} "
            f"and {y.shape}"
        )
    return c, y, kept_mask(c, float(threshold))


def _kept_ece_prepare(
    img: np.ndarray, n_img: int, conf: Any, correct: Any, *, threshold: float, n_bins: int = 15
) -> Any:
    """Bootstrap replicates of :func:`kept_ece` (see :func:`det_calib.metrics.bootstrap_ci`): the
    kept boxes are found and checked once, then every replicate is ECE's per-image table product."""
    c, y, keep = _kept(conf, correct, threshold)
    if not keep.any():
        return lambda mult: np.full(mult.shape[0], np.nan)
    return prepare_ece(img[keep], n_img, c[keep], y[keep], n_bins=n_bins)


kept_ece._bootstrap_prepare = _kept_ece_prepare  # type: ignore[attr-defined]


class ECEFloor(NamedTuple):
    """The calibration error (kept-set ECE, :func:`kept_ece_floor`; LaECE_0, :func:`kept_laece_floor`)
    a perfectly calibrated detector would score on a set of boxes: mean and 95% range."""

    mean: float
    low: float
    high: float


def kept_ece_floor(
    conf: Any, *, threshold: float, n_bins: int = 15, n_draws: int = 200, seed: int = 0
) -> ECEFloor | None:
    """The sampling floor of the kept-set ECE: what a perfectly calibrated detector would score.

    The boxes kept at ``threshold`` (``conf > threshold``) keep their confidences; their labels
    are drawn ``n_draws`` times as ``Bernoulli(conf)``, i.e. from a detector whose every
    confidence is exactly its probability of being correct, and the kept-set ECE (equal-width
    bins, as :func:`kept_ece`) is computed for each draw. A measured ECE inside the range is at
    the floor that the number of kept boxes allows: no calibrator can be shown to do better on
    this set.

    Args:
        conf: ``(n,)`` confidences (the scores whose ECE is reported).
        threshold: Conf threshold; boxes with ``conf > threshold`` are kept.
        n_bins: Bins of the ECE.
        n_draws: Monte-Carlo draws.
        seed: Seed of the draws (fixed: the same boxes give the same floor).

    Returns:
        ``ECEFloor(mean, low, high)`` (2.5 and 97.5 percentiles of the draws), or None when no box is kept.

    >>> f = kept_ece_floor(np.full(10_000, 0.5), threshold=0.25)
    >>> 0.0 < f.low < f.mean < f.high < 0.02  # |mean of 10,000 fair coins - 0.5|
    True
    """
    c = np.asarray(conf, dtype=np.float64)
    if c.ndim != 1:
        raise InputError(f"Expected argument `conf` of shape (n,), but got shape {c.shape}")
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 2:
        raise InputError(f"Expected argument `n_draws` to be an integer >= 2, but got {n_draws!r}")
    c = c[kept_mask(c, float(threshold))]
    if c.size == 0:
        return None
    idx = uniform_index(c, n_bins)
    rng = np.random.default_rng(seed)
    # per bin: |sum_i (conf_i - y_i)| / n summed over bins; one (draws, bins) table of label sums
    onehot = np.zeros((c.size, n_bins))
    onehot[np.arange(c.size), idx] = 1.0
    s_conf = c @ onehot
    # draws in blocks of at most ~4M labels (32 MiB): the same stream of uniforms as one (n_draws, n)
    # call, and the per-bin label counts are exact integers, so the result does not depend on the block
    rows = max(1, (1 << 22) // c.size)
    # the label counts in float32 where every count is below 2**24 (exact, as in float64: whole
    # numbers summed), half the bytes to convert and multiply
    exact = np.float32 if c.size < 1 << 24 else np.float64
    hot = onehot.astype(exact)
    vals = np.concatenate(
        [
            np.abs(
                ((rng.random((min(rows, int(n_draws) - start), c.size)) < c).astype(exact) @ hot)
                - s_conf
            ).sum(axis=1)
            / c.size
            for start in range(0, int(n_draws), rows)
        ]
    )
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return ECEFloor(float(vals.mean()), float(lo), float(hi))


def _reference_bin_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each conf with the reference toolkit's bins: ``[0, 1/M]``, then ``(m/M, (m+1)/M]``.

    >>> _reference_bin_index(np.array([0.0, 0.1, 0.10001, 1.0]), 10).tolist()
    [0, 0, 1, 9]
    """
    idx = np.ceil(np.asarray(conf, dtype=np.float64) * n_bins).astype(np.int64) - 1
    return np.clip(idx, 0, n_bins - 1)


def _top_k_per_image_class(
    image: np.ndarray, cls: np.ndarray, score: np.ndarray, k: int
) -> np.ndarray:
    """Mask of the ``k`` highest-scoring boxes of each (image, class) (COCO ``maxDets``; stable ties)."""
    n = score.shape[0]
    order = np.lexsort((-score, *_pair_key(image, cls)))
    key_i, key_c = image[order], cls[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (key_i[1:] != key_i[:-1]) | (key_c[1:] != key_c[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    rank = np.arange(n) - start
    keep = np.zeros(n, dtype=bool)
    keep[order] = rank < k
    return keep


def _pair_key(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, ...]:
    """The sort keys of (``major``, ``minor``) pairs for :func:`numpy.lexsort` (the last sorts first):
    one int64 key ordered as the pairs where their ranges allow (a key fewer to sort by: about a third
    of the sort's time), else the two."""
    if major.size == 0:
        return minor, major
    lo_a, lo_b = int(major.min()), int(minor.min())
    span_b = int(minor.max()) - lo_b + 1
    if (int(major.max()) - lo_a + 1) * span_b >= 2**62:
        return minor, major
    return ((major.astype(np.int64) - lo_a) * span_b + (minor.astype(np.int64) - lo_b),)


def laece0(
    det_image: Any,
    det_xyxy: Any,
    det_cls: Any,
    conf: Any,
    gt_image: Any,
    gt_xyxy: Any,
    gt_cls: Any,
    gt_crowd: Any = None,
    *,
    threshold: float,
    tau: float = 0.0,
    max_dets: int = 100,
    n_bins: int = 25,
) -> float:
    """LaECE at an operating threshold, with the reference toolkit's conventions.

    1. Keep detections with ``conf > threshold``; then only the ``max_dets`` highest-scoring of
       each (image, class) (COCO ``maxDets``); the rest are not scored at all.
    2. Match them COCO-style (greedy by score, one-to-one, same class) at IoU ``>= tau``
       (``tau = 0``: LaECE_0, a box takes the best still-free same-class GT whatever its IoU);
       detections matched to crowd GT are dropped. Target: the IoU of a match, 0 otherwise.
    3. Per class, bins ``[0, 1/M]`` then ``(m/M, (m+1)/M]``:
       ``LaECE_c = sum_m |B_m| / N_c * |mean conf(B_m) - mean target(B_m)|``.
    4. Average over the classes that have ground truth (non-crowd) **and** at least one scored
       detection; a class whose LaECE_c is exactly 0 is dropped from the mean (the toolkit turns
       it into nan).

    Args:
        det_image, det_xyxy, det_cls, conf: ``(n,)``, ``(n, 4)``, ``(n,)``, ``(n,)`` detections.
        gt_image, gt_xyxy, gt_cls, gt_crowd: ``(m,)``, ``(m, 4)``, ``(m,)``, optional ``(m,)`` GT.
        threshold: Operating conf threshold.
        tau: Matching IoU threshold (0.0: LaECE_0; SAOD used 0.1).
        max_dets: Per image and class.
        n_bins: M (25 in the papers).

    Returns:
        The class-averaged LaECE; nan when no class qualifies.
    """
    di, dx, dc, s = _scored_detections(
        det_image, det_xyxy, det_cls, conf, threshold=threshold, max_dets=max_dets
    )
    gi = np.asarray(gt_image, dtype=np.int64)
    gx = np.asarray(gt_xyxy, dtype=np.float64).reshape(-1, 4)
    gc = np.asarray(gt_cls, dtype=np.int64)
    crowd = (
        np.zeros(gi.shape[0], dtype=bool) if gt_crowd is None else np.asarray(gt_crowd, dtype=bool)
    )
    if s.size == 0:
        return float("nan")
    # inverted boxes (an immature one-to-one head emits them) match as zero-area boxes, as in the pipeline
    dx = np.column_stack(
        [dx[:, 0], dx[:, 1], np.maximum(dx[:, 0], dx[:, 2]), np.maximum(dx[:, 1], dx[:, 3])]
    )
    r = match_detections(di, dx, dc, s, gi, gx, gc, crowd, iou_threshold=tau)
    use = ~r.ignore
    c, k = s[use], dc[use]
    t = np.where(r.correct[use], r.iou[use], 0.0)
    classes = np.intersect1d(np.unique(gc[~crowd]), np.unique(k))
    return _class_averaged_laece(c, k, t, classes, n_bins)


def _scored_detections(det_image, det_xyxy, det_cls, conf, *, threshold: float, max_dets: int):
    """Step 1 of :func:`laece0`: the detections with ``conf > threshold``, then the ``max_dets``
    highest-scoring of each (image, class); returns their ``(image, xyxy, class, conf)``."""
    di = np.asarray(det_image, dtype=np.int64)
    dx = np.asarray(det_xyxy, dtype=np.float64).reshape(-1, 4)
    dc = np.asarray(det_cls, dtype=np.int64)
    s = np.asarray(conf, dtype=np.float64)
    keep = kept_mask(s, float(threshold))
    di, dx, dc, s = di[keep], dx[keep], dc[keep], s[keep]
    top = _top_k_per_image_class(di, dc, s, int(max_dets))
    return di[top], dx[top], dc[top], s[top]


def _class_averaged_laece(
    c: np.ndarray, k: np.ndarray, t: np.ndarray, classes: np.ndarray, n_bins: int
) -> float:
    """Steps 3 and 4 of :func:`laece0`: each class's binned gap between conf ``c`` and target ``t``,
    averaged over ``classes`` with a class whose LaECE_c is exactly 0 left out; nan when none is left."""
    vals = []
    for cid in classes:
        m = k == cid
        b = _reference_bin_index(c[m], n_bins)
        cnt = np.bincount(b, minlength=n_bins)
        gap = np.abs(
            np.bincount(b, weights=c[m], minlength=n_bins)
            - np.bincount(b, weights=t[m], minlength=n_bins)
        )
        v = float(gap.sum() / cnt.sum())
        if v != 0.0:
            vals.append(v)
    return float(np.mean(vals)) if vals else float("nan")


class LaECE0Targets:
    """The matching behind :func:`laece0`, computed once, for any score that keeps the ranking within
    each (image, class).

    The reference matching is greedy by score within (image, class), and the kept set at a
    threshold (and its top ``max_dets`` per image and class) is the head of that order. A
    calibrator that is monotone per class (every one of :mod:`det_calib.selection.cross_validation`) keeps that
    order, so the matches of the kept boxes are those of the raw scores: match once with the raw
    scores, then any calibrated score and threshold is a binned sum (and a bootstrap replicate a
    weighted one). :meth:`laece` equals :func:`laece0` on the same boxes and calibrated scores.

    Attributes:
        use: ``(n,)`` bool, the box is scored (top ``max_dets`` of its image and class by raw
            score, not matched to a crowd box).
        target: ``(n,)`` IoU of the box's match at ``tau``, 0 when unmatched.
        gt_classes: Classes with (non-crowd) ground truth in the split.
    """

    def __init__(
        self,
        det_image: Any,
        det_xyxy: Any,
        det_cls: Any,
        raw_score: Any,
        gt_image: Any,
        gt_xyxy: Any,
        gt_cls: Any,
        gt_crowd: Any = None,
        *,
        tau: float = 0.0,
        max_dets: int = 100,
    ):
        di = np.asarray(det_image, dtype=np.int64)
        dx = np.asarray(det_xyxy, dtype=np.float64).reshape(-1, 4)
        dc = np.asarray(det_cls, dtype=np.int64)
        s = np.asarray(raw_score, dtype=np.float64)
        gc = np.asarray(gt_cls, dtype=np.int64)
        crowd = (
            np.zeros(gc.shape[0], dtype=bool)
            if gt_crowd is None
            else np.asarray(gt_crowd, dtype=bool)
        )
        top = _top_k_per_image_class(di, dc, s, int(max_dets))
        dx = np.column_stack(
            [dx[:, 0], dx[:, 1], np.maximum(dx[:, 0], dx[:, 2]), np.maximum(dx[:, 1], dx[:, 3])]
        )
        r = match_detections(
            di,
            dx,
            dc,
            s,
            np.asarray(gt_image, dtype=np.int64),
            np.asarray(gt_xyxy, dtype=np.float64).reshape(-1, 4),
            gc,
            crowd,
            iou_threshold=tau,
        )
        self.use = top & ~r.ignore
        self.target = np.where(r.correct, r.iou, 0.0)
        self.cls = dc
        self.gt_classes = np.unique(gc[~crowd])

    def within(self, mask: Any) -> LaECE0Targets:
        """The same matching, scoring only the boxes ``mask`` ((n,) bool) selects: a box keeps the
        match it has among every box (a size bin of :mod:`det_calib.metrics.size_bins`)."""
        out = copy.copy(self)
        out.use = self.use & np.asarray(mask, dtype=bool)
        return out

    def laece(self, conf: Any, *, threshold: float, n_bins: int = 25, weights: Any = None) -> float:
        """LaECE_0 of the boxes with ``conf > threshold`` (``conf``: (n,), the same boxes, any
        per-class monotone map of the raw score); ``weights`` (n,) for bootstrap replicates."""
        return _laece_binned(
            np.asarray(conf, dtype=np.float64),
            self.target,
            self.cls,
            self.use,
            self.gt_classes,
            threshold,
            n_bins,
            weights,
        )

    def statistic(self, *, threshold: float, n_bins: int = 25) -> Any:
        """``f(conf, weights=None)`` for :func:`det_calib.metrics.bootstrap_ci` (pass the boxes' image ids)."""

        def laece0_of(conf: np.ndarray, weights: np.ndarray | None = None) -> float:
            return self.laece(conf, threshold=threshold, n_bins=n_bins, weights=weights)

        def prepare(img: np.ndarray, n_img: int, conf: np.ndarray) -> Any:
            # the kept boxes, their class and bin do not depend on the draws: found once
            c = np.asarray(conf, dtype=np.float64)
            keep, cells = _kept_cells(c, self.cls, self.use, self.gt_classes, threshold, n_bins)
            if cells is None:
                return lambda mult: np.full(mult.shape[0], np.nan)
            return _laece_replicates(cells, c[keep], self.target[keep], img[keep], n_img)

        laece0_of._bootstrap_prepare = prepare  # type: ignore[attr-defined]
        return laece0_of


def _laece_binned(c, t, k, use, gt_classes, threshold, n_bins, weights) -> float:
    keep, weighted = _laece_binned_prepare(c, t, k, use, gt_classes, threshold, n_bins)
    if weighted is None:
        return float("nan")
    return weighted(
        np.ones(int(keep.sum())) if weights is None else np.asarray(weights, dtype=np.float64)[keep]
    )


def _kept_cells(c, k, use, gt_classes, threshold, n_bins) -> tuple[np.ndarray, _KeptCells | None]:
    """The scored boxes kept at ``threshold`` ((n,) bool) and their (class, bin) cells (None: none kept)."""
    keep = use & kept_mask(c, float(threshold))
    return keep, (_KeptCells.of(c[keep], k[keep], gt_classes, n_bins) if keep.any() else None)


def _laece_binned_prepare(c, t, k, use, gt_classes, threshold, n_bins):
    """``(keep, weighted)``: the scored boxes at ``threshold`` ((n,) bool) and ``w -> LaECE_0`` of
    them with (kept,) weights ``w``; ``weighted`` is None when no box is kept."""
    keep, cells = _kept_cells(c, k, use, gt_classes, threshold, n_bins)
    if cells is None:
        return keep, None
    c, t = c[keep], t[keep]

    def weighted(w: np.ndarray) -> float:
        return float(cells.laece(np.abs(cells.sums(w * c) - cells.sums(w * t)), cells.sums(w))[0])

    return keep, weighted


def _laece_replicates(
    cells: _KeptCells, c: np.ndarray, t: np.ndarray, img: np.ndarray, n_img: int
) -> Any:
    """The bootstrap batch of LaECE_0 of kept boxes (scores ``c``, targets ``t``, image ``img`` in
    ``range(n_img)``): a block of replicates' draw counts ``(r, n_img)`` -> ``(r,)``, each the number
    ``weighted`` of :func:`_laece_binned_prepare` gives for its weights (up to float summation order).

    A replicate's cell sums are its draw counts times each (image, cell) pair's sums: the kept boxes
    are pooled into those pairs once, into one sparse ``(2 cells, n_img)`` table (count, and conf less target
    sums of the cells with boxes), and a block of replicates' sums is one sparse product with their draw
    counts (:func:`~det_calib.metrics.bootstrap_tables.csr_product`), not three weighted bin counts over
    every kept box per replicate."""
    pair, inv = np.unique(img.astype(np.int64) * cells.size + cells.key, return_inverse=True)
    inv = inv.ravel()
    used, row = np.unique(pair % cells.size, return_inverse=True)  # the cells with kept boxes
    n_rows = used.size
    # two rows a cell: the count and the sum of conf - target (a cell's gap needs no more)
    table = csr_table(
        np.concatenate([row, row + n_rows]),
        np.tile(pair // cells.size, 2),
        np.concatenate([np.bincount(inv).astype(np.float64), np.bincount(inv, c - t)]),
        (2 * n_rows, n_img),
    )

    def batch(mult: np.ndarray) -> np.ndarray:
        sums = csr_product(table, mult)
        count, gap = np.zeros((2, mult.shape[0], cells.size))
        count[:, used] = sums[:n_rows].T
        gap[:, used] = np.abs(sums[n_rows:]).T
        return cells.laece(gap, count)

    return batch


class _KeptCells(NamedTuple):
    """Steps 3 and 4 of :func:`laece0` on a kept set: each box's (class, bin) cell, and the class
    average of the binned gaps. The reported LaECE_0 (:meth:`LaECE0Targets.laece`, its bootstrap
    replicates) and its sampling floor (:func:`kept_laece_floor`) are both computed here."""

    key: np.ndarray  # (kept,) class * n_bins + bin of each kept box
    n_cls: int
    n_bins: int
    has_gt: np.ndarray  # (n_cls,) bool, the class has (non-crowd) ground truth

    @classmethod
    def of(cls, c: np.ndarray, k: np.ndarray, gt_classes: np.ndarray, n_bins: int) -> _KeptCells:
        n_cls = int(max(k.max(), gt_classes.max() if gt_classes.size else 0)) + 1
        has_gt = np.zeros(n_cls, dtype=bool)
        has_gt[gt_classes[gt_classes < n_cls]] = True
        return cls(k * n_bins + _reference_bin_index(c, n_bins), n_cls, n_bins, has_gt)

    @property
    def size(self) -> int:
        return self.n_cls * self.n_bins

    def sums(self, values: np.ndarray) -> np.ndarray:
        """``(n_cls * n_bins,)`` sum of ``values`` ((kept,)) in each cell."""
        return np.bincount(self.key, weights=values, minlength=self.size)

    def laece(self, gap: np.ndarray, count: np.ndarray) -> np.ndarray:
        """``(d,)`` LaECE_0 of ``d`` sets of cell gaps ``gap`` ((d, n_cls * n_bins) or (n_cls * n_bins,):
        ``|sum conf - sum target|`` of each cell) with the boxes ``count`` ((n_cls * n_bins,), or one row
        per set of gaps) in each cell: per class the summed gaps over its boxes, averaged over the
        classes that have ground truth and boxes, a class whose LaECE_c is exactly 0 left out; nan
        where no class is left."""
        per_class = np.asarray(gap).reshape(-1, self.n_cls, self.n_bins).sum(axis=2)
        cnt = np.asarray(count).reshape(-1, self.n_cls, self.n_bins).sum(axis=2)
        ok = self.has_gt & (
            cnt > 0
        )  # a class whose kept boxes all weigh 0 (none drawn) is not averaged in
        shape = np.broadcast_shapes(per_class.shape, cnt.shape)
        vals = np.divide(per_class, cnt, out=np.zeros(shape), where=ok)
        return _mean_of_picked(vals, ok & (vals != 0.0))


def _mean_of_picked(vals: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """``(d,)`` mean of each row's ``picked`` values of ``vals`` ((d, k)), nan where none is picked. The
    rows that pick ``m`` values are averaged together as an ``(rows, m)`` array, so each mean is
    numpy's mean of the row's ``m`` values, bit for bit."""
    m = picked.sum(axis=1)
    out = np.full(vals.shape[0], np.nan)
    for k in np.unique(m[m > 0]):
        rows = np.flatnonzero(m == k)
        out[rows] = vals[rows][picked[rows]].reshape(rows.size, k).mean(axis=1)
    return out


def kept_laece_floor(
    targets: LaECE0Targets,
    conf: Any,
    *,
    threshold: float,
    iou: Any = None,
    n_bins: int = 25,
    n_draws: int = 200,
    seed: int = 0,
) -> ECEFloor | None:
    """The sampling floor of the kept-set LaECE_0: what a detector whose every conf is exactly the
    expected IoU target of its box would score on the same kept boxes.

    The boxes scored at ``threshold`` (those :meth:`LaECE0Targets.laece` scores: ``conf > threshold``,
    top ``max_dets`` of their image and class, no crowd match) keep their confidences and classes; their
    targets are drawn ``n_draws`` times, each with mean exactly its box's conf ``s``, as the data show a
    target: 0 (no match) or the IoU of a match. With ``m`` the mean of ``iou``:

    - ``s <= m``: the box is matched with probability ``s / m``, and its IoU is drawn from ``iou``;
    - ``s > m``: the box is always matched, with the IoU ``u`` drawn from ``iou`` lifted towards 1,
      ``u + (1 - u) (s - m) / (1 - m)``, so that the mean is ``s`` (a box scored 1 then has IoU 1).

    Each draw is scored by the code that scores the reported LaECE_0 (the same cells and class average):
    a LaECE_0 inside the range is as low as this many boxes per class and bin can show. A model: a matched
    box's IoU does not depend on its score beyond the lift, and boxes do not compete for a ground truth.

    Args:
        targets: The matching of the boxes (:class:`LaECE0Targets`).
        conf: ``(n,)`` confidences of the same boxes (the scores whose LaECE_0 is reported).
        threshold: Conf threshold; boxes with ``conf > threshold`` are kept.
        iou: The IoU of a matched box, an empirical distribution (1-D, values in (0, 1]); by default
            the targets of the kept boxes that are matched (``targets.target > 0``).
        n_bins: Bins per class of the LaECE_0 (25 in the papers).
        n_draws: Monte-Carlo draws.
        seed: Seed of the draws (fixed: the same boxes give the same floor).

    Returns:
        ``ECEFloor(mean, low, high)`` (2.5 and 97.5 percentiles of the draws), or None when no box is
        kept, no kept box is matched (no IoU to draw from) or no class with ground truth has a kept box.

    >>> t = LaECE0Targets(np.arange(400), np.tile([0.0, 0.0, 10.0, 10.0], (400, 1)), np.zeros(400), np.full(400, 0.5),
    ...                   np.arange(400), np.tile([0.0, 0.0, 10.0, 8.0], (400, 1)), np.zeros(400))
    >>> round(t.laece(np.full(400, 0.5), threshold=0.25), 6)  # every box matched at IoU 0.8, scored 0.5
    0.3
    >>> f = kept_laece_floor(t, np.full(400, 0.5), threshold=0.25)  # matched with p = 0.5 / 0.8, IoU 0.8
    >>> 0.013 < f.mean < 0.018 and f.high < 0.05  # E|0.5 - 0.8 Binomial(400, 5/8) / 400| = 0.0155
    True
    """
    c = np.asarray(conf, dtype=np.float64)
    if c.shape != targets.target.shape:
        raise InputError(
            f"Expected argument `conf` of shape {targets.target.shape} (one per box of `targets`), "
            f"but got shape {c.shape}"
        )
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 2:
        raise InputError(f"Expected argument `n_draws` to be an integer >= 2, but got {n_draws!r}")
    keep = targets.use & kept_mask(c, float(threshold))
    u = _matched_iou(targets.target[keep], iou)
    if not keep.any() or u.size == 0:
        return None
    s = c[keep]
    vals = _laece_of_drawn_targets(
        _KeptCells.of(s, targets.cls[keep], targets.gt_classes, n_bins),
        s,
        u,
        int(n_draws),
        np.random.default_rng(seed),
    )
    if np.isnan(vals).all():
        return None
    lo, hi = np.nanpercentile(vals, [2.5, 97.5])
    return ECEFloor(float(np.nanmean(vals)), float(lo), float(hi))


def _laece_of_drawn_targets(
    cells: _KeptCells, s: np.ndarray, u: np.ndarray, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """``(n_draws,)`` LaECE_0 of the kept boxes (scores ``s``, cells ``cells``) against targets drawn with
    mean ``s`` from the matched IoUs ``u`` (the model of :func:`kept_laece_floor`)."""
    s_conf, count = cells.sums(s), cells.sums(np.ones(s.size))
    m = float(u.mean())
    p = np.minimum(s / m, 1.0)
    lift = np.clip((s - m) / (1.0 - m), 0.0, 1.0) if m < 1.0 else np.zeros(s.size)
    rows = max(1, (1 << 20) // s.size)  # draws in blocks of about 1M targets (8 MiB each table)
    keys = (cells.key + cells.size * np.arange(min(rows, n_draws))[:, None]).ravel()
    # the target of a matched box is its drawn IoU lifted towards 1 by ``lift``, where lift > 0 only
    # (elsewhere ``drawn + (1 - drawn) * 0`` is ``drawn``, bit for bit); an unmatched box's is 0
    # (``drawn * False``: 0.0, as ``np.where`` gives it; an IoU is never negative or nan)
    lifted = np.flatnonzero(lift > 0.0)
    vals = []
    for start in range(0, n_draws, rows):
        d = min(rows, n_draws - start)
        t = u[rng.integers(0, u.size, size=(d, s.size))]
        matched = rng.random((d, s.size)) < p
        if lifted.size:
            up = t[:, lifted]
            t[:, lifted] = up + (1.0 - up) * lift[lifted]
        t *= matched
        s_t = np.bincount(keys[: t.size], weights=t.ravel(), minlength=d * cells.size).reshape(
            d, cells.size
        )
        vals.append(cells.laece(np.abs(s_conf - s_t), count))
    return np.concatenate(vals)


def _matched_iou(kept_target: np.ndarray, iou: Any) -> np.ndarray:
    """The IoU distribution of :func:`kept_laece_floor`: ``iou`` checked, or the kept boxes' matched targets."""
    if iou is None:
        return kept_target[kept_target > 0]
    u = np.asarray(iou, dtype=np.float64)
    if u.ndim != 1 or not np.all((u > 0) & (u <= 1)):
        raise InputError(
            "Expected argument `iou` to be a 1-D array of IoUs in (0, 1], but got "
            f"shape {u.shape}" + (f" with values in [{u.min():g}, {u.max():g}]" if u.size else "")
        )
    return u

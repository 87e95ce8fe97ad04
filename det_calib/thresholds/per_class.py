"""Per-class conf thresholds on calibrated scores: a certified target precision, max-F1, LRP-optimal.

A box is kept at threshold ``t`` when its calibrated conf is ``> t`` (strictly, as Ultralytics'
conf filter). Thresholds are chosen on the **fit** split of a calibration run and checked on the
**eval** split, per class and globally (one threshold for every class).

Criteria
--------
``target_precision``
    The lowest threshold whose precision on new images is at least ``target`` with probability
    at least ``1 - delta``. Candidate thresholds are tested in a fixed order from high to low
    (fixed-sequence testing, as in Learn-then-Test, Angelopoulos et al. 2021): at each ``t`` the
    null hypothesis ``precision(t) < target`` is rejected when the exact binomial tail
    ``P(Bin(n, target) >= k) <= delta`` (equivalently: the one-sided Clopper-Pearson lower bound
    at level ``1 - delta`` is at least the target), with ``n`` boxes kept and ``k`` of them
    correct; testing stops at the first failure and the last rejected threshold is returned.
    Fixed-sequence testing controls the family-wise error at ``delta`` without a multiplicity
    correction, so ``P(precision(t_hat) < target) <= delta``. Thresholds with too few boxes to
    test are skipped before testing (:func:`testable`: an observed precision halfway between the
    target and 1 must be able to certify); that rule reads the counts ``n`` only, no label, so
    the sequence is fixed given the scores and the test stays exact.

    Boxes of one image are not independent (duplicates, a hard image with many wrong boxes). The
    binomial test assumes they are, so with positively correlated boxes it is optimistic. With
    ``unit="image"`` (the default) the counts are shrunk by the design effect of the image
    clustering before the test (the effective-sample-size Clopper-Pearson interval of Korn and
    Graubard, 1998): ``deff = var_cluster(p_hat) / var_binomial(p_hat)`` from the per-image
    counts (linearised ratio-estimator variance), floored at 1, and ``n* = n / deff``,
    ``k* = k / deff``. It is never less conservative than the box-level test, and equals it when
    the images carry no extra correlation. ``unit="box"`` is the plain binomial test.

    The guarantee is per class (each class's threshold is certified at ``delta`` on its own),
    and it is about the precision of the population the fit images were drawn from.

    A class that cannot be certified is flagged, never silently: ``too_few_boxes`` (fewer
    boxes than the smallest testable set, :func:`min_certifiable`) or ``target_not_reached`` (no threshold passes). It
    falls back to the stated ``fallback`` rule: ``"global"`` (the threshold certified for all
    classes pooled; its guarantee is for the pooled precision, not the class's) or ``"drop"``
    (threshold 1: no box of the class is kept). Where ``"global"`` is asked but the pooled
    threshold is not certified either, the class is dropped, and flagged so.

``max_f1``
    The threshold that maximises ``F1 = 2 TP / (kept + n_gt)`` on the fit split.

``lrp``
    The threshold that minimises the LRP error of Oksuz et al. (ECCV 2018; TPAMI 2021) with
    ``tau = 0.5``: ``LRP = (sum_TP (1 - IoU) / (1 - tau) + FP + FN) / (TP + FP + FN)``, the
    criterion the reference detector-calibration toolkit (Kuzucu et al., ECCV 2024) uses for its
    per-class thresholds. TP are the boxes matched at the run's IoU (``correct``).

Ties between thresholds (max-F1, LRP) go to the lowest threshold (more recall at the same
score). All criteria search the same grid of thresholds (default ``0, 0.001, ..., 0.999``).

Validation on the eval split: realised precision and recall per class at the chosen thresholds
and, for ``target_precision``, the fraction of image-bootstrap resamples of the eval split in
which the realised precision reaches the target (``coverage``). That figure mixes the eval
split's own sampling noise with the fit's: a class whose true precision sits exactly at the
target would show about 0.5; a threshold with margin shows close to 1.

Deployment: :func:`filter_results` applies per-class thresholds to plain Ultralytics
``Results`` of the calibrated checkpoint (whose conf *is* the calibrated score).

>>> from det_calib.thresholds.per_class import tune_run
>>> doc = tune_run("runs/calib", head="nms", target_precision=0.9, delta=0.1)  # doctest: +SKIP
>>> doc["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]["threshold"]  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_view import BoxView, kept_mask, usable_rows
from det_calib.errors import InputError
from det_calib.numeric import logit_threshold
from det_calib.validation import check_choice

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "THRESHOLDS_FILE",
    "VERSION",
    "DEFAULT_TARGET_PRECISION",
    "ClassCounts",
    "Criterion",
    "betainc",
    "binom_sf",
    "certify_precision",
    "class_thresholds",
    "counts_by_image",
    "filter_results",
    "min_certifiable",
    "precision_lower_bound",
    "read_thresholds",
    "testable",
    "tune",
    "tune_run",
    "write_thresholds",
]

THRESHOLDS_FILE = "thresholds.json"
FORMAT = "det_calib.thresholds"
VERSION = 1
CRITERIA = ("target_precision", "max_f1", "lrp")
Criterion = Literal["target_precision", "max_f1", "lrp"]
Unit = Literal["image", "box"]
Fallback = Literal["global", "drop"]
DEFAULT_GRID = np.round(np.arange(1000) / 1000.0, 3)
DEFAULT_TARGET_PRECISION = 0.9
"""Target precision of :func:`tune_run` and ``det-calib thresholds`` when none is given."""

# Per-head score transform: logits of one head -> calibrated probabilities. Or a callable
# (boxes of one head, head) -> probabilities, for calibrators that need more than the logit.
ScoreFn = Callable[[pl.DataFrame, str], np.ndarray]
HeadTransforms = Mapping[str, Callable[[np.ndarray], np.ndarray]]


# ------------------------------------------------------------------------------------ exact maths

_lgamma = np.frompyfunc(math.lgamma, 1, 1)


def _lgam(x: np.ndarray) -> np.ndarray:
    return _lgamma(np.asarray(x, dtype=np.float64)).astype(np.float64)


def betainc(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Regularised incomplete beta function ``I_x(a, b)``, elementwise, in float64.

    Continued fraction (modified Lentz) on whichever of ``I_x(a, b)`` and ``1 - I_{1-x}(b, a)``
    converges fast. Agrees with ``scipy.special.betainc`` to ~1e-12 (tested).

    Args:
        a, b: Positive shape parameters (broadcast together with ``x``).
        x: Points in [0, 1].
    """
    a, b, x = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float), np.asarray(x, float))
    out = np.empty(a.shape, dtype=np.float64)
    lo, hi = x <= 0, x >= 1
    out[lo], out[hi] = 0.0, 1.0
    mid = ~(lo | hi)
    if not mid.any():
        return out
    a, b, x = a[mid], b[mid], x[mid]
    swap = x > (a + 1) / (a + b + 2)
    aa, bb, xx = np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1 - x, x)
    log_front = _lgam(aa + bb) - _lgam(aa) - _lgam(bb) + aa * np.log(xx) + bb * np.log1p(-xx)
    tiny, eps = 1e-300, 1e-15
    c = np.ones_like(xx)
    d = 1 - (aa + bb) * xx / (aa + 1)
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1 / d
    h = d.copy()
    done = np.zeros(xx.shape, dtype=bool)
    for m in range(1, 10_000):
        m2 = 2 * m
        num = m * (bb - m) * xx / ((aa + m2 - 1) * (aa + m2))
        d = 1 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1 / d
        h = np.where(done, h, h * d * c)
        num = -(aa + m) * (aa + bb + m) * xx / ((aa + m2) * (aa + m2 + 1))
        d = 1 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1 / d
        delta = d * c
        h = np.where(done, h, h * delta)
        done |= np.abs(delta - 1) < eps
        if done.all():
            break
    val = np.exp(log_front) * h / aa
    out[mid] = np.where(swap, 1 - val, val)
    return out


def binom_sf(k: np.ndarray, n: np.ndarray, p: float | np.ndarray) -> np.ndarray:
    """``P(Bin(n, p) >= k)`` (real ``k``, ``n`` allowed: effective counts), elementwise.

    Equal to ``I_p(k, n - k + 1)``; 1 where ``k <= 0``.
    """
    k, n, p = np.broadcast_arrays(np.asarray(k, float), np.asarray(n, float), np.asarray(p, float))
    out = np.ones(k.shape, dtype=np.float64)
    m = k > 0
    out[m] = betainc(k[m], n[m] - k[m] + 1, p[m])
    return out


def precision_lower_bound(k: np.ndarray, n: np.ndarray, *, delta: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound at level ``1 - delta`` of a proportion ``k / n``.

    The ``p`` solving ``P(Bin(n, p) >= k) = delta`` (bisection, 1e-10); 0 where ``k == 0``,
    nan where ``n == 0``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    k, n = np.broadcast_arrays(k, n)
    lo, hi = np.zeros(k.shape), np.ones(k.shape)
    for _ in range(40):
        mid = (lo + hi) / 2
        up = binom_sf(k, n, mid) > delta  # the tail is increasing in p: the root is below mid
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    out = np.where(k > 0, lo, 0.0)
    return np.where(n > 0, out, np.nan)


# -------------------------------------------------------------------------- counts on the grid


@dataclass(frozen=True)
class ClassCounts:
    """Per-image counts of the boxes kept at each grid threshold.

    Attributes:
        grid: (G,) thresholds, increasing.
        kept: (m, G) boxes with score > grid[j], per image.
        tp: (m, G) of them correct, per image.
        loc: (m, G) sum of ``(1 - IoU) / (1 - tau)`` over the kept correct boxes, per image.
        n_gt: Ground-truth boxes of the selection (recall denominator).
    """

    grid: np.ndarray
    kept: np.ndarray
    tp: np.ndarray
    loc: np.ndarray
    n_gt: int

    @property
    def n(self) -> np.ndarray:
        return self.kept.sum(0)

    @property
    def k(self) -> np.ndarray:
        return self.tp.sum(0)


def counts_by_image(
    score: np.ndarray,
    correct: np.ndarray,
    image_id: np.ndarray,
    *,
    grid: np.ndarray,
    iou: np.ndarray | None = None,
    tau: float = 0.5,
    n_gt: int = 0,
) -> ClassCounts:
    """Count, per image and grid threshold ``t``, the boxes with ``score > t`` and the correct ones.

    Args:
        score: (n,) calibrated scores.
        correct: (n,) matched flags.
        image_id: (n,) image of each box (any integers; images without boxes contribute nothing).
        grid: (G,) increasing thresholds.
        iou: (n,) IoU with the matched ground truth, for the LRP localisation term.
        tau: LRP's IoU threshold.
        n_gt: Ground-truth count carried along for recall.
    """
    s = np.asarray(score, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    _, img = np.unique(np.asarray(image_id), return_inverse=True)
    m = int(img.max()) + 1 if img.size else 0
    g = len(grid)
    # box kept at grid[j] iff s > grid[j] iff j < searchsorted(grid, s, "left")
    top = np.searchsorted(grid, s, side="left")  # kept at thresholds 0..top-1
    def acc(w: np.ndarray) -> np.ndarray:
        h = np.zeros((m, g + 1), dtype=np.float64)
        np.add.at(h, (img, top), w)
        # a box with index `top` is kept at thresholds j < top: reverse cumulative sum from the right
        return np.cumsum(h[:, ::-1], axis=1)[:, ::-1][:, 1:]
    kept = acc(np.ones_like(s))
    tp = acc(y.astype(np.float64))
    if iou is not None:
        le = np.clip((1 - np.asarray(iou, dtype=np.float64)) / (1 - tau), 0, 1) * y
        loc = acc(le)
    else:
        loc = np.zeros_like(kept)
    return ClassCounts(np.asarray(grid, float), kept, tp, loc, int(n_gt))


def _deff(kept: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Design effect of image clustering on the precision ``sum tp / sum kept``, per column, >= 1.

    Linearised variance of the ratio estimator over m images,
    ``m / (m - 1) * sum_i (tp_i - p kept_i)^2 / n^2``, divided by the binomial ``p (1 - p) / n``.
    Works on (..., m, G) arrays (leading axes: resamples).
    """
    n = kept.sum(-2)
    k = tp.sum(-2)
    m = (kept > 0).sum(-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        ss = (tp * tp).sum(-2) - 2 * p * (tp * kept).sum(-2) + p * p * (kept * kept).sum(-2)
        var_c = np.where(m > 1, m / np.maximum(m - 1, 1) * ss / (n * n), np.nan)
        var_b = p * (1 - p) / n
        d = var_c / var_b
    return np.where(np.isfinite(d), np.maximum(d, 1.0), 1.0)


def testable(n: np.ndarray, *, target: float, delta: float) -> np.ndarray:
    """Which thresholds enter the test sequence: a rule on the kept counts ``n`` only (no labels).

    A threshold is tested when an observed precision halfway between the target and 1 would
    certify the target there, ``P(Bin(n, target) >= ceil(n (1 + target) / 2)) <= delta``. Tiny
    sets at the top of the score range, where one wrong box would stop the sequence at once
    (with ``n`` at the bare minimum only a perfect record certifies), are skipped. Because the
    rule reads no label, the sequence is fixed given the scores and the test stays exact.
    """
    n = np.asarray(n, dtype=np.float64)
    k = np.ceil(n * (1 + target) / 2)
    return (n > 0) & (binom_sf(k, n, target) <= delta)


def min_certifiable(target: float, delta: float) -> int:
    """Smallest number of boxes at which a threshold enters the test sequence (see :func:`testable`)."""
    lo = max(1, math.ceil(math.log(delta) / math.log(target)))
    for start in range(lo, 10_000_000, 4096):
        n = np.arange(start, start + 4096)
        ok = testable(n, target=target, delta=delta)
        if ok.any():
            return int(n[np.argmax(ok)])
    raise InputError(f"target precision {target} cannot be certified at delta {delta}")  # pragma: no cover


def certify_precision(
    n: np.ndarray, k: np.ndarray, *, target: float, delta: float, deff: np.ndarray | None = None
) -> np.ndarray:
    """Fixed-sequence test over grid thresholds from high to low; vectorised over leading axes.

    The thresholds of :func:`testable` (on the raw counts) are tested from the highest down; at
    each, ``H0: precision < target`` is rejected when ``P(Bin(n*, target) >= k*) <= delta``,
    with ``n* = n / deff``, ``k* = k / deff``. The first non-rejection stops the sequence.

    Args:
        n: (..., G) boxes kept at each threshold (grid increasing along the last axis).
        k: (..., G) correct boxes among them.
        target: Target precision in (0, 1).
        delta: Error level in (0, 1).
        deff: (..., G) design effects (>= 1) that shrink the counts; None: box-level test.

    Returns:
        (...,) index into the grid of the certified threshold (the lowest rejected before the
        first failure), -1 where none.
    """
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    test = testable(n, target=target, delta=delta)
    ne, ke = (n, k) if deff is None else (n / deff, k / deff)
    reject = test & (binom_sf(ke, ne, target) <= delta)
    g = n.shape[-1]
    pos = np.arange(g)
    fail = test & ~reject
    # highest failing threshold; everything at or below it is out of the sequence
    top_fail = np.where(fail.any(-1), g - 1 - np.argmax(fail[..., ::-1], -1), -1)
    ok = reject & (pos > top_fail[..., None])
    return np.where(ok.any(-1), np.argmax(ok, -1), -1)


# ---------------------------------------------------------------------------------- criteria


def _ratio(a: Any, b: Any) -> float | None:
    return float(a) / float(b) if b else None


def _at(c: ClassCounts, j: int) -> dict[str, Any]:
    """Threshold, precision, recall and boxes kept at grid index j (j = -1: keep nothing, t = 1)."""
    if j < 0:
        return {"threshold": 1.0, "precision": None, "recall": 0.0 if c.n_gt else None, "kept": 0}
    n, k = float(c.n[j]), float(c.k[j])
    return {"threshold": float(c.grid[j]), "precision": _ratio(k, n), "recall": _ratio(k, c.n_gt), "kept": int(n)}


def _argbest(values: np.ndarray, *, maximise: bool) -> int:
    v = np.where(np.isfinite(values), values, -np.inf if maximise else np.inf)
    if not np.isfinite(v).any():
        return -1
    best = v.max() if maximise else v.min()
    return int(np.flatnonzero(v == best)[0])  # lowest threshold among ties


def f1_curve(c: ClassCounts) -> np.ndarray:
    """F1 ``2 TP / (kept + n_gt)`` at each grid threshold."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c.n + c.n_gt > 0, 2 * c.k / (c.n + c.n_gt), np.nan)


def lrp_curve(c: ClassCounts) -> np.ndarray:
    """LRP error ``(loc + FP + FN) / (TP + FP + FN)`` at each grid threshold (nan without GT)."""
    n, k, loc = c.n, c.k, c.loc.sum(0)
    den = n + c.n_gt - k
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((den > 0) & (c.n_gt > 0), (loc + (n - k) + (c.n_gt - k)) / den, np.nan)


def _max_f1(c: ClassCounts) -> dict[str, Any]:
    if c.n_gt == 0:
        return {**_at(c, -1), "f1": None, "flag": "no_ground_truth"}
    f1 = f1_curve(c)
    j = _argbest(f1, maximise=True)
    return {**_at(c, j), "f1": float(f1[j]) if j >= 0 else None, "flag": None if j >= 0 else "no_boxes"}


def _lrp(c: ClassCounts) -> dict[str, Any]:
    if c.n_gt == 0:
        return {**_at(c, -1), "lrp": None, "flag": "no_ground_truth"}
    lrp = lrp_curve(c)
    j = _argbest(lrp, maximise=False)
    return {**_at(c, j), "lrp": float(lrp[j]) if j >= 0 else None, "flag": None if j >= 0 else "no_boxes"}


def _target(c: ClassCounts, *, target: float, delta: float, unit: Unit) -> dict[str, Any]:
    deff = _deff(c.kept, c.tp) if unit == "image" else None
    j = int(certify_precision(c.n, c.k, target=target, delta=delta, deff=deff))
    out = _at(c, j)
    if j >= 0:
        d = 1.0 if deff is None else deff[j]
        out["precision_lower"] = float(precision_lower_bound(c.k[j] / d, c.n[j] / d, delta=delta))
    else:
        out["precision_lower"] = None
    out["deff"] = float(deff[j]) if (j >= 0 and deff is not None) else None
    out["certified"] = j >= 0
    if j >= 0:
        out["flag"] = None
    elif not testable(c.n, target=target, delta=delta).any():
        out["flag"] = "too_few_boxes"
    else:
        out["flag"] = "target_not_reached"
    return out


# ---------------------------------------------------------------------------------- tuning


def _validate_params(target_precision: float, delta: float, unit: str, fallback: str) -> None:
    if not (isinstance(target_precision, (int, float)) and 0 < target_precision < 1):
        raise InputError(f"Expected argument `target_precision` in (0, 1), but got {target_precision!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InputError(f"Expected argument `delta` in (0, 1), but got {delta!r}")
    if unit not in ("image", "box"):
        raise InputError(f"Expected argument `unit` to be 'image' or 'box', but got {unit!r}")
    if fallback not in ("global", "drop"):
        raise InputError(f"Expected argument `fallback` to be 'global' or 'drop', but got {fallback!r}")


def _check_grid(grid: np.ndarray | None) -> np.ndarray:
    g = DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if g.ndim != 1 or g.size == 0 or not np.all(np.diff(g) > 0) or g[0] < 0 or g[-1] >= 1:
        raise InputError("Expected argument `grid` to be a non-empty strictly increasing array in [0, 1)")
    return g


def _counts(a: BoxView, mask: np.ndarray | None, grid: np.ndarray, n_gt: int, tau: float) -> ClassCounts:
    v = a if mask is None else a.subset(mask)
    return counts_by_image(v.conf, v.correct, v.image_id, grid=grid, iou=v.iou, tau=tau, n_gt=n_gt)


def _realised(c: ClassCounts, t: float) -> dict[str, Any]:
    """Precision, recall and boxes kept on a split at threshold t (t = 1 keeps nothing)."""
    if t >= 1:
        return {"precision": None, "recall": 0.0 if c.n_gt else None, "kept": 0}
    j = int(np.searchsorted(c.grid, t))
    if j >= len(c.grid) or c.grid[j] != t:  # a threshold off the grid: fall back to the exact one
        raise AssertionError("threshold not on the grid")  # pragma: no cover - thresholds come from the grid
    return {"precision": _ratio(c.k[j], c.n[j]), "recall": _ratio(c.k[j], c.n_gt), "kept": int(c.n[j])}


def _bootstrap_coverage(c: ClassCounts, t: float, target: float, weights: np.ndarray) -> float | None:
    """Fraction of image-bootstrap resamples whose precision at t is >= target (nan-free resamples only)."""
    if t >= 1 or c.kept.shape[0] == 0:
        return None
    j = int(np.searchsorted(c.grid, t))
    n = weights @ c.kept[:, j]
    k = weights @ c.tp[:, j]
    ok = n > 0
    if not ok.any():
        return None
    return float(np.mean(k[ok] / n[ok] >= target - 1e-12))


def tune(
    fit: pl.DataFrame,
    fit_score: np.ndarray,
    *,
    n_gt_fit: Mapping[int, int],
    class_names: Sequence[str],
    target_precision: float = 0.9,
    delta: float = 0.1,
    unit: Unit = "image",
    fallback: Fallback = "global",
    eval_boxes: pl.DataFrame | None = None,
    eval_score: np.ndarray | None = None,
    n_gt_eval: Mapping[int, int] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    grid: np.ndarray | None = None,
    min_threshold: float = 0.0,
    lrp_tau: float = 0.5,
) -> dict[str, Any]:
    """Choose per-class and global thresholds on one head's fit boxes; validate on its eval boxes.

    Args:
        fit: Fit-split boxes of one head (columns ``cls``, ``correct``, ``iou``, ``image_id``;
            crowd-ignored boxes already dropped).
        fit_score: (n_fit,) calibrated scores of those boxes.
        n_gt_fit: Ground-truth boxes per class on the fit split (classes absent: 0).
        class_names: Names, indexed by class id.
        target_precision, delta: The precision target and the error level of its guarantee.
        unit: ``"image"`` (design-effect correction for boxes of one image) or ``"box"``.
        fallback: Rule for classes that cannot be certified (see the module docstring).
        eval_boxes, eval_score, n_gt_eval: The eval split, the same way (optional).
        n_boot, seed: Image-bootstrap resamples of the eval split for the coverage.
        grid: Candidate thresholds (increasing, in [0, 1)).
        min_threshold: Candidates below this are left out (the calibrated capture floor).
        lrp_tau: IoU threshold in the LRP localisation term.

    Returns:
        The ``criteria`` object of one head in ``thresholds.json`` (see :func:`tune_run`).

    Raises:
        InputError: A parameter is out of range, or the fit split has no boxes.
    """
    _validate_params(target_precision, delta, unit, fallback)
    grid = _check_grid(grid)
    grid = grid[grid >= min_threshold]
    if grid.size == 0:
        raise InputError(f"no candidate threshold at or above the capture floor {min_threshold:.4g}")
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise InputError(f"Expected argument `n_boot` to be an integer larger than 0, but got {n_boot!r}")
    if fit.height == 0:
        raise InputError("the fit split has no boxes for this head: nothing to tune thresholds on")
    if len(fit_score) != fit.height:
        raise InputError(f"Expected `fit_score` of length {fit.height}, but got {len(fit_score)}")
    if not np.all(np.isfinite(fit_score)) or np.any((np.asarray(fit_score) < 0) | (np.asarray(fit_score) > 1)):
        raise InputError("calibrated scores of the fit split must lie in [0, 1]")
    fa = BoxView.from_boxes(fit, conf=fit_score, ignore=False)
    classes = sorted(set(fa.cls.tolist()) | {c for c, v in n_gt_fit.items() if v})
    n_gt_total = int(sum(n_gt_fit.values()))

    ea = None
    if eval_boxes is not None and eval_boxes.height:
        if eval_score is None or len(eval_score) != eval_boxes.height:
            raise InputError("Expected `eval_score` with one score per eval box")
        ea = BoxView.from_boxes(eval_boxes, conf=eval_score, ignore=False)
        n_gt_eval = dict(n_gt_eval or {})
        classes = sorted(set(classes) | set(ea.cls.tolist()))
        rng = np.random.default_rng(seed)
        uimg = np.unique(ea.image_id)
        # resample weights over the eval images that have boxes (images without boxes add nothing
        # to precision): multinomial counts, one row per resample
        w_eval = rng.multinomial(len(uimg), np.full(len(uimg), 1 / len(uimg)), size=n_boot).astype(np.float64)

    def ev_counts(mask: np.ndarray | None, n_gt: int) -> ClassCounts | None:
        if ea is None:
            return None
        c = _counts(ea, mask, grid, n_gt, lrp_tau)
        if c.kept.shape[0] < len(uimg):  # align rows with the resample weights (one per eval image)
            full_k = np.zeros((len(uimg), len(grid)))
            full_t, full_l = full_k.copy(), full_k.copy()
            rows = np.searchsorted(uimg, np.unique(ea.image_id[mask] if mask is not None else ea.image_id))
            full_k[rows], full_t[rows], full_l[rows] = c.kept, c.tp, c.loc
            c = ClassCounts(grid, full_k, full_t, full_l, n_gt)
        return c

    def name(c: int) -> str:
        return str(class_names[c]) if 0 <= c < len(class_names) else str(c)

    out: dict[str, Any] = {}
    glob_fit = _counts(fa, None, grid, n_gt_total, lrp_tau)
    glob_ev = ev_counts(None, int(sum((n_gt_eval or {}).values()))) if ea is not None else None
    per_fit = {c: _counts(fa, fa.cls == c, grid, int(n_gt_fit.get(c, 0)), lrp_tau) for c in classes}
    per_ev = {c: ev_counts(ea.cls == c, int(n_gt_eval.get(c, 0))) for c in classes} if ea is not None else {}

    for crit in CRITERIA:
        if crit == "target_precision":
            def choose(c: ClassCounts) -> dict[str, Any]:
                return _target(c, target=target_precision, delta=delta, unit=unit)
            params = {"target_precision": target_precision, "delta": delta, "unit": unit, "fallback": fallback,
                      "test": "fixed-sequence, exact binomial (Clopper-Pearson), thresholds high to low",
                      "min_certifiable_boxes": min_certifiable(target_precision, delta)}
        elif crit == "max_f1":
            choose = _max_f1
            params = {}
        else:
            choose = _lrp
            params = {"tau": lrp_tau}
        g = choose(glob_fit)
        g["fallback"] = None
        rows = []
        for c in classes:
            r = {"cls": int(c), "name": name(c), **choose(per_fit[c]), "fallback": None}
            if crit == "target_precision" and not r["certified"]:
                if fallback == "global" and g["certified"]:
                    r["threshold"], r["fallback"] = g["threshold"], "global"
                else:
                    r["threshold"], r["fallback"] = 1.0, "drop"
                # in-sample figures at the threshold actually used
                if r["threshold"] < 1:
                    j = int(np.searchsorted(grid, r["threshold"]))
                    r.update(_at(per_fit[c], j))
                else:
                    r.update(_at(per_fit[c], -1))
            rows.append(r)
        for r, c in [(g, None), *((r, r["cls"]) for r in rows)]:
            r["fit"] = {"precision": r.pop("precision"), "recall": r.pop("recall"), "kept": r.pop("kept"),
                        "n_gt": (per_fit[c] if c is not None else glob_fit).n_gt}
            if ea is not None:
                cc = per_ev[c] if c is not None else glob_ev
                r["eval"] = {**_realised(cc, r["threshold"]), "n_gt": cc.n_gt}
                if crit == "target_precision":
                    r["eval"]["coverage"] = _bootstrap_coverage(cc, r["threshold"], target_precision, w_eval)
                    r["eval"]["meets_target"] = (None if r["eval"]["precision"] is None
                                                 else bool(r["eval"]["precision"] >= target_precision))
        out[crit] = {"params": params, "global": g, "per_class": rows}
        if crit == "target_precision" and ea is not None:
            out[crit]["validation"] = _validation_summary(rows, per_ev, w_eval, target_precision, delta, n_boot, seed)
    return out


def _validation_summary(rows: list[dict[str, Any]], per_ev: dict[int, ClassCounts], w: np.ndarray, target: float,
                        delta: float, n_boot: int, seed: int) -> dict[str, Any]:
    """Coverage of the certified classes jointly, and the classes that missed the target on eval."""
    cert = [r for r in rows if r["certified"] and per_ev[r["cls"]] is not None]
    joint = None
    if cert:
        hits = []
        for r in cert:
            c = per_ev[r["cls"]]
            j = int(np.searchsorted(c.grid, r["threshold"]))
            n, k = w @ c.kept[:, j], w @ c.tp[:, j]
            with np.errstate(invalid="ignore", divide="ignore"):
                hits.append(np.where(n > 0, k / np.maximum(n, 1) >= target - 1e-12, True))
        joint = float(np.mean(np.all(hits, axis=0)))
    misses = [r["name"] for r in cert if r["eval"]["meets_target"] is False]
    return {
        "split": "eval",
        "n_boot": n_boot,
        "seed": seed,
        "resampling_unit": "image",
        "certified_classes": len(cert),
        "classes_meeting_target": sum(1 for r in cert if r["eval"]["meets_target"]),
        "classes_missing_target": misses,
        "expected_misses": delta * len(cert),
        "coverage_all_certified": joint,
        "note": ("coverage: fraction of image-bootstrap resamples of the eval split whose precision at the chosen "
                 "threshold is >= the target; each class's guarantee holds with probability >= 1 - delta on its "
                 "own, so about delta x (certified classes) misses are expected"),
    }


# ------------------------------------------------------------------------------------ run folder


def _run_score(calibrator: LogitCalibrator) -> ScoreFn:
    """The score of a run's own calibrator, any method: ``sigmoid`` of the calibrated logit
    (:meth:`BoxView.scored` ``from_logit``)."""

    def score(boxes: pl.DataFrame, head: str) -> np.ndarray:
        return BoxView.from_boxes(boxes, geometry=False, ignore=False).scored(calibrator, from_logit=True).conf

    score.__name__ = "the run's calibrator"
    return score


def _as_score_fn(score: ScoreFn | HeadTransforms) -> ScoreFn:
    if isinstance(score, Mapping):
        transforms = dict(score)

        def from_logits(boxes: pl.DataFrame, head: str) -> np.ndarray:
            if head not in transforms:
                raise InputError(f"Expected a score transform for head {head}, got heads {sorted(transforms)}")
            return np.asarray(transforms[head](boxes["logit"].to_numpy().astype(np.float64)), dtype=np.float64)

        return from_logits
    if callable(score):
        return score
    raise InputError(
        f"Expected argument `score` to be a callable or a mapping head -> callable, got {type(score).__name__}")


def _recorded_gt_counts(run: Any, splits: Sequence[str]) -> dict[str, dict[int, int]] | None:
    """Ground-truth counts per class of ``splits`` as the run recorded them (``gt_counts``), or None."""
    recorded = run.gt_counts
    if recorded is None or not all(sp in recorded for sp in splits):
        return None
    return {sp: dict(enumerate(recorded[sp])) for sp in splits}


def _gt_counts(run: Any, cal_path: Path, split: str, n_images: int | None) -> dict[int, int]:
    """Non-crowd ground-truth boxes per class of one split, read from the run's dataset."""
    from det_calib.data.ground_truth import load_data_yaml, load_split

    data = run.data
    if not data or not Path(data).is_file():
        raise InputError(
            f"{cal_path}: the dataset `data` ({data or None}) is not readable; recall, max-F1 and LRP "
            "need its ground-truth counts (pass `n_gt=` to tune_run)"
        )
    ds = load_data_yaml(data)
    sp = load_split(ds, split, coco_gt=run.settings.coco_gt, limit=n_images)
    gt = sp.gt.filter(~pl.col("crowd"))
    vals, cnt = np.unique(gt["cls"].to_numpy(), return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, cnt)}


@dataclass(frozen=True)
class RunHead:
    """The boxes of one head of a calibration run, with their calibrated scores.

    Attributes:
        run_dir: The run folder.
        head: ``nms`` or ``e2e``.
        class_names: Names indexed by class id.
        fit_split, eval_split: Split names (``eval_split`` None when the run has none).
        fit, eval: Boxes of the head on each split, crowd-ignored boxes dropped (``eval`` None).
        fit_score, eval_score: Their calibrated scores.
        n_gt_fit, n_gt_eval: Ground-truth boxes per class (empty dicts when not counted).
        temperature: The run's temperature of the head (None if absent).
        score_floor: The calibrated score of a box at the capture floor (the run's ``conf_floor``,
            default 0.001): below it the box table is incomplete (with T > 1 the calibrated
            scores of boxes the capture dropped rise above the raw floor), so no threshold is
            chosen under it.
    """

    run_dir: Path
    head: str
    class_names: list[str]
    fit_split: str
    eval_split: str | None
    fit: pl.DataFrame
    eval: pl.DataFrame | None
    fit_score: np.ndarray
    eval_score: np.ndarray | None
    n_gt_fit: dict[int, int]
    n_gt_eval: dict[int, int]
    temperature: float | None
    score_floor: float = 0.0


def load_head(
    run_dir: str | Path,
    *,
    head: str = "nms",
    score: ScoreFn | HeadTransforms | None = None,
    n_gt: Mapping[str, Mapping[int, int]] | None = None,
    count_gt: bool = True,
) -> RunHead:
    """Read one head of a run folder: boxes of the fit and eval splits and their calibrated scores.

    Reads ``boxes.parquet`` and, from ``calibration.json``, only ``heads``, ``temperature``,
    ``class_names``, ``splits`` and ``gt_counts`` (ground-truth boxes per split and class; a run
    written before that key existed falls back to counting them from ``data``/``coco_gt`` with
    the ``fit``/``eval`` image counts).

    Args:
        run_dir: The output folder of ``det-calib calibrate``.
        head: The head; the run must have it.
        score: See :func:`tune_run`.
        n_gt: ``{split: {class: count}}``; None reads them from ``gt_counts`` (else the run's
            dataset) when ``count_gt`` (else leaves them empty).
        count_gt: Read or count ground truth when ``n_gt`` is None.

    Raises:
        InputError: A file is missing or corrupt, the run lacks the head, no fit boxes.
    """
    from det_calib.record.run_folder import load_run

    run_dir = Path(run_dir)
    cal_path = run_dir / "calibration.json"
    folder = load_run(run_dir)  # the one reader of a run folder: one line on a missing or damaged file
    run, boxes = folder.result, folder.boxes
    check_choice(head, run.heads, "head", among="the run's heads ")
    temperature = run.temperatures
    names = [str(n) for n in run.class_names]
    fit_split, eval_split = run.settings.fit_split, run.settings.eval_split
    if not fit_split:
        raise InputError(f"{cal_path}: `splits.fit` is missing")
    fit = usable_rows(boxes, head=head, split=fit_split)
    ev = usable_rows(boxes, head=head, split=eval_split) if eval_split and eval_split != fit_split else None
    if ev is not None and ev.height == 0:
        log.warning("%s: no boxes of head %s in the eval split %s", run_dir / "boxes.parquet", head, eval_split)
    if fit.height == 0:
        raise InputError(f"{run_dir / 'boxes.parquet'}: no boxes of head {head} in the fit split `{fit_split}`")
    if score is None:
        cal = folder.deployed_calibrator(head)
        if cal is None:
            raise InputError(f"{cal_path}: no calibrator for head {head}")
        score_fn = _run_score(cal)
    else:
        score_fn = _as_score_fn(score)
    if n_gt is None and count_gt:
        n_gt = _recorded_gt_counts(run, [fit_split, *([eval_split] if ev is not None else [])])
    if n_gt is None and count_gt:  # a run written before calibration.json recorded `gt_counts`
        h = run.head(head)
        n_gt = {fit_split: _gt_counts(run, cal_path, fit_split, _n_images(h.fit))}
        if ev is not None:
            n_gt[eval_split] = _gt_counts(run, cal_path, eval_split, _n_images(h.eval))
    n_gt = n_gt or {}
    t = temperature.get(head)
    floor = run.settings.conf_floor
    floor = float(floor) if isinstance(floor, (int, float)) and 0 < floor < 1 else 0.001
    # one probe box per class at the floor's logit, scored by the same function
    probe = fit.unique(subset="cls", keep="first").with_columns(
        pl.lit(logit_threshold(floor)).alias("logit"), pl.lit(floor).alias("conf"))
    score_floor = float(np.max(_checked_score(score_fn(probe, head), probe.height, "floor probe")))
    return RunHead(
        run_dir=run_dir,
        head=head,
        class_names=names,
        fit_split=fit_split,
        eval_split=eval_split if ev is not None else None,
        fit=fit,
        eval=ev,
        fit_score=_checked_score(score_fn(fit, head), fit.height, "fit"),
        eval_score=_checked_score(score_fn(ev, head), ev.height, "eval") if ev is not None else None,
        n_gt_fit={int(k): int(v) for k, v in dict(n_gt.get(fit_split, {})).items()},
        n_gt_eval={int(k): int(v) for k, v in dict(n_gt.get(eval_split, {})).items()} if ev is not None else {},
        temperature=float(t) if isinstance(t, (int, float)) else None,
        score_floor=score_floor,
    )


def _checked_score(s: Any, n: int, split: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64).reshape(-1)
    if s.shape != (n,):
        raise InputError(f"the score function returned {s.shape[0]} scores for {n} boxes of the {split} split")
    if n and (not np.all(np.isfinite(s)) or s.min() < 0 or s.max() > 1):
        raise InputError(f"the score function returned values outside [0, 1] on the {split} split")
    return s


def tune_run(
    run_dir: str | Path,
    *,
    head: str = "nms",
    target_precision: float = DEFAULT_TARGET_PRECISION,
    delta: float = 0.1,
    unit: Unit = "image",
    fallback: Fallback = "global",
    score: ScoreFn | HeadTransforms | None = None,
    score_name: str | None = None,
    n_gt: Mapping[str, Mapping[int, int]] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    grid: np.ndarray | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Tune thresholds on a calibration run folder and write ``thresholds.json`` into it.

    Reads ``boxes.parquet`` and, from ``calibration.json``, only ``heads``, ``temperature``,
    ``class_names``, ``splits`` and ``gt_counts`` (ground truth for recall, when ``n_gt`` is not
    given; runs written before that key existed count it from ``data``/``coco_gt``). An existing
    ``thresholds.json`` keeps its other heads.

    Args:
        run_dir: The output folder of ``det-calib calibrate``.
        head: ``"nms"`` or ``"e2e"``; the run must have it.
        target_precision, delta, unit, fallback: See :func:`tune`.
        score: Calibrated score of the boxes: None (``sigmoid(logit / temperature[head])``), a
            mapping ``head -> f(logits) -> probabilities``, or a callable ``(boxes, head) -> probabilities``.
        score_name: How the score is described in the file (default from ``score``).
        n_gt: ``{split: {class: ground-truth boxes}}``; default ``gt_counts`` of ``calibration.json``
            (older runs: counted from the run's dataset).
        n_boot, seed: Image-bootstrap resamples of the eval split for the coverage.
        grid: Candidate thresholds.
        write: Write ``thresholds.json`` (atomically).

    Returns:
        The thresholds document (what ``thresholds.json`` holds).

    Raises:
        InputError: Bad parameter, missing/corrupt files, a head the run lacks, no fit boxes.
    """
    _validate_params(target_precision, delta, unit, fallback)
    from det_calib.io import write_json

    rh = load_head(run_dir, head=head, score=score, n_gt=n_gt)
    run_dir = rh.run_dir
    crit = tune(
        rh.fit, rh.fit_score,
        n_gt_fit=rh.n_gt_fit, class_names=rh.class_names,
        target_precision=target_precision, delta=delta, unit=unit, fallback=fallback,
        eval_boxes=rh.eval, eval_score=rh.eval_score, n_gt_eval=rh.n_gt_eval,
        n_boot=n_boot, seed=seed, grid=grid, min_threshold=rh.score_floor,
    )
    if score is None and rh.temperature is not None:
        desc = {"kind": "temperature", "formula": "sigmoid(logit / T)", "temperature": rh.temperature}
    elif score is None:
        desc = {"kind": "calibrator", "formula": "sigmoid(calibrated logit), the run's calibrator (calibration.json)"}
    else:
        desc = {"kind": "custom", "formula": score_name or getattr(score, "__name__", type(score).__name__)}
    path = run_dir / THRESHOLDS_FILE
    doc = _existing(path) or {}
    doc.update({
        "format": FORMAT,
        "version": VERSION,
        "det_calib_version": _version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "class_names": rh.class_names,
        "splits": {"fit": rh.fit_split, "eval": rh.eval_split},
        "kept_rule": "conf > threshold (strict), conf = the calibrated score",
    })
    g = _check_grid(grid)
    g = g[g >= rh.score_floor]
    doc.setdefault("heads", {})[head] = {
        "score": desc,
        "score_floor": rh.score_floor,
        "grid": {"size": int(g.size), "min": float(g[0]), "max": float(g[-1])},
        "criteria": crit,
    }
    if write:
        write_json(path, doc)
    return doc


def _n_images(part: Any) -> int | None:
    """The images a run's fit or eval record counts (its ``--limit``), or None."""
    n = getattr(part, "images", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def _existing(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        doc = read_thresholds(path)
    except InputError as e:
        warnings.warn(f"{path} is replaced: {e}", stacklevel=3)
        return None
    return doc


def _version() -> str:
    from det_calib.record.run_result import package_version

    return package_version()


# ------------------------------------------------------------------------------ file and deployment


def read_thresholds(path: str | Path) -> dict[str, Any]:
    """Read and check a ``thresholds.json`` (format and version)."""
    path = Path(path)
    if path.is_dir():
        path = path / THRESHOLDS_FILE
    if not path.is_file():
        raise InputError(f"thresholds file not found: {path}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{path}: not a det_calib thresholds file (`format` must be {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise InputError(
            f"{path}: thresholds file version {doc.get('version')!r}; this det_calib reads version {VERSION}")
    if not isinstance(doc.get("heads"), dict):
        raise InputError(f"{path}: `heads` must be an object")
    return doc


def write_thresholds(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write a thresholds document atomically (checks ``format`` and ``version`` first)."""
    from det_calib.io import write_json

    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise InputError(f"Expected a thresholds document of format {FORMAT!r} version {VERSION}")
    return write_json(path, dict(doc))


def class_thresholds(doc: Mapping[str, Any] | str | Path, *, head: str = "nms",
                     criterion: Criterion = "target_precision") -> dict[int, float]:
    """``{class id: threshold}`` of one head and criterion of a thresholds document (or file)."""
    if not isinstance(doc, Mapping):
        doc = read_thresholds(doc)
    check_choice(criterion, CRITERIA, "criterion")
    heads = doc.get("heads", {})
    check_choice(head, sorted(heads), "head")
    rows = heads[head]["criteria"][criterion]["per_class"]
    return {int(r["cls"]): float(r["threshold"]) for r in rows}


def filter_results(results: Any, thresholds: Mapping[int, float], *, default: float | None = None) -> Any:
    """Keep, in Ultralytics ``Results``, the boxes whose conf is above their class's threshold.

    Run the calibrated checkpoint (``calibrated.pt``, whose conf is the calibrated score) with
    ``predict(conf=min(thresholds.values()))`` or lower, then filter::

        results = filter_results(YOLO("calibrated.pt").predict(src, conf=0.001), th)

    Args:
        results: One ``ultralytics.engine.results.Results`` or a list of them.
        thresholds: ``{class id: threshold}``; a box is kept when ``conf > threshold``.
        default: Threshold for classes not in ``thresholds``; None drops them.

    Returns:
        The same shape as ``results`` (a new ``Results`` per image).
    """
    table = dict(thresholds)
    single = not isinstance(results, (list, tuple))
    out = []
    for r in [results] if single else results:
        boxes = getattr(r, "boxes", None)
        if boxes is None or len(boxes) == 0:
            out.append(r)
            continue
        cls = boxes.cls.cpu().numpy().astype(np.int64)
        conf = boxes.conf.cpu().numpy().astype(np.float64)
        thr = np.array([table.get(int(c), np.inf if default is None else default) for c in cls], dtype=np.float64)
        keep = np.flatnonzero(kept_mask(conf, thr))
        out.append(r[keep])
    return out[0] if single else out


def summary_lines(doc: Mapping[str, Any], *, head: str = "nms") -> list[str]:
    """A short text table of one head's thresholds (what the CLI prints)."""

    def f(x: Any) -> str:
        return "  n/a" if x is None else f"{x:5.3f}"

    crit = doc["heads"][head]["criteria"]
    tp = crit["target_precision"]
    prm = tp["params"]
    ev_split = doc.get("splits", {}).get("eval")
    lines = [
        (f"head {head}: target precision {prm['target_precision']:g}, delta {prm['delta']:g} ({prm['unit']}-level), "
        f"fit on {doc.get('splits', {}).get('fit')}, checked on {ev_split}"),
        (f"{'class':<16} {'tgt-P thr':>9} {'fit P':>6} {'eval P':>6} {'eval R':>6} {'cover':>6}  "
        f"{'maxF1':>5} {'LRP':>5}  flag"),
    ]
    rows = [("(global)", tp["global"], crit["max_f1"]["global"], crit["lrp"]["global"])]
    f1 = {r["cls"]: r for r in crit["max_f1"]["per_class"]}
    lrp = {r["cls"]: r for r in crit["lrp"]["per_class"]}
    rows += [(r["name"], r, f1[r["cls"]], lrp[r["cls"]]) for r in tp["per_class"]]
    for name, r, a, b in rows:
        ev = r.get("eval") or {}
        flag = f"{r['flag']} -> {r['fallback']}" if r.get("flag") else ""
        lines.append(
            f"{name[:16]:<16} {r['threshold']:9.3f} {f(r['fit']['precision']):>6} {f(ev.get('precision')):>6} "
            f"{f(ev.get('recall')):>6} {f(ev.get('coverage')):>6}  {a['threshold']:5.3f} {b['threshold']:5.3f}  {flag}"
        )
    val = tp.get("validation")
    if val:
        lines.append(
            f"{val['classes_meeting_target']} of {val['certified_classes']} certified classes reach the target on "
            f"{ev_split} (about {val['expected_misses']:.1f} misses expected); coverage: fraction of {val['n_boot']} "
            "image-bootstrap resamples of the eval split at or above the target"
        )
    return lines

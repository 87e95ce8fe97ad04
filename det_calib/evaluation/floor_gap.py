"""Why a head's calibrated kept set stays above its sampling floor: a cheap per-run measurement.

When the calibrated kept-set ECE (the boxes kept at the lowest conf) is above its sampling floor's
95% range, :func:`floor_gap` says which of three things the eval split shows:

- ``images``: a few eval images (at most :data:`MAX_IMAGES`), each far from calibrated on its own
  (its kept boxes' correct count more than :data:`IMAGE_Z` binomial SDs from the sum of their
  calibrated confidences, with at least :data:`MIN_IMAGE_BOXES` kept), hold the gap: without them the
  ECE is inside the floor's range of the boxes left. No map of the score can fix them: their boxes
  score like correct ones, and the fit split had nothing like them.
- ``sampling``: the chosen map's method, fitted on the eval split's own boxes (an oracle), reaches
  the floor: a map of the score alone can, so the gap is the fit split's sampling noise (or how
  the two splits differ); more calibration images would close it.
- ``score``: even that oracle stays above the floor: no map of the score alone of that family
  reaches it (the rest depends on more than the score: class, size ...).

Measured per run (well under a second: per-image bin sums, one refit only when no images explain
it) and recorded as :class:`~det_calib.record.eval_record.FloorGap`; it changes no other figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_view import BoxView, kept_mask
from det_calib.errors import DegenerateFitError, InputError
from det_calib.metrics.binning import uniform_index
from det_calib.metrics.operating_point import kept_ece, kept_ece_floor
from det_calib.record.eval_record import FloorGap
from det_calib.selection.cross_validation import fit_calibrator

__all__ = ["outlier_images"]

_MAX_IMAGES = 3
"""At most this many eval images may explain a gap (more is the split, not a few images)."""

_IMAGE_Z = 4.0
"""An image is far from calibrated when its kept boxes' correct count is more than this many binomial
SDs (``sqrt(sum p (1 - p))``) from their expected count (the sum of their calibrated confidences)."""

_MIN_IMAGE_BOXES = 10
"""An image with fewer kept boxes is not counted as one that holds a gap."""


def outlier_images(
    conf: np.ndarray,
    correct: np.ndarray,
    image: np.ndarray,
    *,
    threshold: float,
    n_bins: int,
    floor_high: float,
    seed: int = 0,
) -> tuple[list[int], float | None, tuple[float, float] | None]:
    """The fewest eval images (at most :data:`MAX_IMAGES`, each far from calibrated) without which the
    kept-set ECE falls inside the sampling floor's range of the boxes left.

    Greedy: each step leaves out the qualifying image whose removal lowers the ECE most.

    Returns:
        ``(images, ece_without, floor_range_without)``; ``([], None, None)`` when no such set exists.

    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.3, 1.0, 2000); y = rng.random(2000) < p; img = np.arange(2000) // 10
    >>> p = np.r_[p, np.full(60, 0.97)]; y = np.r_[y, np.zeros(60, bool)]; img = np.r_[img, np.full(60, 999)]
    >>> outlier_images(p, y, img, threshold=0.25, n_bins=15, floor_high=0.0)[0]
    [999]
    """
    keep = kept_mask(conf, threshold)
    p, y, g = conf[keep], correct[keep].astype(np.float64), image[keep]
    if p.size == 0:
        return [], None, None
    ids, inv = np.unique(g, return_inverse=True)
    n_img = np.bincount(inv, minlength=ids.size)
    exp = np.bincount(inv, weights=p, minlength=ids.size)
    obs = np.bincount(inv, weights=y, minlength=ids.size)
    sd = np.sqrt(np.bincount(inv, weights=p * (1 - p), minlength=ids.size))
    z = np.abs(obs - exp) / np.maximum(sd, 1e-9)
    ok = (n_img >= _MIN_IMAGE_BOXES) & (z > _IMAGE_Z)
    if not ok.any():
        return [], None, None
    b = uniform_index(p, n_bins)
    cell = inv * n_bins + b  # per image and bin: boxes, conf sum, correct sum
    size = ids.size * n_bins
    n_ib = np.bincount(cell, minlength=size).reshape(ids.size, n_bins)
    c_ib = np.bincount(cell, weights=p, minlength=size).reshape(ids.size, n_bins)
    y_ib = np.bincount(cell, weights=y, minlength=size).reshape(ids.size, n_bins)
    tot_n, tot_c, tot_y = n_ib.sum(0), c_ib.sum(0), y_ib.sum(0)
    out: list[int] = []
    left = np.ones(p.size, dtype=bool)
    for _ in range(_MAX_IMAGES):
        cand = np.flatnonzero(ok)
        if cand.size == 0:
            break
        n_left = tot_n.sum() - n_ib[cand].sum(1)
        ece_wo = np.abs((tot_y - y_ib[cand]) - (tot_c - c_ib[cand])).sum(1) / np.maximum(n_left, 1)
        j = int(cand[np.argmin(ece_wo)])
        out.append(j)
        ok[j] = False
        tot_n, tot_c, tot_y = tot_n - n_ib[j], tot_c - c_ib[j], tot_y - y_ib[j]
        left &= inv != j
        if not left.any():
            break
        fl = kept_ece_floor(p[left], threshold=threshold, n_bins=n_bins, seed=seed)
        e = kept_ece(p[left], y[left], threshold=threshold, n_bins=n_bins)
        if fl is not None and e <= fl.high:
            return [int(ids[k]) for k in out], float(e), (fl.low, fl.high)
    return [], None, None


def _floor_gap(
    raw: BoxView,
    scored: BoxView,
    calibrator: LogitCalibrator | None,
    *,
    threshold: float,
    n_bins: int,
    floor_high: float,
    image_names: Sequence[str],
    method: str | None,
    fit_min_conf: float = 0.0,
    seed: int = 0,
) -> FloorGap | None:
    """Why the calibrated kept set of ``scored`` (the eval split under ``calibrator``) stays above its
    floor's range (``floor_high``, its upper end): see the module. ``raw``: the same boxes, raw scores
    (the oracle refits ``method`` on their logits); ``image_names``: the split's image names, by image id.
    None when the method is not one to refit (``none``) or the refit fails."""
    p, y, g = scored.conf, scored.correct, scored.image_id
    imgs, e_wo, rng = outlier_images(
        p, y, g, threshold=threshold, n_bins=n_bins, floor_high=floor_high, seed=seed
    )
    if imgs:
        kept = kept_mask(p, threshold) & np.isin(g, imgs)
        names = [image_names[i] if 0 <= i < len(image_names) else str(i) for i in imgs]
        return FloorGap(
            reason="images",
            images=", ".join(names),
            image_count=len(imgs),
            image_boxes=int(kept.sum()),
            image_correct=int(y[kept].sum()),
            kept_boxes=int(kept_mask(p, threshold).sum()),
            ece_without=e_wo,
            floor_without_range=rng,
        )
    if method is None or method == "none":
        return None

    try:
        cal = fit_calibrator(
            method,
            raw.logit,
            raw.correct,
            classes=raw.cls,
            groups=raw.image_id,
            fit_min_conf=fit_min_conf,
            seed=seed,
            log_area=raw.log_area,
        )
        q = raw.scored(cal).conf
    except (DegenerateFitError, InputError, ValueError):
        return None
    e = kept_ece(q, raw.correct, threshold=threshold, n_bins=n_bins)
    fl = kept_ece_floor(q, threshold=threshold, n_bins=n_bins, seed=seed)
    if fl is None or math.isnan(e):
        return None
    return FloorGap(
        reason="sampling" if e <= fl.high else "score",
        refit_method=method,
        refit_ece=float(e),
        refit_floor_range=(fl.low, fl.high),
    )


def head_floor_gap(
    op: Any,
    ev: Any,
    calibrator: LogitCalibrator | None,
    *,
    method: str | None,
    fit_min_conf: float,
    image_names: Sequence[str],
    target: str = "correct",
) -> FloorGap | None:
    """:func:`floor_gap` of one head's eval record ``ev`` (an :class:`~det_calib.record.eval_record.EvalResult`),
    from its operating-point evaluator ``op`` (:class:`~det_calib.evaluation.operating.OperatingPoints`, whose
    view is the eval boxes); None unless the calibrated ECE of the boxes kept at the lowest conf is above its
    floor's range (and for ``--target iou``, whose headline is LaECE_0)."""
    if target != "correct" or not ev.operating_after:
        return None
    o1 = ev.operating_after[0]
    if o1.ece is None or o1.ece_floor_range is None or o1.at_floor is not False:
        return None
    raw = op.view
    return _floor_gap(
        raw,
        raw.scored(calibrator),
        calibrator,
        threshold=float(o1.conf),
        n_bins=op.ece_bins,
        floor_high=float(o1.ece_floor_range[1]),
        image_names=image_names,
        method=method,
        fit_min_conf=fit_min_conf,
        seed=int(op.boot["seed"]),
    )

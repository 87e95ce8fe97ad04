"""Reliability by box size: kept-set ECE and LaECE_0 of each size bin
(:data:`det_calib.metrics.size_bins.SIZE_BINS`), raw and calibrated, with image-bootstrap intervals
(:func:`size_figures`; the ``by_size`` records of a run, :class:`~det_calib.record.size_record.SizeFigures`)."""

from __future__ import annotations

import math
import warnings

import numpy as np

from det_calib.data.box_view import BoxView, kept_mask
from det_calib.errors import InputError
from det_calib.evaluation.operating import OperatingPoints
from det_calib.metrics import calibration as metrics
from det_calib.metrics import group_ece_ci
from det_calib.metrics.size_bins import SIZE_BINS
from det_calib.record.size_record import SizeFigures

__all__ = ["size_figures"]


def _sizes(view: BoxView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if view.xyxy is None or "img_w" not in view.extra or "img_h" not in view.extra:
        raise InputError(
            "reliability by size needs the boxes' corners and image sizes (`img_w`, `img_h`)"
        )
    return view.xyxy, view.extra["img_w"], view.extra["img_h"]


def _kept_figures(
    op: OperatingPoints,
    scored: BoxView,
    m: np.ndarray,
    thr: float,
    ece: tuple[float, tuple | None],
) -> tuple[int, float | None, tuple | None, float | None, tuple | None]:
    """Kept boxes, kept-set ECE and its interval (``ece``: :func:`_kept_eces`'), LaECE_0 and its interval of
    the bin ``m`` under ``scored``."""
    p = scored.conf
    n = int((m & (p > thr)).sum())
    if not n:
        return 0, None, None, None, None
    targets = op.targets_for(scored).within(m)
    la = targets.laece(p, threshold=thr, n_bins=op.laece_bins)
    with (
        warnings.catch_warnings()
    ):  # a bin of few boxes has replicates that draw none of them: dropped, as said
        warnings.filterwarnings("ignore", message="bootstrap_ci: .* replicates gave nan")
        la_ci = tuple(
            metrics.bootstrap_ci(
                targets.statistic(threshold=thr, n_bins=op.laece_bins),
                scored.image_id,
                p,
                method="normal",
                **op.boot,
            )
        )
    ok = not math.isnan(la)
    return n, *ece, (la if ok else None), (la_ci if ok and not math.isnan(la_ci[0]) else None)


def _kept_eces(
    op: OperatingPoints,
    view: BoxView,
    members: list[np.ndarray],
    thr: float,
    population: np.ndarray,
) -> list[tuple[float, tuple | None]]:
    """Each bin's kept-set ECE (``conf > thr``) and its interval under ``view``'s scores, a scheme's bins at
    once from the draws of every image (:func:`~det_calib.metrics.bootstrap.group_ece_ci`)."""
    p, y, img = view.conf, view.correct, view.image_id
    keep = kept_mask(p, thr)
    out: list[tuple[float, tuple | None]] = [(float("nan"), None)] * len(SIZE_BINS)
    for scheme in dict.fromkeys(b.scheme for b in SIZE_BINS):
        idx = [i for i, b in enumerate(SIZE_BINS) if b.scheme == scheme]
        group = np.full(len(p), -1, dtype=np.int64)
        for j, i in enumerate(idx):
            group[members[i] & keep] = j
        sel = group >= 0
        est = np.array(
            [
                metrics.ece(p[group == j], y[group == j], n_bins=op.ece_bins)
                if (group == j).any()
                else np.nan
                for j in range(len(idx))
            ]
        )
        cis = group_ece_ci(
            p[sel], y[sel], group[sel], img[sel], population, est, n_bins=op.ece_bins, **op.boot
        )
        for j, i in enumerate(idx):
            out[i] = (float(est[j]), None if cis[j] is None else tuple(cis[j]))
    return out


def size_figures(op: OperatingPoints, scored: BoxView) -> list[SizeFigures]:
    """One :class:`SizeFigures` per size bin (:data:`~det_calib.metrics.size_bins.SIZE_BINS`): the
    bin's boxes kept at the lowest operating threshold, raw (``op.view``) and under ``scored``'s
    scores (the same boxes, :meth:`BoxView.scored`).

    A box's bin is its own (predicted) box's area; the bootstrap resamples the split's images, the
    draws of its own intervals: the ECE's sees the bin's boxes of the images drawn (a bin's number of
    images varies as in a new split), LaECE_0's every image, as its matching spans them.
    """
    raw = op.view
    xyxy, w, h = _sizes(raw)
    thr = min(op.conf)
    population = raw.image_id  # the split's own intervals draw its images
    members = [b.mask(xyxy, w, h) for b in SIZE_BINS]
    eces = (
        _kept_eces(op, raw, members, thr, population),
        _kept_eces(op, scored, members, thr, population),
    )
    out = []
    for i, (b, m) in enumerate(zip(SIZE_BINS, members)):
        n0, e0, e0_ci, l0, l0_ci = _kept_figures(op, raw, m, thr, eces[0][i])
        n1, e1, e1_ci, l1, l1_ci = _kept_figures(op, scored, m, thr, eces[1][i])
        out.append(
            SizeFigures(
                scheme=b.scheme,
                bin=b.name,
                lo=b.lo,
                hi=None if math.isinf(b.hi) else b.hi,
                conf=thr,
                boxes_before=n0,
                boxes_after=n1,
                ece_before=e0,
                ece_before_ci=e0_ci,
                ece_after=e1,
                ece_after_ci=e1_ci,
                laece0_before=l0,
                laece0_before_ci=l0_ci,
                laece0_after=l1,
                laece0_after_ci=l1_ci,
            )
        )
    return out

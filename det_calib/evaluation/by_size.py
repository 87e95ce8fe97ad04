"""Reliability by box size: kept-set ECE and LaECE_0 of each size bin
(:data:`det_calib.metrics.size_bins.SIZE_BINS`), raw and calibrated, with image-bootstrap intervals
(:func:`size_figures`; the ``by_size`` records of a run, :class:`~det_calib.record.size_record.SizeFigures`)."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from det_calib.data.box_view import BoxView
from det_calib.errors import InputError
from det_calib.evaluation.operating import OperatingPoints
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import kept_ece
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
    op: OperatingPoints, scored: BoxView, m: np.ndarray, thr: float
) -> tuple[int, float | None, tuple | None, float | None, tuple | None]:
    """Kept boxes, kept-set ECE and its interval, LaECE_0 and its interval of the bin ``m`` under ``scored``."""
    p, y, img = scored.conf, scored.correct, scored.image_id
    keep = m & (p > thr)
    n = int(keep.sum())
    if not n:
        return 0, None, None, None, None
    e = metrics.ece(p[keep], y[keep], n_bins=op.ece_bins)
    fn = functools.partial(kept_ece, threshold=thr, n_bins=op.ece_bins)
    targets = op.targets_for(scored).within(m)
    la = targets.laece(p, threshold=thr, n_bins=op.laece_bins)
    with (
        warnings.catch_warnings()
    ):  # a bin of few boxes has replicates that draw none of them: dropped, as said
        warnings.filterwarnings("ignore", message="bootstrap_ci: .* replicates gave nan")
        e_ci = tuple(metrics.bootstrap_ci(fn, img[m], p[m], y[m], estimate=e, **op.boot))
        la_ci = tuple(
            metrics.bootstrap_ci(
                targets.statistic(threshold=thr, n_bins=op.laece_bins),
                img,
                p,
                method="normal",
                **op.boot,
            )
        )
    ok = not math.isnan(la)
    return n, e, e_ci, (la if ok else None), (la_ci if ok and not math.isnan(la_ci[0]) else None)


def size_figures(op: OperatingPoints, scored: BoxView) -> list[SizeFigures]:
    """One :class:`SizeFigures` per size bin (:data:`~det_calib.metrics.size_bins.SIZE_BINS`): the
    bin's boxes kept at the lowest operating threshold, raw (``op.view``) and under ``scored``'s
    scores (the same boxes, :meth:`BoxView.scored`).

    A box's bin is its own (predicted) box's area; the bootstrap resamples images (the ECE's, the
    images with boxes in the bin; LaECE_0's, every image, as its matching spans them).
    """
    raw = op.view
    xyxy, w, h = _sizes(raw)
    thr = min(op.conf)
    out = []
    for b in SIZE_BINS:
        m = b.mask(xyxy, w, h)
        n0, e0, e0_ci, l0, l0_ci = _kept_figures(op, raw, m, thr)
        n1, e1, e1_ci, l1, l1_ci = _kept_figures(op, scored, m, thr)
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

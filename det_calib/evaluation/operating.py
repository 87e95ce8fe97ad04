"""Figures of any calibrator's scores at the operating points of one head's eval-split boxes:
:class:`OperatingPoints` (kept-set ECE and LaECE_0 with the reference conventions, with
bias-corrected bootstrap intervals and both figures' sampling floors; all-box ECE, NLL and
Brier; per-class kept-set ECE).
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_view import BoxView, kept_mask
from det_calib.data.ground_truth import Split
from det_calib.errors import InputError
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import (
    LaECE0Targets,
    kept_ece,
    kept_ece_floor,
    kept_laece_floor,
)
from det_calib.record.eval_record import OperatingFigures

__all__ = ["OperatingPoints", "iou_target", "laece0_targets"]


def laece0_targets(view: BoxView, gt: pl.DataFrame) -> LaECE0Targets:
    """The matching behind kept-set LaECE_0 of a head's boxes (``view``: raw, with geometry) against
    a split's ground truth ``gt``: greedy by raw score at IoU >= 0, crowd matches excluded."""
    if view.xyxy is None:
        raise InputError(
            "the LaECE_0 matching needs the boxes' corners (a view built with geometry=True)"
        )
    crowd = gt["crowd"].to_numpy() if "crowd" in gt.columns else None
    return LaECE0Targets(
        view.image_id,
        view.xyxy,
        view.cls,
        view.raw_logit,
        gt["image_id"].to_numpy(),
        np.column_stack([gt[c].to_numpy() for c in ("x1", "y1", "x2", "y2")]),
        gt["cls"].to_numpy(),
        crowd,
    )


def iou_target(view: BoxView, gt: pl.DataFrame) -> np.ndarray:
    """The ``--target iou`` label of each box of ``view`` (float64 in [0, 1]): the IoU of its match in
    the LaECE_0 matching (:func:`laece0_targets`: the best still-free same-class ground truth in
    descending raw score, whatever its IoU), 0 when it matches none. For the boxes kept at any
    threshold it is exactly the target kept-set LaECE_0 scores them against."""
    return np.asarray(laece0_targets(view, gt).target, dtype=np.float64)


def _digest(*arrays: np.ndarray) -> tuple:
    """A key of the arrays' contents: dtype, shape and a 128-bit hash of the bytes of each."""
    return tuple(
        (
            a.dtype.str,
            a.shape,
            hashlib.blake2b(np.ascontiguousarray(a).data, digest_size=16).digest(),
        )
        for a in arrays
    )


class OperatingPoints:
    """Scores of any calibrator on one head's eval-split boxes, at the operating points.

    Args:
        view: The head's eval boxes (:class:`~det_calib.data.box_view.BoxView`, raw, with geometry).
        gt: The split's ground truth.
        conf: Operating thresholds; ``ece_bins``/``laece_bins``: bins (15 / 25 by default).
        n_boot, seed: Bootstrap, images resampled. Intervals (95%): kept-set and all-box ECE the
            bias-corrected percentile interval; LaECE_0 the normal interval (estimate -+ 1.96 SD
            of the replicates): its replicates sit above the estimate by more than their spread
            (a class average over small per-class sets), so no percentile-type interval contains it.
    """

    def __init__(
        self,
        view: BoxView,
        gt: pl.DataFrame,
        *,
        conf: tuple[float, ...],
        ece_bins: int,
        laece_bins: int,
        n_boot: int,
        seed: int,
    ):
        self.view = view
        self.targets = laece0_targets(view, gt)
        self.conf, self.ece_bins, self.laece_bins = tuple(conf), ece_bins, laece_bins
        self.boot = dict(n_boot=n_boot, seed=seed)
        self.gt = gt
        self._reranked: tuple[np.ndarray, LaECE0Targets] | None = (
            None  # the last re-ranked scores' matching
        )
        # the figures of the scores seen so far, by a digest of the scores (a run asks for the same
        # scores more than once: the raw scores and the deployed map in the head's record, and again
        # among ``auto``'s candidates)
        self._seen: dict[tuple, list[OperatingFigures]] = {}

    @classmethod
    def of_boxes(cls, boxes: pl.DataFrame, split: Split, s: Any) -> OperatingPoints:
        """The evaluator of one head's eval boxes of ``split`` (their :class:`BoxView`, built once
        here), with the run's operating points, bins and bootstrap (``s``: the run's settings,
        :class:`~det_calib.evaluation.figures.EvalSettings`)."""
        view = BoxView.from_boxes(boxes, extra=("img_w", "img_h"))
        return cls(
            view,
            split.gt,
            conf=tuple(s.conf),
            ece_bins=s.ece_bins,
            laece_bins=s.laece_bins,
            n_boot=s.n_boot,
            seed=s.seed,
        )

    def targets_for(self, scored: BoxView) -> LaECE0Targets:
        """The LaECE_0 matching of ``scored``'s scores: the raw scores' (:attr:`targets`) for any map
        that keeps each class's ranking; for a map that reads the box's size (it re-ranks boxes of
        one class), the matching redone in the order of its scores (greedy by score, as the
        reference toolkit matches the boxes it is given)."""
        cal = scored.calibrator
        if cal is None or not cal.uses_size:
            return self.targets
        if self._reranked is None or self._reranked[0] is not scored.conf:
            gt, v = self.gt, self.view
            crowd = gt["crowd"].to_numpy() if "crowd" in gt.columns else None
            self._reranked = (
                scored.conf,
                LaECE0Targets(
                    v.image_id,
                    v.xyxy,
                    v.cls,
                    scored.conf,
                    gt["image_id"].to_numpy(),
                    np.column_stack([gt[c].to_numpy() for c in ("x1", "y1", "x2", "y2")]),
                    gt["cls"].to_numpy(),
                    crowd,
                ),
            )
        return self._reranked[1]

    def operating(self, scored: BoxView, *, intervals: bool = True) -> list[OperatingFigures]:
        """Kept-set ECE and LaECE_0 at each threshold (with intervals), and their sampling floors, of
        the boxes under ``scored``'s scores (the view, raw or :meth:`~BoxView.scored`).

        The figures depend on nothing but the scores, the view's boxes and the settings (the bootstrap
        and the floors are seeded): scores equal to ones already scored here (bit for bit) get the
        figures computed then."""
        cal = scored.calibrator
        key = (
            _digest(scored.conf, scored.correct, scored.image_id),
            cal is not None and cal.uses_size,  # re-ranked LaECE_0 matching (:meth:`targets_for`)
            intervals,
        )
        if key not in self._seen:
            self._seen[key] = self._operating(scored, intervals=intervals)
        return list(self._seen[key])

    def _operating(self, scored: BoxView, *, intervals: bool) -> list[OperatingFigures]:
        p, y, img = scored.conf, scored.correct, scored.image_id
        out = []
        for thr in self.conf:
            m = kept_mask(p, thr)  # the kept boxes' scores and labels (no other column is read)
            n = int(m.sum())
            kept_y = y[m]
            e = metrics.ece(p[m], kept_y, n_bins=self.ece_bins) if n else None
            targets = self.targets_for(scored)
            la = targets.laece(p, threshold=thr, n_bins=self.laece_bins)
            e_ci = la_ci = None
            if intervals and n:
                fn = functools.partial(kept_ece, threshold=thr, n_bins=self.ece_bins)
                e_ci = tuple(metrics.bootstrap_ci(fn, img, p, y, estimate=e, **self.boot))
                la_ci = tuple(
                    metrics.bootstrap_ci(
                        targets.statistic(threshold=thr, n_bins=self.laece_bins),
                        img,
                        p,
                        method="normal",
                        **self.boot,
                    )
                )
            floor = (
                kept_ece_floor(p, threshold=thr, n_bins=self.ece_bins, seed=self.boot["seed"])
                if n
                else None
            )
            la_floor = (
                kept_laece_floor(
                    targets, p, threshold=thr, n_bins=self.laece_bins, seed=self.boot["seed"]
                )
                if n and not math.isnan(la)
                else None
            )
            out.append(
                OperatingFigures(
                    conf=thr,
                    boxes=n,
                    correct=int(kept_y.sum()),
                    ece=e,
                    ece_ci=e_ci,
                    laece0=None if math.isnan(la) else la,
                    laece0_ci=None if la_ci is None or math.isnan(la_ci[0]) else la_ci,
                    ece_floor=None if floor is None else floor.mean,
                    ece_floor_range=None if floor is None else (floor.low, floor.high),
                    laece_floor=None if la_floor is None else la_floor.mean,
                    laece_floor_range=None if la_floor is None else (la_floor.low, la_floor.high),
                )
            )
        return out

    def all_box(self, scored: BoxView) -> dict[str, Any]:
        """All-box ECE (with its interval), NLL (from the scored logits) and Brier."""
        p, y = scored.conf, scored.correct
        fn = functools.partial(metrics.ece, n_bins=self.ece_bins)
        e = metrics.ece(p, y, n_bins=self.ece_bins)
        return {
            "ece_all": e,
            "ece_all_ci": tuple(
                metrics.bootstrap_ci(fn, scored.image_id, p, y, estimate=e, **self.boot)
            ),
            "nll": metrics.nll_logits(scored.logit, y),
            "brier": metrics.brier(p, y),
        }

    def class_kept_ece(self, scored: BoxView) -> dict[int, float]:
        """Class -> ECE of its boxes kept at the lowest threshold (classes with kept boxes)."""
        keep = kept_mask(scored.conf, min(self.conf))
        cls, conf, y = scored.cls[keep], scored.conf[keep], scored.correct[keep]
        out = {}
        for c in np.unique(cls):  # the classes with kept boxes, in order
            m = cls == c
            out[int(c)] = metrics.ece(conf[m], y[m], n_bins=self.ece_bins)
        return out

    def candidate_figures(self, calibrator: LogitCalibrator | None) -> dict[str, Any]:
        """Every figure of the comparison: operating points, all-box ECE, NLL, Brier, per-class kept ECE."""
        scored = self.view.scored(calibrator)
        return {
            "operating": [o.to_dict() for o in self.operating(scored)],
            **self.all_box(scored),
            "class_kept_ece": {str(c): v for c, v in self.class_kept_ece(scored).items()},
        }

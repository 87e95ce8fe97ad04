"""The fit and operating-point steps of a calibration run: choose and fit a head's calibrator,
and score calibrators where decisions are made (the boxes kept at each ``--conf``).

- :func:`fit_floors` — the fit range(s) a run's settings ask for
- :func:`choose_calibrator` — one method on its fit range, or ``auto``: cross-validated choice
- :func:`~det_calib.record.run_result.calibrator_record` / :func:`~det_calib.record.run_result.calibrator_of`
  — a fitted calibrator <-> its :class:`~det_calib.record.run_result.Calibrator` record in ``calibration.json``
- :class:`OperatingEval` — kept-set ECE and LaECE_0 (reference conventions) with bias-corrected
  bootstrap intervals, all-box ECE, NLL and Brier of any calibrator on the eval split
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators import registry
from det_calib.calibrators.base import calibrated_logits, deployed_conf
from det_calib.errors import InputError
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import LaECE0Targets, kept_ece_floor
from det_calib.record.run_result import Calibrator, Candidate, OperatingFigures
from det_calib.selection.cross_validation import Selection, fit_calibrator, select_calibrator

log = logging.getLogger(__name__)

__all__ = ["FIT_RANGES", "OperatingEval", "calibration_methods", "choose_calibrator", "fit_floors", "method_help",
           "per_class_help"]


def calibration_methods() -> tuple[str, ...]:
    """Values of ``--method``: every registered method but ``none``, then ``auto``."""
    return (*(m for m in registry.methods() if m != "none"), "auto")


def _words(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def method_help() -> str:
    """The help of ``--method`` (the registered methods)."""
    glob = registry.global_methods()
    named = [m for m in glob if m != "none"] + [m for m in registry.methods() if registry.is_per_class(m)]
    return (f"calibration map: auto (default: chosen per head by cross-validation grouped by image among "
            f"{_words(glob)}, the maps that keep every box's ranking; `none` keeps the raw scores), or one by "
            f"name: {', '.join(named)}")


def per_class_help() -> str:
    """The help of ``--per-class`` (the registered per-class methods)."""
    per = ", ".join(m for m in registry.methods() if registry.is_per_class(m))
    return (f"let --method auto also consider the per-class maps ({per}; they can change which class wins a box, "
            "see the mAP promise)")


FIT_RANGES: tuple[str, ...] = ("all", "operating")


def fit_floors(method: str, fit_range: str | None, fit_min_conf: float | None, conf: tuple[float, ...]
               ) -> tuple[float, ...]:
    """Fit floors (raw conf above which boxes are fitted on; 0.0 = every box) for the settings.

    ``fit_range``: ``"all"`` (0.0), ``"operating"`` (half the lowest ``conf``: the boxes a user
    keeps, with a margin for boxes the map may lift over the threshold), or a number in [0, 1).
    None: ``all`` for one method; ``--method auto`` tries ``all`` and ``operating``.
    ``fit_min_conf`` (the older option) is the same as a numeric ``fit_range``.
    """
    operating = round(min(conf) / 2, 6)
    if fit_min_conf is not None:
        if fit_range is not None:
            raise InputError("give `fit_range` or `fit_min_conf`, not both (`fit_min_conf` X is `fit_range` X)")
        fit_range = str(fit_min_conf)
    if fit_range is None:
        return (0.0, operating) if method == "auto" else (0.0,)
    if fit_range == "all":
        return (0.0,)
    if fit_range == "operating":
        return (operating,)
    try:
        v = float(fit_range)
    except ValueError:
        raise InputError(
            f"Expected `fit_range` to be all, operating or a conf in [0, 1), but got {fit_range!r}"
        ) from None
    if not 0 <= v < 1:
        raise InputError(f"Expected `fit_range` to be all, operating or a conf in [0, 1), but got {fit_range!r}")
    return (v,)


@dataclass
class Choice:
    """A head's fitted calibrator and how it was chosen."""

    method: str
    floor: float
    calibrator: Any
    selection: Selection | None = None
    refits: dict[str, tuple[str, float, Any]] | None = None  # candidate name -> (method, floor, fitted)


def choose_calibrator(fit_boxes: pl.DataFrame, *, method: str, floors: tuple[float, ...], criterion: str,
                      min_conf: float, n_folds: int, seed: int, n_repeats: int = 5,
                      methods: tuple[str, ...] | None = None) -> Choice:
    """Fit ``method`` on ``fit_boxes`` (not crowd-matched), or choose by CV with ``auto``
    among ``methods`` (default the maps that keep every box's ranking,
    :func:`~det_calib.calibrators.registry.global_methods`).

    One method: ``fit_boxes`` are already its fit range (above ``floors[0]``, by the caller's
    rule); ``floors[0]`` is recorded and shapes the map below it. ``auto`` applies each floor itself.

    With ``auto`` every candidate's best version (its own fit floor, its CV shrinkage) is also
    refitted on the whole fit split, so the eval split can compare them all.
    """
    b = fit_boxes
    z, y = b["logit"].to_numpy().astype(np.float64), b["correct"].to_numpy()
    k, g = b["cls"].to_numpy().astype(np.int64), b["image_id"].to_numpy()
    if method != "auto":
        cal = fit_calibrator(method, z, y, classes=k, groups=g, fit_min_conf=floors[0], seed=seed, in_range=True)
        return Choice(method, floors[0], cal)
    methods = registry.global_methods() if methods is None else methods
    sel = select_calibrator(z, y, classes=k, groups=g, methods=methods, fit_min_confs=floors, min_conf=min_conf,
                            criterion=criterion, n_folds=n_folds, n_repeats=n_repeats, seed=seed)
    refits: dict[str, tuple[str, float, Any]] = {}
    for m in registry.methods():
        ok = [c for c in sel.candidates if c.method == m and c.error is None and math.isfinite(c.mean)]
        if not ok:
            continue
        c = sel.chosen if sel.chosen.method == m else min(ok, key=lambda c: c.mean)
        if c is sel.chosen:
            refits[m] = (m, c.fit_min_conf, sel.calibrator)
            continue
        from det_calib.selection.cross_validation import _refit

        refits[m] = (m, c.fit_min_conf, _refit(c, z, y, k, g, seed))
    return Choice(sel.chosen.method, sel.chosen.fit_min_conf, sel.calibrator, sel, refits)


def candidates_of(choice: Choice) -> list[Candidate]:
    """The CV table of an ``auto`` choice as records (every method x fit floor tried)."""
    sel = choice.selection
    if sel is None:
        return []
    out = []
    for c in sel.candidates:
        params: dict[str, Any] = {"fit_min_conf": c.fit_min_conf, "cv_se": _num(c.se),
                                  "cv_diff": _num(c.diff), "cv_diff_se": _num(c.diff_se),
                                  "cv_diff_none": _num(c.diff_none), "cv_diff_none_se": _num(c.diff_none_se),
                                  "verdict": c.verdict or None,
                                  "fold_scores": [_num(v) for v in c.fold_scores], "criterion": sel.criterion,
                                  "min_conf": sel.min_conf, "n_folds": sel.n_folds, "n_repeats": sel.n_repeats}
        if c.shrinkage is not None:
            params["shrinkage"] = _num(c.shrinkage)
        if c.error:
            params["error"] = c.error
        out.append(Candidate(Calibrator(c.method, params), _num(c.mean),
                             selected=(c.method, c.fit_min_conf) == (sel.chosen.method, sel.chosen.fit_min_conf)))
    return out


def _num(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


class OperatingEval:
    """Scores of any calibrator on one head's eval-split boxes, at the operating points.

    Args:
        boxes: The head's eval boxes (matched table, crowd-matched ones included; they are left out).
        gt: The split's ground truth.
        conf: Operating thresholds; ``ece_bins``/``laece_bins``: bins (15 / 25 by default).
        n_boot, seed: Bootstrap, images resampled. Intervals (95%): kept-set and all-box ECE the
            bias-corrected percentile interval; LaECE_0 the normal interval (estimate -+ 1.96 SD
            of the replicates): its replicates sit above the estimate by more than their spread
            (a class average over small per-class sets), so no percentile-type interval contains it.
    """

    def __init__(self, boxes: pl.DataFrame, gt: pl.DataFrame, *, conf: tuple[float, ...], ece_bins: int,
                 laece_bins: int, n_boot: int, seed: int):
        keep = ~boxes["ignore"].to_numpy()
        b = boxes.filter(pl.Series(keep))
        self.z = b["logit"].to_numpy().astype(np.float64)
        self.raw = b["conf"].to_numpy().astype(np.float64)  # what Ultralytics reports (float32 sigmoid)
        self.y = b["correct"].to_numpy().astype(bool)
        self.cls = b["cls"].to_numpy().astype(np.int64)
        self.img = b["image_id"].to_numpy()
        xy = np.column_stack([b[c].to_numpy() for c in ("x1", "y1", "x2", "y2")])
        crowd = gt["crowd"].to_numpy() if "crowd" in gt.columns else None
        self.targets = LaECE0Targets(self.img, xy, self.cls, self.z, gt["image_id"].to_numpy(),
                                     np.column_stack([gt[c].to_numpy() for c in ("x1", "y1", "x2", "y2")]),
                                     gt["cls"].to_numpy(), crowd)
        self.conf, self.ece_bins, self.laece_bins = tuple(conf), ece_bins, laece_bins
        self.boot = dict(n_boot=n_boot, seed=seed)

    def probs(self, cal: Any | None) -> tuple[np.ndarray, np.ndarray]:
        """``(logits, conf)`` of the boxes under ``cal`` (None or ``none``: the raw conf itself)."""
        if cal is None:
            return self.z, self.raw
        return calibrated_logits(cal, self.z, self.cls), deployed_conf(cal, self.z, self.cls, self.raw)

    def operating(self, p: np.ndarray, *, intervals: bool = True) -> list[OperatingFigures]:
        """Kept-set ECE and LaECE_0 at each threshold (with intervals), and the kept-set ECE's sampling floor."""
        out = []
        for thr in self.conf:
            kept = p > thr
            n = int(kept.sum())
            e = metrics.ece(p[kept], self.y[kept], n_bins=self.ece_bins) if n else None
            la = self.targets.laece(p, threshold=thr, n_bins=self.laece_bins)
            e_ci = la_ci = None
            if intervals and n:
                from det_calib.metrics.operating_point import kept_ece

                fn = functools.partial(kept_ece, threshold=thr, n_bins=self.ece_bins)
                e_ci = tuple(metrics.bootstrap_ci(fn, self.img, p, self.y, **self.boot))
                la_ci = tuple(metrics.bootstrap_ci(self.targets.statistic(threshold=thr, n_bins=self.laece_bins),
                                                   self.img, p, method="normal", **self.boot))
            floor = kept_ece_floor(p, threshold=thr, n_bins=self.ece_bins, seed=self.boot["seed"]) if n else None
            out.append(OperatingFigures(conf=thr, boxes=n, correct=int(self.y[kept].sum()), ece=e, ece_ci=e_ci,
                                        laece0=None if math.isnan(la) else la,
                                        laece0_ci=None if la_ci is None or math.isnan(la_ci[0]) else la_ci,
                                        ece_floor=None if floor is None else floor.mean,
                                        ece_floor_range=None if floor is None else (floor.low, floor.high)))
        return out

    def all_box(self, t: np.ndarray, p: np.ndarray) -> dict[str, Any]:
        fn = functools.partial(metrics.ece, n_bins=self.ece_bins)
        return {"ece_all": metrics.ece(p, self.y, n_bins=self.ece_bins),
                "ece_all_ci": tuple(metrics.bootstrap_ci(fn, self.img, p, self.y, **self.boot)),
                "nll": metrics.nll_logits(t, self.y), "brier": metrics.brier(p, self.y)}

    def class_kept_ece(self, p: np.ndarray) -> dict[int, float]:
        """Class -> ECE of its boxes kept at the lowest threshold (classes with kept boxes)."""
        thr = min(self.conf)
        out = {}
        for c in np.unique(self.cls):
            m = (self.cls == c) & (p > thr)
            if m.any():
                out[int(c)] = metrics.ece(p[m], self.y[m], n_bins=self.ece_bins)
        return out

    def candidate_figures(self, cal: Any | None) -> dict[str, Any]:
        """Every figure of the comparison: operating points, all-box ECE, NLL, Brier, per-class kept ECE."""
        t, p = self.probs(cal)
        return {"operating": [o.to_dict() for o in self.operating(p)], **self.all_box(t, p),
                "class_kept_ece": {str(c): v for c, v in self.class_kept_ece(p).items()}}

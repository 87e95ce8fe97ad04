"""The fit and operating-point steps of a calibration run: choose and fit a head's calibrator,
and score calibrators where decisions are made (the boxes kept at each ``--conf``).

- :func:`fit_floors` — the fit range(s) a run's settings ask for
- :func:`choose_calibrator` — one method on its fit range, or ``auto``: cross-validated choice
- :func:`calibrator_record` / :func:`calibrator_of` — a fitted calibrator <-> its
  :class:`~det_calib.record.run_result.Calibrator` record in ``calibration.json``
- :class:`OperatingEval` — kept-set ECE and LaECE_0 (reference conventions) with bias-corrected
  bootstrap intervals, all-box ECE, NLL and Brier of any calibrator on the eval split

A calibrator's record: the temperature method is ``Calibrator("temperature", {"temperature": T})``
(written as ``temperature: {head: T}``, as always); any other method is
``Calibrator(method, {"fit_min_conf": floor, "map": <the calibrator's to_dict()>})``.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.affine import ClassAffineScaler
from det_calib.calibrators.isotonic import ClassIsotonicCalibrator
from det_calib.errors import InputError
from det_calib.evaluation.kept_set import equivalent_threshold
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import LaECE0Targets, kept_ece_floor
from det_calib.record.run_result import Calibrator, Candidate, OperatingFigures
from det_calib.selection.cross_validation import (
    GLOBAL_METHODS,
    METHODS,
    Identity,
    Selection,
    TemperatureCalibrator,
    calibrator_from_dict,
    fit_calibrator,
    select_calibrator,
)

log = logging.getLogger(__name__)

__all__ = ["CALIBRATION_METHODS", "FIT_RANGES", "GLOBAL_METHODS", "OperatingEval", "calibrated_logits", "deployed_conf",
           "calibrator_of", "calibrator_record", "choose_calibrator", "equivalent_conf", "fit_floors"]

CALIBRATION_METHODS: tuple[str, ...] = (*(m for m in METHODS if m != "none"), "auto")
"""Values of ``--method``."""
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


def calibrator_record(cal: Any, method: str, floor: float) -> Calibrator:
    """The :class:`Calibrator` record of a fitted calibrator (see the module docstring)."""
    if method == "temperature":
        return Calibrator.temperature_scaling(float(cal.temperature_))
    return Calibrator(method, {"fit_min_conf": float(floor), "map": cal.to_dict()})


def calibrator_of(rec: Calibrator) -> Any:
    """The fitted calibrator of a record (``transform_logits(z, classes=...)``)."""
    if rec.method == "temperature":
        t = TemperatureCalibrator.__new__(TemperatureCalibrator)
        t.min_samples = 10
        from det_calib.calibrators.temperature import TemperatureScaler

        sc = TemperatureScaler(kind="sigmoid")
        sc.temperature_ = float(rec.params["temperature"])
        t.scaler_, t.temperature_ = sc, sc.temperature_
        return t
    if rec.method == "none":
        return Identity().fit(None, None)
    m = rec.params.get("map")
    if not isinstance(m, dict):
        raise InputError(f"calibrator {rec.method!r} has no `map` parameters")
    return calibrator_from_dict(m)


def calibrated_logits(cal: Any, z: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Calibrated logits of boxes (``z`` raw logits, ``cls`` their classes); a temperature divides
    exactly as :func:`det_calib.metrics.sigmoid` does (the figures of earlier versions, bit for bit)."""
    if isinstance(cal, TemperatureCalibrator):
        return np.asarray(z, dtype=np.float64) / float(cal.temperature_)
    return np.asarray(cal.transform_logits(np.asarray(z, dtype=np.float64), classes=np.asarray(cls)), dtype=np.float64)


def deployed_conf(cal: Any, z: np.ndarray, cls: np.ndarray, raw_conf: np.ndarray) -> np.ndarray:
    """The conf each box gets under ``cal`` (float64): ``sigmoid`` of its calibrated logit, or
    under ``none`` the raw ``conf`` itself (what Ultralytics reports, float32), not ``sigmoid(z)``
    in float64, which can keep one more box at a threshold placed exactly on a score.

    >>> deployed_conf(Identity().fit(None, None), np.array([0.0]), np.array([0]), np.array([0.5], np.float32)).tolist()
    [0.5]
    """
    if isinstance(cal, Identity):
        return np.asarray(raw_conf, dtype=np.float64)
    return metrics.sigmoid(calibrated_logits(cal, z, cls), 1.0)


def equivalent_conf(cal: Any, conf: float, cls: int | None = None) -> float | None:
    """The calibrated threshold that keeps exactly the boxes whose raw conf is above ``conf``.

    It is the calibrated conf of a box whose raw conf is ``conf``, provided the map is strictly
    increasing from there (every box scored higher raw is scored higher calibrated). Every map of
    :data:`~det_calib.selection.cross_validation.METHODS` is (the isotonic maps too: their steps are made strictly
    increasing); a map found flat just above ``conf`` (a probe step of 1e-7 in logit) gets None,
    as there is no such threshold. A per-class map has one per class (``cls``); over all classes, None.

    >>> equivalent_conf(Identity().fit(None, None), 0.25)
    0.25
    """
    if not 0 < conf < 1:
        return None
    if isinstance(cal, TemperatureCalibrator):
        return equivalent_threshold(conf, float(cal.temperature_))  # the figures of earlier runs, bit for bit
    if isinstance(cal, Identity):
        return float(conf)
    if isinstance(cal, (ClassAffineScaler, ClassIsotonicCalibrator)) and cls is None:
        return None
    z = math.log(conf) - math.log1p(-conf)
    zz = np.array([z, z + 1e-7 * max(1.0, abs(z))])
    t = calibrated_logits(cal, zz, np.full(2, 0 if cls is None else int(cls), dtype=np.int64))
    if not t[1] > t[0]:
        return None
    return float(metrics.sigmoid(t[:1], 1.0)[0])


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
                      methods: tuple[str, ...] = GLOBAL_METHODS) -> Choice:
    """Fit ``method`` on ``fit_boxes`` (not crowd-matched), or choose by CV with ``auto``
    among ``methods`` (default the maps that keep every box's ranking, :data:`GLOBAL_METHODS`).

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
    sel = select_calibrator(z, y, classes=k, groups=g, methods=methods, fit_min_confs=floors, min_conf=min_conf,
                            criterion=criterion, n_folds=n_folds, n_repeats=n_repeats, seed=seed)
    refits: dict[str, tuple[str, float, Any]] = {}
    for m in METHODS:
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
        if cal is None or isinstance(cal, Identity):
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

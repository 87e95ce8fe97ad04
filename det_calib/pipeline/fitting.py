"""The fit and operating-point steps of a calibration run: choose and fit a head's calibrator,
and score calibrators where decisions are made (the boxes kept at each ``--conf``).

- :func:`choose_calibrator` — one method on its fit range, or ``auto``: cross-validated choice, fitted to
  the run's target (:func:`fit_labels`: the matched flag, or with ``--target iou`` the IoU of each box's
  LaECE_0 match, a soft label carried by the :func:`fit_boxes` view)
- :meth:`~det_calib.record.calibrator_record.Calibrator.of_fitted` /
  :func:`~det_calib.record.calibrator_record.calibrator_of`
  — a fitted calibrator <-> its :class:`~det_calib.record.run_result.Calibrator` record in ``calibration.json``
- :func:`temperature_fit`, :func:`candidates` — the classic temperature and ``auto``'s candidates
  scored on the eval split (:class:`~det_calib.evaluation.operating.OperatingPoints`)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators import registry
from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.data.box_view import BoxView
from det_calib.data.ground_truth import (
    Split,
)
from det_calib.errors import InputError
from det_calib.evaluation.operating import OperatingPoints, iou_target
from det_calib.job.settings import Settings
from det_calib.metrics import calibration as metrics
from det_calib.numeric import sigmoid
from det_calib.record.run_result import (
    Calibrator,
    CandidateRecord,
    EvalResult,
    FitResult,
    TemperatureFit,
)
from det_calib.selection.cross_validation import Selection, fit_calibrator, refit, select_calibrator

_log = logging.getLogger(__name__)

__all__ = [
    "choose_calibrator",
    "fit_head",
    "fit_result",
    "temperature_fit",
]


@dataclass
class Choice:
    """A head's fitted calibrator and how it was chosen."""

    method: str
    floor: float
    calibrator: LogitCalibrator
    selection: Selection | None = None
    refits: dict[str, tuple[str, float, LogitCalibrator]] | None = (
        None  # candidate name -> (method, floor, fitted)
    )

    def words(self) -> str:
        """The calibrator and why it was chosen, in words: the console's line (``calibration.json``
        and the report keep the selection's reason with the short candidate names,
        ``temperature@0.125``)."""
        if self.selection is None:
            return _fit_range_words(self.method, self.floor)
        reason = _in_words(self.selection.reason)
        if self.method == "none" and reason.startswith("none: "):
            return "keep the raw scores: " + reason.removeprefix("none: ")
        return reason


def _fit_range_words(method: str, fit_min_conf: float) -> str:
    """A candidate in words: ``temperature fitted on every box``, ``spline fitted on the boxes above raw conf
    0.125``, ``none (the raw scores)`` (what :attr:`CandidateRecord.name` writes ``temperature@0``, ``spline@0.125``).

    >>> _fit_range_words("spline", 0.125)
    'spline fitted on the boxes above raw conf 0.125'
    """
    if method == "none":
        return "none (the raw scores)"
    floor = float(fit_min_conf)
    return f"{method} fitted on " + (
        "every box" if floor == 0 else f"the boxes above raw conf {floor:g}"
    )


_NAME = re.compile(r"\b([a-z][a-z-]*)@(\d+(?:\.\d+)?(?:e-?\d+)?)\b")


def _in_words(text: str) -> str:
    """``text`` (a selection's ``reason`` or a candidate's ``verdict``) with every candidate name
    ``method@floor`` written out by :func:`_fit_range_words` (the console says it in words; the record and
    the report's tables keep the short names).

    >>> _in_words("the best, temperature@0.125: nll 0.51")
    'the best, temperature fitted on the boxes above raw conf 0.125: nll 0.51'
    """
    return _NAME.sub(lambda m: _fit_range_words(m.group(1), float(m.group(2))), text)


def choose_calibrator(
    fit_boxes: BoxView,
    *,
    method: str,
    floors: tuple[float, ...],
    criterion: str,
    min_conf: float,
    n_folds: int,
    seed: int,
    n_repeats: int = 5,
    methods: tuple[str, ...] | None = None,
    target: str = "correct",
) -> Choice:
    """Fit ``method`` on ``fit_boxes`` (not crowd-matched), or choose by CV with ``auto``
    among ``methods`` (default the maps that keep every box's ranking and can be fitted to
    ``target``, :func:`~det_calib.calibrators.registry.global_methods`), against the ``target``
    labels (:func:`fit_labels`).

    One method: ``fit_boxes`` are already its fit range (above ``floors[0]``, by the caller's
    rule); ``floors[0]`` is recorded and shapes the map below it. ``auto`` applies each floor itself.

    With ``auto`` every candidate's best version (its own fit floor, its CV shrinkage) is also
    refitted on the whole fit split, so the eval split can compare them all.
    """
    z, y, k, g = fit_boxes.logit, _fit_labels(fit_boxes, target), fit_boxes.cls, fit_boxes.image_id
    a = fit_boxes.log_area
    if method != "auto":
        if method not in registry.target_methods(target):
            raise InputError(
                f"method {method!r} cannot be fitted to --target {target}: "
                f"{registry.excluded_methods(target)[method]}"
            )
        cal = fit_calibrator(
            method,
            z,
            y,
            classes=k,
            groups=g,
            fit_min_conf=floors[0],
            seed=seed,
            in_range=True,
            log_area=a,
        )
        return Choice(method, floors[0], cal)
    methods = registry.global_methods(target) if methods is None else methods
    sel = select_calibrator(
        z,
        y,
        classes=k,
        groups=g,
        methods=methods,
        fit_min_confs=floors,
        min_conf=min_conf,
        criterion=criterion,
        n_folds=n_folds,
        n_repeats=n_repeats,
        seed=seed,
        log_area=a,
    )
    refits: dict[str, tuple[str, float, Any]] = {}
    for m in registry.methods():
        ok = [
            c for c in sel.candidates if c.method == m and c.error is None and math.isfinite(c.mean)
        ]
        if not ok:
            continue
        c = sel.chosen if sel.chosen.method == m else min(ok, key=lambda c: c.mean)
        if c is sel.chosen:
            refits[m] = (m, c.fit_min_conf, sel.calibrator)
            continue

        refits[m] = (m, c.fit_min_conf, refit(c, z, y, k, g, seed, log_area=a))
    return Choice(sel.chosen.method, sel.chosen.fit_min_conf, sel.calibrator, sel, refits)


def _candidates_of(choice: Choice) -> list[CandidateRecord]:
    """The CV table of an ``auto`` choice as records (every method x fit floor tried)."""
    sel = choice.selection
    if sel is None:
        return []
    out = []
    for c in sel.candidates:
        params: dict[str, Any] = {
            "fit_min_conf": c.fit_min_conf,
            "cv_se": _num(c.se),
            "cv_diff": _num(c.diff),
            "cv_diff_se": _num(c.diff_se),
            "cv_diff_none": _num(c.diff_none),
            "cv_diff_none_se": _num(c.diff_none_se),
            "verdict": c.verdict or None,
            "fold_scores": [_num(v) for v in c.fold_scores],
            "criterion": sel.criterion,
            "min_conf": sel.min_conf,
            "n_folds": sel.n_folds,
            "n_repeats": sel.n_repeats,
        }
        if c.shrinkage is not None:
            params["shrinkage"] = _num(c.shrinkage)
        if c.error:
            params["error"] = c.error
        out.append(
            CandidateRecord(
                Calibrator(c.method, params),
                _num(c.mean),
                selected=(c.method, c.fit_min_conf) == (sel.chosen.method, sel.chosen.fit_min_conf),
            )
        )
    return out


def _num(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


_TARGET = "target"
"""The :attr:`~det_calib.data.box_view.BoxView.extra` column of a fit view that holds the IoU target."""


def _fit_boxes(
    boxes: pl.DataFrame, s: Settings, floor: float | None = None, gt: pl.DataFrame | None = None
) -> BoxView:
    """The boxes a calibrator is fitted on: not crowd-matched, raw conf >= the fit floor
    (``floor``, default the settings' single floor; ``--method auto`` applies its floors itself).

    With ``--target iou`` the view carries each box's IoU target (``extra["target"]``,
    :func:`~det_calib.evaluation.operating.iou_target` against ``gt``, the fit split's ground truth),
    matched over every box of the head before the floor is applied (the matching is greedy by score)."""
    floors = s.fit_floors()
    f = floor if floor is not None else (floors[0] if len(floors) == 1 else 0.0)
    if s.target == "iou":
        if gt is None:
            raise InputError(
                "--target iou needs the fit split's ground truth to compute the IoU targets"
            )
        view = BoxView.from_boxes(boxes, geometry=True)
        view = dataclasses.replace(view, extra={**view.extra, _TARGET: iou_target(view, gt)})
    else:
        view = BoxView.from_boxes(boxes, geometry=False)
    return view.subset(view.conf >= f)


def _fit_labels(view: BoxView, target: str = "correct") -> np.ndarray:
    """What a calibrator is fitted to: the matched flag (``correct``), or the IoU target (``iou``,
    carried by a :func:`fit_boxes` view built for it)."""
    if target == "iou":
        if _TARGET not in view.extra:
            raise InputError(
                "the fit view carries no IoU target: build it with fit_boxes(..., gt=) under "
                "--target iou"
            )
        return np.asarray(view.extra[_TARGET], dtype=np.float64)
    return view.correct


def fit_head(boxes: pl.DataFrame, s: Settings, gt: pl.DataFrame | None = None) -> Choice:
    """Fit (or, with ``auto``, choose by CV and fit) the calibrator of one head on its fit-split boxes
    (``gt``: the fit split's ground truth, which ``--target iou`` needs)."""
    floors = s.fit_floors()
    if s.method == "auto":
        images = boxes["image_id"].n_unique()
        if images < s.cv_folds:  # after the capture: the images that kept a box
            raise InputError(
                f"the fit split has boxes on {images} images, fewer than the {s.cv_folds} folds "
                "of --method auto's cross-validation (`cv_folds`): fit on more images, or name a "
                "method (`method` temperature)"
            )
        return choose_calibrator(
            _fit_boxes(boxes, s, 0.0, gt),
            method="auto",
            floors=floors,
            criterion=s.criterion,
            min_conf=min(s.conf),
            n_folds=s.cv_folds,
            seed=s.seed,
            n_repeats=s.cv_repeats,
            methods=s.auto_methods(),
            target=s.target,
        )
    if s.method == "temperature":
        return Choice(
            "temperature", floors[0], _temperature_of_boxes(_fit_boxes(boxes, s, gt=gt), s.target)
        )
    return choose_calibrator(
        _fit_boxes(boxes, s, gt=gt),
        method=s.method,
        floors=floors[:1],
        criterion=s.criterion,
        min_conf=min(s.conf),
        n_folds=s.cv_folds,
        seed=s.seed,
        target=s.target,
    )


def _temperature_of_boxes(boxes: BoxView, target: str = "correct") -> TemperatureScaler:
    """The NLL-optimal temperature of the fit boxes given (the classic method: fitted on every run,
    whatever is deployed, and reported for comparison), against ``target``'s labels."""
    return TemperatureScaler(kind="sigmoid").fit(boxes.logit, _fit_labels(boxes, target))


def fit_result(boxes: pl.DataFrame, split: Split, choice: Choice, s: Settings) -> FitResult:
    """The fit's record, with the fit split's own (in-sample) NLL, ECE and Brier for comparison (against
    the matched flag, whatever the run's target)."""
    used = _fit_boxes(boxes, s, choice.floor, split.gt)
    zf, yf = used.logit, used.correct
    scaler = choice.calibrator
    if choice.method == "temperature" and hasattr(scaler, "nll_before_") and s.target == "correct":
        t = float(scaler.temperature_)
        nll0, nll1, it = float(scaler.nll_before_), float(scaler.nll_after_), int(scaler.n_iter_)
        pf1 = sigmoid(zf / t)
    else:
        t1 = used.scored(choice.calibrator).logit
        nll0, nll1, it = metrics.nll_logits(zf, yf), metrics.nll_logits(t1, yf), None
        pf1 = sigmoid(t1)
    pf0 = used.conf
    return FitResult(
        split=split.name,
        images=len(split.images),
        boxes=used.n,
        correct=int(yf.sum()),
        nll_before=nll0,
        nll_after=nll1,
        ece_before=metrics.ece(pf0, yf, n_bins=s.ece_bins),
        ece_after=metrics.ece(pf1, yf, n_bins=s.ece_bins),
        brier_before=metrics.brier(pf0, yf),
        brier_after=metrics.brier(pf1, yf),
        iterations=it,
    )


def temperature_fit(
    fit_boxes_: pl.DataFrame,
    choice: Choice,
    op: OperatingPoints,
    s: Settings,
    ev: EvalResult | None = None,
    gt: pl.DataFrame | None = None,
) -> TemperatureFit:
    """The temperature fitted on every fit box (the classic method) to the run's target, whatever the
    head deploys, with its kept-set figures on the eval split (those of the deployed map when it is
    that temperature); ``gt``: the fit split's ground truth (``--target iou``)."""
    deployed = choice.method == "temperature" and choice.floor == 0.0
    cal = (
        choice.calibrator
        if deployed
        else _temperature_of_boxes(_fit_boxes(fit_boxes_, s, 0.0, gt), s.target)
    )
    if deployed and ev is not None:
        return TemperatureFit(float(cal.temperature_), True, list(ev.operating_after), ev.after.nll)
    scored = op.view.scored(cal)
    return TemperatureFit(
        float(cal.temperature_),
        deployed,
        op.operating(scored),
        metrics.nll_logits(scored.logit, scored.correct),
    )


def scored_candidates(choice: Choice, op: OperatingPoints) -> list:
    """The CV table of ``auto``; the best fit range of each method also scored on the eval split."""

    out = []
    for c in _candidates_of(choice):
        m, f = c.calibrator.method, c.fit_min_conf
        refit = (choice.refits or {}).get(m)
        if refit is not None and refit[1] == f:
            _log.debug("scoring candidate %s on the eval split", c.name)
            figures = op.candidate_figures(None if m == "none" else refit[2])
            figures["calibrator"] = None if m == "none" else refit[2].to_dict()
            c = dataclasses.replace(c, eval=figures)
        out.append(c)
    return out

"""One head's steps of a run, each a stage of its clock: its fit-split boxes labelled against the
ground truth (:func:`label`) and its calibrator fitted or chosen on them (:func:`fit`, ``fit and
choice``); its eval-split boxes labelled, its figures and its record (:func:`evaluate`, ``figures``).
``calibrate`` calls them around the eval split's capture; the ensemble calls them on each member's
boxes, and :func:`evaluate` on the fused ones.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import polars as pl

from det_calib.data.box_view import with_calibrated
from det_calib.data.ground_truth import Split
from det_calib.evaluation.figures import evaluate_head
from det_calib.evaluation.operating import OperatingPoints
from det_calib.job import clock
from det_calib.job.inputs import Inputs
from det_calib.job.settings import Settings
from det_calib.pipeline.fitting import (
    Choice,
    fit_head,
    fit_result,
    scored_candidates,
    temperature_fit,
)
from det_calib.record.calibrator_record import Calibrator
from det_calib.record.run_result import HeadResult
from det_calib.tasks.match_rule import match_split

_log = logging.getLogger(__name__)

__all__ = ["calibrate_head", "evaluate", "fit"]


def _label(captured: pl.DataFrame, split: Split, inputs: Inputs, s: Settings) -> pl.DataFrame:
    """A head's captured boxes on ``split`` labelled by the run's matching rule (box or mask IoU, OKS,
    rotated IoU: ``inputs.matching``)."""
    return match_split(captured, split, inputs.matching, iou=s.iou, loc_iou=s.loc_iou)


@clock.stage("fit and choice")
def fit(
    captured: pl.DataFrame, split: Split, inputs: Inputs, s: Settings, head: str
) -> tuple[pl.DataFrame, Choice]:
    """The head's fit-split boxes labelled (:func:`label`), and its calibrator fitted (or, with ``auto``,
    chosen by cross-validation) on them."""
    labelled = _label(captured, split, inputs, s)
    choice = fit_head(labelled, s, split.gt)
    _log.info("%s head: %s", head, choice.words())
    return labelled, choice


@clock.stage("figures")
def evaluate(
    inputs: Inputs,
    splits: tuple[Split, Split],
    fit_boxes: pl.DataFrame,
    eval_boxes: pl.DataFrame,
    choice: Choice,
    s: Settings,
    *,
    labelled: bool = False,
    sigmas: tuple[float, ...] | None = None,
) -> tuple[HeadResult, list[pl.DataFrame]]:
    """The head's eval-split boxes labelled (:func:`label`; ``labelled``: they are already), its record
    (its calibrator, the fit's figures, every figure on the eval split, why it stays above its sampling
    floor, the temperature and ``auto``'s candidates on the eval split) and its two labelled tables with
    the calibrated conf. ``fit_boxes``: the labelled fit boxes; ``sigmas``: a pose dataset's own OKS sigmas."""
    fit_split, ev = splits
    fb, eb = fit_boxes, eval_boxes if labelled else _label(eval_boxes, ev, inputs, s)
    op = OperatingPoints.of_boxes(eb, ev, s)
    evaluated = evaluate_head(
        eb,
        ev,
        choice.calibrator,
        s,
        inputs.ds.names,
        op,
        sigmas=sigmas,
        method=choice.method,
        fit_min_conf=choice.floor or 0.0,
    )
    result = HeadResult(
        calibrator=Calibrator.of_fitted(choice.calibrator, choice.method, choice.floor),
        fit=fit_result(fb, fit_split, choice, s),
        eval=evaluated.eval,
        threshold_shift=evaluated.threshold_shift,
        per_class=evaluated.per_class,
        by_size=evaluated.by_size,
        candidates=scored_candidates(choice, op) or None,
        temperature_fit=temperature_fit(fb, choice, op, s, evaluated.eval, fit_split.gt),
    )
    return result, [with_calibrated(t, choice.calibrator) for t in (fb, eb)]


def calibrate_head(
    inputs: Inputs,
    splits: tuple[Split, Split],
    head: str,
    s: Settings,
    captured: Sequence[pl.DataFrame],
) -> tuple[HeadResult, list[pl.DataFrame]]:
    """One head's captured fit and eval boxes through :func:`fit` and :func:`evaluate` (the ensemble's
    members; ``calibrate`` captures the eval split after the fit)."""
    fb, choice = fit(captured[0], splits[0], inputs, s, head)
    return evaluate(inputs, splits, fb, captured[1], choice, s)

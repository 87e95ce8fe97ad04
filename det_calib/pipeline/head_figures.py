"""The evaluation step of a run: one head's figures on the eval split (all-box metrics, the kept
sets, per class, the mAP check), computed by :mod:`det_calib.evaluation.figures`, each step timed
as a stage of the run.
"""

from __future__ import annotations

import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.ground_truth import Split
from det_calib.evaluation import figures
from det_calib.evaluation.figures import operating_points
from det_calib.evaluation.operating import OperatingPoints
from det_calib.job.settings import Settings
from det_calib.job.stages import stage
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import Calibrator, HeadResult

__all__ = ["evaluate_head", "operating_points"]


def _as_calibrator(calibrator: LogitCalibrator | float) -> LogitCalibrator:
    """A number is a temperature (the earlier signature of the steps); else a fitted calibrator."""
    if isinstance(calibrator, (int, float)):
        return calibrator_of(Calibrator.temperature_scaling(float(calibrator)))
    return calibrator


def evaluate_head(boxes: pl.DataFrame, split: Split, calibrator: LogitCalibrator | float, s: Settings,
                  names: list[str], operating: OperatingPoints | None = None, *,
                  sigmas: tuple[float, ...] | None = None) -> HeadResult:
    """:func:`det_calib.evaluation.figures.evaluate_head` with the run's stage timings; ``calibrator``
    may be a temperature (a number); ``sigmas``: a pose dataset's OKS sigmas (the matching rule's) for the
    keypoint mAP."""
    return figures.evaluate_head(boxes, split, _as_calibrator(calibrator), s, names, operating, stage=stage,
                                 sigmas=sigmas)

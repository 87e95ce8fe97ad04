"""Metrics: calibration metrics and bootstrap intervals (``calibration``), the operating-point
figures of the kept boxes (``operating_point``), drift tests between two box sets (``drift_tests``).

``det_calib.metrics.X`` is ``det_calib.metrics.calibration.X`` for every public name of that module; the
binning's ``ReliabilityBins`` and the detection metrics ``dece``, ``laace`` and ``box_features`` are
public here too."""

from __future__ import annotations

from det_calib.metrics.binning import ReliabilityBins as ReliabilityBins
from det_calib.metrics.calibration import *  # noqa: F403
from det_calib.metrics.calibration import __all__ as _calibration_all
from det_calib.metrics.detection_metrics import box_features as box_features
from det_calib.metrics.detection_metrics import dece as dece
from det_calib.metrics.detection_metrics import laace as laace

__all__ = sorted([*_calibration_all, "ReliabilityBins", "box_features", "dece", "laace"])

"""Metrics: calibration metrics and bootstrap intervals (``calibration``), the operating-point
figures of the kept boxes (``operating_point``), drift tests between two box sets (``drift_tests``).

``det_calib.metrics.X`` is ``det_calib.metrics.X`` for every public name of that module."""

from __future__ import annotations

from det_calib.metrics.calibration import *  # noqa: F403
from det_calib.metrics.calibration import __all__ as _calibration_all

__all__ = [*_calibration_all]

"""Calibrators: maps from raw logits to calibrated logits, one module per calibrator.

The contract is :class:`~det_calib.calibrators.base.LogitCalibrator`; the methods and their
simplicity order are in the one registry (:mod:`det_calib.calibrators.registry`).
"""

from __future__ import annotations

from det_calib.calibrators.base import LogitCalibrator, NotFittedError
from det_calib.calibrators.registry import (
    calibrator_from_dict,
    global_methods,
    is_per_class,
    make_calibrator,
    methods,
    register,
)
from det_calib.calibrators.temperature import TemperatureScaler, fit_temperature

__all__ = ["LogitCalibrator", "NotFittedError", "TemperatureScaler", "calibrator_from_dict", "fit_temperature",
           "global_methods", "is_per_class", "make_calibrator", "methods", "register"]

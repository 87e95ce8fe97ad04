"""Calibrators: maps from raw logits to calibrated logits, one module per calibrator.

The contract is :class:`~det_calib.calibrators.base.LogitCalibrator`; the methods and their
simplicity order are in the one registry (:mod:`det_calib.calibrators.registry`); a new method is
one module and one ``@register(name, order=...)`` line.
"""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "LogitCalibrator": "base",
    "MIN_REL_AREA": "base",
    "box_kwargs": "base",
    "equivalent_conf": "base",
    "log_area": "base",
    "check_classes": "fit_support",
    "check_fit": "fit_support",
    "group_folds": "fit_support",
    "TARGETS": "registry",
    "calibrator_from_dict": "registry",
    "excluded_methods": "registry",
    "global_methods": "registry",
    "make_calibrator": "registry",
    "method_spec": "registry",
    "register": "registry",
    "methods": "registry",
    "target_methods": "registry",
    "TemperatureScaler": "temperature",
    "equivalent_threshold": "temperature",
    "fit_temperature": "temperature",
}

__all__ = [
    "LogitCalibrator",
    "MIN_REL_AREA",
    "TARGETS",
    "TemperatureScaler",
    "box_kwargs",
    "calibrator_from_dict",
    "check_classes",
    "check_fit",
    "equivalent_conf",
    "equivalent_threshold",
    "excluded_methods",
    "fit_temperature",
    "global_methods",
    "group_folds",
    "log_area",
    "make_calibrator",
    "method_spec",
    "methods",
    "register",
    "target_methods",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

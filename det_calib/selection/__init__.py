"""Selection: ``--method auto``'s paired cross-validation over the registered calibrators."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CRITERIA": "cross_validation",
    "GAIN_KEPT": "cross_validation",
    "Selection": "cross_validation",
    "Z_NONE": "cross_validation",
    "Z_SIMPLER": "cross_validation",
    "fit_calibrator": "cross_validation",
    "refit": "cross_validation",
    "select_calibrator": "cross_validation",
}

__all__ = [
    "CRITERIA",
    "GAIN_KEPT",
    "Selection",
    "Z_NONE",
    "Z_SIMPLER",
    "fit_calibrator",
    "refit",
    "select_calibrator",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

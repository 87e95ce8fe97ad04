"""Selection: ``--method auto``'s paired cross-validation over the registered calibrators."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CRITERIA": "cross_validation",
    "Selection": "cross_validation",
    "fit_calibrator": "cross_validation",
    "paired_rule_words": "cross_validation",
    "refit": "cross_validation",
    "select_calibrator": "cross_validation",
}

__all__ = [
    "CRITERIA",
    "Selection",
    "fit_calibrator",
    "paired_rule_words",
    "refit",
    "select_calibrator",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

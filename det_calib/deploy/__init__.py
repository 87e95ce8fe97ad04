"""Deployment: a calibrator folded into a checkpoint plain Ultralytics loads (``fold``), or applied
to Ultralytics results after the detector's own selection (``posthoc``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "fold_calibrator": "fold",
    "read_calibration_metadata": "fold",
    "write_calibrated_checkpoint": "fold",
    "write_folded_checkpoint": "fold",
    "apply_calibrator": "posthoc",
    "load_calibrators": "posthoc",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

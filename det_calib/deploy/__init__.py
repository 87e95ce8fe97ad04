"""Deployment: a calibrator folded into a checkpoint plain Ultralytics loads (``fold``), or applied
to Ultralytics results after the detector's own selection (``posthoc``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "apply_to_export": "calibrated_export",
    "calibrated_probs": "calibrated_export",
    "deployed_file": "calibrated_export",
    "engine_record": "calibrated_export",
    "run_equivalent_thresholds": "calibrated_export",
    "write_calibrated_export": "calibrated_export",
    "write_run_engine": "calibrated_export",
    "hinge_layers": "fold",
    "read_calibration_metadata": "fold",
    "write_calibrated_checkpoint": "fold",
    "write_run_checkpoint": "fold",
    "attach": "hook",
    "detach": "hook",
    "map_onnx": "portable",
    "portable_head": "portable",
    "raw_thresholds": "portable",
    "tuned_deepstream": "portable",
    "write_portable_outputs": "portable",
    "apply_calibrator": "posthoc",
}

__all__ = [
    "apply_calibrator",
    "apply_to_export",
    "attach",
    "calibrated_probs",
    "deployed_file",
    "detach",
    "engine_record",
    "hinge_layers",
    "map_onnx",
    "portable_head",
    "raw_thresholds",
    "read_calibration_metadata",
    "run_equivalent_thresholds",
    "tuned_deepstream",
    "write_calibrated_checkpoint",
    "write_calibrated_export",
    "write_portable_outputs",
    "write_run_checkpoint",
    "write_run_engine",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

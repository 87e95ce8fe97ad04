"""det_calib: make Ultralytics YOLO detectors tell the truth about their confidence.

The public API, step by step (each step is a plain function; :func:`calibrate` runs them all):

>>> import det_calib
>>> run = det_calib.calibrate(out="runs/demo")  # doctest: +SKIP

- :func:`capture` — boxes, confs and raw class logits through Ultralytics' own predictor
- :func:`match_table` / :func:`match_detections` — correct/incorrect by COCO-style matching
- :func:`fit_temperature` / :class:`TemperatureScaler` — the NLL-optimal temperature
- :mod:`det_calib.metrics` — ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, bootstrap intervals
- :func:`coco_map`, :func:`ultralytics_val` — mAP before and after
- :func:`threshold_shift` — how the set of boxes kept at conf 0.25 changes
- :func:`write_calibrated_checkpoint` — T folded into the head; loads without det_calib
- :mod:`det_calib.tuning` — per-class conf thresholds (certified precision, max-F1, LRP);
  :func:`filter_results` applies them to plain Ultralytics ``Results``
- :func:`apply_calibrator` — any run's calibrator applied to Ultralytics results after the
  detector's own selection (post-hoc: the same boxes, rescored)
"""

from __future__ import annotations

__version__ = "0.1.0"

from det_calib import _allocator  # noqa: F401  (first: before anything imports polars)
from det_calib.calibrators import TemperatureScaler, fit_temperature
from det_calib.errors import DegenerateFitError, DetCalibError, InputError
from det_calib.thresholds import equivalent_threshold, threshold_shift

__all__ = [
    "__version__",
    "DetCalibError",
    "InputError",
    "DegenerateFitError",
    "TemperatureScaler",
    "fit_temperature",
    "threshold_shift",
    "equivalent_threshold",
    "calibrate",
    "capture",
    "match_table",
    "match_detections",
    "coco_map",
    "ultralytics_val",
    "write_calibrated_checkpoint",
    "load_data_yaml",
    "load_split",
    "filter_results",
    "apply_calibrator",
]


def __getattr__(name: str):
    # heavy imports (ultralytics, torch) only when these are used
    if name == "calibrate":
        from det_calib.pipeline import calibrate

        return calibrate
    if name == "capture":
        from det_calib.capture import capture

        return capture
    if name in ("match_table", "match_detections"):
        from det_calib import matching

        return getattr(matching, name)
    if name in ("coco_map", "ultralytics_val"):
        from det_calib import verify

        return getattr(verify, name)
    if name == "write_calibrated_checkpoint":
        from det_calib.fold import write_calibrated_checkpoint

        return write_calibrated_checkpoint
    if name == "filter_results":
        from det_calib.tuning import filter_results

        return filter_results
    if name == "apply_calibrator":
        from det_calib.posthoc import apply_calibrator

        return apply_calibrator
    if name in ("load_data_yaml", "load_split"):
        from det_calib import data

        return getattr(data, name)
    raise AttributeError(f"module 'det_calib' has no attribute {name!r}")

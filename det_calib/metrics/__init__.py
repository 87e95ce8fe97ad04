"""Metrics: calibration metrics and bootstrap intervals (``calibration``), the operating-point
figures of the kept boxes (``operating_point``), drift tests between two box sets (``drift_tests``).

``det_calib.metrics.X`` is ``det_calib.metrics.calibration.X`` for every public name of that module; the
binning's ``ReliabilityBins`` and the detection metrics ``dece``, ``laace`` and ``box_features`` are
public here too."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "reliability_bins": "binning",
    "uniform_index": "binning",
    "bootstrap_ci": "bootstrap",
    "bootstrap_sd": "bootstrap",
    "ace": "calibration",
    "brier": "calibration",
    "calibration_summary": "calibration",
    "ece": "calibration",
    "laece": "calibration",
    "mce": "calibration",
    "nll": "calibration",
    "nll_logits": "calibration",
    "per_class": "calibration",
    "box_features": "detection_metrics",
    "dece": "detection_metrics",
    "laace": "detection_metrics",
    "CROWDED_FACTOR": "drift_tests",
    "CROWDED_MIN_BOXES": "drift_tests",
    "binned_change": "drift_tests",
    "calibration_in_the_large": "drift_tests",
    "citl_change": "drift_tests",
    "count_change": "drift_tests",
    "crowded_images": "drift_tests",
    "hosmer_lemeshow": "drift_tests",
    "normal_sf": "drift_tests",
    "ratio_test": "drift_tests",
    "shift_tests": "drift_tests",
    "LaECE0Targets": "operating_point",
    "kept_ece": "operating_point",
    "kept_ece_floor": "operating_point",
    "kept_laece_floor": "operating_point",
    "laece0": "operating_point",
    "SIZE_BINS": "size_bins",
    "SizeBin": "size_bins",
    "size_mask": "size_bins",
}

__all__ = [
    "CROWDED_FACTOR",
    "CROWDED_MIN_BOXES",
    "LaECE0Targets",
    "SIZE_BINS",
    "SizeBin",
    "ace",
    "binned_change",
    "bootstrap_ci",
    "bootstrap_sd",
    "box_features",
    "brier",
    "calibration_in_the_large",
    "calibration_summary",
    "citl_change",
    "count_change",
    "crowded_images",
    "dece",
    "ece",
    "hosmer_lemeshow",
    "kept_ece",
    "kept_ece_floor",
    "kept_laece_floor",
    "laace",
    "laece",
    "laece0",
    "mce",
    "nll",
    "nll_logits",
    "normal_sf",
    "per_class",
    "ratio_test",
    "reliability_bins",
    "shift_tests",
    "size_mask",
    "uniform_index",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

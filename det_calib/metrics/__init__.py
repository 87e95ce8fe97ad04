"""Metrics: calibration metrics and bootstrap intervals (``calibration``), the operating-point
figures of the kept boxes (``operating_point``).

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
    "group_ece_ci": "bootstrap",
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
    "LaECE0Targets": "operating_point",
    "kept_ece": "operating_point",
    "kept_ece_floor": "operating_point",
    "kept_laece_floor": "operating_point",
    "laece0": "operating_point",
    "SIZE_BINS": "size_bins",
}

__all__ = [
    "LaECE0Targets",
    "SIZE_BINS",
    "ace",
    "bootstrap_ci",
    "bootstrap_sd",
    "box_features",
    "brier",
    "calibration_summary",
    "dece",
    "ece",
    "group_ece_ci",
    "kept_ece",
    "kept_ece_floor",
    "kept_laece_floor",
    "laace",
    "laece",
    "laece0",
    "mce",
    "nll",
    "nll_logits",
    "per_class",
    "reliability_bins",
    "uniform_index",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

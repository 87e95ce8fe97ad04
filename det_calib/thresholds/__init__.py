"""Per-class conf thresholds (certified precision, max-F1, LRP) tuned on a run (``per_class``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "LogitStore": "class_sets",
    "check_class_logits": "class_sets",
    "keep_class_logits": "class_sets",
    "run_class_sets": "class_sets",
    "write_class_logits": "class_sets",
    "CRITERIA": "criteria",
    "Fallback": "criteria",
    "Unit": "criteria",
    "counts_by_image": "grid_counts",
    "filter_results": "results_filter",
    "RiskTargets": "risk_control",
    "control_run": "risk_run",
    "risk_lines": "risk_run",
    "load_head": "run_head",
    "tune_run": "run_head",
    "DEFAULT_TARGET_PRECISION": "thresholds_file",
    "HeadThresholds": "thresholds_file",
    "RiskControl": "thresholds_file",
    "SplitFigures": "thresholds_file",
    "THRESHOLDS_FILE": "thresholds_file",
    "ThresholdRow": "thresholds_file",
    "ThresholdsFile": "thresholds_file",
    "class_thresholds": "thresholds_file",
    "read_thresholds": "thresholds_file",
    "summary_lines": "thresholds_file",
}

__all__ = [
    "CRITERIA",
    "DEFAULT_TARGET_PRECISION",
    "Fallback",
    "HeadThresholds",
    "LogitStore",
    "RiskControl",
    "RiskTargets",
    "SplitFigures",
    "THRESHOLDS_FILE",
    "ThresholdRow",
    "ThresholdsFile",
    "Unit",
    "check_class_logits",
    "class_thresholds",
    "control_run",
    "counts_by_image",
    "filter_results",
    "keep_class_logits",
    "load_head",
    "read_thresholds",
    "risk_lines",
    "run_class_sets",
    "summary_lines",
    "tune_run",
    "write_class_logits",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

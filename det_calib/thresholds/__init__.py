"""Per-class conf thresholds (certified precision, max-F1, LRP) tuned on a run (``per_class``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "LogitStore": "class_sets",
    "write_class_logits": "class_sets",
    "thresholds_command": "command",
    "filter_results": "results_filter",
    "tune_run": "run_head",
    "DEFAULT_TARGET_PRECISION": "thresholds_file",
    "THRESHOLDS_FILE": "thresholds_file",
    "class_thresholds": "thresholds_file",
    "summary_lines": "thresholds_file",
    "ThresholdsView": "report_view",
    "thresholds_view": "report_view",
}

__all__ = [
    "DEFAULT_TARGET_PRECISION",
    "LogitStore",
    "THRESHOLDS_FILE",
    "ThresholdsView",
    "class_thresholds",
    "filter_results",
    "thresholds_command",
    "thresholds_view",
    "summary_lines",
    "tune_run",
    "write_class_logits",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

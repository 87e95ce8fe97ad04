"""Per-class conf thresholds (certified precision, max-F1, LRP) tuned on a run (``per_class``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_TARGET_PRECISION": "per_class",
    "THRESHOLDS_FILE": "per_class",
    "class_thresholds": "per_class",
    "filter_results": "per_class",
    "read_thresholds": "per_class",
    "summary_lines": "per_class",
    "tune_run": "per_class",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

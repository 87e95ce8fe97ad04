"""Per-class conf thresholds (certified precision, max-F1, LRP) tuned on a run (``per_class``)."""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

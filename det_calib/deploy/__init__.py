"""Deployment: a calibrator folded into a checkpoint plain Ultralytics loads (``fold``), or applied
to Ultralytics results after the detector's own selection (``posthoc``)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "fold_calibrator": "fold",
    "read_calibration_metadata": "fold",
    "write_calibrated_checkpoint": "fold",
    "write_folded_checkpoint": "fold",
    "apply_calibrator": "posthoc",
    "load_calibrators": "posthoc",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

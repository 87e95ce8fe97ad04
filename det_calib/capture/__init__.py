"""Capture: boxes, confs and raw class logits through Ultralytics' own predictor (``predictor``),
sharded into Parquet parts (``parts``), on a Ray cluster (``ray_capture``)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Capturer": "predictor",
    "available_heads": "predictor",
    "capture": "predictor",
    "default_imgsz": "predictor",
    "load_detector": "predictor",
    "capture_to_parts": "parts",
    "data_fingerprint": "parts",
    "model_fingerprint": "parts",
    "read_parts": "parts",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Capture: boxes, confs and raw class logits through Ultralytics' own predictor (``predictor``),
sharded into Parquet parts (``parts``), on a Ray cluster (``ray_capture``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CaptureOptions": "options",
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

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Evaluation: the kept-set shift at a conf threshold (``kept_set``) and the mAP checks
(pycocotools and Ultralytics val, ``map_check``)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ThresholdShift": "kept_set",
    "equivalent_threshold": "kept_set",
    "precision_recall_vs_conf": "kept_set",
    "threshold_shift": "kept_set",
    "coco_map": "map_check",
    "coco_maps": "map_check",
    "ultralytics_val": "map_check",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

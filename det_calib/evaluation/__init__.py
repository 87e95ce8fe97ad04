"""Evaluation: the kept-set shift at a conf threshold (``kept_set``) and the mAP checks
(pycocotools and Ultralytics val, ``map_check``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

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

__getattr__ = lazy_exports(__name__, _EXPORTS)

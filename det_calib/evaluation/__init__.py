"""Evaluation: the kept-set shift at a conf threshold (``kept_set``) and the mAP checks
(pycocotools and Ultralytics val, ``map_check``)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "size_figures": "by_size",
    "DECE_BINS": "figures",
    "evaluate_head": "figures",
    "precision_recall_vs_conf": "kept_set",
    "threshold_shift": "kept_set",
    "MAP_ENGINES": "map_check",
    "ValIncomplete": "map_check",
    "coco_map": "map_check",
    "coco_maps": "map_check",
    "ultralytics_val": "map_check",
    "ultralytics_val_heads": "map_check",
    "OperatingPoints": "operating",
    "iou_target": "operating",
}

__all__ = [
    "DECE_BINS",
    "MAP_ENGINES",
    "OperatingPoints",
    "ValIncomplete",
    "coco_map",
    "coco_maps",
    "evaluate_head",
    "iou_target",
    "precision_recall_vs_conf",
    "size_figures",
    "threshold_shift",
    "ultralytics_val",
    "ultralytics_val_heads",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

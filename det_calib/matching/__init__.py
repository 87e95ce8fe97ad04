"""Matching: each box labelled correct or incorrect by COCO-style one-to-one IoU matching
(box IoU in :mod:`~det_calib.matching.one_to_one`; a task's own matching sits in its folder under
:mod:`det_calib.tasks`)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "MatchResult": "one_to_one",
    "checked_ids": "one_to_one",
    "collapse_inverted": "one_to_one",
    "greedy_match": "one_to_one",
    "group_keys": "one_to_one",
    "last_best_per_run": "one_to_one",
    "match_boxes": "one_to_one",
    "match_detections": "one_to_one",
    "match_table": "one_to_one",
}

__all__ = [
    "MatchResult",
    "checked_ids",
    "collapse_inverted",
    "greedy_match",
    "group_keys",
    "last_best_per_run",
    "match_boxes",
    "match_detections",
    "match_table",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)

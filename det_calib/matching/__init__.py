"""Matching: each box labelled correct or incorrect by COCO-style one-to-one IoU matching
(box IoU in :mod:`~det_calib.matching.one_to_one`; a task's own matching sits in its folder under
:mod:`det_calib.tasks`)."""

from __future__ import annotations

from det_calib.matching.one_to_one import MatchResult, box_iou, match_boxes, match_detections, match_table

__all__ = ['MatchResult', 'box_iou', 'match_boxes', 'match_detections', 'match_table']

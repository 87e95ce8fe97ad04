"""Matching: each box labelled correct or incorrect by COCO-style one-to-one IoU matching
(box IoU in :mod:`~det_calib.matching.one_to_one`, mask IoU in :mod:`~det_calib.matching.masks`)."""

from __future__ import annotations

from det_calib.matching.masks import mask_iou, match_boxes_by_masks, match_mask_table, match_masks
from det_calib.matching.one_to_one import MatchResult, box_iou, match_boxes, match_detections, match_table

__all__ = ['MatchResult', 'box_iou', 'mask_iou', 'match_boxes', 'match_boxes_by_masks', 'match_detections',
           'match_mask_table', 'match_masks', 'match_table']

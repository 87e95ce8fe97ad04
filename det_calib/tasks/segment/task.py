"""The segment task: each box's mask (an RLE in the box table's ``segm`` column), read from YOLO polygons or
COCO segmentation, matched by mask IoU (COCO ``segm``) where every ground truth has a mask, else by box IoU
(box-only labels are common for segment models). The masks themselves are rebuilt, for the capture, from
the model's prototypes (:meth:`Segment.rebuild_payload`, :mod:`det_calib.tasks.segment.mask_rebuild`), as
``predict(retina_masks=True)`` builds them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_table import PAYLOAD_SCHEMA
from det_calib.data.ground_truth import Dataset, Split, load_split
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.tasks.contract import Task, label_values
from det_calib.tasks.segment.labels import SEGM_COLUMN, has_masks, load_segment_split
from det_calib.tasks.segment.mask_rebuild import filled_boxes, kept_mask_rles
from det_calib.tasks.segment.matching import match_boxes_by_masks

_log = logging.getLogger(__name__)

__all__ = ["Segment"]


class Segment(Task):
    """An Ultralytics segment model: a mask per box."""

    name = "segment"
    model_words = "a segment model"
    payload = SEGM_COLUMN
    payload_dtype = PAYLOAD_SCHEMA[SEGM_COLUMN]
    payload_words = "masks"
    rule = "mask"
    rule_words = "a segment model (its boxes' masks)"
    export_outputs = 2
    outputs_words = "two output tensors (boxes, scores and mask coefficients; the mask prototypes)"
    validator = ("segment", "SegmentationValidator")
    fusable = False
    prototypes = True
    missing_words = ("ground truths without a mask", "polygon labels")

    def export_channels(self, shape: tuple[int, int] | None) -> int | None:
        return None

    def val_figures(self, metrics: Any, *, own_rule: bool) -> dict[str, float]:
        """The mask mAP of ``SegmentMetrics`` (``mask_map50_95``, ``mask_map50``) where the run matched by masks."""
        if not own_rule or getattr(metrics, "seg", None) is None:
            return {}
        return {"mask_map50_95": float(metrics.seg.map), "mask_map50": float(metrics.seg.map50)}

    def read_labels(
        self,
        data: Dataset,
        split: str,
        *,
        match: str,
        coco_gt: str | Path | None,
        limit: int | None,
    ) -> Split:
        if match != "box":
            return load_segment_split(data, split, coco_gt=coco_gt, limit=limit)
        return load_split(data, split, coco_gt=coco_gt, limit=limit)

    def lacks_labels(self, data: Dataset, split: str) -> bool:
        """YOLO box labels (``cls cx cy w h``): no polygon to give a box's mask a ground truth."""
        return split in data.splits and label_values(data, split) == 5

    def lacks_payload(self, split: Split) -> bool:
        return not has_masks(split)

    def choose_rule(
        self, option: str, splits: Sequence[Split], sigmas: Sequence[float] | None
    ) -> MatchingRule:
        lacking = [sp for sp in splits if not has_masks(sp)]
        if not lacking:
            return MatchingRule("mask", option, "a segment model, every ground truth has a mask")
        sp = lacking[0]
        n = sp.gt[SEGM_COLUMN].null_count() if SEGM_COLUMN in sp.gt.columns else sp.gt.height
        if option == "mask":
            raise InputError(
                f"--match mask needs a mask for every ground truth; split `{sp.name}` has {n} of "
                f"{sp.gt.height} without one (box-only labels): use --match box or auto"
            )
        _log.info(
            "split `%s`: %d of %d ground truths have no mask: matching by box IoU",
            sp.name,
            n,
            sp.gt.height,
        )
        return MatchingRule("box", option, "a segment model on box-only labels")

    def match(
        self, boxes: pl.DataFrame, split: Split, rule: MatchingRule, *, iou: float, loc_iou: float
    ) -> pl.DataFrame:
        return match_boxes_by_masks(boxes, split.gt, split.sizes, iou=iou, loc_iou=loc_iou)

    def predictor_class(self) -> type:
        from ultralytics.models.yolo.segment import SegmentationPredictor

        return SegmentationPredictor

    def rebuild_payload(
        self,
        protos: Any,
        coefficients: Any,
        boxes: Any,
        image_shape: tuple[int, int],
        *,
        rasterise: bool = True,
    ) -> tuple[np.ndarray, list[bytes | None]]:
        """Each box's mask rebuilt at the image's size as ``predict(retina_masks=True)`` builds it, as RLE
        counts (:func:`~det_calib.tasks.segment.mask_rebuild.kept_mask_rles`); without ``rasterise`` the same
        boxes kept, decided without rasterising a mask (:func:`~det_calib.tasks.segment.mask_rebuild.filled_boxes`),
        their masks None."""
        if rasterise:
            return kept_mask_rles(protos, coefficients, boxes, image_shape)
        filled = filled_boxes(protos, coefficients, boxes, image_shape)
        return filled, [None] * int(filled.sum())

    def payload_series(self, images: Sequence[Any], shape: tuple[int, int] | None) -> pl.Series:
        return pl.Series(
            SEGM_COLUMN, [c for im in images for c in im.segm], dtype=self.payload_dtype
        )

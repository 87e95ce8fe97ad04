"""The OBB task: each box's rotated box (the box table's ``xywhr`` column, ``Results.obb.xywhr``; the box
columns hold its axis-aligned hull ``Results.obb.xyxy``), read from YOLO OBB lines (4 corners), matched
as Ultralytics' OBB validator matches (ProbIoU). Its NMS is rotated.

An OBB model's kept row is ``[x y w h, conf, cls, angle]``; :meth:`Obb.decode` scales it as
``OBBPredictor.construct_result`` does: the centre and sides through ``ops.scale_boxes(..., xywh=True)``
(not clipped), put in Ultralytics' ``OBB`` results class."""

from __future__ import annotations

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
from det_calib.tasks.obb.labels import XYWHR_COLUMN, has_rotated_boxes, load_obb_split
from det_calib.tasks.obb.matching import match_boxes_by_rotated

__all__ = ["Obb"]


class Obb(Task):
    """An Ultralytics OBB model: a rotated box per box."""

    name = "obb"
    model_words = "an OBB model"
    payload = XYWHR_COLUMN
    payload_dtype = PAYLOAD_SCHEMA[XYWHR_COLUMN]
    payload_words = "rotated boxes"
    rule = "rotated"
    rule_words = "an OBB model (its rotated boxes)"
    box_reason = (
        "an OBB model, the axis-aligned boxes around the rotated ones, chosen by --match box"
    )
    rotated_nms = True
    hull_boxes = True
    outputs_words = "one output tensor (rotated boxes, scores and angles)"
    validator = ("obb", "OBBValidator")
    fusable = False
    missing_words = ("no rotated boxes", "OBB labels (`cls x1 y1 ... x4 y4`)")

    def export_channels(self, shape: tuple[int, int] | None) -> int | None:
        return 1

    def read_labels(
        self,
        data: Dataset,
        split: str,
        *,
        match: str,
        coco_gt: str | Path | None,
        limit: int | None,
    ) -> Split:
        """Rotated boxes; box labels under ``--match box`` (refused without it)."""
        if match == "box" and coco_gt is not None:
            return load_split(data, split, coco_gt=coco_gt, limit=limit)
        if self.box_labels_only(data, split, coco_gt):
            if match == "box":
                return load_split(data, split, limit=limit)
            raise InputError(
                f"split `{split}` of {data.yaml_path} has box labels (`cls cx cy w h`) for an OBB "
                "model: rotated IoU needs OBB labels `cls x1 y1 x2 y2 x3 y3 x4 y4`; use --match "
                "box to "
                "match the axis-aligned boxes around the predicted rotated ones"
            )
        return load_obb_split(data, split, coco_gt=coco_gt, limit=limit)

    def box_labels_only(self, data: Dataset, split: str, coco_gt: str | Path | None) -> bool:
        """YOLO labels (no ``--coco-gt``) whose lines are ``cls cx cy w h``."""
        return coco_gt is None and label_values(data, split) == 5

    def lacks_labels(self, data: Dataset, split: str) -> bool:
        return label_values(data, split) == 5

    def choose_rule(
        self, option: str, splits: Sequence[Split], sigmas: Sequence[float] | None
    ) -> MatchingRule:
        lacking = [sp.name for sp in splits if not has_rotated_boxes(sp)]
        if lacking:
            raise InputError(
                f"rotated IoU needs a rotated box for every ground truth; split `{lacking[0]}` was "
                "read "
                "without them: use --match box"
            )
        return MatchingRule("rotated", option, "an OBB model")

    def match(
        self, boxes: pl.DataFrame, split: Split, rule: MatchingRule, *, iou: float, loc_iou: float
    ) -> pl.DataFrame:
        return match_boxes_by_rotated(boxes, split.gt, iou=iou, loc_iou=loc_iou)

    def predictor_class(self) -> type:
        from ultralytics.models.yolo.obb import OBBPredictor

        return OBBPredictor

    def decode(
        self, det: Any, lb_shape: Any, im_shape: tuple[int, int], shape: tuple[int, int] | None
    ) -> tuple[Any, np.ndarray]:
        """``(xyxy, xywhr)``: the axis-aligned hull ``Results.obb.xyxy`` and the rotated box
        ``Results.obb.xywhr`` (n, 5) float32."""
        import torch
        from ultralytics.engine.results import OBB
        from ultralytics.utils import ops

        rboxes = torch.cat([det[:, :4], det[:, -1:]], dim=-1)
        rboxes[:, :4] = ops.scale_boxes(lb_shape, rboxes[:, :4], im_shape, xywh=True)
        res = OBB(torch.cat([rboxes, det[:, 4:6]], dim=-1), tuple(im_shape))
        return res.xyxy, res.xywhr.cpu().numpy().astype(np.float32, copy=False)

    def hull(self, det: Any, lb_shape: Any, im_shape: tuple[int, int]) -> Any:
        return self.decode(det.clone(), lb_shape, im_shape, None)[0]

    def result_boxes(self, result: Any) -> Any:
        return result.obb

    def result_payload(self, result: Any, shape: tuple[int, int] | None) -> np.ndarray:
        return result.obb.xywhr.cpu().numpy().astype(np.float32)

    def payload_series(self, images: Sequence[Any], shape: tuple[int, int] | None) -> pl.Series:
        arrays = [im.extra for im in images]
        arr = np.concatenate(arrays) if arrays else np.zeros((0, 5), np.float32)
        return pl.Series(XYWHR_COLUMN, arr).cast(self.payload_dtype)

"""The pose task: each box's keypoints (the box table's ``kpts`` column, ``Results.keypoints.data``), read
from YOLO pose lines (``kpt_shape`` in data.yaml) or COCO ``keypoints``, matched by OKS (COCO ``keypoints``:
the dataset's ``kpt_oks_sigmas``, COCO's 17 sigmas for 17 keypoints, else ``1/K`` each, Ultralytics' rule).

A pose model's kept row is ``[xyxy, conf, cls, 3K decoded keypoints]``; :meth:`Pose.decode` scales them
as ``PosePredictor.construct_result`` does: the box as a detector's, the keypoints
``pred[:, 6:].view(n, *kpt_shape)`` through ``ops.scale_coords`` (clipped to the image)."""

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
from det_calib.tasks.contract import Task
from det_calib.tasks.pose.labels import (
    KPTS_COLUMN,
    PoseSpec,
    has_keypoints,
    load_pose_split,
    pose_spec,
)
from det_calib.tasks.pose.matching import COCO_SIGMAS, match_boxes_by_keypoints, oks_sigmas

__all__ = ["Pose"]


class Pose(Task):
    """An Ultralytics pose model: K keypoints per box (its ``kpt_shape`` ``(K, ndim)``)."""

    name = "pose"
    model_words = "a pose model"
    payload = KPTS_COLUMN
    payload_dtype = PAYLOAD_SCHEMA[KPTS_COLUMN]
    payload_words = "keypoints"
    rule = "oks"
    rule_words = "a pose model (its boxes' keypoints)"
    box_reason = "a pose model, chosen by --match box"
    outputs_words = "one output tensor (boxes, scores and keypoints)"
    validator = ("pose", "PoseValidator")
    fusable = False
    shaped = True
    missing_words = ("no keypoints", "pose labels (`kpt_shape` in the data.yaml)")

    def val_figures(self, metrics: Any, *, own_rule: bool) -> dict[str, float]:
        """The keypoint mAP of ``PoseMetrics`` (``pose_map50_95``, ``pose_map50``: OKS), whatever the run's rule."""
        if getattr(metrics, "pose", None) is None:
            return {}
        return {"pose_map50_95": float(metrics.pose.map), "pose_map50": float(metrics.pose.map50)}

    def head_shape(self, head: Any) -> tuple[int, int] | None:
        return int(head.kpt_shape[0]), int(head.kpt_shape[1])

    def model_shape(self, yolo: Any) -> tuple[int, int] | None:
        shape = getattr(yolo, "payload_shape", None)  # an export's, from its metadata
        if shape is None:
            model = getattr(yolo, "model", None)
            shape = getattr(model, "kpt_shape", None) or model.yaml.get("kpt_shape")
        return (int(shape[0]), int(shape[1])) if shape else None

    def metadata_shape(self, meta: dict) -> Any:
        return meta.get("kpt_shape")

    def export_channels(self, shape: tuple[int, int] | None) -> int | None:
        return None if shape is None else shape[0] * shape[1]

    def read_split(
        self,
        data: Dataset,
        split: str,
        *,
        match: str = "auto",
        shape: tuple[int, int] | None = None,
        coco_gt: str | Path | None = None,
        limit: int | None = None,
    ) -> Split:
        """Keypoints (or, under ``--match box``, box labels); refused in one line: box labels without
        ``--match box``, a ``kpt_shape`` whose keypoint count is not the model's."""
        declared = pose_spec(data)
        if self.box_labels_only(data, split, coco_gt):
            if match == "box":
                return load_split(data, split, limit=limit)
            raise InputError(
                f"{data.yaml_path} has no `kpt_shape`: box labels for a pose model, and OKS needs "
                "keypoints (pose labels `cls cx cy w h x1 y1 v1 ...` with kpt_shape in the "
                "data.yaml); "
                "use --match box to match the boxes alone"
            )
        if declared is not None and shape is not None and declared.nkpt != shape[0]:
            raise InputError(
                f"{data.yaml_path}: kpt_shape [{declared.nkpt}, {declared.ndim}] but the model's "
                "is "
                f"[{shape[0]}, {shape[1]}] ({shape[0]} keypoints)"
            )
        spec = None if declared is not None or shape is None else PoseSpec(nkpt=shape[0], ndim=3)
        return load_pose_split(data, split, spec=spec, coco_gt=coco_gt, limit=limit)

    def box_labels_only(self, data: Dataset, split: str, coco_gt: str | Path | None) -> bool:
        """YOLO labels (no ``--coco-gt``) of a data.yaml without ``kpt_shape``."""
        return coco_gt is None and pose_spec(data) is None

    def lacks_labels(self, data: Dataset, split: str) -> bool:
        return pose_spec(data) is None

    def dataset_sigmas(self, data: Dataset) -> tuple[float, ...] | None:
        spec = pose_spec(data)
        return None if spec is None else spec.sigmas

    def choose_rule(
        self, option: str, splits: Sequence[Split], sigmas: Sequence[float] | None
    ) -> MatchingRule:
        lacking = [sp.name for sp in splits if not has_keypoints(sp)]
        if lacking or not splits:
            raise InputError(
                f"OKS needs the keypoints of every ground truth; split `{(lacking or ['?'])[0]}` "
                "was "
                "read without them: use --match box"
            )
        k = splits[0].gt[KPTS_COLUMN].dtype.size // 3
        own = oks_sigmas(k, sigmas)
        if sigmas is not None:
            how = "data.yaml's kpt_oks_sigmas"
        elif k == len(COCO_SIGMAS):
            how = "COCO's 17 person-keypoint sigmas"
        else:
            how = f"1/K = {1 / k:.4g} each (Ultralytics' rule for other than 17 keypoints)"
        return MatchingRule(
            "oks",
            option,
            f"a pose model, {k} keypoints, sigmas {how}",
            sigmas=tuple(float(x) for x in np.asarray(own)),
        )

    def match(
        self, boxes: pl.DataFrame, split: Split, rule: MatchingRule, *, iou: float, loc_iou: float
    ) -> pl.DataFrame:
        return match_boxes_by_keypoints(
            boxes, split.gt, iou=iou, loc_iou=loc_iou, sigmas=rule.sigmas
        )

    def predictor_class(self) -> type:
        from ultralytics.models.yolo.pose import PosePredictor

        return PosePredictor

    def decode(
        self, det: Any, lb_shape: Any, im_shape: tuple[int, int], shape: tuple[int, int] | None
    ) -> tuple[Any, np.ndarray]:
        """``(xyxy, keypoints)``: keypoints (n, K, ndim) float32."""
        from ultralytics.utils import ops

        xyxy = ops.scale_boxes(lb_shape, det[:, :4], im_shape)
        kpts = det[:, 6:].view(det.shape[0], *shape)
        kpts = ops.scale_coords(lb_shape, kpts, im_shape)
        return xyxy, kpts.cpu().numpy().astype(np.float32, copy=False)

    def result_payload(self, result: Any, shape: tuple[int, int] | None) -> np.ndarray:
        if result.keypoints is None:
            return np.zeros((0, *shape), np.float32)
        return result.keypoints.data.cpu().numpy().astype(np.float32).reshape(-1, *shape)

    def payload_series(self, images: Sequence[Any], shape: tuple[int, int] | None) -> pl.Series:
        arrays = [im.extra for im in images]
        arr = np.concatenate(arrays) if arrays else np.zeros((0, *shape), np.float32)
        return pl.Series(KPTS_COLUMN, arr).cast(self.payload_dtype)

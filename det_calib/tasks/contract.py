"""The task contract: what one Ultralytics task (detect, segment, pose, OBB, or one of your own) brings
to a run, as hooks of one class the stages call.

A :class:`Task` is a detector by default: its boxes carry no payload, are read from box labels,
matched by box IoU, decoded as ``DetectionPredictor`` decodes them and checked by Ultralytics'
``DetectionValidator``. A task with a payload beside each box (a mask, keypoints, a rotated box, ...)
overrides the hooks that differ; the stages (:mod:`det_calib.capture`, the job, the evaluation, the
deploy) look the task up once (:func:`det_calib.tasks.get_task`) and call its hooks, never its name.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import polars as pl

from det_calib.data.ground_truth import Dataset, Split, label_path, list_images, load_split
from det_calib.data.matching_rule import MatchBy, MatchingRule
from det_calib.errors import InputError
from det_calib.matching.one_to_one import match_boxes
from det_calib.tasks.pose.labels import pose_spec

__all__ = ["RUN_PARTS", "Task", "TaskRun", "label_values"]

RUN_PARTS = {
    "calibrate": "pipeline_run",
    "check": "check_run",
    "thresholds": "thresholds_run",
    "compare": "report_compare",
}
"""Where a task keeps its own run of a command (the part of its folder, named for its layer), in place of the
shared box pipeline's; the command line asks each registered task for it (:class:`TaskRun`)."""


def label_values(data: Dataset, split: str) -> int | None:
    """The number of values on the first label line of ``split`` (its files in image order); None
    when no label file of the split has a line (5: box labels, 9: OBB labels)."""
    if split not in data.splits:
        raise InputError(
            f"split `{split}` not in {data.yaml_path} (splits: {', '.join(sorted(data.splits))})"
        )
    for img in list_images(data.splits[split], split=split):
        lp = label_path(img)
        if not lp.is_file():
            continue
        for line in lp.read_text(encoding="utf-8-sig").splitlines():
            if line.split():
                return len(line.split())
    return None


@dataclass(frozen=True)
class TaskRun:
    """A task's own run of one whole command (``calibrate``, ``check``, ``thresholds``, ``compare``): what a
    per-image task (a classifier: no box to match) supplies instead of the shared box pipeline, as a part's ``RUN``.

    Attributes:
        claims: ``claims(args)``: whether the command line's arguments are a run of this task, as what the run
            needs from them (the data folder, the run's record), or None (then the next task is asked, and the
            shared box pipeline runs the command where no task claims it).
        run: ``run(args, claim)``: the command, run; returns its exit code.
    """

    claims: Callable[[Any], Any]
    run: Callable[[Any, Any], int]


class Task:
    """One task's own parts (the class attributes) and hooks (the methods); a detector's by default.

    Attributes:
        name: The task's name, as Ultralytics spells a model's ``task`` (``detect``).
        model_words: The model in words (``a detect model``; messages and reasons).
        payload: The box table column the task's capture adds beside the box columns (None: none).
        payload_dtype: That column's Polars type.
        payload_words: What the payload holds, in words (``masks``; the ensemble's refusal).
        rule: The task's own ``--match`` rule (what ``auto`` picks where the labels allow it).
        rule_words: What that rule needs, in words (``--match mask needs a segment model (its boxes' masks)``).
        box_reason: Why a run of this task matched by box IoU under ``--match box``.
        rotated_nms: Whether the task's NMS is rotated (ProbIoU on rotated boxes).
        export_outputs: How many output tensors an Ultralytics export of the task has.
        outputs_words: Those outputs, in words (an export's layout refusal).
        validator: Ultralytics' validator of the task: (module under ``ultralytics.models.yolo``, class).
        fusable: Whether weighted boxes fusion can fuse the task's boxes (an ensemble member).
        hull_boxes: Whether the box columns hold the axis-aligned hull of each box's payload (an OBB model's
            rotated boxes), so that box mAP is the hulls' and Ultralytics' val scores the payload.
        missing_words: What a split without the task's payload has and what the task's rule needs, in words
            (``check``'s refusal).
        records_rule: Whether a run records its matching rule (``calibration.json``'s ``matching``; a
            detector's run records none: box IoU, as ever).
        shaped: Whether each box's payload has a shape the model declares (a pose model's ``kpt_shape``),
            which its export's metadata must then record.
        prototypes: Whether the model's output carries prototypes its boxes' payload is rebuilt from (a
            segment model's; the capture rebuilds each box's mask from them: :meth:`rebuild_payload`).
        per_image: Whether the model answers once per image (a classifier) rather than per box: its runs are its
            own (:data:`RUN_PARTS`), and the box stages refuse it (:func:`det_calib.tasks.get_task`).
        per_image_words: How a per-image task's model is run instead, in words (the box stages' refusal).
        own_methods: A per-image task's own values of ``--method`` beside the detector's (its runs read
            them; a detector's run refuses them).
    """

    name: ClassVar[str] = "detect"
    model_words: ClassVar[str] = ""
    payload: ClassVar[str | None] = None
    payload_dtype: ClassVar[Any] = None
    payload_words: ClassVar[str] = ""
    rule: ClassVar[MatchBy] = "box"
    rule_words: ClassVar[str] = ""
    box_reason: ClassVar[str] = "chosen by --match box"
    rotated_nms: ClassVar[bool] = False
    export_outputs: ClassVar[int] = 1
    outputs_words: ClassVar[str] = "one output tensor (boxes and scores)"
    validator: ClassVar[tuple[str, str]] = ("detect", "DetectionValidator")
    fusable: ClassVar[bool] = True
    prototypes: ClassVar[bool] = False
    shaped: ClassVar[bool] = False
    records_rule: ClassVar[bool] = True
    missing_words: ClassVar[tuple[str, str]] = ("", "")
    hull_boxes: ClassVar[bool] = False
    per_image: ClassVar[bool] = False
    per_image_words: ClassVar[str] = ""
    own_methods: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def part(self, name: str) -> ModuleType | None:
        """The task's own part ``name`` in a layer above the tasks layer: the module ``name`` beside the task's
        module in its folder (``demo_labels``, ``evaluation_map``, ``report_panel``, ...; its first word names
        its layer), imported when first asked for; None where the task has no such part. Only the layer the
        part belongs to (or one above it) asks for it, so that the tasks layer never imports upward."""
        package = type(self).__module__.rpartition(".")[0]
        if package in (
            "",
            __name__.rpartition(".")[0],
        ):  # a task module of its own (or a script's), not a folder
            return None
        module = f"{package}.{name}"
        return (
            importlib.import_module(module)
            if importlib.util.find_spec(module) is not None
            else None
        )

    @property
    def words(self) -> str:
        """The model in words: :attr:`model_words`, else ``a <name> model``."""
        return self.model_words or f"a {self.name} model"

    @property
    def payload_schema(self) -> dict[str, Any]:
        """The payload column and its type (empty for a task without one)."""
        return {self.payload: self.payload_dtype} if self.payload else {}

    # --- the model -----------------------------------------------------------------------------------
    def nms_args(self, nc: int) -> dict:
        """NMS keywords as ``DetectionPredictor.postprocess`` sets them: ``nc`` names the class channels
        of a model whose rows carry channels after them (every task but a detector's), rotated NMS for a
        rotated task."""
        return {"nc": int(nc), "rotated": self.rotated_nms}

    def head_shape(self, head: Any) -> tuple[int, int] | None:
        """The shape of each box's payload the head's channels hold (a pose head's ``kpt_shape``); None."""
        return None

    def model_shape(self, yolo: Any) -> tuple[int, int] | None:
        """As :meth:`head_shape`, from a loaded ``YOLO`` or an exported model (its metadata)."""
        return None

    def metadata_shape(self, meta: dict) -> Any:
        """As :meth:`head_shape`, from an export's metadata (its literal value); None."""
        return None

    def export_channels(self, shape: tuple[int, int] | None) -> int | None:
        """How many channels follow the class scores in an export's output (None: unknown)."""
        return 0

    def val_figures(self, metrics: Any, *, own_rule: bool) -> dict[str, float]:
        """What Ultralytics' val ``metrics`` (its ``DetMetrics`` subclass) say of the task's payload beside the
        box mAP, under the record's keys; ``own_rule``: the run matched by the task's own rule. Empty here."""
        return {}

    # --- the labels ----------------------------------------------------------------------------------
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
        """One split read for a model of this task matched by ``match`` (``--match``; a recorded rule's ``by``).

        Raises:
            InputError: A data.yaml that declares ``kpt_shape`` (pose labels) for a model of another task.
        """
        declared = pose_spec(data)
        if declared is not None:
            raise InputError(
                f"{data.yaml_path} declares kpt_shape {[declared.nkpt, declared.ndim]} (pose "
                "labels), "
                f"but the model's task is `{self.name}`: calibrate a pose model on it, or give box "
                "labels"
            )
        return self.read_labels(data, split, match=match, coco_gt=coco_gt, limit=limit)

    def read_labels(
        self,
        data: Dataset,
        split: str,
        *,
        match: str,
        coco_gt: str | Path | None,
        limit: int | None,
    ) -> Split:
        """The split's labels as this task reads them (box labels)."""
        return load_split(data, split, coco_gt=coco_gt, limit=limit)

    def box_labels_only(self, data: Dataset, split: str, coco_gt: str | Path | None) -> bool:
        """Whether the split holds box labels only where the task has labels of its own (a capture to
        parts then reads them as boxes)."""
        return True

    def captured_split(
        self,
        data: Dataset,
        split: str,
        *,
        shape: tuple[int, int] | None = None,
        coco_gt: str | Path | None = None,
        limit: int | None = None,
    ) -> Split:
        """The split a capture to parts runs over (and that a run reusing the parts fingerprints):
        its images and labels read as this task reads them (:meth:`read_split`; a pose or OBB
        model's keypoint and rotated-box lines; a detect or segment model's labels as boxes, masks
        not needed). A capture matches nothing, so a pose or OBB model's split with box labels is
        read as boxes here (:meth:`box_labels_only`); the run that uses the parts decides (and
        refuses) by its ``--match``."""
        box = self.box_labels_only(data, split, coco_gt)
        return self.read_split(
            data, split, match="box" if box else "auto", shape=shape, coco_gt=coco_gt, limit=limit
        )

    def lacks_labels(self, data: Dataset, split: str) -> bool:
        """Whether the split's labels, before they are read, cannot give the task's own rule its payload (box
        labels for a segment, pose or OBB model); ``check`` then refuses a run matched by that rule, and a
        capture to parts leaves out the payload nothing would read (a segment model's masks)."""
        return False

    def lacks_payload(self, split: Split) -> bool:
        """Whether a split read for the task's own rule lacks a ground truth's payload (a segment model's
        box-only labels)."""
        return False

    def dataset_sigmas(self, data: Dataset) -> tuple[float, ...] | None:
        """The dataset's own per-payload constants its matching uses (a pose dataset's OKS sigmas); None."""
        return None

    # --- the matching --------------------------------------------------------------------------------
    def choose_rule(
        self, option: str, splits: Sequence[Split], sigmas: Sequence[float] | None
    ) -> MatchingRule:
        """The rule of a run of this task under ``--match auto`` or the task's own rule."""
        return MatchingRule("box", option, self.words)

    def match(
        self, boxes: pl.DataFrame, split: Split, rule: MatchingRule, *, iou: float, loc_iou: float
    ) -> pl.DataFrame:
        """One head's boxes on one split labelled by the task's own rule (box IoU here)."""
        return match_boxes(boxes, split.gt, iou=iou, loc_iou=loc_iou)

    # --- the capture ---------------------------------------------------------------------------------
    def predictor_class(self) -> type:
        """Ultralytics' predictor of the task (its ``construct_result`` builds the task's ``Results``)."""
        from ultralytics.models.yolo.detect import DetectionPredictor

        return DetectionPredictor

    def decode(
        self, det: Any, lb_shape: Any, im_shape: tuple[int, int], shape: tuple[int, int] | None
    ) -> tuple[Any, np.ndarray | None]:
        """Kept rows ``det`` (n, 6 + extra) of a letterboxed image of shape ``lb_shape`` -> ``(xyxy, payload)``
        in the image of shape ``im_shape`` (h, w), as the task's predictor returns them (``det`` is scaled in
        place, as the predictor scales its rows); payload None where the rows carry none."""
        from ultralytics.utils import ops

        return ops.scale_boxes(lb_shape, det[:, :4], im_shape), None

    def hull(self, det: Any, lb_shape: Any, im_shape: tuple[int, int]) -> Any:
        """The axis-aligned boxes of kept rows ``det`` in the image (the box table's box columns), ``det`` left
        as it is."""
        from ultralytics.utils import ops

        return ops.scale_boxes(lb_shape, det[:, :4].clone(), im_shape)

    def result_boxes(self, result: Any) -> Any:
        """The scored boxes of an Ultralytics ``Results`` of the task (``Results.boxes``)."""
        return result.boxes

    def result_payload(self, result: Any, shape: tuple[int, int] | None) -> np.ndarray | None:
        """The payload of the boxes of an Ultralytics ``Results`` of the task (None: none)."""
        return None

    def rebuild_payload(
        self,
        protos: Any,
        coefficients: Any,
        boxes: Any,
        image_shape: tuple[int, int],
        *,
        rasterise: bool = True,
    ) -> tuple[np.ndarray, list]:
        """For a task whose model's output carries prototypes (:attr:`prototypes`): the payload of kept boxes
        rebuilt from the image's ``protos`` and each box's ``coefficients`` (the channels after the class
        scores) and final ``boxes`` (xyxy in the image of shape ``image_shape``), as the task's predictor
        rebuilds it; returns ``(keep, payloads)``: a bool per box (the predictor keeps it) and the kept
        boxes' payloads, in box order (None each without ``rasterise``: the same boxes, their payload
        not built).

        Raises:
            NotImplementedError: The task's model carries no prototypes (the capture never asks).
        """
        raise NotImplementedError(f"{self.words} carries no prototypes")

    def payload_series(
        self, images: Sequence[Any], shape: tuple[int, int] | None
    ) -> pl.Series | None:
        """The payload column of one head's boxes from each image's captured boxes (``ImageBoxes``; their
        ``extra``, or a segment model's ``segm``); None for a task without a payload."""
        return None

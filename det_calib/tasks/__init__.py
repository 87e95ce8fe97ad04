"""Tasks as plug-ins: each Ultralytics task det_calib calibrates is one module holding what is its own (its
payload column, its labels, its matching rule, its decoding from the predictor and from exports, its
validator), behind one contract (:class:`~det_calib.tasks.contract.Task`), registered here by name.

>>> get_task("obb").payload, get_task("detect").rule
('xywhr', 'box')

A new task is one module (a :class:`Task` subclass) and one line: ``register_task(MyTask())``. The stages
look a model's task up once (:func:`get_task`) and call its hooks.
"""

from __future__ import annotations

from det_calib.errors import InputError
from det_calib.lazy import lazy_exports
from det_calib.tasks.classify.task import Classify
from det_calib.tasks.contract import Task
from det_calib.tasks.detect_task import Detect
from det_calib.tasks.obb.task import Obb
from det_calib.tasks.pose.task import Pose
from det_calib.tasks.segment.labels import has_masks
from det_calib.tasks.segment.task import Segment

_EXPORTS = {
    "classify_root": "classify.demo_crops",
    "RUN_PARTS": "contract",
    "choose_matching": "match_rule",
    "match_split": "match_rule",
    "demo_obb_data_yaml": "obb.demo_labels",
    "load_obb_split": "obb.labels",
    "match_rotated": "obb.matching",
    "label_values": "obb.task",
    "demo_pose_data_yaml": "pose.demo_labels",
    "load_pose_split": "pose.labels",
    "match_keypoints": "pose.matching",
    "oks_sigmas": "pose.matching",
    "filled_boxes": "segment.capture_masks",
    "kept_mask_rles": "segment.capture_masks",
    "demo_segment_data_yaml": "segment.demo_labels",
    "load_segment_split": "segment.labels",
    "segment_rles": "segment.labels",
    "match_masks": "segment.matching",
    "captured_split": "task_splits",
    "load_task_split": "task_splits",
}

__all__ = [
    "RUN_PARTS",
    "TASKS",
    "Task",
    "captured_split",
    "choose_matching",
    "classify_root",
    "demo_obb_data_yaml",
    "demo_pose_data_yaml",
    "demo_segment_data_yaml",
    "filled_boxes",
    "get_task",
    "holds_hulls",
    "kept_mask_rles",
    "label_values",
    "load_obb_split",
    "load_pose_split",
    "load_segment_split",
    "load_task_split",
    "match_keypoints",
    "match_masks",
    "match_rotated",
    "match_split",
    "oks_sigmas",
    "payload_labelled",
    "result_boxes_attr",
    "segment_rles",
    "task_names",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


CLASSIFY = "classify"
"""Ultralytics' classify task's name (:class:`~det_calib.tasks.classify.task.Classify`): one answer per image,
calibrated by its own runs, not through the box stages."""

TASKS: dict[str, Task] = {}
"""Task name (a model's ``task``) -> the task."""


def _register_task(task: Task) -> Task:
    """Add ``task`` to the registry under its name (replacing one of the same name); returns it."""
    TASKS[task.name] = task
    return task


def task_names() -> tuple[str, ...]:
    """The registered box tasks' names (those the box stages run), in registration order."""
    return tuple(n for n, t in TASKS.items() if not t.per_image)


def get_task(name: str | None) -> Task:
    """The registered box task ``name``.

    Raises:
        InputError: No task of that name is registered (one line naming those that are), or the task answers
            once per image (its runs are its own: one line saying how it is run).
    """
    task = TASKS.get(name) if isinstance(name, str) else None
    if task is not None and task.per_image:
        raise InputError(task.per_image_words)
    if task is None:
        names = task_names()
        raise InputError(
            f"model task is `{name}`: det_calib calibrates {', '.join(names[:-1])} and {names[-1]} "
            "models"
        )
    return task


def answers_per_image(name: str | None) -> bool:
    """Whether a model of task ``name`` answers once per image (a classifier) rather than per box."""
    task = TASKS.get(name) if isinstance(name, str) else None
    return task is not None and task.per_image


def payload_labelled(split) -> bool:
    """Whether ``split``'s ground truth carries the payload a capture may skip when nothing reads it (a
    segment model's masks: rebuilt only where the split has ground-truth masks to match them with)."""
    return has_masks(split)


def holds_hulls(columns) -> bool:
    """Whether a box table with these ``columns`` holds a task's payload whose axis-aligned hulls are its box
    columns (an OBB model's rotated boxes: its box mAP is the hulls', Ultralytics' val scores the rotated boxes)."""
    return any(t.hull_boxes and t.payload in columns for t in TASKS.values())


def result_boxes_attr(result) -> str:
    """Where an Ultralytics ``Results`` keeps its scored boxes, whatever its task: ``obb`` for an OBB model's
    (rotated boxes; ``Results.boxes`` is None), else ``boxes`` (a detector's, a segment or pose model's)."""
    return "obb" if getattr(result, "obb", None) is not None else "boxes"


for _task in (Detect(), Segment(), Pose(), Obb(), Classify()):
    _register_task(_task)

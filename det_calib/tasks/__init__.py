"""Tasks as plug-ins: each Ultralytics task det_calib calibrates is one module holding what is its own (its
payload column, its labels, its matching rule, its decoding from the predictor and from exports, its
validator), behind one contract (:class:`~det_calib.tasks.contract.Task`), registered here by name.

>>> get_task("obb").payload, get_task("detect").rule
('xywhr', 'box')

A new task is one module (a :class:`Task` subclass) and one line: ``register_task(MyTask())``. The stages
look a model's task up once (:func:`get_task`) and call its hooks.
"""

from __future__ import annotations

from det_calib.data.segments import has_masks
from det_calib.errors import InputError
from det_calib.lazy import lazy_exports
from det_calib.tasks.contract import Task
from det_calib.tasks.detect_task import Detect
from det_calib.tasks.obb_task import Obb
from det_calib.tasks.pose_task import Pose
from det_calib.tasks.segment_task import Segment

_EXPORTS = {
    "choose_matching": "match_rule",
    "match_split": "match_rule",
    "XYWHR_COLUMN": "obb_labels",
    "corners_to_xywhr": "obb_labels",
    "load_obb_split": "obb_labels",
    "split_xywhr": "obb_labels",
    "match_rotated": "obb_matching",
    "pair_probiou": "obb_matching",
    "label_values": "obb_task",
    "AREA_COLUMN": "pose_labels",
    "KPTS_COLUMN": "pose_labels",
    "NUM_KEYPOINTS_COLUMN": "pose_labels",
    "has_keypoints": "pose_labels",
    "load_pose_split": "pose_labels",
    "split_keypoints": "pose_labels",
    "match_keypoints": "pose_matching",
    "oks_sigmas": "pose_matching",
    "table_keypoints": "pose_matching",
    "captured_split": "task_splits",
    "load_task_split": "task_splits",
}

__all__ = [
    "AREA_COLUMN",
    "CLASSIFY",
    "KPTS_COLUMN",
    "NUM_KEYPOINTS_COLUMN",
    "Task",
    "XYWHR_COLUMN",
    "answers_per_image",
    "captured_split",
    "choose_matching",
    "corners_to_xywhr",
    "get_task",
    "has_keypoints",
    "holds_hulls",
    "label_values",
    "load_obb_split",
    "load_pose_split",
    "load_task_split",
    "match_keypoints",
    "match_rotated",
    "match_split",
    "oks_sigmas",
    "pair_probiou",
    "payload_labelled",
    "result_boxes_attr",
    "split_keypoints",
    "split_xywhr",
    "table_keypoints",
    "task_names",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


CLASSIFY = "classify"
"""Ultralytics' classify task: one answer per image, calibrated by its own job
(:mod:`det_calib.pipeline.classify_run`), not through the box stages the registered tasks plug into."""

TASKS: dict[str, Task] = {}
"""Task name (a model's ``task``) -> the task."""


def _register_task(task: Task) -> Task:
    """Add ``task`` to the registry under its name (replacing one of the same name); returns it."""
    TASKS[task.name] = task
    return task


def task_names() -> tuple[str, ...]:
    """The registered tasks' names, in registration order."""
    return tuple(TASKS)


def get_task(name: str | None) -> Task:
    """The registered task ``name``.

    Raises:
        InputError: No task of that name is registered (one line naming those that are).
    """
    task = TASKS.get(name) if isinstance(name, str) else None
    if answers_per_image(name):
        raise InputError(
            "a classify model is calibrated on a folder of class folders: give --data that folder "
            "(docs/classify.md)"
        )
    if task is None:
        names = task_names()
        raise InputError(
            f"model task is `{name}`: det_calib calibrates {', '.join(names[:-1])} and {names[-1]} "
            "models"
        )
    return task


def answers_per_image(name: str | None) -> bool:
    """Whether a model of task ``name`` answers once per image (a classifier) rather than per box."""
    return name == CLASSIFY


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


for _task in (Detect(), Segment(), Pose(), Obb()):
    _register_task(_task)

"""Tasks as plug-ins: each Ultralytics task det_calib calibrates is one module holding what is its own (its
payload column, its labels, its matching rule, its decoding from the predictor and from exports, its
validator), behind one contract (:class:`~det_calib.tasks.contract.Task`), registered here by name.

>>> get_task("obb").payload, get_task("detect").rule
('xywhr', 'box')

A new task is one module (a :class:`Task` subclass) and one line: ``register_task(MyTask())``. The stages
look a model's task up once (:func:`get_task`) and call its hooks.

The folder's public face (``__all__``) is the registry (:data:`TASKS`, :func:`register_task`, :func:`get_task`,
:func:`task_names`), the contract (:class:`Task`, :data:`RUN_PARTS`) and the calls that serve every task through
them (:func:`load_task_split` reads a split as the task reads it, ``choose_matching``
and ``match_split`` its rule, :func:`result_boxes_attr`). A task's own functions (its label reader, matcher,
mask rebuild, demo data) stay in its folder: the stages reach them through the task's hooks
(``read_split``, ``match``, ``rebuild_payload``, ...) and parts (:meth:`Task.part`; the demo data of
any task: ``det_calib.demo.demo_data_yaml(task=...)``).
"""

from __future__ import annotations

from det_calib.errors import InputError
from det_calib.lazy import lazy_exports
from det_calib.tasks.classify.task import Classify
from det_calib.tasks.contract import Task
from det_calib.tasks.detect_task import Detect
from det_calib.tasks.obb.task import Obb
from det_calib.tasks.pose.task import Pose
from det_calib.tasks.segment.task import Segment

_EXPORTS = {
    "RUN_PARTS": "contract",
    "choose_matching": "match_rule",
    "match_split": "match_rule",
    "load_task_split": "task_splits",
}

__all__ = [
    "RUN_PARTS",
    "TASKS",
    "Task",
    "choose_matching",
    "get_task",
    "load_task_split",
    "match_split",
    "register_task",
    "result_boxes_attr",
    "task_names",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


CLASSIFY = "classify"
"""Ultralytics' classify task's name (:class:`~det_calib.tasks.classify.task.Classify`): one answer per image,
calibrated by its own runs, not through the box stages."""

TASKS: dict[str, Task] = {}
"""Task name (a model's ``task``) -> the task."""


def register_task(task: Task) -> Task:
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


def result_boxes_attr(result) -> str:
    """Where an Ultralytics ``Results`` keeps its scored boxes, whatever its task: ``obb`` for an OBB model's
    (rotated boxes; ``Results.boxes`` is None), else ``boxes`` (a detector's, a segment or pose model's)."""
    return "obb" if getattr(result, "obb", None) is not None else "boxes"


for _task in (Detect(), Segment(), Pose(), Obb(), Classify()):
    register_task(_task)

"""The classify task: a model that answers once per image (Ultralytics' ``Classify`` head: a linear layer and a
softmax), with no box to match. Its runs are its own (:data:`~det_calib.tasks.contract.RUN_PARTS`): the
folder's ``pipeline_run`` (``calibrate``), ``check_run`` (``check``) and ``thresholds_run`` (``thresholds``),
which the command line reaches through the registry; the box stages refuse it
(:func:`det_calib.tasks.get_task`).
"""

from __future__ import annotations

import json
from pathlib import Path

from det_calib.tasks.contract import Task

__all__ = ["Classify", "is_classify_run"]


class Classify(Task):
    """Ultralytics' classify task: one answer per image, calibrated by its own runs."""

    name = "classify"
    model_words = "a classify model"
    validator = ("classify", "ClassificationValidator")
    fusable = False
    records_rule = False
    per_image = True
    per_image_words = (
        "a classify model is calibrated on a folder of class folders: give --data that folder "
        "(docs/classify.md)"
    )
    own_methods = ("none", "temperature", "vector", "matrix")  # softmax_maps.MULTICLASS_METHODS


def is_classify_run(run_dir: str | Path) -> dict | None:
    """The record of a classify run in ``run_dir`` (its ``calibration.json``), else None."""
    path = Path(run_dir) / "calibration.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("task") == Classify.name else None

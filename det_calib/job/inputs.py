"""The resolved inputs of a run: the detector, the dataset, the heads, the image size; the fit and eval splits
(with each task's own ground truth: masks for a segment model, keypoints for a pose model, rotated boxes for
an OBB model).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det_calib import demo
from det_calib.capture.exported import is_export, load_export
from det_calib.capture.parts import ModelFacts
from det_calib.capture.predictor import load_detector
from det_calib.data.box_table import HEADS, run_meta
from det_calib.data.ground_truth import (
    Dataset,
    Split,
    check_class_names,
    load_data_yaml,
)
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.job.model_process import model_facts
from det_calib.job.settings import Settings
from det_calib.record.run_folder import BOXES_FILE
from det_calib.record.run_result import CALIBRATION_FILE
from det_calib.tasks import get_task
from det_calib.tasks.task_splits import load_task_split

_log = logging.getLogger(__name__)

_DUAL_HEADS: tuple[str, ...] = ("nms", "e2e")
"""What ``--head both`` names: the two heads of a dual YOLO detect head (YOLOv10, YOLO26)."""


# ---------------------------------------------------------------------------------------- steps
def _resolve_splits(
    ds: Dataset, fit_split: str | None, eval_split: str | None
) -> tuple[str, str | None, bool]:
    """:func:`_chosen_splits`; where the two name the same images (a data.yaml whose ``val`` and
    ``test`` are one folder), fitting and evaluating on them would report the fit's own figures as
    held-out ones: splits chosen by default are halved then, splits named are kept, with a warning."""
    fit, ev, halve = _chosen_splits(ds, fit_split, eval_split)
    if ev is None or _resolved(ds, fit) != _resolved(ds, ev):
        return fit, ev, halve
    named = bool(fit_split and eval_split)
    _log.warning(
        "splits `%s` and `%s` of %s are the same images: %s",
        fit,
        ev,
        ds.yaml_path,
        "the eval figures are the fit's own (name one split twice for halves of it)"
        if named
        else "fit and eval on image-level halves of them",
    )
    return (fit, ev, halve) if named else (fit, None, True)


def _resolved(ds: Dataset, split: str) -> list[Path]:
    return sorted(Path(p).resolve() for p in ds.splits.get(split, []))


def _chosen_splits(
    ds: Dataset, fit_split: str | None, eval_split: str | None
) -> tuple[str, str | None, bool]:
    """Choose the fit and eval splits.

    Explicit names win. Otherwise ``calib`` and ``test``; else the first two of
    ``calib``, ``val``, ``test`` that exist; else an image-level half/half split of ``val``.

    Returns:
        ``(fit, eval, halve)``: with ``halve`` True, ``fit`` is split in two and ``eval`` is None.
    """
    if fit_split and eval_split:
        if fit_split == eval_split:
            return fit_split, None, True
        return fit_split, eval_split, False
    have = [s for s in ("calib", "val", "test") if s in ds.splits]
    if fit_split or eval_split:
        given = fit_split or eval_split
        others = [s for s in have if s != given]
        if not others:
            return given, None, True
        return (given, others[0], False) if fit_split else (others[0], given, False)
    if "calib" in have and "test" in have:
        return "calib", "test", False
    if len(have) >= 2:
        return have[0], have[1], False
    if have:
        return have[0], None, True
    raise InputError(
        f"{ds.yaml_path} has none of the splits calib, val, test; name them with "
        "`fit_split`/`eval_split`"
    )


@dataclass
class Inputs:
    """The resolved inputs of a run."""

    model: Path
    data: Path
    yolo: Any
    ds: Dataset
    heads: list[str]
    imgsz: int
    matching: MatchingRule | None = None
    """How boxes are matched to the ground truth (:func:`~det_calib.tasks.match_rule.choose_matching`, set
    once the splits are read); None: box IoU."""
    facts: ModelFacts | None = None
    """What the run read of a ``.pt`` model (None for an export), recorded with its boxes. A run
    reusing boxes reads only these (``yolo`` is None then: they were recorded with the boxes, or read
    in a child process, :mod:`det_calib.job.model_process`)."""

    @property
    def task(self) -> str:
        """The model's Ultralytics task (``detect``, ``segment``, ``pose``, ``obb``)."""
        if self.facts is not None:
            return self.facts.task
        return getattr(self.yolo, "task", None) or "detect"

    @property
    def payload_shape(self) -> tuple[int, int] | None:
        """The shape of each box's payload the model declares (a pose model's ``kpt_shape`` ``(K, ndim)``); None
        for a task without one."""
        if self.facts is not None:
            return self.facts.payload_shape
        return get_task(self.task).model_shape(self.yolo)


def detections_source(run_dir: str | Path) -> str | None:
    """The file of detections a run was calibrated from (as its ``boxes.parquet`` records it); None for a
    run of a model (or a run folder without a box table)."""

    path = Path(run_dir) / BOXES_FILE
    model = str((run_meta(path) or {}).get("model", "")) if path.is_file() else ""
    return model.removeprefix("detections:") if model.startswith("detections:") else None


def _recorded_limit(boxes: str | Path) -> int | None:
    """The ``--limit`` a run's box table was captured with (None: none, capture parts, or a table
    written before it was recorded), for ``--boxes RUN`` without ``--limit``: its splits' first images
    again, not all of them (whose fingerprint the boxes would not match)."""
    path = Path(boxes)
    path = path / BOXES_FILE if path.is_dir() else path
    if not path.is_file() or path.suffix != ".parquet":
        return None
    try:
        limit = ((run_meta(path) or {}).get("settings") or {}).get("limit")
    except InputError:
        return None
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None


def _recorded_inputs(boxes: str | Path) -> tuple[Path | None, Path | None]:
    """The model and data a run folder (or its ``boxes.parquet``) recorded, for ``--boxes RUN`` with
    neither given; ``(None, None)`` for capture parts or a folder without a record (the demo's then).

    Raises:
        InputError: The recorded model or data is no longer where the run found it.
    """
    folder = Path(boxes)
    folder = folder.parent if folder.is_file() else folder
    try:
        rec = json.loads((folder / CALIBRATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    model, data = (rec.get("model"), rec.get("data")) if isinstance(rec, dict) else (None, None)
    if not (isinstance(model, str) and isinstance(data, str) and model and data):
        return None, None
    if detections_source(folder) is not None:
        raise InputError(
            f"the run in {folder} was calibrated from a file of detections ({model}): name it "
            "again with `detections`, and `data`"
        )
    for what, path in (("model", model), ("data", data)):
        if not Path(path).exists():
            raise InputError(
                f"the run in {folder} recorded its {what} as {path}, which is not there: pass "
                "`model` and `data`"
            )
    return Path(model), Path(data)


def resolve_inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> Inputs:
    """Load the detector and the dataset, check they agree, choose the heads and the image size. A run
    reusing boxes (``boxes``) reads only the checkpoint's facts (:func:`~det_calib.job.model_process.model_facts`:
    in a child process where torch is not imported, so the process that holds the boxes never imports it)."""

    if model is None and data is None and s.boxes:  # `--boxes RUN` alone: the run's own inputs
        model, data = _recorded_inputs(s.boxes)
    if s.boxes and s.limit is None and (limit := _recorded_limit(s.boxes)) is not None:
        s.limit = limit
        _log.info("the boxes in %s were captured with --limit %d: so is this run", s.boxes, limit)
    model, data = demo.default_inputs(model, data)
    exported = is_export(
        model
    )  # an ONNX / OpenVINO export: det_calib.capture.exported reads and runs it
    if s.boxes and not exported:
        facts = model_facts(model, s.boxes)
        ds = load_data_yaml(data)
        check_class_names(facts.names, ds.names, data_path=data)
        heads = _chosen_heads(s, facts.heads)
        return Inputs(model, data, None, ds, heads, s.imgsz or facts.imgsz, facts=facts)
    yolo = load_export(model) if exported else load_detector(model)
    ds = load_data_yaml(data)
    check_class_names([yolo.names[i] for i in sorted(yolo.names)], ds.names, data_path=data)
    if exported:
        heads = _chosen_heads(s, yolo.heads)
        return Inputs(model, data, yolo, ds, heads, s.imgsz or yolo.imgsz)
    facts = ModelFacts.of(yolo)  # as loaded: recorded with the run's boxes
    heads = _chosen_heads(s, facts.heads)
    return Inputs(model, data, yolo, ds, heads, s.imgsz or facts.imgsz, facts=facts)


def _chosen_heads(s: Settings, have: list[str]) -> list[str]:
    """The heads the run calibrates (``head``) of those the model ``have``s."""
    heads = {"auto": have, "both": list(_DUAL_HEADS), **{h: [h] for h in HEADS}}[s.head]
    missing = [h for h in heads if h not in have]
    if missing:
        raise InputError(
            f"the model has no `{missing[0]}` head (it has: {', '.join(have)}); choose `head` "
            + (" or ".join(have) if len(have) <= 2 else f"auto or one of {', '.join(have)}")
        )
    return heads


def load_splits(
    ds: Dataset, s: Settings, *, task: str = "detect", payload_shape: tuple[int, int] | None = None
) -> tuple[Split, Split]:
    """The fit and the eval split (see :func:`_resolve_splits`), read for the model's task by
    :func:`~det_calib.tasks.task_splits.load_task_split`: for a ``segment`` model each with its ground-truth
    masks (YOLO polygons or COCO ``segmentation``) unless ``--match box`` asks for none; for a ``pose`` model
    its keypoints (``kpt_shape`` of data.yaml, checked against the model's ``kpt_shape``); for an ``obb``
    model its rotated boxes."""
    fit_name, eval_name, halve = _resolve_splits(ds, s.fit_split, s.eval_split)

    def load(name: str) -> Split:
        return load_task_split(
            ds,
            name,
            task=task,
            match=s.match,
            payload_shape=payload_shape,
            coco_gt=s.coco_gt,
            limit=s.limit,
        )

    if halve:
        whole = load(fit_name)
        fit, ev = whole.halves(seed=s.seed)
        _log.info(
            "fit and eval: image-level halves of `%s` (%d + %d images)",
            fit_name,
            len(fit.images),
            len(ev.images),
        )
    else:
        fit = load(fit_name)
        ev = load(eval_name)
    for sp in (fit, ev):
        if sp.corrupt:
            _log.warning(
                "split `%s`: skipped %d image(s) (unreadable, or with a malformed label)",
                sp.name,
                len(sp.corrupt),
            )
    return fit, ev

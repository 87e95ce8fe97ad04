"""``calibrate --detections``: a run whose boxes come from a file of detections, not from a forward pass.

The engine that wrote the file is never run (a TensorRT, DeepStream, Hailo or RKNN engine, another
detector library): :func:`detections_inputs` resolves the data alone, :func:`read_run_detections`
places the file's boxes on the fit and eval splits (:mod:`det_calib.job.detections_file`); what the run
deploys in place of ``calibrated.pt`` (the portable map, :mod:`det_calib.deploy.portable`, its ONNX graph and
the per-class raw thresholds) is written with the run's other outputs (:mod:`det_calib.pipeline.outputs`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.capture.parts import data_fingerprint
from det_calib.data.box_table import run_meta
from det_calib.data.ground_truth import (
    Split,
    check_class_names,
    image_suffixes,
    list_images,
    load_data_yaml,
)
from det_calib.deploy.portable import portable_head, raw_thresholds
from det_calib.errors import InputError
from det_calib.job.detections_file import (
    DetectionsRead,
    detections_format,
    image_keys,
    read_detections,
)
from det_calib.job.inputs import Inputs, detections_source
from det_calib.job.model_process import capture_batch
from det_calib.job.reuse import reuse_boxes
from det_calib.job.settings import Settings

_log = logging.getLogger(__name__)

__all__ = ["CheckDetections", "detections_inputs", "read_run_detections"]


def detections_inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> Inputs:
    """The run's inputs without a model: the data, the one head the file is of (``nms`` unless
    ``--head e2e``); a model or ``boxes`` given beside the file refused (the file's scores are the
    engine's, not the model's)."""
    if model is not None:
        raise InputError(
            "`model` and `detections` exclude each other: a run on a file of detections loads no "
            "model "
            "(its map is written as portable_map.json, docs/detections.md)"
        )
    if s.head == "both":
        raise InputError(
            "Expected `head` nms or e2e with `detections` (a file holds one head's boxes), but got "
            "both"
        )
    if data is None:
        raise InputError(
            "`detections` needs `data` (the data.yaml of the images the file scored, or with "
            "`coco_gt` the one that names its classes): a file of detections brings no ground truth"
        )
    for name in ("conf_floor", "max_det", "imgsz", "batch", "device"):
        if getattr(s, name) != _DEFAULTS[name]:
            raise InputError(
                f"`{name}` sets det_calib's own capture, and a run on a file of detections "
                "captures nothing (its engine wrote the boxes with its own settings): drop it"
            )
    ds = load_data_yaml(data)
    head = "nms" if s.head == "auto" else s.head
    return Inputs(
        model=Path(s.detections),
        data=Path(data),
        yolo=None,
        ds=ds,
        heads=[head],
        imgsz=int(s.imgsz or 0),
    )


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}


def _known_keys(inputs: Inputs) -> set[str]:
    """Every image of the data's splits as a file may name it (so a detection of an image that
    ``--limit`` leaves out is left out, not refused)."""
    known: set[str] = set()
    if inputs.ds is None:
        return known
    for name, sources in inputs.ds.splits.items():
        try:
            images = list_images(sources, split=name)
        except InputError:
            continue
        root = sources[0] if len(sources) == 1 and sources[0].is_dir() else inputs.ds.root
        for p in images:
            rel = p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name
            known.update(image_keys(rel))
    return known


def read_run_detections(
    inputs: Inputs, splits: Sequence[Split], s: Settings
) -> tuple[dict[str, list[pl.DataFrame]], dict[str, Any]]:
    """The file's boxes on each split (as :func:`det_calib.job.reuse.reuse_boxes` hands them back) and
    what ``boxes.parquet`` records about them (``detections``: :class:`DetectionsRead`)."""

    if s.boxes:  # an earlier run of this file: its boxes, checked against the file and the data
        return _reuse_detections_run(inputs, splits, s)
    head = inputs.heads[0]
    batch = capture_batch(s.batch, s.device)  # recorded as a capture's; torch asked before the read
    tables, read = read_detections(
        s.detections,
        splits,
        list(inputs.ds.names),
        head=head,
        known=_known_keys(inputs),
        coco_gt=s.coco_gt,
    )
    floor = read.high_floor
    if floor is not None and s.fit_range is None and s.fit_min_conf is None:
        s.fit_range = f"{floor:.6g}"  # calibrated only above the file's lowest score
        _log.warning("the lowest score in %s is %.4g: fitting above it only", s.detections, floor)
    fingerprints = {
        "format": 1,
        "model": _file_fingerprint(s.detections),
        "splits": {
            sp.name: data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt)
            for sp in splits
        },
        "heads": [head],
        "settings": s.capture_settings(inputs.imgsz, batch=batch),
        "detections": read.to_dict(),
    }
    return {head: tables}, fingerprints


def _file_fingerprint(source: str | Path) -> str:
    """What ``boxes.parquet`` records as a detections run's model: the file's (or folder's) path."""
    return f"detections:{Path(source).resolve()}"


def _reuse_detections_run(
    inputs: Inputs, splits: Sequence[Split], s: Settings
) -> tuple[dict[str, list[pl.DataFrame]], dict[str, Any]]:
    """``calibrate --detections FILE --boxes RUN``: the boxes an earlier run read from FILE (RUN's
    ``boxes.parquet``, checked by :func:`det_calib.job.reuse.reuse_boxes` against the file, the splits'
    images and labels and the capture settings), matched again with this run's settings. What the file
    held (``detections``) and the fit floor it set come from that run."""

    source = Path(s.boxes)
    run_file = source if source.is_file() else source / "boxes.parquet"
    meta = run_meta(run_file) if run_file.is_file() else None
    if meta is None or "detections" not in meta:
        raise InputError(
            "Expected `boxes` to be a run of a file of detections (its folder or boxes.parquet) "
            "with "
            f"`detections`, but got {source} ("
            + ("not a run's box table)" if meta is None else "a run of a model: give its `model`)")
        )
    if meta["model"] != _file_fingerprint(s.detections):
        raise InputError(
            f"the boxes in {run_file} were read from another file of detections "
            f"({meta['model'].removeprefix('detections:')}, not {Path(s.detections).resolve()})"
        )
    read = DetectionsRead.from_dict(meta["detections"], "detections")
    if read.high_floor is not None and s.fit_range is None and s.fit_min_conf is None:
        s.fit_range = f"{read.high_floor:.6g}"  # as the run that read the file
    captured, fingerprints = reuse_boxes(source, inputs, splits, s, model_fp=meta["model"])
    return captured, {**fingerprints, "detections": meta["detections"]}


class CheckDetections:
    """``check --detections``: the new images' boxes from a file of detections in place of a capture (no
    model runs). :attr:`inputs` are the check's: no model; the one head the file is of; the run's matching
    rule, which must be box IoU (a file holds boxes, not masks, keypoints or rotated boxes); :meth:`boxes`
    reads a split's.

    Args:
        run: The run checked (:class:`~det_calib.record.run_folder.Run`).
        source: The file (or folder) of the new images' detections.
        heads: The heads checked (one: a file holds one head's boxes).
        ds: The new images' labelled data (its classes checked against the run's), or None.

    Raises:
        InputError: The data's classes are not the run's, the file is of no format read, more than one
            head, or the run matched boxes by another measure than box IoU.
    """

    def __init__(self, run: Any, source: str | Path, heads: Sequence[str], ds: Any) -> None:
        if ds is not None:
            check_class_names(run.class_names, ds.names, data_path=ds.yaml_path)
        detections_format(source)  # a file or folder that exists, of a format read
        if len(heads) != 1:
            raise InputError(
                "Expected one `head` with `detections` (a file holds one head's boxes), but the "
                "run has "
                f"{', '.join(heads)}: choose one with `head`"
            )
        rule = run.result.matching
        if rule is not None and rule.by != "box":
            raise InputError(
                f"the run matched boxes by {rule.measure}: a file of detections holds boxes only, "
                "so it "
                "cannot be checked against it (check with `model`)"
            )
        self.source = Path(source)
        self.inputs = Inputs(
            model=Path(source),
            data=ds.yaml_path if ds is not None else Path(),
            yolo=None,
            ds=ds,
            heads=list(heads),
            imgsz=int(run.settings.imgsz or 0),
            matching=rule,
        )

    @classmethod
    def of_run(
        cls,
        run_dir: str | Path,
        run: Any,
        source: str | Path | None,
        heads: Sequence[str],
        ds: Any,
    ) -> CheckDetections | None:
        """The check's file of detections (``source``); None where no file is given and the run's model
        captures the new images.

        Raises:
            InputError: No file given for a run calibrated from a file of detections (it has no model);
                what the constructor refuses.
        """
        if source is None:
            found = detections_source(run_dir)
            if found is None:
                return None
            raise InputError(
                f"the run in {run_dir} was calibrated from a file of detections ({found}), not a "
                "model: "
                "check it on a file of the new images' detections with `detections` "
                "(docs/detections.md)"
            )
        return cls(run, source, heads, ds)

    def boxes(
        self,
        split: Split,
        names: Sequence[str],
        calibrator: LogitCalibrator,
        method: str,
        conf: float,
    ) -> tuple[pl.DataFrame, DetectionsRead]:
        """The file's boxes of the new images (``split``; detections of the data's other images, or of the
        folder's images beyond ``--limit``, left out), and what was read.

        Raises:
            InputError: What :func:`~det_calib.job.detections_file.read_detections` refuses; a file
                written at a conf so high that the check's kept set (calibrated conf above ``conf``)
                needs boxes it never wrote: a class whose raw threshold equivalent to ``conf`` is below
                the file's lowest score.
        """
        inputs, source = self.inputs, self.source
        known = _known_keys(inputs) if inputs.ds is not None else _folder_keys(split.root)
        tables, read = read_detections(
            source, [split], list(names), head=inputs.heads[0], known=known
        )
        floor = read.high_floor
        raw = (
            raw_thresholds(portable_head(calibrator, method, len(names)), conf, len(names))
            if floor
            else None
        )
        if raw is not None and min(raw) < floor:
            c = int(min(range(len(raw)), key=raw.__getitem__))
            raise InputError(
                f"the lowest score in {source} is {floor:.4g}, but the check's kept set (calibrated "
                "conf "
                f"above {conf:g}) keeps {names[c]} boxes from a raw score of {raw[c]:.4g}: boxes "
                "it needs "
                "were never written; dump the detections at conf=0.001"
            )
        return tables[0], read


def _folder_keys(root: Path | None) -> set[str]:
    """Every image under a folder of unlabelled images as a file may name it."""

    if root is None:
        return set()
    known: set[str] = set()
    for p in root.rglob("*"):
        if p.suffix.lower() in image_suffixes():
            known.update(image_keys(p.relative_to(root).as_posix()))
    return known

"""``calibrate --detections``: a run whose boxes come from a file of detections, not from a forward pass.

The engine that wrote the file is never run (a TensorRT, DeepStream, Hailo or RKNN engine, another
detector library): :func:`detections_inputs` resolves the data alone, :func:`read_run_detections`
places the file's boxes on the fit and eval splits (:mod:`det_calib.capture.detections_file`), and
:func:`detections_outputs` writes what a run of a foreign engine deploys in place of ``calibrated.pt``:
the portable map (:mod:`det_calib.deploy.portable`), its ONNX graph and the per-class raw thresholds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.capture.detections_file import DetectionsRead, image_keys, read_detections
from det_calib.data.ground_truth import Split, list_images, load_data_yaml
from det_calib.errors import InputError
from det_calib.job.inputs import Inputs, default_inputs
from det_calib.job.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["detections_inputs", "detections_outputs", "read_run_detections"]


def detections_inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> Inputs:
    """The run's inputs without a model: the data, the one head the file is of (``nms`` unless
    ``--head e2e``); a model or ``boxes`` given beside the file refused (the file's scores are the
    engine's, not the model's)."""
    if model is not None:
        raise InputError("`model` and `detections` exclude each other: a run on a file of detections loads no model "
                         "(its map is written as portable_map.json, docs/detections.md)")
    if s.boxes:
        raise InputError("`boxes` and `detections` exclude each other: give the file of detections, or an earlier "
                         "run's boxes")
    if s.head == "both":
        raise InputError("Expected `head` nms or e2e with `detections` (a file holds one head's boxes), but got both")
    _, data = default_inputs(None, data) if data is None else (None, Path(data))
    ds = load_data_yaml(data)
    head = "nms" if s.head == "auto" else s.head
    return Inputs(model=Path(s.detections), data=Path(data), yolo=None, ds=ds, heads=[head], imgsz=int(s.imgsz or 0))


def _known_keys(inputs: Inputs) -> set[str]:
    """Every image of the data's splits as a file may name it (so a detection of an image that
    ``--limit`` leaves out is left out, not refused)."""
    known: set[str] = set()
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


def read_run_detections(inputs: Inputs, splits: Sequence[Split], s: Settings
                        ) -> tuple[dict[str, list[pl.DataFrame]], dict[str, Any]]:
    """The file's boxes on each split (as :func:`det_calib.job.reuse.reuse_boxes` hands them back) and
    what ``boxes.parquet`` records about them (``detections``: :class:`DetectionsRead`)."""
    from det_calib.capture.parts import data_fingerprint
    from det_calib.job.reuse import capture_settings

    head = inputs.heads[0]
    tables, read = read_detections(s.detections, splits, list(inputs.ds.names), head=head,
                                   known=_known_keys(inputs), coco_gt=s.coco_gt)
    floor = read.high_floor
    if floor is not None and s.fit_range is None and s.fit_min_conf is None:
        s.fit_range = f"{floor:.6g}"  # calibrated only above the file's lowest score
        log.warning("the lowest score in %s is %.4g: fitting above it only", s.detections, floor)
    fingerprints = {
        "format": 1, "model": f"detections:{Path(s.detections).resolve()}",
        "splits": {sp.name: data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt) for sp in splits},
        "heads": [head], "settings": capture_settings(s, inputs.imgsz), "detections": read.to_dict(),
    }
    return {head: tables}, fingerprints


def detections_outputs(stage: Path, result: Any, fingerprints: dict[str, Any], s: Settings) -> list[str]:
    """What a detections run writes in place of ``calibrated.pt`` (the portable map, its ONNX graph,
    the per-class raw thresholds, DeepStream's block), the Ultralytics val it cannot run, and the
    summary's lines about the file."""
    import dataclasses

    from det_calib.record.run_result import ValCheck

    read = DetectionsRead(**fingerprints["detections"])
    lines: list[str] = []
    for h in result.heads:
        lines += read.summary_lines(h, s.conf)
        if s.run_val:
            result.results[h] = dataclasses.replace(result.results[h], ultralytics_val=ValCheck(
                split=result.settings.eval_split, note="not run: a detections file: Ultralytics val cannot run a "
                "foreign engine (the mAP check is COCO mAP of the file's own boxes)"))
    from det_calib.deploy.portable import write_portable_outputs

    return lines + write_portable_outputs(stage, result, conf=s.conf)

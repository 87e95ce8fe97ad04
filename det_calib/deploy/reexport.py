"""The calibrated engine of an export whose graph det_calib does not edit (LiteRT, NCNN, TensorRT): the run's
calibrator folded into the ``.pt`` the export was made from, exported again by Ultralytics with the export's own
recorded arguments (:func:`reexport_calibrated`). ONNX and OpenVINO graphs are edited in place instead
(:mod:`det_calib.deploy.calibrated_export`).
"""

from __future__ import annotations

import ast
import logging
import shutil
from pathlib import Path
from typing import Any

from det_calib.capture.exported import ExportInfo, read_export
from det_calib.capture.predictor import load_detector
from det_calib.errors import InputError, first_line
from det_calib.record.run_result import read_calibrators
from det_calib.tasks import get_task


def _recorded_export_args(model: str | Path) -> dict[str, Any]:
    """The export arguments an export's metadata records (Ultralytics keeps those of its format:
    ``quantize``, ``data``, ``fraction``, ``nms``, ``batch``, ...); ``{}`` when it records none."""
    from ultralytics.nn.backends.base import BaseBackend

    args = BaseBackend.read_metadata(Path(model)).get("args")
    return dict((ast.literal_eval(args) if isinstance(args, str) else args) or {})


def _export_arguments(info: ExportInfo) -> dict[str, Any]:
    """Ultralytics ``export`` arguments that make another export like ``info``'s: its format, size and the
    arguments its metadata records (``quantize``, ``data``, ``fraction``, ``nms``, ...)."""

    args = _recorded_export_args(info.path)
    fmt = {"tensorrt": "engine"}.get(info.format, info.format)
    return {
        "format": fmt,
        "imgsz": list(info.imgsz),
        **{k: v for k, v in args.items() if v is not None},
    }


def _check_source(source: Path, info: ExportInfo) -> None:
    """Raise a one-line :class:`InputError` unless ``source`` loads as a model of the export's task, classes and
    keypoint shape (what the export made from it has); checked before anything is folded or exported."""

    yolo = load_detector(source)
    what = f"not the .pt {info.path.name} was exported from"
    if yolo.task != info.task:
        raise InputError(
            f"`source` {source} is a `{yolo.task}` model and {info.path.name} a `{info.task}` "
            "export: " + what
        )
    if [str(yolo.names[k]) for k in sorted(yolo.names)] != info.names:
        raise InputError(f"`source` {source} does not have the classes of {info.path.name}: {what}")
    shape = get_task(yolo.task).head_shape(yolo.model.model[-1])
    if shape != info.payload_shape:
        raise InputError(
            f"`source` {source} has keypoints of shape {shape} and {info.path.name} "
            f"{info.payload_shape}: " + what
        )


def reexport_calibrated(
    export: str | Path, source: str | Path, calibration: str | Path, out: str | Path
) -> Path:
    """The calibrated engine of a format det_calib does not edit: ``calibration``'s calibrator of the export's
    head folded into ``source`` (the ``.pt`` the export was made from), exported again by Ultralytics with
    :func:`_export_arguments`, moved to ``out`` (a ``.tflite`` file, a ``*_ncnn_model`` folder, an ``.engine``).

    The folded map is stock layers (a scaled last conv, or conv + ReLU hinges), so it survives the export;
    an FP32 engine then computes it on its own logit. A quantised engine (INT8) is quantised again, with the
    folded layer inside: another INT8 engine, not the calibrated one (``det-calib apply`` refuses it;
    ``docs/engines_mobile.md`` measures how far it lands).

    A segment, pose or OBB export is made again the same way: the fold touches the class branch only, so the
    boxes, masks, keypoints and rotated boxes of the calibrated engine are the raw engine's.

    Raises:
        InputError: ``source`` not a ``.pt`` of the export's task, classes and keypoint shape, no calibrator for
            the export's head, or the export failing (its one line).
    """
    import tempfile

    from det_calib.deploy.fold import write_run_checkpoint

    info = read_export(export)
    source, out = Path(source), Path(out)
    if source.suffix != ".pt" or not source.is_file():
        raise InputError(
            f"Expected argument `source` to be the .pt checkpoint {info.path.name} was exported "
            "from, "
            f"but got {source}"
        )
    _check_source(source, info)
    records = read_calibrators(calibration)
    if info.head not in records:
        raise InputError(
            f"{calibration} has no calibrator for the `{info.head}` head the export carries"
        )
    kw = _export_arguments(info)
    want_suffix = {"litert": ".tflite", "tensorrt": ".engine"}.get(info.format)
    if want_suffix and out.suffix != want_suffix:
        raise InputError(
            f"Expected `out` to end in {want_suffix} (Ultralytics reads the format from it), "
            f"but got {out.name}"
        )
    if info.format == "ncnn" and not out.name.endswith("_ncnn_model"):
        raise InputError(
            "Expected `out` to be a folder named *_ncnn_model (Ultralytics reads the format from "
            "it), "
            f"but got {out.name}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".det_calib_reexport_", dir=out.parent) as tmp:
        fold_log = logging.getLogger(write_run_checkpoint.__module__)
        level = fold_log.level
        fold_log.setLevel(logging.WARNING)
        try:  # (a checkpoint in a temporary folder, not an output: its writer's line is not said)
            pt = write_run_checkpoint(
                source,
                Path(tmp) / "calibrated.pt",
                {info.head: records[info.head]},
                metadata={"calibration": str(calibration), "source_export": str(info.path)},
            )
        finally:
            fold_log.setLevel(level)
        from ultralytics import YOLO

        model = YOLO(str(pt))
        try:
            made = Path(model.export(**kw, verbose=False))
        except (
            Exception
        ) as e:  # the exporter's own failure (a missing converter, no GPU for TensorRT)
            raise InputError(
                f"cannot export the calibrated checkpoint to {info.format}: {first_line(e)}"
            ) from None
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        made.rename(out)
    return out  # (the caller says what it wrote)

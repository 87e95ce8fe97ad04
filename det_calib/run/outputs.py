"""The output folder of a run: ``calibration.json``, ``boxes.parquet``, ``calibrated.pt``, the report,
``summary.txt`` and the thresholds, written in a staging folder and swapped in whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators import registry
from det_calib.data.ground_truth import (
    Split,
)
from det_calib.io import read_manifest, staged_output
from det_calib.record.run_result import (
    RunResult,
)
from det_calib.run import clock
from det_calib.run.inputs import Inputs
from det_calib.run.settings import Settings
from det_calib.run.summary import write_summary_text
from det_calib.run.ultralytics_checks import _ultralytics_checks, detection_change, val_not_run

log = logging.getLogger(__name__)


def _gt_per_class(split: Split, n_classes: int) -> list[int]:
    """Non-crowd ground-truth boxes of a split per class id (recorded as ``gt_counts``)."""
    cls = split.gt.filter(~pl.col("crowd"))["cls"].to_numpy().astype(np.int64)
    return np.bincount(cls[(cls >= 0) & (cls < n_classes)], minlength=n_classes).tolist()


def _tune_thresholds(folder: Path, result: RunResult, s: Settings) -> list[str]:
    """Per-class conf thresholds of every head, written as ``thresholds.json``; the summary's lines."""
    from det_calib.thresholds.per_class import summary_lines, tune_run

    lines: list[str] = []
    for head in result.heads:
        doc = tune_run(folder, head=head, target_precision=s.target_precision, delta=s.delta,
                       unit=s.threshold_unit, fallback=s.threshold_fallback, n_boot=s.n_boot, seed=s.seed)
        lines += summary_lines(doc, head=head)
    return lines


NOT_FOLDED = ("[{heads}] no calibrated.pt: a size-conditioned map reads each box's size, which the class conv "
              "cannot see; calibration.json holds the map: deploy it with det_calib.attach(YOLO(model), run_folder) "
              "(docs/size_and_hook.md)")
"""The summary's line in place of the checkpoint when a head's map reads the box's size."""

NOT_FOLDABLE = ("no calibrated.pt: det_calib does not fold a map into {article} `{task}` model's checkpoint yet "
                "(det_calib.deploy.fold.FOLDABLE_TASKS); calibration.json holds the map")
"""The summary's line in place of the checkpoint when the model's task takes no fold."""


def _write_outputs(out: Path, result: RunResult, boxes: pl.DataFrame, inputs: Inputs, splits: tuple[Split, Split],
                   s: Settings, t_start: float, fingerprints: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write every output of a run (the Ultralytics val checks need the written checkpoint).

    Everything is written into a staging folder that replaces ``out`` in one swap at the end
    (:func:`det_calib.io.staged_output`): a run that fails or is interrupted leaves the previous
    run's folder as it was. ``result`` gets its Ultralytics val checks and its run time.
    """
    from det_calib.capture.exported import is_export
    from det_calib.deploy.fold import FOLDABLE_TASKS, write_run_checkpoint
    from det_calib.run.reuse import run_fingerprints, write_run_boxes

    ev = splits[1]
    # Everything is written into a staging folder that replaces `out` in one swap when the run
    # has succeeded (det_calib.io.staged_output): a run that fails or is interrupted leaves the
    # previous run's folder as it was, never a mix of old and new.
    with staged_output(out) as stage:
        write_run_boxes(boxes, stage / "boxes.parquet", fingerprints or run_fingerprints(inputs, splits, s))
        meta = {"iou_match": s.iou, "fit_split": result.settings.fit_split, "data": result.data}
        records = {h: r.calibrator for h, r in result.results.items() if r.calibrator is not None}
        exported, engine_lines = is_export(inputs.model), []
        unfolded = [h for h, r in records.items() if registry.uses_size(r.method)]
        unfoldable = not exported and inputs.task not in FOLDABLE_TASKS
        if unfolded:  # a map that reads the box's size has no place in the class conv
            engine_lines = [NOT_FOLDED.format(heads=", ".join(unfolded))]
        elif unfoldable:  # the task's head takes no fold (yet): no calibrated.pt, no val of it
            engine_lines = [NOT_FOLDABLE.format(task=inputs.task, article="an" if inputs.task == "obb" else "a")]
        elif exported:  # the calibration appended to the export's graph, and its engine record
            from det_calib.deploy.calibrated_export import write_run_engine

            engine_lines = write_run_engine(inputs.model, stage, result, records, meta).summary_lines()
        else:
            write_run_checkpoint(inputs.model, stage / "calibrated.pt", records, metadata=meta)
        if s.run_val and (unfolded or unfoldable):
            why = ("no calibrated.pt: a size-conditioned map cannot fold into the checkpoint" if unfolded else
                   f"no calibrated.pt: a `{inputs.task}` model's checkpoint takes no fold yet")
            for h in inputs.heads:
                result.results[h] = _replace(result.results[h], ultralytics_val=val_not_run(ev.name, why))
        elif s.run_val and (s.boxes or exported):  # reusing boxes: no forward pass; an export: no .pt to val
            why = (f"boxes reused from {s.boxes}; run calibrate without `boxes` to verify with val" if s.boxes else
                   "an exported engine (the calibrated export scores every box by the same monotone map per class)")
            for h in inputs.heads:
                result.results[h] = _replace(result.results[h], ultralytics_val=val_not_run(ev.name, why))
        elif s.run_val:
            with clock.stage("verification"):
                _verify(result, inputs, stage / "calibrated.pt", ev, records, boxes, s)
        result.seconds = round(time.time() - t_start, 1)
        result.write(stage / "calibration.json")
        extra = (_tune_thresholds(stage, result, s) if s.target_precision is not None else []) + engine_lines
        write_summary_text(stage, result, extra=extra)
        if s.report:
            from det_calib.report import write_report
            from det_calib.run import stages

            with clock.stage("report"), stages.stage("report"):
                write_report(stage, shown_dir=out, boxes=boxes)
        write_timings(stage, result, t_start, lambda: write_summary_text(stage, result, extra=extra))
    return _output_files(out)


def write_timings(folder: Path, result: RunResult, t_start: float, write_summary: Callable[[], Any]) -> None:
    """Record where the time went (the clock read now, after the report) in ``calibration.json`` and the
    summary: both are written again, with every other figure as before."""
    result.timings = clock.timings()
    result.seconds = round(time.time() - t_start, 1)
    result.write(folder / "calibration.json")
    write_summary()


def _verify(result: RunResult, inputs: Inputs, ckpt: Path, ev: Split, records: dict[str, Any], boxes: pl.DataFrame,
            s: Settings) -> None:
    """The Ultralytics val checks of every head (one pass) and the detection change of a folded per-class map."""
    checks = _ultralytics_checks(inputs, ckpt, ev, records, s)
    for h, check in checks.items():
        result.results[h] = _replace(result.results[h], ultralytics_val=check)
    for h, rec in records.items():
        if registry.is_per_class(rec.method):
            eb = boxes.filter((pl.col("head") == h) & (pl.col("split") == ev.name))
            change = detection_change(inputs, ckpt, ev, h, eb, rec, s)
            result.results[h] = _replace(result.results[h], detection_change=change)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _output_files(out: Path) -> dict[str, Path]:
    """The files the run wrote in ``out``, keyed by role (``"checkpoint"``, ...) or relative path."""
    names = {"boxes.parquet": "boxes", "calibrated.pt": "checkpoint", "calibration.json": "calibration",
             "calibrated.onnx": "export", "engine.json": "engine",
             "summary.txt": "summary", "report.html": "html", "report.md": "md", "thresholds.json": "thresholds"}
    return {names.get(rel, rel): out / rel for rel in read_manifest(out)}

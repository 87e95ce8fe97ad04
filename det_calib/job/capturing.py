"""What every job does before its figures: import what the first image needs, and take the boxes of its
splits from their source (:class:`BoxSource`: the detector's capture, one forward pass per image for
every head, an export through its own capturer; or boxes read from an earlier run or a detections
file). Shared by ``calibrate`` and ``check``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.capture.exported import make_capturer
from det_calib.data.ground_truth import Split
from det_calib.errors import InputError
from det_calib.job import clock
from det_calib.job.detections import detections_inputs, read_run_detections
from det_calib.job.inputs import Inputs, resolve_inputs
from det_calib.job.reuse import reuse_boxes
from det_calib.job.settings import Settings
from det_calib.tasks import get_task
from det_calib.thresholds.class_sets import LogitStore

_log = logging.getLogger(__name__)

__all__ = ["BoxSource", "job_inputs", "startup_imports"]


def startup_imports() -> None:
    """Import what the first image needs (torch, Ultralytics, the capture), as the model is loaded: the
    command line's process has them already, charged to ``imports`` from its start
    (:func:`det_calib.job.process_tuning.tuned_process`)."""
    import ultralytics  # noqa: F401


def job_inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> Inputs:
    """A run's inputs: a file of detections' (``detections``: no model), else the model's and the data's
    (:func:`~det_calib.job.inputs.resolve_inputs`; of a run reusing boxes, the model's facts only), with
    what the first image needs imported where the run captures (torch stays out of a run with no image
    to run the detector on)."""
    if s.detections:
        return detections_inputs(model, data, s)
    if not s.boxes:
        startup_imports()
    return resolve_inputs(model, data, s)


class BoxSource:
    """Where a job's boxes come from, split by split (head -> table): the detector captured (one forward
    pass per image serves every head; an export through its own capturer), or boxes read at once for
    every split (``--boxes``: an earlier run's or capture parts, :func:`~det_calib.job.reuse.reuse_boxes`;
    ``--detections``: a file of detections, :func:`~det_calib.job.detections.read_run_detections`),
    whose fingerprints (:attr:`fingerprints`) the run's ``boxes.parquet`` records. ``class_logits``: the
    capture also keeps every class's logit of each box (``calibrate``'s ``class_logits.npz``, for class sets),
    in :attr:`logit_store` (a temporary file; the tables carry each box's row there), None where the
    capture cannot give them."""

    def __init__(
        self, inputs: Inputs, splits: Sequence[Split], s: Settings, *, class_logits: bool = False
    ) -> None:
        self.inputs, self.splits, self.s = inputs, list(splits), s
        self.fingerprints: dict[str, Any] | None = None
        self.logit_store: LogitStore | None = None
        self._read: dict[str, list[pl.DataFrame | None]] | None = None
        self._captures = not (
            s.boxes or s.detections
        )  # the detector's copy is opened by the first split's capture
        self._class_logits = class_logits
        self._cap: Any = None

    @clock.stage("capture")
    def boxes(self, split: Split) -> dict[str, pl.DataFrame]:
        """Head -> the boxes of ``split`` (one of the source's splits, each asked for once: the source
        opens the capture's copy of the detector for the first, and lets go of the boxes, and of the
        detector after the last split)."""
        i = self.splits.index(split)
        if self._captures:
            if self._cap is None:
                self._cap = _open_capturer(self.inputs, self.s)
                if self._class_logits:
                    LogitStore(self._cap.nc).attach(self._cap)
                    self.logit_store = getattr(self._cap, "logit_store", None)
            out = _capture_split(self._cap, self.inputs, split, self.s)
            if i == len(self.splits) - 1:
                self._cap = None  # the detector's copy leaves before the figures
            return out
        if self._read is None:
            read = (
                read_run_detections
                if self.s.detections
                else functools.partial(reuse_boxes, self.s.boxes)
            )
            self._read, self.fingerprints = read(self.inputs, self.splits, self.s)
        out = {h: tables[i] for h, tables in self._read.items()}
        for tables in self._read.values():
            tables[i] = None
        return out


def _open_capturer(inputs: Inputs, s: Settings) -> Any:
    """The capture's own copy of the detector: a Capturer, or an ExportCapturer for an export (opened on
    the ``capture`` stage's time, by :meth:`BoxSource.boxes`)."""

    return make_capturer(inputs.yolo, s.capture_options(heads=inputs.heads, imgsz=inputs.imgsz))


def _capture_split(cap: Any, inputs: Inputs, sp: Split, s: Settings) -> dict[str, pl.DataFrame]:
    """Head -> the capture table of one split (one forward pass per image for every head)."""
    _log.info(
        "capturing %s boxes on `%s` (%d images)", "+".join(inputs.heads), sp.name, len(sp.images)
    )
    if hasattr(cap, "payload"):  # a payload only where a figure reads it (a segment model's masks)
        cap.payload = not get_task(inputs.task).lacks_payload(sp)
    raw = cap(sp.images, split=sp.name, image_names=sp.image_names(), progress=s.progress)
    return {h: _head_rows(raw, h, sp, s) for h in inputs.heads}


def _head_rows(raw: pl.DataFrame, head: str, sp: Split, s: Settings) -> pl.DataFrame:
    rows = raw.filter(pl.col("head") == head)
    if rows.height == 0:
        raise InputError(
            f"no boxes captured on split `{sp.name}` with the {head} head above conf "
            f"{s.conf_floor}: "
            "is this the right model for this data?"
        )
    return rows

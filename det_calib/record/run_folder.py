"""The one reader of a run directory (``calibration.json`` + ``boxes.parquet``): :func:`load_run`.

The report, ``compare``, ``thresholds`` and ``check`` read runs through it; ``apply`` and the
post-hoc calibrator read a ``calibration.json``'s calibrators alone
(:func:`~det_calib.record.run_result.read_calibrators`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_table import read_boxes
from det_calib.data.box_view import BoxView
from det_calib.errors import InputError
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import CALIBRATION_FILE, HeadResult, RecordedSettings, RunResult

_log = logging.getLogger(__name__)

BOXES_FILE = "boxes.parquet"


@dataclass(frozen=True)
class HeadBoxes:
    """The evaluation-split boxes of one head (:class:`~det_calib.data.box_view.BoxView`, crowd-matched
    boxes left out), raw and under the head's deployed calibrator."""

    raw: BoxView
    calibrated: BoxView | None = None
    """The same boxes scored by the deployed calibrator (their conf the run's own ``calibrated``
    column where the table has one); None when no calibrator was fitted for the head."""
    temperature: float | None = None

    @property
    def head(self) -> str | None:
        return self.raw.head

    @property
    def split(self) -> str | None:
        return self.raw.split

    @property
    def n(self) -> int:
        return self.raw.n

    @property
    def conf(self) -> np.ndarray:
        """Raw confidence."""
        return self.raw.conf

    @property
    def logit(self) -> np.ndarray:
        return self.raw.logit

    @property
    def correct(self) -> np.ndarray:
        return self.raw.correct

    @property
    def cls(self) -> np.ndarray:
        return self.raw.cls

    @property
    def image_id(self) -> np.ndarray:
        return self.raw.image_id

    @property
    def calibrator(self) -> LogitCalibrator | None:
        """The deployed calibrator of a method other than temperature (None: temperature, or none fitted)."""
        cal = None if self.calibrated is None else self.calibrated.calibrator
        return None if cal is None or self.temperature is not None else cal

    @property
    def conf_after(self) -> np.ndarray | None:
        """Calibrated confidence, or None when no calibrator was fitted for this head."""
        return None if self.calibrated is None else self.calibrated.conf

    @property
    def logit_after(self) -> np.ndarray | None:
        """Calibrated logits (``logit / T`` for a temperature), or None when no calibrator was fitted."""
        return None if self.calibrated is None else self.calibrated.logit


@dataclass(frozen=True)
class Run:
    """One run directory, read and checked: its :class:`~det_calib.record.run_result.RunResult` and its boxes."""

    run_dir: Path
    result: RunResult
    boxes: pl.DataFrame

    @property
    def heads(self) -> list[str]:
        return list(self.result.heads)

    @property
    def settings(self) -> RecordedSettings:
        return self.result.settings

    def head(self, head: str) -> HeadResult:
        return self.result.head(head)

    @property
    def class_names(self) -> list[str]:
        if self.result.class_names:
            return list(self.result.class_names)
        n = int(self.boxes["cls"].max()) + 1 if self.boxes.height else 0
        return [str(i) for i in range(n)]

    def class_name(self, c: int) -> str:
        names = self.class_names
        return names[c] if 0 <= c < len(names) else str(c)

    def temperature(self, head: str) -> float | None:
        return self.head(head).temperature

    def eval_split(self, head: str) -> str | None:
        ev = self.head(head).eval
        return self.settings.eval_split or (ev.split if ev is not None else None)

    def eval_boxes(self, head: str) -> HeadBoxes:
        """Boxes of ``head`` in the evaluation split, without crowd-ignored boxes, raw and calibrated."""
        split = self.eval_split(head)
        view = BoxView.from_boxes(self.boxes, head=head, split=split, geometry=False)
        if view.n == 0:
            _log.warning(
                "%s: no boxes for head %s in split %s", self.run_dir / BOXES_FILE, head, split
            )
        cal = self.deployed_calibrator(head)
        scored = None if cal is None else view.scored(cal, recorded=True)
        return HeadBoxes(view, scored, self.temperature(head))

    def deployed_calibrator(self, head: str) -> LogitCalibrator | None:
        """The head's calibrator rebuilt from the JSON (any method); None when the run fitted none."""
        rec = self.head(head).calibrator
        return None if rec is None else calibrator_of(rec)


def load_run(
    run_dir: str | Path, *, boxes: pl.DataFrame | None = None, result: RunResult | None = None
) -> Run:
    """Read ``run_dir/calibration.json`` and ``run_dir/boxes.parquet`` (or take ``boxes``, the table
    that file holds, and ``result``, the record as :meth:`RunResult.read` of that file gives it
    (:meth:`RunResult.as_read`), from a caller that has them in memory: the run being written).

    Raises:
        InputError: The directory or a file is missing or corrupt (the message names the file).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"run directory not found: {run_dir}")
    if result is None:
        result = RunResult.read(run_dir / CALIBRATION_FILE)
    if boxes is None:
        boxes = read_boxes(run_dir / BOXES_FILE, matched=True)
    return Run(run_dir=run_dir, result=result, boxes=boxes)

"""The one reader of a run directory (``calibration.json`` + ``boxes.parquet``): :func:`load_run`.

The report, ``compare``, ``thresholds`` and ``check`` read runs through it; ``apply`` and the
post-hoc calibrator read a ``calibration.json``'s calibrators alone
(:func:`~det_calib.record.run_result.read_calibrators`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_table import HEADS, read_boxes
from det_calib.errors import InputError
from det_calib.metrics.calibration import sigmoid
from det_calib.record.run_result import CALIBRATION_FILE, HeadResult, RecordedSettings, RunResult

log = logging.getLogger(__name__)

BOXES_FILE = "boxes.parquet"


def calibrated_conf(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Calibrated confidence ``sigmoid(logit / T)``, computed without overflow."""
    return sigmoid(np.asarray(logits, dtype=np.float64) / temperature)


@dataclass(frozen=True)
class HeadBoxes:
    """The evaluation-split boxes of one head, crowd-matched boxes already dropped."""

    head: str
    split: str | None
    conf: np.ndarray  # raw confidence
    logit: np.ndarray
    correct: np.ndarray
    cls: np.ndarray
    image_id: np.ndarray
    temperature: float | None
    calibrator: Any = None
    """The fitted calibrator of a method other than temperature (None: temperature or none fitted)."""
    calibrated: np.ndarray | None = None
    """Each box's conf under the deployed calibrator, as the run wrote it (``boxes.parquet`` column
    ``calibrated``); None in runs written before the column existed."""

    @property
    def n(self) -> int:
        return int(self.conf.size)

    @property
    def conf_after(self) -> np.ndarray | None:
        """Calibrated confidence (the run's own ``calibrated`` column where it has one), or None when no
        calibrator was fitted for this head."""
        if self.calibrated is not None:
            return self.calibrated
        z = self.logit_after
        if z is None:
            return None
        return sigmoid(z) if self.calibrator is not None else calibrated_conf(self.logit, float(self.temperature))

    @property
    def logit_after(self) -> np.ndarray | None:
        """Calibrated logits (``logit / T`` for a temperature), or None when no calibrator was fitted."""
        if self.calibrator is not None:
            from det_calib.calibrators.base import calibrated_logits

            return calibrated_logits(self.calibrator, self.logit, self.cls)
        if self.temperature is None:
            return None
        return self.logit / self.temperature


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
        """Boxes of ``head`` in the evaluation split, without crowd-ignored boxes."""
        split = self.eval_split(head)
        # the columns used, then one filter: only those are copied (at COCO scale the box table is the
        # report's memory)
        cols = [c for c in ("conf", "logit", "correct", "cls", "image_id", "calibrated") if c in self.boxes.columns]
        keep = (pl.col("head") == head) & ~pl.col("ignore")
        if split is not None:
            keep &= pl.col("split") == split
        df = self.boxes.lazy().filter(keep).select(cols).collect()
        if df.height == 0:
            log.warning("%s: no boxes for head %s in split %s", self.run_dir / BOXES_FILE, head, split)
        return HeadBoxes(
            head=head,
            split=split,
            conf=df["conf"].to_numpy().astype(np.float64, copy=False),
            logit=df["logit"].to_numpy().astype(np.float64, copy=False),
            correct=df["correct"].to_numpy().astype(bool, copy=False),
            cls=df["cls"].to_numpy().astype(np.int64, copy=False),
            image_id=df["image_id"].to_numpy().astype(np.int64, copy=False),
            temperature=self.temperature(head),
            calibrator=self.fitted_calibrator(head),
            calibrated=(df["calibrated"].to_numpy().astype(np.float64, copy=False) if "calibrated" in df.columns
                        else None),
        )

    def fitted_calibrator(self, head: str) -> Any:
        """The head's calibrator rebuilt from the JSON, for methods other than temperature; else None."""
        rec = self.head(head).calibrator
        if rec is None or rec.method == "temperature":
            return None
        from det_calib.record.run_result import calibrator_of

        return calibrator_of(rec)


def load_run(run_dir: str | Path, *, boxes: pl.DataFrame | None = None) -> Run:
    """Read ``run_dir/calibration.json`` and ``run_dir/boxes.parquet`` (or take ``boxes``, the table
    that file holds, from a caller that has it in memory).

    Raises:
        InputError: The directory or a file is missing or corrupt (the message names the file).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"run directory not found: {run_dir}")
    result = RunResult.read(run_dir / CALIBRATION_FILE)
    if boxes is None:
        boxes = read_boxes(run_dir / BOXES_FILE, matched=True)
    return Run(run_dir=run_dir, result=result, boxes=boxes)


def parse_run_spec(spec: str | Path) -> tuple[Path, str | None]:
    """Split ``"run_dir:head"`` into ``(run_dir, head)``; a plain path gives ``(path, None)``.

    Only a suffix that names a head (``nms``, ``e2e``) is split off, so paths that contain a
    colon keep working.

    >>> parse_run_spec("out:e2e")[1], parse_run_spec("out")[1]
    ('e2e', None)
    """
    s = str(spec)
    base, sep, head = s.rpartition(":")
    if sep and base and head in HEADS:
        return Path(base), head
    return Path(s), None

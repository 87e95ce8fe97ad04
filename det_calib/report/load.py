"""Reading a run directory (``calibration.json`` + ``boxes.parquet``) for the report."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.boxes import HEADS, validate_boxes
from det_calib.errors import InputError

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"
BOXES_FILE = "boxes.parquet"


def calibrated_conf(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Calibrated confidence ``sigmoid(logit / T)``, computed without overflow."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def get(d: Any, *keys: Any, default: Any = None) -> Any:
    """``d[k1][k2]...``, or ``default`` where any level is missing or null."""
    for k in keys:
        if d is None:
            return default
        try:
            d = d[k]
        except (KeyError, IndexError, TypeError):
            return default
    return default if d is None else d


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

    @property
    def n(self) -> int:
        return int(self.conf.size)

    @property
    def conf_after(self) -> np.ndarray | None:
        """Calibrated confidence, or None when no temperature was fitted for this head."""
        if self.temperature is None:
            return None
        return calibrated_conf(self.logit, self.temperature)


@dataclass(frozen=True)
class Run:
    """One run directory, read and checked."""

    run_dir: Path
    calib: dict[str, Any]
    boxes: pl.DataFrame

    @property
    def heads(self) -> list[str]:
        return list(self.calib["heads"])

    @property
    def class_names(self) -> list[str]:
        names = get(self.calib, "class_names", default=None)
        if names:
            return [str(n) for n in names]
        n = int(self.boxes["cls"].max()) + 1 if self.boxes.height else 0
        return [str(i) for i in range(n)]

    def class_name(self, c: int) -> str:
        names = self.class_names
        return names[c] if 0 <= c < len(names) else str(c)

    def temperature(self, head: str) -> float | None:
        t = get(self.calib, "temperature", head)
        return float(t) if t is not None else None

    def eval_split(self, head: str) -> str | None:
        return get(self.calib, "splits", "eval") or get(self.calib, "eval", head, "split")

    def eval_boxes(self, head: str) -> HeadBoxes:
        """Boxes of ``head`` in the evaluation split, without crowd-ignored boxes."""
        split = self.eval_split(head)
        df = self.boxes.filter((pl.col("head") == head) & ~pl.col("ignore"))
        if split is not None:
            df = df.filter(pl.col("split") == split)
        if df.height == 0:
            log.warning("%s: no boxes for head %s in split %s", self.run_dir / BOXES_FILE, head, split)
        return HeadBoxes(
            head=head,
            split=split,
            conf=df["conf"].to_numpy().astype(np.float64),
            logit=df["logit"].to_numpy().astype(np.float64),
            correct=df["correct"].to_numpy().astype(bool),
            cls=df["cls"].to_numpy().astype(np.int64),
            image_id=df["image_id"].to_numpy().astype(np.int64),
            temperature=self.temperature(head),
        )


def _read_calibration(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"calibration file not found: {path}")
    try:
        calib = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"cannot read {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}") from None
    if not isinstance(calib, dict):
        raise InputError(f"cannot read {path}: expected a JSON object, got {type(calib).__name__}")
    heads = calib.get("heads")
    if not isinstance(heads, list) or not heads or not all(h in HEADS for h in heads):
        raise InputError(f"{path}: `heads` must be a non-empty list of {list(HEADS)}, got {heads!r}")
    if not isinstance(calib.get("temperature"), dict):
        raise InputError(f"{path}: `temperature` must be an object mapping head to T, got {calib.get('temperature')!r}")
    for h in heads:
        t = calib["temperature"].get(h)
        if t is not None and not (isinstance(t, (int, float)) and t > 0):
            raise InputError(f"{path}: temperature of head {h} must be a number > 0, got {t!r}")
    return calib


def _read_boxes(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise InputError(f"box table not found: {path}")
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # polars raises several types for corrupt files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"cannot read {path}: {first}") from None
    try:
        return validate_boxes(df, matched=True)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def load_run(run_dir: str | Path) -> Run:
    """Read ``run_dir/calibration.json`` and ``run_dir/boxes.parquet``.

    Raises:
        InputError: The directory or a file is missing or corrupt (the message names the file).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"run directory not found: {run_dir}")
    calib = _read_calibration(run_dir / CALIBRATION_FILE)
    boxes = _read_boxes(run_dir / BOXES_FILE)
    return Run(run_dir=run_dir, calib=calib, boxes=boxes)


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

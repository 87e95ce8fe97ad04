"""The per-box table at the centre of det_calib.

One row per output box of a detector on one image, for one head mode. Capture fills the box,
class, conf and logit columns; matching fills ``correct``, ``iou``, ``ignore`` and ``loc_iou``. The table is
a polars DataFrame with a fixed schema, validated on construction, saved as Parquet.

Columns:

=========  =======  ==============================================================
image      str      image path relative to the split folder (the dataset root for a split of
                    several folders)
image_id   int64    integer id of the image within the capture (0..n_images-1)
split      str      dataset split the image came from (``calib``, ``test``...)
head       str      ``nms`` (one-to-many head + NMS) or ``e2e`` (one-to-one head)
x1..y2     float64  box corners in original image pixels, as the detector output them (an
                    immature one-to-one head can emit inverted boxes, x2 < x1: they are
                    kept, and match nothing)
img_w      int32    original image width in pixels
img_h      int32    original image height in pixels
cls        int32    predicted class id
conf       float64  the confidence Ultralytics reports (float32 ``sigmoid(logit)``)
logit      float64  raw pre-sigmoid class logit of ``cls`` read from the head output
correct    bool     matched one-to-one to a same-class ground truth at IoU >= tau
iou        float64  IoU with the matched ground truth (best same-class IoU if unmatched,
                    0 if none), for localisation-aware metrics
ignore     bool     matched to a crowd annotation: excluded from metrics and fits (COCO)
loc_iou    float64  IoU of the match at the LaECE threshold (0.1), 0 if none
=========  =======  ==============================================================

An optional ``logits`` column (list of nc float32) holds all class logits of the box. A segment
model's boxes carry a ``segm`` column (binary): the box's mask as pycocotools compressed RLE
``counts`` at the image's size (``img_h`` x ``img_w``), as ``predict(retina_masks=True)`` builds
it; a detector's table has no such column. A
calibration run's ``boxes.parquet`` also has ``calibrated`` (float64): the conf of the box under
its head's deployed calibrator (the raw conf where the choice is ``none``), so a user or another
tool reads the calibrated scores without det_calib.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args

import polars as pl

from det_calib.errors import InputError, first_line
from det_calib.io import atomic_path

# The head vocabulary, spelled here only: every other module takes these names from here.
Head = Literal["nms", "e2e", "detr"]
"""A head mode: ``nms`` (one-to-many head + NMS, Ultralytics' default), ``e2e`` (one-to-one head, no NMS) of a
YOLO detect head; ``detr`` (the last decoder layer's query scores, no NMS) of an RT-DETR, a model family of its
own (:mod:`det_calib.capture.family_registry`)."""
HEADS: tuple[str, ...] = get_args(Head)
HEAD_LABEL: dict[str, str] = {
    "nms": "nms (one-to-many head + NMS)",
    "e2e": "e2e (one-to-one head, no NMS)",
    "detr": "detr (RT-DETR decoder queries, no NMS)",
}
"""How the report names a head."""
HEAD_BRANCH: dict[str, str] = {"nms": "cv3", "e2e": "one2one_cv3", "detr": "dec_score_head"}
"""Head mode -> attribute of its classification branch in an Ultralytics Detect head (RTDETRDecoder's score heads)."""
HEAD_PREDICT_NMS: dict[str, bool | None] = {"nms": None, "e2e": False, "detr": None}
"""Head mode -> Ultralytics' ``nms=`` argument of predict/val that runs it."""

SCHEMA: dict[str, pl.DataType] = {
    "image": pl.String,
    "image_id": pl.Int64,
    "split": pl.String,
    "head": pl.String,
    "x1": pl.Float64,
    "y1": pl.Float64,
    "x2": pl.Float64,
    "y2": pl.Float64,
    "img_w": pl.Int32,
    "img_h": pl.Int32,
    "cls": pl.Int32,
    "conf": pl.Float64,
    "logit": pl.Float64,
    "correct": pl.Boolean,
    "iou": pl.Float64,
    "ignore": pl.Boolean,
    "loc_iou": pl.Float64,
}
_MATCH_COLUMNS = ("correct", "iou", "ignore", "loc_iou")
LOGITS_ROW = "logits_row"
"""The optional column of a capture that writes every class's logit to a store: each box's row there
(:class:`det_calib.thresholds.class_sets.LogitStore`); it never reaches ``boxes.parquet``."""
PAYLOAD_SCHEMA: dict[str, pl.DataType] = {
    "segm": pl.Binary,
    "kpts": pl.List(pl.List(pl.Float32)),
    "xywhr": pl.List(pl.Float32),
}
"""The task payload columns a capture may add after the box columns, and their types (each task's
``payload``, :mod:`det_calib.tasks`): a segment model's masks (``segm``); a pose model's keypoints
(``kpts``: per box K lists ``[x, y, conf]``, ``[x, y]`` for ``kpt_shape [K, 2]``, in image pixels, float32,
as ``Results.keypoints.data``); an OBB model's rotated boxes (``xywhr``: per box ``[cx, cy, w, h, angle]`` in
image pixels and radians, float32, as ``Results.obb.xywhr``; the box columns then hold its axis-aligned hull,
``Results.obb.xyxy``)."""
CAPTURE_COLUMNS = [c for c in SCHEMA if c not in _MATCH_COLUMNS]
_LABEL_COLUMNS = ("image", "split", "head")
"""The string columns a box table may hold in memory as ``pl.Categorical`` (few distinct values
over millions of rows: at COCO scale their strings were a third of the table); every file holds
them as strings (:func:`_as_written`)."""


def _empty_boxes() -> pl.DataFrame:
    """An empty box table with the full schema."""
    return pl.DataFrame(schema=SCHEMA)


def validate_boxes(df: pl.DataFrame, *, matched: bool = True) -> pl.DataFrame:
    """Check a box table's columns, types and values; return it cast to the schema.

    Args:
        df: The table.
        matched: Require the ``correct``/``iou``/``ignore``/``loc_iou`` columns filled by matching.

    Raises:
        InputError: A column is missing, or values are out of range (non-finite coordinates,
            conf outside [0, 1], non-finite logits, unknown head, non-positive image size).
    """
    need = list(SCHEMA) if matched else CAPTURE_COLUMNS
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"box table is missing columns {missing}; has {df.columns}")
    df = df.with_columns([pl.col(c).cast(SCHEMA[c]) for c in need if not _categorical(df, c)])
    if df.height == 0:
        return df
    if not df["head"].is_in(list(HEADS)).all():
        raise InputError(
            f"box table column `head` must be one of {HEADS}, got {df['head'].unique().to_list()}"
        )
    # each check one expression over the table's own columns (no column copied out: at COCO scale a
    # copy of the four corners of every box was the largest allocation of a run)
    if not _holds(df, pl.all_horizontal([pl.col(c).is_finite() for c in ("x1", "y1", "x2", "y2")])):
        raise InputError("box table has non-finite box coordinates")
    if df.select(((pl.col("img_w") <= 0) | (pl.col("img_h") <= 0)).any()).item():
        raise InputError("box table columns `img_w`, `img_h` must be positive")
    if not _holds(df, (pl.col("conf") >= 0) & (pl.col("conf") <= 1)):
        raise InputError("box table column `conf` must lie in [0, 1]")
    if not _holds(df, pl.col("logit").is_finite()):
        raise InputError("box table column `logit` has non-finite values")
    for col, dtype in PAYLOAD_SCHEMA.items():
        if col in df.columns:
            df = df.with_columns(pl.col(col).cast(dtype))
    if "calibrated" in df.columns:
        df = df.with_columns(pl.col("calibrated").cast(pl.Float64))
        if not _holds(df, (pl.col("calibrated") >= 0) & (pl.col("calibrated") <= 1)):
            raise InputError("box table column `calibrated` must lie in [0, 1]")
    if matched:
        for col in ("iou", "loc_iou"):
            if not _holds(df, (pl.col(col) >= 0) & (pl.col(col) <= 1 + 1e-9)):
                raise InputError(f"box table column `{col}` must lie in [0, 1]")
    return df


def _holds(df: pl.DataFrame, condition: pl.Expr) -> bool:
    """``condition`` is true on every row (a null fails it; so does nan, which polars orders above every
    number and calls not finite, as it fails numpy's tests)."""
    return bool(df.select(condition.fill_null(False).all()).item())


def read_boxes(path: str | Path, *, matched: bool | None = None) -> pl.DataFrame:
    """Read and validate a ``boxes.parquet`` (the one Parquet reader of det_calib).

    Args:
        path: The file.
        matched: Require the matching columns; None: require them when ``correct`` is there.

    Raises:
        InputError: Missing, unreadable or invalid; one line naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"box table not found: {path}")
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # polars raises several types for corrupt files
        raise InputError(f"cannot read box table {path}: {first_line(e)}") from None
    try:
        return validate_boxes(df, matched=("correct" in df.columns) if matched is None else matched)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def _categorical(df: pl.DataFrame, column: str) -> bool:
    """Whether ``column`` is one of :data:`_LABEL_COLUMNS` held as a categorical (kept as it is)."""
    return column in _LABEL_COLUMNS and isinstance(df.schema[column], (pl.Categorical, pl.Enum))


def _as_written(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its categorical :data:`_LABEL_COLUMNS` cast back to strings: the schema of every
    file a box table is written to."""
    cats = [c for c in _LABEL_COLUMNS if c in df.columns and _categorical(df, c)]
    return df.with_columns(pl.col(c).cast(pl.String) for c in cats) if cats else df


_RUN_KEY = b"det_calib.run"
"""The key of a run's fingerprints in its ``boxes.parquet``'s Parquet metadata (:func:`run_meta`)."""
_ROW_GROUP = 1 << 20
"""Rows of each row group of a run's ``boxes.parquet`` (pyarrow's default)."""


def write_boxes(
    df: pl.DataFrame, path: str | Path, fingerprints: dict[str, Any] | None = None
) -> Path:
    """Write a box table to Parquet atomically (temporary file, then rename).

    With ``fingerprints`` (a run's ``boxes.parquet``: its model, data and capture settings, which
    :func:`run_meta` reads back), they go in the Parquet metadata, and the table is written one row
    group at a time: each converted to Arrow (its categorical columns to strings) only while it is
    written, so the run's peak holds no second copy of the table.
    """
    path = Path(path)
    if fingerprints is None:
        with atomic_path(path) as tmp:
            _as_written(df).write_parquet(tmp)
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        writer = None
        try:
            for start in range(0, max(df.height, 1), _ROW_GROUP):
                table = _as_written(df.slice(start, _ROW_GROUP)).to_arrow()
                if writer is None:
                    meta = {**(table.schema.metadata or {}), _RUN_KEY: json.dumps(fingerprints)}
                    writer = pq.ParquetWriter(tmp, table.schema.with_metadata(meta))
                writer.write_table(table)
                del table
        finally:
            if writer is not None:
                writer.close()
    pa.default_memory_pool().release_unused()  # the row groups' Arrow copies leave the process
    return path


def run_meta(path: str | Path) -> dict[str, Any] | None:
    """The fingerprints recorded in a run's ``boxes.parquet`` (None: written before they were).

    Raises:
        InputError: The file is no Parquet file.
    """
    import pyarrow.parquet as pq

    try:
        raw = (pq.read_schema(path).metadata or {}).get(_RUN_KEY)
    except Exception as e:  # pyarrow raises several types for a corrupt file  # noqa: BLE001
        raise InputError(f"cannot read box table {path}: {e}") from None
    return None if raw is None else json.loads(raw)

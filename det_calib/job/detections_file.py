"""A box table from a file of detections: any engine, any detector (``calibrate --detections``).

Three formats, told apart by the path:

- **COCO results JSON** (``*.json``): a list of ``{"image_id", "category_id", "bbox": [x, y, w, h],
  "score"}`` in pixels, as Ultralytics ``val(save_json=True)``, MMDetection and Detectron2 write it.
  With a COCO ground truth (``--coco-gt``) its ``image_id`` and ``category_id`` are that file's (sparse
  COCO ids, the category found by name among the classes); without one, Ultralytics' convention on a
  YOLO dataset: ``image_id`` is the image's file stem (an int where the stem is numeric) and
  ``category_id`` is the class id + 1.
- **Ultralytics label folders** (a folder): ``predict(save_txt=True, save_conf=True)``'s
  ``<stem>.txt`` files, one ``cls cx cy w h conf`` line per box, normalised to the image's size
  (every ``.txt`` under the folder; an image with no file has no detection).
- **A plain table** (``*.csv``, ``*.parquet``): one row per box with ``image`` (a file name, stem or path
  relative to the split), ``class`` (an id, or a class name), ``x1 y1 x2 y2`` in pixels and ``score``; or,
  in place of ``class`` and ``score``, a score column per class (``score_<name>``): the box's class is its
  highest-scored one.

The score is the only input: each box's logit is recovered as ``log(p / (1 - p))``; scores of exactly
0 or 1 are clipped to ``[EPS, 1 - EPS]`` and counted (:class:`DetectionsRead`). Anything the run
cannot place is refused in one line (:class:`~det_calib.errors.InputError`): an image not in the
ground truth, a class not in the names, a negative width or height, a score outside [0, 1] or NaN,
an empty or truncated file, a label line with the wrong number of values.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.codec import Record
from det_calib.data.box_table import CAPTURE_COLUMNS, SCHEMA
from det_calib.data.ground_truth import Split, coco_image_ids
from det_calib.errors import InputError

_log = logging.getLogger(__name__)

__all__ = ["DetectionsRead", "detections_format", "image_keys", "read_detections"]

_EPS = 1e-6
"""Scores are clipped to ``[EPS, 1 - EPS]`` before the logit (a score of 0 or 1 has none)."""
_LOW_FILE_SCORE = 0.01
"""A file whose lowest score is above this was written at a high conf: calibrated only above it."""
_RAW = {
    "key": pl.String,
    "cls": pl.Int64,
    "x1": pl.Float64,
    "y1": pl.Float64,
    "x2": pl.Float64,
    "y2": pl.Float64,
    "score": pl.Float64,
    "normalised": pl.Boolean,
}
"""The rows of any format before they are placed on the splits' images."""


@dataclass
class DetectionsRead(Record):
    """What :func:`read_detections` read and placed (recorded in ``boxes.parquet``'s metadata; the
    summary's lines)."""

    source: str
    format: str
    detections: int
    """Rows in the file."""
    matched: int
    """Rows placed on the run's images."""
    images: int
    """The run's images with at least one detection."""
    run_images: int
    """The run's images (both splits)."""
    outside: int
    """Rows of dataset images outside the run's splits (``--limit``, another split): left out."""
    clipped_low: int
    clipped_high: int
    min_score: float
    precision: str
    """What the scores are written with (``5 decimals``, ``6 significant digits``, ``full precision``)."""
    tied: float
    """Share of the placed boxes whose score another box of the same class shares."""

    @property
    def high_floor(self) -> float | None:
        """The file's lowest score where it is above :data:`_LOW_FILE_SCORE` (the file was written at a
        high conf), else None."""
        return self.min_score if self.min_score > _LOW_FILE_SCORE else None

    def summary_lines(
        self, head: str, conf: Sequence[float] = (), *, scope: str = "the run's splits"
    ) -> list[str]:
        """The summary's lines about the file (``scope``: the images it was placed on, in words)."""
        lines = [
            f"[{head}] detections from {self.source} ({self.format}): {self.matched} of "
            f"{self.detections} "
            f"detections matched on {self.images} of {self.run_images} images"
            + (f" ({self.outside} of images outside {scope} left out)" if self.outside else ""),
            f"[{head}]   the score is the only input: logit = log(p/(1-p)) of scores written with "
            f"{self.precision}; "
            f"{self.tied:.1%} of boxes share their score with another box of their class (no map "
            "splits a tie)"
            + (
                f"; clipped to [{_EPS:g}, 1-{_EPS:g}]: {self.clipped_low} scores of 0, "
                f"{self.clipped_high} of 1"
                if self.clipped_low or self.clipped_high
                else "; no score of 0 or 1"
            ),
        ]
        if self.high_floor is not None:
            below = [c for c in conf if c <= self.high_floor]
            lines.append(
                f"[{head}]   the file's lowest score is {self.high_floor:.4g}: fitted only above "
                "it; "
                "conf thresholds at or below it cannot be evaluated (its boxes below were never "
                "written)"
                + (f": {', '.join(f'{c:g}' for c in below)}" if below else "")
                + "; the all-box figures cover only the scores above it"
            )
        lines.append(
            f"[{head}]   Ultralytics val not run: it cannot run a foreign engine; the mAP check is "
            "COCO mAP (pycocotools' figures) of the file's own boxes, raw and calibrated"
        )
        return lines


def detections_format(source: str | Path) -> str:
    """``coco-json``, ``yolo-txt`` (a folder) or ``table`` (CSV, Parquet), from the path."""
    p = Path(source)
    if p.is_dir():
        return "yolo-txt"
    if not p.is_file():
        raise InputError(
            "Expected `detections` to be a COCO results JSON, a CSV or Parquet table or a folder "
            "of "
            f"Ultralytics label txt files, but got {source} (not found)"
        )
    suffix = p.suffix.lower()
    if suffix == ".json":
        return "coco-json"
    if suffix in (".csv", ".parquet", ".pq"):
        return "table"
    raise InputError(
        f"Expected `detections` to end in .json, .csv or .parquet (or be a folder of label txt "
        f"files), but got {p.name}"
    )


# ------------------------------------------------------------------------------------------ formats
def _raw_frame(rows: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_RAW)


def _read_coco_json(path: Path, cat_to_cls: dict[int, int] | None, nc: int) -> pl.DataFrame:
    """COCO results rows (``cat_to_cls``: the ground truth's category id -> class; None: ``id - 1``)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise InputError(f"the detections file {path} is empty")
    try:
        dets = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"cannot read the detections file {path} (truncated or not JSON): {e.msg} at line "
            f"{e.lineno}"
        ) from None
    if not isinstance(dets, list) or not dets:
        raise InputError(
            f"Expected {path} to hold a non-empty list of COCO results, but got "
            f"{type(dets).__name__ if not isinstance(dets, list) else 'an empty list'}"
        )
    try:
        key = [str(d["image_id"]) for d in dets]
        cat = np.array([int(d["category_id"]) for d in dets], dtype=np.int64)
        bbox = np.array([d["bbox"] for d in dets], dtype=np.float64)
        score = np.array([float(d["score"]) for d in dets], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(
            f"Expected every entry of {path} to have image_id, category_id, bbox [x, y, w, h] and "
            f"score, but got an entry without {e}"
        ) from None
    if bbox.ndim != 2 or bbox.shape[1] != 4:
        raise InputError(
            f"Expected every bbox in {path} to be [x, y, w, h], but got {dets[0]['bbox']!r}"
        )
    if cat_to_cls is None:
        cls = cat - 1
        bad = (cls < 0) | (cls >= nc)
        what = f"(class id + 1, 1..{nc})"
    else:
        cls = np.array([cat_to_cls.get(int(c), -1) for c in cat], dtype=np.int64)
        bad = cls < 0
        what = "(not a category of the ground truth with a class name)"
    if bad.any():
        raise InputError(
            f"category_id {int(cat[bad][0])} in {path} is not a class {what}: {int(bad.sum())} "
            "detection(s)"
        )
    return _raw_frame(
        {
            "key": key,
            "cls": cls,
            "x1": bbox[:, 0],
            "y1": bbox[:, 1],
            "x2": bbox[:, 0] + bbox[:, 2],
            "y2": bbox[:, 1] + bbox[:, 3],
            "score": score,
            "normalised": [False] * len(key),
        }
    )


def _read_label_folder(folder: Path, nc: int) -> pl.DataFrame:
    """``predict(save_txt=True, save_conf=True)`` label files: ``cls cx cy w h conf`` per line."""
    files = sorted(folder.rglob("*.txt"))
    if not files:
        raise InputError(
            f"no label .txt files under {folder} (Ultralytics predict(save_txt=True, "
            "save_conf=True) "
            "writes them to runs/detect/predict*/labels)"
        )
    keys, values = [], []
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            tokens = line.split()
            if not tokens:
                continue
            if len(tokens) != 6:
                hint = " (no conf: predict with save_conf=True)" if len(tokens) == 5 else ""
                raise InputError(
                    f"{f}:{n}: Expected 6 values (cls cx cy w h conf), but got {len(tokens)}{hint}"
                )
            try:
                row = [float(t) for t in tokens]
            except ValueError:
                raise InputError(
                    f"{f}:{n}: Expected 6 numbers (cls cx cy w h conf), but got {line.strip()!r}"
                ) from None
            if not math.isfinite(row[0]) or row[0] != int(row[0]):
                raise InputError(f"{f}:{n}: Expected an integer class id, but got {tokens[0]}")
            keys.append(f.stem)
            values.append(row)
    if not values:
        raise InputError(
            f"the label files under {folder} hold no detection (all {len(files)} empty)"
        )
    v = np.asarray(values, dtype=np.float64)
    cls = v[:, 0].astype(np.int64)
    bad = (cls < 0) | (cls >= nc)
    if bad.any():
        raise InputError(
            f"class id {int(cls[bad][0])} in the label files under {folder} is not a class "
            f"(0..{nc - 1}): {int(bad.sum())} detection(s)"
        )
    cx, cy, w, h = v[:, 1], v[:, 2], v[:, 3], v[:, 4]
    return _raw_frame(
        {
            "key": keys,
            "cls": cls,
            "x1": cx - w / 2,
            "y1": cy - h / 2,
            "x2": cx + w / 2,
            "y2": cy + h / 2,
            "score": v[:, 5],
            "normalised": [True] * len(keys),
        }
    )


_TABLE_NAMES = {
    "image": ("image", "file_name", "filename", "file", "image_id"),
    "class": ("class", "cls", "class_id", "category", "name", "class_name"),
    "score": ("score", "conf", "confidence"),
}


def _column(df: pl.DataFrame, role: str, path: Path) -> str:
    for name in _TABLE_NAMES[role]:
        if name in df.columns:
            return name
    raise InputError(
        f"Expected {path} to have a column `{role}` (or {', '.join(_TABLE_NAMES[role][1:])}), but "
        "got "
        f"columns {df.columns}"
    )


def _from_class_scores(df: pl.DataFrame, names: list[str], path: Path) -> pl.DataFrame:
    """A table with a score column per class (``score_<name>`` for every class name) and no ``class`` or
    ``score``: each box's class is its highest-scored one and its score that score, as a detector's
    decode picks them (a table with both keeps its own ``class`` and ``score``)."""
    per_class = [f"score_{n}" for n in names]
    have = [c for c in per_class if c in df.columns]
    if not have or any(c in df.columns for r in ("class", "score") for c in _TABLE_NAMES[r]):
        return df
    if len(have) < len(names):
        missing = [c for c in per_class if c not in df.columns]
        raise InputError(
            f"Expected {path} to have a score column per class (score_<name>), but it lacks "
            f"{', '.join(missing[:3])}{'...' if len(missing) > 3 else ''}"
        )
    scores = df.select(pl.col(per_class).cast(pl.Float64)).to_numpy()
    filled = np.where(np.isnan(scores), -np.inf, scores)
    return df.with_columns(
        pl.Series("class", filled.argmax(axis=1).astype(np.int64)),
        pl.Series("score", scores[np.arange(len(scores)), filled.argmax(axis=1)]),
    )


def _read_table(path: Path, names: list[str]) -> pl.DataFrame:
    """A CSV or Parquet table: image, class (id or name), x1 y1 x2 y2 (pixels), score."""
    if path.stat().st_size == 0:
        raise InputError(f"the detections file {path} is empty")
    try:
        df = (
            pl.read_parquet(path)
            if path.suffix.lower() in (".parquet", ".pq")
            else pl.read_csv(path)
        )
    except Exception as e:  # polars and pyarrow raise several types for a broken file  # noqa: BLE001
        raise InputError(
            f"cannot read the detections table {path} (truncated?): {str(e).splitlines()[0]}"
        ) from None
    if df.height == 0:
        raise InputError(f"the detections table {path} has no rows")
    df = _from_class_scores(df, names, path)
    image, klass, score = (_column(df, r, path) for r in ("image", "class", "score"))
    missing = [c for c in ("x1", "y1", "x2", "y2") if c not in df.columns]
    if missing:
        raise InputError(
            f"Expected {path} to have the box columns x1, y1, x2, y2 (pixels), but it lacks "
            f"{', '.join(missing)}"
        )
    need = [image, klass, "x1", "y1", "x2", "y2", score]
    incomplete = df.select(pl.any_horizontal(pl.col(need).is_null()).alias("x"))["x"].to_numpy()
    if incomplete.any():
        raise InputError(
            f"row {int(np.argmax(incomplete)) + 2} of {path} lacks a value of {', '.join(need)} "
            f"(truncated or incomplete; {int(incomplete.sum())} row(s))"
        )
    col = df[klass]
    if col.dtype == pl.String:
        index = {n: i for i, n in enumerate(names)}
        cls = np.array(
            [index.get(c, -1) if c is not None else -1 for c in col.to_list()], dtype=np.int64
        )
        unknown = [c for c in col.unique().to_list() if c not in index]
        if unknown:
            raise InputError(
                f"class `{unknown[0]}` in {path} is not a class name of the data ({len(unknown)} "
                f"unknown name(s); names: {names[:5]}{'...' if len(names) > 5 else ''})"
            )
    else:
        cls = col.fill_null(-1).cast(pl.Int64).to_numpy()
        bad = (cls < 0) | (cls >= len(names))
        if bad.any():
            raise InputError(
                f"class id {int(cls[bad][0])} in {path} is not a class (0..{len(names) - 1}): "
                f"{int(bad.sum())} detection(s)"
            )
    try:
        xy = {
            c: df[c].cast(pl.Float64).fill_null(float("nan")).to_numpy()
            for c in ("x1", "y1", "x2", "y2")
        }
        sc = df[score].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    except Exception:  # noqa: BLE001 - a text value in a number column
        raise InputError(
            f"Expected numbers in the columns x1, y1, x2, y2 and `{score}` of {path}"
        ) from None
    keys = [str(k) for k in df[image].cast(pl.String).to_list()]
    return _raw_frame(
        {"key": keys, "cls": cls, **xy, "score": sc, "normalised": [False] * df.height}
    )


# ---------------------------------------------------------------------------------------- placing
def _check_values(raw: pl.DataFrame, source: Path) -> None:
    """Refuse a score outside [0, 1] or NaN, a non-finite coordinate, a negative width or height."""
    score = raw["score"].to_numpy()
    bad = ~((score >= 0) & (score <= 1))  # NaN fails both
    if bad.any():
        raise InputError(
            f"Expected every score in {source} in [0, 1], but got {float(score[bad][0])!r} "
            f"({int(bad.sum())} detection(s))"
        )
    xy = raw.select("x1", "y1", "x2", "y2").to_numpy()
    if not np.isfinite(xy).all():
        raise InputError(
            f"Expected finite box coordinates in {source}, but got NaN or inf "
            f"({int((~np.isfinite(xy)).any(axis=1).sum())} detection(s))"
        )
    neg = (xy[:, 2] < xy[:, 0]) | (xy[:, 3] < xy[:, 1])
    if neg.any():
        i = int(np.argmax(neg))
        raise InputError(
            f"Expected non-negative box widths and heights in {source}, but got width "
            f"{xy[i, 2] - xy[i, 0]:g}, height {xy[i, 3] - xy[i, 1]:g} (image {raw['key'][i]}; "
            f"{int(neg.sum())} detection(s))"
        )


def image_keys(name: str) -> list[str]:
    """The keys a file may name an image by: its path relative to the split, its file name, its stem
    (and the stem as an int where it is numeric, as Ultralytics' ``save_json`` writes it)."""
    p = Path(name)
    out = [p.as_posix(), p.name, p.stem]
    if p.stem.isnumeric():
        out.append(str(int(p.stem)))
    return out


_AMBIGUOUS = (-2, -2)
"""The index's place of a key that names more than one of the run's images."""


def _image_index(
    splits: Sequence[Split], coco_ids: Sequence[Sequence[int | None]] | None
) -> dict[str, tuple[int, int]]:
    """File key -> (split index, image id); :data:`_AMBIGUOUS` for a key of more than one image (the
    same file name in two splits' folders), which :func:`_place` refuses rather than guess. Beside
    :func:`image_keys`, an image is also named by its split folder and file name (``test/0001.jpg``)
    and by its full path, which tell such images apart."""
    index: dict[str, tuple[int, int]] = {}
    for k, sp in enumerate(splits):
        names = sp.image_names()
        for i, name in enumerate(names):
            if coco_ids is not None and coco_ids[k][i] is not None:
                keys = [str(coco_ids[k][i])]
            else:
                path = Path(sp.images[i])
                keys = [*image_keys(name), f"{path.parent.name}/{path.name}", path.as_posix()]
            for key in keys:
                if index.get(key, (k, i)) != (k, i):
                    index[key] = _AMBIGUOUS
                else:
                    index[key] = (k, i)
    return index


def _precision(score: np.ndarray) -> str:
    """What the scores are written with: ``N decimals`` (Ultralytics' JSON: 5), ``N significant digits``
    (its txt files' ``%g``: 6), or ``full precision``."""
    s = score[(score > 0) & (score < 1)][:20000]
    for d in range(1, 8):
        if np.allclose(np.round(s, d), s, rtol=0, atol=1e-12):
            return f"{d} decimals"
    unit = 10.0 ** np.floor(np.log10(s)) if s.size else s
    for g in range(1, 9):
        step = unit / 10.0 ** (g - 1)
        if np.allclose(np.round(s / step) * step, s, rtol=1e-12, atol=0):
            return f"{g} significant digits"
    return "full precision"


def _tied(df: pl.DataFrame) -> float:
    if df.height == 0:
        return 0.0
    dup = df.select(pl.struct("cls", "conf").is_duplicated().alias("d"))["d"]
    return float(dup.mean())


def read_detections(
    source: str | Path,
    splits: Sequence[Split],
    names: list[str],
    *,
    head: str = "nms",
    known: set[str] | None = None,
    coco_gt: str | Path | None = None,
) -> tuple[list[pl.DataFrame], DetectionsRead]:
    """A file of detections as det_calib's capture table, one per split.

    Args:
        source: A COCO results JSON, a CSV or Parquet table, or a folder of Ultralytics label txt files.
        splits: The run's splits; each detection is placed on the image the file names.
        names: The class names (a table's class may be a name).
        head: The head the rows are recorded as (``nms`` unless the engine is NMS-free).
        known: File keys of every image of the dataset (:func:`image_keys` of each), so that a detection of
            an image outside the run's splits (``--limit``) is left out, not refused; default: the
            run's images only.
        coco_gt: The COCO ground truth JSON: a COCO results file's ``image_id`` and ``category_id``
            are its ids.

    Returns:
        ``(tables, read)``: the capture columns (:data:`~det_calib.data.box_table.CAPTURE_COLUMNS`)
        of each split's boxes, sorted by image and falling score, and what was read.

    Raises:
        InputError: What the run cannot place (one line).
    """
    source = Path(source)
    fmt = detections_format(source)
    coco_ids, cat_to_cls = None, None
    if coco_gt is not None and fmt == "coco-json":
        coco_ids, cat_to_cls, known = _coco_ids(
            coco_gt, splits, names
        )  # known: every image of the COCO file
    raw = _read_raw(source, fmt, names, cat_to_cls)
    split_of, image_id, hit = _place(raw, _image_index(splits, coco_ids), known, source, coco_gt)
    tables = [_split_table(raw, split_of == k, image_id, sp, head) for k, sp in enumerate(splits)]
    placed = raw["score"].to_numpy()[hit]
    read = DetectionsRead(
        source=str(source),
        format=fmt,
        detections=raw.height,
        matched=int(hit.sum()),
        images=len({(int(a), int(b)) for a, b in zip(split_of[hit], image_id[hit], strict=True)}),
        run_images=sum(len(sp.images) for sp in splits),
        outside=int((~hit).sum()),
        clipped_low=int((placed < _EPS).sum()),
        clipped_high=int((placed > 1 - _EPS).sum()),
        min_score=float(placed.min()) if placed.size else 0.0,
        precision=_precision(placed),
        tied=_tied(pl.concat([t.select("cls", "conf") for t in tables])),
    )
    if read.matched == 0:
        raise InputError(
            f"no detection in {source} is of the run's images ({read.outside} of other images of "
            "the "
            "data: check --limit and the splits)"
        )
    _check_coverage(source, splits, split_of[hit], image_id[hit], read)
    _log.info(
        "%d of %d detections in %s matched on %d images",
        read.matched,
        read.detections,
        source,
        read.images,
    )
    return tables, read


def _check_coverage(
    source: Path,
    splits: Sequence[Split],
    split_of: np.ndarray,
    image_id: np.ndarray,
    read: DetectionsRead,
) -> None:
    """Refuse a low-conf file that covers less than half of a split's images (a dump of some images: the
    others would count as images without a box, and recall and mAP would fall for nothing); a file
    written at a high conf, whose images may well keep no box, gets a warning instead."""
    for k, sp in enumerate(splits):
        ids = np.unique(image_id[split_of == k])
        if 2 * ids.size >= len(sp.images):
            continue
        first = int(ids.max()) + 1 if ids.size else 0  # the file's images are the split's first?
        hint = (
            f"give --limit {first} if it holds the first {first} images of each split"
            if ids.size and ids.size >= 0.9 * first
            else "dump every image of the split"
        )
        words = (
            f"{source} has detections on {ids.size} of the {len(sp.images)} images of split "
            f"`{sp.name}`: the others would count as images without a box"
        )
        if read.high_floor is None:
            raise InputError(
                f"{words}, though its scores go down to {read.min_score:.3g}, where a detector "
                f"leaves few images without one; {hint}"
            )
        _log.warning("%s (it was written at conf %.3g); %s", words, read.min_score, hint)


def _place(
    raw: pl.DataFrame,
    index: dict[str, tuple[int, int]],
    known: set[str] | None,
    source: Path,
    coco_gt: str | Path | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's split index and image id (-1: an image of the data outside the run's splits) and
    whether it is placed; an image unknown to the ground truth refused (how many, three named)."""
    keys = raw["key"].to_list()
    where = [index.get(k) for k in keys]
    twice = sorted({k for k, w in zip(keys, where, strict=True) if w == _AMBIGUOUS})
    if twice:
        raise InputError(
            f"{len(twice)} image name(s) in {source} name more than one of the run's images (the "
            f"same file name in two splits' folders): {', '.join(twice[:3])}"
            f"{'...' if len(twice) > 3 else ''}; name each image by its split folder and file "
            "(test/0001.jpg) or its full path"
        )
    unplaced = sorted({k for k, w in zip(keys, where, strict=True) if w is None})
    outside = {k for k in unplaced if known is not None and k in known}
    foreign = [k for k in unplaced if k not in outside]
    if foreign:
        gt = f"--coco-gt {coco_gt}" if coco_gt else "the data's splits"
        raise InputError(
            f"{len(foreign)} image(s) in {source} are not in the ground truth ({gt}): "
            f"{', '.join(foreign[:3])}{'...' if len(foreign) > 3 else ''}"
        )
    hit = np.array([w is not None for w in where], dtype=bool)
    split_of = np.array([w[0] if w else -1 for w in where], dtype=np.int64)
    image_id = np.array([w[1] if w else -1 for w in where], dtype=np.int64)
    return split_of, image_id, hit


def _read_raw(
    source: Path, fmt: str, names: list[str], cat_to_cls: dict[int, int] | None
) -> pl.DataFrame:
    """The file's rows (:data:`_RAW`), their values checked."""
    if fmt == "coco-json":
        raw = _read_coco_json(source, cat_to_cls, len(names))
    elif fmt == "yolo-txt":
        raw = _read_label_folder(source, len(names))
    else:
        raw = _read_table(source, names)
    _check_values(raw, source)
    return raw


def _split_table(
    raw: pl.DataFrame, rows: np.ndarray, image_id: np.ndarray, sp: Split, head: str
) -> pl.DataFrame:
    """The capture columns of one split's rows."""
    sub = raw.filter(pl.Series(rows))
    ids = image_id[rows]
    wh = np.asarray(sp.sizes, dtype=np.float64)[ids] if ids.size else np.zeros((0, 2))
    norm = sub["normalised"].to_numpy()
    scale_x = np.where(norm, wh[:, 0], 1.0)
    scale_y = np.where(norm, wh[:, 1], 1.0)
    p = np.clip(sub["score"].to_numpy(), _EPS, 1 - _EPS)
    names = sp.image_names()
    df = pl.DataFrame(
        {
            "image": [names[i] for i in ids],
            "image_id": ids,
            "split": [sp.name] * len(ids),
            "head": [head] * len(ids),
            "x1": sub["x1"].to_numpy() * scale_x,
            "y1": sub["y1"].to_numpy() * scale_y,
            "x2": sub["x2"].to_numpy() * scale_x,
            "y2": sub["y2"].to_numpy() * scale_y,
            "img_w": wh[:, 0].astype(np.int32),
            "img_h": wh[:, 1].astype(np.int32),
            "cls": sub["cls"].to_numpy(),
            "conf": p,
            "logit": np.log(p) - np.log1p(-p),
        },
        schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS},
    )
    return df.sort(["image_id", "conf"], descending=[False, True], maintain_order=True)


def _coco_ids(
    coco_gt: str | Path, splits: Sequence[Split], names: list[str]
) -> tuple[list[list[int | None]], dict[int, int], set[str]]:
    """The COCO image id of each split image, the category id -> class map of a COCO ground truth and
    every image id it lists."""

    class _Coco:  # what coco_image_ids reads: the parsed JSON
        def __init__(self, dataset: dict[str, Any]) -> None:
            self.dataset = dataset

    path = Path(coco_gt)
    try:
        dataset = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"cannot read the COCO ground truth {path}: {e}") from None
    coco = _Coco(dataset)
    ids = [coco_image_ids(coco, sp.images, root=sp.root, path=path) for sp in splits]
    index = {n: i for i, n in enumerate(names)}
    cat_to_cls = {
        int(c["id"]): index[c["name"]]
        for c in dataset.get("categories", [])
        if c.get("name") in index
    }
    return ids, cat_to_cls, {str(img["id"]) for img in dataset.get("images", [])}

"""Captured boxes as sharded Parquet parts, with fingerprints of the model and data.

A capture can run as one process, as ``n`` independent shard jobs (``--shard i/n``, for any
scheduler), or as a Ray Data job (:mod:`det_calib.capture.ray_capture`); each writes Parquet *parts*
into one folder. Every part is a box table (the capture columns of :mod:`det_calib.data.box_table`) whose
Parquet key-value metadata, under ``det_calib.capture.predictor``, records:

=================  ================================================================
model              fingerprint of the detector (``sha256:`` of the ``.pt`` file)
data               fingerprint of the split (image names in order and their labels)
split              the split's name
heads              head modes captured
settings           conf floor, NMS IoU, max_det, imgsz, batch
n_images           images in the whole split (``image_id`` runs over 0..n_images-1)
facts              the detector's :class:`ModelFacts` (a ``.pt`` detector's; absent for an export)
image_ids          the images this part covers (also those with no boxes)
part               a label: ``shard 3/8``, ``all``, ``ray 0-255``
=================  ================================================================

:func:`read_parts` concatenates the parts of a folder into one table sorted as a single-process
capture sorts it (``nms`` rows first, then by image, each image's rows in output order), so the
content does not depend on how the work was split. It refuses parts that disagree with each
other, that leave images out, or that belong to another model or data.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.capture.exported import export_fingerprint, is_export, make_capturer
from det_calib.capture.options import CaptureOptions
from det_calib.capture.predictor import (
    available_heads,
    capture_schema,
    default_imgsz,
    load_detector,
)
from det_calib.data.box_table import HEADS, run_meta, validate_boxes
from det_calib.data.ground_truth import check_class_names, label_path, load_data_yaml
from det_calib.errors import InputError
from det_calib.io import atomic_path
from det_calib.tasks import get_task

_log = logging.getLogger(__name__)

_META_KEY = b"det_calib.capture"
_FORMAT = 1
_HEAD_RANK = {h: i for i, h in enumerate(HEADS)}


@dataclass(frozen=True)
class ModelFacts:
    """What a run reads of a detector checkpoint before its boxes: the class names (in id order), its
    Ultralytics task, the heads it has, its default image size, the shape of each box's payload it
    declares (a pose model's ``kpt_shape``; None for a task without one). A capture records them with
    its boxes (its parts' metadata, a run's ``boxes.parquet``), beside the checkpoint's fingerprint:
    a run reusing those boxes reads them there (:meth:`recorded`) instead of loading the model."""

    names: list[str]
    task: str
    heads: list[str]
    imgsz: int
    payload_shape: tuple[int, int] | None

    @classmethod
    def of(cls, yolo: Any) -> ModelFacts:
        """The facts of a loaded detector."""
        task = getattr(yolo, "task", None) or "detect"
        return cls(
            names=[yolo.names[i] for i in sorted(yolo.names)],
            task=task,
            heads=list(available_heads(yolo)),
            imgsz=default_imgsz(yolo),
            payload_shape=get_task(task).model_shape(yolo),
        )

    def record(self) -> dict[str, Any]:
        """The facts as JSON values (:meth:`recorded` reads them back)."""
        out = asdict(self)
        if self.payload_shape is not None:
            out["payload_shape"] = [int(v) for v in self.payload_shape]
        return out

    @classmethod
    def recorded(cls, source: str | Path, model: str | Path) -> ModelFacts | None:
        """The facts recorded with the boxes at ``source`` (a run's folder or its ``boxes.parquet``; a
        folder of capture parts, or of one sub-folder of parts per split) when they were captured with
        the checkpoint ``model`` (the same fingerprint). None where there are none to read: boxes of
        another model, recorded before det_calib recorded facts, or no boxes there (the run's reading
        of the boxes then says what is wrong)."""
        source = Path(source)
        run_file = source if source.is_file() else source / "boxes.parquet"
        try:
            if run_file.is_file():
                meta = run_meta(run_file)
            else:
                first = next(
                    iter(sorted(source.glob("*.parquet")) or sorted(source.glob("*/*.parquet"))),
                    None,
                )
                meta = None if first is None else _part_meta(first)
            if not meta or "facts" not in meta or meta.get("model") != model_fingerprint(model):
                return None
            f = meta["facts"]
            shape = f["payload_shape"]
            return cls(
                names=[str(n) for n in f["names"]],
                task=str(f["task"]),
                heads=[str(h) for h in f["heads"]],
                imgsz=int(f["imgsz"]),
                payload_shape=None if shape is None else (int(shape[0]), int(shape[1])),
            )
        except (InputError, KeyError, TypeError, ValueError, IndexError):
            return None


def _file_sha256(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def model_fingerprint(model) -> str:
    """Fingerprint of a detector: ``sha256:`` of its ``.pt`` file.

    Args:
        model: Path of the checkpoint, or a fingerprint string (returned unchanged).

    Raises:
        InputError: The file does not exist.
    """
    if isinstance(model, str) and model.startswith("sha256:"):
        return model
    path = Path(model)
    if path.is_dir():  # an OpenVINO export folder: its files
        if is_export(path):
            return export_fingerprint(path)
    if not path.is_file():
        raise InputError(f"model file not found: {path}")
    return _file_sha256(path)


def data_fingerprint(
    images: Sequence[str | Path], *, names: Sequence[str], coco_gt: str | Path | None = None
) -> str:
    """Fingerprint of a split: its image names in order, and its ground truth.

    The ground truth is each image's YOLO label file (its bytes; a missing file counts as
    empty-and-absent), or the whole COCO JSON when ``coco_gt`` is given. Image pixels are not
    read: the names and labels identify a split, and reading every image again would double
    the I/O of a capture.

    Args:
        images: Image paths of the split, in the split's order.
        names: The ``image`` column values (paths relative to the split root).
        coco_gt: COCO JSON ground truth used instead of YOLO labels.

    Returns:
        ``sha256:<hex>``.
    """

    if len(names) != len(images):
        raise InputError(f"`names` ({len(names)}) must have one entry per image ({len(images)})")
    h = hashlib.sha256(b"det_calib data v1\n")
    for img, name in zip(images, names):
        h.update(str(name).encode() + b"\0")
        if coco_gt is None:
            lab = label_path(Path(img))
            h.update(hashlib.sha256(lab.read_bytes()).digest() if lab.is_file() else b"-")
    if coco_gt is not None:
        h.update(_file_sha256(coco_gt).encode())
    return f"sha256:{h.hexdigest()}"


def _parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (0 <= i < n) to ``(i, n)``."""
    try:
        i, n = (int(v) for v in str(text).split("/"))
    except ValueError:
        raise InputError(f"Expected argument `shard` as i/n (e.g. 0/4), but got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise InputError(f"Expected argument `shard` i/n with 0 <= i < n, but got {text!r}")
    return i, n


def _shard_of(names: Sequence[str], n: int) -> np.ndarray:
    """Shard (0..n-1) of each image, from a hash of its name: deterministic across processes
    and machines, and an image keeps its shard when others are added to the split."""
    return np.array(
        [int.from_bytes(hashlib.sha256(str(s).encode()).digest()[:8], "little") % n for s in names],
        dtype=np.int64,
    )


def write_part(
    df: pl.DataFrame,
    path: str | Path,
    *,
    model: str,
    data: str,
    split: str,
    heads: Sequence[str],
    settings: dict,
    n_images: int,
    image_ids: Sequence[int],
    part: str,
    facts: dict[str, Any] | None = None,
) -> Path:
    """Write one part (atomically) with its metadata (see the module docstring) in its Parquet
    metadata; ``facts``: the detector's :meth:`ModelFacts.record` (None: none recorded)."""
    import pyarrow.parquet as pq

    meta = {
        "format": _FORMAT,
        "model": model,
        "data": data,
        "split": split,
        "heads": list(heads),
        "settings": settings,
        "n_images": int(n_images),
        "image_ids": [int(i) for i in image_ids],
        "part": part,
        **({} if facts is None else {"facts": facts}),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = df.to_arrow()
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), _META_KEY: json.dumps(meta).encode()}
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def _part_meta(path: str | Path) -> dict:
    """The ``det_calib.capture.predictor`` metadata of a part."""
    import pyarrow.parquet as pq

    try:
        raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
    except Exception as e:  # pyarrow raises several types for a corrupt file  # noqa: BLE001
        raise InputError(f"cannot read Parquet part {path}: {e}") from None
    if raw is None:
        raise InputError(
            f"{path} is not a det_calib capture part (no `det_calib.capture.predictor` metadata)"
        )
    return json.loads(raw)


def prepare_split_capture(
    model: str | Path,
    data: str | Path,
    split: str,
    options: CaptureOptions,
    *,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
) -> tuple[Any, list[str], Any, dict]:
    """What every capture to parts starts with (one process, a shard, or the Ray driver): the
    split, its image names, a :class:`~det_calib.capture.predictor.Capturer` (which checks the model and
    the arguments) whose class names must be the data's, and the metadata common to all parts.

    Returns:
        ``(split, image_names, capturer, meta)``; :func:`write_part` takes ``meta`` with the part's
        ``image_ids`` and ``part`` label.
    """

    ds = load_data_yaml(data)
    facts = None
    if is_export(model):
        cap = make_capturer(str(model), options)  # an ExportCapturer
    else:  # loaded once: its facts recorded with the parts, its capturer made of it
        yolo = load_detector(model)
        facts = ModelFacts.of(yolo).record()
        cap = make_capturer(yolo, options)
    check_class_names(list(cap.names), ds.names, data_path=data)
    task = getattr(cap, "task", None) or "detect"
    if hasattr(cap, "payload") and split in ds.splits and coco_gt is None:
        if get_task(task).lacks_labels(ds, split):  # box labels: no figure reads the payload
            cap.payload = False
    sp = get_task(task).captured_split(
        ds,
        split,
        shape=getattr(cap, "payload_shape", None),
        coco_gt=coco_gt,
        limit=limit,
    )
    names = sp.image_names()
    meta = {
        "model": model_fingerprint(model),
        "data": data_fingerprint(sp.images, names=names, coco_gt=coco_gt),
        "split": split,
        "heads": cap.heads,
        "settings": cap.settings,
        "n_images": len(names),
        "facts": facts,
    }
    return sp, names, cap, meta


def split_options(options: CaptureOptions | None = None, /, **kw: Any) -> CaptureOptions:
    """The options of a split's capture to parts: ``options`` with ``kw`` applied, every head the
    model has unless a head is named."""
    opts = CaptureOptions.of(options, **kw)
    return opts.with_heads("auto") if opts.head is None and opts.heads is None else opts


def read_parts(
    parts_dir: str | Path,
    *,
    expect_model: str | Path | None = None,
    expect_data: str | None = None,
    allow_partial: bool = False,
) -> pl.DataFrame:
    """Read and concatenate the parts of a capture folder.

    Args:
        parts_dir: Folder of ``*.parquet`` parts (or one part file).
        expect_model: The detector the boxes must come from: a ``.pt`` path or a fingerprint.
        expect_data: The data fingerprint the boxes must come from (:func:`data_fingerprint`).
        allow_partial: Accept parts that cover only some images of the split.

    Returns:
        The box table, sorted as a single-process capture: head (``nms`` first), image id, and
        each image's rows in the detector's output order. :func:`read_parts_with_meta` also
        returns the capture's metadata.

    Raises:
        InputError: No parts, unreadable parts, parts that disagree (model, data, split, heads,
            settings), an image captured twice, missing images, or a model/data mismatch.
    """
    df, _ = read_parts_with_meta(
        parts_dir, expect_model=expect_model, expect_data=expect_data, allow_partial=allow_partial
    )
    return df


def read_parts_with_meta(
    parts_dir: str | Path,
    *,
    expect_model: str | Path | None = None,
    expect_data: str | None = None,
    allow_partial: bool = False,
) -> tuple[pl.DataFrame, dict]:
    """:func:`read_parts`, also returning the capture's common metadata."""

    parts_dir = Path(parts_dir)
    files = [parts_dir] if parts_dir.is_file() else sorted(parts_dir.glob("*.parquet"))
    if not files:
        raise InputError(f"no capture parts (*.parquet) in {parts_dir}")
    common: dict | None = None
    seen: dict[int, str] = {}
    frames = []
    for f in files:
        meta = _part_meta(f)
        if meta.get("format") != _FORMAT:
            raise InputError(
                f"{f}: capture part format {meta.get('format')}, this det_calib reads {_FORMAT}"
            )
        key = {k: meta[k] for k in ("model", "data", "split", "heads", "settings", "n_images")}
        if common is None:
            common, first = key, f
        elif key != common:
            diff = [k for k in key if key[k] != common[k]]
            raise InputError(
                f"capture parts disagree on {', '.join(diff)}: {first.name} and {f.name} (mixed "
                "runs?)"
            )
        for i in meta["image_ids"]:
            if i in seen:
                raise InputError(f"image {i} is captured in two parts: {seen[i]} and {f.name}")
            seen[i] = f.name
        frames.append(pl.read_parquet(f))
    assert common is not None
    if expect_model is not None and model_fingerprint(expect_model) != common["model"]:
        raise InputError(
            f"the boxes in {parts_dir} were captured with another model "
            f"({common['model'][:19]}..., not {model_fingerprint(expect_model)[:19]}...)"
        )
    if expect_data is not None and expect_data != common["data"]:
        raise InputError(
            f"the boxes in {parts_dir} were captured on other data for split `{common['split']}` "
            f"(images or labels differ: {common['data'][:19]}..., not {expect_data[:19]}...)"
        )
    missing = common["n_images"] - len(seen)
    if missing and not allow_partial:
        raise InputError(
            f"the parts in {parts_dir} cover {len(seen)} of {common['n_images']} images of split "
            f"`{common['split']}`: a shard is missing or unfinished"
        )
    df = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
    df = validate_boxes(df, matched="correct" in df.columns)
    rank = df.select(
        pl.col("head").replace_strict(_HEAD_RANK, return_dtype=pl.Int8).alias("_rank"), "image_id"
    )
    key = rank["_rank"].cast(pl.Int64) * (int(rank["image_id"].max() or 0) + 1) + rank["image_id"]
    if not (
        key.diff().drop_nulls() >= 0
    ).all():  # not already in that order (one part is): sort a copy
        df = (
            df.with_columns(rank["_rank"])
            .sort("_rank", "image_id", maintain_order=True)
            .drop("_rank")
        )
    return df, {**common, "n_parts": len(files), "images_covered": len(seen)}


def capture_to_parts(
    model: str | Path,
    data: str | Path,
    split: str,
    out_dir: str | Path,
    *,
    shard: str | tuple[int, int] | None = None,
    options: CaptureOptions | None = None,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
    progress: bool = True,
    **option_kw: Any,
) -> Path:
    """Capture one split (or one shard of it) into a Parquet part in ``out_dir``.

    Args:
        model: Detector ``.pt`` (a path: its file is fingerprinted).
        data: ``data.yaml``.
        split: Split key in the yaml.
        out_dir: Folder of parts (created).
        shard: ``"i/n"`` or ``(i, n)``: capture only the images whose name hashes to shard
            ``i`` of ``n`` (:func:`_shard_of`); None: the whole split.
        options: A :class:`~det_calib.capture.options.CaptureOptions` (heads, conf floor, NMS IoU,
            ``max_det``, ``imgsz``, ``batch``, device); with neither ``head`` nor ``heads`` given,
            every head the model has (``heads="auto"``). With batch 1 (the default on a CPU) the parts do
            not depend on how the split was sharded.
        **option_kw: Options by name instead (or on top of ``options``): ``heads``, ``conf``, ``iou``,
            ``max_det``, ``imgsz``, ``batch``, ``device``, as :func:`det_calib.capture.predictor.capture`.
        coco_gt: COCO JSON ground truth instead of YOLO labels (enters the data fingerprint).
        limit: Only the first ``limit`` images of the split (quick runs).
        progress: Show a progress bar.

    Returns:
        Path of the part written: ``part-IIIII-of-NNNNN.parquet`` (``part-all.parquet``).
    """
    if not isinstance(model, (str, Path)):
        raise InputError(
            "capture to parts needs the model as a .pt path (its file is fingerprinted)"
        )
    i, n = _parse_shard(shard) if isinstance(shard, str) else (shard or (0, 1))
    if not (n >= 1 and 0 <= i < n):
        raise InputError(f"Expected argument `shard` i/n with 0 <= i < n, but got {i}/{n}")
    opts = split_options(options, **option_kw)
    sp, names, cap, common = prepare_split_capture(
        model, data, split, opts, coco_gt=coco_gt, limit=limit
    )
    ids = np.flatnonzero(_shard_of(names, n) == i) if n > 1 else np.arange(len(names))
    if len(ids):
        df = cap(
            [sp.images[j] for j in ids],
            split=split,
            image_names=[names[j] for j in ids],
            image_ids=ids,
            progress=progress,
        )
    else:
        df = pl.DataFrame(
            schema=capture_schema(get_task(getattr(cap, "task", "detect")).payload_schema)
        )
    name = "part-all.parquet" if n == 1 else f"part-{i:05d}-of-{n:05d}.parquet"
    path = write_part(
        df,
        Path(out_dir) / name,
        **common,
        image_ids=ids,
        part="all" if n == 1 else f"shard {i}/{n}",
    )
    _log.info(
        "captured %d boxes on %d images of split %s into %s", df.height, len(ids), split, path
    )
    return path

"""Reuse captured boxes: ``calibrate --boxes`` fits, evaluates and reports without a forward pass.

A run's ``boxes.parquet`` records, in its Parquet metadata under ``det_calib.run``, the
fingerprint of the model, of each split (:func:`det_calib.capture.parts.data_fingerprint`: image names
in order and their labels) and the capture settings. ``det-calib capture`` parts record the same
(:mod:`det_calib.capture.parts`). :func:`reuse_boxes` reads either, refuses boxes of another model, of
other data or captured with other settings (one line naming what differs), and hands back the
capture columns per head and split, ready to be matched again with this run's settings.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from det_calib.capture.options import resolve_batch
from det_calib.capture.parts import data_fingerprint, model_fingerprint, read_parts_with_meta
from det_calib.data.box_table import CAPTURE_COLUMNS, PAYLOAD_SCHEMA, read_boxes, run_meta
from det_calib.errors import InputError
from det_calib.job.inputs import Inputs
from det_calib.job.settings import Settings
from det_calib.tasks import get_task

if TYPE_CHECKING:  # pragma: no cover
    from det_calib.data.ground_truth import Split

_log = logging.getLogger(__name__)

_CHECKED = (("conf_floor", "conf"), ("nms_iou", "iou"), ("max_det", "max_det"), ("imgsz", "imgsz"))
"""Settings field -> capture setting that must agree for boxes to be reused."""


def _check_settings(recorded: dict[str, Any], s: Settings, imgsz: int, where: Path) -> None:
    """Refuse boxes captured with other capture settings than the run's, naming the option; the NMS
    IoU, which ``calibrate`` has no option for (``det-calib capture --iou`` sets it), is taken from
    the boxes when the run leaves it at its default."""
    have_iou = recorded.get("iou")
    if isinstance(have_iou, float) and have_iou != s.nms_iou and s.nms_iou == _NMS_IOU_DEFAULT:
        s.nms_iou = have_iou
        _log.info("the boxes in %s were captured at NMS IoU %g: so is this run", where, have_iou)
    want = s.compared_capture_settings(imgsz)
    for field, key in _CHECKED:
        have = recorded.get(key)
        if isinstance(have, list):  # Capturer records imgsz as [h, w]
            have = max(have)
        if have != want[key]:
            raise InputError(
                f"the boxes in {where} were captured with `{field}` {have}, not {want[key]}: "
                f"capture again or pass `{field}` {have}"
            )


_NMS_IOU_DEFAULT = next(f.default for f in dataclasses.fields(Settings) if f.name == "nms_iou")


def _base_split(name: str) -> str:
    """The split a (possibly halved) split comes from: ``val[fit-half]`` -> ``val``."""
    return name.split("[", 1)[0]


def _rows_of(df: pl.DataFrame, sp: Split, where: Path) -> pl.DataFrame:
    """The capture rows of ``sp``'s images, with ``image_id`` and ``split`` of ``sp`` (matched by image name).

    The ids come from a lookup of each row's image name (rows of other images dropped, the order
    kept): new ``image_id`` and ``split`` columns, ``image``, ``split`` and ``head`` as categoricals
    (a few distinct strings over millions of rows: at COCO scale their strings were a third of the
    table; ``boxes.parquet`` holds them as strings), the others shared with ``df``, not copied (at
    COCO scale the box table is the run's memory)."""
    names = sp.image_names()
    cols = [
        c for c in (*CAPTURE_COLUMNS, *PAYLOAD_SCHEMA) if c in df.columns
    ]  # a task's payload rides along
    lookup = pl.DataFrame(
        {"image": names, "_id": list(range(len(names)))},
        schema={"image": pl.String, "_id": pl.Int64},
    )
    ids = df.select("image").join(lookup, on="image", how="left", maintain_order="left")["_id"]
    rows = df.select(cols).with_columns(
        ids.cast(df.schema["image_id"]).alias("image_id"),
        pl.lit(sp.name, dtype=pl.Categorical).alias("split"),
        *(pl.col(c).cast(pl.Categorical) for c in ("image", "head")),
    )
    if ids.null_count():
        rows = rows.filter(ids.is_not_null())
    if rows.height == 0:
        raise InputError(f"no boxes of split `{sp.name}` in {where}")
    # one chunk a column: a categorical cast joins a column's chunks, and a table whose columns
    # are chunked differently is copied whole by the first polars operation that aligns them
    return rows.select(cols).rechunk()


def _of(df: pl.DataFrame, column: str, value: str) -> pl.DataFrame:
    """The rows of ``df`` whose ``column`` is ``value``: a zero-copy slice when they are one run
    of consecutive rows (a capture's order: one head after the other), else a filter."""
    hit = (df[column] == value).to_numpy()
    first = int(hit.argmax()) if hit.any() else 0
    n = int(hit.sum())
    if n == df.height:
        return df
    if n and hit[first : first + n].all():
        return df.slice(first, n)
    return df.filter(pl.Series(hit))


def reuse_boxes(
    source: str | Path,
    inputs: Inputs,
    splits: Sequence[Split],
    s: Settings,
    *,
    model_fp: str | None = None,
) -> tuple[dict[str, list[pl.DataFrame]], dict[str, Any]]:
    """Captured boxes of every head on each split, from an earlier run or from capture parts.

    Args:
        source: A run's output folder or its ``boxes.parquet``; or a folder of ``det-calib
            capture`` parts, either of one split or with one sub-folder per split (named as the
            split).
        inputs: The run's resolved inputs (model, heads, image size).
        splits: The fit and eval splits; boxes are assigned to them by image name.
        s: The run's settings (the capture settings must agree with the recorded ones).
        model_fp: The fingerprint the boxes must record as their model (default the model file's;
            a file of detections: its path, :mod:`det_calib.job.detections`).

    Returns:
        ``(captured, fingerprints)``: head -> one capture table per split, and what the new
        ``boxes.parquet`` records.

    Raises:
        InputError: No boxes there, boxes of another model or data, other capture settings, or
            a head or split missing.
    """
    source = Path(source)
    run_file = source if source.is_file() else source / "boxes.parquet"
    if source.is_file() or run_file.is_file():
        frames, have_heads, fingerprints = _from_run_file(run_file, inputs, splits, s, model_fp)
    else:
        frames, have_heads, fingerprints = _from_parts(source, inputs, splits, s)
    missing = [h for h in inputs.heads if h not in have_heads]
    if missing:
        hint = f"; choose `head` {have_heads[0]}" if have_heads else ""
        raise InputError(
            f"the boxes in {source} have no `{missing[0]}` head (they have: "
            f"{', '.join(have_heads) or 'none'}){hint}"
        )
    captured: dict[str, list[pl.DataFrame]] = {h: [] for h in inputs.heads}
    for sp in splits:
        rows = _rows_of(frames.pop(sp.name), sp, source)
        for h in inputs.heads:
            captured[h].append(_of(rows, "head", h))
    fingerprints = {
        **fingerprints,
        "heads": list(inputs.heads),
        **({} if inputs.facts is None else {"facts": inputs.facts.record()}),
    }
    _log.info("reusing the boxes in %s (no capture)", source)
    return captured, fingerprints


_Frames = tuple[dict[str, pl.DataFrame], list[str], dict[str, Any]]


def _from_run_file(
    run_file: Path,
    inputs: Inputs,
    splits: Sequence[Split],
    s: Settings,
    model_fp: str | None = None,
) -> _Frames:
    """Split name -> its rows of an earlier run's ``boxes.parquet``, the heads there, its fingerprints
    (checked against the model, the data of every split and the capture settings)."""

    meta = run_meta(run_file)
    if meta is None:
        raise InputError(
            f"{run_file} records no model/data fingerprints (it is not the box table of a calibrate "
            "run or of capture parts, or an older det_calib wrote it): run calibrate without "
            "`boxes` once"
        )
    if model_fp is None and str(meta["model"]).startswith("detections:"):
        raise InputError(
            f"the boxes in {run_file} were read from a file of detections "
            f"({meta['model'].removeprefix('detections:')}): give that file with `detections`"
        )
    model_fp = model_fp or model_fingerprint(inputs.model)
    if meta["model"] != model_fp:
        raise InputError(
            f"the boxes in {run_file} were captured with another model "
            f"({meta['model'][:19]}..., not {model_fp[:19]}...)"
        )
    _check_settings(meta["settings"], s, inputs.imgsz, run_file)
    df = read_boxes(run_file)
    frames = {}
    for sp in splits:
        recorded = meta["splits"].get(sp.name)
        if recorded is None:
            raise InputError(
                f"{run_file} has no boxes of split `{sp.name}` (it has: "
                f"{', '.join(meta['splits'])})"
            )
        if recorded != data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt):
            raise InputError(
                f"the boxes in {run_file} were captured on other data for split `{sp.name}` "
                "(images or labels differ)"
            )
        frames[sp.name] = _of(df, "split", sp.name)
    return frames, meta["heads"], meta


def _from_parts(source: Path, inputs: Inputs, splits: Sequence[Split], s: Settings) -> _Frames:
    """Split name -> its rows of ``det-calib capture`` parts (one folder, or one sub-folder per
    split), the heads every split's parts have, and the fingerprints the new run records."""

    frames: dict[str, pl.DataFrame] = {}
    have_heads: list[str] | None = None
    model_fp = model_fingerprint(inputs.model)
    settings = s.compared_capture_settings(inputs.imgsz)  # and the batch the parts record
    recorded_fp = {}
    for sp in splits:
        base = _base_split(sp.name)
        folder = source / base if (source / base).is_dir() else source
        # the whole split the parts were captured on: the run's own split unless it is a half or
        # --limit took part of it (then read again), and its fingerprint computed once
        same = sp.name == base and s.limit is None and not sp.corrupt
        whole = (
            sp
            if same
            else get_task(inputs.task).captured_split(
                inputs.ds,
                base,
                shape=inputs.payload_shape,
                coco_gt=s.coco_gt,
                limit=s.limit,
            )
        )
        expect = data_fingerprint(whole.images, names=whole.image_names(), coco_gt=s.coco_gt)
        df, meta = read_parts_with_meta(folder, expect_model=model_fp)
        if meta["split"] != base:
            raise InputError(
                f"the parts in {folder} are of split `{meta['split']}`, not `{base}`: put each "
                f"split's parts in a sub-folder named as the split"
            )
        if meta["data"] != expect:
            raise InputError(
                f"the boxes in {folder} were captured on other data for split `{base}` "
                "(images or labels differ)"
            )
        _check_settings(meta["settings"], s, inputs.imgsz, folder)
        if "batch" in meta["settings"]:
            settings["batch"] = meta["settings"]["batch"]
        frames[sp.name] = _of(df, "split", base)
        recorded_fp[sp.name] = (
            expect
            if same
            else data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt)
        )
        have_heads = (
            meta["heads"] if have_heads is None else [h for h in have_heads if h in meta["heads"]]
        )
    heads = have_heads or []
    if "batch" not in settings:  # parts that record none: the run's own
        settings["batch"] = resolve_batch(s.batch, s.device)
    return (
        frames,
        heads,
        {
            "format": 1,
            "model": model_fp,
            "splits": recorded_fp,
            "heads": heads,
            "settings": settings,
        },
    )

"""Instance masks of the ground truth: YOLO segment polygons or COCO ``segmentation``, as RLEs.

A split read by :func:`load_segment_split` is the :class:`~det_calib.data.ground_truth.Split` that
:func:`~det_calib.data.ground_truth.load_split` reads (same images, same rows, same checks,
warnings and summaries for malformed label files), with one more ground-truth column:

=========  =======  ==================================================================
segm       binary   the row's mask as pycocotools' compressed RLE ``counts`` at the
                    image's size (``Split.sizes``); null where the label is a box only
=========  =======  ==================================================================

YOLO segment lines ``cls x1 y1 x2 y2 x3 y3 ...`` are checked line by line by
:func:`~det_calib.data.ground_truth.check_label_line` (an odd number of coordinates, fewer than
three points, a point outside the image beyond Ultralytics' 1% tolerance, a class out of range: the
file is malformed and its image left out with a warning, as for box labels). A polygon is in
normalised coordinates of COCO's continuous pixel frame (pixel ``i`` spans ``[i, i + 1]``),
clipped to the image, and rasterised by pycocotools as COCO rasterises its polygons.

COCO JSON: each annotation's ``segmentation`` (polygons, uncompressed or compressed RLE) becomes
an RLE through ``COCO.annToRLE`` at the size the JSON gives the image, which must be the image's
size on disk.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.ground_truth import (
    Dataset,
    Split,
    coco_image_ids,
    label_path,
    load_split,
    read_label_file,
)
from det_calib.errors import InputError

__all__ = ["SEGM_COLUMN", "load_segment_split", "segment_rles", "has_masks"]

SEGM_COLUMN = "segm"
"""The column of each row's mask as binary RLE counts: the ground truth's, and the box table's payload column
of a segment model (:data:`det_calib.data.box_table.PAYLOAD_SCHEMA`): one name serves both tables."""


def _read_segment_file(
    path: Path, *, nc: int
) -> tuple[list[tuple[int, np.ndarray | None]], str | None]:
    """Read one YOLO label file, keeping each line's polygon.

    The file is checked by :func:`~det_calib.data.ground_truth.read_label_file` (same rules, same
    reasons); its rows are in the same order, exact duplicate lines dropped the same way.

    Returns:
        ``(rows, problem)``: per label row ``(cls, polygon)`` with ``polygon`` a (k, 2) float64
        array of normalised ``x, y`` (None for a box line), and ``problem`` None or
        ``"<file>:<line>: <reason>"`` (then ``rows`` is empty).
    """
    _, problem = read_label_file(path, nc=nc)
    if problem is not None:
        return [], problem
    rows, seen = [], set()
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        tokens = line.split()
        if not tokens:
            continue
        key = tuple(map(float, tokens))
        if key in seen:
            continue
        seen.add(key)
        poly = None if len(tokens) == 5 else np.asarray(key[1:], dtype=np.float64).reshape(-1, 2)
        rows.append((int(key[0]), poly))
    return rows, None


def _polygon_rle(polygon: np.ndarray, width: int, height: int) -> bytes:
    """Compressed RLE counts of a polygon in pixels (COCO frame), clipped to the image.

    >>> from pycocotools import mask as mask_utils
    >>> counts = _polygon_rle(np.array([[1, 1], [4, 1], [4, 3], [1, 3]]), 6, 5)
    >>> int(mask_utils.area({"size": [5, 6], "counts": counts}))
    6
    """
    from pycocotools import mask as mask_utils

    p = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
    p = np.clip(p, 0, [width, height])
    rles = mask_utils.frPyObjects([p.reshape(-1).tolist()], int(height), int(width))
    return mask_utils.merge(rles)["counts"]


def segment_rles(split: Split) -> list[dict | None]:
    """pycocotools RLE dicts of the split's ground-truth rows (None where a row has no mask)."""
    if SEGM_COLUMN not in split.gt.columns:
        raise InputError(
            f"split `{split.name}` was read without masks (read it for a segment model: "
            "load_task_split)"
        )
    out = []
    for img, counts in zip(split.gt["image_id"].to_list(), split.gt[SEGM_COLUMN].to_list()):
        w, h = (int(x) for x in split.sizes[img])
        out.append(None if counts is None else {"size": [h, w], "counts": counts})
    return out


def has_masks(split: Split) -> bool:
    """Whether every ground-truth row of the split has a mask (mask-IoU matching is possible)."""
    return SEGM_COLUMN in split.gt.columns and split.gt[SEGM_COLUMN].null_count() == 0


def load_segment_split(
    data: Dataset, split: str, *, coco_gt: str | Path | None = None, limit: int | None = None
) -> Split:
    """One split with each ground-truth row's mask (column :data:`SEGM_COLUMN`).

    The split is :func:`~det_calib.data.ground_truth.load_split`'s (its checks, warnings and
    left-out images); the masks are read for its images, row for row.

    Raises:
        InputError: What :func:`~det_calib.data.ground_truth.load_split` raises; for COCO JSON, an
            image whose size in the JSON differs from the file's.
    """
    sp = load_split(data, split, coco_gt=coco_gt, limit=limit)
    counts = (
        _coco_counts(sp, Path(coco_gt)) if coco_gt is not None else _yolo_counts(sp, nc=data.nc)
    )
    gt = sp.gt.with_columns(pl.Series(SEGM_COLUMN, counts, dtype=pl.Binary))
    return Split(
        name=sp.name,
        images=sp.images,
        sizes=sp.sizes,
        gt=gt,
        corrupt=sp.corrupt,
        root=sp.root,
        bad_labels=sp.bad_labels,
    )


def _aligned(
    sp: Split,
    per_image: list[list[tuple[int, bytes | None]]],
    source: str,
    *,
    check_classes: bool = True,
) -> list[bytes | None]:
    """Masks listed per image ``(cls, counts)``, placed on the split's rows (same count per image,
    and same classes when ``check_classes``)."""
    gt_img, gt_cls = sp.gt["image_id"].to_numpy(), sp.gt["cls"].to_numpy()
    counts: list[bytes | None] = [None] * sp.gt.height
    order = np.argsort(gt_img, kind="stable")
    starts = np.searchsorted(gt_img[order], np.arange(len(sp.images) + 1))
    for i, rows in enumerate(per_image):
        idx = order[starts[i] : starts[i + 1]]
        if len(idx) != len(rows) or (
            check_classes and any(int(gt_cls[j]) != c for j, (c, _) in zip(idx, rows))
        ):
            raise InputError(
                f"{source} changed while it was read: {sp.images[i]}"
            )  # pragma: no cover
        for j, (_, rle) in zip(idx, rows):
            counts[j] = rle
    return counts


def _yolo_counts(sp: Split, *, nc: int) -> list[bytes | None]:
    per_image = []
    for img, (w, h) in zip(sp.images, sp.sizes):
        lp = label_path(img)
        rows, problem = _read_segment_file(lp, nc=nc) if lp.is_file() else ([], None)
        if problem is not None:  # pragma: no cover - load_split left such images out
            raise InputError(f"malformed label: {problem}")
        per_image.append(
            [(c, None if p is None else _polygon_rle(p * [w, h], int(w), int(h))) for c, p in rows]
        )
    return _aligned(sp, per_image, "a label file")


def _coco_counts(sp: Split, path: Path) -> list[bytes | None]:
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(path))
    ids = coco_image_ids(coco, sp.images, root=sp.root, path=path)
    per_image = []
    for img, cid, (w, h) in zip(sp.images, ids, sp.sizes):
        info = coco.imgs[cid]
        if (int(info.get("width", w)), int(info.get("height", h))) != (int(w), int(h)):
            raise InputError(
                f"{path}: image {img.name} is {info.get('width')}x{info.get('height')} in the JSON "
                "but "
                f"{int(w)}x{int(h)} on disk: its masks cannot be placed"
            )
        info.setdefault("width", int(w))
        info.setdefault("height", int(h))
        rows = []
        for a in coco.loadAnns(coco.getAnnIds(imgIds=[cid])):
            seg = a.get("segmentation")
            rle = None
            if seg:
                try:
                    rle = coco.annToRLE(a)
                except Exception as e:
                    raise InputError(
                        f"{path}: annotation {a.get('id')} has an unreadable `segmentation` ({e})"
                    ) from None
                if [int(v) for v in rle["size"]] != [int(h), int(w)]:
                    raise InputError(
                        f"{path}: annotation {a.get('id')} has an RLE of size {rle['size']} "
                        "(height, "
                        f"width) on image {img.name} of {int(w)}x{int(h)}"
                    )
                if isinstance(rle["counts"], str):
                    rle["counts"] = rle["counts"].encode()
                rle = rle["counts"]
            rows.append((-1, rle))
        per_image.append(rows)
    return _aligned(sp, per_image, str(path), check_classes=False)

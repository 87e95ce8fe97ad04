"""Rotated boxes of the ground truth: YOLO OBB labels, for OBB models.

A split read by :func:`load_obb_split` is the :class:`~det_calib.data.ground_truth.Split` that
:func:`~det_calib.data.ground_truth.load_split` reads (same images, warnings, summaries and
left-out images), each line checked by :func:`check_obb_line`, with one more ground-truth column:

=====  ============  ==========================================================================
xywhr  array[f64,5]  the rotated box ``cx, cy, w, h, angle`` in pixels and radians, as Ultralytics
                     turns the four corners into one (``cv2.minAreaRect`` of the corners in
                     pixels, ``w >= h``, angle in ``[-pi/4, 3pi/4)``)
=====  ============  ==========================================================================

The box columns ``x1 .. y2`` are the corners' axis-aligned box, as Ultralytics' label check
derives it.

An OBB line is ``cls x1 y1 x2 y2 x3 y3 x4 y4`` (normalised corners, in order round the box). A
line is malformed (its file's image left out with a warning, as for box labels) when it holds
other than 9 values (3 corners are 7 values), a value that is not a finite number, a class out of
range, a corner outside the image beyond Ultralytics' 1% tolerance, or a **degenerate
quadrilateral**: corners that enclose no area (repeated or collinear corners, checked on the
convex hull so that the order of the corners does not matter, as it does not to Ultralytics).
A quadrilateral that is not a rectangle is accepted and becomes its minimum-area rectangle, as in
Ultralytics. COCO JSON has no rotated boxes: OBB ground truth comes from YOLO labels only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.ground_truth import Dataset, Split, check_label_line, label_path, load_split
from det_calib.errors import InputError

__all__ = ["XYWHR_COLUMN", "corners_to_xywhr", "load_obb_split", "split_xywhr", "has_rotated_boxes"]

XYWHR_COLUMN = "xywhr"
"""Name of the ground-truth column holding each row's rotated box."""

_MIN_AREA = 1e-12  # normalised units: a quadrilateral's hull smaller than this encloses nothing


def _hull_area(xy: np.ndarray) -> float:
    """Area of the convex hull of a few points (Andrew's monotone chain, then the shoelace formula)."""
    pts = sorted(set(map(tuple, xy.tolist())))
    if len(pts) < 3:
        return 0.0

    def half(seq):
        out: list[tuple[float, float]] = []
        for p in seq:
            while (
                len(out) >= 2
                and (
                    (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                    - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])
                )
                <= 0
            ):
                out.pop()
            out.append(p)
        return out

    hull = np.array(half(pts)[:-1] + half(pts[::-1])[:-1])
    if len(hull) < 3:
        return 0.0
    x, y = hull[:, 0], hull[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def _check_obb_line(tokens: list[str], *, nc: int) -> tuple[list[float] | None, str | None]:
    """Parse and check one YOLO OBB line ``cls x1 y1 x2 y2 x3 y3 x4 y4``.

    Returns:
        ``(box, None)`` with ``box = [cls, cx, cy, w, h]`` the corners' axis-aligned box
        (normalised), or ``(None, reason)``.
    """
    n = len(tokens)
    if n != 9:
        corners = f" ({(n - 1) // 2} corners)" if n > 1 and (n - 1) % 2 == 0 else ""
        return (
            None,
            f"expected 9 values `cls x1 y1 x2 y2 x3 y3 x4 y4` (4 corners), got {n}{corners}",
        )
    box, reason = check_label_line(
        tokens, nc=nc
    )  # numbers, class, corners in the image, zero width/height
    if reason is not None:
        return None, reason.replace("polygon point", "corner").replace(
            "polygon has", "quadrilateral has"
        )
    xy = np.asarray([float(t) for t in tokens[1:]], dtype=np.float64).reshape(4, 2)
    if _hull_area(xy) <= _MIN_AREA:
        return (
            None,
            "degenerate quadrilateral: its corners enclose no area (repeated or collinear corners)",
        )
    return box, None


def corners_to_xywhr(corners: np.ndarray) -> np.ndarray:
    """Rotated boxes ``cx, cy, w, h, angle`` of quadrilaterals in pixels, as Ultralytics computes them.

    ``cv2.minAreaRect`` of each quadrilateral's corners (float32, as OpenCV takes them), the longer
    side first (``w >= h``), the angle in radians in ``[-pi/4, 3pi/4)``.

    Args:
        corners: (n, 4, 2) or (n, 8) corners in pixels.

    Returns:
        (n, 5) float64.

    >>> corners_to_xywhr(np.array([[0, 0, 4, 0, 4, 2, 0, 2]])).round(6).tolist()
    [[2.0, 1.0, 4.0, 2.0, 0.0]]
    """
    import cv2

    pts = np.asarray(corners, dtype=np.float32).reshape(-1, 4, 2)
    out = np.zeros((len(pts), 5), dtype=np.float64)
    for i, q in enumerate(pts):
        (cx, cy), (w, h), angle = cv2.minAreaRect(q)
        theta = angle / 180 * np.pi
        if w < h:
            w, h, theta = h, w, theta + np.pi / 2
        theta = (theta + np.pi / 4) % np.pi - np.pi / 4
        out[i] = cx, cy, w, h, theta
    return out


def _read_obb_file(path: Path, *, nc: int) -> tuple[list[tuple[int, np.ndarray]], str | None]:
    """Read one YOLO OBB label file, keeping each line's corners.

    Every line is checked by :func:`check_obb_line`; exact duplicate lines are dropped as box
    lines are.

    Returns:
        ``(rows, problem)``: per label row ``(cls, corners)`` with ``corners`` a (4, 2) float64
        array of normalised ``x, y``; ``problem`` None or ``"<file>:<line>: <reason>"``.
    """
    rows, seen = [], set()
    for k, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        _, reason = _check_obb_line(tokens, nc=nc)
        if reason is not None:
            return [], f"{path}:{k}: {reason}"
        key = tuple(map(float, tokens))
        if key not in seen:
            seen.add(key)
            rows.append((int(key[0]), np.asarray(key[1:], dtype=np.float64).reshape(4, 2)))
    return rows, None


def load_obb_split(
    data: Dataset, split: str, *, coco_gt: str | Path | None = None, limit: int | None = None
) -> Split:
    """One split with each ground-truth row's rotated box (column :data:`XYWHR_COLUMN`).

    Raises:
        InputError: What :func:`~det_calib.data.ground_truth.load_split` raises (with the OBB checks
            of every line); ``coco_gt`` given (COCO JSON has no rotated boxes).
    """
    if coco_gt is not None:
        raise InputError(
            f"{coco_gt}: COCO JSON has no rotated boxes; OBB ground truth comes from YOLO OBB "
            "labels "
            "(`cls x1 y1 x2 y2 x3 y3 x4 y4`)"
        )
    sp = load_split(data, split, limit=limit, check_line=_check_obb_line)
    corners, classes = [], []
    for img, (w, h) in zip(sp.images, sp.sizes):
        lp = label_path(img)
        rows, problem = _read_obb_file(lp, nc=data.nc) if lp.is_file() else ([], None)
        if problem is not None:  # pragma: no cover - load_split left such images out
            raise InputError(f"malformed label: {problem}")
        for c, q in rows:
            classes.append(c)
            corners.append(q * [w, h])
    if len(corners) != sp.gt.height or classes != sp.gt["cls"].to_list():  # pragma: no cover
        raise InputError("a label file changed while it was read")
    xywhr = corners_to_xywhr(np.asarray(corners, dtype=np.float64).reshape(-1, 4, 2))
    gt = sp.gt.with_columns(pl.Series(XYWHR_COLUMN, xywhr, dtype=pl.Array(pl.Float64, 5)))
    return Split(
        name=sp.name,
        images=sp.images,
        sizes=sp.sizes,
        gt=gt,
        corrupt=sp.corrupt,
        root=sp.root,
        bad_labels=sp.bad_labels,
    )


def split_xywhr(split: Split) -> np.ndarray:
    """(m, 5) rotated boxes of the split's ground-truth rows."""
    if XYWHR_COLUMN not in split.gt.columns:
        raise InputError(
            f"split `{split.name}` was read without rotated boxes (read it for an OBB model: "
            "load_task_split)"
        )
    return np.asarray(split.gt[XYWHR_COLUMN].to_numpy(), dtype=np.float64).reshape(-1, 5)


def has_rotated_boxes(split: Split) -> bool:
    """Whether the split's ground truth has rotated boxes (rotated matching is possible)."""
    return XYWHR_COLUMN in split.gt.columns

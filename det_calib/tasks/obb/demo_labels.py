"""Rotated-box labels of the ``shapes`` demo, for OBB models.

Each labelled object's rotated box is the **minimum-area rectangle of its visible pixels** (the
pixels it owns: not painted over by a later object, inside the image), each pixel taken whole
(COCO's pixel-edge frame: pixel ``i`` spans ``[i, i + 1]``), so the rectangle covers every visible
pixel entirely, as the detect box does.

The rectangle is found by rotating calipers: the smallest rectangle of a convex polygon has a side
along one of its edges, so each edge direction of the convex hull of the visible pixels' corners
gives one candidate (the axis-aligned box, which is the detect label box, is always one). Where
the smallest candidate pokes out of the image (possible only for an object cut by the border: a
rectangle tilted along a diagonal cut can reach past the image edge), the smallest candidate that
lies inside the image is taken instead, so that every corner is a valid normalised coordinate
(Ultralytics refuses a label more than 1% outside the image); the axis-aligned box always
qualifies. Ties go to the candidate nearest to axis-aligned.

A label line is Ultralytics' OBB line ``cls x1 y1 x2 y2 x3 y3 x4 y4`` (normalised, 6 decimals), the
corners in order round the rectangle: starting from the corner with the smallest coordinates along
its sides, clockwise on screen (``y`` down). The OBB dataset is a root of its own in the cache
(``shapes-v1-seed0-obb1``, see :mod:`det_calib.demo.task_labels`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from det_calib.demo.shapes import GENERATOR_VERSION, Rendered, render_with_owners
from det_calib.demo.task_labels import task_data_yaml, write_task_split

__all__ = [
    "OBB_VERSION",
    "min_area_rect",
    "region_rect",
    "render_rects",
    "rendered_rects",
    "obb_lines",
    "rendered_obb_lines",
    "write_obb_split",
    "demo_obb_data_yaml",
]

OBB_VERSION = 1
"""Version of the rotated-box rule; part of the cache folder's name."""

_INSIDE_TOL = 1e-6  # pixels: how far float rounding may put a corner outside the image


def _hull(points: np.ndarray) -> np.ndarray:
    import cv2

    return (
        cv2.convexHull(np.asarray(points, dtype=np.float32).reshape(-1, 1, 2))
        .reshape(-1, 2)
        .astype(np.float64)
    )


def _candidate_angles(hull: np.ndarray) -> np.ndarray:
    """Edge directions of the hull folded into ``[0, pi/2)`` (a rectangle is the same turned by a
    right angle), 0 always included, duplicates removed."""
    edges = np.roll(hull, -1, axis=0) - hull
    edges = edges[np.hypot(edges[:, 0], edges[:, 1]) > 0]
    theta = np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2)
    theta[np.isclose(theta, np.pi / 2, rtol=0, atol=1e-12)] = 0.0
    return np.unique(np.r_[0.0, np.round(theta, 12)])


def _rect_at(hull: np.ndarray, theta: float) -> tuple[float, np.ndarray]:
    """Area and corners of the hull's bounding rectangle with sides along ``theta`` and ``theta + pi/2``."""
    u = np.array([np.cos(theta), np.sin(theta)])
    v = np.array([-np.sin(theta), np.cos(theta)])
    a, b = hull @ u, hull @ v
    a0, a1, b0, b1 = a.min(), a.max(), b.min(), b.max()
    corners = np.array([a0 * u + b0 * v, a1 * u + b0 * v, a1 * u + b1 * v, a0 * u + b1 * v])
    return float((a1 - a0) * (b1 - b0)), corners


def min_area_rect(
    points: np.ndarray, *, width: float | None = None, height: float | None = None
) -> np.ndarray:
    """The minimum-area rectangle of a point set, optionally the smallest that lies inside an image.

    Args:
        points: (k, 2) points ``x, y``.
        width, height: When given, only rectangles inside ``[0, width] x [0, height]`` qualify (the
            points' axis-aligned box must lie inside).

    Returns:
        (4, 2) float64 corners, clockwise on screen from the corner with the smallest coordinates
        along the rectangle's sides.

    >>> (min_area_rect(np.array([[0, 1], [1, 0], [3, 2], [2, 3]])).round(6) + 0.0).tolist()
    [[1.0, 0.0], [3.0, 2.0], [2.0, 3.0], [0.0, 1.0]]
    """
    hull = _hull(points)
    candidates = []
    for theta in _candidate_angles(hull):
        area, corners = _rect_at(hull, float(theta))
        if width is not None and height is not None:
            lo, hi = corners.min(0), corners.max(0)
            if (
                (lo < -_INSIDE_TOL).any()
                or hi[0] > width + _INSIDE_TOL
                or hi[1] > height + _INSIDE_TOL
            ):
                continue
            corners = np.clip(corners, 0, [width, height])
        candidates.append((area, min(theta, np.pi / 2 - theta), corners))
    if not candidates:
        raise ValueError("the points' box does not lie inside the image")
    smallest = min(c[0] for c in candidates)
    return min((c for c in candidates if c[0] <= smallest * (1 + 1e-9)), key=lambda c: c[1])[2]


def region_rect(mask: np.ndarray) -> np.ndarray | None:
    """The rotated box of a binary region (:func:`min_area_rect` of its pixels' corners, inside the
    image), in the pixel-edge frame; None for an empty region."""
    ys, xs = np.nonzero(np.asarray(mask))
    if len(xs) == 0:
        return None
    corners = np.concatenate([np.stack([xs + dx, ys + dy], 1) for dx in (0, 1) for dy in (0, 1)])
    h, w = mask.shape
    return min_area_rect(corners, width=w, height=h)


def rendered_rects(r: Rendered) -> list[np.ndarray]:
    """(4, 2) rotated box in pixels of each box label of a rendered image, in label order."""
    return [region_rect(r.owners == k) for k in r.labelled]


def render_rects(
    seed: int, split: str, index: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Render one demo image with the rotated box of each of its box labels.

    Returns:
        ``(image, labels, rects)``: the image and box labels exactly as
        :func:`~det_calib.demo.shapes.render_image` returns them, and one (4, 2) rectangle in pixels
        (pixel-edge frame) per label row, in the same order.
    """
    r = render_with_owners(seed, split, index)
    return r.image, r.labels, rendered_rects(r)


def obb_lines(labels: np.ndarray, rects: list[np.ndarray], width: int, height: int) -> list[str]:
    """Ultralytics OBB label lines ``cls x1 y1 x2 y2 x3 y3 x4 y4`` (normalised, 6 decimals)."""
    lines = []
    for row, rect in zip(labels, rects):
        xy = (np.asarray(rect) / [width, height]).reshape(-1)
        lines.append(" ".join([str(int(row[0])), *(f"{v:.6f}" for v in xy)]))
    return lines


def rendered_obb_lines(r: Rendered) -> list[str]:
    """The OBB label lines of a rendered image."""
    h, w = r.owners.shape
    return obb_lines(r.labels, rendered_rects(r), w, h)


def write_obb_split(
    root: Path, split: str, n: int, *, seed: int = 0, images_from: Path | None = None
) -> int:
    """Write ``n`` images of ``split`` with OBB labels under ``root/images|labels/split``
    (:func:`~det_calib.demo.task_labels.write_task_split`); returns the number of label lines."""
    return write_task_split(root, split, n, rendered_obb_lines, seed=seed, images_from=images_from)


def demo_obb_data_yaml(*, with_train: bool = False, seed: int = 0) -> Path:
    """``data.yaml`` of the OBB demo: the demo's splits with rotated-box labels, written on first use
    into ``shapes-v1-seed0-obb1/`` in the cache (the detection demo's images hard-linked).

    Args:
        with_train: Also write the train split (only training an OBB model needs it); the yaml's
            ``train`` then names it.
        seed: Dataset seed.
    """
    title = (
        "shapes demo, rotated boxes of each object's visible region "
        "(det_calib.tasks.obb.demo_labels "
        f"v{OBB_VERSION}; generator v{GENERATOR_VERSION})"
    )
    return task_data_yaml(
        f"obb{OBB_VERSION}",
        rendered_obb_lines,
        title=title,
        extra=[],
        with_train=with_train,
        seed=seed,
    )


DEMO_MODEL = "yolo26n_shapes_obb.pt"
"""The demo obb model's file name among the demo files (:func:`det_calib.demo.demo_root`), which runs on
:data:`DEMO_DATA` when no data is named."""
DEMO_DATA = demo_obb_data_yaml

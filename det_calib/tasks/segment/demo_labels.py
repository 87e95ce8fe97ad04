"""Polygon labels of the ``shapes`` demo: each labelled object's visible region, for segment models.

The detection demo (:mod:`det_calib.demo.shapes`) is left exactly as it is: same random stream,
same pixels, same box labels. This module re-renders an image with
:func:`~det_calib.demo.shapes.render_with_owners`, which also returns the pixel owner map the box
labels were computed from, and turns each labelled object's visible pixels (the pixels it owns:
not painted over by a later object, inside the image) into one YOLO segment polygon
``cls x1 y1 x2 y2 ...`` (normalised).

How a region becomes a polygon:

* **Pixel-edge outline.** The outline follows the pixel edges (COCO's continuous frame, where
  pixel ``i`` spans ``[i, i + 1]``), not the pixel centres, so the polygon's tight box is exactly
  the detect label box before simplification, and pycocotools rasterises the unsimplified polygon
  back to exactly the region. (It is traced by OpenCV on the mask upsampled 2x, whose contour
  points lie a quarter pixel inside the pixel edges, then rounded to the nearest pixel corner.)
* **Simplified** with ``cv2.approxPolyDP`` at :data:`EPSILON` pixels: the kept vertices are a subset
  of the outline's, so every side of the polygon's box lies within ``EPSILON`` of the label box's.
* **Several pieces in one line.** A region can have several pieces (an object cut in two by a
  later one) and holes (a hollow shape's outline, a ring). A YOLO segment line holds one polygon,
  so all pieces and holes are joined into one ring by zero-width bridges: each further piece is
  entered from the vertex of the ring built so far that is nearest to one of its vertices, walked
  round, and left the same way back. This is what Ultralytics does with COCO's multi-part
  polygons when it converts them to YOLO labels (``merge_multi_segment``: pieces joined at their
  closest points by a thin line), rather than keeping only the largest piece, which would lose
  pixels and shrink the polygon's box below the detect box. Under the even-odd rule that both
  pycocotools and OpenCV's ``fillPoly`` use, a bridge walked out and back encloses nothing and a
  hole stays a hole. (OpenCV's ``fillPoly``, which Ultralytics rasterises training masks with,
  also paints the boundary, so there a bridge is a one-pixel line.)

Objects whose region yields no polygon of three points or more after simplification keep the
unsimplified outline (never observed on the demo).

The segment dataset is a separate root in the cache (``shapes-v1-seed0-seg1``): the same image
files (hard links to the detection demo's, copies where the file system refuses links) with
polygon label files and its own ``data.yaml``. Nothing under the detection root is written.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from det_calib.demo.shapes import GENERATOR_VERSION, Rendered, render_with_owners
from det_calib.demo.task_labels import task_data_yaml, write_task_split

log = logging.getLogger(__name__)

__all__ = [
    "EPSILON",
    "SEGMENT_VERSION",
    "region_polygon",
    "render_polygons",
    "segment_lines",
    "write_segment_split",
    "demo_segment_data_yaml",
]

EPSILON = 0.5
"""``cv2.approxPolyDP`` tolerance in pixels; also the most a side of a polygon's box may move."""

SEGMENT_VERSION = 1
"""Version of the polygon rule; part of the cache folder's name."""


def _outline_pieces(mask: np.ndarray) -> list[np.ndarray]:
    """Pixel-edge outlines of a binary mask: outer boundaries and holes, as (k, 2) int arrays of
    pixel corners ``(x, y)``, consecutive duplicates removed."""
    import cv2

    up = np.kron(mask.astype(np.uint8), np.ones((2, 2), dtype=np.uint8))
    contours, _ = cv2.findContours(up, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    pieces = []
    for c in contours:
        # a 2x cell c has its centre at (c + 0.5) / 2 in original pixels: a quarter pixel inside
        # the pixel edge, so rounding lands on the edge's corner (never a tie: .25 or .75)
        pts = np.round((c.reshape(-1, 2) + 0.5) / 2).astype(np.int32)
        keep = np.any(pts != np.roll(pts, 1, axis=0), axis=1)
        pts = pts[keep] if keep.any() else pts[:1]
        if len(pts) >= 3:
            pieces.append(pts)
    return pieces


def _simplify(pts: np.ndarray, epsilon: float) -> np.ndarray:
    import cv2

    out = cv2.approxPolyDP(pts.reshape(-1, 1, 2), epsilon, True).reshape(-1, 2)
    return out if len(out) >= 3 else pts


def _join(pieces: list[np.ndarray]) -> np.ndarray:
    """One ring from several: each further piece spliced in at the nearest vertex pair, by a
    zero-width bridge (out and back along the same segment)."""
    order = sorted(range(len(pieces)), key=lambda i: -len(pieces[i]))
    ring = pieces[order[0]]
    for i in order[1:]:
        p = pieces[i]
        d = ((ring[:, None, :].astype(np.int64) - p[None, :, :]) ** 2).sum(-1)
        a, b = np.unravel_index(int(np.argmin(d)), d.shape)
        walk = np.roll(p, -b, axis=0)
        ring = np.concatenate([ring[: a + 1], walk, walk[:1], ring[a : a + 1], ring[a + 1 :]])
    return ring


def region_polygon(mask: np.ndarray, *, epsilon: float = EPSILON) -> np.ndarray:
    """One polygon (pixel-edge frame) of a binary region: all its pieces and holes, simplified.

    Args:
        mask: (H, W) array, nonzero inside the region.
        epsilon: ``cv2.approxPolyDP`` tolerance in pixels (0: no simplification).

    Returns:
        (k, 2) float64 vertices ``x, y`` in pixels (pixel ``i`` spans ``[i, i + 1]``); empty
        (0, 2) for an empty region.

    >>> m = np.zeros((6, 8), np.uint8); m[1:4, 2:7] = 1
    >>> region_polygon(m).tolist()
    [[2.0, 1.0], [2.0, 4.0], [7.0, 4.0], [7.0, 1.0]]
    """
    pieces = _outline_pieces(np.asarray(mask) != 0)
    if not pieces:
        return np.zeros((0, 2), dtype=np.float64)
    if epsilon > 0:
        pieces = [_simplify(p, epsilon) for p in pieces]
    return _join(pieces).astype(np.float64)


def render_polygons(seed: int, split: str, index: int, *, epsilon: float = EPSILON):
    """Render one demo image with a visible-region polygon for each of its box labels.

    Returns:
        ``(image, labels, polygons)``: the image and box labels exactly as
        :func:`~det_calib.demo.shapes.render_image` returns them, and one (k, 2) polygon in pixels
        (pixel-edge frame) per label row, in the same order.
    """
    r = render_with_owners(seed, split, index)
    polys = [region_polygon(r.owners == k, epsilon=epsilon) for k in r.labelled]
    return r.image, r.labels, polys


def segment_lines(
    labels: np.ndarray, polygons: list[np.ndarray], width: int, height: int
) -> list[str]:
    """YOLO segment label lines ``cls x1 y1 x2 y2 ...`` (normalised, 6 decimals, as the box labels)."""
    lines = []
    for row, poly in zip(labels, polygons):
        xy = (poly / [width, height]).reshape(-1)
        lines.append(" ".join([str(int(row[0])), *(f"{v:.6f}" for v in xy)]))
    return lines


def write_segment_split(
    root: Path, split: str, n: int, *, seed: int = 0, images_from: Path | None = None
) -> int:
    """Write ``n`` images of ``split`` with polygon labels under ``root/images|labels/split``.

    Args:
        root: Segment dataset root.
        split: Split name.
        n: Number of images.
        seed: Dataset seed.
        images_from: Root of the rendered detection demo: its PNG of each image is hard-linked
            (copied where linking fails) instead of written again. Without it, or where that file
            is missing, the rendered image is written as the detection writer writes it.

    Returns:
        The number of polygons written.
    """
    return write_task_split(root, split, n, _segment_lines_of, seed=seed, images_from=images_from)


def _segment_lines_of(r: Rendered) -> list[str]:
    """The polygon label lines of a rendered image (:data:`~det_calib.demo.task_labels.LineWriter`)."""
    polys = [region_polygon(r.owners == k) for k in r.labelled]
    return segment_lines(r.labels, polys, r.image.shape[1], r.image.shape[0])


def demo_segment_data_yaml(*, with_train: bool = False, seed: int = 0) -> Path:
    """``data.yaml`` of the segment demo: the demo's splits with polygon labels.

    Renders the detection demo first if needed (:func:`det_calib.demo.demo_data_yaml`), then, on
    first use, the polygon labels into ``shapes-v1-seed0-seg1/`` beside it in the cache, with the
    detection demo's image files hard-linked. Each split is written into a temporary folder and
    renamed into place.

    Args:
        with_train: Also write the train split (only training a segment model needs it).
        seed: Dataset seed.

    Returns:
        Path of a data.yaml with ``train`` (the train split when written, else calib), ``val``
        (= calib), ``calib`` and ``test``.
    """
    return task_data_yaml(
        f"seg{SEGMENT_VERSION}",
        _segment_lines_of,
        with_train=with_train,
        seed=seed,
        extra=[],
        title=f"shapes demo, polygon labels of each object's visible region (det_calib.tasks.segment.demo_labels "
        f"v{SEGMENT_VERSION}; generator v{GENERATOR_VERSION})",
    )


DEMO_MODEL = "yolo26n_shapes_seg.pt"
"""The demo segment model's file name among the demo files (:func:`det_calib.demo.demo_root`), which runs on
:data:`DEMO_DATA` when no data is named."""
DEMO_DATA = demo_segment_data_yaml

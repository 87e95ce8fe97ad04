"""Keypoint labels of the ``shapes`` demo, for pose models.

Every labelled object gets the same five keypoints, whatever its class (:data:`KEYPOINT_NAMES`):

=====  ========  =================================================================================
index  name      point
=====  ========  =================================================================================
0      centre    the centre the shape was drawn around (the mean of its outline's points: every
                 labelled shape is symmetric about it); for a hollow shape, the middle of the ring
1      top       the outline point with the smallest ``y`` (the first such point where several tie)
2      right     the outline point with the largest ``x``
3      bottom    the outline point with the largest ``y``
4      left      the outline point with the smallest ``x``
=====  ========  =================================================================================

The outline is the polygon the shape was drawn from (a circle and an ellipse are 64-gons), so the
four extremes are the drawn shape's extreme vertices: a triangle's, square's or hexagon's corners,
a star's tips, a cross's arm ends, the ends of an ellipse's axes when it is upright. The set does
not depend on a shape's rotation or class, so a model can learn it, and a horizontal flip swaps
``right`` and ``left`` only (:data:`FLIP_IDX`). Where a shape rotates through a tie (a square with
a side almost level), its ``top`` jumps from one corner to the other: the price of a fixed set on
shapes with rotational symmetry.

Coordinates are in COCO's pixel-edge frame (pixel ``i`` spans ``[i, i + 1]``, as the box labels),
written normalised with 6 decimals. Visibility follows COCO:

* ``0``, not labelled, ``x = y = 0``: the point lies outside the image (truncated by the border);
* ``1``, labelled but not visible: inside the image, on a pixel owned by an object drawn later
  (occluded);
* ``2``, labelled and visible: inside the image, not covered by a later object (the pixel may be
  background or an earlier object: the point of a hollow shape's centre is visible when nothing
  is drawn over it).

A label line is Ultralytics' pose line ``cls cx cy w h x1 y1 v1 ... x5 y5 v5``: the box is the
detection demo's label, unchanged. The pose dataset is a root of its own in the cache
(``shapes-v1-seed0-pose1``, see :mod:`det_calib.demo.task_labels`) whose ``data.yaml`` has
``kpt_shape: [5, 3]``, ``flip_idx`` and ``kpt_names``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from det_calib.demo.shapes import CLASS_NAMES, GENERATOR_VERSION, Rendered, render_with_owners
from det_calib.demo.task_labels import task_data_yaml, write_task_split

__all__ = [
    "KEYPOINT_NAMES",
    "FLIP_IDX",
    "KPT_SHAPE",
    "POSE_VERSION",
    "object_keypoints",
    "keypoint_visibility",
    "render_keypoints",
    "rendered_keypoints",
    "pose_lines",
    "rendered_pose_lines",
    "write_pose_split",
    "demo_pose_data_yaml",
]

KEYPOINT_NAMES: tuple[str, ...] = ("centre", "top", "right", "bottom", "left")
"""The keypoints of every labelled object, in label order."""

FLIP_IDX: tuple[int, ...] = (0, 1, 4, 3, 2)
"""Keypoint order after a horizontal flip (``right`` and ``left`` swap), as ``flip_idx`` in data.yaml."""

KPT_SHAPE: tuple[int, int] = (len(KEYPOINT_NAMES), 3)
"""``kpt_shape`` of the pose demo: five keypoints of ``x y visibility``."""

POSE_VERSION = 1
"""Version of the keypoint rule; part of the cache folder's name."""


def object_keypoints(outline: np.ndarray) -> np.ndarray:
    """The five keypoints of a shape drawn from ``outline``, in COCO's pixel-edge frame.

    Args:
        outline: (k, 2) points the shape was drawn from, OpenCV's pixel-centre frame
            (``Rendered.outlines``).

    Returns:
        (5, 2) float64 ``x, y``: centre, top, right, bottom, left (:data:`KEYPOINT_NAMES`).

    >>> object_keypoints(np.array([[0.0, -2.0], [3.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])).tolist()
    [[0.5, 0.5], [0.5, -1.5], [3.5, 0.5], [0.5, 2.5], [-2.5, 0.5]]
    """
    p = np.asarray(outline, dtype=np.float64).reshape(-1, 2)
    idx = [
        int(np.argmin(p[:, 1])),
        int(np.argmax(p[:, 0])),
        int(np.argmax(p[:, 1])),
        int(np.argmin(p[:, 0])),
    ]
    return np.vstack([p.mean(0), p[idx]]) + 0.5


def keypoint_visibility(points: np.ndarray, owners: np.ndarray, drawn: int) -> np.ndarray:
    """COCO visibility of an object's keypoints: 0 outside the image, 1 under a later object, 2 otherwise.

    Args:
        points: (K, 2) keypoints in the pixel-edge frame.
        owners: (H, W) owner map (``Rendered.owners``: drawing index of the object on top, -1 background).
        drawn: The object's drawing index.

    >>> own = np.array([[-1, 0], [0, 1]])
    >>> keypoint_visibility(np.array([[0.5, 0.5], [1.5, 1.2], [2.0, 0.5], [-0.1, 1.0]]), own, 0).tolist()
    [2, 1, 0, 0]
    """
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    h, w = owners.shape
    inside = (p[:, 0] >= 0) & (p[:, 0] < w) & (p[:, 1] >= 0) & (p[:, 1] < h)
    vis = np.zeros(len(p), dtype=np.int64)
    ix = np.clip(np.floor(p[:, 0]).astype(np.int64), 0, w - 1)
    iy = np.clip(np.floor(p[:, 1]).astype(np.int64), 0, h - 1)
    vis[inside] = np.where(owners[iy[inside], ix[inside]] > drawn, 1, 2)
    return vis


def rendered_keypoints(r: Rendered) -> np.ndarray:
    """(n, 5, 3) keypoints ``x, y, v`` in pixels of each box label of a rendered image (``x = y = 0``
    where ``v = 0``)."""
    out = np.zeros((len(r.labelled), *KPT_SHAPE), dtype=np.float64)
    for i, k in enumerate(r.labelled):
        pts = object_keypoints(r.outlines[k])
        vis = keypoint_visibility(pts, r.owners, int(k))
        out[i, :, :2] = np.where(vis[:, None] > 0, pts, 0.0)
        out[i, :, 2] = vis
    return out


def render_keypoints(
    seed: int, split: str, index: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Render one demo image with the keypoints of each of its box labels.

    Returns:
        ``(image, labels, keypoints)``: the image and box labels exactly as
        :func:`~det_calib.demo.shapes.render_image` returns them, and (n, 5, 3) keypoints ``x, y, v``
        in pixels (pixel-edge frame), one row per label, in the same order.
    """
    r = render_with_owners(seed, split, index)
    return r.image, r.labels, rendered_keypoints(r)


def pose_lines(labels: np.ndarray, keypoints: np.ndarray, width: int, height: int) -> list[str]:
    """Ultralytics pose label lines ``cls cx cy w h x1 y1 v1 ...`` (normalised, 6 decimals; the box
    written as the detection labels are)."""
    lines = []
    for (c, x, y, bw, bh), kp in zip(labels, keypoints):
        head = f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}"
        pts = " ".join(f"{px / width:.6f} {py / height:.6f} {int(v)}" for px, py, v in kp)
        lines.append(f"{head} {pts}")
    return lines


def rendered_pose_lines(r: Rendered) -> list[str]:
    """The pose label lines of a rendered image."""
    h, w = r.owners.shape
    return pose_lines(r.labels, rendered_keypoints(r), w, h)


def write_pose_split(
    root: Path, split: str, n: int, *, seed: int = 0, images_from: Path | None = None
) -> int:
    """Write ``n`` images of ``split`` with pose labels under ``root/images|labels/split``
    (:func:`~det_calib.demo.task_labels.write_task_split`); returns the number of label lines."""
    return write_task_split(root, split, n, rendered_pose_lines, seed=seed, images_from=images_from)


def demo_pose_data_yaml(*, with_train: bool = False, seed: int = 0) -> Path:
    """``data.yaml`` of the pose demo: the demo's splits with keypoint labels, written on first use
    into ``shapes-v1-seed0-pose1/`` in the cache (the detection demo's images hard-linked).

    Args:
        with_train: Also write the train split (only training a pose model needs it); the yaml's
            ``train`` then names it.
        seed: Dataset seed.

    Returns:
        Path of a data.yaml with ``train``, ``val`` (= calib), ``calib``, ``test``, the class
        names, ``kpt_shape: [5, 3]``, ``flip_idx`` and ``kpt_names``.
    """
    extra = [
        f"kpt_shape: [{KPT_SHAPE[0]}, {KPT_SHAPE[1]}]",
        f"flip_idx: [{', '.join(map(str, FLIP_IDX))}]",
        "kpt_names:",
        *[f"  {i}: [{', '.join(KEYPOINT_NAMES)}]" for i in range(len(CLASS_NAMES))],
    ]
    title = (
        f"shapes demo, keypoint labels {list(KEYPOINT_NAMES)} (det_calib.tasks.pose.demo_labels "
        f"v{POSE_VERSION}; "
        f"generator v{GENERATOR_VERSION})"
    )
    return task_data_yaml(
        f"pose{POSE_VERSION}",
        rendered_pose_lines,
        title=title,
        extra=extra,
        with_train=with_train,
        seed=seed,
    )


DEMO_MODEL = "yolo26n_shapes_pose.pt"
"""The demo pose model's file name among the demo files (:func:`det_calib.demo.demo_root`), which runs on
:data:`DEMO_DATA` when no data is named."""
DEMO_DATA = demo_pose_data_yaml

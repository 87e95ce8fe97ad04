"""The figures of a pose or OBB model's run: a few eval images with the kept boxes' keypoints or rotated
boxes over the ground truth's, coloured by whether the box matched, the matching measure written
(OKS for keypoints, ProbIoU for rotated boxes). The panels are built from a box table, the split's
ground truth and the matching result by :mod:`det_calib.report.task_examples`.

Drawn as the segment model's figure (:mod:`det_calib.tasks.segment.report_plots`): an Agg canvas, the DejaVu
fonts matplotlib ships, Paul Tol's colour-blind-safe palette, the image dimmed under the drawing.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Polygon, Rectangle

from .plots import COLOURS, DPI, GT_EDGE, RC, to_png

__all__ = ["PosePanel", "RotatedPanel", "palette_png", "pose_examples_figure", "rotated_examples_figure",
           "xywhr_corners"]

PALETTE = 256
"""Colours of the figures' PNG (:func:`palette_png`)."""
DIM = 0.75
"""The image's brightness under the drawing."""
GT_DARK = "#222222"


@dataclass(frozen=True)
class PosePanel:
    """One image of the pose figure.

    Attributes:
        title: The panel's title (the image's name and its counts).
        image: (H, W, 3) uint8 RGB.
        gt_kpts: (m, K, 3) ground-truth keypoints ``x, y, v`` in pixels (``v = 0``: not labelled, not drawn;
            ``v = 1``: labelled, occluded, drawn hollow; ``v = 2``: visible, drawn filled).
        kpts: (n, K, 2 or 3) keypoints of the kept boxes (a third column, the keypoint score, is not used).
        state: Per kept box ``"matched"`` or ``"unmatched"``.
        labels: Per kept box its text (class, conf, OKS), drawn at the top left of its box.
        boxes: Per kept box ``(x1, y1, x2, y2)``, outlined thin in its state's colour.
        gt_index: Per kept box the row of ``gt_kpts`` it matched, else -1 (a matched box's keypoints are
            joined to their ground truth's by thin lines).
    """

    title: str
    image: np.ndarray
    gt_kpts: np.ndarray
    kpts: np.ndarray
    state: Sequence[str]
    labels: Sequence[str] = field(default_factory=tuple)
    boxes: Sequence[tuple[float, float, float, float]] = field(default_factory=tuple)
    gt_index: Sequence[int] = field(default_factory=tuple)


@dataclass(frozen=True)
class RotatedPanel:
    """One image of the OBB figure.

    Attributes:
        title: The panel's title.
        image: (H, W, 3) uint8 RGB.
        gt: (m, 5) ground-truth rotated boxes ``cx, cy, w, h, angle`` (pixels, radians), outlined in white.
        boxes: (n, 5) rotated boxes of the kept boxes, outlined in their state's colour.
        state: Per kept box ``"matched"`` or ``"unmatched"``.
        labels: Per kept box its text (class, conf, ProbIoU), drawn at its highest corner.
    """

    title: str
    image: np.ndarray
    gt: np.ndarray
    boxes: np.ndarray
    state: Sequence[str]
    labels: Sequence[str] = field(default_factory=tuple)


def xywhr_corners(xywhr) -> np.ndarray:
    """(n, 4, 2) corners of rotated boxes ``cx, cy, w, h, angle``, in order around the box (Ultralytics'
    ``xywhr2xyxyxyxy`` order).

    >>> xywhr_corners([[10, 5, 4, 2, 0.0]]).tolist()
    [[[12.0, 6.0], [12.0, 4.0], [8.0, 4.0], [8.0, 6.0]]]
    """
    b = np.asarray(xywhr, dtype=np.float64).reshape(-1, 5)
    c, s = np.cos(b[:, 4]), np.sin(b[:, 4])
    along = np.stack([c, s], 1) * b[:, 2:3] / 2
    across = np.stack([-s, c], 1) * b[:, 3:4] / 2
    ctr = b[:, :2]
    return np.stack([ctr + along + across, ctr + along - across, ctr - along - across, ctr - along + across], 1)


def _frame(ax, title: str, image: np.ndarray) -> None:
    ax.imshow((image.astype(np.float64) * DIM).astype(np.uint8), interpolation="nearest")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    h, w = image.shape[:2]
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)


def _label(ax, text: str, box: tuple[float, float, float, float], state: str, size: tuple[int, int]) -> None:
    """``text`` above the box ``(x1, y1, x2, y2)``: left-aligned at its left side, or right-aligned at its right
    side where the box lies in the image's right half; inside the box's top where there is no room above."""
    x1, y1, x2, _ = box
    w, h = size
    right = (x1 + x2) / 2 > w / 2
    inside = y1 < 0.06 * h
    ax.text(min(x2, w) if right else max(x1, 0.0), max(y1, 0.0), text, fontsize=6, color="white",
            va="top" if inside else "bottom", ha="right" if right else "left", clip_on=True,
            bbox={"facecolor": COLOURS[state], "edgecolor": "none", "pad": 0.8, "alpha": 0.85})


def _gt_points(ax, gt_kpts: np.ndarray) -> None:
    for v, face in ((2, GT_EDGE), (1, "none")):
        pts = gt_kpts[gt_kpts[..., 2] == v]
        if len(pts):
            ax.scatter(pts[:, 0], pts[:, 1], s=22, facecolors=face, edgecolors=GT_EDGE if v == 1 else GT_DARK,
                       linewidths=0.9, zorder=3)


def _pose_panel(ax, p: PosePanel) -> None:
    _frame(ax, p.title, p.image)
    _gt_points(ax, p.gt_kpts)
    gt_index = list(p.gt_index) or [-1] * len(p.state)
    for i, st in enumerate(p.state):
        col = COLOURS[st]
        xy = np.asarray(p.kpts[i], dtype=np.float64)[:, :2]
        if i < len(p.boxes):
            x1, y1, x2, y2 = p.boxes[i]
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=col, linewidth=0.6,
                                   linestyle=":", zorder=2))
        g = gt_index[i]
        if g >= 0:
            gk = p.gt_kpts[g]
            for (x, y), (gx, gy, v) in zip(xy, gk):
                if v > 0:
                    ax.plot([x, gx], [y, gy], color=col, linewidth=0.7, zorder=4)
        ax.scatter(xy[:, 0], xy[:, 1], s=10, color=col, edgecolors="white", linewidths=0.4, zorder=5)
        if i < len(p.labels) and i < len(p.boxes):
            _label(ax, p.labels[i], p.boxes[i], st, (p.image.shape[1], p.image.shape[0]))


def _rotated_panel(ax, p: RotatedPanel) -> None:
    _frame(ax, p.title, p.image)
    for q in xywhr_corners(p.gt):
        ax.add_patch(Polygon(q, closed=True, fill=False, edgecolor=GT_EDGE, linewidth=1.0, zorder=3))
    for i, (q, st) in enumerate(zip(xywhr_corners(p.boxes), p.state)):
        ax.add_patch(Polygon(q, closed=True, fill=False, edgecolor=COLOURS[st], linewidth=1.1, zorder=4))
        if i < len(p.labels):
            (x1, y1), (x2, _) = q.min(0), q.max(0)
            _label(ax, p.labels[i], (x1, y1, x2, y1), st, (p.image.shape[1], p.image.shape[0]))


def _figure(panels: Sequence, draw, handles: list, title: str | None) -> bytes:
    if not panels:
        raise ValueError("Expected at least one panel, but got none")
    n = len(panels)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(3.1 * n, 3.6), dpi=DPI)
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, p in zip(axes, panels):
            draw(ax, p)
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
        if title:
            fig.suptitle(title)
        fig.subplots_adjust(left=0.01, right=0.99, top=0.86 if title else 0.92, bottom=0.1, wspace=0.04)
        return palette_png(to_png(fig))


def palette_png(png: bytes, colours: int = PALETTE) -> bytes:
    """``png`` with its colours reduced to ``colours`` (median cut, no dithering): photographs make a
    full-colour PNG three times larger than the report's other figures; a palette keeps the picture
    within their size at no visible cost to the drawing."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        q = im.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    q.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def pose_examples_figure(panels: Sequence[PosePanel], *, title: str | None = None) -> bytes:
    """A row of images: ground-truth keypoints in white (hollow where labelled but occluded), each kept box's
    keypoints in green (matched) or red (unmatched), a matched box's joined to its ground truth's. PNG bytes.

    Raises:
        ValueError: No panel.
    """
    dot = {"marker": "o", "linestyle": "none", "markersize": 5}
    handles = [Line2D([], [], color=COLOURS["matched"], label="keypoints, box matched (correct)", **dot),
               Line2D([], [], color=COLOURS["unmatched"], label="keypoints, box unmatched", **dot),
               Line2D([], [], markerfacecolor=GT_EDGE, markeredgecolor=GT_DARK, color="none",
                      label="ground truth (hollow: occluded)", **dot)]
    return _figure(panels, _pose_panel, handles, title)


def rotated_examples_figure(panels: Sequence[RotatedPanel], *, title: str | None = None) -> bytes:
    """A row of images: ground-truth rotated boxes outlined in white, each kept box's rotated box in green
    (matched) or red (unmatched). PNG bytes.

    Raises:
        ValueError: No panel.
    """
    handles = [Patch(facecolor="none", edgecolor=COLOURS["matched"], label="rotated box matched (correct)"),
               Patch(facecolor="none", edgecolor=COLOURS["unmatched"], label="rotated box unmatched"),
               Patch(facecolor="none", edgecolor="#444444", label="ground truth (white)")]
    return _figure(panels, _rotated_panel, handles, title)

"""The figure of a segment model's run: a few eval images with their ground-truth outlines and the kept
boxes' masks, matched and unmatched (the Matching section, :mod:`det_calib.report.matching_section`).

Drawn as the other figures are (:mod:`det_calib.report.plots`: an Agg canvas, the DejaVu fonts
matplotlib ships, Paul Tol's colour-blind-safe palette).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from matplotlib.patches import Patch, Rectangle

from det_calib.report.plots import COLOURS, CORRECT, GT_EDGE, OVER
from det_calib.report.task_plots import examples_figure

__all__ = ["MaskPanel", "composite", "mask_examples_figure"]

ALPHA = 0.5


@dataclass(frozen=True)
class MaskPanel:
    """One image of the figure.

    Attributes:
        title: The panel's title (the image's name and its counts).
        image: (H, W, 3) uint8 RGB.
        gt: (k, H, W) ground-truth masks (outlined).
        masks: (n, H, W) masks of the kept boxes.
        state: Per kept box ``"matched"`` or ``"unmatched"``.
        labels: Per kept box its text (class and conf), drawn at the top left of its box.
        corners: Per kept box ``(x1, y1)`` of its box, in pixels.
        gt_boxes: ``(x1, y1, x2, y2)`` of each ground truth without a mask (box-only labels), outlined dashed.
    """

    title: str
    image: np.ndarray
    gt: np.ndarray
    masks: np.ndarray
    state: Sequence[str]
    labels: Sequence[str] = field(default_factory=tuple)
    corners: Sequence[tuple[float, float]] = field(default_factory=tuple)
    gt_boxes: Sequence[tuple[float, float, float, float]] = field(default_factory=tuple)



def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64)


def composite(p: MaskPanel) -> np.ndarray:
    """The image dimmed, each kept box's mask blended in its state's colour (later boxes on top)."""
    out = p.image.astype(np.float64) * 0.75
    for m, st in zip(p.masks, p.state):
        on = m.astype(bool)
        out[on] = (1 - ALPHA) * out[on] + ALPHA * _rgb(COLOURS[st])
    return np.clip(out, 0, 255).astype(np.uint8)


def _panel(ax, p: MaskPanel) -> None:
    ax.imshow(composite(p), interpolation="nearest")
    for g in p.gt:
        if g.any():
            ax.contour(g.astype(np.float32), levels=[0.5], colors=GT_EDGE, linewidths=0.9)
    for x1, y1, x2, y2 in p.gt_boxes:
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=GT_EDGE, linewidth=0.9,
                               linestyle="--"))
    for m, st in zip(p.masks, p.state):
        if m.any():
            ax.contour(m.astype(np.float32), levels=[0.5], colors=COLOURS[st], linewidths=0.8)
    for text, (x, y), st in zip(p.labels, p.corners, p.state):
        ax.text(x, y, text, fontsize=6, color="white", va="bottom", ha="left",
                bbox={"facecolor": COLOURS[st], "edgecolor": "none", "pad": 0.8, "alpha": 0.85})
    ax.set_title(p.title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)


def mask_examples_figure(panels: Sequence[MaskPanel], *, title: str | None = None) -> bytes:
    """A row of images: ground-truth outlines in white (dashed boxes where a ground truth has no mask),
    each kept box's mask filled in green (matched) or red (unmatched). Returns PNG bytes.

    Raises:
        ValueError: No panel.
    """
    handles = [Patch(facecolor=CORRECT, label="mask matched (correct)"),
               Patch(facecolor=OVER, label="mask unmatched (incorrect)"),
               Patch(facecolor="none", edgecolor="#444444", label="ground-truth outline (white)")]
    return examples_figure(panels, _panel, handles, title, palette=False)

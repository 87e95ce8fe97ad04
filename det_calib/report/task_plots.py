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

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .plots import COLOURS, DPI, RC, to_png

__all__ = ["draw_frame", "draw_label", "examples_figure"]

_PALETTE = 256
"""Colours of the figures' PNG (:func:`palette_png`)."""
_DIM = 0.75
"""The image's brightness under the drawing."""
GT_DARK = "#222222"


def draw_frame(ax, title: str, image: np.ndarray) -> None:
    """The panel's image, dimmed, under its title, without ticks or spines."""
    ax.imshow((image.astype(np.float64) * _DIM).astype(np.uint8), interpolation="nearest")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    h, w = image.shape[:2]
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)


def draw_label(
    ax, text: str, box: tuple[float, float, float, float], state: str, size: tuple[int, int]
) -> None:
    """``text`` above the box ``(x1, y1, x2, y2)``: left-aligned at its left side, or right-aligned at its right
    side where the box lies in the image's right half; inside the box's top where there is no room above."""
    x1, y1, x2, _ = box
    w, h = size
    right = (x1 + x2) / 2 > w / 2
    inside = y1 < 0.06 * h
    ax.text(
        min(x2, w) if right else max(x1, 0.0),
        max(y1, 0.0),
        text,
        fontsize=6,
        color="white",
        va="top" if inside else "bottom",
        ha="right" if right else "left",
        clip_on=True,
        bbox={"facecolor": COLOURS[state], "edgecolor": "none", "pad": 0.8, "alpha": 0.85},
    )


def examples_figure(
    panels: Sequence, draw, handles: list, title: str | None, *, palette: bool = True
) -> bytes:
    """A row of ``panels``, each drawn by ``draw(ax, panel)``, with the legend ``handles``: PNG bytes (a palette
    PNG, :func:`palette_png`; full colour with ``palette=False``).

    Raises:
        ValueError: No panel.
    """
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
        fig.subplots_adjust(
            left=0.01, right=0.99, top=0.86 if title else 0.92, bottom=0.1, wspace=0.04
        )
        return to_png(fig, post=_palette_png if palette else None)


def _palette_png(png: bytes, colours: int = _PALETTE) -> bytes:
    """``png`` with its colours reduced to ``colours`` (median cut, no dithering): photographs make a
    full-colour PNG three times larger than the report's other figures; a palette keeps the picture
    within their size at no visible cost to the drawing."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        q = im.convert("RGB").quantize(
            colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    buf = io.BytesIO()
    q.save(buf, format="PNG", optimize=True)
    return buf.getvalue()

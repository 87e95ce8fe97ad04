"""The reliability figure by box size: one reliability diagram per size bin, raw above calibrated
(matplotlib, as every figure of the report, is imported only under ``report/``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .plots import RC, draw_reliability, empty_panel, reliability_legend, to_png

__all__ = ["size_reliability_grid"]


def size_reliability_grid(rows: Sequence[tuple[str, Sequence[tuple[str, Any | None]]]], *,
                          title: str | None = None) -> bytes:
    """Reliability diagrams in a grid: one row per set of scores (``(row label, panels)``), one
    column per size bin (``(panel title, bins)``; ``bins`` None or empty draws "no boxes"), each
    with its per-bin box count (log scale) below."""
    n_rows, n_cols = len(rows), max(len(p) for _, p in rows)
    width, height = 4.2 * n_cols, 5.2 * n_rows
    # the layout in inches (constrained layout takes about a second per figure of 12 axes): room left
    # of each panel for its tick labels and y labels, above it for its title (and the figure's), below
    # it for the count axes' labels, and at the bottom for the legend
    left, gap_w, right = 0.75, 0.8, 0.15
    top, gap_h, bottom, inner = 0.35 + (0.3 if title else 0.0), 0.85, 0.95, 0.08
    pw = (width - left - right - gap_w * (n_cols - 1)) / n_cols  # a panel's axes
    ph = (height - top - bottom - gap_h * (n_rows - 1)) / n_rows
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height))
        outer = fig.add_gridspec(n_rows, n_cols, left=left / width, right=1 - right / width,
                                 top=1 - top / height, bottom=bottom / height, wspace=gap_w / pw, hspace=gap_h / ph)
        cells = {(r, c): outer[r, c].subgridspec(2, 1, height_ratios=[3.2, 1], hspace=inner / ((ph - inner) / 2))
                 for r in range(n_rows) for c in range(n_cols)}
        for r, (label, panels) in enumerate(rows):
            for c, (ptitle, bins) in enumerate(panels):
                ax = fig.add_subplot(cells[r, c][0])
                axc = fig.add_subplot(cells[r, c][1], sharex=ax)
                ax.set_title(f"{label}: {ptitle}")
                if bins is None or not np.any(np.asarray(bins.count) > 0):
                    empty_panel(ax, "no boxes")
                    empty_panel(axc, "")
                    continue
                draw_reliability(ax, axc, bins, xlabel=f"{label.lower()} confidence")
        fig.legend(handles=reliability_legend(), loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=3,
                   frameon=False)
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold", y=1 - 0.1 / height, va="top")
        return to_png(fig)


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
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(4.2 * n_cols, 5.2 * n_rows), layout="constrained")
        gs = fig.add_gridspec(2 * n_rows, n_cols, height_ratios=[3.2, 1] * n_rows)
        for r, (label, panels) in enumerate(rows):
            for c, (ptitle, bins) in enumerate(panels):
                ax = fig.add_subplot(gs[2 * r, c])
                axc = fig.add_subplot(gs[2 * r + 1, c], sharex=ax)
                ax.set_title(f"{label}: {ptitle}")
                if bins is None or not np.any(np.asarray(bins.count) > 0):
                    empty_panel(ax, "no boxes")
                    empty_panel(axc, "")
                    continue
                draw_reliability(ax, axc, bins, xlabel=f"{label.lower()} confidence")
        fig.legend(handles=reliability_legend(), loc="outside lower center", ncols=3, frameon=False)
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold")
        return to_png(fig)

# Long file: every figure of the reports, in the one module behind which matplotlib is imported.
"""Figures of the calibration report, returned as PNG bytes.

matplotlib is imported only under :mod:`det_calib.report` (here and in
:mod:`det_calib.report.thresholds_section`, which shares this module's style and PNG writer). Neither
touches pyplot or the global backend (so importing it inside a notebook changes nothing there): every figure is a
:class:`matplotlib.figure.Figure` rendered by the Agg canvas directly, with the
DejaVu fonts matplotlib ships, so nothing depends on the display, the backend the caller
chose, or fonts installed on the machine.

Reliability inputs are duck-typed: any object with ``edges`` (m+1,), ``count`` (m,), ``conf``
(m,) and ``acc`` (m,) arrays, such as :class:`det_calib.metrics.ReliabilityBins`; empty bins
(count 0) are skipped.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator
from matplotlib.transforms import blended_transform_factory

from det_calib.data.box_view import kept_mask
from det_calib.metrics.calibration import reliability_bins

__all__ = [
    "ClassPanel",
    "ClassECE",
    "reliability_figure",
    "reliability_grid",
    "to_png",
    "confidence_histograms",
    "per_class_grid",
    "per_class_ece_chart",
    "threshold_figure",
    "compare_reliability",
    "compare_per_class_chart",
    "compare_class_heatmap",
    "HeatPanel",
]

# Paul Tol's colour-blind-safe "vibrant" palette.
_BEFORE = "#EE7733"  # raw scores
_AFTER = "#0077BB"  # calibrated scores
OVER = "#CC3311"  # gap where conf > accuracy (over-confident)
_UNDER = "#33BBEE"  # gap where conf < accuracy (under-confident)
CORRECT = "#009988"
_INCORRECT = "#BBBBBB"
COLOURS = {
    "matched": CORRECT,
    "unmatched": OVER,
}  # a kept box of the examples figures, by its state
GT_EDGE = "#FFFFFF"  # a ground truth's outline in the examples figures
_RUN_COLORS = ("#0077BB", "#EE3377")
_MANY_COLORS = (
    "#000000",
    "#0077BB",
    "#EE3377",
    "#009988",
    "#EE7733",
    "#33BBEE",
    "#CC3311",
    "#BBBBBB",
)

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    # the titles' height fixed (matplotlib's default: above any top ticks, found by measuring every
    # axis's tick labels while drawing: a fifth of the report's drawing): the panels have no top ticks,
    # so the pixels are the same
    "axes.titley": 1.0,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
}
DPI = 100


def _count(v: float, _pos: Any = None) -> str:
    """A box count as a plain tick label: 1, 10, 100, 1k, 10k, 1M (no mathtext)."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _log_counts(ax: Any) -> None:
    """Log y axis of box counts, labelled in plain text, ticked at the powers of ten only.

    matplotlib's default log labels are mathtext (``10^2``), which loads the mathtext fonts
    (STIX, Computer Modern) and, when its font cache misses them (a cache written by another
    environment's matplotlib), logs a "findfont" warning per font on every run. Its minor ticks
    (2-9 times each power of ten, unlabelled) would be about 25 tick objects per count axis, which
    the report has dozens of: creating and drawing them was about a sixth of the report's time.
    """
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_count))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def to_png(fig: Figure, *, post: Callable[[bytes], bytes] | None = None) -> bytes | PendingPNG:
    """The figure drawn once, as PNG bytes (then through ``post``, when given).

    A figure with a layout engine (constrained layout) is laid out here, then saved without it:
    ``savefig`` would otherwise draw every artist twice, once (to nothing) to lay the figure out and
    once to the canvas. The layout is the same computation at the same moment (before any artist
    is drawn), so the pixels are the same.

    Inside :func:`drawn_in_children`, the figure is drawn in a forked child instead and a
    :class:`PendingPNG` is returned (a page's :meth:`~det_calib.report.page.Page.write` takes its bytes)."""
    FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    if engine is not None:
        if fig.axes:  # as Figure.draw runs the engine
            try:
                engine.execute(fig)
            except ValueError:  # as Figure.draw: the figure is drawn as it is
                pass
        fig.set_layout_engine(None)
    if _WORKERS[0] > 0:
        return PendingPNG(fig, post)
    return _draw(fig, post)


def _draw(fig: Figure, post: Callable[[bytes], bytes] | None) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue() if post is None else post(buf.getvalue())


# figures drawn in forked children at once while `drawn_in_children` is active (0: drawn in the process)
_WORKERS = [0]
_RUNNING: deque[PendingPNG] = deque()


def figure_workers() -> int:
    """How many figures a report draws at once by default: one per core but one, at most 8, on Linux
    with at least 4 cores (a GPU machine's); else 0, every figure drawn in the run's process (on
    two cores the other one runs the verification's val pass, and the forks' CPU would be spent for
    no wall time)."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return 0
    cores = len(os.sched_getaffinity(0))
    return min(cores - 1, 8) if cores >= 4 else 0


@contextlib.contextmanager
def drawn_in_children(workers: int) -> Iterator[None]:
    """Within it, :func:`to_png` draws each figure in a forked child process, at most ``workers`` at
    once (0: in this process, as outside it), while the caller builds the next figures. A child is a
    fork of the process at the moment the figure is complete, so it draws the very objects, under the
    same settings, that this process would: the same bytes (tested). A child that fails leaves the
    figure to be drawn here."""
    before = _WORKERS[0]
    _WORKERS[0] = max(int(workers), 0)
    try:
        yield
    finally:
        _WORKERS[0] = before


class PendingPNG:
    """A figure being drawn in a forked child (:func:`drawn_in_children`): :meth:`result` gives its
    PNG bytes, waiting for the child (or drawing the figure here if the child failed)."""

    def __init__(self, fig: Figure, post: Callable[[bytes], bytes] | None) -> None:
        while len(_RUNNING) >= _WORKERS[0]:  # no more children at once than asked
            _RUNNING.popleft().result()
        self._fig, self._post, self._png = fig, post, None
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no process to spare (a process limit, no memory): drawn here
            os.close(read)
            os.close(write)
            self._png, self._fig, self._post = _draw(fig, post), None, None
            return
        if pid == 0:  # the child: draw, hand the bytes over, leave without running any exit handler
            code = 1
            try:
                os.close(read)
                data = memoryview(_draw(fig, post))
                while data:
                    data = data[os.write(write, data) :]
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._read = pid, read
        self._done = weakref.finalize(self, _reap, pid, read)  # a pending figure never asked for
        _RUNNING.append(self)

    def result(self) -> bytes:
        if self._png is None:
            self._done.detach()
            chunks = []
            while chunk := os.read(self._read, 1 << 16):
                chunks.append(chunk)
            os.close(self._read)
            _, status = os.waitpid(self._pid, 0)
            ok = os.waitstatus_to_exitcode(status) == 0 and chunks
            self._png = b"".join(chunks) if ok else _draw(self._fig, self._post)
            self._fig = self._post = None
            if self in _RUNNING:
                _RUNNING.remove(self)
        return self._png


def _reap(pid: int, read: int) -> None:
    os.close(read)  # the child's write ends with a broken pipe; it exits
    os.waitpid(pid, 0)


def _inches(
    width: float,
    height: float,
    *,
    title: bool,
    left: float = 0.75,
    right: float = 0.15,
    bottom: float = 0.6,
    gap: float = 0.0,
    n: int = 1,
) -> dict[str, float]:
    """Gridspec margins, in figure fractions, for ``n`` panels side by side in a ``width`` x ``height`` inch
    figure: ``left`` inches for the y tick labels and label, ``bottom`` for the x ones, ``gap`` between
    panels, room above for the panel titles (and the figure's ``title``, drawn by :func:`suptitle`).

    The report lays its figures out in inches: constrained layout costs about as much as drawing the figure."""
    top = 0.35 + (0.3 if title else 0.0)
    pw = (width - left - right - gap * (n - 1)) / n
    return {
        "left": left / width,
        "right": 1 - right / width,
        "top": 1 - top / height,
        "bottom": bottom / height,
        "wspace": gap / pw,
    }


def _suptitle(fig: Figure, title: str | None) -> None:
    """The figure's title, bold, at the top of the room :func:`_inches` leaves for it."""
    if title:
        fig.suptitle(
            title, fontsize=11, fontweight="bold", y=1 - 0.1 / fig.get_figheight(), va="top"
        )


def _nonempty(bins: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    edges = np.asarray(bins.edges, dtype=np.float64)
    count = np.asarray(bins.count, dtype=np.float64)
    conf = np.asarray(bins.conf, dtype=np.float64)
    acc = np.asarray(bins.acc, dtype=np.float64)
    m = count > 0
    return edges[:-1][m], np.diff(edges)[m], count[m], conf[m], acc[m]


def _empty_panel(ax: Any, text: str) -> None:
    """``text`` in the middle of ``ax``, without ticks. The ticks are hidden rather than removed: an axis
    shared with a drawn panel shares its tick locations, which must stay."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.tick_params(which="both", left=False, bottom=False, labelleft=False, labelbottom=False)


def _has_boxes(bins: Any | None) -> bool:
    return bins is not None and bool(np.any(np.asarray(bins.count) > 0))


def _count_top(bins: Any) -> float:
    """The top of a count axis (log scale) that shows ``bins``' largest bin."""
    count = np.asarray(bins.count, dtype=np.float64)
    return max(10.0, float(count.max()) * 2.5) if count.size else 10.0


def _bars(
    ax: Any,
    left: np.ndarray,
    height: np.ndarray,
    width: np.ndarray,
    bottom: np.ndarray | float = 0.0,
    **style: Any,
) -> None:
    """Bars from ``left`` (``width`` wide) up from ``bottom`` by ``height``, as one collection: what
    ``ax.bar(..., align="edge")`` draws, without a patch object per bar (the report draws hundreds)."""
    x0, x1 = left, left + width
    y0 = np.broadcast_to(np.asarray(bottom, dtype=np.float64), x0.shape)
    y1 = y0 + height
    verts = np.stack(
        [
            np.stack([x0, y0], -1),
            np.stack([x0, y1], -1),
            np.stack([x1, y1], -1),
            np.stack([x1, y0], -1),
        ],
        axis=1,
    )  # (bars, 4 corners, xy)
    ax.add_collection(PolyCollection(verts, **style), autolim=False)


def _draw_reliability(
    ax: Any,
    axc: Any,
    bins: Any,
    *,
    xlabel: str,
    top: float | None = None,
    ylabels: bool = True,
    unit: str = "boxes",
) -> None:
    """One reliability diagram in ``ax`` and its per-bin box count (log scale) in ``axc`` below.

    ``top``: the count axis's top (default: :func:`count_top` of ``bins``); ``ylabels`` False leaves
    the y axes unlabelled (a panel beside another that shares its y axes and labels them)."""
    left, width, count, conf, acc = _nonempty(bins)
    ax.plot([0, 1], [0, 1], ls="--", color="#444444", lw=1, zorder=3)
    _bars(ax, left, acc, width, facecolor="#DDDDDD", edgecolor="#555555", linewidths=0.6, zorder=1)
    gap = conf - acc
    over = gap > 0
    for mask, color in ((over, OVER), (~over, _UNDER)):
        if mask.any():
            _bars(
                ax,
                left[mask],
                gap[mask],
                width[mask],
                acc[mask],
                facecolor=color,
                alpha=0.45,
                edgecolor=color,
                linewidths=0.6,
                hatch="//",
                zorder=2,
            )
    ax.plot(conf, conf, ls="none", marker="_", ms=7, color="#222222", zorder=4)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("auto")
    ax.tick_params(labelbottom=False)
    _bars(axc, left, count, width, facecolor="#777777", edgecolor="white", linewidths=0.5)
    _log_counts(axc)
    axc.set_ylim(0.7, _count_top(bins) if top is None else top)
    axc.set_xlim(0, 1)
    axc.set_xlabel(xlabel)
    if ylabels:
        ax.set_ylabel("accuracy (fraction correct)")
        axc.set_ylabel(unit)
    else:
        ax.tick_params(labelleft=False)
        axc.tick_params(labelleft=False)


def _reliability_legend() -> list[Any]:
    return [
        Line2D([], [], ls="--", color="#444444", label="perfect calibration"),
        Patch(facecolor="#DDDDDD", edgecolor="#555555", label="accuracy per bin"),
        Patch(
            facecolor=OVER,
            alpha=0.45,
            hatch="//",
            edgecolor=OVER,
            label="gap: over-confident (conf > acc)",
        ),
        Patch(
            facecolor=_UNDER,
            alpha=0.45,
            hatch="//",
            edgecolor=_UNDER,
            label="gap: under-confident (conf < acc)",
        ),
        Line2D(
            [], [], ls="none", marker="_", ms=7, color="#222222", label="mean confidence in bin"
        ),
    ]


def reliability_figure(
    panels: Sequence[tuple[str, Any | None, str]], *, title: str | None = None, unit: str = "boxes"
) -> bytes:
    """Reliability diagrams side by side, each with its per-bin box count (log scale) below.

    Args:
        panels: ``(title, bins, xlabel)`` per panel; ``bins`` None draws "not available".
        title: Figure title.
        unit: What the bins count (the count axis's label): ``boxes``, or ``images`` for a classifier.
    """
    return reliability_grid([panels], title=title, panel_size=(4.6, 5.8), unit=unit)


def reliability_grid(
    rows: Sequence[Sequence[tuple[str, Any | None, str]]],
    *,
    title: str | None = None,
    shared: bool = False,
    panel_size: tuple[float, float] = (4.2, 5.2),
    missing: str = "not available",
    unit: str = "boxes",
) -> bytes:
    """Reliability diagrams in a grid of ``rows`` of panels ``(title, bins, xlabel)``, each with its
    per-bin box count (log scale) below; ``bins`` None draws ``missing``, bins without boxes "no boxes".

    ``shared``: the panels of a row share their y axes (accuracy 0-1, and one count scale, so that
    their counts compare at a glance), labelled on the row's first panel with boxes; otherwise each
    panel has its own count scale and labels. ``panel_size``: inches per panel (width, height).

    The layout is computed in inches (constrained layout costs as much as drawing the figure): room
    left of each panel for its tick labels and y labels, above it for its title (and the figure's),
    below it for the count axes' labels, and at the bottom for the legend.
    """
    with matplotlib.rc_context(RC):  # the ticks made while drawing read it too
        return to_png(
            _reliability_grid_figure(
                rows, title=title, shared=shared, panel_size=panel_size, missing=missing, unit=unit
            )
        )


def _reliability_grid_figure(
    rows: Sequence[Sequence[tuple[str, Any | None, str]]],
    *,
    title: str | None = None,
    shared: bool = False,
    panel_size: tuple[float, float] = (4.2, 5.2),
    missing: str = "not available",
    unit: str = "boxes",
) -> Figure:
    """The figure :func:`reliability_grid` draws (its arguments), not yet drawn (draw it under
    ``matplotlib.rc_context(RC)``: the ticks made while drawing read it)."""
    n_rows, n_cols = len(rows), max(len(p) for p in rows)
    width, height = panel_size[0] * n_cols, panel_size[1] * n_rows
    margins = _inches(width, height, title=bool(title), bottom=0.95, gap=0.8, n=n_cols)
    gap_h, inner = 0.85, 0.08  # inches between rows, and between a diagram and its count axes
    ph = (
        (margins["top"] - margins["bottom"]) * height - gap_h * (n_rows - 1)
    ) / n_rows  # a panel's height
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height))
        outer = fig.add_gridspec(n_rows, n_cols, hspace=gap_h / ph, **margins)
        for r, panels in enumerate(rows):
            drawn = [b for _, b, _ in panels if _has_boxes(b)]
            count_max = max((_count_top(b) for b in drawn), default=10.0) if shared else None
            first: tuple[Any, Any] | None = (
                None  # a shared row's labelled panel: the others share its y axes
            )
            for c, (ptitle, bins, xlabel) in enumerate(panels):
                cell = outer[r, c].subgridspec(
                    2, 1, height_ratios=[3.2, 1], hspace=inner / ((ph - inner) / 2)
                )
                if not _has_boxes(bins):  # its own axes, without ticks
                    ax = fig.add_subplot(cell[0])
                    ax.set_title(ptitle)
                    _empty_panel(ax, f"no {unit}" if bins is not None else missing)
                    _empty_panel(fig.add_subplot(cell[1], sharex=ax), "")
                    continue
                ax = fig.add_subplot(cell[0], sharey=None if first is None else first[0])
                axc = fig.add_subplot(
                    cell[1], sharex=ax, sharey=None if first is None else first[1]
                )
                ax.set_title(ptitle)
                _draw_reliability(
                    ax, axc, bins, xlabel=xlabel, top=count_max, ylabels=first is None, unit=unit
                )
                if shared:
                    first = first or (ax, axc)
        fig.legend(
            handles=_reliability_legend(),
            loc="lower center",
            bbox_to_anchor=(0.5, 0.0),
            ncols=3,
            frameon=False,
        )
        _suptitle(fig, title)
        return fig


def confidence_histograms(
    panels: Sequence[
        tuple[str, np.ndarray | None, np.ndarray | None, str, Sequence[tuple[float, str]]]
    ],
    *,
    n_bins: int = 50,
    title: str | None = None,
) -> bytes:
    """Histograms of the confidence of correct and incorrect boxes (log counts), one panel each.

    Args:
        panels: ``(title, conf, correct, xlabel, marks)``; ``marks`` are ``(threshold, label)``
            drawn as vertical lines. ``conf`` None draws "not available".
    """
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    with matplotlib.rc_context(RC):
        n = len(panels)
        fig = Figure(figsize=(4.6 * n, 3.6))
        axes = fig.subplots(
            1,
            n,
            squeeze=False,
            sharey=True,
            gridspec_kw=_inches(4.6 * n, 3.6, title=bool(title), gap=0.35, n=n),
        )[0]
        ymax = 1.0
        for ax, (ptitle, conf, correct, xlabel, marks) in zip(axes, panels):
            ax.set_title(ptitle)
            if conf is None or len(conf) == 0:
                _empty_panel(ax, "not available" if conf is None else "no boxes")
                continue
            correct = np.asarray(correct, dtype=bool)
            for mask, color, label in (
                (~correct, _INCORRECT, "incorrect"),
                (correct, CORRECT, "correct"),
            ):
                h, _ = np.histogram(conf[mask], bins=edges)
                ymax = max(ymax, float(h.max()) if h.size else 1.0)
                ax.stairs(
                    h,
                    edges,
                    fill=True,
                    color=color,
                    alpha=0.55 if mask is correct else 0.8,
                    label=f"{label} ({int(mask.sum()):,})",
                )
                ax.stairs(h, edges, color=color if color != _INCORRECT else "#777777", lw=1)
            for k, (x, label) in enumerate(marks):
                ax.axvline(
                    x,
                    color="#222222" if k == 0 else _AFTER,
                    ls="--" if k == 0 else ":",
                    lw=1.2,
                    label=label,
                )
            _log_counts(ax)
            ax.set_xlim(0, 1)
            ax.set_xlabel(xlabel)
            ax.legend(loc="upper right", frameon=False)
        axes[0].set_ylabel("boxes per bin (log)")
        for ax in axes:
            if ax.get_yscale() == "log":
                ax.set_ylim(0.7, ymax * 4)
        _suptitle(fig, title)
        return to_png(fig)


@dataclass(frozen=True)
class ClassPanel:
    """One small reliability diagram of the per-class grid."""

    name: str
    boxes: int
    few: bool
    before: Any | None
    after: Any | None


def _class_panel(
    ax: Any, it: ClassPanel, *, first_col: bool, last_row: bool, bottom_labels: bool
) -> None:
    """One class's small reliability diagram of :func:`per_class_grid`."""
    ax.plot([0, 1], [0, 1], ls="--", color="#888888", lw=0.8)
    for bins, color, marker in ((it.before, _BEFORE, "o"), (it.after, _AFTER, "s")):
        if bins is None:
            continue
        _, _, count, conf, acc = _nonempty(bins)
        if count.size:
            # marker area grows with the bin's box count: one-box bins stay small dots
            size = 4.0 + 40.0 * np.sqrt(count / max(float(count.max()), 1.0))
            ax.plot(conf, acc, color=color, lw=1.0, alpha=0.8)
            ax.scatter(conf, acc, s=size, color=color, marker=marker, zorder=3, linewidths=0)
    if it.few:
        ax.set_facecolor("#EEEEEE")
        ax.set_title(
            f"{it.name} (few boxes)\n{it.boxes:,} boxes",
            color="#666666",
            fontsize=8.5,
            fontstyle="italic",
        )
    else:
        ax.set_title(f"{it.name}\n{it.boxes:,} boxes", fontsize=8.5)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xticks([0, 0.5, 1])
    ax.set_yticks([0, 0.5, 1])
    ax.tick_params(labelleft=first_col, labelbottom=bottom_labels)
    if first_col:
        ax.set_ylabel("accuracy")
    if last_row:
        ax.set_xlabel("confidence")


def per_class_grid(
    items: Sequence[ClassPanel], *, title: str | None = None, ncols: int | None = None
) -> bytes:
    """A grid of small reliability diagrams, one per class, raw and calibrated on the same axes.

    Classes flagged ``few`` get a grey background and "few boxes" in their title; they are
    drawn, not hidden. The layout is computed in inches rather than by constrained layout, which
    is slow with the ~80 panels of a COCO model.
    """
    n = max(len(items), 1)
    ncols = ncols or min(n, 4 if n <= 8 else (6 if n <= 30 else 8))
    nrows = -(-n // ncols)
    aw, ah = 1.75, 1.55  # axes size, inches
    cw, ch = aw + 0.35, ah + 0.72  # cell size: room for tick labels and a two-line title
    left, right, top, bottom = 0.65, 0.2, 0.55 + (0.3 if title else 0.0), 0.95
    width = left + right + ncols * cw - (cw - aw)
    height = top + bottom + nrows * ch - (ch - ah)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height))
        gs = fig.add_gridspec(
            nrows,
            ncols,
            left=left / width,
            right=1 - right / width,
            top=1 - top / height,
            bottom=bottom / height,
            wspace=(cw - aw) / aw,
            hspace=(ch - ah) / ah,
        )
        for i in range(nrows * ncols):
            if i >= len(items):
                break
            r, c = divmod(i, ncols)
            ax = fig.add_subplot(gs[r, c])  # not shared: sharing 80 axes makes every update O(n)
            _class_panel(
                ax,
                items[i],
                first_col=c == 0,
                last_row=r == nrows - 1,
                bottom_labels=i + ncols >= len(items),
            )
        handles = [
            Line2D([], [], color=_BEFORE, marker="o", ms=4, label="raw"),
            Line2D([], [], color=_AFTER, marker="s", ms=4, label="calibrated"),
            Line2D([], [], color="#888888", ls="--", label="perfect calibration"),
            Patch(facecolor="#EEEEEE", edgecolor="#BBBBBB", label="few boxes"),
        ]
        fig.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=(0.5, 0.0),
            ncols=4,
            frameon=False,
            title="marker size: boxes in the bin",
            title_fontsize=8,
        )
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold", y=1 - 0.12 / height, va="top")
        return to_png(fig)


@dataclass(frozen=True)
class ClassECE:
    """One row of the per-class ECE ranking chart."""

    name: str
    boxes: int
    few: bool
    ece_before: float | None
    ece_after: float | None
    ci_before: tuple[float, float] | None = None
    ci_after: tuple[float, float] | None = None


def _xerr(values: Sequence[float | None], cis: Sequence[tuple[float, float] | None]) -> np.ndarray:
    err = np.zeros((2, len(values)))
    for i, (v, ci) in enumerate(zip(values, cis)):
        if v is None or ci is None or ci[0] is None or ci[1] is None:
            continue
        err[0, i] = max(v - ci[0], 0.0)
        err[1, i] = max(ci[1] - v, 0.0)
    return err


def per_class_ece_chart(
    rows: Sequence[ClassECE],
    *,
    xlabel: str,
    title: str | None = None,
    unit: str = "boxes",
    after_label: str = "calibrated",
) -> bytes:
    """Classes ranked by raw ECE (worst on top), raw and calibrated bars with interval whiskers.

    The box count (``unit``: what each row counts) is written at the right of each row; classes
    with few boxes are hatched, grey and labelled "(few boxes)". ``after_label``: the second bar."""
    # reliable classes first, worst on top; classes with few boxes below them, also by ECE
    rows = sorted(
        rows, key=lambda r: (r.few, -(r.ece_before if r.ece_before is not None else -1.0))
    )
    n = max(len(rows), 1)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.8, 0.42 * n + 1.6), layout="constrained")
        ax = fig.add_subplot()
        if not rows:
            _empty_panel(ax, "no classes")
            return to_png(fig)
        y = np.arange(len(rows))[::-1].astype(float)
        h = 0.38
        vb = [r.ece_before for r in rows]
        va = [r.ece_after for r in rows]
        for vals, cis, off, color, label in (
            (vb, [r.ci_before for r in rows], h / 2, _BEFORE, "raw"),
            (va, [r.ci_after for r in rows], -h / 2, _AFTER, after_label),
        ):
            v = np.array([np.nan if x is None else x for x in vals], dtype=float)
            bars = ax.barh(
                y + off,
                np.nan_to_num(v),
                height=h,
                color=color,
                label=label,
                xerr=_xerr(vals, cis),
                error_kw={"ecolor": "#333333", "elinewidth": 0.8, "capsize": 2},
            )
            for bar, r in zip(bars, rows):
                if r.few:
                    bar.set_alpha(0.35)
                    bar.set_edgecolor("#555555")
                    bar.set_hatch("///")
        nfew = sum(r.few for r in rows)
        if 0 < nfew < len(rows):
            ax.axhline(nfew - 0.5, color="#999999", lw=0.8, ls=":")
        ax.set_yticks(y)
        ax.set_yticklabels([f"{r.name} (few boxes)" if r.few else r.name for r in rows])
        for tick, r in zip(ax.get_yticklabels(), rows):
            if r.few:
                tick.set_color("#777777")
                tick.set_fontstyle("italic")
        for yi, r in zip(y, rows):
            if r.ece_before is None and r.ece_after is None:
                ax.text(
                    0.005,
                    yi,
                    "no boxes" if r.boxes == 0 else "n/a",
                    transform=blended_transform_factory(ax.transAxes, ax.transData),
                    ha="left",
                    va="center",
                    fontsize=8,
                    color="#777777",
                )
        tr = blended_transform_factory(ax.transAxes, ax.transData)
        ax.text(
            1.01,
            y[0] + 0.75,
            unit,
            transform=tr,
            ha="left",
            va="bottom",
            fontsize=8,
            fontweight="bold",
        )
        for yi, r in zip(y, rows):
            ax.text(
                1.01,
                yi,
                f"{r.boxes:,}",
                transform=tr,
                ha="left",
                va="center",
                fontsize=8,
                color="#777777" if r.few else "#222222",
            )
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlim(left=0)
        ax.set_xlabel(xlabel)
        handles = [
            Patch(color=_BEFORE, label="raw"),
            Patch(color=_AFTER, label=after_label),
            Line2D([], [], color="#333333", marker="|", ls="-", label="95% interval"),
        ]
        if any(r.few for r in rows):
            handles.append(
                Patch(
                    facecolor="#BBBBBB", edgecolor="#555555", hatch="///", label="few boxes (noisy)"
                )
            )
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold")
        return to_png(fig)


def threshold_figure(
    before: Any,
    after: Any | None,
    marks: Sequence[tuple[float, float | None]],
    *,
    title: str | None = None,
) -> bytes:
    """Precision and recall against the confidence threshold, raw and calibrated.

    Args:
        before: A :class:`det_calib.evaluation.kept_set.PRCurve` over raw confidence.
        after: The same over calibrated confidence, or None.
        marks: ``(raw threshold, equivalent calibrated threshold)`` pairs; the raw threshold is
            a dashed line, the calibrated threshold that keeps the same boxes a dotted one.
    """
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(9.6, 3.9))
        axes = fig.subplots(
            1,
            2,
            sharex=True,
            gridspec_kw=_inches(9.6, 3.9, title=bool(title), left=0.5, gap=0.5, n=2),
        )
        for ax, attr, name in ((axes[0], "precision", "Precision"), (axes[1], "recall", "Recall")):
            for curve, color, label in (
                (before, _BEFORE, "raw conf"),
                (after, _AFTER, "calibrated conf"),
            ):
                if curve is None:
                    continue
                yv = getattr(curve, attr)
                if np.all(np.isnan(yv)):
                    continue
                ax.plot(curve.thresholds, yv, color=color, lw=1.6, label=label)
            for k, (t, eq) in enumerate(marks):
                ax.axvline(
                    t, color="#222222", ls="--", lw=1, label=f"threshold {t:g}" if k == 0 else None
                )
                if eq is not None and after is not None:
                    ax.axvline(
                        eq,
                        color=_AFTER,
                        ls=":",
                        lw=1.4,
                        label=f"calibrated {eq:.3f} ≡ raw {t:g}" if k == 0 else None,
                    )
                points = [(before, _BEFORE, t, True), (after, _AFTER, t, True)]
                if eq is not None:
                    points.append((after, _AFTER, eq, False))  # hollow: same set as raw at t
                for curve, color, x, filled in points:
                    if curve is None:
                        continue
                    yv = float(np.interp(x, curve.thresholds, getattr(curve, attr)))
                    if np.isfinite(yv):
                        ax.plot(
                            [x],
                            [yv],
                            marker="o",
                            ms=6,
                            color=color,
                            zorder=5,
                            markerfacecolor=color if filled else "white",
                            markeredgewidth=1.5,
                        )
            ax.set_title(name)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("confidence threshold (box kept if conf > threshold)")
            ax.grid(alpha=0.3)
            if attr == "recall" and np.all(np.isnan(before.recall)):
                ax.text(
                    0.5,
                    0.5,
                    "recall not available\n(no ground-truth count)",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    color="#666666",
                )
        axes[0].legend(loc="lower right", frameon=True, framealpha=0.9)
        _suptitle(fig, title)
        return to_png(fig)


def compare_reliability(
    runs: Sequence[tuple[Any, ...]],
    *,
    xlabel_suffix: str = "",
    title: str | None = None,
    low: float = 0.0,
) -> bytes:
    """Reliability curves of several runs on the same axes: raw (left) and calibrated (right).

    Args:
        runs: ``(label, bins_raw, bins_calibrated)`` per run, optionally followed by two legend
            suffixes (raw, calibrated), e.g. the ECE of each.
        low: Where the confidence axis starts (an operating threshold: the bins of the boxes kept there).
    """
    colors = _RUN_COLORS if len(runs) <= len(_RUN_COLORS) else _MANY_COLORS
    with matplotlib.rc_context(RC):
        height = 5.8 + 0.25 * max(0, len(runs) - 2)
        fig = Figure(figsize=(9.6, height))
        gs = fig.add_gridspec(
            2,
            2,
            height_ratios=[3.2, 1],
            hspace=0.12,
            **_inches(9.6, height, title=bool(title), gap=0.8, n=2),
        )
        styles = [
            ("o", "-"),
            ("s", "--"),
            ("^", "-."),
            ("D", ":"),
            ("v", "-"),
            ("P", "--"),
            ("X", "-."),
            ("*", ":"),
        ]
        for col, (which, name) in enumerate(((1, "Raw confidence"), (2, "Calibrated confidence"))):
            ax = fig.add_subplot(gs[0, col])
            axc = fig.add_subplot(gs[1, col], sharex=ax)
            ax.plot([low, 1], [low, 1], ls="--", color="#888888", lw=1, label="perfect calibration")
            cmax = 10.0
            for k, run in enumerate(runs):
                label, bins = run[0], run[which]
                if len(run) > 3:
                    label = f"{label} ({run[which + 2]})"
                color = colors[k % len(colors)]
                marker, ls = styles[k % len(styles)]
                if bins is None:
                    continue
                left, width, count, conf, acc = _nonempty(bins)
                if not count.size:
                    continue
                ax.plot(conf, acc, color=color, marker=marker, ls=ls, ms=4, lw=1.5, label=label)
                edges = np.asarray(bins.edges, dtype=float)
                full = np.asarray(bins.count, dtype=float)
                axc.stairs(
                    np.where(full > 0, full, np.nan), edges, color=color, ls=ls, lw=1.4, label=label
                )
                cmax = max(cmax, float(full.max()))
            ax.set_title(name)
            ax.set_xlim(low, 1)
            ax.set_ylim(0, 1)
            ax.set_ylabel("accuracy (fraction correct)")
            ax.tick_params(labelbottom=False)
            ax.legend(loc="upper left", frameon=False, fontsize=8 if len(runs) <= 2 else 7)
            _log_counts(axc)
            axc.set_ylim(0.7, cmax * 2.5)
            axc.set_ylabel("boxes")
            axc.set_xlabel(f"{name.lower()}{xlabel_suffix}")
        _suptitle(fig, title)
        return to_png(fig)


def compare_per_class_chart(
    rows: Sequence[tuple[str, float | None, float | None, bool]],
    *,
    xlabel: str,
    title: str | None = None,
    footnote: str | None = None,
) -> bytes:
    """Per-class ECE difference between two runs, raw and calibrated.

    Args:
        rows: ``(class name, difference raw, difference calibrated, few boxes in either run)``;
            sorted by the calibrated difference, largest on top.
    """
    key = lambda r: r[2] if r[2] is not None else (r[1] if r[1] is not None else 0.0)  # noqa: E731
    rows = sorted(rows, key=key)
    n = max(len(rows), 1)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.8, 0.42 * n + 1.6), layout="constrained")
        ax = fig.add_subplot()
        if not rows:
            _empty_panel(ax, "no class present in both runs")
            return to_png(fig)
        y = np.arange(len(rows), dtype=float)
        h = 0.38
        for idx, off, color, label in (
            (1, h / 2, _BEFORE, "raw"),
            (2, -h / 2, _AFTER, "calibrated"),
        ):
            v = np.array([np.nan if r[idx] is None else r[idx] for r in rows], dtype=float)
            bars = ax.barh(y + off, np.nan_to_num(v), height=h, color=color, label=label)
            for bar, r in zip(bars, rows):
                if r[3]:
                    bar.set_alpha(0.35)
                    bar.set_edgecolor("#555555")
                    bar.set_hatch("///")
        ax.axvline(0, color="#222222", lw=0.8)
        ax.set_yticks(y)
        ax.set_yticklabels([f"{r[0]} (few boxes)" if r[3] else r[0] for r in rows])
        for tick, r in zip(ax.get_yticklabels(), rows):
            if r[3]:
                tick.set_color("#777777")
                tick.set_fontstyle("italic")
        lim = max(1e-3, float(np.nanmax(np.abs([[r[1] or 0.0, r[2] or 0.0] for r in rows]))) * 1.15)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        handles = [Patch(color=_BEFORE, label="raw"), Patch(color=_AFTER, label="calibrated")]
        if any(r[3] for r in rows):
            handles.append(
                Patch(
                    facecolor="#BBBBBB", edgecolor="#555555", hatch="///", label="few boxes (noisy)"
                )
            )
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        if footnote:
            ax.set_title(footnote, fontsize=8, color="#555555", loc="left")
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold")
        return to_png(fig)


@dataclass(frozen=True)
class HeatPanel:
    """One panel of :func:`compare_class_heatmap`: a value per class (rows) and run (columns).

    ``values[i][j]``: class i, run j (None: the run has no box of that class); ``sparse[i][j]``:
    the cell's estimate rests on few boxes (hatched, value greyed).
    """

    title: str
    values: Sequence[Sequence[float | None]]
    sparse: Sequence[Sequence[bool]]


def compare_class_heatmap(
    classes: Sequence[str],
    runs: Sequence[str],
    panels: Sequence[HeatPanel],
    *,
    label: str,
    title: str | None = None,
) -> bytes:
    """Classes x runs heatmaps (one per panel) on one colour scale, every cell annotated.

    Lower is better; a missing cell (no box of the class in that run) is grey and says so, a
    sparse one is hatched with its value in grey.
    """
    from matplotlib.colors import Normalize

    n_cls, n_run = max(len(classes), 1), max(len(runs), 1)
    vals = [
        np.array(
            [[np.nan if v is None else float(v) for v in row] for row in p.values], dtype=float
        ).reshape(len(classes), len(runs))
        for p in panels
    ]
    finite = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.array([])
    vmax = float(finite.max()) if finite.size else 1.0
    norm = Normalize(0.0, max(vmax, 1e-6))
    cmap = matplotlib.colormaps["YlOrRd"].with_extremes(bad="#DDDDDD")
    with matplotlib.rc_context(RC):
        fig = Figure(
            figsize=(1.6 + len(panels) * (1.3 + 1.25 * n_run), 1.6 + 0.42 * n_cls),
            layout="constrained",
        )
        axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
        image = None
        for ax, p, v in zip(axes, panels, vals):
            image = ax.imshow(np.ma.masked_invalid(v), cmap=cmap, norm=norm, aspect="auto")
            for i in range(len(classes)):
                for j in range(len(runs)):
                    few = bool(p.sparse[i][j])
                    if not np.isfinite(v[i, j]):
                        ax.text(
                            j, i, "absent", ha="center", va="center", fontsize=7, color="#666666"
                        )
                        continue
                    if few:
                        ax.add_patch(
                            Rectangle(
                                (j - 0.5, i - 0.5),
                                1,
                                1,
                                fill=False,
                                hatch="///",
                                edgecolor=(0.0, 0.0, 0.0, 0.18),
                                lw=0,
                            )
                        )
                    dark = norm(v[i, j]) > 0.6
                    ax.text(
                        j,
                        i,
                        f"{v[i, j]:.3f}" + ("\nfew boxes" if few else ""),
                        ha="center",
                        va="center",
                        fontsize=7.5,
                        color="#FFFFFF" if dark else "#222222",
                        fontstyle="italic" if few else "normal",
                        fontweight="normal" if few else "bold",
                    )
            ax.set_xticks(range(len(runs)), list(runs), rotation=20, ha="right")
            ax.set_yticks(range(len(classes)), list(classes))
            ax.set_title(p.title, fontsize=9)
            ax.spines[:].set_visible(False)
        if image is not None:
            fig.colorbar(image, ax=list(axes), shrink=0.8, label=label)
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold")
        return to_png(fig)


def operating_reliability(
    curves: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    low: float,
    n_bins: int,
    title: str | None = None,
) -> bytes:
    """Reliability curves of several calibrators over the operating range, on one plot.

    Args:
        curves: ``(label, conf, correct)`` per calibrator: the boxes it keeps (``conf > low``).
        low: The operating threshold (the x axis starts there).
        n_bins: Equal-width bins over ``(low, 1]``.
    """

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(8.4, 6.2))
        gs = fig.add_gridspec(
            2, 1, height_ratios=[3.2, 1], hspace=0.12, **_inches(8.4, 6.2, title=bool(title))
        )
        ax = fig.add_subplot(gs[0])
        axc = fig.add_subplot(gs[1], sharex=ax)
        ax.plot([low, 1], [low, 1], ls="--", color="#888888", lw=1, label="perfect calibration")
        styles = ["-", "--", "-.", ":"]
        markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
        cmax = 10.0
        for k, (label, conf, correct) in enumerate(curves):
            keep = kept_mask(conf, low)
            if not keep.any():
                continue
            # bins over (low, 1]: rescale to [0, 1] for the binning, back for the plot
            u = (conf[keep] - low) / (1 - low)
            bins = reliability_bins(np.clip(u, 0, 1), correct[keep], n_bins=n_bins)
            count = np.asarray(bins.count, dtype=float)
            m = count > 0
            x = low + (1 - low) * np.asarray(bins.conf, dtype=float)[m]
            color = _MANY_COLORS[k % len(_MANY_COLORS)]
            ax.plot(
                x,
                np.asarray(bins.acc, dtype=float)[m],
                color=color,
                ls=styles[k % len(styles)],
                marker=markers[k % len(markers)],
                ms=4,
                lw=1.5,
                label=label,
            )
            edges = low + (1 - low) * np.asarray(bins.edges, dtype=float)
            axc.stairs(
                np.where(count > 0, count, np.nan),
                edges,
                color=color,
                ls=styles[k % len(styles)],
                lw=1.3,
            )
            cmax = max(cmax, float(count.max()))
        ax.set_xlim(low, 1)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy (fraction correct)")
        ax.tick_params(labelbottom=False)
        ax.legend(loc="upper left", frameon=False, fontsize=8.5)
        _log_counts(axc)
        axc.set_ylim(0.7, cmax * 2.5)
        axc.set_ylabel("boxes")
        axc.set_xlabel(f"confidence of the boxes kept at conf {low:g}")
        _suptitle(fig, title)
        return to_png(fig)

"""The report's figure helpers: the bars drawn as one collection are matplotlib's bars, count axes are
ticked at the powers of ten, a shared row of reliability diagrams has one count scale and one labelled
panel, and an empty panel beside a drawn one leaves the drawn one's ticks alone."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from det_calib.metrics.calibration import reliability_bins
from det_calib.report import plots


def _bins(n: int, seed: int):
    rng = np.random.default_rng(seed)
    conf = rng.random(n)
    return reliability_bins(conf, rng.random(n) < conf, n_bins=10)


def test_bars_are_matplotlibs_bars():
    """Parity with ``Axes.bar(align="edge")``: the same rectangles, corner for corner."""
    rng = np.random.default_rng(0)
    left, width = np.sort(rng.random(7)), rng.uniform(0.01, 0.1, 7)
    height, bottom = rng.random(7), rng.random(7)
    fig = Figure()
    ax = fig.add_subplot()
    ref = ax.bar(left, height, width=width, bottom=bottom, align="edge")
    plots._bars(ax, left, height, width, bottom)
    mine = ax.collections[-1]
    assert len(mine.get_paths()) == 7
    for rect, path in zip(ref.patches, mine.get_paths()):
        (x0, y0), (x1, y1) = rect.get_bbox().get_points()
        v = path.vertices[:4]
        np.testing.assert_allclose(
            [v[:, 0].min(), v[:, 1].min(), v[:, 0].max(), v[:, 1].max()], [x0, y0, x1, y1]
        )


def test_count_axes_are_ticked_at_powers_of_ten_only():
    fig = Figure()
    ax = fig.add_subplot()
    plots._log_counts(ax)
    ax.set_ylim(0.7, 5000)
    assert list(ax.yaxis.get_minorticklocs()) == []
    major = [t for t in ax.yaxis.get_majorticklocs() if 0.7 <= t <= 5000]
    assert major == [1.0, 10.0, 100.0, 1000.0]
    assert [plots._count(t) for t in major] == ["1", "10", "100", "1k"]


def test_a_shared_row_has_one_count_scale_and_one_labelled_panel():
    """Three panels, the first without boxes: the two drawn share the count axis of the larger, and only
    the first drawn one carries the y labels; an unshared row gives each panel its own scale and labels."""
    small, large = _bins(40, 1), _bins(4000, 2)
    row = [("none", None, "conf"), ("small", small, "conf"), ("large", large, "conf")]
    with matplotlib.rc_context(plots.RC):
        fig = plots._reliability_grid_figure([row], shared=True, missing="no boxes")
    axes = fig.axes  # per panel: reliability axes, count axes
    counts = axes[3], axes[5]
    top = plots._count_top(large)
    assert [a.get_ylim()[1] for a in counts] == [top, top]
    assert [a.get_ylabel() for a in axes] == [
        "",
        "",
        "accuracy (fraction correct)",
        "boxes",
        "",
        "",
    ]
    assert axes[0].texts[0].get_text() == "no boxes"

    with matplotlib.rc_context(plots.RC):
        fig = plots._reliability_grid_figure([row[1:]])
    assert [fig.axes[k].get_ylim()[1] for k in (1, 3)] == [plots._count_top(small), top]
    assert [a.get_ylabel() for a in fig.axes] == ["accuracy (fraction correct)", "boxes"] * 2


def test_an_empty_panel_leaves_the_ticks_of_the_axis_it_shares():
    fig = Figure()
    a, b = fig.subplots(1, 2, sharey=True)
    a.plot([0, 1], [0, 1])
    plots._empty_panel(b, "not available")
    assert len(a.get_yticks()) > 0
    assert not any(t.get_visible() and t.tick1line.get_visible() for t in b.yaxis.get_major_ticks())

"""The Per-class calibration section: per-class reliability, ECE ranking and tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from det_calib.data.box_table import HEAD_LABEL
from det_calib.record.run_folder import HeadBoxes, Run
from det_calib.record.run_result import ClassResult

from . import plots
from .common import (
    CI_NOTE,
    MAX_ABSENT_NAMED,
    arrow,
    bins_of,
    ci_pair,
    ece_tag,
    f4,
    fci,
    fint,
    fthr,
    laece_tag,
    num,
    outside_ci,
    per_class_rows,
    shift_at,
)
from .context import ReportContext, Subject
from .document import Heading, Para, Table
from .page import Page

__all__ = ["class_id", "per_class_section"]


def per_class_section(page: Page, ctx: ReportContext) -> None:
    """The Per-class calibration section of a report (per head) or of a comparison (classes x runs)."""
    page.add(Heading(2, "Per-class calibration", "per-class"))
    if ctx.compared:
        _compare_per_class(page, list(ctx.subjects))
    else:
        _report_per_class(page, ctx.run, ctx.hbs)


def _rank_key(r: ClassResult) -> tuple[bool, float]:
    """Per-class order: classes with enough boxes first, then by raw ECE, worst first (no ECE last)."""
    v = num(r.ece_before)
    return bool(r.few_boxes), -(v if v is not None else -1.0)


def class_id(r: ClassResult) -> int:
    return -1 if r.cls is None else r.cls


def _report_per_class(b: Page, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    """Per head: the per-class reliability and ECE figures, and the per-class table."""
    tag = ece_tag(run)
    b.add(
        Para(
            f"Classes with fewer than {run.settings.min_class_boxes} boxes are flagged 'few boxes' "
            "(grey, "
            "hatched, italic): they are shown, but their curves and ECE are noisy.",
            "note",
        )
    )
    for h in run.heads:
        hb = hbs[h]
        rows = per_class_rows(run, h, hb)
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        if not rows:
            b.add(Para(f"Head {h}: no per-class results.", "note"))
            continue
        _per_class_figures(b, run, h, hb, rows, tag)
        rows_sorted = sorted(rows, key=_rank_key)
        table_rows = [
            [
                f"{r.name} ({class_id(r)})",
                fint(r.boxes),
                fint(r.correct),
                fint(r.n_gt),
                fci(r.ece_before, r.ece_before_ci),
                fci(r.ece_after, r.ece_after_ci),
                f4(r.laece_before),
                f4(r.laece_after),
                "few boxes" if r.few_boxes else "",
            ]
            for r in rows_sorted
        ]
        b.add(
            Table(
                [
                    "Class (id)",
                    "Boxes",
                    "Correct",
                    "GT",
                    "ECE raw [95% CI]",
                    "ECE calibrated [95% CI]",
                    "LaECE raw",
                    "LaECE calibrated",
                    "Note",
                ],
                table_rows,
                caption=f"Per-class calibration, head {h} (ECE: {tag}; LaECE: {laece_tag(run)}), sorted by "
                "raw ECE, classes with few boxes last",
                css="per-class",
                attrs={"data-head": h},
                row_css=["few" if r.few_boxes else "" for r in rows_sorted],
                row_attrs=[{"data-cls": str(class_id(r))} for r in rows_sorted],
            )
        )
        if any(
            outside_ci(r.ece_before, r.ece_before_ci) or outside_ci(r.ece_after, r.ece_after_ci)
            for r in rows
        ):
            b.add(Para(CI_NOTE, "note"))
        present = {class_id(r) for r in rows}
        absent = [f"{n} ({i})" for i, n in enumerate(run.class_names) if i not in present]
        if absent:
            more = len(absent) - MAX_ABSENT_NAMED
            b.add(
                Para(
                    f"No boxes of head {h} on split {hb.split} for: "
                    + ", ".join(absent[:MAX_ABSENT_NAMED])
                    + (f" and {more:,} more classes." if more > 0 else "."),
                    "note",
                )
            )


_MAX_CLASS_PANELS = 24
"""Classes the per-class figures draw at most: with more, the worst and the sparse ones (below);
every class stays in the per-class table."""


_MAX_SPARSE_PANELS = 8


def _shown_classes(
    rows: list[ClassResult], limit: int = _MAX_CLASS_PANELS
) -> tuple[list[ClassResult], str | None]:
    """The classes the per-class figures draw, and a note when not all: every class when there are
    at most ``limit``, in class order; else the worst (highest raw ECE) of the classes with enough
    boxes, then up to :data:`MAX_SPARSE_PANELS` of the classes with few boxes (those with the most
    ground truth: the objects the detector rarely finds), worst and sparse first."""
    if len(rows) <= limit:
        return sorted(rows, key=class_id), None
    enough = sorted((r for r in rows if not r.few_boxes), key=_rank_key)
    sparse = sorted((r for r in rows if r.few_boxes), key=lambda r: (-(r.n_gt or 0), class_id(r)))
    n_sparse = min(len(sparse), _MAX_SPARSE_PANELS, limit // 3)
    worst = enough[: limit - n_sparse]
    picked = worst + sparse[: limit - len(worst)]
    note = (
        f"{len(picked)} of {len(rows)} classes drawn: the {len(worst)} with the highest raw ECE of "
        "the classes "
        f"with enough boxes, then {len(picked) - len(worst)} with few boxes (most ground truth "
        "first); every "
        "class is in the table below."
    )
    return picked, note


def _per_class_figures(
    b: Page, run: Run, h: str, hb: HeadBoxes, rows: list[ClassResult], tag: str
) -> None:
    n_bins = run.settings.ece_bins
    panels = []
    after_all = hb.conf_after
    rows, note = _shown_classes(rows)
    if note:
        b.add(Para(note, "note"))
    order = np.argsort(hb.cls, kind="stable")  # each class's boxes in their order, found by slicing
    bounds = dict(zip(*np.unique(hb.cls[order], return_index=True)))
    counts = dict(zip(*np.unique(hb.cls, return_counts=True)))
    for r in rows:
        c = class_id(r)
        lo = int(bounds.get(c, 0))
        m = order[lo : lo + int(counts.get(c, 0))]
        before = bins_of(hb.conf[m], hb.correct[m], n_bins) if m.size else None
        after = (
            bins_of(after_all[m], hb.correct[m], n_bins)
            if (m.size and after_all is not None)
            else None
        )
        panels.append(
            plots.ClassPanel(
                str(r.name),
                r.boxes if r.boxes is not None else int(m.size),
                bool(r.few_boxes),
                before,
                after,
            )
        )
    png = plots.per_class_grid(panels, title=f"Reliability per class, head {h} ({tag})")
    b.fig(
        f"per_class_reliability_{h}",
        png,
        f"One reliability diagram per class, head {h}, split {hb.split}, {tag}: raw (orange) and "
        "calibrated "
        "(blue) accuracy against mean confidence per non-empty bin.",
        f"Per-class reliability diagrams of head {h}",
    )
    chart_rows = [
        plots.ClassECE(
            str(r.name),
            r.boxes or 0,
            bool(r.few_boxes),
            num(r.ece_before),
            num(r.ece_after),
            ci_pair(r.ece_before_ci),
            ci_pair(r.ece_after_ci),
        )
        for r in rows
    ]
    png = plots.per_class_ece_chart(
        chart_rows,
        xlabel=f"ECE ({tag}); whiskers: 95% image-bootstrap interval",
        title=f"Classes ranked by raw ECE, head {h}",
    )
    b.fig(
        f"per_class_ece_{h}",
        png,
        f"Per-class ECE ({tag}) of head {h}, worst raw class on top (classes with few boxes below "
        "the dotted "
        "line), with 95% intervals; box counts on the right.",
        f"Per-class ECE ranking of head {h}",
    )


def _diff(x: Any, y: Any) -> float | None:
    x, y = num(x), num(y)
    return None if x is None or y is None else y - x


def _kept_count(r: ClassResult, t: float | None) -> int | None:
    sh = shift_at(r.threshold_shift, t)
    return None if sh is None else sh.kept_after


def _compare_per_class(b: Page, cols: list[Subject]) -> None:
    """A classes x runs heatmap, with two runs the per-class differences, and the per-class tables."""
    per = [{str(r.name): r for r in per_class_rows(c.run, c.head, c.hb)} for c in cols]
    names = list(dict.fromkeys(n for p in per for n in p))
    everywhere = [n for n in names if all(n in p for p in per)]
    partial = [n for n in names if n not in everywhere]
    order = everywhere + partial
    letters = [c.letter for c in cols]
    min_boxes = [c.run.settings.min_class_boxes for c in cols]
    lows = {fthr(c.low) for c in cols}
    low_txt = f"conf {next(iter(lows))}" if len(lows) == 1 else "each run's lowest conf"
    kept_vals = [[num(p[n].kept_ece_after) if n in p else None for p in per] for n in order]
    kept_few = [
        [
            n in p and ((_kept_count(p[n], c.low) or 0) < mb or bool(p[n].few_boxes))
            for p, c, mb in zip(per, cols, min_boxes, strict=True)
        ]
        for n in order
    ]
    all_vals = [[num(p[n].ece_after) if n in p else None for p in per] for n in order]
    all_few = [[n in p and bool(p[n].few_boxes) for p in per] for n in order]
    png = plots.compare_class_heatmap(
        order,
        [c.name for c in cols],
        [
            plots.HeatPanel(f"Boxes kept at {low_txt}, calibrated", kept_vals, kept_few),
            plots.HeatPanel("All boxes, calibrated", all_vals, all_few),
        ],
        label="ECE (lower is better)",
        title="Per-class ECE, classes × runs",
    )
    b.fig(
        "compare_per_class_heatmap",
        png,
        f"Per-class ECE of every run under its deployed calibrator: of the boxes kept at {low_txt} "
        "(left) and of "
        "all boxes (right), classes matched by name; hatched and grey: fewer boxes than the run's "
        "minimum "
        f"({', '.join(str(m) for m in dict.fromkeys(min_boxes))}; the kept-set cells count the "
        "kept boxes), so "
        "the value is noisy; 'absent': the run has no box of that class. Values are "
        "calibration.json's.",
        "Heatmap of per-class ECE, classes by runs",
    )
    if len(cols) == 2:
        _difference_chart(b, cols, per, everywhere)
    _class_tables(b, cols, per, order, low_txt)
    if partial:
        b.add(
            Para(
                "Not in every run: "
                + "; ".join(
                    f"{n} (in {', '.join(x for x, p in zip(letters, per, strict=True) if n in p)})"
                    for n in partial
                )
                + ".",
                "note",
            )
        )


def _class_tables(
    b: Page, cols: list[Subject], per: list[dict[str, ClassResult]], order: list[str], low_txt: str
) -> None:
    """The per-class tables: all boxes (raw and calibrated ECE), then the boxes kept at the lowest conf."""
    letters = [c.letter for c in cols]
    prow, pcss = [], []
    empty = ClassResult()
    for n in order:
        rs = [p.get(n, empty) for p in per]
        have = [x for x, p in zip(letters, per, strict=True) if n in p]
        where = (
            ("both" if len(cols) == 2 else "all")
            if len(have) == len(cols)
            else (f"{have[0]} only" if len(have) == 1 else ", ".join(have))
        )
        few = any(bool(r.few_boxes) for r in rs)
        label = f"{n} (few boxes)" if few else n
        for x, r in zip(
            letters, rs, strict=True
        ):  # one row per class and run (stacked: fits a 1400 px window)
            prow.append(
                [
                    label,
                    where,
                    x,
                    fint(r.boxes),
                    fci(r.ece_before, r.ece_before_ci),
                    fci(r.ece_after, r.ece_after_ci),
                ]
            )
        if len(cols) == 2:
            prow.append(
                [
                    label,
                    where,
                    f"{letters[1]} − {letters[0]}",
                    "",
                    f4(_diff(rs[0].ece_before, rs[1].ece_before)),
                    f4(_diff(rs[0].ece_after, rs[1].ece_after)),
                ]
            )
        pcss += ["few" if few else ""] * (len(prow) - len(pcss))
    key = " · ".join(f"{x} = {c.title}" for x, c in zip(letters, cols, strict=True))
    diff = (
        f"; with two runs, each class's last row: {letters[1]} minus {letters[0]}"
        if len(cols) == 2
        else ""
    )
    b.add(
        Table(
            ["Class", "In", "Run", "Boxes", "ECE raw [95% CI]", "ECE calibrated [95% CI]"],
            prow,
            caption=f"Per-class ECE of all boxes ({ece_tag(cols[0].run)}) with 95% intervals; {key}{diff}",
            css="compare-per-class",
            row_css=pcss,
        )
    )
    krow = []
    for n in order:
        rs = [p.get(n) for p in per]
        row = [n]
        for r, c in zip(rs, cols, strict=True):
            sh = None if r is None else shift_at(r.threshold_shift, c.low)
            row += (
                ["absent", "n/a"]
                if r is None
                else [
                    "n/a" if sh is None else arrow(fint(sh.kept_before), fint(sh.kept_after)),
                    arrow(f4(r.kept_ece_before), f4(r.kept_ece_after)),
                ]
            )
        krow.append(row)
    heads = [
        h
        for x in letters
        for h in (f"Kept {x} raw → calibrated", f"Kept-set ECE {x} raw → calibrated")
    ]
    b.add(
        Table(
            ["Class", *heads],
            krow,
            caption=f"Per-class ECE of the boxes kept at {low_txt}; {key}",
            css="compare-per-class-kept",
        )
    )


def _difference_chart(
    b: Page, cols: list[Subject], per: list[dict[str, ClassResult]], both: list[str]
) -> None:
    (ca, cb), (pa, pb) = cols, per
    chart = [
        (
            n,
            _diff(pa[n].ece_before, pb[n].ece_before),
            _diff(pa[n].ece_after, pb[n].ece_after),
            bool(pa[n].few_boxes or pb[n].few_boxes),
        )
        for n in both
    ]
    only_a = [n for n in pa if n not in pb]
    only_b = [n for n in pb if n not in pa]
    foot = None
    if only_a or only_b:
        foot = f"Only in {ca.name}: {', '.join(only_a) or 'none'}. Only in {cb.name}: {', '.join(only_b) or 'none'}."
    png = plots.compare_per_class_chart(
        chart,
        xlabel=f"ECE({cb.name}) − ECE({ca.name})  (> 0: {cb.name} worse)",
        title=f"Per-class ECE difference, {cb.name} minus {ca.name}",
        footnote=foot,
    )
    b.fig(
        "compare_per_class_ece",
        png,
        f"Per-class ECE difference of all boxes ({ece_tag(ca.run)}), {cb.name} minus {ca.name}, "
        "raw and calibrated, "
        "classes matched by name; hatched: fewer boxes than the minimum in either run.",
        "Per-class ECE differences",
    )
    if foot:
        b.add(Para(foot, "note"))

"""The Reliability by size section: kept-set ECE and LaECE_0 per box size (COCO small / medium /
large and relative-area bins, :mod:`det_calib.metrics.size_bins`), raw and calibrated, with their
intervals (the run's ``by_size`` records), and a reliability figure per size."""

from __future__ import annotations

import numpy as np

from det_calib.data.box_table import HEAD_LABEL
from det_calib.data.box_view import usable_rows
from det_calib.metrics.size_bins import SIZE_BINS
from det_calib.record.run_folder import HeadBoxes, Run
from det_calib.record.size_record import SizeFigures

from .common import bins_of, ece_tag, fci, fint, fthr
from .context import ReportContext, Subject
from .document import Heading, Para, Table
from .page import Page
from .plots import reliability_grid

__all__ = ["bin_label", "size_section"]

_CORNERS = ["x1", "y1", "x2", "y2"]

_NOTE = (
    "A box's size is its own (predicted) box's area: COCO's bins in image pixels (small < 32², "
    "medium < 96², "
    "as pycocotools), and fixed bins of area over image area (< 0.3%, 0.3–3%, ≥ 3%: COCO's "
    "thresholds on its "
    "typical 640×480 image, which scale with the image where resolutions differ). Each bin's kept "
    "boxes are "
    "those above the lowest conf threshold under each set of scores. Intervals: 95% image "
    "bootstrap (ECE: "
    "bias-corrected percentile over the images with boxes in the bin; LaECE_0: estimate ± 1.96 SD, "
    "every "
    "box keeping its match among all boxes)."
)


def bin_label(f: SizeFigures) -> str:
    """A record's bin in words (``small (< 32²)``, ``relative area 0.3–3%``)."""
    b = next((b for b in SIZE_BINS if (b.scheme, b.name) == (f.scheme, f.bin)), None)
    return f"{f.scheme}: {f.bin}" if b is None else b.label


def size_section(page: Page, ctx: ReportContext) -> None:
    """Per head, the figures of each size bin and the reliability diagrams by COCO size (a report),
    or each compared run's calibrated figures by size (a comparison). Nothing for runs written
    before the records existed."""
    subjects = [s for s in ctx.subjects if s.result.by_size]
    if not subjects:
        return
    page.add(Heading(2, "Reliability by size", "by-size"))
    page.add(Para(_NOTE, "note"))
    if ctx.compared:
        _compare(page, subjects)
        return
    run = ctx.run
    for h in run.heads:
        figures = run.head(h).by_size
        if not figures:
            continue
        if len(run.heads) > 1:
            page.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        page.add(_table(run, h, figures))
        _figure(page, run, h, ctx.hbs[h])


def _table(run: Run, head: str, figures: list[SizeFigures]) -> Table:
    rows = [
        [
            bin_label(f),
            f"{fint(f.boxes_before)} → {fint(f.boxes_after)}",
            fci(f.ece_before, f.ece_before_ci),
            fci(f.ece_after, f.ece_after_ci),
            fci(f.laece0_before, f.laece0_before_ci),
            fci(f.laece0_after, f.laece0_after_ci),
        ]
        for f in figures
    ]
    thr = fthr(figures[0].conf)
    return Table(
        [
            "Size",
            "Kept boxes (raw → calibrated)",
            "ECE raw [95% CI]",
            "ECE calibrated [95% CI]",
            "LaECE_0 raw [95% CI]",
            "LaECE_0 calibrated [95% CI]",
        ],
        rows,
        caption=f"Reliability by size, head {head}, boxes kept at conf {thr} (ECE: {ece_tag(run)}; "
        f"LaECE_0: {run.settings.laece_bins} bins, any-IoU match, IoU target)",
        css="by-size",
        attrs={"data-head": head},
    )


def _figure(page: Page, run: Run, head: str, hb: HeadBoxes) -> None:
    """Reliability diagrams of the kept boxes of each COCO size, raw above calibrated (figure ``by_size_<head>``)."""
    if hb.calibrated is None or not set(_CORNERS) <= set(run.boxes.columns):
        return
    # the corners of the head's usable boxes alone (COCO's bins read the box's area in pixels): a
    # view of every column of a head's boxes is the run's largest working set at COCO scale
    corners = (
        usable_rows(run.boxes.lazy(), head=head, split=hb.split, columns=run.boxes.columns)
        .select(_CORNERS)
        .collect()
    )
    if corners.height != hb.n:
        return
    xyxy = corners.to_numpy().astype(np.float64, copy=False)
    del corners
    thr = min(run.settings.conf_thresholds)
    n_bins = run.settings.ece_bins
    coco = [b for b in SIZE_BINS if b.scheme == "coco"]
    in_bin = [b.mask(xyxy, None, None) for b in coco]
    del xyxy
    rows = []
    for label, conf in (("Raw", hb.conf), ("Calibrated", hb.conf_after)):
        panels = []
        for b, m in zip(coco, in_bin):
            keep = m & (conf > thr)
            panels.append(
                (
                    f"{label}: {b.label}, {int(keep.sum()):,} boxes",
                    bins_of(conf[keep], hb.correct[keep], n_bins) if keep.any() else None,
                    f"{label.lower()} confidence",
                )
            )
        rows.append(panels)
    # the panels of a row share their y axes: one count scale, so that the sizes' counts compare at a glance
    png = reliability_grid(
        rows,
        title=f"Reliability by size, head {head}, kept at conf {fthr(thr)} ({ece_tag(run)})",
        shared=True,
        missing="no boxes",
    )
    page.fig(
        f"by_size_{head}",
        png,
        f"Reliability of the boxes of head {head} kept at conf {fthr(thr)} on split {hb.split}, by "
        "COCO size "
        f"of the box (columns), raw (top) and calibrated (bottom); {ece_tag(run)}; below each, "
        "boxes per bin.",
        f"Reliability diagrams of head {head} by box size, raw and calibrated",
    )


def _compare(page: Page, subjects: list[Subject]) -> None:
    """One row per size bin and compared run (stacked: fits a 1400 px window): its calibrated kept-set ECE and
    LaECE_0 with intervals."""
    keys = [(f.scheme, f.bin) for f in subjects[0].result.by_size]
    by = [{(f.scheme, f.bin): f for f in s.result.by_size} for s in subjects]
    rows = []
    for k in keys:
        label = bin_label(by[0][k])
        for s, d in zip(subjects, by, strict=True):
            f = d.get(k)
            cells = (
                ["n/a", "n/a"]
                if f is None
                else [
                    f"{fci(f.ece_after, f.ece_after_ci)} ({fint(f.boxes_after)})",
                    fci(f.laece0_after, f.laece0_after_ci),
                ]
            )
            rows.append([label, s.letter or s.name, *cells])
    page.add(
        Table(
            ["Size", "Run", "ECE calibrated (boxes)", "LaECE_0 calibrated"],
            rows,
            caption="Calibrated kept-set ECE and LaECE_0 by size, 95% intervals in brackets "
            "(" + "; ".join(f"{s.letter}: {s.title}" for s in subjects) + ")",
            css="by-size",
        )
    )

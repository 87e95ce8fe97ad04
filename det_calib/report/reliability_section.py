"""The Reliability section: reliability diagrams, the calibration metrics and the confidence histograms."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from det_calib.data.box_table import HEAD_LABEL
from det_calib.metrics import calibration as metrics
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_folder import CALIBRATION_FILE, Run

from . import plots
from .common import (
    CI_NOTE,
    consistency_warnings,
    dece_tag,
    ece_tag,
    f3,
    f4,
    fci,
    fint,
    fthr,
    head_eval,
    laece_tag,
    num,
    op_at,
    outside_ci,
)
from .context import ReportContext, Subject
from .document import Heading, Para, Table
from .page import Page

_log = logging.getLogger(__name__)


__all__ = ["equivalents", "kept_reliability_figure", "reliability_section"]


def reliability_section(page: Page, ctx: ReportContext) -> None:
    """The Reliability section: per head, under a heading that says they are all boxes, its all-box
    reliability diagram, metrics and confidence histograms (a report; the kept set's diagram is in the
    summary), or every run's diagrams on the same axes (a comparison)."""
    page.add(Heading(2, "Reliability", "reliability"))
    if ctx.compared:
        _compare_reliability(page, list(ctx.subjects))
    else:
        _report_reliability(page, list(ctx.subjects))


def kept_reliability_figure(page: Page, s: Subject) -> bool:
    """The reliability diagram of the boxes one head keeps at the run's lowest conf, raw and calibrated
    (figure ``kept_reliability_<head>``), binned as the kept-set ECE is; False (nothing drawn) for a
    run without kept-set figures. The titles' ECE is calibration.json's (a mismatch with the boxes is
    logged)."""
    run, h, hb = s.run, s.head, s.hb
    ev = head_eval(run, h)
    if not ev.operating_before or not ev.operating_after or not hb.n:
        return False
    o0, o1 = ev.operating_before[0], ev.operating_after[0]
    t, nb = num(o0.conf), run.settings.ece_bins
    bins0, bins1 = (
        _kept_bins(hb.conf, hb.correct, t, nb),
        _kept_bins(hb.conf_after, hb.correct, t, nb),
    )
    _check_kept(s, o0, bins0, "raw")
    _check_kept(s, o1, bins1, "calibrated")
    tag = ece_tag(run)
    panels = [
        (f"Raw: {fint(o0.boxes)} boxes — ECE {f4(o0.ece)}", bins0, "raw confidence"),
        (
            f"Calibrated ({_cal_tag(run, h)}): {fint(o1.boxes)} boxes — ECE {f4(o1.ece)}",
            bins1,
            "calibrated confidence",
        ),
    ]
    png = plots.reliability_figure(
        panels,
        title=f"Reliability of the boxes kept at conf {fthr(t)}, head {h}, "
        f"split {hb.split} ({tag})",
    )
    page.fig(
        f"kept_reliability_{h}",
        png,
        f"Reliability of the boxes head {h} keeps at conf {fthr(t)} on split {hb.split} "
        "(crowd-matched boxes "
        "excluded): "
        + (
            "the kept set whose LaECE_0 the verdict reads (--target iou), its ECE against "
            "correctness drawn here, "
            if run.settings.target == "iou"
            else "the kept set whose ECE the verdict reads, "
        )
        + f"{tag}; its sampling floor "
        f"{fci(o1.ece_floor, o1.ece_floor_range)}. Left the boxes with raw conf above {fthr(t)}, "
        "right those "
        "with calibrated conf above it; below, boxes per bin (log scale). The diagrams of all "
        "boxes are in "
        "the Reliability section.",
        f"Reliability diagram of the boxes head {h} keeps at conf {fthr(t)}, raw and calibrated",
    )
    return True


def _all_box_reliability(page: Page, s: Subject) -> None:
    """The reliability diagram of one head, raw and calibrated, over all its eval boxes (figure
    ``reliability_<head>``)."""
    run, h, hb = s.run, s.head, s.hb
    ev = head_eval(run, h)
    before, after = s.bins
    tag = ece_tag(run)
    cal = _cal_tag(run, h)
    panels = [
        (f"Raw conf — all-box ECE {f4(ev.before.ece)}", before, "raw confidence"),
        (
            f"Calibrated conf ({cal}) — all-box ECE {f4(ev.after.ece)}",
            after,
            "calibrated confidence",
        ),
    ]
    png = plots.reliability_figure(
        panels, title=f"Reliability of all boxes, head {h}, split {hb.split} ({tag})"
    )
    page.fig(
        f"reliability_{h}",
        png,
        f"Reliability of head {h} on split {hb.split}: all {hb.n:,} boxes down to the capture "
        "floor "
        "(crowd-matched boxes excluded), so the ECE in the titles is the all-box ECE, not the "
        "kept set's; "
        f"{tag}. Left raw, right calibrated; below, boxes per bin (log scale).",
        f"Reliability diagram of all boxes of head {h}, raw and calibrated",
    )


def _metric_table(run: Run, head: str) -> Table:
    """The calibration metrics of one head: one row per metric (the display of each Scores field)."""
    ev = head_eval(run, head)
    tag, ltag = ece_tag(run), laece_tag(run)
    n_bins, iou = run.settings.ece_bins, run.settings.iou_match

    def row(name: str, key: str) -> list[str]:
        b, a = ev.before, ev.after
        if hasattr(b, f"{key}_ci"):
            return [
                name,
                fci(getattr(b, key), getattr(b, f"{key}_ci")),
                fci(getattr(a, key), getattr(a, f"{key}_ci")),
            ]
        return [name, f4(getattr(b, key)), f4(getattr(a, key))]

    rows = [
        row(f"ECE ({tag})", "ece"),
        row(f"ACE ({n_bins} equal-mass bins, IoU {iou:g})", "ace"),
        row(f"MCE ({tag})", "mce"),
        row(f"NLL (IoU {iou:g})", "nll"),
        row(f"Brier (IoU {iou:g})", "brier"),
        row(f"D-ECE ({dece_tag(run)}, IoU {iou:g})", "dece"),
        row(f"LaECE ({ltag})", "laece"),
        row(f"LaACE (loc. IoU {run.settings.loc_iou_match:g})", "laace"),
    ]
    for e in ev.thresholded:
        rows.append(
            [
                f"ECE of boxes above conf {fthr(e.conf)} ({tag})",
                f"{f4(e.ece_before)} ({fint(e.boxes_before)} boxes)",
                f"{f4(e.ece_after)} ({fint(e.boxes_after)} boxes)",
            ]
        )
    return Table(
        ["Metric (lower is better)", "Raw", "Calibrated"],
        rows,
        caption=f"Calibration metrics, head {head}, split {ev.split or 'n/a'}, "
        "95% intervals in brackets",
        css="metrics",
        attrs={"data-head": head},
    )


def _cal_tag(run: Run, head: str) -> str:
    """The head's calibrator in a figure title: ``T = 1.234``, ``platt map``, ``raw scores kept``."""
    rec = run.head(head).calibrator
    if rec is None or rec.method == "temperature":
        return f"T = {f3(None if rec is None else rec.temperature)}"
    return "raw scores kept" if rec.method == "none" else f"{rec.method} map"


def equivalents(run: Run, head: str) -> list[tuple[float, float | None]]:
    """Each ``--conf`` threshold with its equivalent calibrated threshold (None: there is none),
    as recorded in the run's threshold shift."""
    shifts = {sh.conf: sh.equivalent_conf for sh in run.head(head).threshold_shift}
    return [(x, shifts.get(x)) for x in run.settings.conf_thresholds]


def _report_reliability(b: Page, subjects: list[Subject]) -> None:
    """Per head, under a heading that says they are all boxes: the all-box reliability diagram, the
    calibration metrics, and the confidence histograms of correct and incorrect boxes."""
    run = subjects[0].run
    iou = run.settings.iou_match
    b.add(
        Para(
            "A reliability diagram bins boxes by confidence and compares each bin's mean "
            "confidence with the "
            "fraction of its boxes that are correct. On the diagonal the scores are calibrated; "
            "above it (cyan "
            "gap) they are under-confident, below it (red gap) over-confident. The figures here "
            "are of all "
            f"boxes, down to the capture floor (conf {fthr(run.settings.conf_floor)}): most of "
            "them have scores "
            "near 0 and are easy to calibrate, so their ECE is far smaller than the kept set's of "
            "the Summary. "
            "The count panels are on a log scale.",
            "note",
        )
    )
    all_boxes = f"all boxes, down to conf {fthr(run.settings.conf_floor)}"
    for subj in subjects:
        h, hb = subj.head, subj.hb
        ev = head_eval(run, h)
        b.add(
            Heading(
                3,
                f"Head {HEAD_LABEL.get(h, h)}: {all_boxes}"
                if len(run.heads) > 1
                else all_boxes[0].upper() + all_boxes[1:],
            )
        )
        _all_box_reliability(b, subj)
        cal = _cal_tag(run, h)
        b.add(_metric_table(run, h))
        if any(
            outside_ci(sc.ece, sc.ece_ci) or outside_ci(sc.laece, sc.laece_ci)
            for sc in (ev.before, ev.after)
        ):
            b.add(Para(CI_NOTE, "note"))
        thr = list(run.settings.conf_thresholds)
        marks_raw = [(x, f"conf {x:g}") for x in thr]
        marks_cal = list(marks_raw)
        for x, eq in equivalents(run, h):
            if eq is not None and eq != x:
                marks_cal.append((eq, f"{eq:.3f} ≡ raw {x:g}"))
        png = plots.confidence_histograms(
            [
                ("Raw conf", hb.conf, hb.correct, "raw confidence", marks_raw),
                (
                    f"Calibrated conf ({cal})",
                    hb.conf_after,
                    hb.correct,
                    "calibrated confidence",
                    marks_cal,
                ),
            ],
            title=f"Confidence of correct and incorrect boxes, head {h} (IoU {iou:g})",
        )
        b.fig(
            f"confidence_{h}",
            png,
            f"Confidence histograms of correct (IoU ≥ {iou:g}) and incorrect boxes of head {h}, "
            f"split {hb.split}, 50 bins, log counts. Dashed: the operating threshold; dotted: the "
            "calibrated "
            "threshold that keeps the same boxes.",
            f"Confidence histograms of head {h}",
        )


def _kept_bins(
    conf: np.ndarray | None, correct: np.ndarray, t: float | None, n_bins: int
) -> Any | None:
    """Reliability bins of the boxes kept at ``t`` (``conf > t``), binned as the kept-set ECE is."""
    if conf is None or t is None:
        return None
    keep = conf > t
    return (
        metrics.reliability_bins(conf[keep], correct[keep], n_bins=n_bins) if keep.any() else None
    )


def _compare_reliability(b: Page, cols: list[Subject]) -> None:
    """Every run's reliability on the same axes: the boxes kept at its lowest conf, then all boxes."""
    lows = [c.low for c in cols if c.low is not None]
    if lows:
        kept = []
        for c in cols:
            ev, nb = head_eval(c.run, c.head), c.run.settings.ece_bins
            o0, o1 = (
                (op_at(ev.operating_before, c.low), op_at(ev.operating_after, c.low))
                if c.low
                else (None,) * 2
            )
            bins0 = _kept_bins(c.hb.conf, c.hb.correct, c.low, nb)
            bins1 = _kept_bins(c.hb.conf_after, c.hb.correct, c.low, nb)
            _check_kept(c, o0, bins0, "raw")
            _check_kept(c, o1, bins1, "calibrated")
            kept.append(
                (
                    c.title,
                    bins0,
                    bins1,
                    *(
                        f"kept at {fthr(c.low)}" + ("" if o is None else f": ECE {f4(o.ece)}")
                        for o in (o0, o1)
                    ),
                )
            )
        low = min(lows)
        png = plots.compare_reliability(
            kept,
            low=low,
            xlabel_suffix=" (boxes kept at each run's lowest conf)",
            title="At the operating point: reliability of the kept boxes, every run",
        )
        b.fig(
            "compare_operating_reliability",
            png,
            "Reliability of the boxes each run keeps at its lowest conf threshold ("
            + ", ".join(f"{c.name}: {fthr(c.low)}" for c in cols if c.low is not None)
            + "), raw and calibrated, every run on the same axes: fraction correct against mean "
            "confidence per "
            "non-empty bin, the bins of the kept-set ECE; below, boxes per bin (log scale). The "
            "legend's ECE is "
            "calibration.json's.",
            "Reliability of the kept boxes of every run, raw and calibrated",
        )
    rel = []
    for c in cols:
        ev = head_eval(c.run, c.head)
        before, after = c.bins
        for w in consistency_warnings(c.run, c.head, c.hb, before, after):
            b.add(Para(f"{c.name}: {w}", "warn"))
        rel.append((c.title, before, after, f"ECE {f4(ev.before.ece)}", f"ECE {f4(ev.after.ece)}"))
    tag_txt = " / ".join(f"{c.name}: {ece_tag(c.run)}" for c in cols)
    png = plots.compare_reliability(
        rel, title="All boxes: reliability, raw and calibrated, every run on the same axes"
    )
    b.fig(
        "compare_reliability",
        png,
        "Reliability of all boxes of every run on its evaluation split, down to the capture floor "
        f"({tag_txt}): "
        "fraction correct against mean confidence per non-empty bin; below, boxes per bin (log "
        "scale).",
        "Reliability of all boxes of every run, raw and calibrated",
    )


def _check_kept(c: Subject, o: OperatingFigures | None, bins: Any, which: str) -> None:
    """Warn where the kept boxes of boxes.parquet do not give calibration.json's kept-set ECE."""
    want = None if o is None else num(o.ece)
    if bins is None or want is None:
        return
    got = bins.ece()
    if math.isfinite(got) and abs(got - want) > 1e-6 + 1e-4 * abs(want):
        _log.warning(
            "%s: the boxes kept at conf %g give ECE %s %.4f, %s says %.4f",
            c.name,
            o.conf,
            which,
            got,
            CALIBRATION_FILE,
            want,
        )

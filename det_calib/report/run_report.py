# Long file: the run report's page, its sections in page order (to become one module per section
# under the report's section contract, issue 38).
"""The calibration report of one run (``write_report``): report.html, report.md, figures/.

Numbers come from the run's :class:`~det_calib.record.run_result.RunResult` as the pipeline computed them;
curves (reliability bins, histograms, precision/recall against the threshold) are recomputed from
``boxes.parquet`` with :mod:`det_calib.metrics` and :mod:`det_calib.evaluation.kept_set`. Where a curve can
be summarised by a number the run also holds (the ECE), the two are compared and a mismatch is
reported in the page, since it means the two files do not come from the same run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_table import HEAD_LABEL
from det_calib.evaluation import kept_set as thresholds
from det_calib.evaluation.coco_engine import engine_label
from det_calib.evaluation.kept_set import ThresholdShift
from det_calib.record.run_folder import BOXES_FILE, CALIBRATION_FILE, HeadBoxes, Run, load_run
from det_calib.record.run_result import ClassResult

from . import calibrators_section as calibrators
from . import engines_section as engines
from . import plots
from .common import (
    CI_NOTE,
    _arrow,
    _bins,
    _Builder,
    _ci,
    _dece_tag,
    _ece_tag,
    _eval,
    _fmt_value,
    _heads_label,
    _laece_tag,
    _map_sentence,
    _num,
    _per_class_rows,
    _write_page,
    f3,
    f4,
    fci,
    fint,
    fthr,
    outside_ci,
    shift_sentence,
    verdict,
    verdict_sentence,
    where_sentence,
)
from .document import Bullets, Heading, Para, Table

log = logging.getLogger(__name__)

__all__ = ["write_report"]

SECTIONS = ("Summary", "Reliability", "Per-class calibration", "Threshold shift", "mAP verification", "Settings")
"""The sections of every report; "Conf thresholds" comes after "Threshold shift" when the run has thresholds.json."""

SETTING_HELP = {
    "schema_version": "layout version of calibration.json",
    "det_calib_version": "det_calib version that wrote the run",
    "created": "when calibration.json was written",
    "model": "detector weights",
    "data": "dataset YAML",
    "heads": "heads calibrated (nms: one-to-many + NMS; e2e: one-to-one)",
    "iou_match": "IoU a box needs with a same-class ground truth to count as correct (ECE, NLL, Brier, reliability)",
    "loc_iou_match": "IoU threshold of the matching used for the localisation-aware LaECE / LaACE",
    "fit_min_conf": "boxes below this raw conf are left out of the fit (null: --method auto chose per head)",
    "method": "calibration method asked for (auto: chosen per head by cross-validation)",
    "fit_range": "fit range asked for (all, operating, a raw conf floor; null: the default)",
    "criterion": "what --method auto minimises on held-out folds (above the lowest conf threshold)",
    "cv_folds": "folds of --method auto's cross-validation, grouped by image",
    "cv_repeats": "fold assignments of --method auto's cross-validation (each candidate scored on all of them)",
    "auto_per_class": "whether --method auto also considered the per-class maps (--per-class)",
    "conf_floor": "capture conf floor: boxes below it were never recorded",
    "max_det": "maximum detections per image",
    "imgsz": "inference image size",
    "conf_thresholds": "operating thresholds whose kept set is compared before/after",
    "ece_bins": "equal-width bins of ECE, MCE and reliability diagrams (equal-mass for ACE)",
    "laece_bins": "equal-width bins of LaECE",
    "min_class_boxes": "classes with fewer boxes are flagged 'few boxes'",
    "bootstrap": "image bootstrap of the 95% intervals",
    "splits": "fit split (temperature) and eval split (every metric and figure)",
    "nms_iou": "IoU of non-maximum suppression (nms head)",
    "dece_bins": "D-ECE bins: confidence, then normalised centre x, centre y, width, height",
    "coco_gt": "COCO JSON ground truth (instead of YOLO txt labels)",
    "seconds": "run time of the calibration job",
}
PER_HEAD_KEYS = {"temperature", "calibrators", "calibration_candidates", "detection_change", "fit", "eval",
                 "threshold_shift", "per_class", "ultralytics_val", "corrupt_images", "class_names", "gt_counts",
                 "temperature_fit"}


def _check_consistency(run: Run, head: str, hb: HeadBoxes, before: Any, after: Any) -> list[str]:
    """Warnings where boxes.parquet and calibration.json disagree."""
    ev = _eval(run, head)
    out = []
    for which, bins in (("before", before), ("after", after)):
        want = _num(ev.scores(which).ece)
        if bins is None or want is None:
            continue
        got = bins.ece()
        if math.isfinite(got) and abs(got - want) > 1e-6 + 1e-4 * abs(want):
            out.append(f"Head {head}: the boxes in {BOXES_FILE} give ECE {which} calibration {got:.4f}, "
                       f"{CALIBRATION_FILE} says {want:.4f}; the two files may not come from the same run.")
    if ev.boxes is not None and ev.boxes != hb.n:
        out.append(f"Head {head}: {BOXES_FILE} holds {hb.n:,} usable boxes on split {hb.split}, "
                   f"{CALIBRATION_FILE} says {ev.boxes:,}.")
    for w in out:
        log.warning(w)
    return out


def _kept_cell(shifts: list[ThresholdShift], x: float) -> str:
    e = next((s for s in shifts if _num(s.conf) == x), None)
    return _arrow(fint(e.kept_before), fint(e.kept_after)) if e else "n/a"


def _summary(b: _Builder, run: Run, hbs: dict[str, HeadBoxes], bins: dict[str, tuple[Any, Any]],
             warnings_: list[str]) -> None:
    st = run.settings
    tag = _ece_tag(run)
    b.add(Heading(2, "Summary", "summary"))
    # headline: one sentence per head
    for h in run.heads:
        prefix = f"{h}: " if len(run.heads) > 1 else ""
        b.add(Para(prefix + calibrators.lead(run, h), "lead"))
    op = calibrators.operating_table(run)
    if op is not None:
        b.add(op)
    for w in warnings_:
        b.add(Para(w, "warn"))
    ev_split = st.eval_split or "n/a"
    rows = [
        ["Model", run.result.model or "n/a"],
        ["Data", run.result.data or "n/a"],
        ["Heads", _heads_label(run)],
        ["Calibrator fitted on", f"split {st.fit_split or 'n/a'} (method {st.method})"],
        ["Evaluated on", f"split {ev_split} (every number and figure below)"],
        ["Classes", f"{len(run.class_names)}: " + ", ".join(run.class_names)],
    ]
    b.add(Table(["", ""], rows, css="run-info", align_numbers=False))
    thr = list(st.conf_thresholds)
    cols = ["Head", "Deployed", "T (fitted on every run)", "Raw scores", "All-box ECE raw [95% CI]",
            "All-box ECE calibrated [95% CI]",
            "mAP50-95 raw → calibrated"]
    cols += [f"Kept at conf {fthr(x)} raw → calibrated" for x in thr]
    trows = []
    for h in run.heads:
        t, ev = run.temperature(h), _eval(run, h)
        rec = run.head(h).calibrator
        tf = run.head(h).temperature_fit
        if t is None and tf is not None:
            t = tf.temperature
        shown = (rec.method if rec is not None else "temperature", f3(t), verdict(t))
        trows.append([h, *shown, fci(ev.before.ece, ev.before.ece_ci), fci(ev.after.ece, ev.after.ece_ci),
                      _arrow(f4(ev.map50_95_before), f4(ev.map50_95_after))]
                     + [_kept_cell(run.head(h).threshold_shift, x) for x in thr])
    b.add(Table(cols, trows, caption=f"At a glance (ECE: {tag}; T > 1: raw scores too extreme, T < 1: too timid)",
                css="summary"))
    for h in run.heads:
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        b.add(Bullets(_head_findings(run, h, hbs[h], bins[h][0], tag, ev_split)))


def _head_findings(run: Run, h: str, hb: HeadBoxes, before: Any, tag: str, ev_split: str) -> list[str]:
    """The summary's bullet points for one head."""
    hr = run.head(h)
    ev = _eval(run, h)
    method = hr.calibrator.method if hr.calibrator is not None else "temperature"
    items = [verdict_sentence(hr.temperature) if method == "temperature"
             else f"Calibrator: {calibrators.method_words(run, h)}."]
    items.append(
        f"ECE ({tag}) on all {fint(ev.boxes)} boxes of split {ev.split or ev_split} down to conf "
        f"{fthr(run.settings.conf_floor)}: {fci(ev.before.ece, ev.before.ece_ci)} → "
        f"{fci(ev.after.ece, ev.after.ece_ci)} (95% image-bootstrap intervals)."
    )
    for e in ev.thresholded:
        items.append(f"ECE of the boxes above conf {fthr(e.conf)} ({tag}): {f4(e.ece_before)} "
                     f"({fint(e.boxes_before)} boxes) → {f4(e.ece_after)} ({fint(e.boxes_after)} boxes).")
    if before is not None and hb.n:
        items.append(where_sentence(before, "Where (raw scores)"))
    pcs = [r for r in _per_class_rows(run, h, hb) if not r.few_boxes and _num(r.ece_before) is not None]
    pcs.sort(key=lambda r: -_num(r.ece_before))
    if pcs:
        worst = ", ".join(f"{r.name} {f4(r.ece_before)} → {f4(r.ece_after)}" for r in pcs[:3])
        items.append(f"Least calibrated classes (raw ECE, {tag}; classes with few boxes left out): {worst}.")
    items.append(_map_sentence(ev, method) if hr.eval is not None else "mAP: n/a.")
    items.extend(shift_sentence(e) for e in hr.threshold_shift)
    if not hr.threshold_shift:
        items.append("Kept-set shift: n/a.")
    return items


def _metric_table(run: Run, head: str) -> Table:
    """The calibration metrics of one head: one row per metric (the display of each Scores field)."""
    ev = _eval(run, head)
    tag, ltag = _ece_tag(run), _laece_tag(run)
    n_bins, iou = run.settings.ece_bins, run.settings.iou_match

    def row(name: str, key: str) -> list[str]:
        b, a = ev.before, ev.after
        if hasattr(b, f"{key}_ci"):
            return [name, fci(getattr(b, key), getattr(b, f"{key}_ci")), fci(getattr(a, key), getattr(a, f"{key}_ci"))]
        return [name, f4(getattr(b, key)), f4(getattr(a, key))]

    rows = [
        row(f"ECE ({tag})", "ece"),
        row(f"ACE ({n_bins} equal-mass bins, IoU {iou:g})", "ace"),
        row(f"MCE ({tag})", "mce"),
        row(f"NLL (IoU {iou:g})", "nll"),
        row(f"Brier (IoU {iou:g})", "brier"),
        row(f"D-ECE ({_dece_tag(run)}, IoU {iou:g})", "dece"),
        row(f"LaECE ({ltag})", "laece"),
        row(f"LaACE (loc. IoU {run.settings.loc_iou_match:g})", "laace"),
    ]
    for e in ev.thresholded:
        rows.append([f"ECE of boxes above conf {fthr(e.conf)} ({tag})",
                     f"{f4(e.ece_before)} ({fint(e.boxes_before)} boxes)",
                     f"{f4(e.ece_after)} ({fint(e.boxes_after)} boxes)"])
    return Table(["Metric (lower is better)", "Raw", "Calibrated"], rows,
                 caption=f"Calibration metrics, head {head}, split {ev.split or 'n/a'}, "
                         "95% intervals in brackets",
                 css="metrics", attrs={"data-head": head})


def _cal_tag(run: Run, head: str) -> str:
    """The head's calibrator in a figure title: ``T = 1.234``, ``platt map``, ``raw scores kept``."""
    rec = run.head(head).calibrator
    if rec is None or rec.method == "temperature":
        return f"T = {f3(None if rec is None else rec.temperature)}"
    return "raw scores kept" if rec.method == "none" else f"{rec.method} map"


def _equivalents(run: Run, head: str) -> list[tuple[float, float | None]]:
    """Each ``--conf`` threshold with its equivalent calibrated threshold (None: there is none),
    as recorded in the run's threshold shift."""
    shifts = {sh.conf: sh.equivalent_conf for sh in run.head(head).threshold_shift}
    return [(x, shifts.get(x)) for x in run.settings.conf_thresholds]


def _reliability(b: _Builder, run: Run, hbs: dict[str, HeadBoxes], bins: dict[str, tuple[Any, Any]]) -> None:
    tag = _ece_tag(run)
    iou = run.settings.iou_match
    b.add(Heading(2, "Reliability", "reliability"))
    b.add(Para("A reliability diagram bins boxes by confidence and compares each bin's mean confidence with the "
               "fraction of its boxes that are correct. On the diagonal the scores are calibrated; above it "
               "(cyan gap) they are under-confident, below it (red gap) over-confident. Most boxes of a detector "
               "have low scores, so the count panel is on a log scale.", "note"))
    for h in run.heads:
        hb = hbs[h]
        ev = _eval(run, h)
        before, after = bins[h]
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        cal = _cal_tag(run, h)
        panels = [
            (f"Raw conf — ECE {f4(ev.before.ece)}", before, "raw confidence"),
            (f"Calibrated conf ({cal}) — ECE {f4(ev.after.ece)}", after, "calibrated confidence"),
        ]
        png = plots.reliability_figure(panels, title=f"Reliability, head {h}, split {hb.split} ({tag})")
        b.fig(f"reliability_{h}", png,
              f"Reliability of head {h} on split {hb.split}: {hb.n:,} boxes (crowd-matched boxes excluded), "
              f"{tag}. Left raw, right calibrated; below, boxes per bin (log scale).",
              f"Reliability diagram of head {h}, raw and calibrated")
        b.add(_metric_table(run, h))
        if any(outside_ci(s.ece, s.ece_ci) or outside_ci(s.laece, s.laece_ci) for s in (ev.before, ev.after)):
            b.add(Para(CI_NOTE, "note"))
        thr = list(run.settings.conf_thresholds)
        marks_raw = [(x, f"conf {x:g}") for x in thr]
        marks_cal = list(marks_raw)
        for x, eq in _equivalents(run, h):
            if eq is not None and eq != x:
                marks_cal.append((eq, f"{eq:.3f} ≡ raw {x:g}"))
        png = plots.confidence_histograms(
            [("Raw conf", hb.conf, hb.correct, "raw confidence", marks_raw),
             (f"Calibrated conf ({cal})", hb.conf_after, hb.correct, "calibrated confidence", marks_cal)],
            title=f"Confidence of correct and incorrect boxes, head {h} (IoU {iou:g})",
        )
        b.fig(f"confidence_{h}", png,
              f"Confidence histograms of correct (IoU ≥ {iou:g}) and incorrect boxes of head {h}, "
              f"split {hb.split}, 50 bins, log counts. Dashed: the operating threshold; dotted: the calibrated "
              "threshold that keeps the same boxes.",
              f"Confidence histograms of head {h}")


def _rank_key(r: ClassResult) -> tuple[bool, float]:
    """Per-class order: classes with enough boxes first, then by raw ECE, worst first (no ECE last)."""
    v = _num(r.ece_before)
    return bool(r.few_boxes), -(v if v is not None else -1.0)


def _cls(r: ClassResult) -> int:
    return -1 if r.cls is None else r.cls


def _per_class(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    tag = _ece_tag(run)
    b.add(Heading(2, "Per-class calibration", "per-class"))
    b.add(Para(f"Classes with fewer than {run.settings.min_class_boxes} boxes are flagged 'few boxes' (grey, "
               "hatched, italic): they are shown, but their curves and ECE are noisy.", "note"))
    for h in run.heads:
        hb = hbs[h]
        rows = _per_class_rows(run, h, hb)
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        if not rows:
            b.add(Para(f"Head {h}: no per-class results.", "note"))
            continue
        _per_class_figures(b, run, h, hb, rows, tag)
        rows_sorted = sorted(rows, key=_rank_key)
        table_rows = [[f"{r.name} ({_cls(r)})", fint(r.boxes), fint(r.correct), fint(r.n_gt),
                       fci(r.ece_before, r.ece_before_ci), fci(r.ece_after, r.ece_after_ci),
                       f4(r.laece_before), f4(r.laece_after), "few boxes" if r.few_boxes else ""]
                      for r in rows_sorted]
        b.add(Table(["Class (id)", "Boxes", "Correct", "GT", "ECE raw [95% CI]", "ECE calibrated [95% CI]",
                     "LaECE raw", "LaECE calibrated", "Note"], table_rows,
                    caption=f"Per-class calibration, head {h} (ECE: {tag}; LaECE: {_laece_tag(run)}), sorted by "
                            "raw ECE, classes with few boxes last",
                    css="per-class", attrs={"data-head": h},
                    row_css=["few" if r.few_boxes else "" for r in rows_sorted],
                    row_attrs=[{"data-cls": str(_cls(r))} for r in rows_sorted]))
        if any(outside_ci(r.ece_before, r.ece_before_ci) or outside_ci(r.ece_after, r.ece_after_ci) for r in rows):
            b.add(Para(CI_NOTE, "note"))
        present = {_cls(r) for r in rows}
        absent = [f"{n} ({i})" for i, n in enumerate(run.class_names) if i not in present]
        if absent:
            more = len(absent) - MAX_ABSENT_NAMED
            b.add(Para(f"No boxes of head {h} on split {hb.split} for: " + ", ".join(absent[:MAX_ABSENT_NAMED])
                       + (f" and {more:,} more classes." if more > 0 else "."), "note"))


MAX_CLASS_PANELS = 24
"""Classes the per-class figures draw at most: with more, the worst and the sparse ones (below);
every class stays in the per-class table."""
MAX_SPARSE_PANELS = 8
MAX_ABSENT_NAMED = 30


def shown_classes(rows: list[ClassResult], limit: int = MAX_CLASS_PANELS) -> tuple[list[ClassResult], str | None]:
    """The classes the per-class figures draw, and a note when not all: every class when there are
    at most ``limit``, in class order; else the worst (highest raw ECE) of the classes with enough
    boxes, then up to :data:`MAX_SPARSE_PANELS` of the classes with few boxes (those with the most
    ground truth: the objects the detector rarely finds), worst and sparse first."""
    if len(rows) <= limit:
        return sorted(rows, key=_cls), None
    enough = sorted((r for r in rows if not r.few_boxes), key=_rank_key)
    sparse = sorted((r for r in rows if r.few_boxes), key=lambda r: (-(r.n_gt or 0), _cls(r)))
    n_sparse = min(len(sparse), MAX_SPARSE_PANELS, limit // 3)
    worst = enough[:limit - n_sparse]
    picked = worst + sparse[:limit - len(worst)]
    note = (f"{len(picked)} of {len(rows)} classes drawn: the {len(worst)} with the highest raw ECE of the classes "
            f"with enough boxes, then {len(picked) - len(worst)} with few boxes (most ground truth first); every "
            "class is in the table below.")
    return picked, note


def _per_class_figures(b: _Builder, run: Run, h: str, hb: HeadBoxes, rows: list[ClassResult], tag: str) -> None:
    n_bins = run.settings.ece_bins
    panels = []
    after_all = hb.conf_after
    rows, note = shown_classes(rows)
    if note:
        b.add(Para(note, "note"))
    order = np.argsort(hb.cls, kind="stable")  # each class's boxes in their order, found by slicing
    bounds = dict(zip(*np.unique(hb.cls[order], return_index=True)))
    counts = dict(zip(*np.unique(hb.cls, return_counts=True)))
    for r in rows:
        c = _cls(r)
        lo = int(bounds.get(c, 0))
        m = order[lo:lo + int(counts.get(c, 0))]
        before = _bins(hb.conf[m], hb.correct[m], n_bins) if m.size else None
        after = _bins(after_all[m], hb.correct[m], n_bins) if (m.size and after_all is not None) else None
        panels.append(plots.ClassPanel(str(r.name), r.boxes if r.boxes is not None else int(m.size),
                                       bool(r.few_boxes), before, after))
    png = plots.per_class_grid(panels, title=f"Reliability per class, head {h} ({tag})")
    b.fig(f"per_class_reliability_{h}", png,
          f"One reliability diagram per class, head {h}, split {hb.split}, {tag}: raw (orange) and calibrated "
          "(blue) accuracy against mean confidence per non-empty bin.",
          f"Per-class reliability diagrams of head {h}")
    chart_rows = [plots.ClassECE(str(r.name), r.boxes or 0, bool(r.few_boxes), _num(r.ece_before),
                                 _num(r.ece_after), _ci(r.ece_before_ci), _ci(r.ece_after_ci)) for r in rows]
    png = plots.per_class_ece_chart(chart_rows, xlabel=f"ECE ({tag}); whiskers: 95% image-bootstrap interval",
                                    title=f"Classes ranked by raw ECE, head {h}")
    b.fig(f"per_class_ece_{h}", png,
          f"Per-class ECE ({tag}) of head {h}, worst raw class on top (classes with few boxes below the dotted "
          "line), with 95% intervals; box counts on the right.",
          f"Per-class ECE ranking of head {h}")


def _shift_row(first: list[str], e: ThresholdShift) -> list[str]:
    return first + [
        fthr(e.conf), f3(e.equivalent_conf), fint(e.kept_before), fint(e.kept_after),
        f"{fint(e.added)} ({fint(e.added_correct)})",
        f"{fint(e.removed)} ({fint(e.removed_correct)})",
        f3(e.precision_before), f3(e.precision_after),
        f3(e.recall_before), f3(e.recall_after),
    ]


_SHIFT_COLS = ["Conf", "Equivalent calibrated conf", "Kept raw", "Kept calibrated", "Added (correct)",
               "Removed (correct)", "Precision raw", "Precision calibrated", "Recall raw", "Recall calibrated"]


def _threshold(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    iou = run.settings.iou_match
    b.add(Heading(2, "Threshold shift", "threshold-shift"))
    b.add(Para("Applying the same conf threshold to calibrated scores keeps a different set of boxes. A box is kept "
               "when conf > threshold, as in Ultralytics. The equivalent calibrated threshold, the calibrated "
               "conf of a box whose raw conf is t (sigmoid(logit(t) / T) for a temperature), keeps exactly the raw "
               "set (a per-class map has one per class: see the per-class table). With T > 1 and a threshold "
               "below 0.5, boxes are only added; with T < 1 only removed. "
               f"Correct means IoU ≥ {iou:g} with an unmatched ground truth.", "note"))
    for h in run.heads:
        hb = hbs[h]
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        n_gt = _eval(run, h).n_gt or 0
        grid = np.linspace(0.0, 1.0, 201)
        pb = thresholds.precision_recall_vs_conf(hb.conf, hb.correct, n_gt=n_gt, grid=grid)
        pa = (thresholds.precision_recall_vs_conf(hb.conf_after, hb.correct, n_gt=n_gt, grid=grid)
              if hb.conf_after is not None else None)
        marks = _equivalents(run, h)
        png = plots.threshold_figure(pb, pa, marks,
                                     title=f"Precision and recall against the threshold, head {h} (IoU {iou:g})")
        b.fig(f"threshold_{h}", png,
              f"Precision and recall of the boxes above each threshold, head {h}, split {hb.split} "
              f"({fint(n_gt)} ground-truth objects, IoU {iou:g}). Filled dots: the operating threshold applied to raw "
              "and to calibrated scores; hollow dot on the dotted line: the equivalent calibrated threshold, which "
              "keeps the raw set.",
              f"Precision and recall against conf threshold, head {h}")
        b.add(Table(_SHIFT_COLS, [_shift_row([], e) for e in run.head(h).threshold_shift],
                    caption=f"Kept set at each threshold, head {h}, all classes (correct: IoU ≥ {iou:g})",
                    css="threshold-shift",
                    attrs={"data-head": h}))
        prow = [_shift_row([f"{r.name} ({_cls(r)})"], e)
                for r in sorted(_per_class_rows(run, h, hb), key=_cls) for e in r.threshold_shift]
        if prow:
            b.add(Table(["Class (id)"] + _SHIFT_COLS, prow,
                        caption=f"Kept set per class, head {h} (correct: IoU ≥ {iou:g})",
                        css="threshold-shift-per-class", attrs={"data-head": h}))


def _tuned_thresholds(b: _Builder, run: Run, folder: Path) -> None:
    """The "Conf thresholds" section, when the run folder has a thresholds.json (det_calib.thresholds.per_class)."""
    from det_calib.errors import DetCalibError
    from det_calib.thresholds.per_class import THRESHOLDS_FILE, read_thresholds

    from .thresholds_section import thresholds_section

    if not (folder / THRESHOLDS_FILE).is_file():
        return
    try:
        doc = read_thresholds(folder / THRESHOLDS_FILE)
        heads = [h for h in run.heads if h in doc["heads"]]
        blocks, figures = thresholds_section(folder, doc=doc, heads=heads)
    except (DetCalibError, KeyError, TypeError) as e:  # an optional file: the rest of the report stands
        b.add(Heading(2, "Conf thresholds", "thresholds"),
              Para(f"{THRESHOLDS_FILE} could not be shown: {e}", "warn"))
        return
    for h in heads:
        t_doc, t_run = doc["heads"][h].get("score", {}).get("temperature"), run.temperature(h)
        if t_doc is not None and t_run is not None and not math.isclose(t_doc, t_run, rel_tol=1e-9):
            blocks.insert(1, Para(f"Head {h}: {THRESHOLDS_FILE} was tuned with T = {t_doc:.4f}, this run has "
                                  f"T = {t_run:.4f}; rerun `det-calib thresholds` on this run.", "warn"))
    b.add(*blocks)
    for name, png in figures.items():
        if name in b.figures:
            raise ValueError(f"duplicate figure name {name}")
        b.figures[name] = png


def _map(b: _Builder, run: Run) -> None:
    b.add(Heading(2, "mAP verification", "map-verification"))
    b.add(Para("One temperature, Platt, spline or isotonic map per head is a monotonic map of the scores: the "
               "ranking of boxes, and with it pycocotools mAP on the same boxes, cannot change. A per-class map "
               "(class-*) folded into the model can change which class wins a box before NMS and which boxes make the "
               "top max_det, so the calibrated model's own Ultralytics val mAP is measured and shown as it is; "
               "applied after the detector's selection (det_calib.apply_calibrator) it keeps the detections. "
               "Ultralytics val keeps the boxes above a conf floor: "
               "on calibrated scores the same floor keeps a slightly different set of low-score boxes, which can move "
               "its mAP a little; at the equivalent floor it keeps the original set.", "note"))
    rows = []
    for h in run.heads:
        ev = _eval(run, h)
        ident = ev.map_identical
        rows.append([h, f4(ev.map50_95_before), f4(ev.map50_95_after), f4(ev.map50_before),
                     f4(ev.map50_after), "yes" if ident is True else ("NO" if ident is False else "n/a")])
    b.add(Table(["Head", "mAP50-95 raw", "mAP50-95 calibrated", "mAP50 raw", "mAP50 calibrated", "Identical"], rows,
                caption=f"COCO mAP scored by {engine_label(_eval(run, run.heads[0]).map_engine)}, evaluation split",
                css="map-coco"))
    _ultralytics_val_table(b, run)
    _detection_change_table(b, run)


def _ultralytics_val_table(b: _Builder, run: Run) -> None:
    urows, notes = [], []
    for h in run.heads:
        uv = run.head(h).ultralytics_val
        if uv is None:
            urows.append([h, "n/a (not run)", "n/a", "n/a", "n/a", ""])
            continue
        if uv.completed is False:  # a timed-out pass: no mAP is shown, changed or unchanged
            urows.append([h, "not completed", "n/a", "n/a", "n/a", ""])
            notes.append(f"{h}: {uv.note}")
            continue
        same = uv.identical_at_equivalent_floor
        for key, label in (("original", "original weights"), ("calibrated", "calibrated, same conf floor"),
                           ("calibrated_equivalent_floor", "calibrated, equivalent floor")):
            e = getattr(uv, key)
            if e is None and key != "original":  # at val's floor: not repeated since issue 12 for a global map;
                continue  # at the equivalent floor: a per-class map has none
            mark = ""
            if key == "calibrated_equivalent_floor" and same is not None:
                mark = "yes" if same else "NO"
            urows.append([h, label, fthr(e and e.conf), f4(e and e.map50_95), f4(e and e.map50), mark])
        if uv.note:
            notes.append(f"{h}: {uv.note}")
    first = run.head(run.heads[0]).ultralytics_val
    b.add(Table(["Head", "Run", "Conf floor", "mAP50-95", "mAP50", "Same as original"], urows,
                caption="Ultralytics val" + (f", split {first.split}" if first is not None and first.split else ""),
                css="map-ultralytics"))
    for n in notes:
        b.add(Para(n, "note"))


def _detection_change_table(b: _Builder, run: Run) -> None:
    crows = []
    for h in run.heads:
        dc = run.head(h).detection_change
        if dc is None:
            continue
        crows.append([h, f"{fthr(dc.conf_floor)} / {fthr(dc.kept_conf)}", fint(dc.changed_class),
                      f"{fint(dc.only_posthoc)} / {fint(dc.kept_only_posthoc)}",
                      f"{fint(dc.only_folded)} / {fint(dc.kept_only_folded)}",
                      f"{f4(dc.map50_95_original)} / {f4(dc.map50_95_posthoc)} / {f4(dc.map50_95_folded)}",
                      "yes" if dc.identical else "NO"])
    if crows:
        b.add(Table(["Head", "Compared above conf (all / kept)", "Boxes that changed class",
                     "Lost (all / kept)", "New (all / kept)", "COCO mAP50-95 original / post-hoc / folded",
                     "Same detections"], crows,
                    caption="A per-class map folded into calibrated.pt against the same map applied after the "
                            "detector's selection, on the eval split (measured)", css="detection-change"))


def _settings_section(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    c = run.result.to_dict()
    iou = run.settings.iou_match
    b.add(Heading(2, "Settings", "settings"))
    rows = [[k, _fmt_value(v), SETTING_HELP.get(k, "")] for k, v in c.items() if k not in PER_HEAD_KEYS]
    rows.append(["temperature", _fmt_value(c.get("temperature")),
                 "fitted temperature per head: conf = sigmoid(logit / T)"])
    b.add(Table(["Setting", "Value", "Meaning"], rows, caption=f"Options recorded in {CALIBRATION_FILE}",
                css="settings", align_numbers=False))
    frows = []
    for h in run.heads:
        f = run.head(h).fit
        frows.append([h, "n/a"] + ["n/a"] * 6 if f is None else
                     [h, f.split or "n/a", fint(f.images), fint(f.boxes), fint(f.correct),
                      f4(f.nll_before), f4(f.nll_after), fint(f.iterations)])
    b.add(Table(["Head", "Split", "Images", "Boxes", "Correct", f"NLL at T = 1 (IoU {iou:g})",
                 "NLL at fitted T", "Iterations"], frows, caption="Temperature fit", css="fit"))
    erows = []
    for h in run.heads:
        ev = _eval(run, h)
        erows.append([h, ev.split or "n/a", fint(ev.images), fint(ev.boxes), fint(ev.correct), fint(ev.ignored),
                      fint(ev.n_gt), fint(ev.corrupt_images), f"{hbs[h].n:,}"])
    b.add(Table(["Head", "Split", "Images", "Boxes", "Correct", "Crowd-matched (excluded)", "GT objects",
                 "Corrupt images",
                 f"Boxes used for curves (from {BOXES_FILE})"], erows, caption="Evaluation data", css="eval-data"))
    corrupt = run.result.corrupt_images
    named = ", ".join(map(str, corrupt[:MAX_ABSENT_NAMED]))
    more = f" and {len(corrupt) - MAX_ABSENT_NAMED:,} more (all in calibration.json)" \
        if len(corrupt) > MAX_ABSENT_NAMED else ""
    b.add(Para("Corrupt images skipped: " + (named + more if corrupt else "none") + ".", "note"))
    bad = run.result.bad_labels
    if bad:
        b.add(Para(f"Malformed label files ({len(bad):,}; their images are among those skipped): "
                   + "; ".join(bad[:5]) + (f"; and {len(bad) - 5:,} more (bad_labels in calibration.json)"
                                           if len(bad) > 5 else "") + ".", "note"))
    b.add(Para(f"Curves are recomputed from {run.run_dir / BOXES_FILE} on the evaluation split, boxes matched to crowd "
               "annotations excluded; the numbers in the tables are those of "
               f"{run.run_dir / CALIBRATION_FILE}.", "note"))


def _eval_bins(run: Run) -> tuple[dict[str, HeadBoxes], dict[str, tuple], list[str]]:
    """Each head's eval boxes, their reliability bins (raw, calibrated) and the consistency warnings."""
    n_bins = run.settings.ece_bins
    hbs = {h: run.eval_boxes(h) for h in run.heads}
    bins = {h: (_bins(hb.conf, hb.correct, n_bins) if hb.n else None,
                _bins(hb.conf_after, hb.correct, n_bins) if hb.n else None) for h, hb in hbs.items()}
    warnings_ = []
    for h, hb in hbs.items():
        if hb.n == 0:
            warnings_.append(f"Head {h}: {BOXES_FILE} has no boxes on split {hb.split}; figures are empty.")
        warnings_ += _check_consistency(run, h, hb, *bins[h])
    return hbs, bins, warnings_


def write_report(
    run_dir: str | Path, *, out_dir: str | Path | None = None, shown_dir: str | Path | None = None,
    boxes: pl.DataFrame | None = None, reference: str | Path | None = None,
) -> dict[str, Path]:
    """Write the calibration report of a run: ``report.html``, ``report.md`` and ``figures/*.png``.

    ``report.html`` is self-contained (figures embedded as PNG data URIs, inline CSS, no script);
    ``report.md`` references the PNGs in ``figures/``. Sections: Summary, Reliability, Per-class
    calibration, Threshold shift, Conf thresholds (only when the run folder has a
    ``thresholds.json``), mAP verification, Settings. Every file is written atomically.

    Args:
        run_dir: A run directory holding ``calibration.json`` and ``boxes.parquet``.
        out_dir: Where to write; default ``run_dir``.
        shown_dir: The run folder named in the report's text, when ``run_dir`` is a staging
            folder that will be moved there; default ``run_dir``.
        boxes: The run's box table, when the caller holds it (the pipeline, which has just
            written it to ``boxes.parquet``): not read a second time into memory.
        reference: Another run (``RUN[:HEAD]``) of the detector, beside this one in the Engines section.

    Returns:
        Written paths: ``"html"`` (report.html), ``"md"`` (report.md) and, per figure, its path
        relative to ``out_dir`` (``"figures/<name>.png"``).

    Raises:
        InputError: ``run_dir`` or one of its files is missing or corrupt.

    Example:
        >>> paths = write_report("runs/calib")  # doctest: +SKIP
        >>> paths["html"]  # doctest: +SKIP
        PosixPath('runs/calib/report.html')
    """
    run = load_run(run_dir, boxes=boxes)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    if shown_dir is not None:
        run = dataclasses.replace(run, run_dir=Path(shown_dir))
    hbs, bins, warnings_ = _eval_bins(run)
    b = _Builder()
    _summary(b, run, hbs, bins, warnings_)
    calibrators.calibrators_section(b, run, hbs)
    engines.run_engines_section(b, run, reference, folder=run_dir)
    _reliability(b, run, hbs, bins)
    _per_class(b, run, hbs)
    _threshold(b, run, hbs)
    _tuned_thresholds(b, run, Path(run_dir))
    _map(b, run)
    if run.result.ensemble is not None:
        from .ensemble_section import ensemble_section

        ensemble_section(b, run, Path(run_dir))
    _settings_section(b, run, hbs)
    r = run.result
    title = f"Confidence calibration report: {Path(r.model or 'model').name}"
    subtitle = (f"Run {run.run_dir} · data {r.data or 'n/a'} · heads {', '.join(run.heads)} · "
                f"created {r.created or 'n/a'}")
    footer = f"det_calib {r.det_calib_version} · {CALIBRATION_FILE} + {BOXES_FILE} of {run.run_dir}"
    return _write_page(out, "report", title, b, subtitle=subtitle, footer=footer)

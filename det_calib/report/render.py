"""Build the calibration report (``write_report``) and the two-run comparison (``compare_runs``).

Numbers come from ``calibration.json`` as the pipeline computed them; curves (reliability bins,
histograms, precision/recall against the threshold) are recomputed from ``boxes.parquet`` with
:mod:`det_calib.metrics` and :mod:`det_calib.thresholds`. Where a curve can be summarised by a
number the JSON also holds (the ECE), the two are compared and a mismatch is reported in the page,
since it means the two files do not come from the same run.
"""

from __future__ import annotations

import dataclasses

import functools
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from det_calib import metrics, thresholds
from det_calib.errors import InputError
from det_calib.io import write_bytes, write_text

from . import plots
from .document import Block, Bullets, Fig, Heading, Para, Table, to_html, to_markdown
from .load import (
    BOXES_FILE,
    CALIBRATION_FILE,
    HeadBoxes,
    Run,
    get,
    load_run,
    parse_run_spec,
)

log = logging.getLogger(__name__)

__all__ = ["write_report", "compare_runs"]

FIGURES_DIR = "figures"
HEAD_LABEL = {"nms": "nms (one-to-many head + NMS)", "e2e": "e2e (one-to-one head, no NMS)"}
SECTIONS = ("Summary", "Reliability", "Per-class calibration", "Threshold shift", "mAP verification", "Settings")
# |log T| below this counts as "close to calibrated" (T within about 2% of 1).
_T_CLOSE = math.log(1.02)

SETTING_HELP = {
    "det_calib_version": "det_calib version that wrote the run",
    "created": "when calibration.json was written",
    "model": "detector weights",
    "data": "dataset YAML",
    "heads": "heads calibrated (nms: one-to-many + NMS; e2e: one-to-one)",
    "iou_match": "IoU a box needs with a same-class ground truth to count as correct (ECE, NLL, Brier, reliability)",
    "loc_iou_match": "IoU threshold of the matching used for the localisation-aware LaECE / LaACE",
    "fit_min_conf": "boxes below this raw conf are left out of the temperature fit",
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
_PER_HEAD_KEYS = {"temperature", "fit", "eval", "threshold_shift", "per_class", "ultralytics_val", "corrupt_images",
                  "class_names"}


# --------------------------------------------------------------------------------------------
# formatting


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def f4(x: Any) -> str:
    """Metric format: 4 decimals, or 3 significant digits below 0.01 (so 4e-05 is not "0.0000")."""
    v = _num(x)
    if v is None:
        return "n/a"
    return f"{v:.4f}" if v == 0 or abs(v) >= 0.01 else f"{v:.3g}"


def f3(x: Any) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{v:.3f}"


def fint(x: Any) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{int(round(v)):,}"


def fthr(x: Any) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{v:.4g}"


def _ci(ci: Any) -> tuple[float, float] | None:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = _num(ci[0]), _num(ci[1])
    return None if lo is None or hi is None else (lo, hi)


def outside_ci(v: Any, ci: Any) -> bool:
    """True when a value lies outside its own interval (bootstrap bias of binned metrics)."""
    c, x = _ci(ci), _num(v)
    return c is not None and x is not None and not (c[0] - 1e-12 <= x <= c[1] + 1e-12)


CI_NOTE = ("A value outside its own interval is not a bug: binned calibration errors are biased upward under "
           "resampling (sampling noise counts as miscalibration), so the percentile interval of a small ECE can sit "
           "entirely above it. Read such an interval as 'the error is at most about its upper end'.")


def fci(v: Any, ci: Any, fmt: Callable[[Any], str] = f4) -> str:
    c = _ci(ci)
    if _num(v) is None:
        return "n/a"
    return f"{fmt(v)} [{fmt(c[0])}, {fmt(c[1])}]" if c else fmt(v)


def _arrow(a: str, b: str) -> str:
    return f"{a} → {b}"


def _settings(run: Run) -> tuple[int, float, int, float]:
    c = run.calib
    n_bins = int(_num(c.get("ece_bins")) or 15)
    iou = _num(c.get("iou_match"))
    laece_bins = int(_num(c.get("laece_bins")) or 25)
    loc_iou = _num(c.get("loc_iou_match"))
    return n_bins, (0.5 if iou is None else iou), laece_bins, (0.1 if loc_iou is None else loc_iou)


def _ece_tag(run: Run) -> str:
    n_bins, iou, _, _ = _settings(run)
    return f"{n_bins} bins, IoU {iou:g}"


def _dece_tag(run: Run) -> str:
    bins = run.calib.get("dece_bins")
    if isinstance(bins, list) and bins and all(_num(b) is not None for b in bins):
        return "bins " + "×".join(str(int(b)) for b in bins) + " over conf, x, y, w, h"
    return "box position and size"


def _laece_tag(run: Run) -> str:
    _, _, lb, loc = _settings(run)
    return f"{lb} bins, loc. IoU {loc:g}"


def verdict(t: float | None) -> str:
    """A few words for a temperature: too extreme (T > 1), too timid (T < 1), close to calibrated.

    Not "over-/under-confident": T > 1 means the raw scores sit too close to 0 and 1, which is
    over-confidence for high scores but under-confidence for the many low ones (and vice versa).
    """
    if t is None:
        return "not fitted"
    if abs(math.log(t)) < _T_CLOSE:
        return "close to calibrated"
    return "too extreme" if t > 1 else "too timid"


def verdict_sentence(t: float | None) -> str:
    if t is None:
        return "No temperature was fitted for this head: only raw scores are shown."
    v = verdict(t)
    if v == "too extreme":
        return (f"T = {t:.3f} > 1: the raw scores are too extreme, too close to 0 and 1: over-confident where "
                "they are high, under-confident where they are low. Calibration pulls every score towards 0.5: "
                "scores above 0.5 go down, scores below 0.5 go up. The reliability diagram shows which end "
                "dominated the fit.")
    if v == "too timid":
        return (f"T = {t:.3f} < 1: the raw scores are too timid, too close to 0.5: under-confident where they "
                "are high, over-confident where they are low. Calibration pushes scores away from 0.5: scores "
                "above 0.5 go up, scores below 0.5 go down. The reliability diagram shows which end dominated "
                "the fit.")
    return f"T = {t:.3f} ≈ 1: the raw scores are already close to calibrated; calibration changes them little."


def where_sentence(bins: Any, label: str) -> str:
    """Where in the confidence range the calibration error comes from."""
    count = np.asarray(bins.count, dtype=float)
    m = count > 0
    if not m.any():
        return f"{label}: no boxes."
    gap = np.asarray(bins.conf)[m] - np.asarray(bins.acc)[m]
    contrib = count[m] / count.sum() * np.abs(gap)
    total = float(contrib.sum())
    if total <= 0:
        return f"{label}: every bin is on the diagonal."
    over = float(contrib[gap > 0].sum()) / total
    k = int(np.argmax(contrib))
    lo, hi = np.asarray(bins.edges)[:-1][m][k], np.asarray(bins.edges)[1:][m][k]
    kind = "over-confident" if gap[k] > 0 else "under-confident"
    return (f"{label}: {over:.0%} of the ECE comes from bins where confidence exceeds accuracy (over-confident), "
            f"{1 - over:.0%} from bins where it falls short (under-confident). The largest share is conf "
            f"{lo:.2f}–{hi:.2f}: {int(count[m][k]):,} boxes, mean conf {np.asarray(bins.conf)[m][k]:.3f}, "
            f"fraction correct {np.asarray(bins.acc)[m][k]:.3f} ({kind}).")


def shift_sentence(e: dict[str, Any]) -> str:
    """The kept-set change at one threshold, in one sentence."""
    t = fthr(e.get("conf"))
    kb, ka = e.get("kept_before"), e.get("kept_after")
    s = (f"At conf {t}, calibrated scores keep {fint(ka)} boxes instead of {fint(kb)}: "
         f"{fint(e.get('added'))} added ({fint(e.get('added_correct'))} of them correct), "
         f"{fint(e.get('removed'))} removed ({fint(e.get('removed_correct'))} correct); precision "
         f"{f3(e.get('precision_before'))} → {f3(e.get('precision_after'))}, recall {f3(e.get('recall_before'))} → "
         f"{f3(e.get('recall_after'))}")
    eq = _num(e.get("equivalent_conf"))
    if eq is not None:
        s += f"; calibrated conf {eq:.3f} keeps exactly the raw set"
    return s + "."


def _map_sentence(ev: dict[str, Any]) -> str:
    s = (f"pycocotools mAP50-95 {f4(ev.get('map50_95_before'))} → {f4(ev.get('map50_95_after'))}, "
         f"mAP50 {f4(ev.get('map50_before'))} → {f4(ev.get('map50_after'))}")
    ident = ev.get("map_identical")
    if ident is True:
        return s + ": identical, as it must be (one temperature keeps the ranking of boxes)."
    if ident is False:
        return s + ": NOT identical; one temperature cannot change the ranking, so check the run."
    return s + "."


# --------------------------------------------------------------------------------------------
# data helpers


def _bins(conf: np.ndarray | None, correct: np.ndarray, n_bins: int) -> Any | None:
    if conf is None:
        return None
    return metrics.reliability_bins(conf, correct, n_bins=n_bins)


def _per_class_rows(run: Run, head: str, hb: HeadBoxes) -> list[dict[str, Any]]:
    """Per-class entries of calibration.json, or entries built from the boxes when absent."""
    min_boxes = int(_num(run.calib.get("min_class_boxes")) or 50)
    rows = get(run.calib, "per_class", head)
    if isinstance(rows, list) and rows:
        out = []
        for r in rows:
            r = dict(r)
            c = int(r.get("cls", -1))
            r.setdefault("name", run.class_name(c))
            if r.get("few_boxes") is None:
                r["few_boxes"] = (_num(r.get("boxes")) or 0) < min_boxes
            out.append(r)
        return out
    out = []
    for c in np.unique(hb.cls):
        n = int((hb.cls == c).sum())
        out.append({"cls": int(c), "name": run.class_name(int(c)), "boxes": n,
                    "correct": int(hb.correct[hb.cls == c].sum()), "few_boxes": n < min_boxes})
    return out


def _check_consistency(run: Run, head: str, hb: HeadBoxes, before: Any, after: Any) -> list[str]:
    """Warnings where boxes.parquet and calibration.json disagree."""
    ev = get(run.calib, "eval", head, default={})
    out = []
    for which, bins in (("before", before), ("after", after)):
        want = _num(ev.get(f"ece_{which}"))
        if bins is None or want is None:
            continue
        got = bins.ece()
        if math.isfinite(got) and abs(got - want) > 1e-6 + 1e-4 * abs(want):
            out.append(f"Head {head}: the boxes in {BOXES_FILE} give ECE {which} calibration {got:.4f}, "
                       f"{CALIBRATION_FILE} says {want:.4f}; the two files may not come from the same run.")
    n_json = _num(ev.get("boxes"))
    if n_json is not None and int(n_json) != hb.n:
        out.append(f"Head {head}: {BOXES_FILE} holds {hb.n:,} usable boxes on split {hb.split}, "
                   f"{CALIBRATION_FILE} says {int(n_json):,}.")
    for w in out:
        log.warning(w)
    return out


def _heads_label(run: Run) -> str:
    return ", ".join(HEAD_LABEL.get(h, h) for h in run.heads)


# --------------------------------------------------------------------------------------------
# report sections


class _Builder:
    """Collects blocks and figures of one page."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.figures: dict[str, bytes] = {}

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)

    def fig(self, name: str, png: bytes, caption: str, alt: str) -> None:
        if name in self.figures:
            raise ValueError(f"duplicate figure name {name}")
        self.figures[name] = png
        self.blocks.append(Fig(name, png, caption, alt))


def _summary(b: _Builder, run: Run, hbs: dict[str, HeadBoxes], bins: dict[str, tuple[Any, Any]],
             warnings_: list[str]) -> None:
    c = run.calib
    tag = _ece_tag(run)
    b.add(Heading(2, "Summary", "summary"))
    # headline: one sentence per head
    for h in run.heads:
        t = run.temperature(h)
        ev = get(c, "eval", h, default={})
        prefix = f"{h}: " if len(run.heads) > 1 else ""
        b.add(Para(f"{prefix}{verdict(t).capitalize()}"
                   + (f" (T = {t:.3f})" if t is not None else "")
                   + f"; ECE ({tag}) {f4(ev.get('ece_before'))} → {f4(ev.get('ece_after'))}"
                   + (f"; mAP {'unchanged' if ev.get('map_identical') else 'CHANGED'}"
                      if ev.get("map_identical") is not None else "") + ".", "lead"))
    for w in warnings_:
        b.add(Para(w, "warn"))
    ev_split = get(c, "splits", "eval") or "n/a"
    fit_split = get(c, "splits", "fit") or "n/a"
    rows = [
        ["Model", str(c.get("model") or "n/a")],
        ["Data", str(c.get("data") or "n/a")],
        ["Heads", _heads_label(run)],
        ["Temperature fitted on", f"split {fit_split}"],
        ["Evaluated on", f"split {ev_split} (every number and figure below)"],
        ["Classes", f"{len(run.class_names)}: " + ", ".join(run.class_names)],
    ]
    b.add(Table(["", ""], rows, css="run-info", align_numbers=False))
    thr = [_num(x) for x in (c.get("conf_thresholds") or [])]
    thr = [x for x in thr if x is not None]
    cols = ["Head", "T", "Raw scores", "ECE raw [95% CI]", "ECE calibrated [95% CI]", "mAP50-95 raw → calibrated"]
    cols += [f"Kept at conf {fthr(x)} raw → calibrated" for x in thr]
    trows = []
    for h in run.heads:
        t = run.temperature(h)
        ev = get(c, "eval", h, default={})
        row = [h, f3(t), verdict(t), fci(ev.get("ece_before"), ev.get("ece_before_ci")),
               fci(ev.get("ece_after"), ev.get("ece_after_ci")),
               _arrow(f4(ev.get("map50_95_before")), f4(ev.get("map50_95_after")))]
        shifts = get(c, "threshold_shift", h, default=[])
        for x in thr:
            e = next((s for s in shifts if _num(s.get("conf")) == x), None)
            row.append(_arrow(fint(e.get("kept_before")), fint(e.get("kept_after"))) if e else "n/a")
        trows.append(row)
    b.add(Table(cols, trows, caption=f"At a glance (ECE: {tag}; T > 1: raw scores too extreme, T < 1: too timid)",
                css="summary"))
    for h in run.heads:
        t = run.temperature(h)
        ev = get(c, "eval", h, default={})
        items = [verdict_sentence(t)]
        items.append(
            f"ECE ({tag}) on all {fint(ev.get('boxes'))} boxes of split {ev.get('split') or ev_split} down to conf "
            f"{fthr(c.get('conf_floor'))}: {fci(ev.get('ece_before'), ev.get('ece_before_ci'))} → "
            f"{fci(ev.get('ece_after'), ev.get('ece_after_ci'))} (95% image-bootstrap intervals)."
        )
        for e in ev.get("thresholded") or []:
            items.append(f"ECE of the boxes above conf {fthr(e.get('conf'))} ({tag}): {f4(e.get('ece_before'))} "
                         f"({fint(e.get('boxes_before'))} boxes) → {f4(e.get('ece_after'))} "
                         f"({fint(e.get('boxes_after'))} boxes).")
        before, after = bins[h]
        if before is not None and hbs[h].n:
            items.append(where_sentence(before, "Where (raw scores)"))
        pcs = [r for r in _per_class_rows(run, h, hbs[h])
               if not r.get("few_boxes") and _num(r.get("ece_before")) is not None]
        pcs.sort(key=lambda r: -_num(r.get("ece_before")))
        if pcs:
            worst = ", ".join(f"{r['name']} {f4(r.get('ece_before'))} → {f4(r.get('ece_after'))}" for r in pcs[:3])
            items.append(f"Least calibrated classes (raw ECE, {tag}; classes with few boxes left out): {worst}.")
        items.append(_map_sentence(ev) if ev else "mAP: n/a.")
        shifts = get(c, "threshold_shift", h, default=[])
        items.extend(shift_sentence(e) for e in shifts)
        if not shifts:
            items.append("Kept-set shift: n/a.")
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        b.add(Bullets(items))


def _metric_table(run: Run, head: str) -> Table:
    ev = get(run.calib, "eval", head, default={})
    tag, ltag = _ece_tag(run), _laece_tag(run)
    n_bins, iou, _, _ = _settings(run)

    def row(name: str, key: str, ci: bool = False) -> list[str]:
        if ci:
            return [name, fci(ev.get(f"{key}_before"), ev.get(f"{key}_before_ci")),
                    fci(ev.get(f"{key}_after"), ev.get(f"{key}_after_ci"))]
        return [name, f4(ev.get(f"{key}_before")), f4(ev.get(f"{key}_after"))]

    rows = [
        row(f"ECE ({tag})", "ece", True),
        row(f"ACE ({n_bins} equal-mass bins, IoU {iou:g})", "ace"),
        row(f"MCE ({tag})", "mce"),
        row(f"NLL (IoU {iou:g})", "nll"),
        row(f"Brier (IoU {iou:g})", "brier"),
        row(f"D-ECE ({_dece_tag(run)}, IoU {iou:g})", "dece"),
        row(f"LaECE ({ltag})", "laece", True),
        row(f"LaACE (loc. IoU {_settings(run)[3]:g})", "laace"),
    ]
    for e in ev.get("thresholded") or []:
        rows.append([f"ECE of boxes above conf {fthr(e.get('conf'))} ({tag})",
                     f"{f4(e.get('ece_before'))} ({fint(e.get('boxes_before'))} boxes)",
                     f"{f4(e.get('ece_after'))} ({fint(e.get('boxes_after'))} boxes)"])
    return Table(["Metric (lower is better)", "Raw", "Calibrated"], rows,
                 caption=f"Calibration metrics, head {head}, split {ev.get('split') or 'n/a'}, "
                         "95% intervals in brackets",
                 css="metrics", attrs={"data-head": head})


def _reliability(b: _Builder, run: Run, hbs: dict[str, HeadBoxes], bins: dict[str, tuple[Any, Any]]) -> None:
    tag = _ece_tag(run)
    b.add(Heading(2, "Reliability", "reliability"))
    b.add(Para("A reliability diagram bins boxes by confidence and compares each bin's mean confidence with the "
               "fraction of its boxes that are correct. On the diagonal the scores are calibrated; above it "
               "(cyan gap) they are under-confident, below it (red gap) over-confident. Most boxes of a detector "
               "have low scores, so the count panel is on a log scale.", "note"))
    for h in run.heads:
        hb = hbs[h]
        ev = get(run.calib, "eval", h, default={})
        before, after = bins[h]
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        panels = [
            (f"Raw conf — ECE {f4(ev.get('ece_before'))}", before, "raw confidence"),
            (f"Calibrated conf (T = {f3(hb.temperature)}) — ECE {f4(ev.get('ece_after'))}", after,
             "calibrated confidence"),
        ]
        png = plots.reliability_figure(panels, title=f"Reliability, head {h}, split {hb.split} ({tag})")
        b.fig(f"reliability_{h}", png,
              f"Reliability of head {h} on split {hb.split}: {hb.n:,} boxes (crowd-matched boxes excluded), "
              f"{tag}. Left raw, right calibrated; below, boxes per bin (log scale).",
              f"Reliability diagram of head {h}, raw and calibrated")
        b.add(_metric_table(run, h))
        ev = get(run.calib, "eval", h, default={})
        if any(outside_ci(ev.get(f"{k}_{w}"), ev.get(f"{k}_{w}_ci"))
               for k in ("ece", "laece") for w in ("before", "after")):
            b.add(Para(CI_NOTE, "note"))
        thr = [x for x in (_num(v) for v in (run.calib.get("conf_thresholds") or [])) if x is not None]
        marks_raw = [(x, f"conf {x:g}") for x in thr]
        marks_cal = list(marks_raw)
        if hb.temperature is not None:
            for x in thr:
                if 0 < x < 1:
                    eq = thresholds.equivalent_threshold(x, hb.temperature)
                    marks_cal.append((eq, f"{eq:.3f} ≡ raw {x:g}"))
        png = plots.confidence_histograms(
            [("Raw conf", hb.conf, hb.correct, "raw confidence", marks_raw),
             (f"Calibrated conf (T = {f3(hb.temperature)})", hb.conf_after, hb.correct, "calibrated confidence",
              marks_cal)],
            title=f"Confidence of correct and incorrect boxes, head {h} (IoU {_settings(run)[1]:g})",
        )
        b.fig(f"confidence_{h}", png,
              f"Confidence histograms of correct (IoU ≥ {_settings(run)[1]:g}) and incorrect boxes of head {h}, "
              f"split {hb.split}, 50 bins, log counts. Dashed: the operating threshold; dotted: the calibrated "
              "threshold that keeps the same boxes.",
              f"Confidence histograms of head {h}")


def _rank_key(r: dict[str, Any]) -> tuple[bool, float]:
    """Per-class order: classes with enough boxes first, then by raw ECE, worst first (no ECE last)."""
    v = _num(r.get("ece_before"))
    return bool(r.get("few_boxes")), -(v if v is not None else -1.0)


def _per_class(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    tag = _ece_tag(run)
    n_bins = _settings(run)[0]
    min_boxes = int(_num(run.calib.get("min_class_boxes")) or 50)
    b.add(Heading(2, "Per-class calibration", "per-class"))
    b.add(Para(f"Classes with fewer than {min_boxes} boxes are flagged 'few boxes' (grey, hatched, italic): "
               "they are shown, but their curves and ECE are noisy.", "note"))
    for h in run.heads:
        hb = hbs[h]
        rows = _per_class_rows(run, h, hb)
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        if not rows:
            b.add(Para(f"Head {h}: no per-class results.", "note"))
            continue
        panels = []
        after_all = hb.conf_after
        for r in sorted(rows, key=lambda r: int(r.get("cls", -1))):
            m = hb.cls == int(r["cls"])
            before = _bins(hb.conf[m], hb.correct[m], n_bins) if m.any() else None
            after = _bins(after_all[m], hb.correct[m], n_bins) if (m.any() and after_all is not None) else None
            panels.append(plots.ClassPanel(str(r["name"]), int(_num(r.get("boxes")) or int(m.sum())),
                                           bool(r.get("few_boxes")), before, after))
        png = plots.per_class_grid(panels, title=f"Reliability per class, head {h} ({tag})")
        b.fig(f"per_class_reliability_{h}", png,
              f"One reliability diagram per class, head {h}, split {hb.split}, {tag}: raw (orange) and calibrated "
              "(blue) accuracy against mean confidence per non-empty bin.",
              f"Per-class reliability diagrams of head {h}")
        chart_rows = [plots.ClassECE(str(r["name"]), int(_num(r.get("boxes")) or 0), bool(r.get("few_boxes")),
                                     _num(r.get("ece_before")), _num(r.get("ece_after")),
                                     _ci(r.get("ece_before_ci")), _ci(r.get("ece_after_ci"))) for r in rows]
        png = plots.per_class_ece_chart(chart_rows, xlabel=f"ECE ({tag}); whiskers: 95% image-bootstrap interval",
                                        title=f"Classes ranked by raw ECE, head {h}")
        b.fig(f"per_class_ece_{h}", png,
              f"Per-class ECE ({tag}) of head {h}, worst raw class on top (classes with few boxes below the dotted "
              "line), with 95% intervals; box counts on the right.",
              f"Per-class ECE ranking of head {h}")
        rows_sorted = sorted(rows, key=_rank_key)
        table_rows = [[f"{r['name']} ({int(r['cls'])})", fint(r.get("boxes")), fint(r.get("correct")),
                       fint(r.get("n_gt")),
                       fci(r.get("ece_before"), r.get("ece_before_ci")), fci(r.get("ece_after"), r.get("ece_after_ci")),
                       f4(r.get("laece_before")), f4(r.get("laece_after")), "few boxes" if r.get("few_boxes") else ""]
                      for r in rows_sorted]
        b.add(Table(["Class (id)", "Boxes", "Correct", "GT", "ECE raw [95% CI]", "ECE calibrated [95% CI]",
                     "LaECE raw", "LaECE calibrated", "Note"], table_rows,
                    caption=f"Per-class calibration, head {h} (ECE: {tag}; LaECE: {_laece_tag(run)}), sorted by "
                            "raw ECE, classes with few boxes last",
                    css="per-class", attrs={"data-head": h},
                    row_css=["few" if r.get("few_boxes") else "" for r in rows_sorted],
                    row_attrs=[{"data-cls": str(int(r["cls"]))} for r in rows_sorted]))
        if any(outside_ci(r.get(f"ece_{w}"), r.get(f"ece_{w}_ci")) for r in rows for w in ("before", "after")):
            b.add(Para(CI_NOTE, "note"))
        present = {int(r["cls"]) for r in rows}
        absent = [f"{n} ({i})" for i, n in enumerate(run.class_names) if i not in present]
        if absent:
            b.add(Para(f"No boxes of head {h} on split {hb.split} for: " + ", ".join(absent) + ".", "note"))


def _shift_row(first: list[str], e: dict[str, Any]) -> list[str]:
    return first + [
        fthr(e.get("conf")), f3(e.get("equivalent_conf")), fint(e.get("kept_before")), fint(e.get("kept_after")),
        f"{fint(e.get('added'))} ({fint(e.get('added_correct'))})",
        f"{fint(e.get('removed'))} ({fint(e.get('removed_correct'))})",
        f3(e.get("precision_before")), f3(e.get("precision_after")),
        f3(e.get("recall_before")), f3(e.get("recall_after")),
    ]


_SHIFT_COLS = ["Conf", "Equivalent calibrated conf", "Kept raw", "Kept calibrated", "Added (correct)",
               "Removed (correct)", "Precision raw", "Precision calibrated", "Recall raw", "Recall calibrated"]


def _threshold(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    iou = _settings(run)[1]
    b.add(Heading(2, "Threshold shift", "threshold-shift"))
    b.add(Para("Applying the same conf threshold to calibrated scores keeps a different set of boxes. A box is kept "
               "when conf > threshold, as in Ultralytics. The equivalent calibrated threshold "
               "sigmoid(logit(t) / T) keeps exactly the raw set. With T > 1 and a threshold below 0.5, boxes are only "
               f"added; with T < 1 only removed. Correct means IoU ≥ {iou:g} with an unmatched ground truth.", "note"))
    thr = [x for x in (_num(v) for v in (run.calib.get("conf_thresholds") or [])) if x is not None]
    for h in run.heads:
        hb = hbs[h]
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        n_gt = int(_num(get(run.calib, "eval", h, "n_gt")) or 0)
        grid = np.linspace(0.0, 1.0, 201)
        pb = thresholds.precision_recall_vs_conf(hb.conf, hb.correct, n_gt=n_gt, grid=grid)
        pa = (thresholds.precision_recall_vs_conf(hb.conf_after, hb.correct, n_gt=n_gt, grid=grid)
              if hb.conf_after is not None else None)
        marks = [(x, thresholds.equivalent_threshold(x, hb.temperature) if hb.temperature and 0 < x < 1 else None)
                 for x in thr]
        png = plots.threshold_figure(pb, pa, marks,
                                     title=f"Precision and recall against the threshold, head {h} (IoU {iou:g})")
        b.fig(f"threshold_{h}", png,
              f"Precision and recall of the boxes above each threshold, head {h}, split {hb.split} "
              f"({fint(n_gt)} ground-truth objects, IoU {iou:g}). Filled dots: the operating threshold applied to raw "
              "and to calibrated scores; hollow dot on the dotted line: the equivalent calibrated threshold, which "
              "keeps the raw set.",
              f"Precision and recall against conf threshold, head {h}")
        shifts = get(run.calib, "threshold_shift", h, default=[])
        b.add(Table(_SHIFT_COLS, [_shift_row([], e) for e in shifts],
                    caption=f"Kept set at each threshold, head {h}, all classes (correct: IoU ≥ {iou:g})",
                    css="threshold-shift",
                    attrs={"data-head": h}))
        prow = []
        for r in sorted(_per_class_rows(run, h, hb), key=lambda r: int(r.get("cls", -1))):
            for e in r.get("threshold_shift") or []:
                prow.append(_shift_row([f"{r['name']} ({int(r['cls'])})"], e))
        if prow:
            b.add(Table(["Class (id)"] + _SHIFT_COLS, prow,
                        caption=f"Kept set per class, head {h} (correct: IoU ≥ {iou:g})",
                        css="threshold-shift-per-class", attrs={"data-head": h}))


def _map(b: _Builder, run: Run) -> None:
    c = run.calib
    b.add(Heading(2, "mAP verification", "map-verification"))
    b.add(Para("One temperature per head is a monotonic map of the scores: the ranking of boxes, and with it "
               "pycocotools mAP on the same boxes, cannot change. Ultralytics val keeps the boxes above a conf floor: "
               "on calibrated scores the same floor keeps a slightly different set of low-score boxes, which can move "
               "its mAP a little; at the equivalent floor it keeps the original set.", "note"))
    rows = []
    for h in run.heads:
        ev = get(c, "eval", h, default={})
        ident = ev.get("map_identical")
        rows.append([h, f4(ev.get("map50_95_before")), f4(ev.get("map50_95_after")), f4(ev.get("map50_before")),
                     f4(ev.get("map50_after")), "yes" if ident is True else ("NO" if ident is False else "n/a")])
    b.add(Table(["Head", "mAP50-95 raw", "mAP50-95 calibrated", "mAP50 raw", "mAP50 calibrated", "Identical"], rows,
                caption="pycocotools, evaluation split", css="map-coco"))
    urows, notes = [], []
    for h in run.heads:
        uv = get(c, "ultralytics_val", h)
        if not isinstance(uv, dict):
            urows.append([h, "n/a (not run)", "n/a", "n/a", "n/a", ""])
            continue
        same = uv.get("identical_at_equivalent_floor")
        for key, label in (("original", "original weights"), ("calibrated", "calibrated, same conf floor"),
                           ("calibrated_equivalent_floor", "calibrated, equivalent floor")):
            e = uv.get(key) or {}
            mark = ""
            if key == "calibrated_equivalent_floor" and same is not None:
                mark = "yes" if same else "NO"
            urows.append([h, label, fthr(e.get("conf")), f4(e.get("map50_95")), f4(e.get("map50")), mark])
        if uv.get("note"):
            notes.append(f"{h}: {uv['note']}")
    b.add(Table(["Head", "Run", "Conf floor", "mAP50-95", "mAP50", "Same as original"], urows,
                caption="Ultralytics val" + (f", split {get(c, 'ultralytics_val', run.heads[0], 'split')}"
                                             if get(c, "ultralytics_val", run.heads[0], "split") else ""),
                css="map-ultralytics"))
    for n in notes:
        b.add(Para(n, "note"))


def _fmt_value(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_value(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt_value(x) for x in v) or "none"
    return str(v)


def _settings_section(b: _Builder, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    c = run.calib
    b.add(Heading(2, "Settings", "settings"))
    rows = [[k, _fmt_value(v), SETTING_HELP.get(k, "")] for k, v in c.items() if k not in _PER_HEAD_KEYS]
    rows.append(["temperature", _fmt_value(c.get("temperature")),
                 "fitted temperature per head: conf = sigmoid(logit / T)"])
    b.add(Table(["Setting", "Value", "Meaning"], rows, caption=f"Options recorded in {CALIBRATION_FILE}",
                css="settings", align_numbers=False))
    frows = []
    for h in run.heads:
        f = get(c, "fit", h, default={})
        frows.append([h, str(f.get("split") or "n/a"), fint(f.get("images")), fint(f.get("boxes")),
                      fint(f.get("correct")),
                      f4(f.get("nll_before")), f4(f.get("nll_after")), fint(f.get("iterations"))])
    b.add(Table(["Head", "Split", "Images", "Boxes", "Correct", f"NLL at T = 1 (IoU {_settings(run)[1]:g})",
                 "NLL at fitted T", "Iterations"], frows, caption="Temperature fit", css="fit"))
    erows = []
    for h in run.heads:
        ev = get(c, "eval", h, default={})
        erows.append([h, str(ev.get("split") or "n/a"), fint(ev.get("images")), fint(ev.get("boxes")),
                      fint(ev.get("correct")),
                      fint(ev.get("ignored")), fint(ev.get("n_gt")), fint(ev.get("corrupt_images")), f"{hbs[h].n:,}"])
    b.add(Table(["Head", "Split", "Images", "Boxes", "Correct", "Crowd-matched (excluded)", "GT objects",
                 "Corrupt images",
                 f"Boxes used for curves (from {BOXES_FILE})"], erows, caption="Evaluation data", css="eval-data"))
    corrupt = c.get("corrupt_images") or []
    b.add(Para("Corrupt images skipped: " + (", ".join(map(str, corrupt)) if corrupt else "none") + ".", "note"))
    b.add(Para(f"Curves are recomputed from {run.run_dir / BOXES_FILE} on the evaluation split, boxes matched to crowd "
               "annotations excluded; the numbers in the tables are those of "
               f"{run.run_dir / CALIBRATION_FILE}.", "note"))


# --------------------------------------------------------------------------------------------
# public API


def _write_page(out_dir: Path, stem: str, title: str, b: _Builder, *, subtitle: str, footer: str) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, png in b.figures.items():
        paths[f"{FIGURES_DIR}/{name}.png"] = write_bytes(out_dir / FIGURES_DIR / f"{name}.png", png)
    md = to_markdown(title, b.blocks, figures_dir=FIGURES_DIR, subtitle=subtitle, footer=footer)
    paths["md"] = write_text(out_dir / f"{stem}.md", md)
    page = to_html(title, b.blocks, subtitle=subtitle, footer=footer)
    paths["html"] = write_text(out_dir / f"{stem}.html", page)
    return paths


def write_report(
    run_dir: str | Path, *, out_dir: str | Path | None = None, shown_dir: str | Path | None = None
) -> dict[str, Path]:
    """Write the calibration report of a run: ``report.html``, ``report.md`` and ``figures/*.png``.

    ``report.html`` is self-contained (figures embedded as PNG data URIs, inline CSS, no script);
    ``report.md`` references the PNGs in ``figures/``. Sections: Summary, Reliability, Per-class
    calibration, Threshold shift, mAP verification, Settings. Every file is written atomically.

    Args:
        run_dir: A run directory holding ``calibration.json`` and ``boxes.parquet``.
        out_dir: Where to write; default ``run_dir``.
        shown_dir: The run folder named in the report's text, when ``run_dir`` is a staging
            folder that will be moved there; default ``run_dir``.

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
    run = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    if shown_dir is not None:
        run = dataclasses.replace(run, run_dir=Path(shown_dir))
    n_bins = _settings(run)[0]
    hbs = {h: run.eval_boxes(h) for h in run.heads}
    bins = {h: (_bins(hb.conf, hb.correct, n_bins) if hb.n else None,
                _bins(hb.conf_after, hb.correct, n_bins) if hb.n else None) for h, hb in hbs.items()}
    warnings_ = []
    for h, hb in hbs.items():
        if hb.n == 0:
            warnings_.append(f"Head {h}: {BOXES_FILE} has no boxes on split {hb.split}; figures are empty.")
        warnings_ += _check_consistency(run, h, hb, *bins[h])
    b = _Builder()
    _summary(b, run, hbs, bins, warnings_)
    _reliability(b, run, hbs, bins)
    _per_class(b, run, hbs)
    _threshold(b, run, hbs)
    _map(b, run)
    _settings_section(b, run, hbs)
    model = Path(str(run.calib.get("model") or "model")).name
    title = f"Confidence calibration report: {model}"
    subtitle = (f"Run {run.run_dir} · data {run.calib.get('data') or 'n/a'} · heads {', '.join(run.heads)} · "
                f"created {run.calib.get('created') or 'n/a'}")
    footer = (f"det_calib {run.calib.get('det_calib_version') or ''} · {CALIBRATION_FILE} + {BOXES_FILE} "
              f"of {run.run_dir}")
    return _write_page(out, "report", title, b, subtitle=subtitle, footer=footer)


# --------------------------------------------------------------------------------------------
# comparison


def _resolve_pair(spec_a: str | Path, spec_b: str | Path) -> list[tuple[Run, str, str]]:
    """The two runs and the head of each to compare. ``run_dir:head`` picks a head; without one,
    the first head both runs have (compare like with like), else the run's first head."""
    parsed = [parse_run_spec(spec_a), parse_run_spec(spec_b)]
    runs = [load_run(path) for path, _ in parsed]
    common = [h for h in runs[0].heads if h in runs[1].heads]
    out = []
    for (path, head), run in zip(parsed, runs):
        note = ""
        if head is None:
            head = next((h for h in common), run.heads[0])
            if len(run.heads) > 1:
                note = f"{path} has heads {', '.join(run.heads)}; comparing {head} (use {path}:<head> to choose)"
                log.info(note)
        elif head not in run.heads:
            raise InputError(f"{path / CALIBRATION_FILE}: no head {head!r}; heads are {run.heads}")
        out.append((run, head, note))
    return out


def _boot_mean(metric: Callable[..., float], hb: HeadBoxes, arrays: Sequence[np.ndarray],
               boot: dict[str, Any]) -> tuple[float, float] | None:
    """Image-bootstrap interval of a per-box mean metric (NLL, Brier), resampling images.

    A mean over boxes is ``sum over images of (metric of the image x its boxes) / total boxes``,
    so each image is reduced once to ``(metric(image) * n_image, n_image)`` with ``metric`` itself
    and :func:`det_calib.metrics.bootstrap_ci` resamples those rows: the same draws, and the same
    interval, as resampling the boxes, in O(images) per replicate instead of O(boxes).
    """
    if hb.n == 0:
        return None
    _, inv = np.unique(hb.image_id, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    groups = np.split(order, cuts)
    counts = np.array([len(g) for g in groups], dtype=np.float64)
    sums = np.array([metric(*[a[g] for a in arrays]) * len(g) for g in groups])

    def mean_of_images(s: np.ndarray, n: np.ndarray, *, weights: np.ndarray | None = None) -> float:
        w = np.ones_like(n) if weights is None else weights
        return float(np.dot(w, s) / np.dot(w, n))

    lo, hi = metrics.bootstrap_ci(mean_of_images, np.arange(len(groups)), sums, counts,
                                  n_boot=int(boot.get("n_boot") or 1000), seed=int(boot.get("seed") or 0),
                                  level=float(boot.get("level") or 0.95))
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _compare_metric_rows(runs: list[tuple[Run, str, HeadBoxes]]) -> list[list[str]]:
    """ECE / LaECE (values and CIs from JSON) and NLL / Brier (values from JSON, CIs bootstrapped here)."""
    out: list[list[str]] = []
    tags = [(_ece_tag(r), _laece_tag(r), _settings(r)[1]) for r, _, _ in runs]
    same = len({t for t in tags}) == 1
    for key, label in (("ece", "ECE"), ("laece", "LaECE"), ("nll", "NLL"), ("brier", "Brier")):
        row_tag = ""
        if same:
            t = tags[0]
            row_tag = {"ece": f" ({t[0]})", "laece": f" ({t[1]})"}.get(key, f" (IoU {t[2]:g})")
        row = [label + row_tag]
        for run, head, hb in runs:
            ev = get(run.calib, "eval", head, default={})
            boot = get(run.calib, "bootstrap", default={})
            for which in ("before", "after"):
                v = ev.get(f"{key}_{which}")
                ci = ev.get(f"{key}_{which}_ci")
                if _ci(ci) is None and key in ("nll", "brier") and _num(v) is not None:
                    t = 1.0 if which == "before" else hb.temperature
                    if t is not None and hb.n:
                        if key == "nll":
                            fn = functools.partial(metrics.nll_logits, temperature=t)
                            ci = _boot_mean(fn, hb, [hb.logit, hb.correct], boot)
                        else:
                            prob = hb.conf if which == "before" else hb.conf_after
                            ci = _boot_mean(metrics.brier, hb, [prob, hb.correct], boot)
                row.append(fci(v, ci))
        out.append(row)
    return out


def _compare_headline(names: Sequence[str], runs: list[tuple[Run, str, HeadBoxes]]) -> str:
    parts = []
    for which, word in (("before", "Raw"), ("after", "Calibrated")):
        vals = [(_num(get(r.calib, "eval", h, f"ece_{which}")), _ci(get(r.calib, "eval", h, f"ece_{which}_ci")))
                for r, h, _ in runs]
        (va, ca), (vb, cb) = vals
        if va is None or vb is None:
            parts.append(f"{word} ECE: n/a")
            continue
        best = names[0] if va < vb else names[1]
        txt = f"{word} ECE {names[0]} {va:.4f} vs {names[1]} {vb:.4f}: {best} is lower"
        if ca and cb:
            overlap = ca[0] <= cb[1] and cb[0] <= ca[1]
            txt += " (95% intervals overlap: not a clear difference)" if overlap else " (95% intervals do not overlap)"
        parts.append(txt)
    return "; ".join(parts) + "."


def compare_runs(
    run_a: str | Path,
    run_b: str | Path,
    *,
    out_dir: str | Path,
    labels: Sequence[str] | None = None,
) -> dict[str, Path]:
    """Compare the calibration of two runs (two models, or two heads of one run) side by side.

    Each run is a run directory, or ``run_dir:head`` to pick a head of a run with two heads
    (``compare_runs("out:nms", "out:e2e", out_dir="cmp")``); without a head the first head of
    the run is used. Writes ``compare.html`` (self-contained), ``compare.md`` and
    ``figures/compare_*.png`` into ``out_dir``: reliability diagrams of both runs on the same
    axes (raw and calibrated), ECE / LaECE / NLL / Brier with 95% intervals, and per-class ECE
    differences (classes matched by name; classes present in only one run are listed).

    Args:
        run_a, run_b: Run directories, optionally with ``:head``.
        out_dir: Output directory.
        labels: Two display names; default ``<dir name>:<head>``.

    Returns:
        Written paths: ``"html"`` (compare.html), ``"md"`` (compare.md) and ``"figures/<name>.png"``.

    Raises:
        InputError: A run is missing or corrupt, an unknown head, or ``labels`` is not two names.
    """
    (ra, ha, na), (rb, hb_, nb) = _resolve_pair(run_a, run_b)
    if labels is None:
        la, lb = f"{ra.run_dir.name}:{ha}", f"{rb.run_dir.name}:{hb_}"
        if la == lb:
            la, lb = f"A ({la})", f"B ({lb})"
    else:
        if len(labels) != 2 or not all(isinstance(x, str) and x for x in labels):
            raise InputError(f"Expected argument `labels` to be two non-empty names, but got {labels!r}")
        la, lb = labels
        if la == lb:
            raise InputError(f"Expected argument `labels` to be two different names, but got {labels!r}")
    runs = [(ra, ha, ra.eval_boxes(ha)), (rb, hb_, rb.eval_boxes(hb_))]
    names = [la, lb]
    b = _Builder()
    # summary
    b.add(Heading(2, "Summary", "summary"))
    for n in (na, nb):
        if n:
            b.add(Para(n, "note"))
    diffs = []
    for key in ("ece_bins", "iou_match", "loc_iou_match", "laece_bins", "conf_floor", "splits"):
        va, vb = ra.calib.get(key), rb.calib.get(key)
        if va != vb:
            diffs.append(f"{key} ({_fmt_value(va)} vs {_fmt_value(vb)})")
    if diffs:
        b.add(Para("The runs differ in settings that change the metrics: " + "; ".join(diffs)
                   + ". Compare their numbers with care.", "warn"))
    b.add(Para(_compare_headline(names, runs), "lead"))
    rows = []
    for name, (run, head, hbx) in zip(names, runs):
        ev = get(run.calib, "eval", head, default={})
        t = run.temperature(head)
        rows.append([name, str(run.calib.get("model") or "n/a"), str(run.calib.get("data") or "n/a"), head,
                     f"{hbx.split or 'n/a'} ({fint(ev.get('images'))} images, {fint(ev.get('boxes'))} boxes)",
                     f3(t), verdict(t),
                     _arrow(fci(ev.get("ece_before"), ev.get("ece_before_ci")),
                            fci(ev.get("ece_after"), ev.get("ece_after_ci"))),
                     _arrow(f4(ev.get("map50_95_before")), f4(ev.get("map50_95_after")))])
    b.add(Table(["Run", "Model", "Data", "Head", "Eval split", "T", "Raw scores", "ECE raw → calibrated [95% CI]",
                 "mAP50-95 raw → calibrated"], rows, caption="Runs compared", css="compare-runs"))
    for name, (run, head, _) in zip(names, runs):
        b.add(Para(f"{name}: {verdict_sentence(run.temperature(head))}"))
    # reliability
    b.add(Heading(2, "Reliability", "reliability"))
    rel = []
    for name, (run, head, hbx) in zip(names, runs):
        nb_ = _settings(run)[0]
        ev = get(run.calib, "eval", head, default={})
        rel.append((name, _bins(hbx.conf, hbx.correct, nb_) if hbx.n else None,
                    _bins(hbx.conf_after, hbx.correct, nb_) if hbx.n else None,
                    f"ECE {f4(ev.get('ece_before'))}", f"ECE {f4(ev.get('ece_after'))}"))
    tag_txt = " / ".join(f"{n}: {_ece_tag(r)}" for n, (r, _, _) in zip(names, runs))
    png = plots.compare_reliability(rel, title="Reliability, raw and calibrated, both runs on the same axes")
    b.fig("compare_reliability", png,
          f"Reliability of both runs on their evaluation splits ({tag_txt}): fraction correct against mean confidence "
          "per non-empty bin; below, boxes per bin (log scale).", "Reliability of both runs, raw and calibrated")
    mrows = _compare_metric_rows(runs)
    b.add(Table(["Metric (lower is better)"] + [f"{n} {w}" for n in names for w in ("raw", "calibrated")], mrows,
                caption="Calibration metrics with 95% image-bootstrap intervals", css="compare-metrics"))
    b.add(Para("ECE and LaECE values and intervals are those of calibration.json; NLL and Brier intervals are "
               "bootstrapped over images here, from boxes.parquet, with each run's bootstrap settings.", "note"))
    # per class
    b.add(Heading(2, "Per-class calibration", "per-class"))
    pa = {str(r["name"]): r for r in _per_class_rows(ra, ha, runs[0][2])}
    pb = {str(r["name"]): r for r in _per_class_rows(rb, hb_, runs[1][2])}
    both = [n for n in pa if n in pb]
    only_a = [n for n in pa if n not in pb]
    only_b = [n for n in pb if n not in pa]

    def d(x: Any, y: Any) -> float | None:
        x, y = _num(x), _num(y)
        return None if x is None or y is None else y - x

    chart = [(n, d(pa[n].get("ece_before"), pb[n].get("ece_before")), d(pa[n].get("ece_after"), pb[n].get("ece_after")),
              bool(pa[n].get("few_boxes") or pb[n].get("few_boxes"))) for n in both]
    tag_a = _ece_tag(ra)
    foot = None
    if only_a or only_b:
        foot = f"Only in {la}: {', '.join(only_a) or 'none'}. Only in {lb}: {', '.join(only_b) or 'none'}."
    png = plots.compare_per_class_chart(chart, xlabel=f"ECE({lb}) − ECE({la})  (> 0: {lb} worse)",
                                        title=f"Per-class ECE difference, {lb} minus {la}", footnote=foot)
    b.fig("compare_per_class_ece", png,
          f"Per-class ECE difference ({tag_a}), {lb} minus {la}, raw and calibrated, classes matched by name; "
          "hatched: fewer boxes than the minimum in either run.", "Per-class ECE differences")
    prow, pcss = [], []
    for n in list(both) + only_a + only_b:
        x, y = pa.get(n, {}), pb.get(n, {})
        where = "both" if n in pa and n in pb else ("A only" if n in pa else "B only")
        few = bool(x.get("few_boxes") or y.get("few_boxes"))
        prow.append([f"{n} (few boxes)" if few else n, where, fint(x.get("boxes")), fint(y.get("boxes")),
                     fci(x.get("ece_before"), x.get("ece_before_ci")), fci(x.get("ece_after"), x.get("ece_after_ci")),
                     fci(y.get("ece_before"), y.get("ece_before_ci")), fci(y.get("ece_after"), y.get("ece_after_ci")),
                     f4(d(x.get("ece_before"), y.get("ece_before"))), f4(d(x.get("ece_after"), y.get("ece_after")))])
        pcss.append("few" if few else "")
    b.add(Table(["Class", "In", "Boxes A", "Boxes B", "ECE A raw", "ECE A calibrated", "ECE B raw", "ECE B calibrated",
                 "Δ raw (B − A)", "Δ calibrated (B − A)"], prow,
                caption=f"Per-class ECE ({tag_a}) with 95% intervals; A = {la}, B = {lb}", css="compare-per-class",
                row_css=pcss))
    if foot:
        b.add(Para(foot, "note"))
    # settings
    b.add(Heading(2, "Settings", "settings"))
    keys = [k for k in dict.fromkeys(list(ra.calib) + list(rb.calib)) if k not in _PER_HEAD_KEYS]
    srows = [[k, _fmt_value(ra.calib.get(k)), _fmt_value(rb.calib.get(k)),
              "" if ra.calib.get(k) == rb.calib.get(k) else "differs"] for k in keys]
    srows.append(["run directory", str(ra.run_dir), str(rb.run_dir), ""])
    srows.append(["head", ha, hb_, ""])
    b.add(Table(["Setting", la, lb, ""], srows, caption="Settings of both runs", css="settings", align_numbers=False))
    title = f"Calibration comparison: {la} vs {lb}"
    return _write_page(Path(out_dir), "compare", title, b, subtitle=f"A = {la}, B = {lb}",
                       footer=f"{ra.run_dir / CALIBRATION_FILE} vs {rb.run_dir / CALIBRATION_FILE}")

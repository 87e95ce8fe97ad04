"""The comparison of two runs, or two heads of one run (``compare_runs``): compare.html, compare.md."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from det_calib import metrics
from det_calib.errors import InputError
from det_calib.results import Bootstrap, ClassResult

from . import calibrators, plots
from .common import (
    _arrow,
    _bins,
    _Builder,
    _ci,
    _ece_tag,
    _eval,
    _fmt_value,
    _laece_tag,
    _num,
    _per_class_rows,
    _write_page,
    f3,
    f4,
    fci,
    fint,
    verdict,
    verdict_sentence,
)
from .document import Heading, Para, Table
from .load import CALIBRATION_FILE, HeadBoxes, Run, load_run, parse_run_spec
from .report import PER_HEAD_KEYS

log = logging.getLogger(__name__)

__all__ = ["compare_runs"]

# settings whose difference changes the metrics of two runs
_METRIC_SETTINGS = ("ece_bins", "iou_match", "loc_iou_match", "laece_bins", "conf_floor", "splits")


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
               boot: Bootstrap) -> tuple[float, float] | None:
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
                                  n_boot=boot.n_boot, seed=boot.seed, level=boot.level)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _compare_metric_rows(runs: list[tuple[Run, str, HeadBoxes]]) -> list[list[str]]:
    """ECE / LaECE (values and CIs from the runs) and NLL / Brier (values from the runs, CIs bootstrapped here)."""
    out: list[list[str]] = []
    tags = [(_ece_tag(r), _laece_tag(r), r.settings.iou_match) for r, _, _ in runs]
    same = len(set(tags)) == 1
    for key, label in (("ece", "ECE"), ("laece", "LaECE"), ("nll", "NLL"), ("brier", "Brier")):
        row_tag = ""
        if same:
            t = tags[0]
            row_tag = {"ece": f" ({t[0]})", "laece": f" ({t[1]})"}.get(key, f" (IoU {t[2]:g})")
        row = [label + row_tag]
        for run, head, hb in runs:
            ev = _eval(run, head)
            for which in ("before", "after"):
                sc = ev.scores(which)
                v = getattr(sc, key)
                ci = getattr(sc, f"{key}_ci", None)
                if ci is None and key in ("nll", "brier") and _num(v) is not None:
                    ci = _boot_ci(run, hb, key, which)
                row.append(fci(v, ci))
        out.append(row)
    return out


def _boot_ci(run: Run, hb: HeadBoxes, key: str, which: str) -> tuple[float, float] | None:
    """The interval of NLL or Brier, raw or calibrated, bootstrapped from the boxes."""
    t = 1.0 if which == "before" else hb.temperature
    if t is None or not hb.n:
        return None
    boot = run.settings.bootstrap
    if key == "nll":
        fn = functools.partial(metrics.nll_logits, temperature=t)
        return _boot_mean(fn, hb, [hb.logit, hb.correct], boot)
    prob = hb.conf if which == "before" else hb.conf_after
    return _boot_mean(metrics.brier, hb, [prob, hb.correct], boot)


def _compare_headline(names: Sequence[str], runs: list[tuple[Run, str, HeadBoxes]]) -> str:
    parts = []
    for which, word in (("before", "Raw"), ("after", "Calibrated")):
        vals = [(_num(_eval(r, h).scores(which).ece), _ci(_eval(r, h).scores(which).ece_ci)) for r, h, _ in runs]
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


def _labels(ra: Run, ha: str, rb: Run, hb: str, labels: Sequence[str] | None) -> tuple[str, str]:
    if labels is None:
        la, lb = f"{ra.run_dir.name}:{ha}", f"{rb.run_dir.name}:{hb}"
        return (f"A ({la})", f"B ({lb})") if la == lb else (la, lb)
    if len(labels) != 2 or not all(isinstance(x, str) and x for x in labels):
        raise InputError(f"Expected argument `labels` to be two non-empty names, but got {labels!r}")
    if labels[0] == labels[1]:
        raise InputError(f"Expected argument `labels` to be two different names, but got {labels!r}")
    return labels[0], labels[1]


def _summary(b: _Builder, names: list[str], runs: list[tuple[Run, str, HeadBoxes]], notes: list[str]) -> None:
    (ra, _, _), (rb, _, _) = runs
    b.add(Heading(2, "Summary", "summary"))
    for n in notes:
        if n:
            b.add(Para(n, "note"))
    da, db = ra.result.to_dict(), rb.result.to_dict()
    diffs = [f"{k} ({_fmt_value(da.get(k))} vs {_fmt_value(db.get(k))})" for k in _METRIC_SETTINGS
             if da.get(k) != db.get(k)]
    if diffs:
        b.add(Para("The runs differ in settings that change the metrics: " + "; ".join(diffs)
                   + ". Compare their numbers with care.", "warn"))
    b.add(Para(_compare_headline(names, runs), "lead"))
    rows = []
    for name, (run, head, hbx) in zip(names, runs):
        ev = _eval(run, head)
        rec, tf = run.head(head).calibrator, run.head(head).temperature_fit
        t = run.temperature(head) if tf is None else tf.temperature  # fitted on every run, whatever is deployed
        rows.append([name, run.result.model or "n/a", run.result.data or "n/a", head,
                     f"{hbx.split or 'n/a'} ({fint(ev.images)} images, {fint(ev.boxes)} boxes)",
                     rec.method if rec is not None else "temperature", f3(t), verdict(t),
                     _arrow(fci(ev.before.ece, ev.before.ece_ci), fci(ev.after.ece, ev.after.ece_ci)),
                     _arrow(f4(ev.map50_95_before), f4(ev.map50_95_after))])
    b.add(Table(["Run", "Model", "Data", "Head", "Eval split", "Deployed", "T (fitted on every run)", "Raw scores",
                 "ECE raw → calibrated [95% CI]", "mAP50-95 raw → calibrated"], rows, caption="Runs compared",
                css="compare-runs"))
    for name, (run, head, _) in zip(names, runs):
        tf = run.head(head).temperature_fit
        b.add(Para(f"{name}: {verdict_sentence(run.temperature(head) if tf is None else tf.temperature)}"))


def _reliability(b: _Builder, names: list[str], runs: list[tuple[Run, str, HeadBoxes]]) -> None:
    b.add(Heading(2, "Reliability", "reliability"))
    rel = []
    for name, (run, head, hbx) in zip(names, runs):
        nb = run.settings.ece_bins
        ev = _eval(run, head)
        rel.append((name, _bins(hbx.conf, hbx.correct, nb) if hbx.n else None,
                    _bins(hbx.conf_after, hbx.correct, nb) if hbx.n else None,
                    f"ECE {f4(ev.before.ece)}", f"ECE {f4(ev.after.ece)}"))
    tag_txt = " / ".join(f"{n}: {_ece_tag(r)}" for n, (r, _, _) in zip(names, runs))
    png = plots.compare_reliability(rel, title="Reliability, raw and calibrated, both runs on the same axes")
    b.fig("compare_reliability", png,
          f"Reliability of both runs on their evaluation splits ({tag_txt}): fraction correct against mean confidence "
          "per non-empty bin; below, boxes per bin (log scale).", "Reliability of both runs, raw and calibrated")
    b.add(Table(["Metric (lower is better)"] + [f"{n} {w}" for n in names for w in ("raw", "calibrated")],
                _compare_metric_rows(runs),
                caption="Calibration metrics with 95% image-bootstrap intervals", css="compare-metrics"))
    b.add(Para("ECE and LaECE values and intervals are those of calibration.json; NLL and Brier intervals are "
               "bootstrapped over images here, from boxes.parquet, with each run's bootstrap settings.", "note"))


def _diff(x: Any, y: Any) -> float | None:
    x, y = _num(x), _num(y)
    return None if x is None or y is None else y - x


def _per_class(b: _Builder, names: list[str], runs: list[tuple[Run, str, HeadBoxes]]) -> None:
    (ra, ha, hba), (rb, hb_, hbb) = runs
    la, lb = names
    b.add(Heading(2, "Per-class calibration", "per-class"))
    pa = {str(r.name): r for r in _per_class_rows(ra, ha, hba)}
    pb = {str(r.name): r for r in _per_class_rows(rb, hb_, hbb)}
    both = [n for n in pa if n in pb]
    only_a = [n for n in pa if n not in pb]
    only_b = [n for n in pb if n not in pa]
    chart = [(n, _diff(pa[n].ece_before, pb[n].ece_before), _diff(pa[n].ece_after, pb[n].ece_after),
              bool(pa[n].few_boxes or pb[n].few_boxes)) for n in both]
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
    empty = ClassResult()
    for n in list(both) + only_a + only_b:
        x, y = pa.get(n, empty), pb.get(n, empty)
        where = "both" if n in pa and n in pb else ("A only" if n in pa else "B only")
        few = bool(x.few_boxes or y.few_boxes)
        prow.append([f"{n} (few boxes)" if few else n, where, fint(x.boxes), fint(y.boxes),
                     fci(x.ece_before, x.ece_before_ci), fci(x.ece_after, x.ece_after_ci),
                     fci(y.ece_before, y.ece_before_ci), fci(y.ece_after, y.ece_after_ci),
                     f4(_diff(x.ece_before, y.ece_before)), f4(_diff(x.ece_after, y.ece_after))])
        pcss.append("few" if few else "")
    b.add(Table(["Class", "In", "Boxes A", "Boxes B", "ECE A raw", "ECE A calibrated", "ECE B raw", "ECE B calibrated",
                 "Δ raw (B − A)", "Δ calibrated (B − A)"], prow,
                caption=f"Per-class ECE ({tag_a}) with 95% intervals; A = {la}, B = {lb}", css="compare-per-class",
                row_css=pcss))
    if foot:
        b.add(Para(foot, "note"))


def _settings(b: _Builder, names: list[str], runs: list[tuple[Run, str, HeadBoxes]]) -> None:
    (ra, ha, _), (rb, hb_, _) = runs
    da, db = ra.result.to_dict(), rb.result.to_dict()
    b.add(Heading(2, "Settings", "settings"))
    keys = [k for k in dict.fromkeys(list(da) + list(db)) if k not in PER_HEAD_KEYS]
    srows = [[k, _fmt_value(da.get(k)), _fmt_value(db.get(k)), "" if da.get(k) == db.get(k) else "differs"]
             for k in keys]
    srows.append(["run directory", str(ra.run_dir), str(rb.run_dir), ""])
    srows.append(["head", ha, hb_, ""])
    b.add(Table(["Setting", names[0], names[1], ""], srows, caption="Settings of both runs", css="settings",
                align_numbers=False))


def _thresholds(b: _Builder, names: list[str], runs: list[tuple[Run, str, HeadBoxes]]) -> None:
    """Both runs' tuned conf thresholds side by side, when both folders have a thresholds.json for the head."""
    from det_calib.tuning import CRITERIA, THRESHOLDS_FILE, read_thresholds

    from .thresholds_section import compare_thresholds_table

    docs = []
    for run, head, _ in runs:
        if not (run.run_dir / THRESHOLDS_FILE).is_file():
            return
        try:
            doc = read_thresholds(run.run_dir / THRESHOLDS_FILE)
        except InputError as e:
            b.add(Heading(2, "Conf thresholds", "thresholds"), Para(f"Not compared: {e}", "warn"))
            return
        if head not in doc["heads"]:
            return
        docs.append(doc)
    (_, ha, _), (_, hb_, _) = runs
    b.add(Heading(2, "Conf thresholds", "thresholds"))
    params = [d["heads"][h]["criteria"]["target_precision"]["params"] for d, h in zip(docs, (ha, hb_))]
    b.add(Para("Per-class conf thresholds of each run's thresholds.json (" + "; ".join(
        f"{n}: target precision {p['target_precision']:g}, delta {p['delta']:g}" for n, p in zip(names, params))
        + "), with the precision and recall each realises on its run's eval split. Classes are matched by name.",
        "note"))
    for crit in CRITERIA:
        t = compare_thresholds_table(docs[0], docs[1], head_a=ha, head_b=hb_, labels=names, criterion=crit)
        b.add(dataclasses.replace(t, attrs={**t.attrs, "data-criterion": crit}))


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
    differences (classes matched by name; classes present in only one run are listed) and, when
    both run folders have a ``thresholds.json`` for their head, the tuned conf thresholds side by side.

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
    la, lb = _labels(ra, ha, rb, hb_, labels)
    runs = [(ra, ha, ra.eval_boxes(ha)), (rb, hb_, rb.eval_boxes(hb_))]
    names = [la, lb]
    b = _Builder()
    _summary(b, names, runs, [na, nb])
    _reliability(b, names, runs)
    _per_class(b, names, runs)
    _thresholds(b, names, runs)
    for name, (run, head, hb) in zip(names, runs, strict=True):
        calibrators.calibrators_section(b, run, {head: hb}, label=f": {name}", heads=[head])
    _settings(b, names, runs)
    return _write_page(Path(out_dir), "compare", f"Calibration comparison: {la} vs {lb}", b,
                       subtitle=f"A = {la}, B = {lb}",
                       footer=f"{ra.run_dir / CALIBRATION_FILE} vs {rb.run_dir / CALIBRATION_FILE}")

# Long file: the compare page's own sections and their interval checks (to reuse the run report's
# sections under the section contract, issue 38).
"""The comparison of two or more runs, or heads of runs (``compare_runs``): compare.html, compare.md.

Every number is read from each run's :class:`~det_calib.record.run_result.RunResult` (``calibration.json``)
as ``calibrate`` computed it, intervals included. The only figures computed here are the ones a
run does not store: the intervals of the all-box NLL and Brier score (image bootstrap with
:func:`det_calib.metrics.bootstrap_ci`, its default rule and the run's bootstrap settings, from
``boxes.parquet``: the raw logits and conf, and the deployed calibrator's scores) and the
reliability curves, binned as the run's ECE is.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.data.box_view import kept_mask
from det_calib.errors import InputError
from det_calib.evaluation.kept_set import ThresholdShift
from det_calib.metrics import calibration as metrics
from det_calib.record.run_folder import CALIBRATION_FILE, HeadBoxes, Run, load_run, parse_run_spec
from det_calib.record.run_result import Bootstrap, ClassResult, OperatingFigures

from . import calibrators_section as calibrators
from . import plots
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
    fthr,
    verdict,
)
from .document import Heading, Para, Table
from .engines_section import engine_record, engines_section
from .run_report import PER_HEAD_KEYS, _check_consistency

log = logging.getLogger(__name__)

__all__ = ["compare_runs"]

# settings whose difference changes the metrics of two runs
_METRIC_SETTINGS = ("ece_bins", "iou_match", "loc_iou_match", "laece_bins", "conf_floor", "splits")

SEPARATION_NOTE = ("Two runs whose 95% intervals overlap cannot be told apart on these images; intervals that do "
                   "not overlap are a clear difference (a conservative reading: each interval is its own run's "
                   "image bootstrap, not a paired test).")


@dataclass(frozen=True)
class _Col:
    """One compared run or head: a column of every table."""

    name: str
    letter: str
    run: Run
    head: str
    hb: HeadBoxes
    words: str
    """The deployed calibrator with its parameters, in words."""

    @property
    def title(self) -> str:
        return f"{self.name} ({self.words})"

    @property
    def result(self) -> Any:
        return self.run.head(self.head)

    @property
    def low(self) -> float | None:
        """The run's lowest ``--conf`` (where the per-class kept-set ECE is measured)."""
        thr = self.run.settings.conf_thresholds
        return min(thr) if thr else None


def _resolve(specs: Sequence[str | Path]) -> list[tuple[Run, str, str]]:
    """The runs and the head of each to compare. ``run_dir:head`` picks a head; without one, the
    first head every run has (compare like with like), else the run's first head. A run folder
    named twice (two of its heads) is read once."""
    parsed = [parse_run_spec(s) for s in specs]
    loaded: dict[Path, Run] = {}
    runs = []
    for path, _ in parsed:
        key = path.resolve()
        if key not in loaded:
            loaded[key] = load_run(path)
        runs.append(loaded[key])
    common = [h for h in runs[0].heads if all(h in r.heads for r in runs)]
    out = []
    for (path, head), run in zip(parsed, runs, strict=True):
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


def _letters(n: int) -> list[str]:
    return [string.ascii_uppercase[i] if i < 26 else f"R{i + 1}" for i in range(n)]


def _labels(picked: list[tuple[Run, str, str]], labels: Sequence[str] | None) -> list[str]:
    n = len(picked)
    if labels is None:
        names = [f"{r.run_dir.name}:{h}" for r, h, _ in picked]
        if len(set(names)) < n:
            names = [f"{x} ({nm})" for x, nm in zip(_letters(n), names, strict=True)]
        return names
    labels = list(labels) if isinstance(labels, (list, tuple)) else labels
    if not isinstance(labels, list) or len(labels) != n or not all(isinstance(x, str) and x for x in labels):
        raise InputError(f"Expected argument `labels` to be {n} non-empty names, one per run, but got {labels!r}")
    if len(set(labels)) != n:
        raise InputError(f"Expected argument `labels` to be {n} different names, but got {labels!r}")
    return labels


# ------------------------------------------------------------------------------ intervals
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


def _boot_ci(run: Run, hb: HeadBoxes, key: str, which: str) -> tuple[float, float] | None:
    """The interval of the all-box NLL or Brier score, raw or under the deployed calibrator, from the
    boxes, computed as ``calibrate`` computes the estimate (NLL from logits: a temperature's as
    ``nll_logits(logit, temperature=T)``, any other map's from its calibrated logits)."""
    if not hb.n:
        return None
    boot = run.settings.bootstrap
    if key == "brier":
        prob = hb.conf if which == "before" else hb.conf_after
        return None if prob is None else _boot_mean(metrics.brier, hb, [prob, hb.correct], boot)
    if which == "before":
        return _boot_mean(metrics.nll_logits, hb, [hb.logit, hb.correct], boot)
    if hb.calibrator is None and hb.temperature is not None:
        fn = functools.partial(metrics.nll_logits, temperature=hb.temperature)
        return _boot_mean(fn, hb, [hb.logit, hb.correct], boot)
    z = hb.logit_after
    return None if z is None else _boot_mean(metrics.nll_logits, hb, [z, hb.correct], boot)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def separation_words(what: str, items: Sequence[tuple[str, Any, Any]]) -> str:
    r"""Which run is lowest on a figure, and which of the others its interval can and cannot tell apart.

    ``items``: ``(run name, estimate, interval)``. Two runs whose intervals overlap "cannot be told
    apart on these images"; intervals that do not overlap are a clear difference.

    >>> items = [("A", 0.10, (0.08, 0.12)), ("B", 0.11, (0.09, 0.14)), ("C", 0.2, (0.15, 0.25))]
    >>> print(separation_words("ECE", items).replace("; ", ";\n"))
    ECE: lowest A 0.1000 [0.0800, 0.1200];
    clearly lower than C (intervals do not overlap);
    it cannot be told apart from B on these images (their intervals overlap)
    """
    ok = [(n, _num(v), _ci(c)) for n, v, c in items if _num(v) is not None]
    if len(ok) < 2:
        return f"{what}: fewer than two runs have it"
    best = min(ok, key=lambda x: x[1])
    others = [x for x in ok if x is not best]
    if all(x[1] == best[1] for x in others):
        return f"{what}: the same for {', '.join(n for n, _, _ in ok)} ({f4(best[1])})"
    clear = [n for n, _, c in others if c is not None and best[2] is not None and not _overlap(c, best[2])]
    ties = [n for n, _, c in others if c is not None and best[2] is not None and _overlap(c, best[2])]
    unknown = [n for n, _, c in others if c is None or best[2] is None]
    s = f"{what}: lowest {best[0]} {fci(best[1], best[2])}"
    if clear:
        s += f"; clearly lower than {', '.join(clear)} (intervals do not overlap)"
    if ties:
        s += f"; it cannot be told apart from {' or '.join(ties)} on these images (their intervals overlap)"
    if unknown:
        s += f"; against {', '.join(unknown)}: no interval to tell"
    return s


# ------------------------------------------------------------------------------ summary
def _thresholds_of(cols: list[_Col]) -> list[float]:
    """Every ``--conf`` of the runs, in order."""
    return sorted({float(t) for c in cols for t in c.run.settings.conf_thresholds})


def _op_at(ops: list[OperatingFigures], t: float) -> OperatingFigures | None:
    return next((o for o in ops if _num(o.conf) == t), None)


def _shift_at(shifts: list[ThresholdShift], t: float | None) -> ThresholdShift | None:
    return None if t is None else next((s for s in shifts if _num(s.conf) == t), None)


def _headline(cols: list[_Col], thresholds: list[float]) -> str:
    parts = []
    for t in thresholds:
        items = []
        for c in cols:
            o = _op_at(_eval(c.run, c.head).operating_after, t)
            items.append((c.name, None if o is None else o.ece, None if o is None else o.ece_ci))
        parts.append(separation_words(f"ECE of the boxes kept at conf {fthr(t)}, calibrated", items))
    if not parts:
        parts.append("No run records operating-point figures (kept-set ECE): rerun calibrate with this det_calib")
    return "; ".join(parts) + "."


def _operating_table(cols: list[_Col], thresholds: list[float]) -> Table:
    rows = []
    for c in cols:
        ev = _eval(c.run, c.head)
        for t in thresholds:
            o0, o1 = _op_at(ev.operating_before, t), _op_at(ev.operating_after, t)
            sh = _shift_at(c.result.threshold_shift, t)
            if o0 is None or o1 is None:
                own = ", ".join(f"{x:g}" for x in c.run.settings.conf_thresholds)
                cells = [f"not measured: this run's --conf is {own}"] + [""] * 10
            else:
                cells = calibrators.operating_cells(o0, o1, raw_floor=True)
                cells += ["n/a", "n/a"] if sh is None else [_arrow(f3(sh.precision_before), f3(sh.precision_after)),
                                                            _arrow(f3(sh.recall_before), f3(sh.recall_after))]
            rows.append([c.title, fthr(t), *cells, _arrow(f4(ev.map50_95_before), f4(ev.map50_95_after))])
    st = cols[0].run.settings
    return Table(["Run (deployed calibrator)", "Conf", "Boxes kept raw → calibrated",
                  f"ECE raw ({st.ece_bins} bins, IoU {st.iou_match:g})", "ECE floor raw (perfectly calibrated)",
                  "ECE calibrated", "ECE floor calibrated (perfectly calibrated)",
                  f"LaECE_0 raw ({st.laece_bins} bins)", "LaECE_0 calibrated", "Precision raw → calibrated",
                  "Recall raw → calibrated", "mAP50-95 raw → calibrated"], rows,
                 caption="At the operating point: the boxes each run keeps at each conf threshold, raw and calibrated",
                 css="compare-operating")


def _temperature_cell(c: _Col) -> str:
    """The temperature every run fits, whatever it deploys (older runs: the deployed one, if any)."""
    tf = c.result.temperature_fit
    t = c.run.temperature(c.head) if tf is None else tf.temperature
    if t is None:
        return "not in this run's record (it predates temperature_fit)"
    return f"T = {f3(t)} (raw scores {verdict(t)})" + ("; deployed" if c.run.temperature(c.head) is not None else "")


def _summary(b: _Builder, cols: list[_Col], notes: list[str]) -> None:
    b.add(Heading(2, "Summary", "summary"))
    for n in notes:
        if n:
            b.add(Para(n, "note"))
    first = cols[0].run.result.to_dict()
    diffs = []
    for c in cols[1:]:
        d = c.run.result.to_dict()
        diffs += [f"{k} ({_fmt_value(first.get(k))} in {cols[0].name} vs {_fmt_value(d.get(k))} in {c.name})"
                  for k in _METRIC_SETTINGS if first.get(k) != d.get(k)]
    if diffs:
        b.add(Para("The runs differ in settings that change the metrics: " + "; ".join(diffs)
                   + ". Compare their numbers with care.", "warn"))
    thresholds = _thresholds_of(cols)
    b.add(Para(_headline(cols, thresholds), "lead"))
    b.add(_operating_table(cols, thresholds))
    b.add(Para(calibrators.FLOOR_NOTE + " " + SEPARATION_NOTE, "note"))
    rows = []
    for c in cols:
        ev = _eval(c.run, c.head)
        rows.append([c.name, c.run.result.model or "n/a", c.run.result.data or "n/a", c.head,
                     f"{c.hb.split or 'n/a'} ({fint(ev.images)} images, {fint(ev.boxes)} boxes)", c.words,
                     _temperature_cell(c), _arrow(f4(ev.map50_95_before), f4(ev.map50_95_after)),
                     _arrow(f4(ev.map50_before), f4(ev.map50_after))])
    b.add(Table(["Run", "Model", "Data", "Head", "Eval split", "Deployed calibrator",
                 "Temperature (fitted on every run)", "mAP50-95 raw → calibrated", "mAP50 raw → calibrated"], rows,
                caption="Runs compared", css="compare-runs"))
    for c in cols:
        b.add(Para(f"{c.name}: {calibrators.lead(c.run, c.head)}"))
    figs = _all_box_figures(cols)
    b.add(Table(["All boxes (lower is better)"] + [f"{c.title} {w}" for c in cols for w in ("raw", "calibrated")],
                _compare_metric_rows(cols, figs),
                caption="All boxes down to the capture floor: calibration metrics with 95% image-bootstrap intervals",
                css="compare-metrics"))
    b.add(Para("All-box figures, named as such (every box down to the capture floor, most of them far below any "
               "deployment threshold): " + "; ".join(_all_box_words(cols, figs)) + ". " + SEPARATION_NOTE, ""))
    b.add(Para("ECE and LaECE values and intervals, and NLL and Brier values, are those of calibration.json; NLL and "
               "Brier intervals are bootstrapped over images here, from boxes.parquet (raw: the logits and conf; "
               "calibrated: the deployed calibrator's scores), with det_calib.metrics.bootstrap_ci and each run's "
               "bootstrap settings. " + calibrators.INTERVAL_NOTE, "note"))


_METRICS = (("ece", "ECE"), ("laece", "LaECE"), ("nll", "NLL"), ("brier", "Brier"))

_Figure = tuple[float | None, tuple[float, float] | None]


def _all_box_figures(cols: list[_Col]) -> list[dict[str, tuple[_Figure, _Figure]]]:
    """Per run, each all-box metric raw and calibrated as ``(estimate, interval)``: ECE / LaECE with
    the run's intervals, NLL / Brier with the run's estimates and intervals bootstrapped here."""
    out = []
    for c in cols:
        ev = _eval(c.run, c.head)
        fig = {}
        for key, _ in _METRICS:
            pair = []
            for which in ("before", "after"):
                sc = ev.scores(which)
                v, ci = _num(getattr(sc, key)), _ci(getattr(sc, f"{key}_ci", None))
                if ci is None and key in ("nll", "brier") and v is not None:
                    ci = _boot_ci(c.run, c.hb, key, which)
                pair.append((v, ci))
            fig[key] = (pair[0], pair[1])
        out.append(fig)
    return out


def _compare_metric_rows(cols: list[_Col], figs: list[dict[str, tuple[_Figure, _Figure]]]) -> list[list[str]]:
    """ECE / LaECE / NLL / Brier of all boxes, every run raw and calibrated, with intervals."""
    out: list[list[str]] = []
    tags = [(_ece_tag(c.run), _laece_tag(c.run), c.run.settings.iou_match) for c in cols]
    same = len(set(tags)) == 1
    for key, label in _METRICS:
        row_tag = ""
        if same:
            t = tags[0]
            row_tag = {"ece": f" ({t[0]})", "laece": f" ({t[1]})"}.get(key, f" (IoU {t[2]:g})")
        out.append([label + row_tag] + [fci(*x) for f in figs for x in f[key]])
    return out


def _all_box_words(cols: list[_Col], figs: list[dict[str, tuple[_Figure, _Figure]]]) -> list[str]:
    return [separation_words(f"all-box {label}, calibrated",
                             [(c.name, *f[key][1]) for c, f in zip(cols, figs, strict=True)])
            for key, label in _METRICS]


# ------------------------------------------------------------------------------ reliability
def _kept_bins(conf: np.ndarray | None, correct: np.ndarray, t: float | None, n_bins: int) -> Any | None:
    """Reliability bins of the boxes kept at ``t`` (``conf > t``), binned as the kept-set ECE is."""
    if conf is None or t is None:
        return None
    keep = kept_mask(conf, t)
    return metrics.reliability_bins(conf[keep], correct[keep], n_bins=n_bins) if keep.any() else None


def _reliability(b: _Builder, cols: list[_Col]) -> None:
    b.add(Heading(2, "Reliability", "reliability"))
    lows = [c.low for c in cols if c.low is not None]
    if lows:
        kept = []
        for c in cols:
            ev, nb = _eval(c.run, c.head), c.run.settings.ece_bins
            o0, o1 = (_op_at(ev.operating_before, c.low), _op_at(ev.operating_after, c.low)) if c.low else (None,) * 2
            bins0 = _kept_bins(c.hb.conf, c.hb.correct, c.low, nb)
            bins1 = _kept_bins(c.hb.conf_after, c.hb.correct, c.low, nb)
            _check_kept(c, o0, bins0, "raw")
            _check_kept(c, o1, bins1, "calibrated")
            kept.append((c.title, bins0, bins1, *(f"kept at {fthr(c.low)}" + ("" if o is None else f": ECE {f4(o.ece)}")
                                                  for o in (o0, o1))))
        low = min(lows)
        png = plots.compare_reliability(kept, low=low, xlabel_suffix=" (boxes kept at each run's lowest conf)",
                                        title="At the operating point: reliability of the kept boxes, every run")
        b.fig("compare_operating_reliability", png,
              "Reliability of the boxes each run keeps at its lowest conf threshold ("
              + ", ".join(f"{c.name}: {fthr(c.low)}" for c in cols if c.low is not None)
              + "), raw and calibrated, every run on the same axes: fraction correct against mean confidence per "
              "non-empty bin, the bins of the kept-set ECE; below, boxes per bin (log scale). The legend's ECE is "
              "calibration.json's.", "Reliability of the kept boxes of every run, raw and calibrated")
    rel = []
    for c in cols:
        nb = c.run.settings.ece_bins
        ev = _eval(c.run, c.head)
        before = _bins(c.hb.conf, c.hb.correct, nb) if c.hb.n else None
        after = _bins(c.hb.conf_after, c.hb.correct, nb) if c.hb.n else None
        for w in _check_consistency(c.run, c.head, c.hb, before, after):
            b.add(Para(f"{c.name}: {w}", "warn"))
        rel.append((c.title, before, after, f"ECE {f4(ev.before.ece)}", f"ECE {f4(ev.after.ece)}"))
    tag_txt = " / ".join(f"{c.name}: {_ece_tag(c.run)}" for c in cols)
    png = plots.compare_reliability(rel, title="All boxes: reliability, raw and calibrated, every run on the same axes")
    b.fig("compare_reliability", png,
          f"Reliability of all boxes of every run on its evaluation split, down to the capture floor ({tag_txt}): "
          "fraction correct against mean confidence per non-empty bin; below, boxes per bin (log scale).",
          "Reliability of all boxes of every run, raw and calibrated")


def _check_kept(c: _Col, o: OperatingFigures | None, bins: Any, which: str) -> None:
    """Warn where the kept boxes of boxes.parquet do not give calibration.json's kept-set ECE."""
    want = None if o is None else _num(o.ece)
    if bins is None or want is None:
        return
    got = bins.ece()
    if math.isfinite(got) and abs(got - want) > 1e-6 + 1e-4 * abs(want):
        log.warning("%s: the boxes kept at conf %g give ECE %s %.4f, %s says %.4f", c.name, o.conf, which, got,
                    CALIBRATION_FILE, want)


# ------------------------------------------------------------------------------ per class
def _diff(x: Any, y: Any) -> float | None:
    x, y = _num(x), _num(y)
    return None if x is None or y is None else y - x


def _kept_count(r: ClassResult, t: float | None) -> int | None:
    sh = _shift_at(r.threshold_shift, t)
    return None if sh is None else sh.kept_after


def _per_class(b: _Builder, cols: list[_Col]) -> None:
    b.add(Heading(2, "Per-class calibration", "per-class"))
    per = [{str(r.name): r for r in _per_class_rows(c.run, c.head, c.hb)} for c in cols]
    names = list(dict.fromkeys(n for p in per for n in p))
    everywhere = [n for n in names if all(n in p for p in per)]
    partial = [n for n in names if n not in everywhere]
    order = everywhere + partial
    letters = [c.letter for c in cols]
    min_boxes = [c.run.settings.min_class_boxes for c in cols]
    lows = {fthr(c.low) for c in cols}
    low_txt = f"conf {next(iter(lows))}" if len(lows) == 1 else "each run's lowest conf"
    kept_vals = [[_num(p[n].kept_ece_after) if n in p else None for p in per] for n in order]
    kept_few = [[n in p and ((_kept_count(p[n], c.low) or 0) < mb or bool(p[n].few_boxes))
                 for p, c, mb in zip(per, cols, min_boxes, strict=True)] for n in order]
    all_vals = [[_num(p[n].ece_after) if n in p else None for p in per] for n in order]
    all_few = [[n in p and bool(p[n].few_boxes) for p in per] for n in order]
    png = plots.compare_class_heatmap(
        order, [c.name for c in cols],
        [plots.HeatPanel(f"Boxes kept at {low_txt}, calibrated", kept_vals, kept_few),
         plots.HeatPanel("All boxes, calibrated", all_vals, all_few)],
        label="ECE (lower is better)", title="Per-class ECE, classes × runs")
    b.fig("compare_per_class_heatmap", png,
          f"Per-class ECE of every run under its deployed calibrator: of the boxes kept at {low_txt} (left) and of "
          "all boxes (right), classes matched by name; hatched and grey: fewer boxes than the run's minimum "
          f"({', '.join(str(m) for m in dict.fromkeys(min_boxes))}; the kept-set cells count the kept boxes), so "
          "the value is noisy; 'absent': the run has no box of that class. Values are calibration.json's.",
          "Heatmap of per-class ECE, classes by runs")
    if len(cols) == 2:
        _difference_chart(b, cols, per, everywhere)
    _class_tables(b, cols, per, order, low_txt)
    if partial:
        b.add(Para("Not in every run: " + "; ".join(
            f"{n} (in {', '.join(x for x, p in zip(letters, per, strict=True) if n in p)})" for n in partial) + ".",
            "note"))


def _class_tables(b: _Builder, cols: list[_Col], per: list[dict[str, ClassResult]], order: list[str],
                  low_txt: str) -> None:
    """The per-class tables: all boxes (raw and calibrated ECE), then the boxes kept at the lowest conf."""
    letters = [c.letter for c in cols]
    prow, pcss = [], []
    empty = ClassResult()
    for n in order:
        rs = [p.get(n, empty) for p in per]
        have = [x for x, p in zip(letters, per, strict=True) if n in p]
        where = ("both" if len(cols) == 2 else "all") if len(have) == len(cols) else (
            f"{have[0]} only" if len(have) == 1 else ", ".join(have))
        few = any(bool(r.few_boxes) for r in rs)
        row = [f"{n} (few boxes)" if few else n, where] + [fint(r.boxes) for r in rs]
        row += [x for r in rs for x in (fci(r.ece_before, r.ece_before_ci), fci(r.ece_after, r.ece_after_ci))]
        if len(cols) == 2:
            row += [f4(_diff(rs[0].ece_before, rs[1].ece_before)), f4(_diff(rs[0].ece_after, rs[1].ece_after))]
        prow.append(row)
        pcss.append("few" if few else "")
    cols_ = ["Class", "In"] + [f"Boxes {x}" for x in letters]
    cols_ += [h for x in letters for h in (f"ECE {x} raw", f"ECE {x} calibrated")]
    if len(cols) == 2:
        cols_ += ["Δ raw (B − A)", "Δ calibrated (B − A)"]
    key = " · ".join(f"{x} = {c.title}" for x, c in zip(letters, cols, strict=True))
    b.add(Table(cols_, prow, caption=f"Per-class ECE of all boxes ({_ece_tag(cols[0].run)}) with 95% intervals; {key}",
                css="compare-per-class", row_css=pcss))
    krow = []
    for n in order:
        rs = [p.get(n) for p in per]
        row = [n]
        for r, c in zip(rs, cols, strict=True):
            sh = None if r is None else _shift_at(r.threshold_shift, c.low)
            row += ["absent", "n/a"] if r is None else [
                "n/a" if sh is None else _arrow(fint(sh.kept_before), fint(sh.kept_after)),
                _arrow(f4(r.kept_ece_before), f4(r.kept_ece_after))]
        krow.append(row)
    heads = [h for x in letters for h in (f"Kept {x} raw → calibrated", f"Kept-set ECE {x} raw → calibrated")]
    b.add(Table(["Class", *heads], krow, caption=f"Per-class ECE of the boxes kept at {low_txt}; {key}",
                css="compare-per-class-kept"))


def _difference_chart(b: _Builder, cols: list[_Col], per: list[dict[str, ClassResult]], both: list[str]) -> None:
    (ca, cb), (pa, pb) = cols, per
    chart = [(n, _diff(pa[n].ece_before, pb[n].ece_before), _diff(pa[n].ece_after, pb[n].ece_after),
              bool(pa[n].few_boxes or pb[n].few_boxes)) for n in both]
    only_a = [n for n in pa if n not in pb]
    only_b = [n for n in pb if n not in pa]
    foot = None
    if only_a or only_b:
        foot = f"Only in {ca.name}: {', '.join(only_a) or 'none'}. Only in {cb.name}: {', '.join(only_b) or 'none'}."
    png = plots.compare_per_class_chart(chart, xlabel=f"ECE({cb.name}) − ECE({ca.name})  (> 0: {cb.name} worse)",
                                        title=f"Per-class ECE difference, {cb.name} minus {ca.name}", footnote=foot)
    b.fig("compare_per_class_ece", png,
          f"Per-class ECE difference of all boxes ({_ece_tag(ca.run)}), {cb.name} minus {ca.name}, raw and calibrated, "
          "classes matched by name; hatched: fewer boxes than the minimum in either run.", "Per-class ECE differences")
    if foot:
        b.add(Para(foot, "note"))


# ------------------------------------------------------------------------------ the rest
def _settings(b: _Builder, cols: list[_Col]) -> None:
    docs = [c.run.result.to_dict() for c in cols]
    b.add(Heading(2, "Settings", "settings"))
    keys = [k for k in dict.fromkeys(k for d in docs for k in d) if k not in PER_HEAD_KEYS | {"temperature_fit"}]
    srows = [[k, *[_fmt_value(d.get(k)) for d in docs], "" if all(d.get(k) == docs[0].get(k) for d in docs)
              else "differs"] for k in keys]
    srows.append(["run directory", *[str(c.run.run_dir) for c in cols], ""])
    srows.append(["head", *[c.head for c in cols], ""])
    srows.append(["deployed calibrator", *[c.words for c in cols], ""])
    b.add(Table(["Setting", *[c.name for c in cols], ""], srows, caption="Settings of every run", css="settings",
                align_numbers=False))


def _thresholds(b: _Builder, cols: list[_Col]) -> None:
    """The tuned conf thresholds side by side (the first run against each other), when every run
    folder has a thresholds.json for its head."""
    from det_calib.thresholds.per_class import CRITERIA, THRESHOLDS_FILE, read_thresholds

    from .thresholds_section import compare_thresholds_table

    docs = []
    for c in cols:
        if not (c.run.run_dir / THRESHOLDS_FILE).is_file():
            return
        try:
            doc = read_thresholds(c.run.run_dir / THRESHOLDS_FILE)
        except InputError as e:
            b.add(Heading(2, "Conf thresholds", "thresholds"), Para(f"Not compared: {e}", "warn"))
            return
        if c.head not in doc["heads"]:
            return
        docs.append(doc)
    b.add(Heading(2, "Conf thresholds", "thresholds"))
    params = [d["heads"][c.head]["criteria"]["target_precision"]["params"] for d, c in zip(docs, cols, strict=True)]
    b.add(Para("Per-class conf thresholds of each run's thresholds.json (" + "; ".join(
        f"{c.name}: target precision {p['target_precision']:g}, delta {p['delta']:g}"
        for c, p in zip(cols, params, strict=True))
        + "), with the precision and recall each realises on its run's eval split. Classes are matched by name.",
        "note"))
    for k in range(1, len(cols)):
        for crit in CRITERIA:
            t = compare_thresholds_table(docs[0], docs[k], head_a=cols[0].head, head_b=cols[k].head,
                                         labels=(cols[0].name, cols[k].name), criterion=crit)
            b.add(dataclasses.replace(t, attrs={**t.attrs, "data-criterion": crit}))


def compare_runs(
    *runs: str | Path,
    out_dir: str | Path,
    labels: Sequence[str] | None = None,
) -> dict[str, Path]:
    """Compare the calibration of two or more runs (models, exports, heads of one run) side by side.

    Each run is a run directory, or ``run_dir:head`` to pick a head of a run with two heads
    (``compare_runs("out:nms", "out:e2e", out_dir="cmp")``); without a head, the first head every
    run has, else the run's first head. Any calibrator of ``calibrate`` (``none`` included) is
    compared; each run is labelled by its name and head and its deployed calibrator with its
    parameters in words. Writes ``compare.html`` (self-contained), ``compare.md`` and
    ``figures/compare_*.png`` into ``out_dir``: first the operating point (per run and ``--conf``,
    the kept set's ECE and LaECE_0, raw and calibrated, with intervals and the sampling floor,
    precision, recall and mAP), saying in words which differences the intervals cannot tell apart;
    then the all-box ECE / LaECE / NLL / Brier with 95% intervals; reliability diagrams of every
    run on one figure (the kept boxes, and all boxes); per-class ECE of every run (a classes x runs
    heatmap, classes matched by name, sparse ones marked); with two runs, the per-class
    differences; when every run folder has a ``thresholds.json`` for its head, the tuned conf
    thresholds side by side; every ``--method auto`` run's candidates.

    Args:
        runs: Two or more run directories, each optionally with ``:head``.
        out_dir: Output directory.
        labels: One display name per run; default ``<dir name>:<head>``.

    Returns:
        Written paths: ``"html"`` (compare.html), ``"md"`` (compare.md) and ``"figures/<name>.png"``.

    Raises:
        InputError: Fewer than two runs, a run missing or corrupt, an unknown head, or ``labels``
            not one distinct name per run.
    """
    if len(runs) < 2:
        raise InputError(f"Expected at least two runs to compare (RUN[:HEAD] RUN[:HEAD] ...), but got {len(runs)}")
    picked = _resolve(runs)
    names = _labels(picked, labels)
    cols = [_Col(name, x, run, head, run.eval_boxes(head), calibrators.deployed_words(run, head))
            for name, x, (run, head, _) in zip(names, _letters(len(names)), picked, strict=True)]
    b = _Builder()
    _summary(b, cols, [note for _, _, note in picked])
    if any(engine_record(c.run) is not None for c in cols):  # an export among the runs: the engines side by side
        engines_section(b, [(c.name, c.run, c.head) for c in cols])
    _reliability(b, cols)
    _per_class(b, cols)
    _thresholds(b, cols)
    for c in cols:
        calibrators.calibrators_section(b, c.run, {c.head: c.hb}, label=f": {c.name}", heads=[c.head])
    _settings(b, cols)
    return _write_page(Path(out_dir), "compare", "Calibration comparison: " + " vs ".join(names), b,
                       subtitle=", ".join(f"{c.letter} = {c.title}" for c in cols),
                       footer=" vs ".join(str(c.run.run_dir / CALIBRATION_FILE) for c in cols))

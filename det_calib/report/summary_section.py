"""The Summary section: each head's answer first (its deployed map, kept-set ECE against its floor, mAP),
then the details."""

from __future__ import annotations

from typing import Any

from det_calib.data.box_table import HEAD_LABEL
from det_calib.record.run_folder import HeadBoxes, Run
from det_calib.record.threshold_shift import ThresholdShift
from det_calib.report.record_words import operating_point_worse

from . import calibrators_section as calibrators
from .common import (
    arrow,
    ci_pair,
    ece_tag,
    eval_images_differ,
    f3,
    f4,
    fci,
    fint,
    fmt_value,
    fthr,
    head_eval,
    heads_label,
    laece_tag,
    map_sentence,
    num,
    op_at,
    per_class_rows,
    shift_at,
    shift_sentence,
    verdict,
    verdict_sentence,
    where_sentence,
)
from .context import ReportContext, Subject
from .document import Bullets, Heading, Para, Table
from .page import Page
from .reliability_section import kept_reliability_figure
from .separation import SEPARATION_NOTE, boot_ci, separation_words
from .verdict import answer_blocks

__all__ = ["summary_section"]

_DOCS_NOTE = (
    "How to read the report (the sampling floor, the intervals, kept-set and all-box figures): "
    "docs/report.md."
)


def summary_section(page: Page, ctx: ReportContext) -> None:
    """The Summary: in a report, each head's verdict and the figures it rests on (the first screen),
    then each head's kept-set reliability diagram, then the details; in a comparison, each run's answer
    line, then the runs side by side."""
    page.add(Heading(2, "Summary", "summary"))
    if ctx.compared:
        page.add(*(Para(_answer_line(s), "lead") for s in ctx.subjects))
        _compare_summary(page, list(ctx.subjects), [s.note for s in ctx.subjects])
        return
    for s in ctx.subjects:
        page.add(*answer_blocks(s))
    for w in ctx.warnings:
        page.add(Para(w, "warn"))
    for s in ctx.subjects:
        kept_reliability_figure(page, s)
    _report_summary(page, ctx.run, ctx.hbs, ctx.bins)


def _answer_line(s: Subject) -> str:
    """The answer for one head, in one line: the deployed map, the ECE of the boxes kept at each
    ``--conf`` raw → calibrated against its sampling floor (the ECE a perfectly calibrated detector
    scores on those boxes) and their LaECE_0 raw → calibrated against its own floor (both targets'
    figures; a ``--target iou`` run gives LaECE_0 first), and mAP50-95.

    Runs that predate the operating-point figures give the all-box ECE instead, named as such.
    """
    hr, ev = s.result, head_eval(s.run, s.head)
    t = s.run.temperature(s.head)
    if hr.calibrator is not None and hr.calibrator.method == "none":
        deployed = "raw scores kept (no calibrator)"
    elif hr.calibrator is not None:
        deployed = f"{s.words} deployed"
    else:
        deployed = f"temperature T = {f3(t)} deployed" if t is not None else "no calibrator"
    parts = [f"{s.name}: {deployed}"]
    iou = s.run.settings.target == "iou"
    for o0, o1 in zip(ev.operating_before, ev.operating_after, strict=False):
        ece = f"raw {f4(o0.ece)} → calibrated {f4(o1.ece)}"
        if o1.ece_floor is not None:
            ece += f", sampling floor {fci(o1.ece_floor, o1.ece_floor_range)}" + (
                " (at the floor)" if o1.at_floor else ""
            )
        la = f"raw {f4(o0.laece0)} → calibrated {f4(o1.laece0)}"
        if o1.laece_floor is not None:
            la += f", sampling floor {fci(o1.laece_floor, o1.laece_floor_range)}" + (
                " (at the floor)" if o1.laece_at_floor else ""
            )
        # the run's own target first (--target iou: LaECE_0), the other target's figure beside it
        parts += (
            [f"LaECE_0 of the boxes kept at conf {fthr(o0.conf)} (the target): {la}", f"ECE {ece}"]
            if iou
            else [f"ECE of the boxes kept at conf {fthr(o0.conf)}: {ece}", f"LaECE_0 {la}"]
        )
    if not ev.operating_before:
        parts.append(
            f"all-box ECE {f4(ev.before.ece)} → {f4(ev.after.ece)} (this run records no kept-set "
            "ECE)"
        )
    if ev.map_identical is True:
        parts.append(f"mAP50-95 {f4(ev.map50_95_before)} unchanged")
    else:
        parts.append(
            f"mAP50-95 {f4(ev.map50_95_before)} → {f4(ev.map50_95_after)}"
            + (" CHANGED" if ev.map_identical is False else "")
        )
    if operating_point_worse(ev, s.run.settings.target) is not None:
        parts.append("WORSE than the raw scores where decisions are made (below)")
    return "; ".join(parts) + "."


def _kept_cell(shifts: list[ThresholdShift], x: float) -> str:
    e = next((s for s in shifts if num(s.conf) == x), None)
    return arrow(fint(e.kept_before), fint(e.kept_after)) if e else "n/a"


def _report_summary(
    b: Page, run: Run, hbs: dict[str, HeadBoxes], bins: dict[str, tuple[Any, Any]]
) -> None:
    """The report's summary below the verdicts and the kept-set diagrams: each head's sentence, the
    operating-point table and the definitions, the run, the at-a-glance table and each head's findings."""
    st = run.settings
    tag = ece_tag(run)
    for h in run.heads:
        b.add(Para(f"{h}: {calibrators.lead(run, h)}"))
    op = calibrators.operating_table(run)
    if op is not None:
        b.add(
            op,
            Para(
                calibrators.FLOOR_NOTE + " " + calibrators.INTERVAL_NOTE + " " + _DOCS_NOTE, "note"
            ),
        )
    else:
        b.add(Para(_DOCS_NOTE, "note"))
    ev_split = st.eval_split or "n/a"
    rows = [
        ["Model", run.result.model or "n/a"],
        ["Data", run.result.data or "n/a"],
        ["Heads", heads_label(run)],
        ["Calibrator fitted on", f"split {st.fit_split or 'n/a'} (method {st.method})"],
        ["Evaluated on", f"split {ev_split} (every number and figure below)"],
        ["Classes", f"{len(run.class_names)}: " + ", ".join(run.class_names)],
    ]
    b.add(Table(["", ""], rows, css="run-info", align_numbers=False))
    thr = list(st.conf_thresholds)
    cols = [
        "Head",
        "Deployed",
        "T (fitted on every run)",
        "Raw scores",
        "All-box ECE raw [95% CI]",
        "All-box ECE calibrated [95% CI]",
        "mAP50-95 raw → calibrated",
    ]
    cols += [f"Kept at conf {fthr(x)} raw → calibrated" for x in thr]
    trows = []
    for h in run.heads:
        t, ev = run.temperature(h), head_eval(run, h)
        rec = run.head(h).calibrator
        tf = run.head(h).temperature_fit
        if t is None and tf is not None:
            t = tf.temperature
        shown = (rec.method if rec is not None else "temperature", f3(t), verdict(t))
        trows.append(
            [
                h,
                *shown,
                fci(ev.before.ece, ev.before.ece_ci),
                fci(ev.after.ece, ev.after.ece_ci),
                arrow(f4(ev.map50_95_before), f4(ev.map50_95_after)),
            ]
            + [_kept_cell(run.head(h).threshold_shift, x) for x in thr]
        )
    b.add(
        Table(
            cols,
            trows,
            caption=f"At a glance (ECE: {tag}; T > 1: raw scores too extreme, T < 1: too timid)",
            css="summary",
        )
    )
    for h in run.heads:
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        b.add(Bullets(_head_findings(run, h, hbs[h], bins[h][0], tag, ev_split)))


def _head_findings(
    run: Run, h: str, hb: HeadBoxes, before: Any, tag: str, ev_split: str
) -> list[str]:
    """The summary's bullet points for one head."""
    hr = run.head(h)
    ev = head_eval(run, h)
    method = hr.calibrator.method if hr.calibrator is not None else "temperature"
    items = [
        verdict_sentence(hr.temperature)
        if method == "temperature"
        else f"Calibrator: {calibrators.method_words(run, h)}."
    ]
    items.append(
        f"ECE ({tag}) on all {fint(ev.boxes)} boxes of split {ev.split or ev_split} down to conf "
        f"{fthr(run.settings.conf_floor)}: {fci(ev.before.ece, ev.before.ece_ci)} → "
        f"{fci(ev.after.ece, ev.after.ece_ci)} (95% image-bootstrap intervals)."
    )
    for e in ev.thresholded:
        items.append(
            f"ECE of the boxes above conf {fthr(e.conf)} ({tag}): {f4(e.ece_before)} "
            f"({fint(e.boxes_before)} boxes) → {f4(e.ece_after)} ({fint(e.boxes_after)} boxes)."
        )
    if before is not None and hb.n:
        items.append(where_sentence(before, "Where (raw scores)"))
    pcs = [
        r for r in per_class_rows(run, h, hb) if not r.few_boxes and num(r.ece_before) is not None
    ]
    pcs.sort(key=lambda r: -num(r.ece_before))
    if pcs:
        worst = ", ".join(f"{r.name} {f4(r.ece_before)} → {f4(r.ece_after)}" for r in pcs[:3])
        items.append(
            f"Least calibrated classes (raw ECE, {tag}; classes with few boxes left out): {worst}."
        )
    items.append(map_sentence(ev, method) if hr.eval is not None else "mAP: n/a.")
    items.extend(shift_sentence(e) for e in hr.threshold_shift)
    if not hr.threshold_shift:
        items.append("Kept-set shift: n/a.")
    return items


_METRIC_SETTINGS = ("ece_bins", "iou_match", "loc_iou_match", "laece_bins", "conf_floor", "splits")


def _thresholds_of(cols: list[Subject]) -> list[float]:
    """Every ``--conf`` of the runs, in order."""
    return sorted({float(t) for c in cols for t in c.run.settings.conf_thresholds})


def _headline(cols: list[Subject], thresholds: list[float]) -> str:
    """Both targets' kept-set figures, calibrated, run against run: ECE (``correct``) and LaECE_0 (``iou``),
    the figure of the runs' own target first."""
    parts = []
    figures = [("ece", "ECE"), ("laece0", "LaECE_0")]
    if all(c.run.settings.target == "iou" for c in cols):
        figures.reverse()
    for t in thresholds:
        for key, name in figures:
            items = []
            for c in cols:
                o = op_at(head_eval(c.run, c.head).operating_after, t)
                items.append(
                    (
                        c.name,
                        None if o is None else getattr(o, key),
                        None if o is None else getattr(o, f"{key}_ci"),
                    )
                )
            parts.append(
                separation_words(f"{name} of the boxes kept at conf {fthr(t)}, calibrated", items)
            )
    if not parts:
        parts.append(
            "No run records operating-point figures (kept-set ECE): rerun calibrate with this "
            "det_calib"
        )
    return "; ".join(parts) + "."


def _operating_table(cols: list[Subject], thresholds: list[float]) -> Table:
    """Kept-set calibration of every run at each threshold: one row per run, threshold and figure (ECE,
    LaECE_0), raw and calibrated with intervals and sampling floors (stacked, so that the table fits a 1400 px
    window; the same cells as :func:`~det_calib.report.calibrators_section.operating_cells`)."""
    st = cols[0].run.settings
    names = (f"ECE ({st.ece_bins} bins, IoU {st.iou_match:g})", f"LaECE_0 ({st.laece_bins} bins)")
    rows = []
    for c in cols:
        ev = head_eval(c.run, c.head)
        for t in thresholds:
            o0, o1 = op_at(ev.operating_before, t), op_at(ev.operating_after, t)
            if o0 is None or o1 is None:
                own = ", ".join(f"{x:g}" for x in c.run.settings.conf_thresholds)
                rows.append(
                    [c.title, fthr(t), f"not measured: this run's --conf is {own}", "", "", "", ""]
                )
                continue
            _, *cells = calibrators.operating_cells(o0, o1, raw_floor=True)
            for name, figure in zip(names, (cells[:4], cells[4:]), strict=True):
                rows.append([c.title, fthr(t), name, *figure])
    return Table(
        [
            "Run (deployed calibrator)",
            "Conf",
            "Figure (lower is better)",
            "Raw [95% CI]",
            "Sampling floor, raw (perfectly calibrated) [95% range]",
            "Calibrated [95% CI]",
            "Sampling floor, calibrated (perfectly calibrated) [95% range]",
        ],
        rows,
        caption="At the operating point: calibration of the boxes each run keeps at each conf threshold, "
        "raw and calibrated",
        css="compare-operating",
    )


def _detection_table(cols: list[Subject], thresholds: list[float]) -> Table:
    """What each run keeps at each threshold, raw and calibrated: boxes, precision, recall, and its mAP."""
    rows = []
    for c in cols:
        ev = head_eval(c.run, c.head)
        for t in thresholds:
            o0, o1 = op_at(ev.operating_before, t), op_at(ev.operating_after, t)
            sh = shift_at(c.result.threshold_shift, t)
            kept = "n/a" if o0 is None or o1 is None else f"{fint(o0.boxes)} → {fint(o1.boxes)}"
            pr = (
                ["n/a", "n/a"]
                if sh is None
                else [
                    arrow(f3(sh.precision_before), f3(sh.precision_after)),
                    arrow(f3(sh.recall_before), f3(sh.recall_after)),
                ]
            )
            rows.append(
                [c.title, fthr(t), kept, *pr, arrow(f4(ev.map50_95_before), f4(ev.map50_95_after))]
            )
    return Table(
        [
            "Run (deployed calibrator)",
            "Conf",
            "Boxes kept raw → calibrated",
            "Precision raw → calibrated",
            "Recall raw → calibrated",
            "mAP50-95 raw → calibrated",
        ],
        rows,
        caption="At the operating point: what each run keeps at each conf threshold, raw and calibrated",
        css="compare-detection",
    )


def _temperature_cell(c: Subject) -> str:
    """The temperature every run fits, whatever it deploys (older runs: the deployed one, if any)."""
    tf = c.result.temperature_fit
    t = c.run.temperature(c.head) if tf is None else tf.temperature
    if t is None:
        return "not in this run's record (it predates temperature_fit)"
    return f"T = {f3(t)} (raw scores {verdict(t)})" + (
        "; deployed" if c.run.temperature(c.head) is not None else ""
    )


def _compare_summary(b: Page, cols: list[Subject], notes: list[str]) -> None:
    """The comparison's summary below the answers: which runs, the operating point side by side with
    what the intervals can tell apart, every run's sentence, the all-box figures."""
    for n in notes:
        if n:
            b.add(Para(n, "note"))
    first = cols[0].run.result.to_dict()
    diffs = []
    for c in cols[1:]:
        d = c.run.result.to_dict()
        diffs += [
            f"{k} ({fmt_value(first.get(k))} in {cols[0].name} vs {fmt_value(d.get(k))} in "
            f"{c.name})"
            for k in _METRIC_SETTINGS
            if first.get(k) != d.get(k)
        ]
    if diffs:
        b.add(
            Para(
                "The runs differ in settings that change the metrics: "
                + "; ".join(diffs)
                + ". Compare their numbers with care.",
                "warn",
            )
        )
    other_images = eval_images_differ(cols)
    if other_images:
        b.add(Para(other_images + ".", "warn"))
    thresholds = _thresholds_of(cols)
    b.add(Para(_headline(cols, thresholds), "lead"))
    b.add(_operating_table(cols, thresholds))
    b.add(_detection_table(cols, thresholds))
    b.add(Para(calibrators.FLOOR_NOTE + " " + SEPARATION_NOTE, "note"))
    rows = []
    for c in cols:
        ev = head_eval(c.run, c.head)
        rows.append(
            [
                c.name,
                c.run.result.model or "n/a",
                c.run.result.data or "n/a",
                c.head,
                f"{c.hb.split or 'n/a'} ({fint(ev.images)} images, {fint(ev.boxes)} boxes)",
                c.words,
                _temperature_cell(c),
                arrow(f4(ev.map50_95_before), f4(ev.map50_95_after)),
                arrow(f4(ev.map50_before), f4(ev.map50_after)),
            ]
        )
    b.add(
        Table(
            [
                "Run",
                "Model",
                "Data",
                "Head",
                "Eval split",
                "Deployed calibrator",
                "Temperature (fitted on every run)",
                "mAP50-95 raw → calibrated",
                "mAP50 raw → calibrated",
            ],
            rows,
            caption="Runs compared",
            css="compare-runs",
        )
    )
    for c in cols:
        b.add(Para(f"{c.name}: {calibrators.lead(c.run, c.head)}"))
    figs = _all_box_figures(cols)
    b.add(
        Table(
            [
                "All boxes (lower is better)",
                "Run (deployed calibrator)",
                "Raw [95% CI]",
                "Calibrated [95% CI]",
            ],
            _compare_metric_rows(cols, figs),
            caption="All boxes down to the capture floor: calibration metrics with 95% image-bootstrap intervals",
            css="compare-metrics",
        )
    )
    b.add(
        Para(
            "All-box figures, named as such (every box down to the capture floor, most of them far "
            "below any "
            "deployment threshold): "
            + "; ".join(_all_box_words(cols, figs))
            + ". "
            + SEPARATION_NOTE,
            "",
        )
    )
    b.add(
        Para(
            "ECE and LaECE values and intervals, and NLL and Brier values, are those of "
            "calibration.json; NLL and "
            "Brier intervals are bootstrapped over images here, from boxes.parquet (raw: the "
            "logits and conf; "
            "calibrated: the deployed calibrator's scores), with det_calib.metrics.bootstrap_ci "
            "and each run's "
            "bootstrap settings. " + calibrators.INTERVAL_NOTE,
            "note",
        )
    )


_METRICS = (("ece", "ECE"), ("laece", "LaECE"), ("nll", "NLL"), ("brier", "Brier"))


_Figure = tuple[float | None, tuple[float, float] | None]


def _all_box_figures(cols: list[Subject]) -> list[dict[str, tuple[_Figure, _Figure]]]:
    """Per run, each all-box metric raw and calibrated as ``(estimate, interval)``: ECE / LaECE with
    the run's intervals, NLL / Brier with the run's estimates and intervals bootstrapped here."""
    out = []
    for c in cols:
        ev = head_eval(c.run, c.head)
        fig = {}
        for key, _ in _METRICS:
            pair = []
            for which in ("before", "after"):
                sc = ev.scores(which)
                v, ci = num(getattr(sc, key)), ci_pair(getattr(sc, f"{key}_ci", None))
                if ci is None and key in ("nll", "brier") and v is not None:
                    ci = boot_ci(c.run, c.hb, key, which)
                pair.append((v, ci))
            fig[key] = (pair[0], pair[1])
        out.append(fig)
    return out


def _compare_metric_rows(
    cols: list[Subject], figs: list[dict[str, tuple[_Figure, _Figure]]]
) -> list[list[str]]:
    """ECE / LaECE / NLL / Brier of all boxes, one row per metric and run, raw and calibrated, with intervals."""
    out: list[list[str]] = []
    tags = [(ece_tag(c.run), laece_tag(c.run), c.run.settings.iou_match) for c in cols]
    same = len(set(tags)) == 1
    for key, label in _METRICS:
        row_tag = ""
        if same:
            t = tags[0]
            row_tag = {"ece": f" ({t[0]})", "laece": f" ({t[1]})"}.get(key, f" (IoU {t[2]:g})")
        out += [
            [label + row_tag, c.title, *(fci(*x) for x in f[key])]
            for c, f in zip(cols, figs, strict=True)
        ]
    return out


def _all_box_words(
    cols: list[Subject], figs: list[dict[str, tuple[_Figure, _Figure]]]
) -> list[str]:
    return [
        separation_words(
            f"all-box {label}, calibrated",
            [(c.name, *f[key][1]) for c, f in zip(cols, figs, strict=True)],
        )
        for key, label in _METRICS
    ]

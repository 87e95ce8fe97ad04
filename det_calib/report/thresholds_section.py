"""The report section on tuned conf thresholds: per-class precision-recall curves and a table.

:func:`thresholds_section` reads a run folder's ``thresholds.json`` (written by
:func:`det_calib.thresholds.per_class.tune_run`) and its boxes through one view
(:func:`det_calib.thresholds.thresholds_view`: the typed rows and the per-class curves), and returns the
section as report blocks plus the PNG figures they reference (``{name: png}``, to be written as
``figures/<name>.png``), so the caller decides where the section goes in the report:

>>> from det_calib.report.thresholds_section import thresholds_section
>>> blocks, figures = thresholds_section("runs/calib")  # doctest: +SKIP

Figures are drawn with matplotlib's Agg canvas directly (no pyplot), as in
:mod:`det_calib.report.plots`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from det_calib.errors import DetCalibError, InputError
from det_calib.record.run_folder import Run
from det_calib.record.run_result import RunResult
from det_calib.report.context import ReportContext, Subject
from det_calib.report.document import Block, Fig, Heading, Para, Table
from det_calib.report.page import Page
from det_calib.report.plots import RC, to_png
from det_calib.thresholds import THRESHOLDS_FILE, ThresholdsView, thresholds_view

__all__ = ["conf_thresholds_section", "thresholds_section"]

_LABELS = {"target_precision": "target precision", "max_f1": "max F1", "lrp": "LRP-optimal"}
_MARKERS = {
    "target_precision": ("o", "#CC3311"),
    "max_f1": ("s", "#009988"),
    "lrp": ("D", "#EE7733"),
}
_EVAL_COLOR = "#0077BB"
_FIT_COLOR = "#999999"


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def _split(f: Any) -> tuple[Any, Any, Any, Any]:
    """``(precision, recall, kept, coverage)`` of a threshold's figures on a split (None: not there)."""
    return (None,) * 4 if f is None else (f.precision, f.recall, f.kept, f.coverage)


def _pr_threshold_figure(
    panels: Sequence[dict[str, Any]], *, title: str, target: float | None, criteria: Sequence[str]
) -> bytes:
    """A grid of per-class precision-recall curves with the chosen thresholds marked.

    Args:
        panels: One dict per panel: ``title``; ``eval`` and ``fit``: ``(precision, recall)``
            arrays over the threshold grid (either may be None); ``marks``: ``{criterion:
            (recall, precision, threshold)}`` on the eval curve (entries may be None).
        title: Figure title.
        target: Target precision, drawn as a horizontal line.
        criteria: The criteria whose markers the legend shows.

    Returns:
        PNG bytes.
    """
    n = len(panels)
    cols = min(4, max(1, n))
    rows = max(1, math.ceil(n / cols))
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(3.0 * cols, 2.7 * rows + 0.8))
        axes = fig.subplots(rows, cols, squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i >= n:
                ax.set_visible(False)
                continue
            p = panels[i]
            if p.get("fit") is not None:
                pr, rc = p["fit"]
                ax.plot(rc, pr, color=_FIT_COLOR, lw=1, ls="--")
            if p.get("eval") is not None:
                pr, rc = p["eval"]
                ax.plot(rc, pr, color=_EVAL_COLOR, lw=1.4)
            if target is not None:
                ax.axhline(target, color="#444444", lw=0.8, ls=":")
            for crit, mark in (p.get("marks") or {}).items():
                if mark is None or mark[0] is None or mark[1] is None:
                    continue
                m, col = _MARKERS[crit]
                ax.plot(
                    [mark[0]],
                    [mark[1]],
                    marker=m,
                    color=col,
                    ms=6,
                    ls="none",
                    mec="black",
                    mew=0.5,
                    zorder=5,
                )
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.02)
            ax.set_title(p["title"])
            ax.set_xlabel("recall")
            ax.set_ylabel("precision")
        handles = [
            Line2D([], [], color=_EVAL_COLOR, lw=1.4, label="eval split"),
            Line2D(
                [], [], color=_FIT_COLOR, lw=1, ls="--", label="fit split (thresholds chosen here)"
            ),
        ]
        if target is not None:
            handles.append(
                Line2D(
                    [], [], color="#444444", lw=0.8, ls=":", label=f"target precision {target:g}"
                )
            )
        handles += [
            Line2D(
                [],
                [],
                marker=_MARKERS[c][0],
                color=_MARKERS[c][1],
                mec="black",
                mew=0.5,
                ls="none",
                label=f"{_LABELS[c]} threshold (on eval)",
            )
            for c in criteria
        ]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
        fig.suptitle(title)
        fig.tight_layout(rect=(0, 0.09 if rows > 1 else 0.16, 1, 0.96))
        return to_png(fig)


def thresholds_section(
    run_dir: str | Path,
    *,
    doc: Mapping[str, Any] | None = None,
    heads: Sequence[str] | None = None,
    score: Any = None,
    level: int = 2,
    result: RunResult | None = None,
) -> tuple[list[Block], dict[str, bytes]]:
    """Build the "Conf thresholds" section of a run's report.

    Args:
        run_dir: The run folder (``boxes.parquet``, ``calibration.json``, ``thresholds.json``).
        doc: The thresholds document; default read from ``run_dir/thresholds.json``.
        heads: Heads to show (default every head in the document).
        score: The score used when tuning, if it was not the run's temperature (see
            :func:`det_calib.thresholds.per_class.tune_run`).
        level: Heading level of the section title.
        result: The run's record, when the caller holds it (the run being written, whose
            ``calibration.json`` comes last); None reads it from ``run_dir``.

    Returns:
        ``(blocks, figures)``: report blocks (:mod:`det_calib.report.document`) and the PNGs
        they reference, ``{name: png bytes}`` (``figures/<name>.png``).
    """
    return _section_blocks(
        thresholds_view(run_dir, doc=doc, heads=heads, score=score, result=result), level
    )


def _section_blocks(view: ThresholdsView, level: int = 2) -> tuple[list[Block], dict[str, bytes]]:
    """The section of :func:`thresholds_section` from the view of the run's thresholds."""
    blocks: list[Block] = [Heading(level, "Conf thresholds", anchor="thresholds")]
    figures: dict[str, bytes] = {}
    for head in view.heads:
        blocks.append(Heading(level + 1, f"Head {head}", anchor=f"thresholds-{head}"))
        blocks += _head_notes(view, head)
        blocks.append(_head_table(view, head))
        blocks += _risk_blocks(head, view.file.heads[head].risk_control)
        blocks += _head_figure(view, head, figures)
    return blocks, figures


def _head_notes(view: ThresholdsView, head: str) -> list[Block]:
    """What the thresholds promise, how they did on the eval split, which classes are not certified."""
    tf, hd = view.file, view.file.heads[head]
    tp = hd.criteria["target_precision"]
    prm = tp.params
    target, delta = float(prm["target_precision"]), float(prm["delta"])
    out: list[Block] = [
        Para(
            f"Thresholds on the calibrated conf ({hd.score_formula}), chosen on `{tf.fit_split}` "
            f"and checked on `{tf.eval_split}`. Target precision {target:g} with delta {delta:g}: "
            + (
                "each certified class's mean precision of the images that keep a box is at least "
                f"{target:g} on new images with probability at least {1 - delta:g} over the fit "
                "images (fixed-sequence Hoeffding-Bentkus tests on the images' false discovery "
                "proportions, from high to low thresholds"
                if prm["unit"] == "image"
                else f"each certified class's pooled precision is at least {target:g} with "
                f"probability at least {1 - delta:g} if boxes were independent draws, no guarantee "
                "over images (fixed-sequence exact binomial tests from high to low thresholds"
            )
            + f"; classes are certified one by one, so about {delta:g} x the number of "
            "certified classes may miss). Max-F1 and LRP-optimal (tau 0.5) are point choices with "
            "no guarantee.",
            kind="lead",
        )
    ]
    val = tp.validation
    if val:
        miss = val.classes_missing_target
        text = (
            f"On `{tf.eval_split}`: {val.classes_meeting_target} of {val.certified_classes} "
            f"certified classes reach {target:g}"
        )
        text += (
            f"; missing: {', '.join(miss)} ({len(miss)} miss, about {val.expected_misses:.1f} "
            "expected "
            f"from delta)."
            if miss
            else "."
        )
        g_cov = tp.global_.eval.coverage if tp.global_.eval else None
        text += (
            f" Coverage over {val.n_boot} image-bootstrap resamples of `{tf.eval_split}` "
            f"(fraction of resamples whose precision reaches {target:g}): global threshold "
            f"{_fmt(g_cov)}, all certified classes at once "
            f"{_fmt(val.coverage_all_certified)}; per class in the table."
        )
        out.append(Para(text, kind="warn" if len(miss) > max(1.0, 2 * val.expected_misses) else ""))
    flagged = [r for r in tp.per_class if r.flag]
    if flagged:
        out.append(
            Para(
                "Not certified: "
                + "; ".join(
                    f"{r.name} ({r.flag_words}; uses "
                    + (
                        f"the global threshold {r.threshold:.3f}"
                        if r.fallback == "global"
                        else "threshold 1: no box kept"
                    )
                    + ")"
                    for r in flagged
                ),
                kind="warn",
            )
        )
    return out


def _risk_blocks(head: str, rc: Any) -> list[Block]:
    """The risk-controlled thresholds (``det-calib thresholds --target-recall ...``): each guarantee and
    what it costs (the certified threshold beside the fit split's own plug-in choice); ``rc``: the head's
    ``risk_control`` record, None when the file has none."""
    if rc is None:
        return []
    kind = (
        f"with probability at least {1 - rc.delta:g} over the fit images"
        if rc.guarantee == "probability"
        else "in expectation over fit and new images (conformal risk control; precision at delta)"
    )
    rows = [
        [
            r.name,
            _fmt(r.threshold)
            + (
                ""
                if r.certified
                else f" (cannot certify: {(r.flag or '').replace('_', ' ')} -> {r.fallback})"
            ),
            _fmt(r.plug_in_threshold),
            _fmt(r.cost),
            _fmt(r.eval_precision),
            _fmt(r.eval_recall_per_image),
            _fmt(r.eval_fp_per_image),
        ]
        for r in rc.rows
    ]
    return [
        Para(
            f"Risk-controlled thresholds, head {head}: {rc.asked}, {kind}; per-image risks, the "
            "image is "
            "the unit. Cost: the certified threshold's distance from the fit split's own (plug-in) "
            "choice."
        ),
        Table(
            ["class", "threshold", "plug-in", "cost", "eval P", "eval R/image", "eval FP/image"],
            rows,
            caption=f"Risk-controlled thresholds, head {head}",
            css="risk-thresholds",
            attrs={"data-head": head},
        ),
    ]


def _row_cells(first: str, rr: Mapping[str, Any], per_image: bool) -> list[str]:
    """One table row (``rr``: criterion -> its row): the target-precision threshold and its figures,
    then max-F1's and LRP's; ``per_image``: the precision cells are the mean precision of the images
    that keep a box (what the image-level guarantee is about), the eval one beside the pooled one."""
    t = rr["target_precision"]
    precision, recall, kept, coverage = _split(t.eval)
    tag = (
        ""
        if t.certified
        else " (not certified: "
        + ("the global threshold" if t.fallback == "global" else "no box kept")
        + ")"
    )
    lb = f" ({_fmt(t.precision_lower)})" if t.precision_lower is not None else ""
    fit_p = None if t.fit is None else t.fit.precision_per_image if per_image else t.fit.precision
    eval_p = _fmt(precision)
    if per_image:
        eval_p = f"{_fmt(t.eval.precision_per_image if t.eval else None)} / {eval_p}"
    cells = [
        first,
        _fmt(t.threshold) + tag,
        _fmt(fit_p) + lb,
        eval_p,
        _fmt(recall),
        "n/a" if kept is None else str(kept),
        _fmt(coverage),
    ]
    for c in ("max_f1", "lrp"):
        r = rr[c]
        e = _split(r.eval)
        cells += [_fmt(r.threshold), f"{_fmt(e[0])} / {_fmt(e[1])}"]
    return cells


def _head_table(view: ThresholdsView, head: str) -> Table:
    per_image = view.file.heads[head].criteria["target_precision"].params["unit"] == "image"
    columns = [
        "class",
        "certified thr",
        "fit P per image (lower bound)" if per_image else "fit P (lower bound)",
        "eval P per image / pooled" if per_image else "eval P",
        "eval R",
        "eval kept",
        "coverage",
        "max-F1 thr",
        "eval P / R",
        "LRP thr",
        "eval P / R",
    ]
    rows = view.rows(head)
    rows_out = [_row_cells(name, rr, per_image) for name, rr in rows]
    row_css = [""] + ["few" if rr["target_precision"].flag else "" for _, rr in rows[1:]]
    return Table(
        columns,
        rows_out,
        caption=f"Thresholds per class, head {head}",
        css="thresholds",
        attrs={"data-head": head},
        row_css=row_css,
    )


def _head_figure(view: ThresholdsView, head: str, figures: dict[str, bytes]) -> list[Block]:
    """Precision-recall per class on eval (and fit), the thresholds marked (added to ``figures``)."""
    curves = view.curves[head]
    if isinstance(curves, str):  # the table stands on its own; say why the figure is missing
        return [Para(f"No precision-recall figure: {curves}", kind="note")]
    panels = [{"title": c.name, "marks": c.marks, "fit": c.fit, "eval": c.eval} for c in curves]
    name = f"thresholds_pr_{head}"
    target = float(view.file.heads[head].criteria["target_precision"].params["target_precision"])
    figures[name] = _pr_threshold_figure(
        panels,
        title=f"Precision-recall per class, head {head}",
        target=target,
        criteria=view.criteria,
    )
    tf = view.file
    return [
        Fig(
            name,
            figures[name],
            caption=(
                f"Precision against recall as the threshold moves, per class (blue: "
                f"{tf.eval_split}, grey dashed: {tf.fit_split}); markers: the chosen "
                "thresholds' precision and recall on the eval split; dotted: the target."
            ),
            alt=f"per-class precision-recall curves of head {head} with tuned thresholds",
        )
    ]


def _compare_thresholds_table(
    view_a: ThresholdsView,
    view_b: ThresholdsView,
    *,
    head_a: str = "nms",
    head_b: str | None = None,
    labels: Sequence[str] = ("A", "B"),
    criterion: str = "target_precision",
) -> Table:
    """Two runs' (or two heads') thresholds of one criterion side by side, per class.

    Classes are matched by name. Cells: threshold (flag), and eval precision / recall.
    """
    head_b = head_b or head_a
    ca = view_a.file.heads[head_a].criteria[criterion]
    cb = view_b.file.heads[head_b].criteria[criterion]
    rows_a, rows_b = ca.by_name(), cb.by_name()

    def cells(r: Any) -> list[str]:
        if r is None:
            return ["n/a", "n/a"]
        precision, recall, _, _ = _split(r.eval)
        flag = f" ({r.flag_words})" if r.flag else ""
        return [_fmt(r.threshold) + flag, f"{_fmt(precision)} / {_fmt(recall)}"]

    la, lb = labels
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    body = [["all classes (global)", *cells(ca.global_), *cells(cb.global_)]]
    body += [[n, *cells(rows_a.get(n)), *cells(rows_b.get(n))] for n in names]
    return Table(
        ["class", f"{la} threshold", f"{la} eval P / R", f"{lb} threshold", f"{lb} eval P / R"],
        body,
        caption=f"{_LABELS.get(criterion, criterion)} thresholds, {la} vs {lb}",
        css="compare-thresholds",
    )


def conf_thresholds_section(page: Page, ctx: ReportContext) -> None:
    """The Conf thresholds section, when the run folder has a thresholds.json (a report: per head; a
    comparison: when every run folder has one for its head, side by side)."""
    if ctx.compared:
        _compare_thresholds(page, list(ctx.subjects))
    else:
        _report_thresholds(
            page, ctx.run, Path(ctx.folder if ctx.folder is not None else ctx.run.run_dir)
        )


def _report_thresholds(b: Page, run: Run, folder: Path) -> None:
    """The "Conf thresholds" section, when the run folder has a thresholds.json (det_calib.thresholds.per_class)."""
    if not (folder / THRESHOLDS_FILE).is_file():
        return
    try:
        tf = thresholds_view(folder, curves=False).file
        heads = [h for h in run.heads if h in tf.heads]
        view = thresholds_view(folder, doc=tf, heads=heads, result=run.result)
        blocks, figures = _section_blocks(view)
    except (
        DetCalibError,
        KeyError,
        TypeError,
    ) as e:  # an optional file: the rest of the report stands
        b.add(
            Heading(2, "Conf thresholds", "thresholds"),
            Para(f"{THRESHOLDS_FILE} could not be shown: {e}", "warn"),
        )
        return
    for h in heads:
        t_doc, t_run = tf.heads[h].temperature, run.temperature(h)
        if t_doc is not None and t_run is not None and not math.isclose(t_doc, t_run, rel_tol=1e-9):
            blocks.insert(
                1,
                Para(
                    f"Head {h}: {THRESHOLDS_FILE} was tuned with T = {t_doc:.4f}, this run has "
                    f"T = {t_run:.4f}; rerun `det-calib thresholds` on this run.",
                    "warn",
                ),
            )
    b.add(*blocks)  # the figures come with their Fig blocks


def _compare_thresholds(b: Page, cols: list[Subject]) -> None:
    """The tuned conf thresholds side by side (the first run against each other), when every run
    folder has a thresholds.json for its head."""
    views = []
    for c in cols:
        if not (c.run.run_dir / THRESHOLDS_FILE).is_file():
            return
        try:
            view = thresholds_view(c.run.run_dir, curves=False)
        except InputError as e:
            b.add(Heading(2, "Conf thresholds", "thresholds"), Para(f"Not compared: {e}", "warn"))
            return
        if c.head not in view.file.heads:
            return
        views.append(view)
    b.add(Heading(2, "Conf thresholds", "thresholds"))
    params = [
        v.file.heads[c.head].criteria["target_precision"].params
        for v, c in zip(views, cols, strict=True)
    ]
    b.add(
        Para(
            "Per-class conf thresholds of each run's thresholds.json ("
            + "; ".join(
                f"{c.name}: target precision {p['target_precision']:g}, delta {p['delta']:g}"
                for c, p in zip(cols, params, strict=True)
            )
            + "), with the precision and recall each realises on its run's eval split. Classes "
            "are matched by name.",
            "note",
        )
    )
    for k in range(1, len(cols)):
        for crit in views[0].criteria:
            t = _compare_thresholds_table(
                views[0],
                views[k],
                head_a=cols[0].head,
                head_b=cols[k].head,
                labels=(cols[0].name, cols[k].name),
                criterion=crit,
            )
            b.add(dataclasses.replace(t, attrs={**t.attrs, "data-criterion": crit}))

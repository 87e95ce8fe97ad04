"""The report section on tuned conf thresholds: per-class precision-recall curves and a table.

:func:`thresholds_section` reads a run folder's ``thresholds.json`` (written by
:func:`det_calib.thresholds.per_class.tune_run`) and its boxes, and returns the section as report blocks plus
the PNG figures they reference (``{name: png}``, to be written as ``figures/<name>.png``), so
the caller decides where the section goes in the report:

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
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from det_calib.errors import DetCalibError, InputError
from det_calib.record.run_folder import Run
from det_calib.record.run_result import RunResult
from det_calib.report.context import ReportContext, Subject
from det_calib.report.document import Block, Fig, Heading, Para, Table
from det_calib.report.page import Page
from det_calib.report.plots import RC, to_png
from det_calib.thresholds.per_class import (
    CRITERIA,
    THRESHOLDS_FILE,
    counts_by_image,
    load_head,
    read_thresholds,
)
from det_calib.thresholds.thresholds_file import (
    HeadThresholds,
    RiskControl,
    SplitFigures,
    ThresholdRow,
    ThresholdsFile,
)

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


def _curve(
    score: np.ndarray, correct: np.ndarray, image_id: np.ndarray, n_gt: int, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    c = counts_by_image(score, correct, image_id, grid=grid, n_gt=n_gt)
    n, k = c.n, c.k
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        rec = k / n_gt if n_gt else np.full(len(grid), np.nan)
    return prec, rec


def _pr_threshold_figure(
    panels: Sequence[dict[str, Any]], *, title: str, target: float | None
) -> bytes:
    """A grid of per-class precision-recall curves with the chosen thresholds marked.

    Args:
        panels: One dict per panel: ``title``; ``eval`` and ``fit``: ``(precision, recall)``
            arrays over the threshold grid (either may be None); ``marks``: ``{criterion:
            (recall, precision, threshold)}`` on the eval curve (entries may be None).
        title: Figure title.
        target: Target precision, drawn as a horizontal line.

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
            for c in CRITERIA
        ]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
        fig.suptitle(title)
        fig.tight_layout(rect=(0, 0.09 if rows > 1 else 0.16, 1, 0.96))
        return to_png(fig)


def _marks(
    rows: Mapping[str, ThresholdRow],
) -> dict[str, tuple[float | None, float | None, float] | None]:
    return {
        crit: (r.eval.recall, r.eval.precision, r.threshold) if r.eval else None
        for crit, r in rows.items()
    }


def thresholds_section(
    run_dir: str | Path,
    *,
    doc: Mapping[str, Any] | ThresholdsFile | None = None,
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
    tf = ThresholdsFile.of(read_thresholds(Path(run_dir)) if doc is None else doc)
    blocks: list[Block] = [Heading(level, "Conf thresholds", anchor="thresholds")]
    figures: dict[str, bytes] = {}
    for head in heads or list(tf.heads):
        hd = tf.heads[head]
        blocks.append(Heading(level + 1, f"Head {head}", anchor=f"thresholds-{head}"))
        blocks += _head_notes(tf, hd)
        blocks.append(_head_table(head, hd))
        blocks += _risk_blocks(head, hd.risk_control)
        blocks += _head_figure(run_dir, head, hd, tf, score, figures, result)
    return blocks, figures


def _head_notes(tf: ThresholdsFile, hd: HeadThresholds) -> list[Block]:
    """What the thresholds promise, how they did on the eval split, which classes are not certified."""
    tp = hd.criteria["target_precision"]
    prm = tp.params
    target, delta = float(prm["target_precision"]), float(prm["delta"])
    out: list[Block] = [
        Para(
            f"Thresholds on the calibrated conf ({hd.score_formula}), chosen on `{tf.fit_split}` "
            f"and checked on `{tf.eval_split}`. Target precision {target:g} with delta {delta:g}: "
            "each "
            f"certified class's precision on new images is at least {target:g} with probability at "
            "least "
            f"{1 - delta:g} (fixed-sequence exact binomial tests from high to low thresholds, "
            f"{prm['unit']}-level; classes are certified one by one, so about {delta:g} x the "
            "number of "
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


def _risk_blocks(head: str, rc: RiskControl | None) -> list[Block]:
    """The risk-controlled thresholds (``det-calib thresholds --target-recall ...``): each guarantee and
    what it costs (the certified threshold beside the fit split's own plug-in choice)."""
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


def _row_cells(first: str, rr: Mapping[str, ThresholdRow]) -> list[str]:
    """One table row: the target-precision threshold and its figures, then max-F1's and LRP's."""
    t = rr["target_precision"]
    ev = t.eval or SplitFigures()
    tag = "" if t.certified else f" ({t.flag_words} -> {t.fallback})"
    lb = f" ({_fmt(t.precision_lower)})" if t.precision_lower is not None else ""
    cells = [
        first,
        _fmt(t.threshold) + tag,
        _fmt(t.fit.precision if t.fit else None) + lb,
        _fmt(ev.precision),
        _fmt(ev.recall),
        "n/a" if ev.kept is None else str(ev.kept),
        _fmt(ev.coverage),
    ]
    for c in ("max_f1", "lrp"):
        r = rr[c]
        e = r.eval or SplitFigures()
        cells += [_fmt(r.threshold), f"{_fmt(e.precision)} / {_fmt(e.recall)}"]
    return cells


def _head_table(head: str, hd: HeadThresholds) -> Table:
    crit = hd.criteria
    by_cls = {c: crit[c].by_class() for c in CRITERIA}
    columns = [
        "class",
        "target-P thr",
        "fit P (lower bound)",
        "eval P",
        "eval R",
        "eval kept",
        "coverage",
        "max-F1 thr",
        "eval P / R",
        "LRP thr",
        "eval P / R",
    ]
    rows_out = [_row_cells("all classes (global)", {c: crit[c].global_ for c in CRITERIA})]
    row_css = [""]
    for cls_id, r in by_cls["target_precision"].items():
        rows_out.append(_row_cells(r.name, {c: by_cls[c][cls_id] for c in CRITERIA}))
        row_css.append("few" if r.flag else "")
    return Table(
        columns,
        rows_out,
        caption=f"Thresholds per class, head {head}",
        css="thresholds",
        attrs={"data-head": head},
        row_css=row_css,
    )


def _head_figure(
    run_dir: str | Path,
    head: str,
    hd: HeadThresholds,
    tf: ThresholdsFile,
    score: Any,
    figures: dict[str, bytes],
    result: RunResult | None = None,
) -> list[Block]:
    """Precision-recall per class on eval (and fit), the thresholds marked (added to ``figures``)."""
    try:
        rh = load_head(run_dir, head=head, score=score, count_gt=False, result=result)
    except DetCalibError as e:  # the table stands on its own; say why the figure is missing
        return [Para(f"No precision-recall figure: {e}", kind="note")]
    by_cls = {c: hd.criteria[c].by_class() for c in CRITERIA}
    grid = np.round(np.arange(1000) / 1000.0, 3)
    panels = []
    for cls_id, r in by_cls["target_precision"].items():
        p: dict[str, Any] = {
            "title": r.name,
            "marks": _marks({c: by_cls[c][cls_id] for c in CRITERIA}),
        }
        for part, df, s, figs in (
            ("fit", rh.fit, rh.fit_score, r.fit),
            ("eval", rh.eval, rh.eval_score, r.eval),
        ):
            if df is None or figs is None:
                p[part] = None
                continue
            m = df["cls"].to_numpy() == cls_id
            p[part] = _curve(
                s[m],
                df["correct"].to_numpy()[m],
                df["image_id"].to_numpy()[m],
                int(figs.n_gt or 0),
                grid,
            )
        panels.append(p)
    name = f"thresholds_pr_{head}"
    target = float(hd.criteria["target_precision"].params["target_precision"])
    figures[name] = _pr_threshold_figure(
        panels, title=f"Precision-recall per class, head {head}", target=target
    )
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
    doc_a: Mapping[str, Any] | ThresholdsFile,
    doc_b: Mapping[str, Any] | ThresholdsFile,
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
    ca = ThresholdsFile.of(doc_a).heads[head_a].criteria[criterion]
    cb = ThresholdsFile.of(doc_b).heads[head_b].criteria[criterion]
    rows_a, rows_b = ca.by_name(), cb.by_name()

    def cells(r: ThresholdRow | None) -> list[str]:
        if r is None:
            return ["n/a", "n/a"]
        ev = r.eval or SplitFigures()
        flag = f" ({r.flag_words})" if r.flag else ""
        return [_fmt(r.threshold) + flag, f"{_fmt(ev.precision)} / {_fmt(ev.recall)}"]

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
        doc = read_thresholds(folder / THRESHOLDS_FILE)
        heads = [h for h in run.heads if h in doc["heads"]]
        blocks, figures = thresholds_section(folder, doc=doc, heads=heads, result=run.result)
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
        t_doc, t_run = doc["heads"][h].get("score", {}).get("temperature"), run.temperature(h)
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
    params = [
        d["heads"][c.head]["criteria"]["target_precision"]["params"]
        for d, c in zip(docs, cols, strict=True)
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
        for crit in CRITERIA:
            t = _compare_thresholds_table(
                docs[0],
                docs[k],
                head_a=cols[0].head,
                head_b=cols[k].head,
                labels=(cols[0].name, cols[k].name),
                criterion=crit,
            )
            b.add(dataclasses.replace(t, attrs={**t.attrs, "data-criterion": crit}))

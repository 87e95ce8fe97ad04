"""The ensemble section of the report of a ``det-calib ensemble`` run: the part of the run's report that
the ``ensemble`` section of its record names (:mod:`det_calib.ensemble.ensemble_record`), written by the
report among its own sections (:mod:`det_calib.report.sections`).

Members and the ensemble side by side (mAP, kept-set ECE raw and calibrated with intervals, each
one's calibrator and temperature), their reliability on one figure (boxes kept at the lowest
conf, raw and calibrated: members from ``members.parquet``, the ensemble from ``boxes.parquet``),
per class, how often the members agree, the cost per image, and the table of both fusion orders
under every score rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from det_calib import metrics
from det_calib.data.box_view import BoxView
from det_calib.ensemble.ensemble_record import AUTO, ensemble_of, rule_words
from det_calib.report import Heading, Page, Para, ReportContext, Table, compare_reliability, f4

TITLE = "Ensemble"
"""The section's title (its level-2 heading), on a run's report only, before Settings."""


def _ci(ci: Any) -> str:
    return "" if not ci else f" [{f4(ci[0])}, {f4(ci[1])}]"


def _kept_bins(v: BoxView, thr: float, n_bins: int) -> Any:
    k = v.kept(thr)
    if k.n == 0:
        return None
    return metrics.reliability_bins(k.conf, k.correct, n_bins=n_bins)


def _side_by_side(run: Any, h: str, eh: Any, thr: float) -> Table:
    rows = []
    for mf in [*eh.members, eh.ensemble]:
        o0, o1 = mf.operating_before[0], mf.operating_after[0]
        rows.append(
            [
                mf.name,
                f4(mf.map50_95),
                f4(mf.map50),
                f"{o0.boxes}",
                f"{f4(o0.ece)}{_ci(o0.ece_ci)}",
                f"{o1.boxes}",
                f"{f4(o1.ece)}{_ci(o1.ece_ci)}",
                mf.method,
                "n/a" if mf.temperature is None else f"{mf.temperature:.3f}",
            ]
        )
    return Table(
        [
            "model",
            "mAP50-95",
            "mAP50",
            f"kept at {thr:g} raw",
            "kept-set ECE raw",
            "kept calibrated",
            "kept-set ECE calibrated",
            "calibrator",
            "T (always fitted)",
        ],
        rows,
        caption=f"Head {h}: each member on its own boxes and the ensemble on the fused boxes, eval split "
        "(mAP: pycocotools; ECE intervals: 95% image bootstrap)",
        css="ensemble-members",
    )


def _per_class(run: Any, h: str, eh: Any) -> Table:
    models = [*eh.members, eh.ensemble]
    classes = sorted({c for m in models for c in m.class_kept_ece})
    rows = [[run.class_name(c), *[f4(m.kept_ece_of(c)) for m in models]] for c in classes]
    return Table(
        ["class", *[m.name for m in models]],
        rows,
        caption=f"Head {h}: kept-set ECE per class, calibrated",
        css="ensemble-per-class",
    )


def _fusion_table(h: str, eh: Any, chosen: tuple[str, str]) -> Table:
    cv = any(r.verdict for r in eh.table)
    rows = []
    for r in eh.table:
        mark = " (this run)" if (r.order, r.score) == chosen else ""
        row = [r.order + mark, r.score]
        if cv:
            row += [f4(r.fit_map50_95), f4(r.cv_kept_ece), r.verdict or "not a candidate"]
        rows.append(
            row
            + [
                f4(r.map50_95),
                f4(r.map50),
                f"{r.kept_fused}",
                f4(r.kept_ece_fused),
                f"{r.kept_calibrated}",
                f"{f4(r.kept_ece_calibrated)}{_ci(r.kept_ece_calibrated_ci)}",
                r.method,
                "n/a" if r.temperature is None else f"{r.temperature:.3f}",
            ]
        )
    head = ["order", "score rule"] + (
        ["fit mAP50-95", "CV kept-set ECE (fit split)", "choice"] if cv else []
    )
    return Table(
        head
        + [
            "mAP50-95",
            "mAP50",
            "kept as fused",
            "kept-set ECE as fused",
            "kept calibrated",
            "kept-set ECE calibrated",
            "calibrator",
            "T",
        ],
        rows,
        caption=f"Head {h}: both fusion orders under every score rule"
        + (
            ": chosen on the fit split (its mAP, the cross-validated kept-set ECE), then scored "
            "on the eval split"
            if cv
            else ", eval split"
        ),
        css="ensemble-fusion",
    )


def section(page: Page, ctx: ReportContext) -> None:
    """The Ensemble section of a report, for a run with ``ensemble`` in its calibration.json: the
    members, each member against the fused detector per head, the fusion candidates, the cost."""
    rec = None if ctx.compared else ensemble_of(ctx.run.result)
    if rec is None:
        return
    b, run = page, ctx.run
    folder = Path(ctx.folder if ctx.folder is not None else run.run_dir)

    st = run.settings
    thr = min(st.conf_thresholds)
    fz = rec.fusion
    b.add(Heading(2, TITLE, "ensemble"))
    how = "; ".join(
        f"head {h}: score rule {rec.fusion_of(h)[1]} ({rule_words(rec.fusion_of(h)[1])}), "
        f"{rec.fusion_of(h)[0]}"
        for h in rec.heads
    )
    chosen = (
        " (chosen per head on the fit split's folds: the lowest cross-validated kept-set ECE among "
        "the "
        "fusions about as accurate as the best, or a preferred one the folds cannot tell from it; "
        "the fusion "
        "table gives each candidate's figures and verdict)"
        if AUTO in (fz.order, fz.score)
        else ""
    )
    b.add(
        Para(
            f"{len(rec.members)} members: {rec.source}. Fused by weighted boxes fusion (IoU "
            f"{fz.iou:g}), "
            f"{how}{chosen}; the fused score is then "
            "calibrated as one detector's (the sections above are those of the fused boxes). Plain "
            "Ultralytics "
            "cannot run an ensemble as one checkpoint: deploy it with "
            "det_calib.ensemble.load_ensemble.",
            "lead",
        )
    )
    b.add(
        Table(
            ["member", "kind", "file fingerprint", "imgsz", "heads run"],
            [
                [
                    m.name,
                    m.kind,
                    m.fingerprint[:23],
                    "x".join(map(str, m.imgsz)),
                    ", ".join(f"{h} <- {v}" for h, v in m.heads.items()),
                ]
                for m in rec.members
            ],
            caption="Members",
            css="ensemble-list",
        )
    )
    members = folder / "members.parquet"
    mb = pl.read_parquet(members) if members.is_file() else None
    boxes = pl.read_parquet(folder / "boxes.parquet")
    for h, eh in rec.heads.items():
        b.add(Heading(3, f"Head {h}"))
        b.add(_side_by_side(run, h, eh, thr))
        _reliability(b, h, eh, mb, boxes, st, thr)
        b.add(_per_class(run, h, eh))
        total = sum(eh.agreement.values())
        if total:
            b.add(
                Para(
                    f"Members present in the fused boxes kept at {thr:g} (calibrated): "
                    + ", ".join(
                        f"{k} of {len(rec.members)}: {v:,} ({v / total:.1%})"
                        for k, v in sorted(eh.agreement.items())
                    )
                    + "."
                )
            )
        if eh.table:
            b.add(_fusion_table(h, eh, rec.fusion_of(h)))
    each = [
        f"{m.name} {rec.seconds(f'member {i}'):.3f} s"
        for i, m in enumerate(rec.members)
        if f"member {i}" in rec.seconds_per_image
    ]
    b.add(
        Para(
            "Cost per image (both splits, CPU seconds of the threads running the members; image "
            "decoding, "
            f"shared, not included): all {len(rec.members)} members {rec.seconds('capture'):.3f} s"
            + (f" ({', '.join(each)})" if each else "")
            + f"; fusion {rec.seconds('fusion'):.4f} s "
            "(wall, every head's fusion together). A member costs what one detector costs; a scale "
            "view in "
            "proportion to its pixels.",
            "note",
        )
    )


def _reliability(
    b: Page, h: str, eh: Any, mb: pl.DataFrame | None, boxes: pl.DataFrame, st: Any, thr: float
) -> None:
    ev = st.eval_split
    runs = []
    if mb is not None:
        for i, m in enumerate(eh.members):
            v = BoxView.from_boxes(
                mb.filter(pl.col("member") == i), head=h, split=ev, geometry=False
            )
            runs.append(
                (
                    m.name,
                    _kept_bins(v, thr, st.ece_bins),
                    _kept_bins(v.as_recorded(), thr, st.ece_bins),
                    f"ECE {f4(m.operating_before[0].ece)}",
                    f"ECE {f4(m.operating_after[0].ece)}",
                )
            )
    v = BoxView.from_boxes(boxes, head=h, split=ev, geometry=False)
    e = eh.ensemble
    runs.append(
        (
            "ensemble",
            _kept_bins(v, thr, st.ece_bins),
            _kept_bins(v.as_recorded(), thr, st.ece_bins),
            f"ECE {f4(e.operating_before[0].ece)}",
            f"ECE {f4(e.operating_after[0].ece)}",
        )
    )
    if all(r[1] is None and r[2] is None for r in runs):
        return
    png = compare_reliability(
        runs, low=thr, title=f"Members and ensemble, boxes kept at {thr:g}, head {h}"
    )
    b.fig(
        f"ensemble_reliability_{h}",
        png,
        f"Reliability of the boxes kept at conf {thr:g} of each member and of the ensemble, head "
        f"{h}, split {ev}: "
        "left raw (the fused raw score for the ensemble), right calibrated.",
        f"Reliability of the members and the ensemble, head {h}",
    )

"""The Threshold shift section: how the kept set at each conf threshold changes under the calibrated scores."""

from __future__ import annotations

import numpy as np

from det_calib.data.box_table import HEAD_LABEL
from det_calib.evaluation import kept_set as thresholds
from det_calib.record.threshold_shift import ThresholdShift

from . import plots
from .common import (
    f3,
    fint,
    fthr,
    head_eval,
    per_class_rows,
)
from .context import ReportContext
from .document import Heading, Para, Table
from .page import Page
from .per_class_section import class_id
from .reliability_section import equivalents

__all__ = ["threshold_shift_section"]


def _shift_row(first: list[str], e: ThresholdShift) -> list[str]:
    return first + [
        fthr(e.conf),
        f3(e.equivalent_conf),
        fint(e.kept_before),
        fint(e.kept_after),
        f"{fint(e.added)} ({fint(e.added_correct)})",
        f"{fint(e.removed)} ({fint(e.removed_correct)})",
        f3(e.precision_before),
        f3(e.precision_after),
        f3(e.recall_before),
        f3(e.recall_after),
    ]


_SHIFT_COLS = [
    "Conf",
    "Equivalent calibrated conf",
    "Kept raw",
    "Kept calibrated",
    "Added (correct)",
    "Removed (correct)",
    "Precision raw",
    "Precision calibrated",
    "Recall raw",
    "Recall calibrated",
]


def threshold_shift_section(page: Page, ctx: ReportContext) -> None:
    """The Threshold shift section of a report: per head, precision and recall against the threshold
    and the kept set at each ``--conf``, for all classes and per class."""
    b, run, hbs = page, ctx.run, ctx.hbs
    iou = run.settings.iou_match
    b.add(Heading(2, "Threshold shift", "threshold-shift"))
    b.add(
        Para(
            "Applying the same conf threshold to calibrated scores keeps a different set of boxes. "
            "A box is kept "
            "when conf > threshold, as in Ultralytics. The equivalent calibrated threshold, the "
            "calibrated "
            "conf of a box whose raw conf is t (sigmoid(logit(t) / T) for a temperature), keeps "
            "exactly the raw "
            "set (a per-class map has one per class: see the per-class table). With T > 1 and a "
            "threshold "
            "below 0.5, boxes are only added; with T < 1 only removed. "
            f"Correct means IoU ≥ {iou:g} with an unmatched ground truth.",
            "note",
        )
    )
    for h in run.heads:
        hb = hbs[h]
        if len(run.heads) > 1:
            b.add(Heading(3, f"Head {HEAD_LABEL.get(h, h)}"))
        n_gt = head_eval(run, h).n_gt or 0
        grid = np.linspace(0.0, 1.0, 201)
        pb = thresholds.precision_recall_vs_conf(hb.conf, hb.correct, n_gt=n_gt, grid=grid)
        pa = (
            thresholds.precision_recall_vs_conf(hb.conf_after, hb.correct, n_gt=n_gt, grid=grid)
            if hb.conf_after is not None
            else None
        )
        marks = equivalents(run, h)
        png = plots.threshold_figure(
            pb,
            pa,
            marks,
            title=f"Precision and recall against the threshold, head {h} (IoU {iou:g})",
        )
        b.fig(
            f"threshold_{h}",
            png,
            f"Precision and recall of the boxes above each threshold, head {h}, split {hb.split} "
            f"({fint(n_gt)} ground-truth objects, IoU {iou:g}). Filled dots: the operating "
            "threshold applied to raw "
            "and to calibrated scores; hollow dot on the dotted line: the equivalent calibrated "
            "threshold, which "
            "keeps the raw set.",
            f"Precision and recall against conf threshold, head {h}",
        )
        b.add(
            Table(
                _SHIFT_COLS,
                [_shift_row([], e) for e in run.head(h).threshold_shift],
                caption=f"Kept set at each threshold, head {h}, all classes (correct: IoU ≥ {iou:g})",
                css="threshold-shift",
                attrs={"data-head": h},
            )
        )
        prow = [
            _shift_row([f"{r.name} ({class_id(r)})"], e)
            for r in sorted(per_class_rows(run, h, hb), key=class_id)
            for e in r.threshold_shift
        ]
        if prow:
            b.add(
                Table(
                    ["Class (id)"] + _SHIFT_COLS,
                    prow,
                    caption=f"Kept set per class, head {h} (correct: IoU ≥ {iou:g})",
                    css="threshold-shift-per-class",
                    attrs={"data-head": h},
                )
            )

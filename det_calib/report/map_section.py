"""The mAP verification section: COCO mAP of the rescored boxes, Ultralytics val, and a folded per-class
map's detections."""

from __future__ import annotations

from det_calib.record.run_folder import Run
from det_calib.tasks import TASKS

from .common import (
    engine_label,
    f4,
    fint,
    fthr,
    head_eval,
)
from .context import ReportContext
from .document import Heading, Para, Table
from .page import Page

__all__ = ["map_section"]


def _holds_hulls(columns) -> bool:
    """Whether a box table with these ``columns`` holds a task's payload whose axis-aligned hulls are its
    box columns (an OBB model's rotated boxes: its box mAP is the hulls', Ultralytics' val scores the
    rotated boxes)."""
    return any(t.hull_boxes and t.payload in columns for t in TASKS.values())


def map_section(page: Page, ctx: ReportContext) -> None:
    """The mAP verification section of a report: COCO mAP of the rescored boxes, Ultralytics val and,
    for a per-class map folded into the model, how its detections changed."""
    b, run = page, ctx.run
    b.add(Heading(2, "mAP verification", "map-verification"))
    b.add(
        Para(
            "One temperature, Platt, spline or isotonic map per head is a monotonic map of the "
            "scores: the "
            "ranking of boxes, and with it pycocotools mAP on the same boxes, cannot change. A "
            "per-class map "
            "(class-*) folded into the model can change which class wins a box before NMS and "
            "which boxes make the "
            "top max_det, so the calibrated model's own Ultralytics val mAP is measured and shown "
            "as it is; "
            "applied after the detector's selection (det_calib.apply_calibrator) it keeps the "
            "detections. "
            "A size-conditioned map (size-platt) re-ranks the boxes of a class by their size, so "
            "the mAP of the "
            "same boxes moves; it has no folded model (no calibrated.pt, no Ultralytics val of "
            "one). "
            "Ultralytics val keeps the boxes above a conf floor: "
            "on calibrated scores the same floor keeps a slightly different set of low-score "
            "boxes, which can move "
            "its mAP a little; at the equivalent floor it keeps the original set.",
            "note",
        )
    )
    rows = []
    for h in run.heads:
        ev = head_eval(run, h)
        ident = ev.map_identical
        rows.append(
            [
                h,
                f4(ev.map50_95_before),
                f4(ev.map50_95_after),
                f4(ev.map50_before),
                f4(ev.map50_after),
                "yes" if ident is True else ("NO" if ident is False else "n/a"),
            ]
        )
    hulls = (
        " (of the rotated boxes' axis-aligned hulls; their rotated-box mAP is Ultralytics' OBB "
        "val's, below)"
        if _holds_hulls(run.boxes.columns)
        else ""
    )
    b.add(
        Table(
            [
                "Head",
                "mAP50-95 raw",
                "mAP50-95 calibrated",
                "mAP50 raw",
                "mAP50 calibrated",
                "Identical",
            ],
            rows,
            caption=f"COCO mAP scored by {engine_label(head_eval(run, run.heads[0]).map_engine)}, evaluation split"
            + hulls,
            css="map-coco",
        )
    )
    _task_map_tables(b, run)
    _ultralytics_val_table(b, run)
    _detection_change_table(b, run)


_TASK_MAPS = (
    (
        "mask",
        "mask",
        "Mask mAP by pycocotools segm on the same boxes' masks, evaluation split",
        "map-coco-mask",
    ),
    (
        "pose",
        "keypoint",
        "Keypoint mAP by pycocotools keypoints (OKS) on the same boxes' keypoints, "
        "evaluation split",
        "map-coco-pose",
    ),
)
"""The task figures beside the box mAP: (field prefix, words, caption, css) of a segment and a pose model."""


def _task_map_tables(b: Page, run: Run) -> None:
    """A segment model's mask mAP and a pose model's keypoint mAP (pycocotools on the same boxes), raw and
    calibrated scores, where the run measured them."""
    for prefix, words, caption, css in _TASK_MAPS:
        rows = []
        for h in run.heads:
            ev = head_eval(run, h)
            if getattr(ev, f"{prefix}_map50_95_before") is None:
                continue
            ident = getattr(ev, f"{prefix}_map_identical")
            rows.append(
                [
                    h,
                    *(
                        f4(getattr(ev, f"{prefix}_{k}"))
                        for k in (
                            "map50_95_before",
                            "map50_95_after",
                            "map50_before",
                            "map50_after",
                        )
                    ),
                    "yes" if ident is True else ("NO" if ident is False else "n/a"),
                ]
            )
        if rows:
            b.add(
                Table(
                    [
                        "Head",
                        f"{words} mAP50-95 raw",
                        f"{words} mAP50-95 calibrated",
                        f"{words} mAP50 raw",
                        f"{words} mAP50 calibrated",
                        "Identical",
                    ],
                    rows,
                    caption=caption,
                    css=css,
                )
            )


def _val_extras(run: Run) -> list[tuple[str, str]]:
    """The task columns of the Ultralytics val table: (field prefix, words) of the masks or keypoints measured."""
    vals = [run.head(h).ultralytics_val for h in run.heads]
    return [
        (prefix, words)
        for prefix, words, *_ in _TASK_MAPS
        if any(
            uv is not None
            and uv.original is not None
            and getattr(uv.original, f"{prefix}_map50_95") is not None
            for uv in vals
        )
    ]


def _val_rows(h: str, uv, extras: list[tuple[str, str]]) -> list[list[str]]:
    """One head's rows of the Ultralytics val table: the original and the calibrated checkpoint."""
    same, rows = uv.identical_at_equivalent_floor, []
    for key, label in (
        ("original", "original weights"),
        ("calibrated", "calibrated, same conf floor"),
        ("calibrated_equivalent_floor", "calibrated, equivalent floor"),
    ):
        e = getattr(uv, key)
        if (
            e is None and key != "original"
        ):  # at val's floor: not repeated since issue 12 for a global map;
            continue  # at the equivalent floor: a per-class map has none
        mark = ""
        if key == "calibrated_equivalent_floor" and same is not None:
            mark = "yes" if same else "NO"
        task = [f4(e and getattr(e, f"{p}_{k}")) for p, _ in extras for k in ("map50_95", "map50")]
        rows.append(
            [h, label, fthr(e and e.conf), f4(e and e.map50_95), f4(e and e.map50), *task, mark]
        )
    return rows


def _ultralytics_val_table(b: Page, run: Run) -> None:
    urows, notes = [], []
    extras = _val_extras(run)
    na = ["n/a"] * (2 * len(extras))
    for h in run.heads:
        uv = run.head(h).ultralytics_val
        if uv is None:
            urows.append([h, "n/a (not run)", "n/a", "n/a", "n/a", *na, ""])
            continue
        if uv.completed is False:  # a timed-out pass: no mAP is shown, changed or unchanged
            urows.append([h, "not completed", "n/a", "n/a", "n/a", *na, ""])
            notes.append(f"{h}: {uv.note}")
            continue
        urows.extend(_val_rows(h, uv, extras))
        if uv.note:
            notes.append(f"{h}: {uv.note}")
    first = run.head(run.heads[0]).ultralytics_val
    box = "rotated-box " if _holds_hulls(run.boxes.columns) else ""
    cols = [f"{w} {k}" for _, w in extras for k in ("mAP50-95", "mAP50")]
    b.add(
        Table(
            [
                "Head",
                "Run",
                "Conf floor",
                f"{box}mAP50-95",
                f"{box}mAP50",
                *cols,
                "Same as original",
            ],
            urows,
            caption="Ultralytics val"
            + (f", split {first.split}" if first is not None and first.split else "")
            + (
                " (OBB: rotated boxes matched by ProbIoU, Ultralytics' OBBValidator)" if box else ""
            ),
            css="map-ultralytics",
        )
    )
    for n in notes:
        b.add(Para(n, "note"))


def _detection_change_table(b: Page, run: Run) -> None:
    crows = []
    for h in run.heads:
        dc = run.head(h).detection_change
        if dc is None:
            continue
        crows.append(
            [
                h,
                f"{fthr(dc.conf_floor)} / {fthr(dc.kept_conf)}",
                fint(dc.changed_class),
                f"{fint(dc.only_posthoc)} / {fint(dc.kept_only_posthoc)}",
                f"{fint(dc.only_folded)} / {fint(dc.kept_only_folded)}",
                f"{f4(dc.map50_95_original)} / {f4(dc.map50_95_posthoc)} / "
                f"{f4(dc.map50_95_folded)}",
                "yes" if dc.identical else "NO",
            ]
        )
    if crows:
        b.add(
            Table(
                [
                    "Head",
                    "Compared above conf (all / kept)",
                    "Boxes that changed class",
                    "Lost (all / kept)",
                    "New (all / kept)",
                    "COCO mAP50-95 original / post-hoc / folded",
                    "Same detections",
                ],
                crows,
                caption="A per-class map folded into calibrated.pt against the same map applied after the "
                "detector's selection, on the eval split (measured)",
                css="detection-change",
            )
        )

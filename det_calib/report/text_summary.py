"""The summary text of a run (``summary.txt`` and what ``det-calib calibrate`` prints)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from det_calib.calibrators import registry
from det_calib.capture.exported import export_format
from det_calib.record.run_result import (
    Bootstrap,
    EvalResult,
    HeadResult,
    RecordedSettings,
    RunResult,
)
from det_calib.report.common import engine_label
from det_calib.report.record_words import (
    floor_gap_words,
    left_words,
    operating_point_worse,
    temperature_verdict,
    temperature_words,
)

_log = logging.getLogger(__name__)


_BOOTSTRAP_LEVEL = Bootstrap.level


_INTERVALS_LINE = (
    "intervals: 95% image bootstrap, each containing its estimate; ECE and LaECE: bias-corrected "
    "percentile, or estimate ± 1.96 SD where the resampling bias puts the estimate outside it; "
    "LaECE_0: estimate ± 1.96 SD"
)
"""Which interval each figure carries, in one line (the summary's last line; the report says the same)."""


def _f(x: float | None, fmt: str) -> str:
    """Format a number; None/nan (JSON null) as n/a."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _ci_text(ci: Any) -> str:
    return "" if not ci else f" [{_f(ci[0], '.4f')}, {_f(ci[1], '.4f')}]"


def _calibrator_line(
    head: str, h: HeadResult, st: RecordedSettings, model: str | None = None
) -> str:
    """What calibrates a head, in words (the first line of its summary); ``model``: the run's model, whose
    kind (checkpoint or export) names what is deployed (None: a file of detections, whose map is
    written as a portable map)."""
    rec = h.calibrator
    if rec is None:
        return f"[{head}] no calibrator"
    target = " to the IoU of each box's match (--target iou)" if st.target == "iou" else ""
    if rec.method == "none":
        why = (
            f"no calibrator fitted{target} beat them on held-out folds by more than one paired "
            "standard error"
            if h.candidates
            else "chosen by name"
        )
        deployed = (
            "the portable map"
            if model is None
            else "the calibrated export"
            if export_format(model)
            else "calibrated.pt"
        )
        return (
            f"[{head}] keep the raw scores: {why} ({deployed} leaves this head's scores unchanged)"
        )
    floor = (h.fit_floor if h.fit_floor is not None else st.fit_min_conf) or 0.0
    where = "all boxes" if not floor else f"boxes with raw conf >= {floor:g}"
    if rec.method == "temperature":
        t = rec.temperature
        what = f"T = {_f(t, '.4f')} (raw scores {temperature_verdict(t, long=True)})"
    else:
        what = f"{rec.method} map"
    chosen = ""
    if h.candidates:
        best = next((c for c in h.candidates if c.selected), None)
        if best is not None:
            reps = best.calibrator.params.get("n_repeats") or 1
            folds = f"{st.cv_folds}-fold CV by image" + (
                f", repeated {reps} times" if reps > 1 else ""
            )
            chosen = f"; chosen by {folds} ({st.criterion} above conf {min(st.conf_thresholds)})"
    return f"[{head}] {what}, fitted{target} on {where}{chosen}"


def _left_lines(head: str, h: HeadResult, e: EvalResult, target: str = "correct") -> list[str]:
    words = left_words(h, e, target)
    # (the floor gap's reasons are the ECE's: under --target iou they would explain another figure)
    why = floor_gap_words(h, e) if words and target != "iou" else None
    return ([f"[{head}] {words}"] if words else []) + ([f"[{head}] {why}"] if why else [])


def _temperature_lines(head: str, h: HeadResult) -> list[str]:
    words = temperature_words(h.temperature_fit)
    return [f"[{head}] {words}"] if words else []


_MAP_SOURCES_LINE = (
    "the two mAP50-95 of a head measure different things: COCO mAP is pycocotools' definition "
    "applied to the boxes "
    "det_calib captured (one image per forward pass, as predict runs); Ultralytics val runs its "
    "own pass over the "
    "split (its rectangular letterbox and batches) and its own mAP code (its box matching and "
    "precision-recall "
    "interpolation), so on the same detector the two differ a little; each is compared only with "
    "itself, original "
    "against calibrated"
)
"""Why a head's COCO mAP and its Ultralytics val mAP differ (the summary's note when val ran)."""


def summary_text(
    result: RunResult | dict[str, Any],
    *,
    timings: bool = True,
    more: Sequence[str] = (),
    detections: bool = False,
) -> str:
    """A short plain-text summary of a run (what the CLI prints): the operating point first; ``more``
    (an ensemble's lines, a file of detections' lines); the timing line last (``timings``, when the run
    recorded them). ``detections``: the run's "model" is a file of detections (no checkpoint)."""
    r = result if isinstance(result, RunResult) else RunResult.from_dict(result)
    st = r.settings
    lines = [
        f"{'detections' if detections else 'model'} {r.model}",
        f"data  {r.data}  (fit: {st.fit_split}, eval: {st.eval_split})",
    ]
    if (
        r.matching is not None
    ):  # a segment, pose or OBB model's run: which overlap made a box correct
        lines.append(f"matched by {r.matching.words(st.iou_match)}")
    iou = r.matching.measure if r.matching and r.matching.by != "box" else "IoU"
    for head in r.heads:
        h = r.head(head)
        e = h.eval or EvalResult()
        lines.append(_calibrator_line(head, h, st, None if detections else r.model))
        lines += _operating_lines(head, h, e, st, iou=iou)
        lines += _left_lines(head, h, e, st.target)
        lines += _size_lines(head, h)
        lines += _temperature_lines(head, h)
        lines += _map_lines(head, h, e, st, hulls=_hull_run(r), detections=detections)
        lines += _shift_lines(head, h)
    lines.append(
        f"({_INTERVALS_LINE}; sampling floor: labels drawn 200 times from the calibrated "
        "confidences of the "
        "kept boxes)"
    )
    if any(
        o.laece_floor is not None
        for head in r.heads
        for o in (r.head(head).eval or EvalResult()).operating_after
    ):
        lines.append(
            "(LaECE_0's sampling floor: each kept box's IoU target drawn 200 times with mean its "
            "calibrated "
            "conf: matched with probability conf / the mean IoU of the kept matched boxes, the IoU "
            "drawn from "
            "theirs, lifted towards 1 for a conf above that mean)"
        )
    if any(
        r.head(head).ultralytics_val is not None and r.head(head).ultralytics_val.ran
        for head in r.heads
    ):
        lines.append(f"({_MAP_SOURCES_LINE})")
    lines += more
    if timings and r.timings is not None:
        lines.append(r.timings.line())
    return "\n".join(lines)


def _floor_line(
    head: str,
    name: str,
    floor: float,
    floor_range: tuple[float, float] | None,
    boxes: int,
    at_floor: bool | None,
) -> str:
    """The sampling floor of one kept-set figure (``ECE`` or ``LaECE_0``) under its line."""
    return (
        f"[{head}]   a perfectly calibrated detector would score {name} "
        f"{_f(floor, '.4f')}{_ci_text(floor_range)} "
        f"on these {boxes} boxes (sampling floor, 95% range)"
        + (f"; the calibrated {name} is at that floor" if at_floor else "")
    )


def _operating_lines(
    head: str, h: HeadResult, e: EvalResult, st: RecordedSettings, *, iou: str = "IoU"
) -> list[str]:
    """The kept sets at each conf (the headline), and a warning when the calibrator made them worse
    (``iou``: what the match compared, ``IoU``, ``mask IoU``, ``OKS`` or ``rotated IoU (ProbIoU)``)."""
    lines = []
    for o0, o1 in zip(e.operating_before, e.operating_after, strict=False):
        ece = (
            f"ECE({st.ece_bins} bins, {iou} {st.iou_match}) "
            f"{_f(o0.ece, '.4f')}{_ci_text(o0.ece_ci)} -> "
            f"{_f(o1.ece, '.4f')}{_ci_text(o1.ece_ci)}"
        )
        laece = (
            f"LaECE_0({st.laece_bins} bins) {_f(o0.laece0, '.4f')}{_ci_text(o0.laece0_ci)} -> "
            f"{_f(o1.laece0, '.4f')}{_ci_text(o1.laece0_ci)}"
        )
        # the run's own target first (its headline), the other target's figure beside it
        pair = f"{laece} (the target); {ece}" if st.target == "iou" else f"{ece}; {laece}"
        lines.append(
            f"[{head}] boxes kept at conf {o0.conf:g} ({o0.boxes} raw -> {o1.boxes} calibrated): "
            f"{pair}"
        )
        floors = [
            _floor_line(head, name, floor, rng, o1.boxes, at)
            for name, floor, rng, at in (
                ("ECE", o1.ece_floor, o1.ece_floor_range, o1.at_floor),
                ("LaECE_0", o1.laece_floor, o1.laece_floor_range, o1.laece_at_floor),
            )
            if floor is not None
        ]
        # in the order of the figures on the line above: the run's own target first
        lines += floors[::-1] if st.target == "iou" and len(floors) == 2 else floors
    worse = operating_point_worse(e, st.target)
    if worse is not None:
        lines.append(
            f"[{head}] WORSE than the raw scores where decisions are made ({worse}): "
            + (
                "the eval split does not bear out what the fit split's held-out folds showed; "
                "deploy "
                "the original model for this head, or calibrate on more images"
                if h.candidates
                else "keep the raw scores for this head, or let the default --method auto choose (it keeps "
                "them when no calibrator beats them on held-out folds)"
            )
        )
    return lines


def _size_lines(head: str, h: HeadResult) -> list[str]:
    """One compact line: the kept-set ECE of each COCO size, raw -> calibrated (the report has the
    relative-area bins, LaECE_0 and the intervals)."""
    coco = [f for f in h.by_size if f.scheme == "coco"]
    if not coco:
        return []
    parts = [
        f"{f.bin} {_f(f.ece_before, '.3f')} -> {_f(f.ece_after, '.3f')} ({f.boxes_before} -> "
        f"{f.boxes_after})"
        for f in coco
    ]
    return [
        f"[{head}] kept-set ECE by COCO size at conf {coco[0].conf:g}, raw -> calibrated (boxes): "
        + "; ".join(parts)
    ]


_TASK_MAP_WORDS = (
    ("mask", "mask", "pycocotools segm on the same boxes' masks"),
    ("pose", "keypoint", "pycocotools keypoints (OKS) on the same boxes' keypoints"),
)
"""The task mAPs beside the box mAP in the summary: (field prefix, words, how it was scored)."""


def _hull_run(r: RunResult) -> bool:
    """Whether the run calibrated an OBB model (its matching rule says so: rotated IoU, or box IoU for one)."""
    return r.matching is not None and (
        r.matching.by == "rotated" or "OBB model" in r.matching.reason
    )


_FILE_BOXES = "the file's boxes"


def _why_map_moved(h: HeadResult) -> str:
    """Why a head's mAP moved, where its map is one that may move it (else nothing: a map that keeps
    the ranking cannot, and the word DIFFERENT stands alone)."""
    method = h.calibrator.method if h.calibrator is not None else None
    if method not in registry.methods():
        return ""
    spec = registry.method_spec(method)
    if spec.uses_size:
        return ": the size-conditioned map re-ranks the boxes of a class by their size"
    if spec.per_class:
        return (
            ": a per-class map reorders boxes across classes, which changes an image's top max_det"
        )
    return ""


def _map_lines(
    head: str,
    h: HeadResult,
    e: EvalResult,
    st: RecordedSettings,
    *,
    hulls: bool = False,
    detections: bool = False,
) -> list[str]:
    """All-box figures, COCO mAP, the Ultralytics val checks and the folded per-class map's detections
    (``hulls``: an OBB model's run, its boxes the hulls of rotated ones; Ultralytics' val scores the rotated boxes)."""
    lines = [
        f"[{head}] all boxes down to conf {st.conf_floor:g}: ECE {_f(e.before.ece, '.4f')} -> "
        f"{_f(e.after.ece, '.4f')}; NLL {_f(e.before.nll, '.4f')} -> {_f(e.after.nll, '.4f')}",
        f"[{head}] COCO mAP50-95{' of the axis-aligned hulls' if hulls else ''} "
        f"{_f(e.map50_95_before, '.4f')} -> "
        f"{_f(e.map50_95_after, '.4f')}, "
        f"mAP50 {_f(e.map50_before, '.4f')} -> {_f(e.map50_after, '.4f')} "
        f"({'identical' if e.map_identical else 'DIFFERENT' + _why_map_moved(h)}; the detector's "
        f"boxes rescored; {_FILE_BOXES if detections else 'the boxes det_calib captured'}, scored by "
        f"{engine_label(e.map_engine)})",
    ]
    for prefix, words, how in _TASK_MAP_WORDS:
        if getattr(e, f"{prefix}_map50_95_before") is not None:
            lines.append(
                f"[{head}] {words} mAP50-95 {_f(getattr(e, f'{prefix}_map50_95_before'), '.4f')} "
                "-> "
                f"{_f(getattr(e, f'{prefix}_map50_95_after'), '.4f')}, mAP50 "
                f"{_f(getattr(e, f'{prefix}_map50_before'), '.4f')} -> "
                f"{_f(getattr(e, f'{prefix}_map50_after'), '.4f')} "
                f"({'identical' if getattr(e, f'{prefix}_map_identical') else 'DIFFERENT'}; {how})"
            )
    uv = h.ultralytics_val
    if uv is not None and (uv.completed is False or uv.verified is False):
        lines.append(f"[{head}] Ultralytics val {uv.note}")
    if uv is not None and uv.ran:
        eq = uv.calibrated_equivalent_floor
        changes = uv.changes()
        lines.append(
            f"[{head}] Ultralytics val {'rotated-box ' if hulls else ''}mAP50-95 original "
            f"{_f(uv.original.map50_95, '.4f')}, calibrated model "
            + (
                f"at equivalent floor {_f(eq.map50_95, '.4f')}{_val_change(changes, 'map50_95')}"
                if eq is not None
                else f"{_f(uv.calibrated.map50_95 if uv.calibrated else None, '.4f')} "
                "(a per-class map folded into the model)"
            )
            + _val_seen(uv)
            + " (Ultralytics' own val pass and mAP code)"
        )
        cal = eq if eq is not None else uv.calibrated
        for prefix, words, _ in _TASK_MAP_WORDS:
            if getattr(uv.original, f"{prefix}_map50_95") is not None:
                lines.append(
                    f"[{head}] Ultralytics val {words} mAP50-95 original "
                    f"{_f(getattr(uv.original, f'{prefix}_map50_95'), '.4f')}, calibrated model "
                    f"{_f(getattr(cal, f'{prefix}_map50_95') if cal else None, '.4f')}"
                    + (_val_change(changes, f"{prefix}_map50_95") if eq is not None else "")
                )
    dc = h.detection_change
    if dc is not None:
        lines.append(
            f"[{head}] folded per-class map vs the same map applied after selection, on "
            f"{dc.split}: "
            + (
                "identical detections"
                if dc.identical
                else f"{dc.changed_class} boxes changed class, {dc.only_posthoc} lost, {dc.only_folded} new "
                f"(above conf {dc.kept_conf:g}: {dc.kept_only_posthoc} lost, {dc.kept_only_folded} "
                "new)"
            )
            + f"; COCO mAP50-95 original {_f(dc.map50_95_original, '.4f')}, post-hoc "
            f"{_f(dc.map50_95_posthoc, '.4f')}, folded {_f(dc.map50_95_folded, '.4f')}"
        )
    return lines


def _val_change(changes: dict[str, float], key: str) -> str:
    """`` (identical)`` or `` (changed by ...)`` for one figure of an Ultralytics val check."""
    if key not in changes:
        return " (identical)"
    d = changes[key]
    small = "below the 4 decimals shown; " if abs(d) < 5e-5 else ""
    return (
        f" (CHANGED by {d:+.2g}: {small}val's float32 scores order some boxes otherwise than the "
        "raw ones; "
        "marked not identical in calibration.json)"
    )


def _val_seen(uv) -> str:
    """What val read, when it was compared with the run's split."""
    if uv.verified is not True:
        return ""
    return f"; val read the run's {uv.images_seen:,} images and {uv.instances_seen:,} instances"


def _shift_lines(head: str, h: HeadResult) -> list[str]:
    """The kept-set shift at each conf threshold."""
    lines = []
    for sh in h.threshold_shift:
        eqc = (
            ""
            if sh.equivalent_conf is None or sh.equivalent_conf == sh.conf
            else f"; raw {sh.conf} = calibrated {_f(sh.equivalent_conf, '.4f')}"
        )
        lines.append(
            f"[{head}] at conf {sh.conf}: kept {sh.kept_before} -> {sh.kept_after} "
            f"(+{sh.added} of which {sh.added_correct} correct, -{sh.removed} of which "
            f"{sh.removed_correct} correct); "
            f"precision {_f(sh.precision_before, '.3f')} -> {_f(sh.precision_after, '.3f')}, "
            f"recall {_f(sh.recall_before, '.3f')} -> {_f(sh.recall_after, '.3f')}{eqc}"
        )
    return lines

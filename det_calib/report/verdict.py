"""The first screen of a run's report: each head's verdict in words, then the few figures it rests on.

Per head, :func:`answer_blocks` gives a verdict line (``<p class="verdict">``) and a short list
(``<ul class="answer">``): at the operating point (the lowest ``--conf``), the kept set's headline
figure raw → calibrated against its sampling floor, the boxes kept with precision and recall raw →
calibrated and the calibrated threshold that keeps the raw set, the run's other target's figure, and
what the mAP check said. Every number is the run's record (``calibration.json``), formatted.

The verdict has three cases, read from the headline figure of the boxes kept at the operating point
(ECE; LaECE_0 for a ``--target iou`` run): "worse: keep the raw scores" (the calibrated kept set
scores higher than the raw one), "at its sampling floor" (inside the range a perfectly calibrated
detector scores on those boxes), or "improved, still above its floor" with the confidence bins that
hold most of the ECE left (``kept_gaps_after``).
"""

from __future__ import annotations

from det_calib.calibrators import registry
from det_calib.record.eval_record import EvalResult, OperatingFigures
from det_calib.record.threshold_shift import ThresholdShift
from det_calib.report.record_words import WORSE_TOLERANCE, floor_gap_short, operating_point_worse

from .common import arrow, f3, f4, fci, fint, fthr, head_eval, match_words, num, shift_at
from .context import Subject
from .document import Block, Bullets, Para

__all__ = ["answer_blocks"]


def answer_blocks(s: Subject) -> list[Block]:
    """The head's verdict line and the figures under it: the first thing its report shows."""
    return [Para(_verdict_line(s), "verdict"), Bullets(_items(s), css="answer")]


def _verdict_line(s: Subject) -> str:
    """``nms: improved, still above its floor; ...``: the head's verdict at the operating point, in words.

    A run that predates the kept-set figures says so (its all-box figures follow in the list).
    """
    ev = head_eval(s.run, s.head)
    if not ev.operating_before or not ev.operating_after:
        return f"{s.name}: no verdict: this run records no kept-set figures (it predates them); all-box figures below"
    o0, o1 = ev.operating_before[0], ev.operating_after[0]
    iou = s.run.settings.target == "iou"
    name = "LaECE_0" if iou else "ECE"
    v0, v1 = (o0.laece0, o1.laece0) if iou else (o0.ece, o1.ece)
    at = o1.laece_at_floor if iou else o1.at_floor
    kept = f"the {fint(o1.boxes)} boxes kept at conf {fthr(o1.conf)}"
    if operating_point_worse(ev, s.run.settings.target) is not None:
        return (
            f"{s.name}: worse: keep the raw scores (calibrated, {kept} score a higher {name} than "
            "raw" + (", although still within its sampling floor's range" if at else "") + ")"
        )
    if _raw_kept(s):
        where = (
            "at its sampling floor"
            if at
            else ("above its sampling floor" if at is False else "no floor recorded")
        )
        return f"{s.name}: raw scores kept (no calibrator beat them on held-out folds); {where}"
    if at:
        return f"{s.name}: at its sampling floor: {kept} are as well calibrated as that many boxes can show"
    better = num(v0) is not None and num(v1) is not None and v1 < v0 - WORSE_TOLERANCE
    words = "improved" if better else "not improved"
    if at is None:
        return f"{s.name}: {words} (this run records no sampling floor for {kept})"
    gaps = "" if iou else _gap_words(ev, o1)
    why = None if iou else floor_gap_short(ev)
    return (
        f"{s.name}: {words}, still above its floor"
        + (f"; {gaps}" if gaps else "")
        + (f"; {why}" if why else "")
    )


def _raw_kept(s: Subject) -> bool:
    rec = s.result.calibrator
    return rec is not None and rec.method == "none"


def _gap_words(ev: EvalResult, o1: OperatingFigures) -> str:
    """Where the ECE left comes from: the two confidence bins of the calibrated kept set with the largest
    terms of its ECE (the run's record)."""
    out = []
    for g in ev.kept_gaps[:2]:
        if g.lo is None or g.hi is None or g.share is None:
            continue
        side = "over" if (g.accuracy or 0) < (g.conf or 0) else "under"
        out.append(
            f"{g.lo:.2f}–{g.hi:.2f} ({side}-confident: {f4(g.share)}"
            + (" of it)" if not out else ")")
        )
    return (
        f"most of the ECE left, {f4(o1.ece)}, comes from conf " + " and ".join(out) if out else ""
    )


def _items(s: Subject) -> list[str]:
    """The figures under the verdict."""
    ev = head_eval(s.run, s.head)
    if not ev.operating_before or not ev.operating_after:
        items = [
            f"All-box ECE (every box down to conf {fthr(s.run.settings.conf_floor)}): "
            f"{arrow(f4(ev.before.ece), f4(ev.after.ece))}"
        ]
        sh = shift_at(s.result.threshold_shift, s.low)
        return items + ([_kept_item(None, None, sh)] if sh is not None else []) + [_map_item(s, ev)]
    iou = s.run.settings.target == "iou"
    o0, o1 = ev.operating_before[0], ev.operating_after[0]
    ece, la = _ece_item(o0, o1), _laece_item(o0, o1, target=iou, match=match_words(s.run))
    items = (
        [la, _kept_item(o0, o1, shift_at(s.result.threshold_shift, num(o0.conf))), ece]
        if iou
        else [ece, _kept_item(o0, o1, shift_at(s.result.threshold_shift, num(o0.conf))), la]
    )
    for p0, p1 in zip(ev.operating_before[1:], ev.operating_after[1:], strict=False):
        items.append(
            f"At conf {fthr(p0.conf)}: ECE raw {f4(p0.ece)} → calibrated {f4(p1.ece)}, sampling "
            "floor "
            f"{fci(p1.ece_floor, p1.ece_floor_range)}; boxes kept "
            f"{arrow(fint(p0.boxes), fint(p1.boxes))}"
        )
    return items + [_map_item(s, ev)]


def _ece_item(o0: OperatingFigures, o1: OperatingFigures) -> str:
    return (
        f"ECE of the boxes kept at conf {fthr(o0.conf)}: raw {f4(o0.ece)} → calibrated "
        f"{f4(o1.ece)}; "
        f"sampling floor {fci(o1.ece_floor, o1.ece_floor_range)} (what a perfectly calibrated "
        "detector "
        "scores on these boxes, 95% range)"
    )


def _laece_item(
    o0: OperatingFigures, o1: OperatingFigures, *, target: bool, match: str | None = None
) -> str:
    """``target``: the run's own figure (``--target iou``), said as such. Where it is not and the map
    raised it, why: the default map is fitted to the chance that a box is correct, LaECE_0 reads the
    IoU a box reaches (docs/targets.md); ``match``: the run's matching rule in words ("IoU 0.5")."""
    out = (
        f"LaECE_0 of the boxes kept at conf {fthr(o0.conf)}{' (the target)' if target else ''}: "
        "raw "
        f"{f4(o0.laece0)} → calibrated {f4(o1.laece0)}; sampling floor "
        f"{fci(o1.laece_floor, o1.laece_floor_range)}"
    )
    raw, cal = num(o0.laece0), num(o1.laece0)
    if not target and raw is not None and cal is not None and cal > raw:
        out += (
            " (higher after: the map makes conf the chance that a box is correct"
            f"{'' if match is None else ' at ' + match}, and LaECE_0 compares conf with the IoU "
            "a box reaches; --target iou fits that instead)"
        )
    return out


def _kept_item(
    o0: OperatingFigures | None, o1: OperatingFigures | None, sh: ThresholdShift | None
) -> str:
    """Boxes kept, precision and recall at the operating point raw → calibrated, and the calibrated
    threshold that keeps the raw set."""
    if sh is None:
        conf = fthr(None if o0 is None else o0.conf)
        return (
            f"Boxes kept at conf {conf}: {arrow(fint(o0 and o0.boxes), fint(o1 and o1.boxes))}; "
            "precision and recall: n/a (this run records no kept-set shift)"
        )
    out = (
        f"Boxes kept at conf {fthr(sh.conf)}: {arrow(fint(sh.kept_before), fint(sh.kept_after))}; "
        "precision "
        f"{arrow(f3(sh.precision_before), f3(sh.precision_after))}, recall "
        f"{arrow(f3(sh.recall_before), f3(sh.recall_after))}"
    )
    eq = num(sh.equivalent_conf)
    if eq is None:
        return out + "; no one calibrated threshold keeps the raw set (a per-class map)"
    return (
        out
        + f"; raw {fthr(sh.conf)} = calibrated {eq:.3f} (the calibrated threshold that keeps the "
        "raw set)"
    )


def _map_item(s: Subject, ev: EvalResult) -> str:
    """What the mAP check said, and the deployed map."""
    rec = s.result.calibrator
    if ev.map_identical is True:
        m = f"mAP50-95 {f4(ev.map50_95_before)} unchanged (the same boxes rescored)"
    else:
        m = f"mAP50-95 {arrow(f4(ev.map50_95_before), f4(ev.map50_95_after))}"
        if ev.map_identical is False:
            per_class = (
                rec is not None
                and rec.method in registry.methods()
                and rec.method not in registry.global_methods()
            )
            m += (
                " (a per-class or size map reorders boxes)"
                if per_class
                else " CHANGED: check the run"
            )
    uv = s.result.ultralytics_val
    cal = None if uv is None else (uv.calibrated_equivalent_floor or uv.calibrated)
    if uv is not None and uv.verified is False:
        m += "; Ultralytics val NOT verified (it read another split than the run's: see mAP)"
    elif (
        uv is not None
        and uv.original is not None
        and cal is not None
        and num(uv.original.map50_95) is not None
    ):
        m += f"; Ultralytics val mAP50-95 {arrow(f4(uv.original.map50_95), f4(cal.map50_95))}"
        changed = (
            uv.changes().get("map50_95") if uv.calibrated_equivalent_floor is not None else None
        )
        m += f" (CHANGED by {changed:+.2g})" if changed is not None else ""
    deployed = "raw scores (no calibrator)" if rec is not None and rec.method == "none" else s.words
    return f"{m}; deployed: {deployed}"

"""The words the report and the run's summary say about a head's record: how its temperature
reads (:func:`temperature_verdict`, :func:`temperature_words`), what the calibrator leaves
(:func:`left_words`) and where the operating point got worse (:func:`operating_point_worse`).
"""

from __future__ import annotations

import math

from det_calib.record.eval_record import EvalResult, TemperatureFit
from det_calib.record.run_result import HeadResult

__all__ = [
    "floor_gap_short",
    "floor_gap_words",
    "left_words",
    "operating_point_worse",
    "temperature_verdict",
    "temperature_words",
]

_T_CLOSE = math.log(1.02)
"""|log T| below this counts as "close to calibrated" (T within about 2% of 1)."""


WORSE_TOLERANCE = 1e-6
"""A calibrated kept-set ECE above the raw one by less than this is rounding, not "worse"."""


def operating_point_worse(e: EvalResult, target: str = "correct") -> str | None:
    """Why the calibrated scores are worse than the raw ones where decisions are made (a higher
    headline of the boxes kept at the lowest conf threshold on the eval split: ECE for the target
    ``correct``, LaECE_0 for ``iou``), or None. The CLI summary and the report both say it.
    Differences below ``WORSE_TOLERANCE`` are rounding (the raw scores are read from the stored
    float32 conf, the calibrated ones from the float64 logits: ``none`` differs from the raw scores
    by ~1e-11) and do not count."""
    if not e.operating_before or not e.operating_after:
        return None
    o0, o1 = e.operating_before[0], e.operating_after[0]
    key, name = ("laece0", "LaECE_0") if target == "iou" else ("ece", "ECE")
    v0, v1 = getattr(o0, key), getattr(o1, key)
    if v0 is None or v1 is None or not v1 > v0 + WORSE_TOLERANCE:
        return None
    return f"{name} of the boxes kept at conf {o0.conf:g}: {v0:.4f} raw, {v1:.4f} calibrated"


def left_words(h: HeadResult, e: EvalResult, target: str = "correct") -> str | None:
    """What is left when the calibrated kept set is still above its sampling floor's range: which
    scores (the bins with the largest terms of its ECE) and which classes (the worst kept-set ECE);
    None when it is within the range (or unknown). The summary and the report both say it. Under
    ``target`` ``iou`` the headline is LaECE_0 (conf against the IoU a box reaches), and so is what
    is left: the ECE's bins speak of correctness, which that map does not fit."""
    if not e.operating_after:
        return None
    o1 = e.operating_after[0]
    if target == "iou":
        rng = o1.laece_floor_range
        if o1.laece0 is None or rng is None or o1.laece0 <= rng[1]:
            return None
        return (
            f"what is left at conf {o1.conf:g}: LaECE_0 {_fmt(o1.laece0, '.4f')} is above what a "
            "perfectly calibrated detector would score on these boxes (up to "
            f"{_fmt(rng[1], '.4f')}): the map's conf is not yet the IoU these boxes reach"
        )
    if o1.ece is None or o1.ece_floor_range is None or o1.at_floor:
        return None
    gaps = "; ".join(
        f"conf {g.lo:.2f}-{g.hi:.2f} ({g.boxes} boxes: {_fmt(g.conf, '.2f')} stated, "
        f"{_fmt(g.accuracy, '.2f')} "
        f"correct, {'over' if (g.accuracy or 0) < (g.conf or 0) else 'under'}-confident; "
        f"{_fmt(g.share, '.4f')} "
        "of the ECE)"
        for g in e.kept_gaps
        if g.lo is not None and g.hi is not None
    )
    worst = sorted(
        (c for c in h.per_class if c.kept_ece_after is not None and not c.few_boxes),
        key=lambda c: -c.kept_ece_after,
    )[:2]
    classes = ", ".join(f"{c.name} {c.kept_ece_after:.3f}" for c in worst)
    return (
        f"what is left at conf {o1.conf:g}: ECE {_fmt(o1.ece, '.4f')} is above what a perfectly "
        "calibrated "
        f"detector would score on these boxes (up to {_fmt(o1.ece_floor_range[1], '.4f')})"
        + (f"; the largest gaps: {gaps}" if gaps else "")
        + (f"; worst classes (kept-set ECE): {classes}" if classes else "")
    )


def floor_gap_words(h: HeadResult, e: EvalResult) -> str | None:
    """Why the calibrated kept set stays above its floor's range, in one sentence (the run's ``floor_gap``,
    :mod:`det_calib.evaluation.floor_gap`); None where the run records none."""
    g = e.floor_gap
    if g is None or g.reason is None:
        return None
    if g.reason == "images":
        rng = g.floor_without_range
        one = g.image_count == 1
        which = (
            "one eval image holds the gap" if one else f"{g.image_count} eval images hold the gap"
        )
        return (
            f"why above its floor: {which}, {g.images} ({g.image_boxes} of the {g.kept_boxes} kept "
            "boxes, "
            f"{g.image_correct} correct): without {'it' if one else 'them'} the calibrated ECE is "
            f"{_fmt(g.ece_without, '.4f')}, inside its floor's range "
            f"[{_fmt(rng[0] if rng else None, '.4f')}, {_fmt(rng[1] if rng else None, '.4f')}]; no "
            "map of the "
            f"score can fix {'it' if one else 'them'}: {'its' if one else 'their'} boxes are wrong "
            "together, "
            "and the floor counts each box as an independent draw"
        )
    rng = g.refit_floor_range
    if g.reason == "sampling":
        return (
            f"why above its floor: a {g.refit_method} map fitted on the eval split itself scores "
            "ECE "
            f"{_fmt(g.refit_ece, '.4f')}, inside its floor's range "
            f"[{_fmt(rng[0] if rng else None, '.4f')}, "
            f"{_fmt(rng[1] if rng else None, '.4f')}]: the gap is the fit split's sampling noise, "
            "and more "
            "calibration images would close it"
        )
    worst = sorted(
        (c for c in h.per_class if c.kept_ece_after is not None and not c.few_boxes),
        key=lambda c: -c.kept_ece_after,
    )[:2]
    classes = ", ".join(f"{c.name} {c.kept_ece_after:.3f}" for c in worst)
    return (
        f"why above its floor: no map of the score alone reaches it here: a {g.refit_method} map "
        "fitted on the "
        f"eval split itself still scores ECE {_fmt(g.refit_ece, '.4f')} (its floor's range up to "
        f"{_fmt(rng[1] if rng else None, '.4f')}); the rest depends on more than the score"
        + (f" (worst classes: {classes})" if classes else "")
    )


def floor_gap_short(e: EvalResult) -> str | None:
    """The few words the report's verdict adds for the run's ``floor_gap`` (None where it records none)."""
    g = e.floor_gap
    if g is None or g.reason is None:
        return None
    if g.reason == "images":
        return (
            f"{'one eval image' if g.image_count == 1 else f'{g.image_count} eval images'} "
            f"({g.images}) "
            f"hold{'s' if g.image_count == 1 else ''} the gap: without "
            f"{'it' if g.image_count == 1 else 'them'}, "
            f"at the floor"
        )
    if g.reason == "sampling":
        return "the fit split's sampling noise: more calibration images would close it"
    return "no map of the score alone reaches the floor"


def temperature_words(tf: TemperatureFit | None) -> str | None:
    """The temperature every run fits, in words: T and, when it is not deployed, what it would give."""
    if tf is None:
        return None
    what = f"T = {tf.temperature:.4f} (raw scores {temperature_verdict(tf.temperature)})"
    if tf.deployed:
        return f"temperature (fitted on all fit boxes): {what}; it is the deployed map"
    op = tf.operating[0] if tf.operating else None
    kept = ""
    if op is not None:
        ci = "" if not op.ece_ci else f" [{_fmt(op.ece_ci[0], '.4f')}, {_fmt(op.ece_ci[1], '.4f')}]"
        kept = (
            f"; deployed instead, its ECE of the boxes kept at conf {op.conf:g} would be "
            f"{_fmt(op.ece, '.4f')}{ci} ({op.boxes} boxes)"
        )
    return f"temperature (fitted on all fit boxes, for comparison): {what}{kept}"


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def temperature_verdict(t: float | None, *, long: bool = False) -> str:
    """A few words for a temperature: too extreme (T > 1), too timid (T < 1), close to calibrated.

    Not "over-/under-confident": T > 1 means the raw scores sit too close to 0 and 1, which is
    over-confidence for high scores but under-confidence for the many low ones (and vice versa).
    ``long`` adds what the words mean. The report and the CLI's summary both use it.
    """
    if t is None:
        return "not fitted"
    if abs(math.log(t)) < _T_CLOSE:
        return "close to calibrated" + (": T within 2% of 1" if long else "")
    if t > 1:
        return "too extreme" + (": too close to 0 and 1" if long else "")
    return "too timid" + (": too close to 0.5" if long else "")

"""What the report and the comparison share: number formats, wording, data helpers, page writing.

Numbers come from the run's :class:`~det_calib.record.run_result.RunResult` (``calibration.json``) as the
pipeline computed them; curves are recomputed from ``boxes.parquet``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.calibrators import registry
from det_calib.data.box_table import HEAD_LABEL, HEADS
from det_calib.data.ground_truth import Split
from det_calib.errors import InputError
from det_calib.metrics import calibration as metrics
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_folder import BOXES_FILE, CALIBRATION_FILE, HeadBoxes, Run
from det_calib.record.run_result import ClassResult, EvalResult
from det_calib.record.threshold_shift import ThresholdShift
from det_calib.report.record_words import temperature_verdict

_log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# formatting


def parse_run_spec(spec: str | Path) -> tuple[Path, str | None]:
    """Split ``"run_dir:head"`` into ``(run_dir, head)``; a plain path gives ``(path, None)``.

    Only a suffix that names a head (``nms``, ``e2e``) is split off, so paths that contain a
    colon keep working.

    >>> parse_run_spec("out:e2e")[1], parse_run_spec("out")[1]
    ('e2e', None)
    """
    s = str(spec)
    base, sep, head = s.rpartition(":")
    if sep and base and head in HEADS:
        return Path(base), head
    if sep and base and not Path(s).exists() and Path(base).is_dir():  # RUN:HEAD of an unknown head
        raise InputError(
            f"`{head}` in {s} is not a head: RUN:HEAD names one of {', '.join(HEADS)} (or give the "
            "run's folder alone)"
        )
    return Path(s), None


def num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def engine_label(engine: str | None) -> str:
    """How the summary and the report name what scored a run's mAP (``eval.{head}.map_engine``: the
    ``--map-engine`` value; None: a run written before the choice existed, scored by pycocotools)."""
    if engine == "det_calib":
        return "det_calib's COCO engine (pycocotools' figures)"
    return "pycocotools"


def f4(x: Any) -> str:
    """Metric format: 4 decimals, or 3 significant digits below 0.01 (so 4e-05 is not "0.0000")."""
    v = num(x)
    if v is None:
        return "n/a"
    return f"{v:.4f}" if v == 0 or abs(v) >= 0.01 else f"{v:.3g}"


def f3(x: Any) -> str:
    v = num(x)
    return "n/a" if v is None else f"{v:.3f}"


def fint(x: Any) -> str:
    v = num(x)
    return "n/a" if v is None else f"{int(round(v)):,}"


def fthr(x: Any) -> str:
    v = num(x)
    return "n/a" if v is None else f"{v:.4g}"


def ci_pair(ci: Any) -> tuple[float, float] | None:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = num(ci[0]), num(ci[1])
    return None if lo is None or hi is None else (lo, hi)


def outside_ci(v: Any, ci: Any) -> bool:
    """True when a value lies outside its own interval (bootstrap bias of binned metrics)."""
    c, x = ci_pair(ci), num(v)
    return c is not None and x is not None and not (c[0] - 1e-12 <= x <= c[1] + 1e-12)


CI_NOTE = (
    "A value outside its own interval is not a bug: binned calibration errors are biased upward "
    "under "
    "resampling (sampling noise counts as miscalibration), so the percentile interval of a small "
    "ECE can sit "
    "entirely above it. Read such an interval as 'the error is at most about its upper end'."
)


def fci(v: Any, ci: Any, fmt: Callable[[Any], str] = f4) -> str:
    c = ci_pair(ci)
    if num(v) is None:
        return "n/a"
    return f"{fmt(v)} [{fmt(c[0])}, {fmt(c[1])}]" if c else fmt(v)


def arrow(a: str, b: str) -> str:
    return f"{a} → {b}"


def fmt_value(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt_value(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(x) for x in v) or "none"
    return str(v)


# --------------------------------------------------------------------------------------------
# wording


def ece_tag(run: Run) -> str:
    """``15 bins, IoU 0.5``; a run matched by another overlap names it (``OKS 0.5``, ``mask IoU 0.5``),
    as the summary does."""
    return f"{run.settings.ece_bins} bins, {match_words(run)}"


def match_words(run: Run) -> str:
    """The overlap a box must reach to be correct: ``IoU 0.5`` (``OKS 0.5``, ``mask IoU 0.5``)."""
    rule = run.result.matching
    measure = rule.measure if rule is not None and rule.by != "box" else "IoU"
    return f"{measure} {run.settings.iou_match:g}"


def dece_tag(run: Run) -> str:
    bins = run.settings.dece_bins
    if bins:
        return "bins " + "×".join(str(int(b)) for b in bins) + " over conf, x, y, w, h"
    return "box position and size"


def laece_tag(run: Run) -> str:
    return f"{run.settings.laece_bins} bins, loc. IoU {run.settings.loc_iou_match:g}"


def verdict(t: float | None) -> str:
    """A few words for a temperature (shared with the CLI's summary): see
    :func:`det_calib.record.run_result.temperature_verdict`."""
    return temperature_verdict(t)


def verdict_sentence(t: float | None) -> str:
    if t is None:
        return "No temperature was fitted for this head: only raw scores are shown."
    v = verdict(t)
    if v == "too extreme":
        return (
            f"T = {t:.3f} > 1: the raw scores are too extreme, too close to 0 and 1: "
            "over-confident where "
            "they are high, under-confident where they are low. Calibration pulls every score "
            "towards 0.5: "
            "scores above 0.5 go down, scores below 0.5 go up. The reliability diagram shows which "
            "end "
            "dominated the fit."
        )
    if v == "too timid":
        return (
            f"T = {t:.3f} < 1: the raw scores are too timid, too close to 0.5: under-confident "
            "where they "
            "are high, over-confident where they are low. Calibration pushes scores away from 0.5: "
            "scores "
            "above 0.5 go up, scores below 0.5 go down. The reliability diagram shows which end "
            "dominated "
            "the fit."
        )
    return f"T = {t:.3f} ≈ 1: the raw scores are already close to calibrated; calibration changes them little."


def where_sentence(bins: Any, label: str) -> str:
    """Where in the confidence range the calibration error comes from."""
    count = np.asarray(bins.count, dtype=float)
    m = count > 0
    if not m.any():
        return f"{label}: no boxes."
    gap = np.asarray(bins.conf)[m] - np.asarray(bins.acc)[m]
    contrib = count[m] / count.sum() * np.abs(gap)
    total = float(contrib.sum())
    if total <= 0:
        return f"{label}: every bin is on the diagonal."
    over = float(contrib[gap > 0].sum()) / total
    k = int(np.argmax(contrib))
    lo, hi = np.asarray(bins.edges)[:-1][m][k], np.asarray(bins.edges)[1:][m][k]
    kind = "over-confident" if gap[k] > 0 else "under-confident"
    return (
        f"{label}: {over:.0%} of the ECE comes from bins where confidence exceeds accuracy "
        "(over-confident), "
        f"{1 - over:.0%} from bins where it falls short (under-confident). The largest share is "
        "conf "
        f"{lo:.2f}–{hi:.2f}: {int(count[m][k]):,} boxes, mean conf "
        f"{np.asarray(bins.conf)[m][k]:.3f}, "
        f"fraction correct {np.asarray(bins.acc)[m][k]:.3f} ({kind})."
    )


def shift_sentence(e: ThresholdShift) -> str:
    """The kept-set change at one threshold, in one sentence."""
    s = (
        f"At conf {fthr(e.conf)}, calibrated scores keep {fint(e.kept_after)} boxes instead of "
        f"{fint(e.kept_before)}: {fint(e.added)} added ({fint(e.added_correct)} of them correct), "
        f"{fint(e.removed)} removed ({fint(e.removed_correct)} correct); precision "
        f"{f3(e.precision_before)} → {f3(e.precision_after)}, recall {f3(e.recall_before)} → "
        f"{f3(e.recall_after)}"
    )
    eq = num(e.equivalent_conf)
    if eq is not None and eq != e.conf:
        s += f"; calibrated conf {eq:.3f} keeps exactly the raw set"
    return s + "."


def map_sentence(ev: EvalResult, method: str = "temperature") -> str:

    s = (
        f"COCO mAP50-95 ({engine_label(ev.map_engine)}) {f4(ev.map50_95_before)} → "
        f"{f4(ev.map50_95_after)}, "
        f"mAP50 {f4(ev.map50_before)} → {f4(ev.map50_after)} (the detector's boxes, rescored)"
    )
    known = method in registry.methods()
    per_class = known and registry.method_spec(method).per_class
    if known and registry.method_spec(method).uses_size:
        return s + (
            ": a size-conditioned map re-ranks the boxes of a class by their size, so mAP moves; "
            "the "
            "figures before and after are what it costs or gains."
        )
    if ev.map_identical is True:
        return s + (
            ": identical (a per-class monotone map keeps each class's ranking, which is what COCO "
            "AP reads)."
            if per_class
            else ": identical, as it must be (one monotone map keeps the ranking of boxes)."
        )
    if ev.map_identical is False:
        return s + (
            ": NOT identical: a per-class map reorders boxes across classes, which changes the top "
            "max_det boxes of an image."
            if per_class
            else ": NOT identical; one monotone map cannot change the ranking, so check the run."
        )
    return s + "."


# --------------------------------------------------------------------------------------------
# data helpers


def head_eval(run: Run, head: str) -> EvalResult:
    """The head's evaluation, or an empty one (every number n/a)."""
    return run.head(head).eval or EvalResult()


def eval_images_differ(subjects: Sequence[Any]) -> str | None:
    """Where compared runs were evaluated on different images (another eval split, image count or
    ground-truth count; the ``data.yaml`` is named, not compared: the same data elsewhere is the same
    images), a sentence that says so with each run's; None where they agree (the heads of one run, an
    engine beside its ``.pt`` on the same data)."""
    seen = []
    for s in subjects:
        ev, st = head_eval(s.run, s.head), s.run.settings
        # a half of one split is drawn by the run's seed: another seed, other images
        seed = st.bootstrap.seed if Split.half_of(st.eval_split or "")[1] is not None else None
        seen.append((s.run.result.data, st.eval_split, seed, ev.images, ev.n_gt))
    if len({k[1:] for k in seen}) < 2:
        return None
    each = "; ".join(
        f"{s.name}: split {split}{'' if seed is None else f' (halves of seed {seed})'} of "
        f"{data or 'n/a'}, {fint(images)} images, {fint(n_gt)} ground-truth boxes"
        for s, (data, split, seed, images, n_gt) in zip(subjects, seen, strict=True)
    )
    return (
        f"The runs were evaluated on different images ({each}): each figure describes its own "
        "images, so a difference may be the images', not the calibration's"
    )


def bins_of(conf: np.ndarray | None, correct: np.ndarray, n_bins: int) -> Any | None:
    if conf is None:
        return None
    return metrics.reliability_bins(conf, correct, n_bins=n_bins)


def per_class_rows(run: Run, head: str, hb: HeadBoxes) -> list[ClassResult]:
    """Per-class results of the run, or results built from the boxes when it has none.

    A missing ``few_boxes`` flag is derived from ``min_class_boxes``, a missing name from the
    class names."""
    min_boxes = run.settings.min_class_boxes
    rows = run.head(head).per_class
    if rows:
        return [
            dataclasses.replace(
                r,
                name=r.name
                if r.name is not None
                else run.class_name(r.cls if r.cls is not None else -1),
                few_boxes=r.few_boxes if r.few_boxes is not None else (r.boxes or 0) < min_boxes,
            )
            for r in rows
        ]
    out = []
    for c in np.unique(hb.cls):
        n = int((hb.cls == c).sum())
        out.append(
            ClassResult(
                cls=int(c),
                name=run.class_name(int(c)),
                boxes=n,
                correct=int(hb.correct[hb.cls == c].sum()),
                few_boxes=n < min_boxes,
            )
        )
    return out


def heads_label(run: Run) -> str:
    return ", ".join(HEAD_LABEL.get(h, h) for h in run.heads)


def consistency_warnings(run: Run, head: str, hb: HeadBoxes, before: Any, after: Any) -> list[str]:
    """Warnings where boxes.parquet and calibration.json disagree."""
    ev = head_eval(run, head)
    out = []
    for which, bins in (("before", before), ("after", after)):
        want = num(ev.scores(which).ece)
        if bins is None or want is None:
            continue
        got = bins.ece()
        if math.isfinite(got) and abs(got - want) > 1e-6 + 1e-4 * abs(want):
            out.append(
                f"Head {head}: the boxes in {BOXES_FILE} give ECE {which} calibration {got:.4f}, "
                f"{CALIBRATION_FILE} says {want:.4f}; the two files may not come from the same run."
            )
    if ev.boxes is not None and ev.boxes != hb.n:
        out.append(
            f"Head {head}: {BOXES_FILE} holds {hb.n:,} usable boxes on split {hb.split}, "
            f"{CALIBRATION_FILE} says {ev.boxes:,}."
        )
    for w in out:
        _log.warning(w)
    return out


MAX_ABSENT_NAMED = 30
"""Names listed at most in a sentence (classes without boxes, corrupt images); the rest are counted."""


def op_at(ops: list[OperatingFigures], t: float) -> OperatingFigures | None:
    """The operating-point figures at conf ``t``, or None."""
    return next((o for o in ops if num(o.conf) == t), None)


def shift_at(shifts: list[ThresholdShift], t: float | None) -> ThresholdShift | None:
    """The kept-set shift at conf ``t``, or None."""
    return None if t is None else next((s for s in shifts if num(s.conf) == t), None)

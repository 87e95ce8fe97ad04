"""The operating point and the "Calibrators compared" section (report and compare).

Numbers come from ``calibration.json`` (``eval.<head>.operating_*`` and the candidates of
``--method auto``); the reliability curves of the candidates are recomputed from ``boxes.parquet``
with each candidate's calibrator rebuilt from the JSON.
"""

from __future__ import annotations

import logging

import numpy as np

from det_calib.calibrators import registry
from det_calib.calibrators.registry import calibrator_from_dict
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_folder import HeadBoxes, Run
from det_calib.record.run_result import Calibrator, CandidateRecord, RecordedSettings
from det_calib.report.record_words import (
    floor_gap_words,
    left_words,
    operating_point_worse,
    temperature_words,
)
from det_calib.selection.cross_validation import paired_rule_words

from . import plots
from .common import ece_tag, f4, fci, fint, fthr, head_eval
from .context import ReportContext
from .document import Heading, Para, Table, slug
from .page import Page

_log = logging.getLogger(__name__)

INTERVAL_NOTE = (
    "Intervals: 95% image bootstrap, each containing its estimate. ECE and LaECE: the "
    "bias-corrected "
    "percentile interval, or the normal interval (estimate ± 1.96 SD of the replicates) where the "
    "resampling bias of a binned error puts the estimate outside it; LaECE_0: the normal interval, "
    "because its replicates sit above the estimate by more than their spread, so no "
    "percentile-type "
    "interval would contain it."
)
FLOOR_NOTE = (
    "ECE floor: the kept-set ECE a perfectly calibrated detector would score on the same "
    "calibrated "
    "kept boxes (labels drawn 200 times from their confidences; mean and 95% range). A finite set "
    "of "
    "boxes has a non-zero ECE even when perfectly calibrated; an ECE inside that range is as low "
    "as "
    "this many boxes can show. LaECE_0 floor: the same for the kept-set LaECE_0, the IoU targets "
    "drawn "
    "200 times with mean each box's conf (matched with probability conf / the mean IoU of the kept "
    "matched boxes, the IoU drawn from theirs, lifted towards 1 for a conf above that mean); n/a "
    "for runs "
    "written before it."
)


def method_words(run: Run, head: str) -> str:
    """The head's calibrator in a few words."""
    rec = run.head(head).calibrator
    if rec is None:
        return "no calibrator"
    if rec.method == "none":
        return (
            "keep the raw scores (no calibrator beat them on held-out folds by more than one "
            "paired standard "
            "error)"
            if run.head(head).candidates
            else "keep the raw scores"
        )
    floor = run.head(head).fit_floor or 0.0
    return _calibrator_words(rec) + (
        f" fitted on boxes with raw conf ≥ {floor:g}" if floor else " fitted on all boxes"
    )


def _calibrator_words(rec: Calibrator | None, *, floor: float | None = None) -> str:
    """A calibrator and its fitted parameters in a few words, read from its record.

    >>> _calibrator_words(Calibrator("platt", {"map": {"a": 1.2149, "b": 0.3412}}))
    'Platt a = 1.21, b = 0.341'
    >>> _calibrator_words(Calibrator("isotonic", {"map": {"map": {"x": [0, 1, 2]}}}), floor=0.125)
    'isotonic (3 steps) above raw conf 0.125'
    >>> _calibrator_words(Calibrator("none", {}))
    'none: raw scores'
    """
    if rec is None:
        return "no calibrator recorded"
    words = rec.method
    if rec.method in registry.methods():
        m = rec.params.get("map")
        words = registry.method_spec(rec.method).cls.words(
            m if isinstance(m, dict) else rec.params, rec.method
        )
    return words + (f" above raw conf {floor:g}" if floor and rec.method != "none" else "")


def deployed_words(run: Run, head: str) -> str:
    """The head's deployed calibrator with its parameters and fit floor, in words."""
    hr = run.head(head)
    return _calibrator_words(hr.calibrator, floor=hr.fit_floor)


def _map_words(run: Run, head: str) -> str:
    """What happens to mAP, never "unchanged" where it is not."""
    hr, ev = run.head(head), head_eval(run, head)
    rec = hr.calibrator
    uv = hr.ultralytics_val
    if rec is not None and rec.method not in registry.global_methods():
        val = ""
        if uv is not None and uv.ran and uv.calibrated is not None:
            val = (
                f"; the calibrated model's Ultralytics val mAP50-95 {f4(uv.original.map50_95)} → "
                f"{f4(uv.calibrated.map50_95)} (a per-class map can change the winning class and "
                "the top-k)"
            )
        same = "identical" if ev.map_identical else "CHANGED"
        return f"mAP of the detector's own boxes rescored after selection {same}{val}"
    if ev.map_identical is None:
        return ""
    words = f"mAP {'unchanged' if ev.map_identical else 'CHANGED'}"
    if uv is not None and uv.verified is False:
        words += f"; Ultralytics val {uv.note}"
    elif uv is not None and uv.changes():
        words += "; Ultralytics val CHANGED by " + ", ".join(
            f"{d:+.2g} ({k})" for k, d in uv.changes().items()
        )
    return words


def lead(run: Run, head: str) -> str:
    """The headline sentence of a head: the operating point first."""
    ev = head_eval(run, head)
    parts = [method_words(run, head)]
    iou = run.settings.target == "iou"
    for o0, o1 in zip(ev.operating_before, ev.operating_after, strict=False):
        ece = f"ECE {fci(o0.ece, o0.ece_ci)} → {fci(o1.ece, o1.ece_ci)}" + floor_words(o1)
        la = (
            f"LaECE_0 {fci(o0.laece0, o0.laece0_ci)} → {fci(o1.laece0, o1.laece0_ci)}"
            + _laece_floor_words(o1)
        )
        pair = f"{la} (the target, --target iou), {ece}" if iou else f"{ece}, {la}"
        parts.append(f"boxes kept at conf {fthr(o0.conf)}: {pair}")
    parts.append(f"all-box ECE {f4(ev.before.ece)} → {f4(ev.after.ece)}")
    m = _map_words(run, head)
    if m:
        parts.append(m)
    worse = operating_point_worse(ev, run.settings.target)
    if worse is not None:
        parts.append(
            f"WORSE than the raw scores where decisions are made ({worse}): "
            + (
                "the eval split does not bear out what the fit split's held-out folds showed; "
                "deploy the "
                "original model for this head, or calibrate on more images"
                if run.head(head).candidates
                else "keep the raw scores for this head, or let the default --method auto choose"
            )
        )
    left = left_words(run.head(head), ev, run.settings.target)
    if left:
        parts.append(left)
        why = floor_gap_words(run.head(head), ev) if run.settings.target != "iou" else None
        if why:
            parts.append(why)
    tw = temperature_words(run.head(head).temperature_fit)
    if tw:
        parts.append(tw)
    return "; ".join(parts) + "."


def floor_words(o: OperatingFigures) -> str:
    """`` (a perfectly calibrated detector: 0.0330 [0.0210, 0.0460] on these boxes)``, or "" when not computed."""
    return _floor_words(o.ece_floor, o.ece_floor_range, o.at_floor)


def _laece_floor_words(o: OperatingFigures) -> str:
    """:func:`floor_words` of the kept-set LaECE_0 (its sampling floor), or "" when not computed."""
    return _floor_words(o.laece_floor, o.laece_floor_range, o.laece_at_floor)


def _floor_words(
    floor: float | None, floor_range: tuple[float, float] | None, at_floor: bool | None
) -> str:
    if floor is None:
        return ""
    at = "; at that floor" if at_floor else ""
    return f" (a perfectly calibrated detector would score {fci(floor, floor_range)} on these boxes{at})"


def operating_cells(
    o0: OperatingFigures, o1: OperatingFigures, *, raw_floor: bool = False
) -> list[str]:
    """The kept set at one threshold, raw (``o0``) and calibrated (``o1``): boxes kept, ECE (and, with
    ``raw_floor``, the raw scores' sampling floor), ECE calibrated, its floor, then the same four (three)
    of LaECE_0."""
    cells = [f"{fint(o0.boxes)} → {fint(o1.boxes)}"]
    for v, ci, floor, floor_range in (
        ("ece", "ece_ci", "ece_floor", "ece_floor_range"),
        ("laece0", "laece0_ci", "laece_floor", "laece_floor_range"),
    ):
        cells.append(fci(getattr(o0, v), getattr(o0, ci)))
        if raw_floor:
            cells.append(fci(getattr(o0, floor), getattr(o0, floor_range)))
        cells += [
            fci(getattr(o1, v), getattr(o1, ci)),
            fci(getattr(o1, floor), getattr(o1, floor_range)),
        ]
    return cells


def operating_table(run: Run) -> Table | None:
    """Kept-set ECE and LaECE_0 at each threshold, raw and calibrated, per head: one row per head, threshold
    and figure (stacked, so that the table fits a 1400 px window; the same cells as
    :func:`operating_cells`)."""
    rows = []
    st = run.settings
    names = (f"ECE ({ece_tag(run)})", f"LaECE_0 ({st.laece_bins} bins)")
    for h in run.heads:
        ev = head_eval(run, h)
        for o0, o1 in zip(ev.operating_before, ev.operating_after, strict=False):
            kept, *cells = operating_cells(o0, o1)
            for name, figure in zip(names, (cells[:3], cells[3:]), strict=True):
                rows.append([h, fthr(o0.conf), kept, name, *figure])
    if not rows:
        return None
    return Table(
        [
            "Head",
            "Conf",
            "Boxes kept raw → calibrated",
            "Figure (lower is better)",
            "Raw [95% CI]",
            "Calibrated [95% CI]",
            "Sampling floor, calibrated (perfectly calibrated) [95% range]",
        ],
        rows,
        caption="At the operating point: calibration of the boxes kept at each conf threshold "
        "(the floor and the intervals: below the table)",
        css="operating",
    )


def _op_cells(ops: list[OperatingFigures]) -> list[str]:
    return [c for o in ops for c in (fci(o.ece, o.ece_ci), fci(o.laece0, o.laece0_ci))]


def calibrators_section(page: Page, ctx: ReportContext) -> None:
    """The "Calibrators compared" section, for every head (every compared run) that ``--method auto``
    chose: each candidate, its CV score, and why one was chosen."""
    if ctx.compared:
        for s in ctx.subjects:
            _candidates_section(page, s.run, {s.head: s.hb}, label=f": {s.name}", heads=[s.head])
    else:
        _candidates_section(page, ctx.run, ctx.hbs)


def _candidates_section(
    b: Page, run: Run, hbs: dict[str, HeadBoxes], *, label: str = "", heads: list[str] | None = None
) -> None:
    """Every candidate of ``--method auto`` on the eval split, its CV score, and why one was chosen
    (``heads``: only these; ``label``: a suffix of the heading, for ``compare``)."""
    heads = [h for h in (heads or run.heads) if run.head(h).candidates]
    if not heads:
        return
    st = run.settings
    thr = list(st.conf_thresholds)
    b.add(Heading(2, f"Calibrators compared{label}", "calibrators" if not label else None))
    reps = _repeats(run, heads)
    folds = f"{st.cv_folds}-fold cross-validation grouped by image" + (
        f", repeated {reps} times with fresh folds," if reps > 1 else ""
    )
    order = registry.methods()
    methods = sorted(
        {c.calibrator.method for h in heads for c in run.head(h).candidates or []},
        key=lambda m: order.index(m) if m in order else len(order),
    )
    b.add(
        Para(
            f"--method auto tried {', '.join(methods)} on two fit ranges (all boxes, and boxes "
            "above half the "
            f"lowest conf) by {folds} on split {st.fit_split}, scoring each by the {st.criterion} "
            "of the held-out "
            f"boxes above conf {min(thr):g}. Every candidate is scored on the same folds, so they "
            "are compared "
            f"paired, fold by fold: {paired_rule_words()} (simplest first: "
            f"{' < '.join(m for m in order if m in methods)}; standard errors corrected for the "
            "overlap of the "
            "training folds). With no eligible calibrator the raw scores are kept. Each method's "
            "best fit range "
            f"was then refitted on the whole fit split and scored on split {st.eval_split} below.",
            "note",
        )
    )
    for h in heads:
        _head_candidates(b, run, h, hbs[h], label=label, titled=len(heads) > 1)


def _head_candidates(b: Page, run: Run, h: str, hb: HeadBoxes, *, label: str, titled: bool) -> None:
    """One head's candidates: the CV table, their figures on the eval split, their reliability, per class."""
    st = run.settings
    thr = list(st.conf_thresholds)
    cands = run.head(h).candidates or []
    chosen = next((c for c in cands if c.selected), None)
    if titled:
        b.add(Heading(3, f"Head {h}"))
    if chosen is not None:
        why = _reason(cands, chosen, st.criterion)
        b.add(Para(f"Chosen: {chosen.name}. {why}", "lead"))
    b.add(_cv_table(cands, st, h))
    scored = [c for c in cands if c.eval]
    b.add(_eval_table(scored, st, h))
    if hb.n and scored:
        curves = []
        for c in scored:
            conf = _candidate_conf(c, hb)
            if conf is not None:
                curves.append((c.name, conf, hb.correct))
        png = plots.operating_reliability(
            curves,
            low=min(thr),
            n_bins=st.ece_bins,
            title=f"Candidates above conf {min(thr):g}, head {h}",
        )
        b.fig(
            f"candidates_{slug(label)}" if label else f"candidates_{h}",
            png,
            f"Reliability of the boxes each candidate keeps at conf {min(thr):g}, head {h}, split "
            f"{hb.split}; {st.ece_bins} equal-width bins over ({min(thr):g}, 1]. Below: boxes per "
            "bin.",
            f"Reliability curves of every candidate calibrator, head {h}",
        )
    b.add(_class_table(run, h, scored, min(thr)))


def _cv_table(cands: list[CandidateRecord], st: RecordedSettings, h: str) -> Table:
    rows = []
    for c in cands:
        cv = c.cv
        diff = "n/a" if cv.diff is None else f"{cv.diff:+.4f} ± {f4(cv.diff_se)}"
        dnone = (
            "n/a"
            if cv.diff_none is None or c.calibrator.method == "none"
            else f"{cv.diff_none:+.4f} ± {f4(cv.diff_none_se)}"
        )
        rows.append(
            [
                c.name + (" ✔" if c.selected else ""),
                fthr(c.fit_min_conf or 0.0),
                f"{f4(c.cv_score)} ± {f4(cv.se)}",
                dnone,
                diff,
                "n/a" if cv.shrinkage is None else f"{cv.shrinkage:g}",
                cv.error or cv.verdict or "",
            ]
        )
    return Table(
        [
            "Candidate",
            "Fit floor",
            f"CV {st.criterion} (mean ± SE)",
            "Minus raw (none), paired (± SE)",
            "Minus the best, paired (± SE)",
            "Shrinkage",
            "Why it won or lost",
        ],
        rows,
        caption=f"Cross-validation on split {st.fit_split}, head {h} (lower is better)",
        css="cv-candidates",
        attrs={"data-head": h},
    )


def _eval_table(scored: list[CandidateRecord], st: RecordedSettings, h: str) -> Table:
    thr = list(st.conf_thresholds)
    cols = ["Calibrator"] + [
        x for t in thr for x in (f"ECE kept at {fthr(t)}", f"LaECE_0 kept at {fthr(t)}")
    ]
    cols += [f"All-box ECE ({st.ece_bins} bins)", "NLL", "Brier"]
    erows = []
    for c in scored:
        e = c.eval_figures
        erows.append(
            [c.name + (" ✔" if c.selected else "")]
            + _op_cells(c.operating())
            + [fci(e.ece_all, e.ece_all_ci), f4(e.nll), f4(e.brier)]
        )
    return Table(
        cols,
        erows,
        caption=f"Every candidate on split {st.eval_split}, head {h}. " + INTERVAL_NOTE,
        css="candidates-eval",
        attrs={"data-head": h},
    )


def _repeats(run: Run, heads: list[str]) -> int:
    """How many fold assignments the CV used (1 for runs recorded before repeats existed)."""
    for h in heads:
        for c in run.head(h).candidates or []:
            return int(c.calibrator.params.get("n_repeats") or 1)
    return 1


def _reason(cands: list[CandidateRecord], chosen: CandidateRecord, criterion: str) -> str:
    verdict = chosen.cv.verdict
    if verdict:
        return verdict[0].upper() + verdict[1:] + "."
    ok = [c for c in cands if c.cv_score is not None]  # runs written before the paired rule
    best = min(ok, key=lambda c: c.cv_score) if ok else chosen
    if best is chosen:
        return f"It has the lowest cross-validated {criterion}."
    return (
        f"It is the simplest candidate within one standard error of the best, {best.name} "
        f"({f4(best.cv_score)} ± {f4(best.cv.se)} vs {f4(chosen.cv_score)})."
    )


def _candidate_conf(c: CandidateRecord, hb: HeadBoxes) -> np.ndarray | None:
    """The eval boxes' conf under candidate ``c`` (its map as the run recorded it; None: not recorded)."""
    if c.calibrator.method == "none":
        return hb.conf
    rec = (c.eval or {}).get("calibrator")
    if rec is None:
        return None

    return hb.raw.scored(calibrator_from_dict(rec)).conf


def _class_table(run: Run, h: str, scored: list[CandidateRecord], low: float) -> Table:
    # each candidate's figures decoded once, not once a class
    kept = [c.eval_figures.class_kept_ece for c in scored]
    classes = sorted({int(k) for per_class in kept for k in per_class})
    rows = []
    for k in classes:
        vals = [per_class.get(str(k)) for per_class in kept]
        rows.append([run.class_name(k)] + [f4(v) for v in vals])
    return Table(
        ["Class"] + [c.name for c in scored],
        rows,
        caption=f"Per class: ECE of the boxes each candidate keeps at conf {low:g}, head {h}",
        css="candidates-per-class",
        attrs={"data-head": h},
    )

"""The statistics of ``det-calib check`` and their verdicts: calibration of the kept boxes
(:func:`calibration_tests`, per class :func:`class_checks`; :func:`calibration_verdict`), detection
quality against the run's eval split (:func:`detection_tests`, :func:`detection_verdict`), and the
command's exit code (:func:`exit_code`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from det_calib.check import drift_tests as drift
from det_calib.check.check_record import (
    CHANGED,
    DRIFTED,
    HOLDS,
    MIN_IMAGES,
    NO_SHIFT,
    SHIFTED,
    TOO_FEW,
    TOO_FEW_IMAGES,
    CalibrationTests,
    ClassCheck,
    CrowdedImage,
    DetectionTests,
    ShiftTests,
)
from det_calib.data.box_view import BoxView
from det_calib.metrics.calibration import ece
from det_calib.report.common import f3, num

__all__ = [
    "QUESTIONS",
    "LabelledChecks",
    "exit_code",
    "labelled_checks",
    "question_level",
    "shift_check",
    "worst",
]

QUESTIONS = 2
"""The questions a labelled check answers (calibration, detection quality); ``--alpha`` is split equally
between them (Bonferroni), so that the exit code, one decision over both, is a false alarm on at most
``alpha`` of clean images rather than about twice that."""


def question_level(alpha: float) -> float:
    """The family-wise level of each question of a labelled check: ``alpha`` halved (:data:`QUESTIONS`).

    >>> question_level(0.05)
    0.025
    """
    return alpha / QUESTIONS


def _p_text(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "< 1e-4" if p < 1e-4 else f"{p:.3g}"


def _per_image(v: BoxView, n_img: int, *, correct: bool = False) -> np.ndarray:
    """Per image 0..n_img-1: the number of boxes (or, ``correct``, of correct boxes) of the view."""
    w = v.correct.astype(np.float64) if correct else None
    return np.bincount(v.image_id, weights=w, minlength=n_img)[:n_img].astype(np.float64)


def _rest_and_crowded(view: BoxView, set_apart: bool = True) -> tuple[BoxView, np.ndarray]:
    """The kept boxes outside the crowded images (:func:`~det_calib.check.drift_tests.crowded_images`),
    and the crowded images' ids (most boxes first); ``set_apart`` False: every box, no crowded image."""
    ids = drift.crowded_images(view.image_id) if set_apart else np.zeros(0, np.int64)
    return (view.subset(~np.isin(view.image_id, ids)) if ids.size else view), ids


def _crowded_figures(view: BoxView, ids: np.ndarray) -> tuple[int, int, float]:
    m = np.isin(view.image_id, ids)
    return int(m.sum()), int(view.correct[m].sum()), float(view.conf[m].sum())


def _calibration_tests(
    kept: BoxView,
    then: BoxView,
    *,
    conf: float,
    n_img: int,
    n_img_then: int,
    n_classes_tested: int,
    set_apart: bool = True,
) -> CalibrationTests:
    """:class:`CalibrationTests` of the kept boxes (calibrated conf > ``conf``) of the new images
    (``n_img`` of them) against ``then``, the same kept set of the run's eval split (``n_img_then``
    images). The tests of the verdict (the change in the large, the binned change) run without the
    crowded images of either side, whose count is compared apart (:func:`~.drift_tests.count_change`);
    the absolute tests (``z``, Hosmer-Lemeshow) are of every kept box."""
    p, y, img = kept.conf, kept.correct, kept.image_id
    c = drift.calibration_in_the_large(p, y, img)
    hl = drift.hosmer_lemeshow(p, y, img)
    t = drift.calibration_in_the_large(then.conf, then.correct, then.image_id) if then.n else None
    rest, ids = _rest_and_crowded(kept, set_apart)
    rest_then, ids_then = _rest_and_crowded(then, set_apart)
    r = drift.calibration_in_the_large(rest.conf, rest.correct, rest.image_id)
    now3, then3 = (
        (rest.conf, rest.correct, rest.image_id),
        (rest_then.conf, rest_then.correct, rest_then.image_id),
    )
    ch, bc = drift.citl_change(then3, now3), drift.binned_change(then3, now3)
    cb, co, ce = _crowded_figures(kept, ids)
    tb, to, te = _crowded_figures(then, ids_then)
    rate = ids.size + ids_then.size > 0
    share = _variance_share(kept, ids)
    return CalibrationTests(
        conf=conf,
        boxes=c.boxes,
        images=c.images,
        observed=c.observed,
        expected=c.expected,
        mean_conf=num(c.mean_conf),
        fraction_correct=num(c.fraction_correct),
        z=num(c.z),
        p_value=num(c.p_value),
        design_effect=num(c.design_effect),
        detectable_gap=num(r.detectable_gap) if r.boxes else None,
        hl_groups=None if hl is None else hl.groups,
        hl_statistic=None if hl is None else hl.statistic,
        hl_p_value=None if hl is None else hl.p_value,
        boxes_then=None if t is None else t.boxes,
        mean_conf_then=None if t is None else num(t.mean_conf),
        fraction_correct_then=None if t is None else num(t.fraction_correct),
        z_then=None if t is None else num(t.z),
        p_value_then=None if t is None else num(t.p_value),
        gap_then=None if ch is None else ch.then,
        gap=None if ch is None else ch.now,
        change_z=None if ch is None else num(ch.statistic),
        change_p=None if ch is None else num(ch.p_value),
        binned_change_statistic=None if bc is None else bc.statistic,
        binned_change_bins=None if bc is None else bc.df,
        binned_change_p=None if bc is None else bc.p_value,
        tests=(ch is not None) + (bc is not None) + n_classes_tested + rate,
        crowded_images=int(ids.size),
        crowded_boxes=cb,
        crowded_observed=co,
        crowded_expected=ce,
        crowded_variance_share=share,
        crowded_images_then=int(ids_then.size),
        crowded_boxes_then=tb,
        crowded_observed_then=to,
        crowded_expected_then=te,
        crowded_rate_p=drift.count_change(ids_then.size, n_img_then, ids.size, n_img)
        if rate
        else None,
        images_then=n_img_then,
        images_new=n_img,
        rest_boxes=r.boxes,
        rest_observed=r.observed,
        rest_expected=float(r.expected),
        rest_z=num(r.z),
        rest_p_value=num(r.p_value),
    )


def _variance_share(view: BoxView, ids: np.ndarray) -> float | None:
    """The crowded images' share of the image-clustered sum of squares of observed - expected."""
    if not ids.size:
        return None
    _, inv = np.unique(view.image_id, return_inverse=True)
    r = np.bincount(inv.ravel(), weights=view.correct.astype(np.float64) - view.conf)
    r = (r - r.mean()) ** 2
    crowded = np.isin(np.unique(view.image_id), ids)
    return float(r[crowded].sum() / r.sum()) if r.sum() > 0 else None


def _crowded_list(kept: BoxView, ids: np.ndarray, names: dict[int, str]) -> list[CrowdedImage]:
    """:class:`CrowdedImage` of each crowded image ``ids`` of the kept boxes (``names``: image id -> file name)."""
    out = []
    for i in ids:
        m = kept.image_id == i
        share = _variance_share(kept, np.array([i]))
        out.append(
            CrowdedImage(
                image=names.get(int(i), str(int(i))),
                boxes=int(m.sum()),
                box_share=float(m.sum() / max(1, kept.n)),
                observed=int(kept.correct[m].sum()),
                expected=float(kept.conf[m].sum()),
                variance_share=share,
            )
        )
    return out


def _calibration_verdict(
    t: CalibrationTests,
    per_class: list[ClassCheck],
    *,
    alpha: float,
    min_boxes: int,
    crowded: list[CrowdedImage] | tuple[CrowdedImage, ...] = (),
) -> tuple[str, str]:
    """``(verdict, line)`` of the calibration question (Bonferroni over :attr:`CalibrationTests.tests`);
    the line names the ``crowded`` images and what they hold."""
    head = (
        f"kept boxes at conf {t.conf:g}: {t.boxes}, {t.observed} correct vs {t.expected:.1f} "
        "expected "
        f"(mean conf {f3(t.mean_conf)}, fraction correct {f3(t.fraction_correct)}; z {_f2(t.z)}, "
        f"p {_p_text(t.p_value)}"
    )
    head += (
        f"; Hosmer-Lemeshow p {_p_text(t.hl_p_value)} over {t.hl_groups} bins)"
        if t.hl_groups
        else ")"
    )
    apart = bool(t.crowded_images or t.crowded_images_then)
    head += (
        f"; against the run's eval split{' outside the crowded images' if apart else ''}: gap "
        "(fraction "
        f"correct - mean conf) {f3(t.gap_then)} -> {f3(t.gap)} (change z {_f2(t.change_z)}, p "
        f"{_p_text(t.change_p)}), binned change p {_p_text(t.binned_change_p)}"
    )
    head = _crowded_text(t, crowded) + head
    if (t.boxes or 0) < min_boxes:
        return (
            TOO_FEW,
            f"calibration: {TOO_FEW} ({t.boxes} kept boxes, fewer than {min_boxes}); {head}",
        )
    level = alpha / max(1, t.tests or 1)
    bad = [
        name
        for name, p in (
            ("in the large", t.change_p),
            ("binned", t.binned_change_p),
            ("share of crowded images", t.crowded_rate_p),
        )
        if p is not None and p < level
    ]
    bad += [f"class {c.name}" for c in per_class if c.drifted]
    if bad:
        return (
            DRIFTED,
            f"calibration: {DRIFTED} ({', '.join(bad)} at family level {alpha:g}); {head}",
        )
    where, there = (" outside the crowded images", " there") if apart else ("", "")
    return HOLDS, (
        f"calibration: {HOLDS}{where} (no test below {alpha:g} / {t.tests}; a gap of "
        f"±{f3(t.detectable_gap)} would show{there}); {head}"
    )


def _crowded_text(
    t: CalibrationTests, crowded: list[CrowdedImage] | tuple[CrowdedImage, ...], *, named: int = 5
) -> str:
    """The part of the verdict line on crowded images ("" when neither side has one): the new ones by
    name (the first ``named``), their share of the kept boxes and of the clustered variance, correct
    against expected, the run's own, the test of their share of images, and the boxes outside them."""
    if not (t.crowded_images or t.crowded_images_then):
        return ""
    out = ""
    if t.crowded_images:
        share = (t.crowded_boxes or 0) / max(1, t.boxes or 0)
        var = (
            f" and {t.crowded_variance_share:.0%} of the image-clustered variance of observed - "
            "expected"
            if t.crowded_variance_share is not None
            else ""
        )
        each = ", ".join(
            f"{c.image} {c.boxes} boxes ({c.observed} correct vs {c.expected:.1f})"
            for c in crowded[:named]
        )
        more = f" and {len(crowded) - named} more" if len(crowded) > named else ""
        out += (
            f"{t.crowded_images} crowded image{'s' if t.crowded_images > 1 else ''} hold "
            f"{t.crowded_boxes} of "
            f"the {t.boxes} kept boxes ({share:.0%}){var}, {t.crowded_observed} correct vs "
            f"{t.crowded_expected:.1f} expected: {each}{more}; "
        )
    else:
        out += "no crowded image now; "
    then = (
        f"{t.crowded_images_then} ({t.crowded_boxes_then} boxes, {t.crowded_observed_then} correct "
        "vs "
        f"{t.crowded_expected_then:.1f})"
        if t.crowded_images_then
        else "none"
    )
    out += (
        f"the run's eval split had {then}; crowded images {t.crowded_images_then} of "
        f"{t.images_then} -> "
        f"{t.crowded_images} of {t.images_new} (p {_p_text(t.crowded_rate_p)}); outside them "
        f"{t.rest_boxes} "
        f"boxes, {t.rest_observed} correct vs {t.rest_expected:.1f} expected (z {_f2(t.rest_z)}, "
        f"p {_p_text(t.rest_p_value)}); "
    )
    return out


def _f2(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _detection_verdict(d: DetectionTests, *, alpha: float) -> tuple[str, str]:
    """``(verdict, line)`` of the detection-quality question (precision and recall, Bonferroni over 2)."""
    parts = []
    changed = []
    apart = d.precision_rest is not None
    for name, then, now, z, p in (
        ("recall", d.recall_then, d.recall, d.recall_z, d.recall_p),
        ("precision", d.precision_then, d.precision, d.precision_z, d.precision_p),
    ):
        rest = (
            f"; outside the crowded images {f3(d.precision_rest_then)} -> {f3(d.precision_rest)}, "
            if name == "precision" and apart
            else " ("
        )
        parts.append(f"{name} {f3(then)} -> {f3(now)}{rest}z {_f2(z)}, p {_p_text(p)})")
        if p is not None and p < alpha / 2:
            changed.append(name)
    tail = (
        f"at conf {d.conf:g}: "
        + "; ".join(parts)
        + f"; kept per image {_f2(d.kept_per_image_then)} -> "
        f"{_f2(d.kept_per_image)}; mAP50 {f3(d.map50_then)} -> {f3(d.map50)}"
    )
    if changed:
        return (
            CHANGED,
            f"detection quality: {CHANGED} ({' and '.join(changed)} at family level {alpha:g}) "
            f"{tail}",
        )
    return HOLDS, f"detection quality: {HOLDS} {tail}"


def _ratio_figures(
    then_num: Any, then_den: Any, now_num: Any, now_den: Any
) -> tuple[float | None, float | None, float | None, float | None]:
    """Both ratios, their z statistic and p-value (:func:`det_calib.check.drift_tests.ratio_test`), finite or None."""
    t = drift.ratio_test(then_num, then_den, now_num, now_den)
    return num(t.then), num(t.now), num(t.z), num(t.p_value)


def _detection_tests(
    kept_now: BoxView,
    gt_now: np.ndarray,
    n_img: int,
    kept_then: BoxView,
    gt_then: np.ndarray | None,
    n_gt_then: int,
    n_img_then: int,
    *,
    conf: float,
    maps: dict[str, float | None],
    rest: tuple[BoxView, BoxView] | None = None,
) -> DetectionTests:
    """:class:`DetectionTests` from the kept boxes of both sides and their ground truth per image
    (``gt_then`` None: the run's per-image ground truth is unknown; recall then is tested with
    its binomial variance, its total ``n_gt_then`` spread as one count per image). ``rest``: the
    kept boxes (now, then) outside the crowded images; where either side has crowded images,
    precision is tested on these (a handful of images holding hundreds of wrong boxes would set
    its clustered variance alone), and reported for all kept boxes beside them."""
    k1, c1 = _per_image(kept_now, n_img), _per_image(kept_now, n_img, correct=True)
    k0, c0 = _per_image(kept_then, n_img_then), _per_image(kept_then, n_img_then, correct=True)
    g0 = gt_then if gt_then is not None else np.full(n_img_then, n_gt_then / max(1, n_img_then))
    p0, p1, pz, pp = _ratio_figures(c0, k0, c1, k1)
    r0, r1, rz, rp = _ratio_figures(c0, g0, c1, gt_now)
    apart = rest is not None and (rest[0].n != kept_now.n or rest[1].n != kept_then.n)
    q0 = q1 = None
    if apart:
        rn, rt = rest
        q0, q1, pz, pp = _ratio_figures(
            _per_image(rt, n_img_then, correct=True),
            _per_image(rt, n_img_then),
            _per_image(rn, n_img, correct=True),
            _per_image(rn, n_img),
        )
    return DetectionTests(
        conf=conf,
        images=n_img,
        images_then=n_img_then,
        kept=int(k1.sum()),
        kept_then=int(k0.sum()),
        n_gt=int(gt_now.sum()),
        n_gt_then=int(n_gt_then),
        precision=p1,
        precision_then=p0,
        precision_z=pz,
        precision_p=pp,
        recall=r1,
        recall_then=r0,
        recall_z=rz,
        recall_p=rp,
        kept_per_image=float(k1.mean()) if n_img else None,
        kept_per_image_then=float(k0.mean()) if n_img_then else None,
        precision_rest=q1,
        precision_rest_then=q0,
        **maps,
    )


def _classes_tested(
    rest_now: BoxView, rest_then: BoxView, n_classes: int, min_boxes: int
) -> list[int]:
    """The classes whose change is tested: ``min_boxes`` kept boxes outside the crowded images on both sides."""
    return [
        c
        for c in range(n_classes)
        if min((rest_now.cls == c).sum(), (rest_then.cls == c).sum()) >= min_boxes
    ]


def _class_checks(
    kept_now: BoxView,
    kept_then: BoxView,
    gt_cls_now: np.ndarray,
    gt_cls_then: list[int],
    names: list[str],
    *,
    min_boxes: int,
    alpha: float,
    family: int,
    ece_bins: int,
    rest: tuple[BoxView, BoxView] | None = None,
) -> list[ClassCheck]:
    """Per class (with kept boxes or ground truth on either side): :class:`ClassCheck`; a class is
    ``drifted`` when the p-value of its change in calibration in the large is below ``alpha / family``.
    ``rest``: the kept boxes (now, then) outside the crowded images, on which the change is tested
    (default all kept boxes); the other figures are of all kept boxes."""

    out = []
    kc, kt = kept_now.cls, kept_then.cls
    p, y, img = kept_now.conf, kept_now.correct, kept_now.image_id
    yt = kept_then.correct
    rn, rt = rest if rest is not None else (kept_now, kept_then)
    for c, name in enumerate(names):
        m, mt = kc == c, kt == c
        n_gt = int((gt_cls_now == c).sum())
        g_then = gt_cls_then[c] if c < len(gt_cls_then) else 0
        if not (m.any() or mt.any() or n_gt or g_then):
            continue
        r = drift.calibration_in_the_large(p[m], y[m], img[m])
        a, b = rn.cls == c, rt.cls == c
        ch = drift.citl_change(
            (rt.conf[b], rt.correct[b], rt.image_id[b]), (rn.conf[a], rn.correct[a], rn.image_id[a])
        )
        tested = int(a.sum()) >= min_boxes and int(b.sum()) >= min_boxes and ch is not None
        out.append(
            ClassCheck(
                cls=c,
                name=name,
                kept=int(m.sum()),
                observed=r.observed,
                expected=float(r.expected),
                z=num(r.z),
                p_value=num(r.p_value),
                change_z=None if ch is None else num(ch.statistic),
                change_p=None if ch is None else num(ch.p_value),
                tested=tested,
                drifted=bool(tested and ch.p_value < alpha / max(1, family)),
                kept_ece=ece(p[m], y[m], n_bins=ece_bins) if m.any() else None,
                n_gt=n_gt,
                precision=float(y[m].mean()) if m.any() else None,
                recall=float(y[m].sum() / n_gt) if n_gt else None,
                kept_then=int(mt.sum()),
                precision_then=float(yt[mt].mean()) if mt.any() else None,
                recall_then=float(yt[mt].sum() / g_then) if g_then else None,
            )
        )
    return out


def worst(values: list[str], order: tuple[str, ...]) -> str:
    return max(values, key=order.index)


def exit_code(calibration: str | None, detection: str | None, shift: str | None) -> int:
    """The command's exit code for the verdicts (see :data:`EXIT_CODES`).

    >>> exit_code(HOLDS, HOLDS, None), exit_code(DRIFTED, CHANGED, None), exit_code(None, None, SHIFTED)
    (0, 5, 4)
    """
    if shift is not None:
        return {NO_SHIFT: 0, SHIFTED: 4, TOO_FEW_IMAGES: 6}[shift]
    drifted, changed = calibration == DRIFTED, detection == CHANGED
    if drifted:
        return 5 if changed else 3
    if changed:
        return 4
    return 6 if calibration == TOO_FEW else 0


class LabelledChecks(NamedTuple):
    """What :func:`labelled_checks` finds for one head on labelled new images."""

    calibration: CalibrationTests
    per_class: list[ClassCheck]
    detection: DetectionTests
    crowded: list[CrowdedImage]
    calibration_verdict: str
    calibration_line: str
    detection_verdict: str
    detection_line: str


def labelled_checks(
    kept: BoxView,
    then: BoxView,
    *,
    conf: float,
    names: list[str],
    gt_now: np.ndarray,
    gt_cls_now: np.ndarray,
    gt_then: np.ndarray | None,
    gt_cls_then: list[int],
    n_gt_then: int,
    n_img_then: int,
    alpha: float,
    min_boxes: int,
    ece_bins: int,
    image_names: dict[int, str] | None = None,
    maps: dict[str, float | None] | None = None,
    set_apart: bool = True,
) -> LabelledChecks:
    """Every test and both verdicts of one head from two box tables: ``kept`` the new boxes kept at
    ``conf`` (calibrated conf, matched flags), ``then`` the run's eval-split boxes kept at it; ground
    truth per image now (``gt_now``, one entry per new image) and then (``gt_then``, or None: its
    total ``n_gt_then`` over ``n_img_then`` images), per class (``gt_cls_now``: each ground-truth box's
    class; ``gt_cls_then``: counts). What ``det-calib check`` runs after the capture; the false-alarm
    benchmark runs it on box tables alone. ``set_apart`` False: crowded images are not set apart (the
    check before they were; for comparison). ``alpha``: the check's level, halved between the two
    verdicts (:func:`question_level`), each a Bonferroni family at that level."""
    n_img = int(gt_now.size)
    level = question_level(alpha)
    (rest, ids), (rest_then, _) = (
        _rest_and_crowded(kept, set_apart),
        _rest_and_crowded(then, set_apart),
    )
    cal = _calibration_tests(
        kept,
        then,
        conf=conf,
        n_img=n_img,
        n_img_then=n_img_then,
        n_classes_tested=len(_classes_tested(rest, rest_then, len(names), min_boxes)),
        set_apart=set_apart,
    )
    per_class = _class_checks(
        kept,
        then,
        gt_cls_now,
        gt_cls_then,
        names,
        min_boxes=min_boxes,
        alpha=level,
        family=cal.tests or 1,
        ece_bins=ece_bins,
        rest=(rest, rest_then),
    )
    crowded = _crowded_list(kept, ids, image_names or {})
    det = _detection_tests(
        kept,
        gt_now,
        n_img,
        then,
        gt_then,
        n_gt_then,
        n_img_then,
        conf=conf,
        maps=maps or {"map50": None, "map50_then": None, "map50_95": None, "map50_95_then": None},
        rest=(rest, rest_then),
    )
    cv, cline = _calibration_verdict(
        cal, per_class, alpha=level, min_boxes=min_boxes, crowded=crowded
    )
    dv, dline = _detection_verdict(det, alpha=level)
    return LabelledChecks(cal, per_class, det, crowded, cv, cline, dv, dline)


def shift_check(
    then: BoxView,
    now: BoxView,
    *,
    n_img_then: int,
    n_img: int,
    n_classes: int,
    conf: float,
    alpha: float,
    n_perm: int,
    min_boxes: int,
    seed: int,
) -> tuple[ShiftTests, str, str]:
    """The label-free tests of the kept boxes ``now`` (on ``n_img`` new images) against ``then`` (the
    run's eval split, ``n_img_then`` images), :func:`~det_calib.check.drift_tests.shift_tests`, and
    their ``(tests, verdict, line)`` (Bonferroni over the tests defined)."""
    st = drift.shift_tests(
        then.conf,
        then.image_id,
        then.cls,
        n_img_then,
        now.conf,
        now.image_id,
        now.cls,
        n_img,
        n_classes=n_classes,
        n_perm=n_perm,
        seed=seed,
    )
    few = now.n < min_boxes or then.n < min_boxes
    t = ShiftTests(
        conf=conf,
        images=n_img,
        images_then=n_img_then,
        kept=now.n,
        kept_then=then.n,
        mean_conf=num(np.mean(now.conf)) if now.n else None,
        mean_conf_then=num(np.mean(then.conf)) if then.n else None,
        kept_per_image=now.n / n_img,
        kept_per_image_then=then.n / max(1, n_img_then),
        ks=None if few else st.ks,
        ks_p=None if few else st.ks_p,
        per_image_p=st.per_image_p,
        class_chi2=None if few else st.class_chi2,
        class_chi2_p=None if few else st.class_chi2_p,
        n_perm=n_perm,
    )
    tests = [
        (name, p)
        for name, p in (
            ("score distribution", t.ks_p),
            ("boxes kept per image", t.per_image_p),
            ("class mix", t.class_chi2_p),
        )
        if p is not None
    ]
    level = alpha / max(1, len(tests))
    found = [name for name, p in tests if p < level]
    tail = (
        f"kept boxes at conf {conf:g}: {then.n} on {n_img_then} images -> {now.n} on {n_img}; kept "
        "per "
        f"image {_f2(t.kept_per_image_then)} -> {_f2(t.kept_per_image)} (p "
        f"{_p_text(t.per_image_p)}); mean conf "
        f"{f3(t.mean_conf_then)} -> {f3(t.mean_conf)} (KS {f3(t.ks)}, p {_p_text(t.ks_p)}); class "
        "mix "
        f"p {_p_text(t.class_chi2_p)}. Without labels this detects a shift of the detector's "
        "output, not a "
        "miscalibration"
    )
    if found:
        return (
            t,
            SHIFTED,
            f"output: {SHIFTED} ({', '.join(found)} at family level {alpha:g}); {tail}",
        )
    if n_img < MIN_IMAGES:
        return (
            t,
            TOO_FEW_IMAGES,
            f"output: {TOO_FEW_IMAGES} ({n_img} images, fewer than {MIN_IMAGES}); {tail}",
        )
    return t, NO_SHIFT, f"output: {NO_SHIFT}; {tail}"

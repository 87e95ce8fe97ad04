"""The statistics of ``det-calib check`` and their verdicts: calibration of the kept boxes
(:func:`calibration_tests`, per class :func:`class_checks`; :func:`calibration_verdict`), detection
quality against the run's eval split (:func:`detection_tests`, :func:`detection_verdict`), and the
command's exit code (:func:`exit_code`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from det_calib.check.check_record import (
    CHANGED,
    DRIFTED,
    HOLDS,
    NO_SHIFT,
    SHIFTED,
    TOO_FEW,
    TOO_FEW_IMAGES,
    CalibrationTests,
    ClassCheck,
    DetectionTests,
)
from det_calib.data.box_view import BoxView
from det_calib.metrics import drift_tests as drift

__all__ = ["calibration_tests", "calibration_verdict", "class_checks", "detection_tests", "detection_verdict",
           "exit_code", "f2", "f3", "num", "p_text", "per_image", "worst"]

def num(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def p_text(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "< 1e-4" if p < 1e-4 else f"{p:.3g}"


def per_image(v: BoxView, n_img: int, *, correct: bool = False) -> np.ndarray:
    """Per image 0..n_img-1: the number of boxes (or, ``correct``, of correct boxes) of the view."""
    w = v.correct.astype(np.float64) if correct else None
    return np.bincount(v.image_id, weights=w, minlength=n_img)[:n_img].astype(np.float64)


def calibration_tests(p: np.ndarray, y: np.ndarray, img: np.ndarray, *, conf: float,
                      then_boxes: tuple[np.ndarray, np.ndarray, np.ndarray], n_classes_tested: int
                      ) -> CalibrationTests:
    """:class:`CalibrationTests` of the kept boxes (``p`` calibrated conf > ``conf``, their flags,
    images), against ``then_boxes`` (the same three of the run's eval split)."""
    c = drift.calibration_in_the_large(p, y, img)
    hl = drift.hosmer_lemeshow(p, y, img)
    then = drift.calibration_in_the_large(*then_boxes) if len(then_boxes[0]) else None
    ch = drift.citl_change(then_boxes, (p, y, img))
    bc = drift.binned_change(then_boxes, (p, y, img))
    return CalibrationTests(
        conf=conf, boxes=c.boxes, images=c.images, observed=c.observed, expected=c.expected,
        mean_conf=num(c.mean_conf), fraction_correct=num(c.fraction_correct), z=num(c.z),
        p_value=num(c.p_value), design_effect=num(c.design_effect), detectable_gap=num(c.detectable_gap),
        hl_groups=None if hl is None else hl.groups, hl_statistic=None if hl is None else hl.statistic,
        hl_p_value=None if hl is None else hl.p_value,
        boxes_then=None if then is None else then.boxes,
        mean_conf_then=None if then is None else num(then.mean_conf),
        fraction_correct_then=None if then is None else num(then.fraction_correct),
        z_then=None if then is None else num(then.z), p_value_then=None if then is None else num(then.p_value),
        gap_then=None if ch is None else ch.then, gap=None if ch is None else ch.now,
        change_z=None if ch is None else num(ch.statistic), change_p=None if ch is None else num(ch.p_value),
        binned_change_statistic=None if bc is None else bc.statistic, binned_change_bins=None if bc is None else bc.df,
        binned_change_p=None if bc is None else bc.p_value,
        tests=(ch is not None) + (bc is not None) + n_classes_tested,
    )


def calibration_verdict(t: CalibrationTests, per_class: list[ClassCheck], *, alpha: float, min_boxes: int
                        ) -> tuple[str, str]:
    """``(verdict, line)`` of the calibration question (Bonferroni over :attr:`CalibrationTests.tests`)."""
    head = (f"kept boxes at conf {t.conf:g}: {t.boxes}, {t.observed} correct vs {t.expected:.1f} expected "
            f"(mean conf {f3(t.mean_conf)}, fraction correct {f3(t.fraction_correct)}; z {f2(t.z)}, "
            f"p {p_text(t.p_value)}")
    head += f"; Hosmer-Lemeshow p {p_text(t.hl_p_value)} over {t.hl_groups} bins)" if t.hl_groups else ")"
    head += (f"; against the run's eval split: gap (fraction correct - mean conf) {f3(t.gap_then)} -> {f3(t.gap)} "
             f"(change z {f2(t.change_z)}, p {p_text(t.change_p)}), binned change p {p_text(t.binned_change_p)}")
    if (t.boxes or 0) < min_boxes:
        return TOO_FEW, f"calibration: {TOO_FEW} ({t.boxes} kept boxes, fewer than {min_boxes}); {head}"
    level = alpha / max(1, t.tests or 1)
    bad = [name for name, p in (("in the large", t.change_p), ("binned", t.binned_change_p)) if p is not None
           and p < level]
    bad += [f"class {c.name}" for c in per_class if c.drifted]
    if bad:
        return DRIFTED, f"calibration: {DRIFTED} ({', '.join(bad)} at family level {alpha:g}); {head}"
    return HOLDS, (f"calibration: {HOLDS} (no test below {alpha:g} / {t.tests}; a gap of ±{f3(t.detectable_gap)} "
                   f"would show); {head}")


def f3(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def f2(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def detection_verdict(d: DetectionTests, *, alpha: float) -> tuple[str, str]:
    """``(verdict, line)`` of the detection-quality question (precision and recall, Bonferroni over 2)."""
    parts = []
    changed = []
    for name, then, now, z, p in (("recall", d.recall_then, d.recall, d.recall_z, d.recall_p),
                                  ("precision", d.precision_then, d.precision, d.precision_z, d.precision_p)):
        parts.append(f"{name} {f3(then)} -> {f3(now)} (z {f2(z)}, p {p_text(p)})")
        if p is not None and p < alpha / 2:
            changed.append(name)
    tail = (f"at conf {d.conf:g}: " + "; ".join(parts) + f"; kept per image {f2(d.kept_per_image_then)} -> "
            f"{f2(d.kept_per_image)}; mAP50 {f3(d.map50_then)} -> {f3(d.map50)}")
    if changed:
        return CHANGED, f"detection quality: {CHANGED} ({' and '.join(changed)} at family level {alpha:g}) {tail}"
    return HOLDS, f"detection quality: {HOLDS} {tail}"


def ratio_figures(then_num: Any, then_den: Any, now_num: Any, now_den: Any
                  ) -> tuple[float | None, float | None, float | None, float | None]:
    """Both ratios, their z statistic and p-value (:func:`det_calib.metrics.drift_tests.ratio_test`), finite or None."""
    t = drift.ratio_test(then_num, then_den, now_num, now_den)
    return num(t.then), num(t.now), num(t.z), num(t.p_value)


def detection_tests(kept_now: BoxView, gt_now: np.ndarray, n_img: int, kept_then: BoxView,
                    gt_then: np.ndarray | None, n_gt_then: int, n_img_then: int, *, conf: float,
                    maps: dict[str, float | None]) -> DetectionTests:
    """:class:`DetectionTests` from the kept boxes of both sides and their ground truth per image
    (``gt_then`` None: the run's per-image ground truth is unknown; recall then is tested with
    its binomial variance, its total ``n_gt_then`` spread as one count per image)."""
    k1, c1 = per_image(kept_now, n_img), per_image(kept_now, n_img, correct=True)
    k0, c0 = per_image(kept_then, n_img_then), per_image(kept_then, n_img_then, correct=True)
    g0 = gt_then if gt_then is not None else np.full(n_img_then, n_gt_then / max(1, n_img_then))
    p0, p1, pz, pp = ratio_figures(c0, k0, c1, k1)
    r0, r1, rz, rp = ratio_figures(c0, g0, c1, gt_now)
    return DetectionTests(
        conf=conf, images=n_img, images_then=n_img_then, kept=int(k1.sum()), kept_then=int(k0.sum()),
        n_gt=int(gt_now.sum()), n_gt_then=int(n_gt_then), precision=p1, precision_then=p0, precision_z=pz,
        precision_p=pp, recall=r1, recall_then=r0, recall_z=rz, recall_p=rp,
        kept_per_image=float(k1.mean()) if n_img else None,
        kept_per_image_then=float(k0.mean()) if n_img_then else None, **maps,
    )


def class_checks(kept_now: BoxView, kept_then: BoxView, gt_cls_now: np.ndarray, gt_cls_then: list[int],
                 names: list[str], *, min_boxes: int, alpha: float, family: int, ece_bins: int) -> list[ClassCheck]:
    """Per class (with kept boxes or ground truth on either side): :class:`ClassCheck`; a class is
    ``drifted`` when the p-value of its change in calibration in the large is below ``alpha / family``."""
    from det_calib.metrics.calibration import ece

    out = []
    kc, kt = kept_now.cls, kept_then.cls
    p, y, img = kept_now.conf, kept_now.correct, kept_now.image_id
    pt, yt, it = kept_then.conf, kept_then.correct, kept_then.image_id
    for c, name in enumerate(names):
        m, mt = kc == c, kt == c
        n_gt = int((gt_cls_now == c).sum())
        g_then = gt_cls_then[c] if c < len(gt_cls_then) else 0
        if not (m.any() or mt.any() or n_gt or g_then):
            continue
        r = drift.calibration_in_the_large(p[m], y[m], img[m])
        ch = drift.citl_change((pt[mt], yt[mt], it[mt]), (p[m], y[m], img[m]))
        tested = int(m.sum()) >= min_boxes and int(mt.sum()) >= min_boxes and ch is not None
        out.append(ClassCheck(
            cls=c, name=name, kept=int(m.sum()), observed=r.observed, expected=float(r.expected), z=num(r.z),
            p_value=num(r.p_value), change_z=None if ch is None else num(ch.statistic),
            change_p=None if ch is None else num(ch.p_value), tested=tested,
            drifted=bool(tested and ch.p_value < alpha / max(1, family)),
            kept_ece=ece(p[m], y[m], n_bins=ece_bins) if m.any() else None, n_gt=n_gt,
            precision=float(y[m].mean()) if m.any() else None, recall=float(y[m].sum() / n_gt) if n_gt else None,
            kept_then=int(mt.sum()), precision_then=float(yt[mt].mean()) if mt.any() else None,
            recall_then=float(yt[mt].sum() / g_then) if g_then else None,
        ))
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

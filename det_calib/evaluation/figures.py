"""The evaluator: what turns one head's box view into the figures of its record.

Every figure of a head's ``eval`` record is computed here from a :class:`~det_calib.data.box_view.BoxView`
(raw, and :meth:`~det_calib.data.box_view.BoxView.scored` by the head's calibrator):

- :func:`scores_of` / :func:`all_box_scores` — all-box ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, LaACE
  with image-bootstrap intervals (:class:`~det_calib.record.eval_record.Scores`);
- :class:`~det_calib.evaluation.operating.OperatingPoints` — kept-set ECE and LaECE_0 at each threshold;
- :func:`thresholded`, :func:`kept_gaps` — the kept sets' ECE and their largest bin gaps;
- :func:`map_check` — COCO mAP ranked by raw and by calibrated scores;
- :func:`per_class` — every figure per class, with the kept-set shift
  (:func:`~det_calib.evaluation.kept_set.threshold_shift`).

The options are read from any object with the run settings' names (:class:`EvalSettings`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.data.box_view import BoxView, kept_mask
from det_calib.data.ground_truth import Split
from det_calib.evaluation.by_size import size_figures
from det_calib.evaluation.floor_gap import head_floor_gap
from det_calib.evaluation.kept_set import threshold_shift
from det_calib.evaluation.map_check import coco_maps, same_ranking
from det_calib.evaluation.operating import OperatingPoints
from det_calib.metrics import calibration as metrics
from det_calib.metrics import group_ece_ci
from det_calib.metrics.detection_metrics import box_features, dece, laace
from det_calib.record.eval_record import BinGap, Scores, Thresholded
from det_calib.record.run_result import ClassResult, EvalResult, HeadResult
from det_calib.tasks import TASKS

__all__ = ["DECE_BINS", "EvalSettings", "evaluate_head", "map_check"]

DECE_BINS = (8, 3, 3, 3, 3)
"""D-ECE bins: confidence, then normalised centre x, centre y, width, height."""


class EvalSettings(Protocol):
    """The options the evaluator reads (the run's :class:`~det_calib.job.settings.Settings` has them)."""

    conf: tuple[float, ...]
    ece_bins: int
    laece_bins: int
    n_boot: int
    seed: int
    max_det: int
    map_engine: str
    min_class_boxes: int
    target: str


def _scores_of(
    conf: np.ndarray,
    correct: np.ndarray,
    *,
    logit: np.ndarray,
    temperature: float,
    loc_iou: np.ndarray,
    cls_id: np.ndarray,
    features: np.ndarray,
    image_id: np.ndarray,
    ece_bins: int,
    laece_bins: int,
    dece_bins: list[int],
    n_boot: int,
    seed: int,
) -> Scores:
    """Every metric of ``conf`` (shape (n,)) against ``correct`` (n,).

    ``logit / temperature`` gives the NLL without the precision lost in ``conf``; ``loc_iou``
    (n,) and ``cls_id`` (n,) feed LaECE / LaACE, ``features`` (n, 4) D-ECE; intervals resample
    ``image_id`` (n,).
    """
    boot = dict(n_boot=n_boot, seed=seed)
    ece_fn = functools.partial(metrics.ece, n_bins=ece_bins)  # keeps `weights`: fast bootstrap path
    laece_fn = functools.partial(metrics.laece, n_bins=laece_bins)
    p, y = conf, correct
    e = metrics.ece(p, y, n_bins=ece_bins)
    la = metrics.laece(p, loc_iou, cls_id, n_bins=laece_bins)
    return Scores(  # each interval given its figure, computed once
        ece=e,
        ece_ci=tuple(metrics.bootstrap_ci(ece_fn, image_id, p, y, estimate=e, **boot)),
        ace=metrics.ace(p, y, n_bins=ece_bins),
        mce=metrics.mce(p, y, n_bins=ece_bins),
        nll=metrics.nll_logits(logit, y, temperature=temperature),
        brier=metrics.brier(p, y),
        dece=dece(p, y, features, n_bins=list(dece_bins)),
        laece=la,
        laece_ci=tuple(
            metrics.bootstrap_ci(laece_fn, image_id, p, loc_iou, cls_id, estimate=la, **boot)
        ),
        laace=laace(p, loc_iou, cls_id),
    )


def _features(v: BoxView) -> np.ndarray:
    """The boxes' normalised centre and size (:func:`det_calib.metrics.box_features`, for D-ECE)."""
    return box_features(*(v.xyxy[:, j] for j in range(4)), v.extra["img_w"], v.extra["img_h"])


def _gt_classes(split: Split) -> np.ndarray:
    return split.gt.filter(~pl.col("crowd"))["cls"].to_numpy()


def _temperature_of(calibrator: LogitCalibrator) -> float | None:
    return float(calibrator.temperature_) if isinstance(calibrator, TemperatureScaler) else None


def _all_box_scores(
    raw: BoxView, scored: BoxView, calibrator: LogitCalibrator, s: EvalSettings
) -> tuple[Scores, Scores]:
    """All-box calibration metrics of the boxes, raw and calibrated (``scored``: them under ``calibrator``)."""
    common = dict(
        loc_iou=raw.loc_iou,
        cls_id=raw.cls,
        features=_features(raw),
        image_id=raw.image_id,
        ece_bins=s.ece_bins,
        laece_bins=s.laece_bins,
        dece_bins=list(DECE_BINS),
        n_boot=s.n_boot,
        seed=s.seed,
    )
    before = _scores_of(raw.conf, raw.correct, logit=raw.logit, temperature=1.0, **common)
    t = _temperature_of(calibrator)
    logit, temp = (raw.logit, t) if t is not None else (scored.logit, 1.0)
    after = _scores_of(scored.conf, scored.correct, logit=logit, temperature=temp, **common)
    return before, after


def _thresholded(raw: BoxView, scored: BoxView, s: EvalSettings) -> list[Thresholded]:
    """ECE of the boxes kept at each deployment threshold, raw and calibrated."""
    out = []
    for t in s.conf:
        # the kept boxes' scores and labels (no other column is read)
        mb, ma = kept_mask(raw.conf, t), kept_mask(scored.conf, t)
        nb, na = int(mb.sum()), int(ma.sum())
        out.append(
            Thresholded(
                conf=t,
                boxes_before=nb,
                ece_before=metrics.ece(raw.conf[mb], raw.correct[mb], n_bins=s.ece_bins)
                if nb
                else None,
                boxes_after=na,
                ece_after=metrics.ece(scored.conf[ma], scored.correct[ma], n_bins=s.ece_bins)
                if na
                else None,
            )
        )
    return out


def _kept_gaps(
    p: np.ndarray, y: np.ndarray, *, threshold: float, n_bins: int, top: int = 3
) -> list[BinGap]:
    """The ``top`` bins with the largest terms of the ECE of the boxes kept at ``threshold``
    (equal-width bins, as :func:`det_calib.metrics.ece`), largest first; bins without error left out.

    >>> [(g.lo, g.hi, g.boxes) for g in _kept_gaps(np.array([0.3, 0.35, 0.9]), np.array([0, 0, 1]),
    ...                                           threshold=0.25, n_bins=10)]
    [(0.3, 0.4, 2), (0.9, 1.0, 1)]
    """
    keep = kept_mask(p, threshold)
    pk, yk = p[keep], y[keep].astype(np.float64)
    if not pk.size:
        return []
    idx = np.minimum((pk * n_bins).astype(np.int64), n_bins - 1)
    cnt = np.bincount(idx, minlength=n_bins)
    sc = np.bincount(idx, weights=pk, minlength=n_bins)
    sy = np.bincount(idx, weights=yk, minlength=n_bins)
    share = np.abs(sy - sc) / pk.size
    out = []
    for b in np.argsort(-share, kind="stable")[:top]:
        if cnt[b] == 0 or share[b] <= 0:
            continue
        out.append(
            BinGap(
                lo=round(int(b) / n_bins, 6),
                hi=round((int(b) + 1) / n_bins, 6),
                boxes=int(cnt[b]),
                conf=float(sc[b] / cnt[b]),
                accuracy=float(sy[b] / cnt[b]),
                share=float(share[b]),
            )
        )
    return out


def map_check(
    boxes: pl.DataFrame, split: Split, calibrator: LogitCalibrator, s: EvalSettings
) -> dict[str, Any]:
    """pycocotools mAP of the same boxes ranked by raw and by calibrated scores.

    Crowd-matched boxes are included: COCOeval ignores them itself. Both from the logits in
    float64: the float32 confs Ultralytics reports have rounding ties that the calibrated float64
    scores break, which could reorder equal-score boxes and blur the comparison. The boxes are
    the detector's own (captured with the raw scores): this is the post-hoc deployment, where a
    per-class map rescores boxes after the detector chose them; a map folded into the model can
    also change which boxes it outputs (see the Ultralytics val check).
    """

    maps = functools.partial(coco_maps, max_dets=s.max_det, engine=s.map_engine)

    every = BoxView.from_boxes(boxes, geometry=False, ignore=False)
    raw, cal = (
        every.scored(None, from_logit=True).conf,
        every.scored(calibrator, from_logit=True).conf,
    )
    if same_ranking(raw, cal):  # COCOeval sees scores only through this order: the same mAP, proven
        m0 = m1 = maps(boxes, split.gt, split.sizes, [raw])[0]
    else:
        m0, m1 = maps(boxes, split.gt, split.sizes, [raw, cal])
    return dict(
        map50_95_before=m0["map50_95"],
        map50_95_after=m1["map50_95"],
        map50_before=m0["map50"],
        map50_after=m1["map50"],
        map_identical=m0 == m1,
        map_engine=s.map_engine,
    )


def _per_class_figures(
    raw: BoxView,
    scored: BoxView,
    gt_cls: np.ndarray,
    calibrator: LogitCalibrator,
    s: EvalSettings,
    names: list[str],
) -> list[ClassResult]:
    """One entry per class with boxes or ground truth (``gt_cls``: the classes of the split's non-crowd ground truth).

    The boxes are grouped by class once (a stable sort: each class's boxes keep their order, so
    every figure is the one a mask per class gives), so the cost grows with the boxes, not with
    boxes times classes. A class's ECE intervals resample the split's images, the draws of the
    split's own intervals (``bootstrap_ci``'s ``population``): the class's boxes come with the
    images drawn, so its number of images varies as it would in a new split."""
    out = []
    thr = min(s.conf)
    order = np.argsort(raw.cls, kind="stable")
    cls_sorted = raw.cls[order]
    bounds = np.searchsorted(cls_sorted, np.arange(len(names) + 1), side="left")
    z_img, z_p0, z_p1, z_y, z_loc, z_cls = (
        v[order] for v in (raw.image_id, raw.conf, scored.conf, raw.correct, raw.loc_iou, raw.cls)
    )
    gt_counts = np.bincount(
        gt_cls[(gt_cls >= 0) & (gt_cls < len(names))].astype(np.int64), minlength=len(names)
    )
    spans = [slice(int(bounds[c]), int(bounds[c + 1])) for c in range(len(names))]
    tags = (("before", z_p0), ("after", z_p1))
    eces = {
        tag: np.array(
            [
                metrics.ece(p[m], z_y[m], n_bins=s.ece_bins) if m.stop > m.start else np.nan
                for m in spans
            ]
        )
        for tag, p in tags
    }
    cis = {
        tag: group_ece_ci(
            p,
            z_y,
            z_cls,
            z_img,
            raw.image_id,  # the split's own intervals draw its images
            eces[tag],
            n_bins=s.ece_bins,
            n_boot=s.n_boot,
            seed=s.seed,
        )
        for tag, p in tags
    }
    for c, m in enumerate(spans):
        n_c = m.stop - m.start
        n_gt_c = int(gt_counts[c])
        if not n_c and n_gt_c == 0:
            continue
        figures: dict[str, Any] = {}
        y_c = z_y[m]
        if n_c:
            for tag, z_p in tags:
                p = z_p[m]
                figures[f"ece_{tag}"] = float(eces[tag][c])
                figures[f"ece_{tag}_ci"] = tuple(cis[tag][c])
                figures[f"laece_{tag}"] = metrics.laece(p, z_loc[m], z_cls[m], n_bins=s.laece_bins)
                k = kept_mask(p, thr)
                figures[f"kept_ece_{tag}"] = (
                    metrics.ece(p[k], y_c[k], n_bins=s.ece_bins) if k.any() else None
                )
        out.append(
            ClassResult(
                cls=c,
                name=names[c],
                boxes=int(n_c),
                correct=int(y_c.sum()),
                n_gt=n_gt_c,
                few_boxes=bool(n_c < s.min_class_boxes),
                **figures,
                threshold_shift=[
                    threshold_shift(
                        z_p0[m],
                        z_p1[m],
                        y_c,
                        conf=t,
                        n_gt=n_gt_c,
                        equivalent_conf=calibrator.equivalent_conf(t, c),
                    )
                    for t in s.conf
                ],
            )
        )
    return out


def evaluate_head(
    boxes: pl.DataFrame,
    split: Split,
    calibrator: LogitCalibrator,
    s: EvalSettings,
    names: list[str],
    operating: OperatingPoints | None = None,
    *,
    sigmas: Any = None,
    method: str | None = None,
    fit_min_conf: float = 0.0,
) -> HeadResult:
    """Calibration metrics, mAP check, threshold shift and per-class results of one head on the eval split.

    Args:
        boxes: The head's eval-split box table (every row: the mAP check scores crowd-matched boxes too).
        calibrator: A fitted calibrator (:mod:`det_calib.selection.cross_validation`).
        operating: The head's :class:`~det_calib.evaluation.operating.OperatingPoints` (built here when None).
        sigmas: A pose dataset's OKS sigmas (:func:`task_map_check`).
        method, fit_min_conf: The calibrator's method and the lowest conf its fit saw (why the kept set
            stays above its sampling floor, :func:`~det_calib.evaluation.floor_gap.head_floor_gap`).

    Returns:
        A :class:`~det_calib.record.run_result.HeadResult` without calibrator, fit and Ultralytics val.
    """
    # the mAP check first: its working arrays are freed before the evaluation's are built
    map_result = _task_map_check(boxes, split, calibrator, s, sigmas=sigmas)
    op = operating or OperatingPoints.of_boxes(boxes, split, s)
    raw = op.view
    scored = raw.scored(calibrator)
    gt_cls = _gt_classes(split)
    before, after = _all_box_scores(raw, scored, calibrator, s)
    operating_before, operating_after = op.operating(raw), op.operating(scored)
    ev = EvalResult(
        split=split.name,
        images=len(split.images),
        boxes=raw.n,
        correct=int(raw.correct.sum()),
        ignored=raw.ignored,
        n_gt=int(len(gt_cls)),
        corrupt_images=len(split.corrupt),
        before=before,
        after=after,
        thresholded=_thresholded(raw, scored, s),
        operating_before=operating_before,
        operating_after=operating_after,
        **map_result,
        kept_gaps=_kept_gaps(scored.conf, scored.correct, threshold=min(s.conf), n_bins=s.ece_bins),
    )
    shifts = [
        threshold_shift(
            raw.conf,
            scored.conf,
            raw.correct,
            conf=c,
            n_gt=len(gt_cls),
            equivalent_conf=calibrator.equivalent_conf(c),
        )
        for c in s.conf
    ]
    per_classes = _per_class_figures(raw, scored, gt_cls, calibrator, s, names)
    by_size = size_figures(op, scored)
    gap = head_floor_gap(  # only where the calibrated kept set is above its floor's range
        op,
        ev,
        calibrator,
        method=method,
        fit_min_conf=fit_min_conf,
        image_names=split.image_names(),
        target=s.target,
    )
    return HeadResult(
        eval=dataclasses.replace(ev, floor_gap=gap),
        threshold_shift=shifts,
        per_class=per_classes,
        by_size=by_size,
    )


def _task_map_check(
    boxes: pl.DataFrame,
    split: Split,
    calibrator: LogitCalibrator,
    s: EvalSettings,
    *,
    sigmas: Any = None,
) -> dict[str, Any]:
    """The mAP check of one head, by the task its box table carries: where the table holds a task's payload
    column and the task has a mAP check of its own (its folder's ``evaluation_map`` part: a segment model's
    box and mask mAP, a pose model's box and keypoint mAP with the dataset's OKS ``sigmas``), that check;
    else the box mAP alone (:func:`map_check`: a detector, and an OBB model, whose rotated-box mAP is
    Ultralytics' ``OBBValidator``'s in the val check)."""
    for task in TASKS.values():
        own = task.part("evaluation_map") if task.payload in boxes.columns else None
        if own is not None:
            return own.MAP_CHECK(boxes, split, calibrator, s, sigmas=sigmas)
    return map_check(boxes, split, calibrator, s)


def before_after(
    boxes: pl.DataFrame,
    calibrator: LogitCalibrator,
    maps: Callable[[list], list],
    keys: tuple[str, ...],
) -> dict[str, Any]:
    """``keys`` (``*_map50_95_before``, ``*_map50_95_after``, ``*_map50_before``, ``*_map50_after``,
    ``*_map_identical``) of ``maps([scores...])`` under the raw and the calibrated scores (from the logits in
    float64, as :func:`map_check`); one evaluation when the two rank every box alike."""

    every = BoxView.from_boxes(boxes, geometry=False, ignore=False)
    raw, cal = (
        every.scored(None, from_logit=True).conf,
        every.scored(calibrator, from_logit=True).conf,
    )
    if same_ranking(
        raw, cal
    ):  # COCOeval reads scores only through their order: the same mAP, proven
        m0 = m1 = maps([raw])[0]
    else:
        m0, m1 = maps([raw, cal])
    return dict(zip(keys, (m0["map50_95"], m1["map50_95"], m0["map50"], m1["map50"], m0 == m1)))

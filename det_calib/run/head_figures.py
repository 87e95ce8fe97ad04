"""The evaluation step of a run: one head's figures on the eval split (all-box metrics, the kept
sets, per class, the mAP check).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import calibrated_logits, deployed_conf, equivalent_conf
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.data.ground_truth import (
    Split,
)
from det_calib.evaluation.kept_set import threshold_shift
from det_calib.metrics import calibration as metrics
from det_calib.record.run_result import (
    BinGap,
    Calibrator,
    ClassResult,
    EvalResult,
    HeadResult,
    Scores,
    Thresholded,
    calibrator_of,
)
from det_calib.run.fitting import (
    OperatingEval,
)
from det_calib.run.settings import DECE_BINS, Settings
from det_calib.run.stages import stage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _EvalArrays:
    """The arrays one head's evaluation needs: usable (not crowd-matched) eval-split boxes."""

    z: np.ndarray
    y: np.ndarray
    cls: np.ndarray
    img: np.ndarray
    p0: np.ndarray
    p1: np.ndarray
    t1: np.ndarray
    loc: np.ndarray
    feats: np.ndarray
    gt_cls: np.ndarray
    ignored: int

    @classmethod
    def of(cls, boxes: pl.DataFrame, split: Split, calibrator: Any) -> _EvalArrays:
        keep = ~boxes["ignore"].to_numpy()
        b = boxes.filter(pl.Series(keep))
        z = b["logit"].to_numpy()
        k = b["cls"].to_numpy()
        t1 = calibrated_logits(calibrator, z, k)
        p0 = b["conf"].to_numpy()
        p1 = deployed_conf(calibrator, z, k, p0)
        return cls(
            z=z, y=b["correct"].to_numpy(), cls=k, img=b["image_id"].to_numpy(),
            p0=p0, p1=p1, t1=t1, loc=b["loc_iou"].to_numpy(),
            feats=metrics.box_features(*(b[c].to_numpy() for c in ("x1", "y1", "x2", "y2", "img_w", "img_h"))),
            gt_cls=split.gt.filter(~pl.col("crowd"))["cls"].to_numpy(), ignored=int((~keep).sum()),
        )


def _as_calibrator(calibrator: Any) -> Any:
    """A number is a temperature (the earlier signature of the steps); else a fitted calibrator."""
    if isinstance(calibrator, (int, float)):
        return calibrator_of(Calibrator.temperature_scaling(float(calibrator)))
    return calibrator


def _temperature_of(calibrator: Any) -> float | None:
    return float(calibrator.temperature_) if isinstance(calibrator, TemperatureScaler) else None


def _scores(a: _EvalArrays, m: Any, calibrator: Any, s: Settings) -> tuple[Scores, Scores]:
    """All-box calibration metrics of the boxes ``m`` (a mask or slice), raw and calibrated."""
    common = dict(loc_iou=a.loc[m], cls_id=a.cls[m], features=a.feats[m], image_id=a.img[m],
                  ece_bins=s.ece_bins, laece_bins=s.laece_bins, dece_bins=list(DECE_BINS), n_boot=s.n_boot,
                  seed=s.seed)
    before = Scores.compute(a.p0[m], a.y[m], logit=a.z[m], temperature=1.0, **common)
    t = _temperature_of(calibrator)
    logit, temp = (a.z[m], t) if t is not None else (a.t1[m], 1.0)
    after = Scores.compute(a.p1[m], a.y[m], logit=logit, temperature=temp, **common)
    return before, after


def _thresholded(a: _EvalArrays, s: Settings) -> list[Thresholded]:
    """ECE of the boxes kept at each deployment threshold, raw and calibrated."""
    out = []
    for t in s.conf:
        kb, ka = a.p0 > t, a.p1 > t
        out.append(Thresholded(
            conf=t,
            boxes_before=int(kb.sum()),
            ece_before=metrics.ece(a.p0[kb], a.y[kb], n_bins=s.ece_bins) if kb.any() else None,
            boxes_after=int(ka.sum()),
            ece_after=metrics.ece(a.p1[ka], a.y[ka], n_bins=s.ece_bins) if ka.any() else None,
        ))
    return out


def kept_gaps(p: np.ndarray, y: np.ndarray, *, threshold: float, n_bins: int, top: int = 3) -> list[BinGap]:
    """The ``top`` bins with the largest terms of the ECE of the boxes kept at ``threshold``
    (equal-width bins, as :func:`det_calib.metrics.ece`), largest first; bins without error left out.

    >>> [(g.lo, g.hi, g.boxes) for g in kept_gaps(np.array([0.3, 0.35, 0.9]), np.array([0, 0, 1]),
    ...                                           threshold=0.25, n_bins=10)]
    [(0.3, 0.4, 2), (0.9, 1.0, 1)]
    """
    keep = p > threshold
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
        out.append(BinGap(lo=round(int(b) / n_bins, 6), hi=round((int(b) + 1) / n_bins, 6), boxes=int(cnt[b]),
                          conf=float(sc[b] / cnt[b]), accuracy=float(sy[b] / cnt[b]), share=float(share[b])))
    return out


def _map_check(boxes: pl.DataFrame, split: Split, calibrator: Any, s: Settings) -> dict[str, Any]:
    """pycocotools mAP of the same boxes ranked by raw and by calibrated scores.

    Crowd-matched boxes are included: COCOeval ignores them itself. Both from the logits in
    float64: the float32 confs Ultralytics reports have rounding ties that the calibrated float64
    scores break, which could reorder equal-score boxes and blur the comparison. The boxes are
    the detector's own (captured with the raw scores): this is the post-hoc deployment, where a
    per-class map rescores boxes after the detector chose them; a map folded into the model can
    also change which boxes it outputs (see the Ultralytics val check).
    """
    from det_calib.evaluation.map_check import coco_maps, same_ranking

    maps = functools.partial(coco_maps, max_dets=s.max_det, engine=s.map_engine)

    all_z = boxes["logit"].to_numpy()
    t1 = calibrated_logits(calibrator, all_z, boxes["cls"].to_numpy())
    raw, cal = metrics.sigmoid(all_z, 1.0), metrics.sigmoid(t1, 1.0)
    if same_ranking(raw, cal):  # COCOeval sees scores only through this order: the same mAP, proven
        m0 = m1 = maps(boxes, split.gt, split.sizes, [raw])[0]
    else:
        m0, m1 = maps(boxes, split.gt, split.sizes, [raw, cal])
    return dict(map50_95_before=m0["map50_95"], map50_95_after=m1["map50_95"], map50_before=m0["map50"],
                map50_after=m1["map50"], map_identical=m0 == m1, map_engine=s.map_engine)


def _per_class(a: _EvalArrays, calibrator: Any, s: Settings, names: list[str]) -> list[ClassResult]:
    """One entry per class with boxes or ground truth.

    The boxes are grouped by class once (a stable sort: each class's boxes keep their order, so
    every figure is the one a mask per class gives), so the cost grows with the boxes, not with
    boxes times classes."""
    out = []
    ece_fn = functools.partial(metrics.ece, n_bins=s.ece_bins)  # keeps `weights`: fast bootstrap path
    thr = min(s.conf)
    order = np.argsort(a.cls, kind="stable")
    cls_sorted = a.cls[order]
    bounds = np.searchsorted(cls_sorted, np.arange(len(names) + 1), side="left")
    z_img, z_p0, z_p1, z_y, z_loc, z_cls = (v[order] for v in (a.img, a.p0, a.p1, a.y, a.loc, a.cls))
    gt_counts = np.bincount(a.gt_cls[(a.gt_cls >= 0) & (a.gt_cls < len(names))].astype(np.int64),
                            minlength=len(names))
    for c in range(len(names)):
        m = slice(int(bounds[c]), int(bounds[c + 1]))
        n_c = m.stop - m.start
        n_gt_c = int(gt_counts[c])
        if not n_c and n_gt_c == 0:
            continue
        figures: dict[str, Any] = {}
        y_c = z_y[m]
        if n_c:
            boot = dict(n_boot=s.n_boot, seed=s.seed)
            for tag, p in (("before", z_p0[m]), ("after", z_p1[m])):
                figures[f"ece_{tag}"] = metrics.ece(p, y_c, n_bins=s.ece_bins)
                figures[f"ece_{tag}_ci"] = tuple(metrics.bootstrap_ci(ece_fn, z_img[m], p, y_c, **boot))
                figures[f"laece_{tag}"] = metrics.laece(p, z_loc[m], z_cls[m], n_bins=s.laece_bins)
                k = p > thr
                figures[f"kept_ece_{tag}"] = metrics.ece(p[k], y_c[k], n_bins=s.ece_bins) if k.any() else None
        out.append(ClassResult(
            cls=c, name=names[c], boxes=int(n_c), correct=int(y_c.sum()), n_gt=n_gt_c,
            few_boxes=bool(n_c < s.min_class_boxes), **figures,
            threshold_shift=[threshold_shift(z_p0[m], z_p1[m], y_c, conf=t, n_gt=n_gt_c,
                                             equivalent_conf=equivalent_conf(calibrator, t, c)) for t in s.conf],
        ))
    return out


def evaluate_head(boxes: pl.DataFrame, split: Split, calibrator: Any, s: Settings, names: list[str],
                  operating: OperatingEval | None = None) -> HeadResult:
    """Calibration metrics, mAP check, threshold shift and per-class results of one head on the eval split.

    Args:
        calibrator: A fitted calibrator (:mod:`det_calib.selection.cross_validation`), or a temperature (a number).
        operating: The head's :class:`~det_calib.run.fitting.OperatingEval` (built here when None).

    Returns:
        A :class:`~det_calib.record.run_result.HeadResult` without calibrator, fit and Ultralytics val.
    """
    calibrator = _as_calibrator(calibrator)
    with stage("mAP check"):  # first: its working arrays are freed before the evaluation's are built
        map_check = _map_check(boxes, split, calibrator, s)
    a = _EvalArrays.of(boxes, split, calibrator)
    with stage("all-box metrics and intervals"):
        before, after = _scores(a, slice(None), calibrator, s)
    op = operating or _operating_eval(boxes, split, s)
    with stage("kept-set metrics and intervals"):
        operating_before, operating_after = op.operating(a.p0), op.operating(a.p1)
    ev = EvalResult(
        split=split.name, images=len(split.images), boxes=int(len(a.y)), correct=int(a.y.sum()), ignored=a.ignored,
        n_gt=int(len(a.gt_cls)), corrupt_images=len(split.corrupt), before=before, after=after,
        thresholded=_thresholded(a, s), operating_before=operating_before, operating_after=operating_after,
        **map_check,
        kept_gaps=kept_gaps(a.p1, a.y, threshold=min(s.conf), n_bins=s.ece_bins),
    )
    shifts = [threshold_shift(a.p0, a.p1, a.y, conf=c, n_gt=len(a.gt_cls),
                              equivalent_conf=equivalent_conf(calibrator, c)) for c in s.conf]
    with stage("per-class"):
        per_class = _per_class(a, calibrator, s, names)
    return HeadResult(eval=ev, threshold_shift=shifts, per_class=per_class)


def _operating_eval(boxes: pl.DataFrame, split: Split, s: Settings) -> OperatingEval:
    return OperatingEval(boxes, split.gt, conf=tuple(s.conf), ece_bins=s.ece_bins, laece_bins=s.laece_bins,
                         n_boot=s.n_boot, seed=s.seed)


def with_calibrated(boxes: pl.DataFrame, calibrator: Any) -> pl.DataFrame:
    """The box table with a ``calibrated`` column: each box's conf under ``calibrator`` (float64;
    the raw ``conf`` itself under ``none``)."""
    p = deployed_conf(calibrator, boxes["logit"].to_numpy(), boxes["cls"].to_numpy(), boxes["conf"].to_numpy())
    return boxes.with_columns(pl.Series("calibrated", p, dtype=pl.Float64))

"""The main job: resolve inputs, load splits, capture (one pass per split serves every head; or reuse
earlier boxes), per head label → fit → evaluate, write outputs.

:func:`calibrate` runs every step and writes the output folder; each step is also a public
function of its own module, for notebooks and other tools:

- :class:`det_calib.capture.Capturer` — boxes and raw logits, exactly as single-image ``predict``
- :func:`det_calib.reuse.reuse_boxes` — the boxes of an earlier run or of capture parts
- :func:`det_calib.matching.match_boxes` — correct/incorrect by one-to-one IoU matching
- :func:`det_calib.calibrators.fit_temperature` — the NLL-optimal temperature (the default method);
  :mod:`det_calib.fitting` / :mod:`det_calib.selection` — any other method, or ``auto`` by CV
- :mod:`det_calib.operating` — ECE and LaECE_0 of the boxes kept at each conf (the headline)
- :mod:`det_calib.metrics` — all-box ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, intervals
- :func:`det_calib.verify.coco_map`, :func:`det_calib.verify.ultralytics_val_shared` — mAP before/after
  (one Ultralytics val pass of the calibrated checkpoint per head also scores the original head)
  (and :func:`detection_change` for per-class maps folded into the model)
- :func:`det_calib.thresholds.threshold_shift` — the kept set at conf 0.25
- :func:`det_calib.fold.write_calibrated_checkpoint` / ``write_folded_checkpoint`` — the map folded in

What a run produces is a :class:`det_calib.results.RunResult`, which writes ``calibration.json``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib import metrics
from det_calib.boxes import HEAD_CHOICES, HEADS, HeadChoice, validate_boxes
from det_calib.calibrators import TemperatureScaler
from det_calib.coco_map import engine_label
from det_calib.data import (
    Dataset,
    Split,
    check_class_names,
    half_split,
    load_data_yaml,
    load_split,
    write_split_yaml,
)
from det_calib.errors import InputError
from det_calib.fitting import (
    CALIBRATION_METHODS,
    GLOBAL_METHODS,
    Choice,
    OperatingEval,
    calibrated_logits,
    calibrator_of,
    calibrator_record,
    candidates_of,
    choose_calibrator,
    deployed_conf,
    equivalent_conf,
    fit_floors,
)
from det_calib.io import check_output_dir, read_manifest, staged_output, write_text
from det_calib.matching import match_boxes
from det_calib.numeric import logit_threshold
from det_calib.preflight import preflight
from det_calib.results import (
    BinGap,
    Bootstrap,
    Calibrator,
    ClassResult,
    DetectionChange,
    EvalResult,
    FitResult,
    HeadResult,
    RecordedSettings,
    RunResult,
    Scores,
    TemperatureFit,
    Thresholded,
    ValCheck,
    ValMap,
    left_words,
    operating_point_worse,
    package_version,
    temperature_verdict,
    temperature_words,
)
from det_calib.selection import CRITERIA, METHODS
from det_calib.stages import stage
from det_calib.threads import single_blas_thread
from det_calib.thresholds import threshold_shift
from det_calib.tuning import DEFAULT_TARGET_PRECISION, Fallback, Unit
from det_calib.verify import MAP_ENGINES

log = logging.getLogger(__name__)

__all__ = ["Settings", "CalibrationRun", "calibrate", "resolve_splits", "evaluate_head", "fit_head", "fit_boxes",
           "summary_text", "write_summary_text", "match_boxes"]

DECE_BINS = (8, 3, 3, 3, 3)
"""D-ECE bins: confidence, then normalised centre x, centre y, width, height."""
BOOTSTRAP_LEVEL = Bootstrap.level
INTERVALS_LINE = ("intervals: 95% image bootstrap, each containing its estimate; ECE and LaECE: bias-corrected "
                  "percentile, or estimate ± 1.96 SD where the resampling bias puts the estimate outside it; "
                  "LaECE_0: estimate ± 1.96 SD")
"""Which interval each figure carries, in one line (the summary's last line; the report says the same)."""
VAL_BATCH = 16
"""Batch of the Ultralytics val checks: val's own default (they check plain val, not the capture)."""


def _opt(default: Any, help: str, *, flag: str | None = None, **extra: Any) -> Any:
    """A settings field: its default, its help, and (``flag``) its command-line option."""
    meta = {"help": help, **extra}
    if flag:
        meta["flag"] = flag
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    """Every option of a calibration run (recorded in calibration.json).

    Each field carries its default and its help; the command line's options of ``calibrate`` are
    generated from them (metadata ``flag``: the option; ``negate``: a ``--no-...`` switch that sets
    the field to False; ``choices``; ``repeat``: the option may be given several times).
    """

    fit_split: str | None = _opt(None, "split to fit on (default: calib; see README)", flag="--fit-split")
    eval_split: str | None = _opt(None, "split to report on (default: test)", flag="--eval-split")
    head: HeadChoice = _opt("auto", "nms: one-to-many head + NMS (Ultralytics default); e2e: NMS-free one-to-one "
                            "head (nms=False); both; auto (default): every head the model has",
                            flag="--head", choices=HEAD_CHOICES)
    iou: float = _opt(0.5, "IoU for a box to count as correct (default 0.5)", flag="--iou")
    loc_iou: float = _opt(0.1, "IoU threshold of the matching behind LaECE / LaACE")
    conf: tuple[float, ...] = _opt((0.25,), "deployment conf threshold to report the kept-set shift at "
                                   "(repeatable; default 0.25)", flag="--conf", repeat=True)
    method: str = _opt("auto", "calibration map: auto (default: chosen per head by cross-validation grouped by "
                       "image among none, temperature, platt, spline and isotonic, the maps that keep every box's "
                       "ranking; `none` keeps the raw scores), or one by name: temperature, platt, spline, "
                       "isotonic, class-temperature, class-platt, class-isotonic",
                       flag="--method", choices=CALIBRATION_METHODS)
    per_class: bool = _opt(False, "let --method auto also consider the per-class maps (class-temperature, "
                           "class-platt, class-isotonic; they can change which class wins a box, see the mAP promise)",
                           flag="--per-class", switch=True)
    fit_range: str | None = _opt(None, "boxes to fit on: all, operating (raw conf >= half the lowest --conf), or "
                                 "a raw conf floor; default all, and --method auto tries all and operating",
                                 flag="--fit-range")
    fit_min_conf: float | None = _opt(None, "same as --fit-range FLOOR (the older name)", flag="--fit-min-conf")
    criterion: str = _opt("nll", "what --method auto minimises on held-out folds, over the boxes above the "
                          "lowest --conf: nll (default), brier or ece", flag="--criterion", choices=CRITERIA)
    cv_folds: int = _opt(5, "folds of --method auto's cross-validation, grouped by image (default 5)",
                         flag="--cv-folds")
    cv_repeats: int = _opt(5, "fold assignments --method auto scores every candidate on (default 5; with 1 the "
                           "cross-validation takes a fifth of the time, but a close call can then change with "
                           "--seed)", flag="--cv-repeats")
    conf_floor: float = _opt(0.001, "capture conf floor (default 0.001, as val)", flag="--conf-floor")
    nms_iou: float = _opt(0.7, "IoU of non-maximum suppression (nms head)")
    max_det: int = _opt(300, "boxes per image at most (default 300)", flag="--max-det")
    imgsz: int | None = _opt(None, "inference size (default: the model's training size)", flag="--imgsz")
    batch: int = _opt(1, "images per capture forward pass, same letterbox shape only (default 1: exactly "
                      "single-image predict; more is faster on a GPU, not bit-exact)", flag="--batch")
    device: str | None = _opt(None, "torch device, e.g. cpu, 0, cuda:0 (default: Ultralytics' choice)",
                              flag="--device")
    coco_gt: str | None = _opt(None, "COCO JSON ground truth instead of YOLO txt labels", flag="--coco-gt")
    ece_bins: int = _opt(15, "ECE bins (default 15)", flag="--bins")
    laece_bins: int = _opt(25, "LaECE bins")
    min_class_boxes: int = _opt(50, "classes with fewer boxes are flagged 'few boxes'")
    n_boot: int = _opt(1000, "bootstrap resamples for intervals (default 1000)", flag="--n-boot")
    seed: int = _opt(0, "seed of the bootstrap and of a half/half split")
    map_engine: str = _opt("det_calib", "what scores the mAP check: det_calib (default: COCO mAP on det_calib's "
                           "vectorised matching, pycocotools' figures in a fraction of its time) or pycocotools",
                           flag="--map-engine", choices=("det_calib", "pycocotools"))
    run_val: bool = _opt(True, "skip the Ultralytics val runs", flag="--no-val", negate=True)
    report: bool = _opt(True, "skip report.html/report.md", flag="--no-report", negate=True)
    limit: int | None = _opt(None, "use only the first N images of each split (quick runs)", flag="--limit")
    boxes: str | None = _opt(None, "fit, evaluate and report from the boxes of an earlier run (its folder or "
                             "boxes.parquet) or from `det-calib capture` parts (a folder of parts, or of one "
                             "sub-folder per split) instead of capturing again", flag="--boxes")
    progress: bool = _opt(True, "no progress output", flag="--quiet", negate=True, short="-q")
    # per-class conf thresholds (det_calib.tuning); also the options of `det-calib thresholds`
    target_precision: float | None = _opt(
        None, "tune per-class conf thresholds certified at this precision and write thresholds.json "
        f"(calibrate: only when given; thresholds: default {DEFAULT_TARGET_PRECISION})", flag="--target-precision")
    delta: float = _opt(0.1, "the precision guarantee of the thresholds fails with probability <= delta "
                        "(default 0.1)", flag="--delta")
    threshold_unit: Unit = _opt("image", "independence unit of the precision test: image (default; boxes of one "
                                "image are correlated) or box", flag="--threshold-unit", choices=("image", "box"))
    threshold_fallback: Fallback = _opt("global", "threshold of a class that cannot be certified: global (default: "
                                        "the global certified threshold) or drop (no box kept)",
                                        flag="--threshold-fallback", choices=("global", "drop"))

    def validate(self) -> None:
        """Check every option; errors name the field (the CLI shows its option)."""
        if not 0 < self.iou <= 1:
            raise InputError(f"Expected `iou` in (0, 1], but got {self.iou}")
        if not 0 <= self.loc_iou <= 1:
            raise InputError(f"Expected `loc_iou` in [0, 1], but got {self.loc_iou}")
        for c in self.conf:
            if not 0 < c < 1:
                raise InputError(f"Expected every `conf` in (0, 1), but got {c}")
        if self.fit_min_conf is not None and not 0 <= self.fit_min_conf < 1:
            raise InputError(f"Expected `fit_min_conf` in [0, 1), but got {self.fit_min_conf}")
        if self.method not in CALIBRATION_METHODS:
            raise InputError(
                f"Expected `method` to be one of {', '.join(CALIBRATION_METHODS)}, but got {self.method!r}"
            )
        if self.criterion not in CRITERIA:
            raise InputError(f"Expected `criterion` to be one of {', '.join(CRITERIA)}, but got {self.criterion!r}")
        if int(self.cv_folds) < 2:
            raise InputError(f"Expected `cv_folds` to be an integer larger than 1, but got {self.cv_folds}")
        if int(self.cv_repeats) < 1:
            raise InputError(f"Expected `cv_repeats` to be an integer larger than 0, but got {self.cv_repeats}")
        self.fit_floors()
        if not 0 <= self.conf_floor < min(self.conf):
            raise InputError(f"Expected `conf_floor` in [0, {min(self.conf)}), but got {self.conf_floor}")
        if self.map_engine not in MAP_ENGINES:
            raise InputError(f"Expected `map_engine` to be one of {', '.join(MAP_ENGINES)}, "
                             f"but got {self.map_engine!r}")
        if self.head not in HEAD_CHOICES:
            raise InputError(f"Expected `head` to be one of {', '.join(HEAD_CHOICES)}, but got {self.head!r}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"Expected `limit` to be an integer larger than 0, but got {self.limit}")
        if self.target_precision is not None and not 0 < self.target_precision < 1:
            raise InputError(f"Expected `target_precision` in (0, 1), but got {self.target_precision}")
        if not 0 < self.delta < 1:
            raise InputError(f"Expected `delta` in (0, 1), but got {self.delta}")
        for name in ("batch", "max_det", "ece_bins", "laece_bins", "n_boot"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"Expected `{name}` to be an integer larger than 0, but got {getattr(self, name)}")

    def fit_floors(self) -> tuple[float, ...]:
        """The fit floor(s) (raw conf; 0.0 = every box) asked for (see :func:`det_calib.fitting.fit_floors`)."""
        return fit_floors(self.method, self.fit_range, self.fit_min_conf, tuple(self.conf))

    def recorded(self, *, imgsz: int, fit_split: str, eval_split: str) -> RecordedSettings:
        """The settings as ``calibration.json`` records them (``fit_min_conf``: the fit floor, or
        null when ``auto`` tried several: each head's calibrator records its own)."""
        floors = self.fit_floors()
        auto = self.method == "auto"
        return RecordedSettings(
            iou_match=self.iou, loc_iou_match=self.loc_iou, fit_min_conf=floors[0] if len(floors) == 1 else None,
            method=self.method, fit_range=self.fit_range if self.fit_min_conf is None else str(self.fit_min_conf),
            criterion=self.criterion if auto else None, cv_folds=self.cv_folds if auto else None,
            cv_repeats=self.cv_repeats if auto else None, auto_per_class=self.per_class if auto else None,
            conf_floor=self.conf_floor, nms_iou=self.nms_iou, max_det=self.max_det, imgsz=imgsz,
            conf_thresholds=tuple(self.conf), ece_bins=self.ece_bins, laece_bins=self.laece_bins,
            dece_bins=DECE_BINS, min_class_boxes=self.min_class_boxes,
            bootstrap=Bootstrap(n_boot=self.n_boot, seed=self.seed), fit_split=fit_split, eval_split=eval_split,
            coco_gt=self.coco_gt,
        )


SETTINGS_FIELDS = {f.name: f for f in fields(Settings)}


@dataclass
class CalibrationRun:
    """What :func:`calibrate` produced.

    Attributes:
        out_dir: Output folder.
        result: The run's results (what ``calibration.json`` holds).
        boxes: The box table (both splits, every head) as written to ``boxes.parquet``.
        checkpoint: Path of ``calibrated.pt``.
        files: Written files by name.
    """

    out_dir: Path
    result: RunResult
    boxes: pl.DataFrame
    checkpoint: Path | None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        """The content of ``calibration.json``."""
        return self.result.to_dict()

    @property
    def temperature(self) -> dict[str, float]:
        return self.result.temperatures


# ---------------------------------------------------------------------------------------- steps
def resolve_splits(ds: Dataset, fit_split: str | None, eval_split: str | None) -> tuple[str, str | None, bool]:
    """Choose the fit and eval splits.

    Explicit names win. Otherwise ``calib`` and ``test``; else the first two of
    ``calib``, ``val``, ``test`` that exist; else an image-level half/half split of ``val``.

    Returns:
        ``(fit, eval, halve)``: with ``halve`` True, ``fit`` is split in two and ``eval`` is None.
    """
    if fit_split and eval_split:
        if fit_split == eval_split:
            return fit_split, None, True
        return fit_split, eval_split, False
    have = [s for s in ("calib", "val", "test") if s in ds.splits]
    if fit_split or eval_split:
        given = fit_split or eval_split
        others = [s for s in have if s != given]
        if not others:
            return given, None, True
        return (given, others[0], False) if fit_split else (others[0], given, False)
    if "calib" in have and "test" in have:
        return "calib", "test", False
    if len(have) >= 2:
        return have[0], have[1], False
    if have:
        return have[0], None, True
    raise InputError(f"{ds.yaml_path} has none of the splits calib, val, test; name them with `fit_split`/`eval_split`")


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
    t = getattr(calibrator, "temperature_", None)
    return None if t is None or type(calibrator).__name__ == "ClassAffineScaler" else float(t)


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
    from det_calib.verify import coco_maps, same_ranking

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
        calibrator: A fitted calibrator (:mod:`det_calib.selection`), or a temperature (a number).
        operating: The head's :class:`~det_calib.fitting.OperatingEval` (built here when None).

    Returns:
        A :class:`~det_calib.results.HeadResult` without calibrator, fit and Ultralytics val.
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


def fit_boxes(boxes: pl.DataFrame, s: Settings, floor: float | None = None) -> pl.DataFrame:
    """The boxes a calibrator is fitted on: not crowd-matched, raw conf >= the fit floor
    (``floor``, default the settings' single floor; ``--method auto`` applies its floors itself)."""
    floors = s.fit_floors()
    f = floor if floor is not None else (floors[0] if len(floors) == 1 else 0.0)
    return boxes.filter(~pl.col("ignore") & (pl.col("conf") >= f))


def fit_head(boxes: pl.DataFrame, s: Settings) -> Choice:
    """Fit (or, with ``auto``, choose by CV and fit) the calibrator of one head on its fit-split boxes."""
    floors = s.fit_floors()
    if s.method == "auto":
        return choose_calibrator(fit_boxes(boxes, s, 0.0), method="auto", floors=floors, criterion=s.criterion,
                                 min_conf=min(s.conf), n_folds=s.cv_folds, seed=s.seed, n_repeats=s.cv_repeats,
                                 methods=METHODS if s.per_class else GLOBAL_METHODS)
    if s.method == "temperature":
        return Choice("temperature", floors[0], fit_temperature(fit_boxes(boxes, s)))
    return choose_calibrator(fit_boxes(boxes, s), method=s.method, floors=floors[:1], criterion=s.criterion,
                             min_conf=min(s.conf), n_folds=s.cv_folds, seed=s.seed)


def fit_temperature(boxes: pl.DataFrame) -> Any:
    """The NLL-optimal temperature of the fit boxes given (the classic method: fitted on every run,
    whatever is deployed, and reported for comparison)."""
    scaler = TemperatureScaler(kind="sigmoid").fit(boxes["logit"].to_numpy(), boxes["correct"].to_numpy())
    cal = calibrator_of(Calibrator.temperature_scaling(float(scaler.temperature_)))
    cal.scaler_ = scaler
    return cal


def fit_result(boxes: pl.DataFrame, split: Split, choice: Choice, s: Settings) -> FitResult:
    """The fit's record, with the fit split's own (in-sample) NLL, ECE and Brier for comparison."""
    used = fit_boxes(boxes, s, choice.floor)
    zf, yf = used["logit"].to_numpy(), used["correct"].to_numpy()
    scaler = getattr(choice.calibrator, "scaler_", None)
    if choice.method == "temperature" and scaler is not None and hasattr(scaler, "nll_before_"):
        t = float(scaler.temperature_)
        nll0, nll1, it = float(scaler.nll_before_), float(scaler.nll_after_), int(scaler.n_iter_)
        pf1 = metrics.sigmoid(zf, t)
    else:
        t1 = calibrated_logits(choice.calibrator, zf, used["cls"].to_numpy())
        nll0, nll1, it = metrics.nll_logits(zf, yf), metrics.nll_logits(t1, yf), None
        pf1 = metrics.sigmoid(t1, 1.0)
    pf0 = used["conf"].to_numpy()
    return FitResult(
        split=split.name, images=len(split.images), boxes=used.height, correct=int(yf.sum()),
        nll_before=nll0, nll_after=nll1,
        ece_before=metrics.ece(pf0, yf, n_bins=s.ece_bins), ece_after=metrics.ece(pf1, yf, n_bins=s.ece_bins),
        brier_before=metrics.brier(pf0, yf), brier_after=metrics.brier(pf1, yf), iterations=it,
    )


@dataclass
class _Inputs:
    """The resolved inputs of a run."""

    model: Path
    data: Path
    yolo: Any
    ds: Dataset
    heads: list[str]
    imgsz: int


def resolve_inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> _Inputs:
    """Load the detector and the dataset, check they agree, choose the heads and the image size."""
    from det_calib.capture import available_heads, default_imgsz, load_detector

    if (model is None) != (data is None):
        raise InputError("give both `model` and `data`, or neither (to run on the embedded demo model and data)")
    if model is None:
        from det_calib import demo

        model, data = demo.demo_model(), demo.demo_data_yaml()
    model, data = Path(model), Path(data)
    yolo = load_detector(model)
    ds = load_data_yaml(data)
    check_class_names([yolo.names[i] for i in sorted(yolo.names)], ds.names, data_path=data)
    have = available_heads(yolo)
    heads = {"auto": have, "both": list(HEADS), **{h: [h] for h in HEADS}}[s.head]
    missing = [h for h in heads if h not in have]
    if missing:
        raise InputError(f"the model has no `{missing[0]}` head (it has: {', '.join(have)}); choose `head` {have[0]}")
    return _Inputs(model, data, yolo, ds, heads, s.imgsz or default_imgsz(yolo))


def load_splits(ds: Dataset, s: Settings) -> tuple[Split, Split]:
    """The fit and the eval split (see :func:`resolve_splits`)."""
    fit_name, eval_name, halve = resolve_splits(ds, s.fit_split, s.eval_split)
    if halve:
        whole = load_split(ds, fit_name, coco_gt=s.coco_gt, limit=s.limit)
        fit, ev = half_split(whole, seed=s.seed)
        log.info("fit and eval: image-level halves of `%s` (%d + %d images)", fit_name, len(fit.images), len(ev.images))
    else:
        fit = load_split(ds, fit_name, coco_gt=s.coco_gt, limit=s.limit)
        ev = load_split(ds, eval_name, coco_gt=s.coco_gt, limit=s.limit)
    for sp in (fit, ev):
        if sp.corrupt:
            log.warning("split `%s`: skipped %d unreadable image(s)", sp.name, len(sp.corrupt))
    return fit, ev


def capture_splits(inputs: _Inputs, splits: Sequence[Split], s: Settings) -> dict[str, list[pl.DataFrame]]:
    """Boxes and raw logits of every head on each split: one forward pass per image serves all heads.

    Returns:
        Head -> one capture table per split (in the order of ``splits``).
    """
    from det_calib.capture import Capturer

    cap = Capturer(inputs.yolo, heads=inputs.heads, conf=s.conf_floor, iou=s.nms_iou, max_det=s.max_det,
                   imgsz=inputs.imgsz, batch=s.batch, device=s.device)
    out: dict[str, list[pl.DataFrame]] = {h: [] for h in inputs.heads}
    for sp in splits:
        log.info("capturing %s boxes on `%s` (%d images)", "+".join(inputs.heads), sp.name, len(sp.images))
        raw = cap(sp.images, split=sp.name, image_names=sp.image_names(), progress=s.progress)
        for h in inputs.heads:
            out[h].append(_head_rows(raw, h, sp, s))
        del raw
    return out


def _head_rows(raw: pl.DataFrame, head: str, sp: Split, s: Settings) -> pl.DataFrame:
    rows = raw.filter(pl.col("head") == head)
    if rows.height == 0:
        raise InputError(
            f"no boxes captured on split `{sp.name}` with the {head} head above conf {s.conf_floor}: "
            "is this the right model for this data?"
        )
    return rows


def calibrate_head(inputs: _Inputs, fit: Split, ev: Split, head: str, s: Settings,
                   captured: Sequence[pl.DataFrame]) -> tuple[HeadResult, list[pl.DataFrame]]:
    """One head: label → fit → evaluate its captured boxes. Returns its result and its two box tables."""
    with stage("matching"):
        fb, eb = (match_boxes(raw, sp.gt, iou=s.iou, loc_iou=s.loc_iou) for raw, sp in zip(captured, (fit, ev)))
    with stage("fit" if s.method != "auto" else "fit and CV"):
        choice = fit_head(fb, s)
    record = calibrator_record(choice.calibrator, choice.method, choice.floor)
    log.info("%s head: %s (fit floor %g)%s", head, choice.method, choice.floor,
             f"; {choice.selection.reason}" if choice.selection else "")
    with stage("kept-set metrics and intervals"):
        op = _operating_eval(eb, ev, s)
    evaluated = evaluate_head(eb, ev, choice.calibrator, s, inputs.ds.names, op)
    with stage("temperature and candidates on the eval split"):
        result = HeadResult(calibrator=record, fit=fit_result(fb, fit, choice, s),
                            eval=evaluated.eval, threshold_shift=evaluated.threshold_shift,
                            per_class=evaluated.per_class, candidates=_candidates(choice, op) or None,
                            temperature_fit=temperature_fit(fb, choice, op, s, evaluated.eval))
    return result, [with_calibrated(t, choice.calibrator) for t in (fb, eb)]


def with_calibrated(boxes: pl.DataFrame, calibrator: Any) -> pl.DataFrame:
    """The box table with a ``calibrated`` column: each box's conf under ``calibrator`` (float64;
    the raw ``conf`` itself under ``none``)."""
    p = deployed_conf(calibrator, boxes["logit"].to_numpy(), boxes["cls"].to_numpy(), boxes["conf"].to_numpy())
    return boxes.with_columns(pl.Series("calibrated", p, dtype=pl.Float64))


def temperature_fit(fit_boxes_: pl.DataFrame, choice: Choice, op: OperatingEval, s: Settings,
                    ev: EvalResult | None = None) -> TemperatureFit:
    """The temperature fitted on every fit box (the classic method), whatever the head deploys,
    with its kept-set figures on the eval split (those of the deployed map when it is that temperature)."""
    deployed = choice.method == "temperature" and choice.floor == 0.0
    cal = choice.calibrator if deployed else fit_temperature(fit_boxes(fit_boxes_, s, 0.0))
    if deployed and ev is not None:
        return TemperatureFit(float(cal.temperature_), True, list(ev.operating_after), ev.after.nll)
    t, p = op.probs(cal)
    return TemperatureFit(float(cal.temperature_), deployed, op.operating(p), metrics.nll_logits(t, op.y))


def _candidates(choice: Choice, op: OperatingEval) -> list:
    """The CV table of ``auto``; the best fit range of each method also scored on the eval split."""
    import dataclasses

    out = []
    for c in candidates_of(choice):
        m, f = c.calibrator.method, c.fit_min_conf
        refit = (choice.refits or {}).get(m)
        if refit is not None and refit[1] == f:
            log.info("scoring candidate %s on the eval split", c.name)
            figures = op.candidate_figures(None if m == "none" else refit[2])
            figures["calibrator"] = None if m == "none" else refit[2].to_dict()
            c = dataclasses.replace(c, eval=figures)
        out.append(c)
    return out


# ---------------------------------------------------------------------------------------- job
def _settings_of(settings: Settings | None, options: dict[str, Any]) -> Settings:
    if settings is not None and options:
        raise InputError("pass either `settings` or keyword options, not both")
    unknown = [k for k in options if k not in SETTINGS_FIELDS]
    if unknown:
        raise InputError(f"unknown option `{unknown[0]}`; options are {', '.join(SETTINGS_FIELDS)}")
    s = settings or Settings(**options)
    s.conf = tuple(float(c) for c in (s.conf if isinstance(s.conf, Sequence) else (s.conf,)))
    s.validate()
    return s


def calibrate(
    model: str | Path | None = None,
    data: str | Path | None = None,
    *,
    out: str | Path = "det_calib_out",
    settings: Settings | None = None,
    **options: Any,
) -> CalibrationRun:
    """Calibrate a detector end to end and write the output folder.

    Args:
        model: Detector checkpoint (``.pt``); default the embedded demo detector.
        data: ``data.yaml``; default the embedded demo dataset (rendered on first use).
        out: Output folder (created; files in it are replaced atomically).
        settings: A :class:`Settings`; or pass its fields as keyword options.

    Returns:
        A :class:`CalibrationRun`.

    Raises:
        InputError: Bad model, data or options (one-line message).
        DegenerateFitError: The fit split cannot determine a temperature.

    Examples:
        >>> run = calibrate(out="runs/demo")  # doctest: +SKIP
        >>> run.temperature  # doctest: +SKIP
        {'nms': 1.27, 'e2e': 1.05}
    """
    s = _settings_of(settings, options)
    t_start = time.time()
    with stage("load model and data"):
        inputs = resolve_inputs(model, data, s)
        fit, ev = load_splits(inputs.ds, s)
    # every check that needs no forward pass, before the first one
    preflight(model=inputs.model, out=Path(out), fit=fit, ev=ev, heads=list(inputs.heads),
              n_classes=len(inputs.ds.names), settings=s)
    check_output_dir(Path(out))  # refuse a folder det_calib does not own
    if s.boxes:
        from det_calib.reuse import reuse_boxes

        with stage("read boxes"):
            captured, fingerprints = reuse_boxes(s.boxes, inputs, (fit, ev), s)
    else:
        captured = capture_splits(inputs, (fit, ev), s)
        fingerprints = None
    results, tables = {}, []
    for head in inputs.heads:
        with single_blas_thread():  # vector work: a second BLAS thread only waits (det_calib.threads)
            results[head], head_tables = calibrate_head(inputs, fit, ev, head, s, captured.pop(head))
        tables += head_tables
    boxes = validate_boxes(pl.concat(tables, how="vertical", rechunk=False))  # no copy of the tables
    del tables
    result = RunResult(
        model=str(inputs.model.resolve()), data=str(inputs.data.resolve()), class_names=list(inputs.ds.names),
        heads=list(inputs.heads), settings=s.recorded(imgsz=inputs.imgsz, fit_split=fit.name, eval_split=ev.name),
        results=results, corrupt_images=sorted(set(fit.corrupt) | set(ev.corrupt)),
        det_calib_version=package_version(), created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gt_counts={sp.name: _gt_per_class(sp, len(inputs.ds.names)) for sp in (fit, ev)},
        bad_labels=list(dict.fromkeys(fit.bad_labels + ev.bad_labels)),
    )
    out = Path(out)
    with stage("write outputs"), single_blas_thread():
        files = _write_outputs(out, result, boxes, inputs, (fit, ev), s, t_start, fingerprints)
    return CalibrationRun(out_dir=out, result=result, boxes=boxes, checkpoint=out / "calibrated.pt", files=files)


def _gt_per_class(split: Split, n_classes: int) -> list[int]:
    """Non-crowd ground-truth boxes of a split per class id (recorded as ``gt_counts``)."""
    cls = split.gt.filter(~pl.col("crowd"))["cls"].to_numpy().astype(np.int64)
    return np.bincount(cls[(cls >= 0) & (cls < n_classes)], minlength=n_classes).tolist()


def _tune_thresholds(folder: Path, result: RunResult, s: Settings) -> list[str]:
    """Per-class conf thresholds of every head, written as ``thresholds.json``; the summary's lines."""
    from det_calib.tuning import summary_lines, tune_run

    lines: list[str] = []
    for head in result.heads:
        doc = tune_run(folder, head=head, target_precision=s.target_precision, delta=s.delta,
                       unit=s.threshold_unit, fallback=s.threshold_fallback, n_boot=s.n_boot, seed=s.seed)
        lines += summary_lines(doc, head=head)
    return lines


def _write_outputs(out: Path, result: RunResult, boxes: pl.DataFrame, inputs: _Inputs, splits: tuple[Split, Split],
                   s: Settings, t_start: float, fingerprints: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write every output of a run (the Ultralytics val checks need the written checkpoint).

    Everything is written into a staging folder that replaces ``out`` in one swap at the end
    (:func:`det_calib.io.staged_output`): a run that fails or is interrupted leaves the previous
    run's folder as it was. ``result`` gets its Ultralytics val checks and its run time.
    """
    from det_calib.fold import write_calibrated_checkpoint, write_folded_checkpoint
    from det_calib.reuse import run_fingerprints, write_run_boxes

    ev = splits[1]
    # Everything is written into a staging folder that replaces `out` in one swap when the run
    # has succeeded (det_calib.io.staged_output): a run that fails or is interrupted leaves the
    # previous run's folder as it was, never a mix of old and new.
    with staged_output(out) as stage:
        write_run_boxes(boxes, stage / "boxes.parquet", fingerprints or run_fingerprints(inputs, splits, s))
        meta = {"iou_match": s.iou, "fit_split": result.settings.fit_split, "data": result.data}
        records = {h: r.calibrator for h, r in result.results.items() if r.calibrator is not None}
        if all(r.method == "temperature" for r in records.values()):
            write_calibrated_checkpoint(inputs.model, stage / "calibrated.pt", result.temperatures, metadata=meta)
        else:  # any other map: folded per channel (affine) or as stock conv+ReLU hinge layers (isotonic)
            write_folded_checkpoint(inputs.model, stage / "calibrated.pt",
                                    {h: calibrator_of(r) for h, r in records.items()}, metadata=meta)
        if s.run_val and s.boxes:  # reusing boxes is for trying settings in seconds: no forward pass
            for h in inputs.heads:
                result.results[h] = _replace(result.results[h], ultralytics_val=_val_not_run(
                    ev.name, f"boxes reused from {s.boxes}; run calibrate without `boxes` to verify with val"))
        elif s.run_val:
            checks = _ultralytics_checks(inputs, stage / "calibrated.pt", ev, records, s)
            for h, check in checks.items():
                result.results[h] = _replace(result.results[h], ultralytics_val=check)
            for h, rec in records.items():
                if rec.method not in GLOBAL_METHODS:
                    eb = boxes.filter((pl.col("head") == h) & (pl.col("split") == ev.name))
                    change = detection_change(inputs, stage / "calibrated.pt", ev, h, eb, rec, s)
                    result.results[h] = _replace(result.results[h], detection_change=change)
        result.seconds = round(time.time() - t_start, 1)
        result.write(stage / "calibration.json")
        extra = _tune_thresholds(stage, result, s) if s.target_precision is not None else []
        write_summary_text(stage, result, extra=extra)
        if s.report:
            from det_calib import stages
            from det_calib.report import write_report

            with stages.stage("report"):
                write_report(stage, shown_dir=out, boxes=boxes)
    return _output_files(out)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _output_files(out: Path) -> dict[str, Path]:
    """The files the run wrote in ``out``, keyed by role (``"checkpoint"``, ...) or relative path."""
    names = {"boxes.parquet": "boxes", "calibrated.pt": "checkpoint", "calibration.json": "calibration",
             "summary.txt": "summary", "report.html": "html", "report.md": "md", "thresholds.json": "thresholds"}
    return {names.get(rel, rel): out / rel for rel in read_manifest(out)}


def detection_change(inputs: _Inputs, ckpt: Path, ev: Split, head: str, eval_boxes: pl.DataFrame,
                     record: Calibrator, s: Settings) -> DetectionChange:
    """Measure what folding a per-class map into the model changes: capture the eval split through
    the calibrated checkpoint and compare with the original boxes rescored by the same map."""
    from det_calib.capture import Capturer
    from det_calib.verify import coco_maps

    log.info("%s head: measuring the folded per-class map's detections on `%s`", head, ev.name)
    # the same capture as the original's (one image per forward pass at the default batch 1)
    cap = Capturer(ckpt, head=head, conf=s.conf_floor, iou=s.nms_iou, max_det=s.max_det, imgsz=inputs.imgsz,
                   batch=s.batch, device=s.device)
    folded = cap(ev.images, split=ev.name, image_names=ev.image_names(), progress=s.progress)
    del cap
    cal = calibrator_of(record)
    z = eval_boxes["logit"].to_numpy()
    p_post = metrics.sigmoid(calibrated_logits(cal, z, eval_boxes["cls"].to_numpy()), 1.0)
    # compare above the calibrated conf that every class's raw capture floor maps to: above it the
    # original capture holds every box the post-hoc deployment would output
    nc = len(inputs.ds.names)
    zf = np.full(nc, logit_threshold(s.conf_floor) if s.conf_floor > 0 else -50.0)
    floor = max(s.conf_floor, float(metrics.sigmoid(calibrated_logits(cal, zf, np.arange(nc)), 1.0).max()))
    post = eval_boxes.with_columns(pl.Series("conf_cal", p_post)).filter(pl.col("conf_cal") > floor)
    fold = folded.with_columns(pl.col("conf").cast(pl.Float64).alias("conf_cal")).filter(pl.col("conf_cal") > floor)

    def keys(df: pl.DataFrame, with_cls: bool) -> set:
        cols = [df["image_id"].to_numpy()] + [np.round(df[c].to_numpy() * 100).astype(np.int64)
                                               for c in ("x1", "y1", "x2", "y2")]
        if with_cls:
            cols.append(df["cls"].to_numpy())
        return set(zip(*(c.tolist() for c in cols), strict=True))

    kp, kf = keys(post, True), keys(fold, True)
    pos_p, pos_f = keys(post, False), keys(fold, False)
    both_pos = pos_p & pos_f
    changed = len(both_pos) - len({k[:5] for k in kp & kf})
    thr = min(s.conf)
    post_k, fold_k = post.filter(pl.col("conf_cal") > thr), fold.filter(pl.col("conf_cal") > thr)
    kpk, kfk = keys(post_k, True), keys(fold_k, True)
    m0, m1 = coco_maps(eval_boxes, ev.gt, ev.sizes, [metrics.sigmoid(z, 1.0), p_post], max_dets=s.max_det,
                       engine=s.map_engine)
    m2 = coco_maps(folded, ev.gt, ev.sizes, [folded["conf"].to_numpy()], max_dets=s.max_det, engine=s.map_engine)[0]
    return DetectionChange(
        split=ev.name, conf_floor=floor, boxes_posthoc=post.height, boxes_folded=fold.height,
        changed_class=int(max(changed, 0)), only_posthoc=len(kp - kf), only_folded=len(kf - kp), kept_conf=thr,
        kept_posthoc=post_k.height, kept_folded=fold_k.height, kept_only_posthoc=len(kpk - kfk),
        kept_only_folded=len(kfk - kpk), map50_95_original=m0["map50_95"], map50_95_posthoc=m1["map50_95"],
        map50_95_folded=m2["map50_95"], map50_original=m0["map50"], map50_posthoc=m1["map50"],
        map50_folded=m2["map50"],
    )


def _val_not_run(split: str, note: str) -> ValCheck:
    return ValCheck(split=split, note=f"not run: {note}")


def _ultralytics_checks(inputs: _Inputs, ckpt: Path, ev: Split, records: dict[str, Calibrator], s: Settings
                        ) -> dict[str, ValCheck]:
    """Ultralytics val of the calibrated checkpoint per head, the original's figures from the same pass."""
    if s.coco_gt:
        return {h: _val_not_run(ev.name, "Ultralytics val reads YOLO txt labels, not the --coco-gt file")
                for h in inputs.heads}
    from det_calib.verify import ultralytics_val_shared

    results: dict[str, ValCheck] = {}
    with tempfile.TemporaryDirectory(prefix="det_calib_eval_") as tmp:
        yml = write_split_yaml(inputs.ds, ev, Path(tmp))
        for head in inputs.heads:
            # val's own default batch: the check is plain Ultralytics val (its letterbox and batching)
            kw = dict(split="val", head=head, imgsz=inputs.imgsz, batch=VAL_BATCH, device=s.device)
            log.info("Ultralytics val (%s head): calibrated checkpoint, the original head on the same pass", head)
            try:
                results[head] = _val_check(inputs.model, ckpt, yml, ev.name, records[head], s, kw,
                                           ultralytics_val_shared)
            except Exception as e:  # val needs YOLO txt labels; with COCO JSON GT it may not run
                log.warning("Ultralytics val skipped for %s head: %s", head, e)
                results[head] = _val_not_run(ev.name, str(e))
    return results


def equivalent_floor(record: Calibrator, floor: float) -> float | None:
    """The calibrated conf of a box whose raw conf is ``floor``, for a global monotone map (then
    ``calibrated > it`` keeps exactly the boxes with ``raw > floor``; :func:`equivalent_conf`);
    None for per-class maps."""
    if record.method not in GLOBAL_METHODS:
        return None
    return equivalent_conf(calibrator_of(record), floor) if floor > 0 else 0.0


def _val_check(model: Path, ckpt: Path, yml: Path, split: str, record: Calibrator, s: Settings, kw: dict[str, Any],
               val_shared: Any) -> ValCheck:
    """One Ultralytics val pass of ``ckpt`` (:func:`det_calib.verify.ultralytics_val_shared`): the
    calibrated figures are stock val's, the original's (at val's floor) come from the same pass.
    A pass whose NMS ran out of time gives a check "not completed", with no mAP."""
    from det_calib.verify import ValIncomplete

    try:
        return _val_check_pass(model, ckpt, yml, split, record, s, kw, val_shared)
    except ValIncomplete as e:
        log.warning("Ultralytics val (%s head) not completed: %s", kw.get("head"), e)
        return ValCheck(split=split, completed=False, note=f"not completed: {e}")


def _val_check_pass(model: Path, ckpt: Path, yml: Path, split: str, record: Calibrator, s: Settings,
                    kw: dict[str, Any], val_shared: Any) -> ValCheck:
    from det_calib.verify import SHARED_PASS

    how = f" How: {SHARED_PASS}."
    floor = equivalent_floor(record, s.conf_floor) if s.conf_floor > 0 else 0.0
    if floor is None:  # per-class maps: no single floor keeps the candidate set; report what val measures
        r0, r1 = val_shared(model, ckpt, yml, conf=s.conf_floor, original_conf=s.conf_floor, **kw)
        diff = r1["map50_95"] - r0["map50_95"]
        note = (
            f"{record.method} is a per-class map: it can change which class wins a box (the argmax before NMS) "
            f"and the cross-class top-k (max_det), so the calibrated model's detections can differ from the "
            f"original's (detection_change counts them); measured at val's floor {s.conf_floor}: mAP50-95 "
            f"{r0['map50_95']:.4f} -> {r1['map50_95']:.4f} ({diff:+.4f}), mAP50 "
            f"{r0['map50']:.4f} -> {r1['map50']:.4f}. Applied after the detector's own selection "
            "(det_calib.apply_calibrator), the detections stay the original ones." + how
        )
        return ValCheck(split=split, original=ValMap(**r0), calibrated=ValMap(**r1), identical_at_equivalent_floor=None,
                        note=note)
    r0, r2 = val_shared(model, ckpt, yml, conf=floor, original_conf=s.conf_floor, **kw)
    same = math.isclose(r0["map50_95"], r2["map50_95"], abs_tol=1e-6) and math.isclose(
        r0["map50"], r2["map50"], abs_tol=1e-6
    )
    lower = floor < s.conf_floor
    what = f"T={record.temperature:.3f}" if record.method == "temperature" else f"the {record.method} map"
    note = (
        f"At the equivalent floor {floor:.6g} the candidate set of the calibrated checkpoint is the original "
        f"one: mAP {'identical' if same else 'differs'} ({r0['map50_95']:.4f} vs {r2['map50_95']:.4f}). "
        f"At val's own floor {s.conf_floor}, {what} would move some low-score boxes {'below' if lower else 'above'} "
        f"it ({'fewer' if lower else 'more'} candidates, mAP can differ slightly); that run is not repeated here."
    )
    if not same:
        note += " Differences this small come from float32 ties reordering equal-score boxes."
    return ValCheck(split=split, original=ValMap(**r0), calibrated=None,
                    calibrated_equivalent_floor=ValMap(**r2), identical_at_equivalent_floor=same, note=note + how)


def _f(x: float | None, fmt: str) -> str:
    """Format a number; None/nan (JSON null) as n/a."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _ci_text(ci: Any) -> str:
    return "" if not ci else f" [{_f(ci[0], '.4f')}, {_f(ci[1], '.4f')}]"


def calibrator_line(head: str, h: HeadResult, st: RecordedSettings) -> str:
    """What calibrates a head, in words (the first line of its summary)."""
    rec = h.calibrator
    if rec is None:
        return f"[{head}] no calibrator"
    if rec.method == "none":
        why = ("no calibrator beat them on held-out folds by more than one paired standard error"
               if h.candidates else "chosen by name")
        return f"[{head}] keep the raw scores: {why} (calibrated.pt leaves this head's scores unchanged)"
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
            folds = f"{st.cv_folds}-fold CV by image" + (f", repeated {reps} times" if reps > 1 else "")
            chosen = f"; chosen by {folds} ({st.criterion} above conf {min(st.conf_thresholds)})"
    return f"[{head}] {what}, fitted on {where}{chosen}"


def _left_lines(head: str, h: HeadResult, e: EvalResult) -> list[str]:
    words = left_words(h, e)
    return [f"[{head}] {words}"] if words else []


def _temperature_lines(head: str, h: HeadResult) -> list[str]:
    words = temperature_words(h.temperature_fit)
    return [f"[{head}] {words}"] if words else []


def summary_text(result: RunResult | dict[str, Any]) -> str:
    """A short plain-text summary of a run (what the CLI prints): the operating point first."""
    r = result if isinstance(result, RunResult) else RunResult.from_dict(result)
    st = r.settings
    lines = [f"model {r.model}", f"data  {r.data}  (fit: {st.fit_split}, eval: {st.eval_split})"]
    for head in r.heads:
        h = r.head(head)
        e = h.eval or EvalResult()
        lines.append(calibrator_line(head, h, st))
        for o0, o1 in zip(e.operating_before, e.operating_after, strict=False):
            lines.append(
                f"[{head}] boxes kept at conf {o0.conf:g} ({o0.boxes} raw -> {o1.boxes} calibrated): "
                f"ECE({st.ece_bins} bins, IoU {st.iou_match}) {_f(o0.ece, '.4f')}{_ci_text(o0.ece_ci)} -> "
                f"{_f(o1.ece, '.4f')}{_ci_text(o1.ece_ci)}; LaECE_0({st.laece_bins} bins) "
                f"{_f(o0.laece0, '.4f')}{_ci_text(o0.laece0_ci)} -> {_f(o1.laece0, '.4f')}{_ci_text(o1.laece0_ci)}"
            )
            if o1.ece_floor is not None:
                lines.append(f"[{head}]   a perfectly calibrated detector would score ECE {_f(o1.ece_floor, '.4f')}"
                             f"{_ci_text(o1.ece_floor_range)} on these {o1.boxes} boxes (sampling floor, 95% range)"
                             + ("; the calibrated ECE is at that floor" if o1.at_floor else ""))
        worse = operating_point_worse(e)
        if worse is not None:
            lines.append(f"[{head}] WORSE than the raw scores where decisions are made ({worse}): "
                         + ("the eval split does not bear out what the fit split's held-out folds showed; deploy "
                            "the original model for this head, or calibrate on more images"
                            if h.candidates else
                            "keep the raw scores for this head, or let the default --method auto choose (it keeps "
                            "them when no calibrator beats them on held-out folds)"))
        lines += _left_lines(head, h, e)
        lines += _temperature_lines(head, h)
        lines.append(
            f"[{head}] all boxes down to conf {st.conf_floor:g}: ECE {_f(e.before.ece, '.4f')} -> "
            f"{_f(e.after.ece, '.4f')}; NLL {_f(e.before.nll, '.4f')} -> {_f(e.after.nll, '.4f')}"
        )
        lines.append(
            f"[{head}] COCO mAP50-95 {_f(e.map50_95_before, '.4f')} -> {_f(e.map50_95_after, '.4f')}, "
            f"mAP50 {_f(e.map50_before, '.4f')} -> {_f(e.map50_after, '.4f')} "
            f"({'identical' if e.map_identical else 'DIFFERENT'}; the detector's boxes rescored; "
            f"scored by {engine_label(e.map_engine)})"
        )
        uv = h.ultralytics_val
        if uv is not None and uv.completed is False:
            lines.append(f"[{head}] Ultralytics val {uv.note}")
        if uv is not None and uv.ran:
            eq = uv.calibrated_equivalent_floor
            lines.append(
                f"[{head}] Ultralytics val mAP50-95 original {_f(uv.original.map50_95, '.4f')}, calibrated model "
                + (f"at equivalent floor {_f(eq.map50_95, '.4f')}" if eq is not None else
                   f"{_f(uv.calibrated.map50_95 if uv.calibrated else None, '.4f')} "
                   "(a per-class map folded into the model)")
            )
        dc = h.detection_change
        if dc is not None:
            lines.append(
                f"[{head}] folded per-class map vs the same map applied after selection, on {dc.split}: "
                + ("identical detections" if dc.identical else
                   f"{dc.changed_class} boxes changed class, {dc.only_posthoc} lost, {dc.only_folded} new "
                   f"(above conf {dc.kept_conf:g}: {dc.kept_only_posthoc} lost, {dc.kept_only_folded} new)")
                + f"; COCO mAP50-95 original {_f(dc.map50_95_original, '.4f')}, post-hoc "
                f"{_f(dc.map50_95_posthoc, '.4f')}, folded {_f(dc.map50_95_folded, '.4f')}"
            )
        for sh in h.threshold_shift:
            eqc = ("" if sh.equivalent_conf is None or sh.equivalent_conf == sh.conf
                   else f"; raw {sh.conf} = calibrated {_f(sh.equivalent_conf, '.4f')}")
            lines.append(
                f"[{head}] at conf {sh.conf}: kept {sh.kept_before} -> {sh.kept_after} "
                f"(+{sh.added} of which {sh.added_correct} correct, -{sh.removed} of which "
                f"{sh.removed_correct} correct); "
                f"precision {_f(sh.precision_before, '.3f')} -> {_f(sh.precision_after, '.3f')}, "
                f"recall {_f(sh.recall_before, '.3f')} -> {_f(sh.recall_after, '.3f')}{eqc}"
            )
    lines.append(f"({INTERVALS_LINE}; sampling floor: labels drawn 200 times from the calibrated confidences of the "
                 "kept boxes)")
    return "\n".join(lines)


def write_summary_text(out: Path, result: RunResult, *, extra: Sequence[str] = ()) -> Path:
    """Write ``summary.txt`` into the output folder (``extra``: lines after the summary, e.g. thresholds)."""
    return write_text(Path(out) / "summary.txt", "\n".join([summary_text(result), *extra]) + "\n")

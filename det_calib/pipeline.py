"""The main job: resolve inputs, load splits, capture (one pass per split serves every head; or reuse
earlier boxes), per head label → fit → evaluate, write outputs.

:func:`calibrate` runs every step and writes the output folder; each step is also a public
function of its own module, for notebooks and other tools:

- :class:`det_calib.capture.Capturer` — boxes and raw logits, exactly as single-image ``predict``
- :func:`det_calib.reuse.reuse_boxes` — the boxes of an earlier run or of capture parts
- :func:`det_calib.matching.match_boxes` — correct/incorrect by one-to-one IoU matching
- :func:`det_calib.calibrators.fit_temperature` — the NLL-optimal temperature
- :mod:`det_calib.metrics` — ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, intervals
- :func:`det_calib.verify.coco_map`, :func:`det_calib.verify.ultralytics_val` — mAP unchanged
- :func:`det_calib.thresholds.threshold_shift` — the kept set at conf 0.25
- :func:`det_calib.fold.write_calibrated_checkpoint` — T folded into the head

What a run produces is a :class:`det_calib.results.RunResult`, which writes ``calibration.json``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from det_calib import metrics
from det_calib.boxes import HEADS, validate_boxes
from det_calib.calibrators import TemperatureScaler
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
from det_calib.io import write_text
from det_calib.matching import match_boxes
from det_calib.preflight import preflight
from det_calib.results import (
    Bootstrap,
    Calibrator,
    ClassResult,
    EvalResult,
    FitResult,
    HeadResult,
    RecordedSettings,
    RunResult,
    Scores,
    Thresholded,
    ValCheck,
    ValMap,
    package_version,
    temperature_verdict,
)
from det_calib.thresholds import threshold_shift

log = logging.getLogger(__name__)

__all__ = ["Settings", "CalibrationRun", "calibrate", "resolve_splits", "evaluate_head", "fit_head", "fit_boxes",
           "summary_text", "write_summary_text", "match_boxes"]

HeadChoice = Literal["auto", "nms", "e2e", "both"]
HEAD_CHOICES: tuple[str, ...] = ("auto", *HEADS, "both")
DECE_BINS = (8, 3, 3, 3, 3)
"""D-ECE bins: confidence, then normalised centre x, centre y, width, height."""
BOOTSTRAP_LEVEL = Bootstrap.level
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
    fit_min_conf: float = _opt(0.0, "fit only on boxes with raw conf >= this", flag="--fit-min-conf")
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
    run_val: bool = _opt(True, "skip the Ultralytics val runs", flag="--no-val", negate=True)
    report: bool = _opt(True, "skip report.html/report.md", flag="--no-report", negate=True)
    limit: int | None = _opt(None, "use only the first N images of each split (quick runs)", flag="--limit")
    boxes: str | None = _opt(None, "fit, evaluate and report from the boxes of an earlier run (its folder or "
                             "boxes.parquet) or from `det-calib capture` parts (a folder of parts, or of one "
                             "sub-folder per split) instead of capturing again", flag="--boxes")
    progress: bool = _opt(True, "no progress output", flag="--quiet", negate=True, short="-q")

    def validate(self) -> None:
        """Check every option; errors name the field (the CLI shows its option)."""
        if not 0 < self.iou <= 1:
            raise InputError(f"Expected `iou` in (0, 1], but got {self.iou}")
        if not 0 <= self.loc_iou <= 1:
            raise InputError(f"Expected `loc_iou` in [0, 1], but got {self.loc_iou}")
        for c in self.conf:
            if not 0 < c < 1:
                raise InputError(f"Expected every `conf` in (0, 1), but got {c}")
        if not 0 <= self.fit_min_conf < 1:
            raise InputError(f"Expected `fit_min_conf` in [0, 1), but got {self.fit_min_conf}")
        if not 0 <= self.conf_floor < min(self.conf):
            raise InputError(f"Expected `conf_floor` in [0, {min(self.conf)}), but got {self.conf_floor}")
        if self.head not in HEAD_CHOICES:
            raise InputError(f"Expected `head` to be one of {', '.join(HEAD_CHOICES)}, but got {self.head!r}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"Expected `limit` to be an integer larger than 0, but got {self.limit}")
        for name in ("batch", "max_det", "ece_bins", "laece_bins", "n_boot"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"Expected `{name}` to be an integer larger than 0, but got {getattr(self, name)}")

    def recorded(self, *, imgsz: int, fit_split: str, eval_split: str) -> RecordedSettings:
        """The settings as ``calibration.json`` records them."""
        return RecordedSettings(
            iou_match=self.iou, loc_iou_match=self.loc_iou, fit_min_conf=self.fit_min_conf,
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
    loc: np.ndarray
    feats: np.ndarray
    gt_cls: np.ndarray
    ignored: int

    @classmethod
    def of(cls, boxes: pl.DataFrame, split: Split, temperature: float) -> _EvalArrays:
        keep = ~boxes["ignore"].to_numpy()
        b = boxes.filter(pl.Series(keep))
        z = b["logit"].to_numpy()
        return cls(
            z=z, y=b["correct"].to_numpy(), cls=b["cls"].to_numpy(), img=b["image_id"].to_numpy(),
            p0=b["conf"].to_numpy(), p1=metrics.sigmoid(z, temperature), loc=b["loc_iou"].to_numpy(),
            feats=metrics.box_features(*(b[c].to_numpy() for c in ("x1", "y1", "x2", "y2", "img_w", "img_h"))),
            gt_cls=split.gt.filter(~pl.col("crowd"))["cls"].to_numpy(), ignored=int((~keep).sum()),
        )


def _scores(a: _EvalArrays, m: Any, temperature: float, s: Settings) -> tuple[Scores, Scores]:
    """Calibration metrics of the boxes ``m`` (a mask or slice), raw and calibrated."""
    common = dict(loc_iou=a.loc[m], cls_id=a.cls[m], features=a.feats[m], image_id=a.img[m],
                  ece_bins=s.ece_bins, laece_bins=s.laece_bins, dece_bins=list(DECE_BINS), n_boot=s.n_boot,
                  seed=s.seed)
    before = Scores.compute(a.p0[m], a.y[m], logit=a.z[m], temperature=1.0, **common)
    after = Scores.compute(a.p1[m], a.y[m], logit=a.z[m], temperature=temperature, **common)
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


def _map_check(boxes: pl.DataFrame, split: Split, temperature: float, s: Settings) -> dict[str, Any]:
    """pycocotools mAP of the same boxes ranked by raw and by calibrated scores.

    Crowd-matched boxes are included: COCOeval ignores them itself. Both from the logits in
    float64: the float32 confs Ultralytics reports have rounding ties that the calibrated float64
    scores break, which could reorder equal-score boxes and blur the comparison.
    """
    from det_calib.verify import coco_maps, same_ranking

    all_z = boxes["logit"].to_numpy()
    raw, cal = metrics.sigmoid(all_z, 1.0), metrics.sigmoid(all_z, temperature)
    if same_ranking(raw, cal):  # COCOeval sees scores only through this order: the same mAP, proven
        m0 = m1 = coco_maps(boxes, split.gt, split.sizes, [raw], max_dets=s.max_det)[0]
    else:
        m0, m1 = coco_maps(boxes, split.gt, split.sizes, [raw, cal], max_dets=s.max_det)
    return dict(map50_95_before=m0["map50_95"], map50_95_after=m1["map50_95"], map50_before=m0["map50"],
                map50_after=m1["map50"], map_identical=m0 == m1)


def _per_class(a: _EvalArrays, temperature: float, s: Settings, names: list[str]) -> list[ClassResult]:
    """One entry per class with boxes or ground truth."""
    out = []
    ece_fn = functools.partial(metrics.ece, n_bins=s.ece_bins)  # keeps `weights`: fast bootstrap path
    for c in range(len(names)):
        m = a.cls == c
        n_gt_c = int((a.gt_cls == c).sum())
        if not m.any() and n_gt_c == 0:
            continue
        figures: dict[str, Any] = {}
        if m.any():
            boot = dict(n_boot=s.n_boot, seed=s.seed)
            for tag, p in (("before", a.p0), ("after", a.p1)):
                figures[f"ece_{tag}"] = metrics.ece(p[m], a.y[m], n_bins=s.ece_bins)
                figures[f"ece_{tag}_ci"] = tuple(metrics.bootstrap_ci(ece_fn, a.img[m], p[m], a.y[m], **boot))
                figures[f"laece_{tag}"] = metrics.laece(p[m], a.loc[m], a.cls[m], n_bins=s.laece_bins)
        out.append(ClassResult(
            cls=c, name=names[c], boxes=int(m.sum()), correct=int(a.y[m].sum()), n_gt=n_gt_c,
            few_boxes=bool(m.sum() < s.min_class_boxes), **figures,
            threshold_shift=[threshold_shift(a.p0[m], a.p1[m], a.y[m], conf=t, n_gt=n_gt_c, temperature=temperature)
                             for t in s.conf],
        ))
    return out


def evaluate_head(boxes: pl.DataFrame, split: Split, temperature: float, s: Settings, names: list[str]) -> HeadResult:
    """Calibration metrics, mAP check, threshold shift and per-class results of one head on the eval split.

    Returns:
        A :class:`~det_calib.results.HeadResult` without calibrator, fit and Ultralytics val.
    """
    a = _EvalArrays.of(boxes, split, temperature)
    before, after = _scores(a, slice(None), temperature, s)
    ev = EvalResult(
        split=split.name, images=len(split.images), boxes=int(len(a.y)), correct=int(a.y.sum()), ignored=a.ignored,
        n_gt=int(len(a.gt_cls)), corrupt_images=len(split.corrupt), before=before, after=after,
        thresholded=_thresholded(a, s), **_map_check(boxes, split, temperature, s),
    )
    shifts = [threshold_shift(a.p0, a.p1, a.y, conf=t, n_gt=len(a.gt_cls), temperature=temperature) for t in s.conf]
    return HeadResult(eval=ev, threshold_shift=shifts, per_class=_per_class(a, temperature, s, names))


def fit_boxes(boxes: pl.DataFrame, s: Settings) -> pl.DataFrame:
    """The boxes a temperature is fitted on: not crowd-matched, raw conf >= ``fit_min_conf``."""
    return boxes.filter(~pl.col("ignore") & (pl.col("conf") >= s.fit_min_conf))


def fit_head(boxes: pl.DataFrame, s: Settings) -> TemperatureScaler:
    """Fit the temperature of one head on its fit-split boxes (see :func:`fit_boxes`)."""
    b = fit_boxes(boxes, s)
    return TemperatureScaler(kind="sigmoid").fit(b["logit"].to_numpy(), b["correct"].to_numpy())


def fit_result(boxes: pl.DataFrame, split: Split, scaler: TemperatureScaler, s: Settings) -> FitResult:
    """The fit's record, with the fit split's own (in-sample) ECE and Brier for comparison."""
    used = fit_boxes(boxes, s)
    t = float(scaler.temperature_)
    zf, yf = used["logit"].to_numpy(), used["correct"].to_numpy()
    pf0, pf1 = used["conf"].to_numpy(), metrics.sigmoid(zf, t)
    return FitResult(
        split=split.name, images=len(split.images), boxes=used.height, correct=int(yf.sum()),
        nll_before=float(scaler.nll_before_), nll_after=float(scaler.nll_after_),
        ece_before=metrics.ece(pf0, yf, n_bins=s.ece_bins), ece_after=metrics.ece(pf1, yf, n_bins=s.ece_bins),
        brier_before=metrics.brier(pf0, yf), brier_after=metrics.brier(pf1, yf), iterations=int(scaler.n_iter_),
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
    heads = {"auto": have, "both": list(HEADS), "nms": ["nms"], "e2e": ["e2e"]}[s.head]
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
    fb, eb = (match_boxes(raw, sp.gt, iou=s.iou, loc_iou=s.loc_iou) for raw, sp in zip(captured, (fit, ev)))
    scaler = fit_head(fb, s)
    t = float(scaler.temperature_)
    log.info("%s head: T = %.4f (NLL %.4f -> %.4f on %s)", head, t, scaler.nll_before_, scaler.nll_after_, fit.name)
    evaluated = evaluate_head(eb, ev, t, s, inputs.ds.names)
    result = HeadResult(calibrator=Calibrator.temperature_scaling(t), fit=fit_result(fb, fit, scaler, s),
                        eval=evaluated.eval, threshold_shift=evaluated.threshold_shift,
                        per_class=evaluated.per_class)
    return result, [fb, eb]


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
    inputs = resolve_inputs(model, data, s)
    fit, ev = load_splits(inputs.ds, s)
    # every check that needs no forward pass, before the first one
    preflight(model=inputs.model, out=Path(out), fit=fit, ev=ev, heads=list(inputs.heads),
              n_classes=len(inputs.ds.names), settings=s)
    if s.boxes:
        from det_calib.reuse import reuse_boxes

        captured, fingerprints = reuse_boxes(s.boxes, inputs, (fit, ev), s)
    else:
        captured = capture_splits(inputs, (fit, ev), s)
        fingerprints = None
    results, tables = {}, []
    for head in inputs.heads:
        results[head], head_tables = calibrate_head(inputs, fit, ev, head, s, captured.pop(head))
        tables += head_tables
    boxes = validate_boxes(pl.concat(tables, how="vertical"))
    del tables
    result = RunResult(
        model=str(inputs.model.resolve()), data=str(inputs.data.resolve()), class_names=list(inputs.ds.names),
        heads=list(inputs.heads), settings=s.recorded(imgsz=inputs.imgsz, fit_split=fit.name, eval_split=ev.name),
        results=results, corrupt_images=sorted(set(fit.corrupt) | set(ev.corrupt)),
        det_calib_version=package_version(), created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    out = Path(out)
    files = _write_outputs(out, result, boxes, inputs, (fit, ev), s, t_start, fingerprints)
    return CalibrationRun(out_dir=out, result=result, boxes=boxes, checkpoint=out / "calibrated.pt", files=files)


def _write_outputs(out: Path, result: RunResult, boxes: pl.DataFrame, inputs: _Inputs, splits: tuple[Split, Split],
                   s: Settings, t_start: float, fingerprints: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write every output of a run (the Ultralytics val checks need the written checkpoint).

    Everything is written into a staging folder inside ``out`` and moved into place at the end,
    file by file with atomic renames: a run that fails or is interrupted leaves the previous
    run's files as they were, never a mix of old and new. ``result`` gets its Ultralytics val
    checks and its run time.
    """
    from det_calib.fold import write_calibrated_checkpoint
    from det_calib.reuse import run_fingerprints, write_run_boxes

    ev = splits[1]
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".det_calib-staging-", dir=out))
    try:
        write_run_boxes(boxes, stage / "boxes.parquet", fingerprints or run_fingerprints(inputs, splits, s))
        write_calibrated_checkpoint(
            inputs.model,
            stage / "calibrated.pt",
            result.temperatures,
            metadata={"iou_match": s.iou, "fit_split": result.settings.fit_split, "data": result.data},
        )
        if s.run_val and s.boxes:  # reusing boxes is for trying settings in seconds: no forward pass
            for h in inputs.heads:
                result.results[h] = _replace(result.results[h], ultralytics_val=_val_not_run(
                    ev.name, f"boxes reused from {s.boxes}; run calibrate without `boxes` to verify with val"))
        elif s.run_val:
            checks = _ultralytics_checks(inputs, stage / "calibrated.pt", ev, result.temperatures, s)
            for h, check in checks.items():
                result.results[h] = _replace(result.results[h], ultralytics_val=check)
        result.seconds = round(time.time() - t_start, 1)
        result.write(stage / "calibration.json")
        write_summary_text(stage, result)
        if s.report:
            from det_calib.report import write_report

            write_report(stage, shown_dir=out)
        return _move_into_place(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _move_into_place(stage: Path, out: Path) -> dict[str, Path]:
    """Move every file of ``stage`` to the same place under ``out`` (atomic renames, same disk)."""
    names = {"boxes.parquet": "boxes", "calibrated.pt": "checkpoint", "calibration.json": "calibration",
             "summary.txt": "summary", "report.html": "html", "report.md": "md"}
    files: dict[str, Path] = {}
    for src in sorted(p for p in stage.rglob("*") if p.is_file()):
        rel = src.relative_to(stage)
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        files[names.get(str(rel), str(rel))] = dst
    return files


def _val_not_run(split: str, note: str) -> ValCheck:
    return ValCheck(split=split, note=f"not run: {note}")


def _ultralytics_checks(inputs: _Inputs, ckpt: Path, ev: Split, temps: dict[str, float], s: Settings
                        ) -> dict[str, ValCheck]:
    """Ultralytics val of the original and the calibrated checkpoint, per head."""
    if s.coco_gt:
        return {h: _val_not_run(ev.name, "Ultralytics val reads YOLO txt labels, not the --coco-gt file")
                for h in inputs.heads}
    from det_calib.verify import ultralytics_val

    results: dict[str, ValCheck] = {}
    with tempfile.TemporaryDirectory(prefix="det_calib_eval_") as tmp:
        yml = write_split_yaml(inputs.ds, ev, Path(tmp))
        for head in inputs.heads:
            # val's own default batch: the check is plain Ultralytics val (its letterbox and batching)
            kw = dict(split="val", head=head, imgsz=inputs.imgsz, batch=VAL_BATCH, device=s.device)
            log.info("Ultralytics val (%s head): original, calibrated at the equivalent floor", head)
            try:
                results[head] = _val_check(inputs.model, ckpt, yml, ev.name, temps[head], s, kw, ultralytics_val)
            except Exception as e:  # val needs YOLO txt labels; with COCO JSON GT it may not run
                log.warning("Ultralytics val skipped for %s head: %s", head, e)
                results[head] = _val_not_run(ev.name, str(e))
    return results


def _val_check(model: Path, ckpt: Path, yml: Path, split: str, t: float, s: Settings, kw: dict[str, Any],
               ultralytics_val: Any) -> ValCheck:
    from det_calib.thresholds import equivalent_threshold

    r0 = ultralytics_val(model, yml, conf=s.conf_floor, **kw)
    floor = equivalent_threshold(s.conf_floor, t) if s.conf_floor > 0 else 0.0
    r2 = ultralytics_val(ckpt, yml, conf=floor, **kw)
    same = math.isclose(r0["map50_95"], r2["map50_95"], abs_tol=1e-6) and math.isclose(
        r0["map50"], r2["map50"], abs_tol=1e-6
    )
    direction = "below" if t < 1 else "above"
    note = (
        f"At the equivalent floor {floor:.6g} the candidate set of the calibrated checkpoint is the original "
        f"one: mAP {'identical' if same else 'differs'} ({r0['map50_95']:.4f} vs {r2['map50_95']:.4f}). "
        f"At val's own floor {s.conf_floor}, T={t:.3f} would move some low-score boxes {direction} it "
        f"({'fewer' if t < 1 else 'more'} candidates, mAP can differ slightly); that run is not repeated here."
    )
    if not same:
        note += " Differences this small come from float32 ties reordering equal-score boxes."
    return ValCheck(split=split, original=ValMap(**r0), calibrated=None,
                    calibrated_equivalent_floor=ValMap(**r2), identical_at_equivalent_floor=same, note=note)




def _f(x: float | None, fmt: str) -> str:
    """Format a number; None/nan (JSON null) as n/a."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def summary_text(result: RunResult | dict[str, Any]) -> str:
    """A short plain-text summary of a run (what the CLI prints)."""
    r = result if isinstance(result, RunResult) else RunResult.from_dict(result)
    st = r.settings
    lines = [f"model {r.model}", f"data  {r.data}  (fit: {st.fit_split}, eval: {st.eval_split})"]
    for head in r.heads:
        h = r.head(head)
        t, e = h.temperature, h.eval or EvalResult()
        lines.append(
            f"[{head}] T = {_f(t, '.4f')} (raw scores {temperature_verdict(t, long=True)}); "
            f"ECE({st.ece_bins} bins, IoU {st.iou_match}) {_f(e.before.ece, '.4f')} -> {_f(e.after.ece, '.4f')}; "
            f"NLL {_f(e.before.nll, '.4f')} -> {_f(e.after.nll, '.4f')}"
        )
        lines.append(
            f"[{head}] COCO mAP50-95 {_f(e.map50_95_before, '.4f')} -> {_f(e.map50_95_after, '.4f')}, "
            f"mAP50 {_f(e.map50_before, '.4f')} -> {_f(e.map50_after, '.4f')} "
            f"({'identical' if e.map_identical else 'DIFFERENT'})"
        )
        uv = h.ultralytics_val
        if uv is not None and uv.ran:
            lines.append(
                f"[{head}] Ultralytics val mAP50-95 original {_f(uv.original.map50_95, '.4f')}, calibrated "
                f"at equivalent floor {_f(uv.calibrated_equivalent_floor.map50_95, '.4f')}"
            )
        for sh in h.threshold_shift:
            lines.append(
                f"[{head}] at conf {sh.conf}: kept {sh.kept_before} -> {sh.kept_after} "
                f"(+{sh.added} of which {sh.added_correct} correct, -{sh.removed} of which "
                f"{sh.removed_correct} correct); "
                f"precision {_f(sh.precision_before, '.3f')} -> {_f(sh.precision_after, '.3f')}, "
                f"recall {_f(sh.recall_before, '.3f')} -> {_f(sh.recall_after, '.3f')}; raw {sh.conf} = calibrated "
                f"{_f(sh.equivalent_conf, '.4f')}"
            )
    return "\n".join(lines)


def write_summary_text(out: Path, result: RunResult) -> Path:
    """Write ``summary.txt`` into the output folder."""
    return write_text(Path(out) / "summary.txt", summary_text(result) + "\n")

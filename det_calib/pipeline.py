"""The main job: capture, match, fit, evaluate, verify, shift, fold, report.

:func:`calibrate` runs every step and writes the output folder; each step is also a public
function of its own module, for notebooks and other tools:

- :func:`det_calib.capture.capture` — boxes and raw logits through Ultralytics' predictor
- :func:`det_calib.matching.match_table` — correct/incorrect by one-to-one IoU matching
- :func:`det_calib.calibrators.fit_temperature` — the NLL-optimal temperature
- :mod:`det_calib.metrics` — ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, intervals
- :func:`det_calib.verify.coco_map`, :func:`det_calib.verify.ultralytics_val` — mAP unchanged
- :func:`det_calib.thresholds.threshold_shift` — the kept set at conf 0.25
- :func:`det_calib.fold.write_calibrated_checkpoint` — T folded into the head
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from det_calib import metrics
from det_calib.boxes import validate_boxes, write_boxes
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
from det_calib.io import (
    check_output_dir,
    read_manifest,
    staged_output,
    write_json,
    write_text,
)
from det_calib.matching import match_table
from det_calib.thresholds import threshold_shift

log = logging.getLogger(__name__)

HeadChoice = Literal["auto", "nms", "e2e", "both"]
DECE_BINS = (8, 3, 3, 3, 3)
"""D-ECE bins: confidence, then normalised centre x, centre y, width, height."""


@dataclass
class Settings:
    """Every option of a calibration run (recorded in calibration.json)."""

    fit_split: str | None = None
    eval_split: str | None = None
    head: HeadChoice = "auto"
    iou: float = 0.5
    loc_iou: float = 0.1
    conf: tuple[float, ...] = (0.25,)
    fit_min_conf: float = 0.0
    conf_floor: float = 0.001
    nms_iou: float = 0.7
    max_det: int = 300
    imgsz: int | None = None
    batch: int = 16
    device: str | None = None
    coco_gt: str | None = None
    ece_bins: int = 15
    laece_bins: int = 25
    min_class_boxes: int = 50
    n_boot: int = 1000
    seed: int = 0
    run_val: bool = True
    report: bool = True
    limit: int | None = None
    progress: bool = True

    def validate(self) -> None:
        if not 0 < self.iou <= 1:
            raise InputError(f"Expected `--iou` in (0, 1], but got {self.iou}")
        if not 0 <= self.loc_iou <= 1:
            raise InputError(f"Expected `loc_iou` in [0, 1], but got {self.loc_iou}")
        for c in self.conf:
            if not 0 < c < 1:
                raise InputError(f"Expected every `--conf` in (0, 1), but got {c}")
        if not 0 <= self.fit_min_conf < 1:
            raise InputError(f"Expected `--fit-min-conf` in [0, 1), but got {self.fit_min_conf}")
        if not 0 <= self.conf_floor < min(self.conf):
            raise InputError(f"Expected the conf floor in [0, {min(self.conf)}), but got {self.conf_floor}")
        if self.head not in ("auto", "nms", "e2e", "both"):
            raise InputError(f"Expected `--head` to be one of nms, e2e, both, auto, but got {self.head!r}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"Expected `--limit` to be an integer larger than 0, but got {self.limit}")
        for name in ("batch", "max_det", "ece_bins", "laece_bins", "n_boot"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"Expected `{name}` to be an integer larger than 0, but got {getattr(self, name)}")


@dataclass
class CalibrationRun:
    """What :func:`calibrate` produced.

    Attributes:
        out_dir: Output folder.
        summary: The content of ``calibration.json``.
        boxes: The box table (both splits, every head) as written to ``boxes.parquet``.
        checkpoint: Path of ``calibrated.pt``.
        files: Written files by name.
    """

    out_dir: Path
    summary: dict[str, Any]
    boxes: pl.DataFrame
    checkpoint: Path | None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def temperature(self) -> dict[str, float]:
        return self.summary["temperature"]


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
    raise InputError(f"{ds.yaml_path} has none of the splits calib, val, test; name them with --fit-split/--eval-split")


def match_boxes(boxes: pl.DataFrame, split: Split, *, iou: float, loc_iou: float) -> pl.DataFrame:
    """Add ``correct``, ``iou``, ``ignore`` (at ``iou``) and ``loc_iou`` (at ``loc_iou``) to one head's boxes.

    Inverted boxes (x2 < x1 or y2 < y1, which an immature one-to-one head can output) are matched
    as zero-area boxes: they overlap nothing and count as incorrect. Their coordinates are kept.
    """
    gt = split.gt
    inverted = (boxes["x2"] < boxes["x1"]) | (boxes["y2"] < boxes["y1"])
    if inverted.any():
        log.warning("%d inverted box(es) (x2 < x1 or y2 < y1) on `%s`: counted as incorrect", inverted.sum(), split.name)
    geom = boxes.with_columns(pl.max_horizontal("x1", "x2").alias("x2"), pl.max_horizontal("y1", "y2").alias("y2"))
    at_iou = match_table(geom, gt, iou_threshold=iou)
    loc = match_table(geom, gt, iou_threshold=loc_iou)
    loc_target = np.where(loc["correct"].to_numpy(), loc["iou"].to_numpy(), 0.0)
    return boxes.with_columns(
        at_iou["correct"], at_iou["iou"], at_iou["ignore"], pl.Series("loc_iou", loc_target, dtype=pl.Float64)
    )


def _sigmoid(z: np.ndarray, t: float) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64) / t))


def evaluate_head(
    boxes: pl.DataFrame, split: Split, temperature: float, s: Settings, names: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Calibration metrics, mAP check and threshold shift of one head on the eval split.

    Returns:
        ``(eval_summary, threshold_shift_entries, per_class_entries)``.
    """
    from det_calib.verify import coco_map

    keep = ~boxes["ignore"].to_numpy()
    b = boxes.filter(pl.Series(keep))
    z = b["logit"].to_numpy()
    y = b["correct"].to_numpy()
    cls = b["cls"].to_numpy()
    img = b["image_id"].to_numpy()
    p0 = b["conf"].to_numpy()
    p1 = _sigmoid(z, temperature)
    loc = b["loc_iou"].to_numpy()
    feats = metrics.box_features(*(b[c].to_numpy() for c in ("x1", "y1", "x2", "y2", "img_w", "img_h")))
    gt_cls = split.gt.filter(~pl.col("crowd"))["cls"].to_numpy()
    n_gt = len(gt_cls)
    boot = dict(n_boot=s.n_boot, seed=s.seed)

    ece_fn = functools.partial(metrics.ece, n_bins=s.ece_bins)  # keeps `weights`: fast bootstrap path
    laece_fn = functools.partial(metrics.laece, n_bins=s.laece_bins)

    ev: dict[str, Any] = {
        "split": split.name,
        "images": len(split.images),
        "boxes": int(len(y)),
        "correct": int(y.sum()),
        "ignored": int((~keep).sum()),
        "n_gt": int(n_gt),
        "corrupt_images": len(split.corrupt),
    }
    for tag, p in (("before", p0), ("after", p1)):
        ev[f"ece_{tag}"] = metrics.ece(p, y, n_bins=s.ece_bins)
        ev[f"ece_{tag}_ci"] = list(metrics.bootstrap_ci(ece_fn, img, p, y, **boot))
        ev[f"ace_{tag}"] = metrics.ace(p, y, n_bins=s.ece_bins)
        ev[f"mce_{tag}"] = metrics.mce(p, y, n_bins=s.ece_bins)
        ev[f"nll_{tag}"] = metrics.nll_logits(z, y, temperature=1.0 if tag == "before" else temperature)
        ev[f"brier_{tag}"] = metrics.brier(p, y)
        ev[f"dece_{tag}"] = metrics.dece(p, y, feats, n_bins=list(DECE_BINS))
        ev[f"laece_{tag}"] = metrics.laece(p, loc, cls, n_bins=s.laece_bins)
        ev[f"laece_{tag}_ci"] = list(metrics.bootstrap_ci(laece_fn, img, p, loc, cls, **boot))
        ev[f"laace_{tag}"] = metrics.laace(p, loc, cls)
    ev["thresholded"] = []
    for t in s.conf:
        kb, ka = p0 > t, p1 > t
        ev["thresholded"].append(
            {
                "conf": t,
                "boxes_before": int(kb.sum()),
                "ece_before": metrics.ece(p0[kb], y[kb], n_bins=s.ece_bins) if kb.any() else None,
                "boxes_after": int(ka.sum()),
                "ece_after": metrics.ece(p1[ka], y[ka], n_bins=s.ece_bins) if ka.any() else None,
            }
        )
    # mAP: the same boxes ranked by raw and by calibrated scores (crowd-matched boxes included:
    # COCOeval ignores them itself). Both from the logits in float64: the float32 confs Ultralytics
    # reports have rounding ties that the calibrated float64 scores break, which could reorder
    # equal-score boxes and blur the comparison.
    all_z = boxes["logit"].to_numpy()
    m0 = coco_map(boxes, split.gt, split.sizes, _sigmoid(all_z, 1.0), max_dets=s.max_det)
    m1 = coco_map(boxes, split.gt, split.sizes, _sigmoid(all_z, temperature), max_dets=s.max_det)
    ev.update(
        map50_95_before=m0["map50_95"],
        map50_95_after=m1["map50_95"],
        map50_before=m0["map50"],
        map50_after=m1["map50"],
        map_identical=m0 == m1,
    )

    shifts = [
        threshold_shift(p0, p1, y, conf=t, n_gt=n_gt, temperature=temperature).to_dict() for t in s.conf
    ]
    per_class = []
    for c in range(len(names)):
        m = cls == c
        n_gt_c = int((gt_cls == c).sum())
        if not m.any() and n_gt_c == 0:
            continue
        entry: dict[str, Any] = {
            "cls": c,
            "name": names[c],
            "boxes": int(m.sum()),
            "correct": int(y[m].sum()),
            "n_gt": n_gt_c,
            "few_boxes": bool(m.sum() < s.min_class_boxes),
        }
        for tag, p in (("before", p0), ("after", p1)):
            if m.any():
                entry[f"ece_{tag}"] = metrics.ece(p[m], y[m], n_bins=s.ece_bins)
                entry[f"ece_{tag}_ci"] = list(metrics.bootstrap_ci(ece_fn, img[m], p[m], y[m], **boot))
                entry[f"laece_{tag}"] = metrics.laece(p[m], loc[m], cls[m], n_bins=s.laece_bins)
            else:
                entry[f"ece_{tag}"] = entry[f"laece_{tag}"] = None
                entry[f"ece_{tag}_ci"] = None
        entry["threshold_shift"] = [
            threshold_shift(p0[m], p1[m], y[m], conf=t, n_gt=n_gt_c, temperature=temperature).to_dict()
            for t in s.conf
        ]
        per_class.append(entry)
    return ev, shifts, per_class


def fit_boxes(boxes: pl.DataFrame, s: Settings) -> pl.DataFrame:
    """The boxes a temperature is fitted on: not crowd-matched, raw conf >= ``fit_min_conf``."""
    return boxes.filter(~pl.col("ignore") & (pl.col("conf") >= s.fit_min_conf))


def fit_head(boxes: pl.DataFrame, s: Settings) -> TemperatureScaler:
    """Fit the temperature of one head on its fit-split boxes (see :func:`fit_boxes`)."""
    b = fit_boxes(boxes, s)
    return TemperatureScaler(kind="sigmoid").fit(b["logit"].to_numpy(), b["correct"].to_numpy())


# ---------------------------------------------------------------------------------------- job
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
    from det_calib.capture import available_heads, capture, default_imgsz, load_detector
    from det_calib.fold import write_calibrated_checkpoint

    s = settings or Settings(**options)
    if settings is not None and options:
        raise InputError("pass either `settings` or keyword options, not both")
    s.conf = tuple(float(c) for c in (s.conf if isinstance(s.conf, Sequence) else (s.conf,)))
    s.validate()
    t_start = time.time()
    if (model is None) != (data is None):
        raise InputError("give both --model and --data, or neither (to run on the embedded demo model and data)")
    if model is None:
        from det_calib import demo

        model, data = demo.demo_model(), demo.demo_data_yaml()
    model, data = Path(model), Path(data)
    out = Path(out)
    check_output_dir(out)  # before the long steps: refuse a folder det_calib does not own

    yolo = load_detector(model)
    ds = load_data_yaml(data)
    check_class_names([yolo.names[i] for i in sorted(yolo.names)], ds.names, data_path=data)
    have = available_heads(yolo)
    heads = {"auto": have, "both": ["nms", "e2e"], "nms": ["nms"], "e2e": ["e2e"]}[s.head]
    missing = [h for h in heads if h not in have]
    if missing:
        raise InputError(f"the model has no `{missing[0]}` head (it has: {', '.join(have)}); choose --head {have[0]}")
    imgsz = s.imgsz or default_imgsz(yolo)

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

    tables, temps, fits, evals, shifts, per_class = [], {}, {}, {}, {}, {}
    for head in heads:
        head_tables = {}
        for sp in (fit, ev):
            log.info("capturing %s boxes on `%s` (%d images)", head, sp.name, len(sp.images))
            raw = capture(
                yolo,
                sp.images,
                head=head,
                conf=s.conf_floor,
                iou=s.nms_iou,
                max_det=s.max_det,
                imgsz=imgsz,
                batch=s.batch,
                device=s.device,
                split=sp.name,
                image_names=sp.image_names(),
                progress=s.progress,
            )
            if raw.height == 0:
                raise InputError(
                    f"no boxes captured on split `{sp.name}` with the {head} head above conf {s.conf_floor}: "
                    "is this the right model for this data?"
                )
            head_tables[sp.name] = match_boxes(raw, sp, iou=s.iou, loc_iou=s.loc_iou)
        fb, eb = head_tables[fit.name], head_tables[ev.name]
        scaler = fit_head(fb, s)
        t = float(scaler.temperature_)
        temps[head] = t
        used = fit_boxes(fb, s)
        zf, yf = used["logit"].to_numpy(), used["correct"].to_numpy()
        pf0, pf1 = used["conf"].to_numpy(), _sigmoid(zf, t)
        fits[head] = {
            "split": fit.name,
            "images": len(fit.images),
            "boxes": used.height,
            "correct": int(yf.sum()),
            "nll_before": float(scaler.nll_before_),
            "nll_after": float(scaler.nll_after_),
            # in-sample: the fit split's own figures, for comparison with the eval split's
            "ece_before": metrics.ece(pf0, yf, n_bins=s.ece_bins),
            "ece_after": metrics.ece(pf1, yf, n_bins=s.ece_bins),
            "brier_before": metrics.brier(pf0, yf),
            "brier_after": metrics.brier(pf1, yf),
            "iterations": int(scaler.n_iter_),
        }
        log.info("%s head: T = %.4f (NLL %.4f -> %.4f on %s)", head, t, scaler.nll_before_, scaler.nll_after_, fit.name)
        evals[head], shifts[head], per_class[head] = evaluate_head(eb, ev, t, s, ds.names)
        tables += [fb, eb]

    boxes = validate_boxes(pl.concat(tables, how="vertical"))
    summary: dict[str, Any] = {
        "det_calib_version": _version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": str(model.resolve()),
        "data": str(data.resolve()),
        "class_names": list(ds.names),
        "heads": list(heads),
        "temperature": temps,
        "iou_match": s.iou,
        "loc_iou_match": s.loc_iou,
        "fit_min_conf": s.fit_min_conf,
        "conf_floor": s.conf_floor,
        "nms_iou": s.nms_iou,
        "max_det": s.max_det,
        "imgsz": imgsz,
        "conf_thresholds": list(s.conf),
        "ece_bins": s.ece_bins,
        "laece_bins": s.laece_bins,
        "dece_bins": list(DECE_BINS),
        "min_class_boxes": s.min_class_boxes,
        "bootstrap": {"n_boot": s.n_boot, "seed": s.seed, "level": 0.95, "unit": "image"},
        "splits": {"fit": fit.name, "eval": ev.name},
        "coco_gt": s.coco_gt,
        "fit": fits,
        "eval": evals,
        "threshold_shift": shifts,
        "per_class": per_class,
        "ultralytics_val": {},
        "corrupt_images": sorted(set(fit.corrupt) | set(ev.corrupt)),
    }
    # Everything is written into a staging folder that replaces `out` in one swap when the run
    # has succeeded (det_calib.io.staged_output): a run that fails or is interrupted leaves the
    # previous run's folder as it was, never a mix of old and new.
    with staged_output(out) as stage:
        write_boxes(boxes, stage / "boxes.parquet")
        write_calibrated_checkpoint(
            model,
            stage / "calibrated.pt",
            temps,
            metadata={"iou_match": s.iou, "fit_split": fit.name, "data": str(data.resolve())},
        )
        if s.run_val:
            if s.coco_gt:
                summary["ultralytics_val"] = {
                    h: {"split": ev.name, "original": None, "calibrated": None, "calibrated_equivalent_floor": None,
                        "note": "not run: Ultralytics val reads YOLO txt labels, not the --coco-gt file"}
                    for h in heads
                }
            else:
                summary["ultralytics_val"] = _ultralytics_checks(model, stage / "calibrated.pt", ds, ev, heads, temps, s, imgsz)
        summary["seconds"] = round(time.time() - t_start, 1)
        write_json(stage / "calibration.json", summary)
        write_summary_text(stage, summary)
        if s.report:
            from det_calib.report import write_report

            write_report(stage, shown_dir=out)
    files = _output_files(out)
    ckpt = out / "calibrated.pt"
    return CalibrationRun(out_dir=out, summary=summary, boxes=boxes, checkpoint=ckpt, files=files)


def _output_files(out: Path) -> dict[str, Path]:
    """The files the run wrote in ``out``, keyed by role (``"checkpoint"``, ...) or relative path."""
    names = {"boxes.parquet": "boxes", "calibrated.pt": "checkpoint", "calibration.json": "calibration",
             "summary.txt": "summary", "report.html": "html", "report.md": "md"}
    return {names.get(rel, rel): out / rel for rel in read_manifest(out)}


def _ultralytics_checks(model, ckpt, ds, ev, heads, temps, s: Settings, imgsz) -> dict[str, Any]:
    from det_calib.thresholds import equivalent_threshold
    from det_calib.verify import ultralytics_val

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="det_calib_eval_") as tmp:
        yml = write_split_yaml(ds, ev, Path(tmp))
        for head in heads:
            t = temps[head]
            kw = dict(split="val", head=head, imgsz=imgsz, batch=s.batch, device=s.device)
            log.info("Ultralytics val (%s head): original, calibrated, calibrated at the equivalent floor", head)
            try:
                r0 = ultralytics_val(model, yml, conf=s.conf_floor, **kw)
                r1 = ultralytics_val(ckpt, yml, conf=s.conf_floor, **kw)
                floor = equivalent_threshold(s.conf_floor, t) if s.conf_floor > 0 else 0.0
                r2 = ultralytics_val(ckpt, yml, conf=floor, **kw)
            except Exception as e:  # val needs YOLO txt labels; with COCO JSON GT it may not run
                log.warning("Ultralytics val skipped for %s head: %s", head, e)
                results[head] = {"split": ev.name, "original": None, "calibrated": None,
                                 "calibrated_equivalent_floor": None, "note": f"not run: {e}"}
                continue
            same = math.isclose(r0["map50_95"], r2["map50_95"], abs_tol=1e-6) and math.isclose(
                r0["map50"], r2["map50"], abs_tol=1e-6
            )
            direction = "below" if t < 1 else "above"
            note = (
                f"At val's conf floor {s.conf_floor}, T={t:.3f} moves some low-score boxes {direction} the floor "
                f"({'fewer' if t < 1 else 'more'} candidates), so mAP can differ slightly "
                f"({r0['map50_95']:.4f} -> {r1['map50_95']:.4f}). At the equivalent floor {floor:.6g} the candidate "
                f"set is the original one: mAP {'identical' if same else 'differs'} "
                f"({r0['map50_95']:.4f} vs {r2['map50_95']:.4f})."
            )
            if not same:
                note += " Differences this small come from float32 ties reordering equal-score boxes."
            results[head] = {
                "split": ev.name,
                "original": r0,
                "calibrated": r1,
                "calibrated_equivalent_floor": r2,
                "identical_at_equivalent_floor": same,
                "note": note,
            }
    return results


def _version() -> str:
    from det_calib import __version__

    return __version__


def _f(x: float | None, fmt: str) -> str:
    """Format a number; None/nan (JSON null) as n/a."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def summary_text(summary: dict[str, Any]) -> str:
    """A short plain-text summary of a run (what the CLI prints)."""
    lines = [f"model {summary['model']}", f"data  {summary['data']}  (fit: {summary['splits']['fit']}, eval: {summary['splits']['eval']})"]
    for head in summary["heads"]:
        t = summary["temperature"][head]
        e = summary["eval"][head]
        word = "too extreme: too close to 0 and 1" if t > 1 else "too timid: too close to 0.5"
        lines.append(
            f"[{head}] T = {_f(t, '.4f')} (raw scores {word}); ECE({summary['ece_bins']} bins, IoU {summary['iou_match']}) "
            f"{_f(e['ece_before'], '.4f')} -> {_f(e['ece_after'], '.4f')}; NLL {_f(e['nll_before'], '.4f')} -> {_f(e['nll_after'], '.4f')}"
        )
        lines.append(
            f"[{head}] COCO mAP50-95 {_f(e['map50_95_before'], '.4f')} -> {_f(e['map50_95_after'], '.4f')}, "
            f"mAP50 {_f(e['map50_before'], '.4f')} -> {_f(e['map50_after'], '.4f')} ({'identical' if e['map_identical'] else 'DIFFERENT'})"
        )
        uv = (summary.get("ultralytics_val") or {}).get(head)
        if uv and uv.get("original"):
            lines.append(
                f"[{head}] Ultralytics val mAP50-95 original {_f(uv['original']['map50_95'], '.4f')}, calibrated "
                f"{_f(uv['calibrated']['map50_95'], '.4f')}, at equivalent floor {_f(uv['calibrated_equivalent_floor']['map50_95'], '.4f')}"
            )
        for sh in summary["threshold_shift"][head]:
            lines.append(
                f"[{head}] at conf {sh['conf']}: kept {sh['kept_before']} -> {sh['kept_after']} "
                f"(+{sh['added']} of which {sh['added_correct']} correct, -{sh['removed']} of which "
                f"{sh['removed_correct']} correct); precision {_f(sh['precision_before'], '.3f')} -> {_f(sh['precision_after'], '.3f')}, "
                f"recall {_f(sh['recall_before'], '.3f')} -> {_f(sh['recall_after'], '.3f')}; raw {sh['conf']} = calibrated "
                f"{_f(sh['equivalent_conf'], '.4f')}"
            )
    return "\n".join(lines)


def write_summary_text(out: Path, summary: dict[str, Any]) -> Path:
    """Write ``summary.txt`` into the output folder."""
    return write_text(Path(out) / "summary.txt", summary_text(summary) + "\n")

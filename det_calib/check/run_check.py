"""``det-calib check``: does a run's calibration, and the detector behind it, hold on new images?

With labelled images (``data``): the run's model captures them with the run's own capture
settings, the run's recorded calibrator is applied to the logits (for the maps a run deploys by
default, exactly what ``calibrated.pt`` outputs), boxes are matched with the run's IoU, and at
the run's lowest conf threshold two questions get a verdict each:

- **calibration**: calibration in the large of the kept boxes (:func:`~.drift_tests.calibration_in_the_large`),
  a Hosmer–Lemeshow test over equal-mass bins of them (:func:`det_calib.check.drift_tests.hosmer_lemeshow`) and
  the same calibration in the large per class with enough kept boxes; Bonferroni over the family.
  ``holds``, ``drifted``, or ``not enough boxes to tell`` (fewer than ``min_boxes`` kept).
- **detection quality**: precision and recall of the kept boxes against the run's eval split,
  each a two-ratio z-test with image-clustered variances (:func:`det_calib.check.drift_tests.ratio_test`).
  ``holds`` or ``changed``.

The kept-set ECE and LaECE_0 with their intervals and the ECE's sampling floor, mAP, and every
figure per class are reported beside the run's own eval figures.

With unlabelled images (``images``): the kept boxes' score distribution, boxes kept per image and
class mix against the run's eval split, by image-level permutation tests
(:func:`det_calib.check.drift_tests.shift_tests`). Without labels a shift of the output can be detected, not
a miscalibration.

:func:`check_run` does the job and writes ``check.json``, ``check.html``/``check.md`` and the
new boxes into one output folder, swapped in whole (:func:`det_calib.io.staged_output`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import filecmp
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.capture.exported import is_export, load_export
from det_calib.capture.predictor import available_heads, load_detector
from det_calib.check.check_record import (
    BOXES_FILE,
    CHANGED,
    CHECK_FILE,
    DRIFTED,
    HOLDS,
    NO_SHIFT,
    SHIFTED,
    TOO_FEW,
    TOO_FEW_IMAGES,
    CheckResult,
    HeadCheck,
    HeadShift,
)
from det_calib.check.verdicts import (
    exit_code,
    labelled_checks,
    shift_check,
    worst,
)
from det_calib.data.box_table import write_boxes
from det_calib.data.box_view import BoxView, with_calibrated
from det_calib.data.ground_truth import (
    Split,
    check_class_names,
    list_images,
    load_data_yaml,
)
from det_calib.ensemble.ensemble_model import load_ensemble
from det_calib.errors import InputError
from det_calib.evaluation.by_size import size_figures
from det_calib.evaluation.map_check import coco_maps
from det_calib.evaluation.operating import OperatingPoints
from det_calib.io import check_output_dir
from det_calib.job import clock
from det_calib.job.capturing import BoxSource
from det_calib.job.detections import CheckDetections
from det_calib.job.detections_file import DetectionsRead
from det_calib.job.inputs import Inputs
from det_calib.job.settings import Settings
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_folder import load_run
from det_calib.record.run_result import package_version
from det_calib.tasks import get_task
from det_calib.tasks.match_rule import match_split
from det_calib.tasks.task_splits import load_task_split

_log = logging.getLogger(__name__)

if TYPE_CHECKING:  # imported where the job runs (torch and Ultralytics come with them)
    from det_calib.job.inputs import Inputs
    from det_calib.job.settings import Settings
    from det_calib.record.run_folder import Run

__all__ = ["CHECK_FILE", "CheckResult", "check_run", "new_boxes"]


@dataclass
class _Job:
    """What every check needs: the run read back, its settings as capture/eval settings, the detector."""

    run: Run
    settings: Settings
    inputs: Inputs
    calibrators: dict[str, LogitCalibrator]
    conf: float
    ensemble: Any = (
        None  # det_calib.ensemble.ensemble_model.EnsembleModel of an ensemble run, else None
    )
    detections: CheckDetections | None = None
    """``check --detections``: the file of the new images' detections (no model is run)."""
    read: DetectionsRead | None = None  # what was read of it

    @property
    def model_text(self) -> str:
        """The detector checked: its file, the file of detections, or the run's members for an ensemble."""
        if self.detections is not None:
            return f"detections:{self.detections.source.resolve()}"
        return (
            self.run.result.model if self.ensemble is not None else str(self.inputs.model.resolve())
        )


def _job(
    run_dir: Path,
    *,
    model: str | Path | None,
    data: _Dataset | None,
    heads: list[str] | None,
    limit: int | None,
    device: str | None,
    batch: int | None,
    boxes: str | Path | None,
    progress: bool,
    n_boot: int | None,
    detections: str | Path | None = None,
) -> _Job:

    _check_sources(model=model, boxes=boxes, detections=detections)
    if not (run_dir / "calibration.json").is_file() and run_dir.is_dir():
        raise InputError(
            f"{run_dir} is not a run folder of `det-calib calibrate` (no calibration.json)"
        )
    run = load_run(run_dir)
    st = run.settings
    use = list(heads) if heads else list(run.heads)
    for h in use:
        if h not in run.heads:
            raise InputError(
                f"the run in {run_dir} has no `{h}` head (it has: {', '.join(run.heads)})"
            )
        if run.head(h).calibrator is None:
            raise InputError(
                f"the run in {run_dir} has no calibrator for the {h} head: nothing to check"
            )
        if run.head(h).eval is None or not st.eval_split:
            raise InputError(
                f"the run in {run_dir} has no eval figures for the {h} head to compare against"
            )
    calibrators = {h: calibrator_of(run.head(h).calibrator) for h in use}
    head = use[0] if len(use) == 1 else "both"
    s = Settings.from_recorded(
        st,
        head=head,
        n_boot=n_boot or st.bootstrap.n_boot,
        limit=limit,
        device=device,
        batch=batch,
        boxes=None if boxes is None else str(boxes),
        progress=progress,
        coco_gt=None,
    )
    if "ensemble" in run.result.sections:
        if detections is not None:
            raise InputError(
                f"the run in {run_dir} is an ensemble: its members are its detector, so "
                "`detections` "
                "cannot replace them"
            )
        return _ensemble_job(run_dir, run, s, use, calibrators, model=model, data=data, boxes=boxes)
    if detections is not None or model is None:
        job = _detections_job(run_dir, run, s, use, calibrators, data=data, detections=detections)
        if job is not None:
            return job
    model_path = Path(model) if model is not None else Path(run.result.model)
    if not model_path.exists():
        raise InputError(
            f"model not found: {model_path}"
            + ("" if model is not None else " (the run's model; give another with `model`)")
        )
    exported = is_export(
        model_path
    )  # an ONNX / OpenVINO export: det_calib.capture.exported reads and runs it
    yolo = load_export(model_path) if exported else load_detector(model_path)
    names = [yolo.names[i] for i in sorted(yolo.names)]
    check_class_names(names, run.class_names, data_path=run_dir / "calibration.json")
    if data is not None:
        check_class_names(run.class_names, data.names, data_path=data.yaml_path)
    missing = [h for h in use if h not in (yolo.heads if exported else available_heads(yolo))]
    if missing:
        raise InputError(f"the model {model_path} has no `{missing[0]}` head")
    inputs = Inputs(
        model_path,
        data.yaml_path if data is not None else Path(),
        yolo,
        data,
        use,
        st.imgsz or s.imgsz or 640,
        matching=run.result.matching,
    )  # new boxes labelled as the run's
    return _Job(run, s, inputs, calibrators, float(min(st.conf_thresholds)))


def _detections_job(
    run_dir: Path,
    run: Any,
    s: Any,
    use: list[str],
    calibrators: dict[str, LogitCalibrator],
    *,
    data: _Dataset | None,
    detections: str | Path | None,
) -> _Job | None:
    """The check of a file of the new images' detections (no model run); None where the run's model
    captures them. A run calibrated from a file has no model: it is checked on a file."""

    source = CheckDetections.of_run(run_dir, run, detections, use, data)
    if source is None:
        return None
    return _Job(
        run,
        s,
        source.inputs,
        calibrators,
        float(min(run.settings.conf_thresholds)),
        detections=source,
    )


def _ensemble_job(
    run_dir: Path,
    run: Any,
    s: Any,
    use: list[str],
    calibrators: dict[str, LogitCalibrator],
    *,
    model: str | Path | None,
    data: _Dataset | None,
    boxes: str | Path | None,
) -> _Job:
    """The check of an ensemble run: its members opened as the run recorded them (each checked
    against its fingerprint), the new images fused as the run fused its own."""

    if model is not None:
        raise InputError(
            f"the run in {run_dir} is an ensemble: its members are its detector, so `model` cannot "
            "replace them"
        )
    if boxes is not None:
        raise InputError(
            f"the run in {run_dir} is an ensemble: `boxes` reuse is not supported for it (its "
            "members "
            "are captured and fused)"
        )
    if data is not None:
        check_class_names(run.class_names, data.names, data_path=data.yaml_path)
    ens = load_ensemble(run_dir, device=s.device, workers=None)  # as calibrate runs the capture
    first = Path(run.result.sections["ensemble"].members[0].path)
    inputs = Inputs(
        first,
        data.yaml_path if data is not None else Path(),
        None,
        data,
        use,
        run.settings.imgsz or s.imgsz or 640,
    )
    return _Job(run, s, inputs, calibrators, float(min(run.settings.conf_thresholds)), ens)


def _eval_split_gt(job: _Job) -> tuple[np.ndarray | None, str | None]:
    """Ground-truth boxes per image of the run's eval split (the run's images, in order), or None
    with the reason when the run's data cannot be read back as it was."""

    r = job.run.result
    ev = r.head(job.inputs.heads[0]).eval
    name = r.settings.eval_split
    load = functools.partial(
        _task_split, job, match="box"
    )  # the boxes alone, read as the run's task reads them
    try:
        whole, half = Split.half_of(name)
        if half is not None:  # one split halved by image (seeded): the same half again
            whole_split = load(load_data_yaml(r.data), whole)
            sp = whole_split.halves(seed=r.settings.bootstrap.seed)[half]
        else:
            sp = load(load_data_yaml(r.data), name, limit=ev.images)
    except (InputError, OSError) as e:
        return None, f"the run's eval split cannot be read back ({e})"
    if len(sp.images) != ev.images or len(sp.gt.filter(~pl.col("crowd"))) != ev.n_gt:
        return None, "the run's eval split has changed since the run"
    g = sp.gt.filter(~pl.col("crowd"))
    return np.bincount(g["image_id"].to_numpy().astype(np.int64), minlength=len(sp.images)).astype(
        float
    ), None


def _seen_by_run(job: _Job, new_images: list[Path]) -> dict[str, int]:
    """How many of the new images are images the run itself fitted or evaluated on, per split of the
    run (a check on them compares the run with itself): the same file, or a copy of it (the same name,
    size and bytes); the splits with none left out, and nothing when the run's data cannot be read
    back. The run's images are those its boxes name, under its split's folders or its data root (as a
    split's image names are written), and of a whole split its first images as the run counted them
    (those without a box too)."""
    r = job.run.result
    try:
        ds = load_data_yaml(r.data)
    except (InputError, OSError):
        return {}
    by_name: dict[str, list[Path]] = {}
    for p in new_images:
        by_name.setdefault(p.name, []).append(p)
    split_of = job.run.boxes.select("split", "image").unique()
    head = r.head(job.inputs.heads[0])
    fit_images = head.fit.images if head.fit is not None else None
    eval_images = head.eval.images if head.eval is not None else None
    counts = {r.settings.fit_split: fit_images, r.settings.eval_split: eval_images}
    out: dict[str, int] = {}
    for name, n_images in counts.items():
        whole, half = Split.half_of(name)
        sources = ds.splits.get(whole, [])
        bases = [b for b in sources if b.is_dir()] + [ds.root]
        names = split_of.filter(pl.col("split") == name)["image"].cast(pl.String).to_list()
        used = [b / n for n in names for b in bases]
        if half is None and sources and n_images:  # the split's first images, boxless ones too
            with contextlib.suppress(InputError, OSError):
                used += list_images(sources, split=whole)[:n_images]
        seen = {new for p in used for new in by_name.get(p.name, ()) if _same_file(p, new)}
        if seen:
            out[name] = len(seen)
    return out


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file, or two of the same size and bytes."""
    try:
        return os.path.samefile(a, b) or (
            a.stat().st_size == b.stat().st_size and filecmp.cmp(a, b, shallow=False)
        )
    except OSError:
        return False


def _note_seen(result: CheckResult, job: _Job, images: list[Path]) -> None:
    """Record in ``result`` (and say) how many of the new images the run itself used."""
    seen = _seen_by_run(job, images)
    if not seen:
        return
    result.seen_images = seen
    where = ", ".join(f"{n} of its split `{name}`" for name, n in seen.items())
    _log.warning(
        "%d of the %d new images are images the run used (%s): on them the check compares the run "
        "with itself; check on images the run never saw",
        sum(seen.values()),
        len(images),
        where,
    )


def _then_boxes(job: _Job, head: str) -> BoxView:
    """The run's own eval boxes of ``head`` under the scores it wrote (its ``calibrated`` column)."""
    view = BoxView.from_boxes(
        job.run.boxes, head=head, split=job.run.settings.eval_split, geometry=False
    )
    return view.scored(job.calibrators[head], recorded=True)


def _labelled_head(
    job: _Job,
    head: str,
    boxes: pl.DataFrame,
    split: Any,
    gt_then: np.ndarray | None,
    *,
    alpha: float,
    min_boxes: int,
) -> HeadCheck:

    s, conf, rec = job.settings, job.conf, job.run.head(head)
    op = OperatingPoints.of_boxes(boxes, split, s)
    scored = op.view.scored(job.calibrators[head], recorded=True)
    operating = op.operating(scored)
    kept, then = scored.kept(conf), _then_boxes(job, head).kept(conf)
    gt = split.gt.filter(~pl.col("crowd"))
    n_img = len(split.images)
    names = list(job.run.class_names)
    ev = rec.eval
    gt_then_cls = (job.run.result.gt_counts or {}).get(job.run.settings.eval_split) or []
    m = (
        coco_maps(
            boxes,
            split.gt,
            split.sizes,
            [boxes["calibrated"].to_numpy().astype(np.float64)],
            max_dets=s.max_det,
            engine=s.map_engine,
        )[0]
        if boxes.height
        else {"map50": 0.0, "map50_95": 0.0}
    )
    lc = labelled_checks(
        kept,
        then,
        conf=conf,
        names=names,
        gt_now=np.bincount(gt["image_id"].to_numpy().astype(np.int64), minlength=n_img)[
            :n_img
        ].astype(float),
        gt_cls_now=gt["cls"].to_numpy(),
        gt_then=gt_then,
        gt_cls_then=gt_then_cls,
        n_gt_then=int(ev.n_gt or 0),
        n_img_then=int(ev.images or 0),
        alpha=alpha,
        min_boxes=min_boxes,
        ece_bins=s.ece_bins,
        image_names=_image_names(boxes),
        maps={
            "map50": m["map50"],
            "map50_then": ev.map50_after,
            "map50_95": m["map50_95"],
            "map50_95_then": ev.map50_95_after,
        },
    )
    return HeadCheck(
        head=head,
        method=rec.calibrator.method,
        split=split.name,
        calibration=lc.calibration,
        detection=lc.detection,
        operating=operating,
        operating_then=list(ev.operating_after),
        per_class=lc.per_class,
        calibration_verdict=lc.calibration_verdict,
        detection_verdict=lc.detection_verdict,
        calibration_line=lc.calibration_line,
        detection_line=lc.detection_line,
        by_size=size_figures(op, scored),
        crowded=lc.crowded,
    )


def _image_names(boxes: pl.DataFrame) -> dict[int, str]:
    """Image id -> the image's file name, from a box table's ``image`` column (ids alone without it)."""
    if "image" not in boxes.columns or not boxes.height:
        return {}
    u = boxes.select("image_id", "image").unique("image_id")
    return {
        int(i): Path(str(n)).name for i, n in zip(u["image_id"].to_list(), u["image"].to_list())
    }


def _capture(job: _Job, split: Any) -> dict[str, pl.DataFrame]:
    """Head -> the raw capture of ``split`` (or the reused boxes), one pass serving every head."""

    if job.detections is not None:
        head = job.inputs.heads[0]  # read inside the check's `figures` stage, as a capture is
        table, job.read = job.detections.boxes(
            split,
            job.run.class_names,
            job.calibrators[head],
            job.run.head(head).calibrator.method,
            job.conf,
        )
        return {head: table}
    if job.ensemble is not None:
        return job.ensemble.fused_boxes(split, job.settings, job.inputs.heads)
    return BoxSource(job.inputs, [split], job.settings).boxes(split)


def _with_calibrated(job: _Job, head: str, raw: pl.DataFrame, split: Any | None) -> pl.DataFrame:
    """The new boxes matched to ``split``'s ground truth by the run's rule (box or mask IoU; None:
    unlabelled, not matched), with the run's deployed conf in ``calibrated``."""

    s = job.settings
    b = (
        match_split(raw, split, job.inputs.matching, iou=s.iou, loc_iou=s.loc_iou)
        if split is not None
        else raw
    )
    return with_calibrated(b, job.calibrators[head])


def _unlabelled_head(
    job: _Job,
    head: str,
    boxes: pl.DataFrame,
    n_img: int,
    *,
    alpha: float,
    n_perm: int,
    min_boxes: int,
) -> HeadShift:
    conf, nc = job.conf, len(job.run.class_names)
    n_then = int(job.run.head(head).eval.images or 0)
    now = (
        BoxView.from_boxes(boxes, geometry=False)
        .scored(job.calibrators[head], recorded=True)
        .kept(conf)
    )
    then = _then_boxes(job, head).kept(conf)
    t, verdict, line = shift_check(
        then,
        now,
        n_img_then=n_then,
        n_img=n_img,
        n_classes=nc,
        conf=conf,
        alpha=alpha,
        n_perm=n_perm,
        min_boxes=min_boxes,
        seed=job.settings.seed,
    )
    counts = np.bincount(now.cls, minlength=nc)[:nc].tolist()
    counts_then = np.bincount(then.cls, minlength=nc)[:nc].tolist()
    return HeadShift(
        head=head,
        method=job.run.head(head).calibrator.method,
        tests=t,
        class_counts=counts,
        class_counts_then=counts_then,
        verdict=verdict,
        line=line,
    )


def _label(data: Path | None, split: str | None, images: Path | None) -> str:
    import re

    text = f"{data.stem}-{split}" if data is not None else f"images-{images.name or 'images'}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _default_out(
    run_dir: str | Path,
    *,
    data: str | Path | None = None,
    split: str | None = None,
    images: str | Path | None = None,
) -> Path:
    """The default output folder: ``RUN/check-<data stem>-<split>`` or ``RUN/check-images-<folder name>``.

    >>> _default_out("runs/a", data="x/new.yaml", split="test").as_posix()
    'runs/a/check-new-test'
    """
    img = None if images is None else Path(images).resolve()
    return Path(run_dir) / f"check-{_label(None if data is None else Path(data), split, img)}"


def _choose_split(ds: Any, split: str | None) -> str:
    if split is not None:
        if split not in ds.splits:
            raise InputError(
                f"split `{split}` not in {ds.yaml_path} (splits: {', '.join(sorted(ds.splits))})",
                param="split",
            )
        return split
    for name in ("test", "val"):
        if name in ds.splits:
            return name
    if len(ds.splits) == 1:
        return next(iter(ds.splits))
    raise InputError(
        f"{ds.yaml_path} has several splits and no `test` or `val`: name one with `split`"
    )


_Dataset = Any


def check_run(
    run_dir: str | Path,
    *,
    data: str | Path | None = None,
    split: str | None = None,
    images: str | Path | None = None,
    model: str | Path | None = None,
    boxes: str | Path | None = None,
    detections: str | Path | None = None,
    heads: list[str] | None = None,
    out: str | Path | None = None,
    limit: int | None = None,
    alpha: float = 0.05,
    min_boxes: int = 30,
    n_boot: int | None = None,
    n_perm: int = 999,
    device: str | None = None,
    batch: int | None = None,
    progress: bool = True,
    report: bool = True,
) -> tuple[CheckResult, Path]:
    """Check a run's calibration on new images; write ``check.json``, the report and the boxes.

    Args:
        run_dir: Output folder of ``det-calib calibrate``.
        data, split: Labelled new images: a data.yaml (its class names must be the run's) and a
            split in it (default ``test``, else ``val``, else its only split).
        images: Unlabelled new images: a folder (searched recursively). Exactly one of ``data``
            and ``images``.
        model: Capture with this detector instead of the run's (the run's calibrator is applied
            to its logits); its class names must be the run's.
        boxes: Reuse boxes captured earlier (a run folder or ``boxes.parquet``, or ``det-calib
            capture`` parts of the split) instead of capturing; checked against model, data and
            the run's capture settings.
        detections: A file of the new images' detections (:mod:`det_calib.job.detections`) in place of a capture.
        heads: Heads to check (default every head of the run).
        out: Output folder (default :func:`default_out`).
        limit: Only the first N images (sorted).
        alpha: Family-wise level of the check (labelled: halved between its two verdicts).
        min_boxes: Kept boxes a calibration verdict (and a class's test, and the label-free score
            and class-mix tests) needs.
        n_boot: Bootstrap resamples of the kept-set intervals (default the run's).
        n_perm: Permutations of the label-free tests.
        device, batch, progress, report: As ``calibrate``; ``report``: also write ``check.html``/``check.md``.

    Returns:
        ``(result, out_dir)``.

    Raises:
        InputError: Not a run folder, no calibrator, other class names, no images, bad options.
    """

    clock.begin()
    # check's stages (coarser than calibrate's): model load (the options, the data, the run's record,
    # its calibrators and detector), capture, figures (the tests) and outputs (the report's included)
    with clock.stage("model load"):
        _check_options(data, images, alpha=alpha, min_boxes=min_boxes, n_perm=n_perm, limit=limit)
        if images is not None and split is not None:
            raise InputError(
                "`split` names a split of `data`; with `images` (a folder) there is none: drop it"
            )
        run_dir = Path(run_dir)
        ds, split = _labelled_data(data, split)
        out_dir = (
            Path(out)
            if out is not None
            else _default_out(run_dir, data=data, split=split, images=images)
        )
        check_output_dir(out_dir)
        job = _job(  # (the detector's load imports Ultralytics and torch in this stage)
            run_dir,
            model=model,
            data=ds,
            heads=heads,
            limit=limit,
            device=device,
            batch=batch,
            boxes=boxes,
            progress=progress,
            n_boot=n_boot,
            detections=detections,
        )
    result = _new_result(
        job, run_dir, labelled=ds is not None, alpha=alpha, min_boxes=int(min_boxes)
    )
    with clock.stage("figures"):  # the tests; the capture inside charges its own stage
        tables = _check_tables(
            result,
            job,
            data,
            ds,
            split,
            images,
            limit,
            alpha=alpha,
            min_boxes=int(min_boxes),
            n_perm=int(n_perm),
        )
    result.exit_code = exit_code(
        result.calibration_verdict, result.detection_verdict, result.shift_verdict
    )
    _write_check(out_dir, result, tables, job, report=report)
    return result, out_dir


def _check_tables(
    result: CheckResult,
    job: _Job,
    data: Any,
    ds: _Dataset | None,
    split: str | None,
    images: Any,
    limit: int | None,
    *,
    alpha: float,
    min_boxes: int,
    n_perm: int,
) -> dict[str, pl.DataFrame]:
    """The labelled or the unlabelled check, into ``result``; the new boxes per head."""
    if ds is not None:
        result.data, result.split = str(Path(data).resolve()), split
        tables = _check_labelled(result, job, ds, split, limit, alpha=alpha, min_boxes=min_boxes)
    else:
        result.images = str(Path(images).resolve())
        tables = _check_unlabelled(
            result, job, Path(images), limit, alpha=alpha, min_boxes=min_boxes, n_perm=n_perm
        )
    result.detections = (
        job.read.to_dict() if job.read is not None else None
    )  # what a file of detections held
    return tables


def _write_check(
    out_dir: Path, result: CheckResult, tables: dict[str, pl.DataFrame], job: _Job, *, report: bool
) -> None:
    """``check.json``, the new boxes and (``report``) the page, swapped in whole."""

    new_boxes = pl.concat(list(tables.values()), how="diagonal_relaxed")
    with clock.output_folder(out_dir) as stage:
        write_boxes(new_boxes, stage / BOXES_FILE)
        if report:
            from det_calib.check.report_page import write_check_report

            write_check_report(stage, result, new_boxes, job.run)  # on the outputs' time
        result.timings = clock.timings()  # the check's seconds, the report's included
        result.write(stage / CHECK_FILE)  # once, last


def _labelled_data(
    data: str | Path | None, split: str | None
) -> tuple[_Dataset | None, str | None]:
    """The labelled new images' data.yaml read and the split chosen in it; ``(None, None)`` without."""

    if data is None:
        return None, None
    ds = load_data_yaml(data)
    return ds, _choose_split(ds, split)


def _new_result(
    job: _Job, run_dir: Path, *, labelled: bool, alpha: float, min_boxes: int
) -> CheckResult:
    return CheckResult(
        kind="labelled" if labelled else "unlabelled",
        run=str(run_dir.resolve()),
        model=job.model_text,
        reference_split=job.run.settings.eval_split,
        conf=job.conf,
        alpha=alpha,
        min_boxes=min_boxes,
        heads=list(job.inputs.heads),
        n_boot=job.settings.n_boot,
        seed=job.settings.seed,
        det_calib_version=package_version(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        matching=job.inputs.matching if labelled else None,
    )


def _check_sources(*, model: Any, boxes: Any, detections: Any) -> None:
    """``detections`` replaces the capture: no ``model`` runs and no boxes are reused beside it."""
    for name, v in (("model", model), ("boxes", boxes)):
        if detections is not None and v is not None:
            raise InputError(
                f"`{name}` and `detections` exclude each other: the file's boxes are the new "
                "images' "
                "boxes (no model is run)"
            )


def _check_options(
    data: Any, images: Any, *, alpha: float, min_boxes: int, n_perm: int, limit: int | None
) -> None:
    if (data is None) == (images is None):
        raise InputError(
            "give exactly one of `data` (labelled new images) and `images` (a folder of unlabelled "
            "ones)"
        )
    if not 0 < alpha < 1:
        raise InputError(f"Expected `alpha` in (0, 1), but got {alpha}", param="alpha")
    for name, v in (("min_boxes", min_boxes), ("n_perm", n_perm)):
        if int(v) < 1:
            raise InputError(
                f"Expected `{name}` to be an integer larger than 0, but got {v}", param=name
            )
    if limit is not None and limit < 1:
        raise InputError(
            f"Expected `limit` to be an integer larger than 0, but got {limit}", param="limit"
        )


def _check_labelled(
    result: CheckResult,
    job: _Job,
    ds: Any,
    split: str,
    limit: int | None,
    *,
    alpha: float,
    min_boxes: int,
) -> dict[str, pl.DataFrame]:
    """Every head's labelled check into ``result`` (and its two verdicts); head -> the new boxes."""
    sp, tables = _labelled_boxes(job, ds, split, limit, result=result)
    gt_then, why = _eval_split_gt(job)
    if why:
        _log.warning("%s: recall on it is tested with its binomial variance", why)
    for h, t in tables.items():
        result.labelled[h] = _labelled_head(
            job, h, t, sp, gt_then, alpha=alpha, min_boxes=min_boxes
        )
    result.calibration_verdict = worst(
        [c.calibration_verdict for c in result.labelled.values()], (HOLDS, TOO_FEW, DRIFTED)
    )
    result.detection_verdict = worst(
        [c.detection_verdict for c in result.labelled.values()], (HOLDS, CHANGED)
    )
    return tables


def _check_unlabelled(
    result: CheckResult,
    job: _Job,
    images: Path,
    limit: int | None,
    *,
    alpha: float,
    min_boxes: int,
    n_perm: int,
) -> dict[str, pl.DataFrame]:
    """Every head's label-free check into ``result`` (and the shift verdict); head -> the new boxes."""
    sp = Split.of_folder(images, limit=limit)
    _note_seen(result, job, sp.images)
    raw = _capture_unlabelled(job, sp)
    tables = {h: _with_calibrated(job, h, raw[h], None) for h in job.inputs.heads}
    for h, t in tables.items():
        result.unlabelled[h] = _unlabelled_head(
            job, h, t, len(sp.images), alpha=alpha, n_perm=n_perm, min_boxes=min_boxes
        )
    result.shift_verdict = worst(
        [u.verdict for u in result.unlabelled.values()], (NO_SHIFT, TOO_FEW_IMAGES, SHIFTED)
    )
    return tables


def _labelled_boxes(
    job: _Job, ds: Any, split: str, limit: int | None, *, result: CheckResult | None = None
) -> tuple[Any, dict[str, pl.DataFrame]]:
    """The new labelled split and its boxes per head (``result``: where to note, before the capture, the
    new images the run itself used)."""
    sp = _labelled_split(job, ds, split, limit)
    if sp.gt.filter(~pl.col("crowd")).height == 0:
        raise InputError(
            f"split `{split}` of {ds.yaml_path} has no ground-truth box: check it with `images` "
            "(label-free) instead"
        )
    if result is not None:
        _note_seen(result, job, sp.images)
    raw = _capture(job, sp)
    return sp, {h: _with_calibrated(job, h, raw[h], sp) for h in job.inputs.heads}


def _labelled_split(job: _Job, ds: Any, split: str, limit: int | None) -> Any:
    """The new labelled split, read for the run's model and rule (:func:`_task_split`): with its masks where
    the run matched by mask IoU (keypoints for OKS, rotated boxes for rotated IoU), which the new labels must
    then allow (the calibrator maps conf to the chance of a match by that rule)."""

    rule = job.inputs.matching
    by = rule.by if rule is not None else "box"
    task = get_task(job.inputs.task)
    own = by != "box"  # the task's own rule (a run matches by no other task's)
    lacking = own and task.lacks_labels(ds, split)
    sp = None if lacking else _task_split(job, ds, split, match=by, limit=limit)
    if own and (lacking or task.lacks_payload(sp)):
        what, needs = task.missing_words
        raise InputError(
            f"the run matched boxes by {rule.measure}, but split `{split}` of {ds.yaml_path} has "
            f"{what} "
            f"(box-only labels): check it on {needs}, or check a run calibrated with --match box"
        )
    return sp


def _task_split(job: _Job, ds: Any, split: str, *, match: str, limit: int | None = None) -> Any:
    """``split`` of ``ds`` read for the run's model's task (:func:`~det_calib.tasks.task_splits.load_task_split`)."""

    return load_task_split(
        ds,
        split,
        task=job.inputs.task,
        match=match,
        payload_shape=job.inputs.payload_shape,
        limit=limit,
    )


def new_boxes(
    run_dir: str | Path,
    data: str | Path,
    split: str | None = None,
    *,
    heads: list[str] | None = None,
    limit: int | None = None,
    device: str | None = None,
    batch: int | None = None,
    progress: bool = False,
    model: str | Path | None = None,
) -> tuple[Any, Any, dict[str, pl.DataFrame]]:
    """The labelled new images of ``data`` captured as :func:`check_run` captures them (``model``: this
    detector instead of the run's, as ``check_run``'s).

    Returns:
        ``(run, split, boxes)``: the run read back (:class:`det_calib.record.run_folder.Run`), the
        :class:`~det_calib.data.ground_truth.Split`, and head -> matched boxes with the run's deployed conf in
        ``calibrated``.
    """

    ds = load_data_yaml(data)
    job = _job(
        Path(run_dir),
        model=model,
        data=ds,
        heads=heads,
        limit=limit,
        device=device,
        batch=batch,
        boxes=None,
        progress=progress,
        n_boot=None,
    )
    sp, tables = _labelled_boxes(job, ds, _choose_split(ds, split), limit)
    return job.run, sp, tables


def _capture_unlabelled(job: _Job, sp: Any) -> dict[str, pl.DataFrame]:
    if job.settings.boxes:
        raise InputError(
            "`boxes` works with `data` (labelled images) only: the boxes are assigned by image name"
        )
    return _capture(job, sp)

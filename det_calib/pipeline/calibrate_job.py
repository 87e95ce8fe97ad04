"""The main job: resolve inputs, load splits, capture (one pass per split serves every head; or reuse
earlier boxes), per head label → fit → evaluate, write outputs.

:func:`calibrate` runs every step and writes the output folder; each step is also a public
function of its own module, for notebooks and other tools:

- :class:`det_calib.capture.predictor.Capturer` — boxes and raw logits, exactly as single-image ``predict``
- :func:`det_calib.job.reuse.reuse_boxes` — the boxes of an earlier run or of capture parts
- :func:`det_calib.matching.one_to_one.match_boxes` — correct/incorrect by one-to-one IoU matching (by each
  task's own rule: mask IoU, OKS, rotated IoU, through :func:`det_calib.tasks.match_rule.match_split`)
- :func:`det_calib.calibrators.temperature.fit_temperature` — the NLL-optimal temperature (the default method);
  :mod:`det_calib.pipeline.fitting` / :mod:`det_calib.selection.cross_validation` — any other method, or ``auto`` by CV
- :mod:`det_calib.metrics.operating_point` — ECE and LaECE_0 of the boxes kept at each conf (the headline)
- :mod:`det_calib.metrics` — all-box ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, intervals
- :func:`~det_calib.evaluation.map_check.coco_map`, :func:`~.map_check.ultralytics_val_heads` — mAP before/after
  (one Ultralytics val pass of the calibrated checkpoint scores every head, and the original's, on the same features)
  (and :func:`detection_change` for per-class maps folded into the model)
- :func:`det_calib.evaluation.kept_set.threshold_shift` — the kept set at conf 0.25
- :func:`det_calib.deploy.fold.write_calibrated_checkpoint` / ``write_folded_checkpoint`` — the map folded in

What a run produces is a :class:`det_calib.record.run_result.RunResult`, which writes ``calibration.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.data.box_table import validate_boxes
from det_calib.data.box_view import with_calibrated
from det_calib.data.ground_truth import (
    Split,
)
from det_calib.evaluation.floor_gap import head_floor_gap
from det_calib.io import check_output_dir
from det_calib.job import clock
from det_calib.job.capturing import capture_split, open_capturer, startup_imports
from det_calib.job.detections import detections_inputs, read_run_detections
from det_calib.job.inputs import Inputs, default_inputs, load_splits, resolve_inputs
from det_calib.job.preflight import preflight
from det_calib.job.settings import Settings, settings_of
from det_calib.job.stages import stage
from det_calib.job.threads import single_blas_thread
from det_calib.pipeline.fitting import (
    Choice,
    choice_words,
    fit_head,
    fit_result,
    scored_candidates,
    temperature_fit,
)
from det_calib.pipeline.head_figures import evaluate_head, operating_points
from det_calib.pipeline.outputs import Verification, gt_per_class, start_verification, write_run_outputs
from det_calib.record.calibrator_record import calibrator_record
from det_calib.record.run_result import HeadResult, RunResult, package_version
from det_calib.tasks import get_task
from det_calib.tasks.match_rule import choose_matching, match_split
from det_calib.thresholds.class_sets import keep_class_logits

log = logging.getLogger(__name__)

__all__ = ["CalibrationRun", "calibrate"]


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


def calibrate_head(inputs: Inputs, fit: Split, ev: Split, head: str, s: Settings,
                   captured: Sequence[pl.DataFrame | None], *, matched: Sequence[pl.DataFrame | None] = (None, None),
                   choice: Choice | None = None) -> tuple[HeadResult, list[pl.DataFrame]]:
    """One head: label → fit → evaluate its captured boxes. Returns its result and its two box tables.

    ``matched``: the fit and/or eval tables already labelled (:func:`match_boxes` of ``captured``),
    and ``choice``: the calibrator already chosen on the fit table (``fit_head`` of it); what is
    given is not redone (the ensemble passes the fusion it chose, labelled and fitted once); a
    ``captured`` table may be None where ``matched`` gives it."""
    with clock.stage("fit and choice"), stage("matching"):  # by box or mask IoU (inputs.matching)
        fb, eb = (m if m is not None else match_split(raw, sp, inputs.matching, iou=s.iou, loc_iou=s.loc_iou)
                  for raw, sp, m in zip(captured, (fit, ev), matched, strict=True))
    with clock.stage("fit and choice"), stage("fit" if s.method != "auto" else "fit and CV"):
        choice = fit_head(fb, s, fit.gt) if choice is None else choice
    record = calibrator_record(choice.calibrator, choice.method, choice.floor)
    log.info("%s head: %s", head, choice_words(choice))
    with clock.stage("figures"):  # on the eval split (and the fit figures)
        with stage("kept-set metrics and intervals"):
            op = operating_points(eb, ev, s)
        evaluated = evaluate_head(eb, ev, choice.calibrator, s, inputs.ds.names, op,
                                  sigmas=dataset_sigmas(inputs.ds, inputs.task))
        with stage("why above the floor"):  # only where the calibrated kept set is above its floor's range
            gap = head_floor_gap(op, evaluated.eval, choice.calibrator, method=choice.method,
                                 fit_min_conf=choice.floor or 0.0, image_names=ev.image_names(), target=s.target)
        with stage("temperature and candidates on the eval split"):
            result = HeadResult(calibrator=record, fit=fit_result(fb, fit, choice, s),
                                eval=dataclasses.replace(evaluated.eval, floor_gap=gap),
                                threshold_shift=evaluated.threshold_shift,
                                per_class=evaluated.per_class, by_size=evaluated.by_size,
                                candidates=scored_candidates(choice, op) or None,
                                temperature_fit=temperature_fit(fb, choice, op, s, evaluated.eval, fit.gt))
        return result, [with_calibrated(t, choice.calibrator) for t in (fb, eb)]


def _calibrate_heads(inputs: Inputs, fit: Split, ev: Split, s: Settings,
                     captured: dict[str, list[pl.DataFrame]],
                     fitted: dict[str, tuple[pl.DataFrame, Choice]] | None = None,
                     ) -> tuple[dict[str, HeadResult], pl.DataFrame]:
    """Every head through :func:`calibrate_head` (``fitted``: each head's labelled fit table and
    choice, from :func:`fit_heads`); their results and the run's box table."""
    results, tables = {}, []
    for head in inputs.heads:
        fb, choice = fitted.pop(head) if fitted else (None, None)
        # vector work: a second BLAS thread only waits (det_calib.job.threads)
        with single_blas_thread():
            results[head], head_tables = calibrate_head(inputs, fit, ev, head, s, captured.pop(head),
                                                        matched=(fb, None), choice=choice)
        tables += head_tables
    with clock.stage("figures"):
        return results, validate_boxes(pl.concat(tables, how="vertical", rechunk=False))  # no copy of the tables


def dataset_sigmas(ds, task: str) -> tuple[float, ...] | None:
    """The dataset's own constants of the task's matching (a pose dataset's OKS sigmas, data.yaml's
    ``kpt_oks_sigmas``); None where it gives none."""
    return get_task(task).dataset_sigmas(ds)


def fit_heads(inputs: Inputs, fit: Split, s: Settings, captured: dict[str, pl.DataFrame]
              ) -> dict[str, tuple[pl.DataFrame, Choice]]:
    """Each head's fit table labelled and its calibrator chosen (as :func:`calibrate_head` does), before
    the eval split is captured."""
    out = {}
    for head in inputs.heads:
        with single_blas_thread():
            with clock.stage("fit and choice"), stage("matching"):
                fb = match_split(captured.pop(head), fit, inputs.matching, iou=s.iou, loc_iou=s.loc_iou)
            with clock.stage("fit and choice"), stage("fit" if s.method != "auto" else "fit and CV"):
                out[head] = fb, fit_head(fb, s, fit.gt)
    return out


def _capture_and_calibrate(inputs: Inputs, fit: Split, ev: Split, s: Settings, stack: ExitStack, out: Path
                           ) -> tuple[dict[str, HeadResult], pl.DataFrame, Verification | None]:
    """Capture the fit split, choose each head's calibrator, start the verification of the calibrated
    checkpoint (which runs beside what follows, :class:`Verification`), capture the eval split and
    evaluate every head on it."""
    with clock.stage("capture"):
        cap = keep_class_logits(open_capturer(inputs, s))  # every class's logit: class_logits.npz
        fit_rows = capture_split(cap, inputs, fit, s)
    fitted = fit_heads(inputs, fit, s, fit_rows)
    records = {h: calibrator_record(c.calibrator, c.method, c.floor) for h, (_, c) in fitted.items()}
    with clock.stage("outputs"), stage("write outputs"):
        verification = start_verification(inputs, fit, ev, records, s, out)
    if verification is not None:
        stack.enter_context(verification)
    with clock.stage("capture"):
        ev_rows = capture_split(cap, inputs, ev, s)
        del cap
    captured = {h: [None, ev_rows[h]] for h in inputs.heads}
    results, boxes = _calibrate_heads(inputs, fit, ev, s, captured, fitted)
    return results, boxes, verification


def _start(model: str | Path | None, data: str | Path | None, out: Path, s: Settings
           ) -> tuple[Inputs, Split, Split]:
    """The fixed start-up: imports, the model and the data loaded and checked (every check that needs
    no forward pass, before the first one)."""
    with stage("load model and data"):
        startup_imports()
        if data is None and not s.detections:
            with clock.stage("data check"):  # the embedded demo: rendered on first use, checked after
                model, data = default_inputs(model, data)
        with clock.stage("model load"):
            inputs = detections_inputs(model, data, s) if s.detections else resolve_inputs(model, data, s)
        with clock.stage("data check"):
            fit, ev = load_splits(inputs.ds, s, task=inputs.task, payload_shape=inputs.payload_shape)
            inputs.matching = choose_matching(s.match, task=inputs.task, splits=(fit, ev),
                                              sigmas=dataset_sigmas(inputs.ds, inputs.task))
    with clock.stage("data check"):
        preflight(model=inputs.model, out=out, fit=fit, ev=ev, heads=list(inputs.heads),
                  n_classes=len(inputs.ds.names), settings=s)
        check_output_dir(out)  # refuse a folder det_calib does not own
    return inputs, fit, ev


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
    s = settings_of(settings, options)
    t_start = time.time()
    clock.begin()
    inputs, fit, ev = _start(model, data, Path(out), s)
    with ExitStack() as stack:
        return _calibrate(inputs, fit, ev, Path(out), s, t_start, stack)


def _calibrate(inputs: Inputs, fit: Split, ev: Split, out: Path, s: Settings, t_start: float, stack: ExitStack
               ) -> CalibrationRun:
    """:func:`calibrate` once its inputs are loaded; ``stack`` holds the verification running beside it."""
    if s.detections:  # a file of detections: no model, no forward pass
        with clock.stage("capture"), stage("read detections"):
            captured, fingerprints = read_run_detections(inputs, (fit, ev), s)
        results, boxes = _calibrate_heads(inputs, fit, ev, s, captured)
        verification = None
    elif s.boxes:
        from det_calib.job.reuse import reuse_boxes

        with clock.stage("capture"), stage("read boxes"):
            captured, fingerprints = reuse_boxes(s.boxes, inputs, (fit, ev), s)
        results, boxes = _calibrate_heads(inputs, fit, ev, s, captured)
        verification = None
    else:
        results, boxes, verification = _capture_and_calibrate(inputs, fit, ev, s, stack, out)
        fingerprints = None
    result = RunResult(
        model=str(inputs.model.resolve()), data=str(inputs.data.resolve()), class_names=list(inputs.ds.names),
        heads=list(inputs.heads), settings=s.recorded(imgsz=inputs.imgsz, fit_split=fit.name, eval_split=ev.name),
        results=results, corrupt_images=sorted(set(fit.corrupt) | set(ev.corrupt)),
        det_calib_version=package_version(), created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gt_counts={sp.name: gt_per_class(sp, len(inputs.ds.names)) for sp in (fit, ev)},
        bad_labels=list(dict.fromkeys(fit.bad_labels + ev.bad_labels)),
        matching=inputs.matching if get_task(inputs.task).records_rule else None,  # a detector: box IoU, as ever
    )
    with clock.stage("outputs"), stage("write outputs"), single_blas_thread():
        files = write_run_outputs(out, result, boxes, inputs, (fit, ev), s, t_start, fingerprints, verification)
    return CalibrationRun(out_dir=out, result=result, boxes=boxes, checkpoint=_deployed_path(out, inputs.model),
                          files=files)  # calibrated.pt, or the calibrated export


def _deployed_path(out: Path, model: Any) -> Path | None:
    """The run's calibrated model in ``out``; None where the run writes none (a LiteRT, NCNN or TensorRT engine)."""
    from det_calib.deploy.calibrated_export import deployed_file  # export code only when a run is written

    name = deployed_file(model)
    return None if name is None or not (out / name).is_file() else out / name

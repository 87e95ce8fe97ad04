"""``det-calib calibrate``, read straight through: load the model and data (:func:`load`: every check
that needs no forward pass first); the fit split's boxes from their source (:class:`~det_calib.job.capturing.BoxSource`:
the detector's capture, an earlier run's boxes, a detections file); per head label and fit
(:mod:`det_calib.pipeline.head_steps`); the Ultralytics val of the calibrated checkpoint started
beside what follows; the eval split's boxes; per head label and evaluate; the run's record
(:func:`run_record`, a :class:`~det_calib.record.run_result.RunResult`); the output folder
(:func:`~det_calib.pipeline.outputs.write_run_outputs`, ``calibration.json`` once, last). Each step is
a stage of the run's clock (:mod:`det_calib.job.clock`)."""

from __future__ import annotations

import datetime as _dt
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.data.box_table import validate_boxes
from det_calib.data.ground_truth import Split
from det_calib.demo import default_inputs
from det_calib.deploy.calibrated_export import deployed_file
from det_calib.io import check_output_dir
from det_calib.job import clock
from det_calib.job.capturing import BoxSource, job_inputs
from det_calib.job.inputs import Inputs, load_splits
from det_calib.job.settings import Settings
from det_calib.pipeline.head_steps import evaluate, fit
from det_calib.pipeline.outputs import start_verification, write_run_outputs
from det_calib.pipeline.preflight import preflight
from det_calib.record.run_result import HeadResult, RunResult, package_version
from det_calib.tasks import get_task
from det_calib.tasks.match_rule import choose_matching

__all__ = ["CalibrationRun", "calibrate", "load"]


@dataclass
class CalibrationRun:
    """What :func:`calibrate` produced: the folder, the record (``calibration.json``), the box table
    (``boxes.parquet``), ``calibrated.pt`` or the calibrated export (None: none written), the files."""

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
        model: Detector checkpoint (``.pt``) or export; default the embedded demo detector.
        data: ``data.yaml``; default the embedded demo dataset (rendered on first use).
        out: Output folder (created; replaced whole when the run succeeds).
        settings: A :class:`Settings`; or pass its fields as keyword options.

    Raises:
        InputError: Bad model, data or options (one-line message).
        DegenerateFitError: The fit split cannot determine a temperature.

    Examples:
        >>> run = calibrate(out="runs/demo")  # doctest: +SKIP
        >>> run.temperature  # doctest: +SKIP
        {'nms': 1.27, 'e2e': 1.05}
    """
    s, out, t_start = Settings.of_call(settings, options), Path(out), time.time()
    clock.begin()
    inputs, fit_split, ev_split = load(model, data, out, s)
    splits, sigmas = (fit_split, ev_split), _dataset_sigmas(inputs.ds, inputs.task)
    with ExitStack() as stack:  # holds the verification running beside the run
        source = BoxSource(
            inputs, splits, s, class_logits=True
        )  # every class's logit: class_logits.npz
        fit_rows = source.boxes(fit_split)
        fitted = {
            head: fit(fit_rows.pop(head), fit_split, inputs, s, head) for head in inputs.heads
        }
        verification = start_verification(
            inputs, splits, {h: c for h, (_, c) in fitted.items()}, s, out, stack
        )
        ev_rows = source.boxes(ev_split)
        results, tables = {}, []
        for head in inputs.heads:
            fb, choice = fitted.pop(head)
            results[head], head_tables = evaluate(
                inputs, splits, fb, ev_rows.pop(head), choice, s, sigmas=sigmas
            )
            tables += head_tables
        boxes = validate_boxes(
            pl.concat(tables, how="vertical", rechunk=False)
        )  # no copy of the tables
        result = run_record(inputs, splits, s, results)
        files = write_run_outputs(
            out,
            result,
            boxes,
            inputs,
            splits,
            s,
            t_start,
            source.fingerprints,
            verification,
            logit_store=source.logit_store,
            fold_first=True,
        )
    return CalibrationRun(out, result, boxes, _deployed_path(out, inputs.model), files)


def load(
    model: str | Path | None, data: str | Path | None, out: Path, s: Settings
) -> tuple[Inputs, Split, Split]:
    """The model and the data loaded and checked (every check that needs no forward pass, before the
    first one): the run's inputs, its fit and eval splits."""
    with clock.stage("data check"):
        if data is None and not (s.detections or s.boxes):  # (reused boxes: their run's own inputs)
            model, data = default_inputs(model, data)  # the embedded demo: rendered on first use
        inputs = _inputs(model, data, s)
        fit_split, ev_split = load_splits(
            inputs.ds, s, task=inputs.task, payload_shape=inputs.payload_shape
        )
        inputs.matching = choose_matching(
            s.match,
            task=inputs.task,
            splits=(fit_split, ev_split),
            sigmas=_dataset_sigmas(inputs.ds, inputs.task),
        )
        preflight(
            model=inputs.model,
            out=out,
            fit=fit_split,
            ev=ev_split,
            heads=list(inputs.heads),
            n_classes=len(inputs.ds.names),
            settings=s,
        )
        check_output_dir(out)  # refuse a folder det_calib does not own
    return inputs, fit_split, ev_split


@clock.stage("model load")
def _inputs(model: str | Path | None, data: str | Path | None, s: Settings) -> Inputs:
    return job_inputs(model, data, s)


def _dataset_sigmas(ds, task: str) -> tuple[float, ...] | None:
    """The dataset's own constants of the task's matching (a pose dataset's OKS sigmas, data.yaml's
    ``kpt_oks_sigmas``); None where it gives none."""
    return get_task(task).dataset_sigmas(ds)


def _deployed_path(out: Path, model: Any) -> Path | None:
    """The run's calibrated model in ``out``; None where the run writes none (a LiteRT, NCNN or TensorRT engine)."""

    name = deployed_file(model)
    return None if name is None or not (out / name).is_file() else out / name


def run_record(
    inputs: Inputs, splits: tuple[Split, Split], s: Settings, results: dict[str, HeadResult]
) -> RunResult:
    """The run's record (what ``calibration.json`` holds) before its outputs add their checks and times."""
    fit_split, ev_split = splits
    return RunResult(
        model=str(inputs.model.resolve()),
        data=str(inputs.data.resolve()),
        class_names=list(inputs.ds.names),
        heads=list(inputs.heads),
        settings=s.recorded(imgsz=inputs.imgsz, fit_split=fit_split.name, eval_split=ev_split.name),
        results=results,
        corrupt_images=sorted(set(fit_split.corrupt) | set(ev_split.corrupt)),
        det_calib_version=package_version(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gt_counts={sp.name: sp.gt_counts(len(inputs.ds.names)) for sp in splits},
        bad_labels=list(dict.fromkeys(fit_split.bad_labels + ev_split.bad_labels)),
        matching=inputs.matching
        if get_task(inputs.task).records_rule
        else None,  # a detector: box IoU, as ever
    )

"""The output folder of a run: ``calibration.json``, ``boxes.parquet``, ``calibrated.pt``, the report,
``summary.txt`` and the thresholds, written in a staging folder and swapped in whole.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from det_calib.calibrators import registry
from det_calib.capture.exported import is_export
from det_calib.capture.parts import data_fingerprint, model_fingerprint
from det_calib.data.box_table import write_boxes
from det_calib.data.ground_truth import (
    Split,
)
from det_calib.deploy.calibrated_export import deployed_file, write_run_engine
from det_calib.deploy.portable import write_portable_outputs
from det_calib.io import logged_as, read_manifest, write_text
from det_calib.job import clock
from det_calib.job.detections_file import DetectionsRead
from det_calib.job.inputs import Inputs
from det_calib.job.model_process import fold_checkpoint
from det_calib.job.settings import Settings
from det_calib.pipeline.fitting import Choice
from det_calib.pipeline.ultralytics_checks import (
    detection_change,
    run_ultralytics_checks,
)
from det_calib.record.calibrator_record import Calibrator
from det_calib.record.run_result import RunResult, ValCheck
from det_calib.report.text_summary import summary_text
from det_calib.thresholds.class_sets import write_class_logits
from det_calib.thresholds.per_class import summary_lines, tune_run

if TYPE_CHECKING:
    from det_calib.thresholds.class_sets import LogitStore

_log = logging.getLogger(__name__)


def _tune_thresholds(folder: Path, result: RunResult, s: Settings) -> list[str]:
    """Per-class conf thresholds of every head, written as ``thresholds.json`` into ``folder`` (its
    ``boxes.parquet`` written; ``result``: its record, not yet written); the summary's lines."""

    lines: list[str] = []
    record = result.as_read()
    for head in result.heads:
        doc = tune_run(
            folder,
            head=head,
            target_precision=s.target_precision,
            delta=s.delta,
            unit=s.threshold_unit,
            fallback=s.threshold_fallback,
            n_boot=s.n_boot,
            seed=s.seed,
            result=record,
        )
        lines += summary_lines(doc, head=head)
    return lines


_NOT_FOLDED = (
    "[{heads}] no calibrated.pt: a size-conditioned map reads each box's size, which the class "
    "conv "
    "cannot see; calibration.json holds the map: deploy it with det_calib.attach(YOLO(model), "
    "run_folder) "
    "(docs/size_and_hook.md)"
)
"""The summary's line in place of the checkpoint when a head's map reads the box's size."""

_NOT_IN_ENGINE = (
    "[{heads}] no calibrated engine: a size-conditioned map reads each box's size, which det_calib "
    "writes into an ONNX or OpenVINO graph only; calibration.json holds the map, to apply to this "
    "engine's scores with each box's size (docs/size_and_hook.md)"
)
"""The same for a run on an export det_calib does not edit (LiteRT, NCNN, TensorRT)."""


def write_run_outputs(
    out: Path,
    result: RunResult,
    boxes: pl.DataFrame,
    inputs: Inputs,
    splits: tuple[Split, Split],
    s: Settings,
    t_start: float,
    fingerprints: dict[str, Any] | None = None,
    verification: Verification | None = None,
    *,
    beside: dict[str, pl.DataFrame] | None = None,
    more: Sequence[str] = (),
    logit_store: LogitStore | None = None,
    fold_first: bool = False,
) -> dict[str, Path]:
    """Write every output of a run; ``verification``: the Ultralytics val checks started on the
    checkpoint once the calibrators were fitted (:func:`start_verification`), whose checkpoint is the run's.
    An ensemble's run (its record's ``ensemble`` section) writes no model (an ensemble is not one checkpoint), its
    members' boxes (``beside``: file name -> table, with ``boxes.parquet``'s fingerprints) and its
    summary lines (``more``, before the timing line). ``logit_store``: where the capture put every class's
    logit (``class_logits.npz`` reads the kept ones).

    Everything is written into a staging folder that replaces ``out`` in one swap at the end
    (:func:`det_calib.io.staged_output`): a run that fails or is interrupted leaves the previous
    run's folder as it was. ``result`` gets its Ultralytics val checks, its run time and its timings.
    ``fold_first``: a detector's run (``calibrate``'s) folds its ``calibrated.pt`` before the other
    outputs (:func:`_fold_first`).
    """

    with clock.output_folder(out) as stage:
        folded = fold_first and _fold_first(stage, inputs, result, s, verification)
        write_class_logits(
            stage, boxes, logit_store
        )  # the per-class logits out of `boxes` (in place), for class sets
        if logit_store is not None:
            logit_store.close()  # every kept logit is written: its temporary file goes now
        fp = fingerprints or _run_fingerprints(inputs, splits, s)
        write_boxes(boxes, stage / "boxes.parquet", fp)
        for name, table in (beside or {}).items():
            write_boxes(table, stage / name, fp)
        if "ensemble" in result.sections:
            engine_lines = []
        elif s.detections:  # no model: the portable map, its ONNX graph, the raw thresholds
            file_lines, engine_lines = _detections_outputs(stage, result, fingerprints, s)
            more = [*file_lines, *more]  # the file's lines before the timing line
        else:
            engine_lines = _write_model(
                stage, result, inputs, splits[1], s, verification, folded=folded
            )
        extra = _finish_run_folder(
            stage, out, result, s, t_start, boxes=boxes, verification=verification
        )
        summary = [
            summary_text(result, more=more, detections=bool(s.detections)),
            *extra,
            *engine_lines,
        ]
        write_text(stage / "summary.txt", "\n".join(summary) + "\n")
    return _output_files(out)


def _run_fingerprints(inputs: Inputs, splits: Sequence[Split], s: Settings) -> dict[str, Any]:
    """What ``boxes.parquet`` records about its capture: model and split fingerprints, settings, the
    model's facts (a ``.pt`` model's: a run reusing the boxes reads them instead of the model)."""

    return {
        "format": 1,
        "model": model_fingerprint(inputs.model),
        "splits": {
            sp.name: data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt)
            for sp in splits
        },
        "heads": list(inputs.heads),
        "settings": s.capture_settings(
            inputs.imgsz, batch=1 if is_export(inputs.model) else None
        ),  # an export: 1
        **({} if inputs.facts is None else {"facts": inputs.facts.record()}),
    }


def _finish_run_folder(
    stage: Path,
    out: Path,
    result: RunResult,
    s: Settings,
    t_start: float,
    *,
    boxes: pl.DataFrame | None = None,
    verification: Verification | None = None,
) -> list[str]:
    """What every run folder ends with, in ``stage`` (its ``boxes.parquet`` written): ``thresholds.json``
    (``--target-precision``), the report (drafted while the verification runs beside it, completed once
    ``verification`` is written into ``result``), and ``calibration.json``, written once, last, with
    the run's time and where it went. ``boxes``: the run's box table in memory (None: the report reads
    ``boxes.parquet``). Returns the summary's threshold lines."""
    extra = _tune_thresholds(stage, result, s) if s.target_precision is not None else []
    draft = None
    with clock.stage("report" if s.report else "outputs"):  # the verification's wait: its own stage
        if s.report:
            from det_calib.report.run_report import (
                draft_report,  # matplotlib: only where a report is written
            )

            draft = draft_report(stage, result.as_read(), shown_dir=out, boxes=boxes)
        if verification is not None:
            verification.finish(result, boxes)
        result.seconds = round(time.time() - t_start, 1)
        if draft is not None:
            draft.write(result.as_read())
    result.timings = clock.timings()  # where the time went, the report's included
    result.seconds = round(time.time() - t_start, 1)
    result.write(stage / "calibration.json")
    return extra


def _write_model(
    stage: Path,
    result: RunResult,
    inputs: Inputs,
    ev: Split,
    s: Settings,
    verification: Verification | None,
    *,
    folded: bool = False,
) -> list[str]:
    """The run's calibrated model in ``stage`` (``calibrated.pt``, or the calibrated export and its engine
    record; none for a size-conditioned map), and the val checks of a run that cannot have them; the
    summary's lines about it. ``folded``: ``calibrated.pt`` is written already (:func:`_fold_first`)."""
    meta, records = _meta(result, s), _records(result)
    exported, engine_lines = is_export(inputs.model), []
    unfolded = [h for h, r in records.items() if registry.method_spec(r.method).uses_size]
    how = _model_output(inputs, records, verification)
    if how == "none":
        words = _NOT_IN_ENGINE if is_export(inputs.model) else _NOT_FOLDED
        engine_lines = [words.format(heads=", ".join(unfolded))]
    elif how == "engine":
        engine_lines = write_run_engine(inputs.model, stage, result, records, meta).summary_lines()
    elif how == "copy":
        shutil.copyfile(verification.ckpt, stage / "calibrated.pt")
    elif not folded:  # (in a child process where torch is not imported)
        fold_checkpoint(inputs.model, stage / "calibrated.pt", records, metadata=meta)
    if s.run_val and unfolded and not exported:
        for h in inputs.heads:
            result.results[h] = dataclasses.replace(
                result.results[h],
                ultralytics_val=ValCheck.not_run(
                    ev.name,
                    "no calibrated.pt: a size-conditioned map cannot fold into the checkpoint",
                ),
            )
    elif s.run_val and (
        s.boxes or exported
    ):  # reusing boxes: no forward pass; an export: no .pt to val
        why = (
            f"boxes reused from {s.boxes}; run calibrate without `boxes` to verify with val"
            if s.boxes
            else "an exported engine (the calibrated export scores every box by its map of the box's size)"
            if unfolded
            else "an exported engine (the calibrated export scores every box by the same monotone map per class)"
        )
        for h in inputs.heads:
            result.results[h] = dataclasses.replace(
                result.results[h], ultralytics_val=ValCheck.not_run(ev.name, why)
            )
    return engine_lines


def _detections_outputs(
    stage: Path, result: RunResult, fingerprints: dict[str, Any], s: Settings
) -> tuple[list[str], list[str]]:
    """What a run of a file of detections writes in place of ``calibrated.pt`` (the portable map, its
    ONNX graph, the per-class raw thresholds, DeepStream's block), the Ultralytics val it cannot run;
    the summary's lines about the file, and about what was written."""
    read = DetectionsRead.from_dict(fingerprints["detections"], "detections")
    lines: list[str] = []
    for h in result.heads:
        lines += read.summary_lines(h, s.conf)
        if s.run_val:
            result.results[h] = dataclasses.replace(
                result.results[h],
                ultralytics_val=ValCheck.not_run(
                    result.settings.eval_split,
                    "a detections file: Ultralytics val cannot run a foreign engine (the mAP check "
                    "is COCO mAP of the file's own boxes)",
                ),
            )
    return lines, write_portable_outputs(stage, result, conf=s.conf)


def _records(result: RunResult) -> dict[str, Any]:
    """Head -> the calibrator record of each head that has one."""
    return {h: r.calibrator for h, r in result.results.items() if r.calibrator is not None}


def _meta(result: RunResult, s: Settings) -> dict[str, Any]:
    """What the run's calibrated model records of its calibration."""
    return {"iou_match": s.iou, "fit_split": result.settings.fit_split, "data": result.data}


def _model_output(
    inputs: Inputs, records: dict[str, Any], verification: Verification | None
) -> str:
    """How a detector's run writes its calibrated model: ``"none"`` (a size-conditioned map with no place
    in the checkpoint's class conv), ``"engine"`` (the calibration appended to an export's graph, a size
    map too, with its engine record), ``"copy"`` (the checkpoint the verification runs on, written after
    the fit) or ``"fold"`` (``calibrated.pt`` folded from the run's records)."""
    if any(registry.method_spec(r.method).uses_size for r in records.values()) and deployed_file(
        inputs.model
    ) in (None, "calibrated.pt"):
        return "none"  # a size map has a place only in an export's graph det_calib edits
    if is_export(inputs.model):
        return "engine"
    return "copy" if verification is not None else "fold"


def _fold_first(
    stage: Path, inputs: Inputs, result: RunResult, s: Settings, verification: Verification | None
) -> bool:
    """The run's ``calibrated.pt`` folded into ``stage`` first, before the other outputs; False where
    the run writes none this way (a file of detections, the verification's copy, an export's, a
    size-conditioned map). Where torch is not imported (a run reusing boxes) the fold runs in a child
    process: first, it runs beside the least memory, the box table and the run's records (before
    ``boxes.parquet``'s Arrow copies)."""
    records = _records(result)
    if s.detections or _model_output(inputs, records, verification) != "fold":
        return False
    fold_checkpoint(inputs.model, stage / "calibrated.pt", records, metadata=_meta(result, s))
    return True


class Verification:
    """The Ultralytics val checks of a run's heads (one pass of the calibrated checkpoint,
    :func:`run_ultralytics_checks`) and the detection change of a per-class map folded into the model,
    written into the run's record by :meth:`finish`.

    :func:`start_verification` writes the checkpoint as soon as the calibrators are fitted. Where the
    machine allows it (:func:`_runs_beside`), the val pass then runs in a child process started as the
    block is entered (forked; on a GPU run, a fresh interpreter), beside the eval split's capture, its
    figures, the outputs and the report (which writes the sections that read the checks last);
    :meth:`finish` waits for it. Elsewhere :meth:`finish` runs it in this process. The child runs the
    same code on the same checkpoint and data, so the checks are the same either way. On the clock,
    ``verification`` holds the wait for the child (its wall) and the child's CPU seconds. Leaving the
    block stops a child still running (a run that failed meanwhile) and removes the checkpoint's
    temporary folder.
    """

    def __init__(
        self, inputs: Inputs, ckpt: Path, ev: Split, records: dict[str, Any], s: Settings
    ) -> None:
        self.inputs, self.ckpt, self.ev, self.records, self.s = inputs, ckpt, ev, records, s
        self.pending = True
        self.child: Any = None
        self.conn: Any = None
        self.cpu0 = 0.0

    def __enter__(self) -> Verification:
        method = _runs_beside()
        if method:
            import multiprocessing as mp

            inputs = self.inputs
            if method == "fork":
                # Ultralytics' dataset check imports matplotlib's font manager for its font check: imported
                # before the fork, the child finds it imported (the report needs it later anyway)
                import matplotlib.font_manager  # noqa: F401
            else:  # a fresh interpreter: the inputs travel pickled, without the loaded model (val reads the file)
                inputs = dataclasses.replace(inputs, yolo=None)
            ctx = mp.get_context(method)
            self.conn, send = ctx.Pipe(duplex=False)
            self.cpu0 = _children_cpu()
            child = ctx.Process(
                target=_checks_in_child,
                name="det_calib-verification",
                args=(send, inputs, self.ckpt, self.ev, self.records, self.s),
            )
            try:
                child.start()
            except (
                OSError
            ) as e:  # no process to be had (a limit on processes or memory): run it here later
                _log.warning(
                    "cannot start the Ultralytics val process (%s): it runs after the report's "
                    "figures",
                    e,
                )
                self.conn.close()
            else:
                self.child = child
            finally:
                send.close()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.child is not None:  # the run failed while the child was verifying: stop it
            self.child.terminate()
            self._reap()
        shutil.rmtree(self.ckpt.parent, ignore_errors=True)

    def finish(self, result: RunResult, boxes: pl.DataFrame) -> bool:
        """Wait for the child's checks (or run them here) and write them into ``result``; False when
        there was nothing (left) to do."""
        if not self.pending:
            return False
        self.pending = False
        with clock.stage("verification"):
            checks = self._from_child() if self.child is not None else None
            if checks is None:
                checks = run_ultralytics_checks(
                    self.inputs, self.ckpt, self.ev, self.records, self.s
                )
            self._apply(checks, result, boxes)
        return True

    def _from_child(self) -> dict[str, Any] | None:
        """The child's checks; None (with a warning) when it ended without them; its error raised here."""
        try:
            status, value = self.conn.recv()
        except EOFError:
            status, value = "lost", None
        finally:
            code = self._reap()
        if status == "error":
            raise value
        if status == "lost":
            _log.warning(
                "the Ultralytics val process ended without a result (exit code %s): running it "
                "here",
                code,
            )
            return None
        return value

    def _reap(self) -> int | None:
        """Join the child, charge its CPU seconds to ``verification``; its exit code."""
        self.conn.close()
        self.child.join()
        code = self.child.exitcode
        clock.add_cpu("verification", max(_children_cpu() - self.cpu0, 0.0))
        self.child = None
        return code

    def _apply(self, checks: dict[str, Any], result: RunResult, boxes: pl.DataFrame) -> None:
        for h, check in checks.items():
            result.results[h] = dataclasses.replace(result.results[h], ultralytics_val=check)
        for h, rec in self.records.items():
            if registry.method_spec(rec.method).per_class:
                eb = boxes.filter((pl.col("head") == h) & (pl.col("split") == self.ev.name))
                change = detection_change(self.inputs, self.ckpt, self.ev, h, eb, rec, self.s)
                result.results[h] = dataclasses.replace(result.results[h], detection_change=change)


@clock.stage("verification")
def start_verification(
    inputs: Inputs,
    splits: tuple[Split, Split],
    choices: dict[str, Choice],
    s: Settings,
    out: Path,
    stack: ExitStack,
) -> Verification | None:
    """The run's checkpoint written (in a temporary folder) as soon as its calibrators (``choices``) are
    known, and its :class:`Verification` entered in ``stack`` (the val pass starts beside what follows);
    None where the run does not verify (``run_val`` off, boxes reused, an exported model, a
    size-conditioned map: none has a ``calibrated.pt`` to val)."""
    import tempfile

    records = {h: Calibrator.of_fitted(c.calibrator, c.method, c.floor) for h, c in choices.items()}
    if (
        not s.run_val
        or s.boxes
        or s.detections
        or not records
        or is_export(inputs.model)
        or any(registry.method_spec(r.method).uses_size for r in records.values())
    ):
        return None
    fit, ev = splits
    ckpt = Path(tempfile.mkdtemp(prefix="det_calib_verify_")) / "calibrated.pt"
    meta = {"iou_match": s.iou, "fit_split": fit.name, "data": str(inputs.data.resolve())}
    try:
        with logged_as(ckpt.parent, out):  # the run's calibrated.pt, once the run is written
            fold_checkpoint(inputs.model, ckpt, records, metadata=meta)
    except BaseException:
        shutil.rmtree(ckpt.parent, ignore_errors=True)
        raise
    return stack.enter_context(Verification(inputs, ckpt, ev, records, s))


def _runs_beside() -> str | None:
    """How the val pass runs beside the rest of the run: the start method of its child process, or None
    (in this process, after the report's figures). On Linux with more than one core to run on: ``"fork"``
    while this process has not used a GPU (the child starts at once, with everything imported), and
    ``"spawn"`` once it has (CUDA does not survive a fork: a fresh interpreter imports torch and
    Ultralytics and opens its own CUDA context, seconds that run beside the eval split's capture)."""
    import os
    import sys

    import torch

    if not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2:
        return None
    return "spawn" if torch.cuda.is_initialized() else "fork"


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have ended."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _checks_in_child(
    conn: Any, inputs: Inputs, ckpt: Path, ev: Split, records: dict[str, Any], s: Settings
) -> None:
    """The forked child's work: the checks (or the error) sent to the parent."""
    try:
        out: tuple[str, Any] = ("ok", run_ultralytics_checks(inputs, ckpt, ev, records, s))
    except BaseException as e:  # noqa: BLE001 - raised in the parent
        out = ("error", e)
    try:
        conn.send(out)
    except Exception:  # an error that does not pickle: its words
        conn.send(("error", RuntimeError(f"{type(out[1]).__name__}: {out[1]}")))
    conn.close()


def _output_files(out: Path) -> dict[str, Path]:
    """The files the run wrote in ``out``, keyed by role (``"checkpoint"``, ...) or relative path."""
    names = {
        "boxes.parquet": "boxes",
        "calibrated.pt": "checkpoint",
        "calibration.json": "calibration",
        "calibrated.onnx": "export",
        "engine.json": "engine",
        "summary.txt": "summary",
        "report.html": "html",
        "report.md": "md",
        "thresholds.json": "thresholds",
    }
    return {names.get(rel, rel): out / rel for rel in read_manifest(out)}

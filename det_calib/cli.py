"""``det-calib`` command line: argument parsing and calls, no logic.

The options of ``calibrate`` are generated from :class:`det_calib.job.settings.Settings` (each field
carries its default and help); library errors name parameters and are shown with the options' names.

Exit codes: 0 success, 2 bad input (one-line message on stderr, no traceback), 130 interrupted; ``check``
also 3-6 (its verdicts, :data:`det_calib.check.check_record.EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, NoReturn

from det_calib import FIRST_IMPORT
from det_calib.capture.exported import is_export
from det_calib.capture.options import CaptureOptions
from det_calib.capture.parts import capture_to_parts, model_fingerprint
from det_calib.capture.ray_capture import capture_ray
from det_calib.check.check_record import EXIT_CODES
from det_calib.check.run_check import check_run
from det_calib.data.box_table import HEADS
from det_calib.demo import demo_data_yaml, shifted_data_yaml
from det_calib.deploy.calibrated_export import apply_to_export
from det_calib.ensemble.fusion_settings import FusionSettings
from det_calib.errors import DetCalibError, InputError, first_line
from det_calib.job import clock
from det_calib.job.process_tuning import tuned_process
from det_calib.job.settings import Settings
from det_calib.pipeline.calibrate_job import calibrate
from det_calib.record.run_result import package_version, read_calibrators
from det_calib.report.text_summary import summary_text
from det_calib.tasks import TASKS
from det_calib.tasks.contract import RUN_PARTS
from det_calib.thresholds.command import thresholds_command
from det_calib.thresholds.thresholds_file import DEFAULT_TARGET_PRECISION


def _now(v: Any) -> Any:
    """A help text or choices given as a function (read from the calibrator registry when the parser is built)."""
    return v() if callable(v) else v


def _add_settings_options(
    parser: argparse.ArgumentParser,
    settings_cls: type,
    *,
    only: Collection[str] | None = None,
    skip: Collection[str] = (),
) -> None:
    """Add one option per field of a settings dataclass that names a ``flag`` in its metadata.

    The field's default, help and choices come from the dataclass (help and choices may be
    functions, called now: the ``--method`` ones come from the calibrator registry); ``negate`` makes a
    ``--no-...`` switch that stores False, ``switch`` a flag that stores True, ``repeat`` an
    option that may be given several times (its values replace the default), ``short`` a
    one-letter alias. A subcommand whose options live in a settings dataclass calls this with
    its class; :func:`_settings_from_args` reads the values back. ``only``: just these fields, ``skip``:
    all but these (a subcommand that shares some of the options).
    """
    for f in dataclasses.fields(settings_cls):
        meta = f.metadata
        if "flag" not in meta or (only is not None and f.name not in only) or f.name in skip:
            continue
        names = [meta["flag"], *([meta["short"]] if "short" in meta else [])]
        kw: dict[str, Any] = {"dest": f.name, "help": _now(meta["help"])}
        if meta.get("negate"):
            parser.add_argument(*names, action="store_false", default=f.default, **kw)
            continue
        if meta.get("switch"):
            parser.add_argument(*names, action="store_true", default=f.default, **kw)
            continue
        kind = _scalar_type(f.type)
        if meta.get("repeat"):
            parser.add_argument(*names, type=kind, action="append", default=None, **kw)
            continue
        if "choices" in meta:
            kw["choices"] = list(_now(meta["choices"]))
            if f.name == "method":  # a per-image task's own maps too (its run reads them)
                kw["choices"] += [
                    m for t in TASKS.values() for m in t.own_methods if m not in kw["choices"]
                ]
        # an option of --method auto's choice: None when not given, so that one given beside a named
        # method can be refused (:func:`_settings_from_args`)
        default = None if meta.get("auto_only") else f.default
        parser.add_argument(*names, type=kind, default=default, **kw)


def _settings_from_args(args: argparse.Namespace, settings_cls: type) -> Any:
    """The settings dataclass from parsed options (fields without an option keep their default)."""
    values = {}
    for f in dataclasses.fields(settings_cls):
        if "flag" in f.metadata and hasattr(args, f.name):
            v = getattr(args, f.name)
            if f.metadata.get("repeat"):
                v = tuple(v) if v else f.default
            if f.metadata.get("auto_only"):
                if v is None:
                    continue  # not given: the field's default
                # (an ensemble's choice of fusion reads the cross-validation's options whatever the
                # method)
                fused = getattr(args, "command", None) == "ensemble" and f.metadata.get(
                    "fusion_choice"
                )
                if getattr(args, "method", "auto") != "auto" and not fused:
                    raise InputError(
                        f"`{f.metadata['flag']}` sets --method auto's choice; with --method "
                        f"{args.method} there is no choice to set: drop it"
                    )
            values[f.name] = v
    return settings_cls(**values)


def _scalar_type(annotation: Any) -> Callable[[str], Any]:
    text = str(annotation)
    if text.startswith("tuple[float") or text.startswith("float"):
        return float
    if text.startswith("int"):
        return int
    return str


def _flag_names(settings_cls: type) -> dict[str, str]:
    """Field name -> command-line option, for the options generated from ``settings_cls``."""
    return {
        f.name: f.metadata["flag"] for f in dataclasses.fields(settings_cls) if "flag" in f.metadata
    }


_THRESHOLD_OPTIONS = (
    "target_precision",
    "delta",
    "threshold_unit",
    "threshold_fallback",
    "n_boot",
    "seed",
)
"""Fields of :class:`~det_calib.job.settings.Settings` that are also the options of ``thresholds``."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that takes no abbreviated options (``--target`` is never read as ``--target-precision``):
    an option added later can never be mistaken for a prefix of an older one. Every command's parser is one."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """A usage error in one line, as every other error (argparse's own prints the usage first)."""
        command = self.prog.removeprefix("det-calib").strip()
        named = re.match(r"(\w[\w-]*): unrecognized arguments", message)
        command = command or (named.group(1) if named else "")
        prog = f"det-calib {command}".strip()
        sys.stderr.write(
            f"det-calib: error: {'' if named or not command else command + ': '}{message} "
            f"(`{prog} --help` lists the options)\n"
        )
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="det-calib",
        description="Calibrate the confidence of an Ultralytics YOLO detector, an exported engine of it, or an "
        "ensemble of detectors (by default the map that held-out folds choose among none, "
        "temperature, Platt, "
        "spline and isotonic; the temperature always fitted and reported).",
    )
    p.add_argument("--version", action="version", version=f"det_calib {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    _calibrate_parser(sub)
    _capture_parser(sub)
    _run_folder_parsers(sub)
    d = sub.add_parser(
        "demo-data", help="render the demo dataset into the cache and print its data.yaml path"
    )
    d.add_argument(
        "--with-train", action="store_true", help="also render the train split (for training)"
    )
    d.add_argument(
        "--shifted",
        nargs=2,
        metavar=("KIND", "SEVERITY"),
        help="the test split under a corruption instead (blur, noise, contrast, jpeg; severity 1-5)",
    )
    _check_parser(sub)
    _ensemble_parser(sub)
    return p


_ENSEMBLE_SKIPPED = ("boxes", "batch", "run_val", "match")
"""``calibrate`` options that ``ensemble`` defines its own way (``--boxes``: an ensemble run's folder) or
has not: members run one image per forward pass (``--batch``), an ensemble is not one checkpoint
that Ultralytics val could check (``--no-val``), and its fused boxes are matched by box IoU (``--match``:
segment members are refused)."""


def _ensemble_parser(sub: Any) -> None:

    e = sub.add_parser(
        "ensemble",
        help="fuse several detectors (checkpoints, snapshots, test-time views), calibrate the fused score",
        description="Captures every member on the fit and eval splits, fuses their boxes per image and class "
        "(weighted boxes fusion), labels the fused boxes and calibrates their score as `calibrate` "
        "does. With no "
        "arguments: the embedded demo ensemble (the shipped seed members when present, else "
        "test-time views of the "
        "shipped model).",
    )
    e.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        metavar="MODEL[:HEAD]",
        help="a member checkpoint (repeatable; MODEL:e2e runs that head); one --model with --view: "
        "its test-time views",
    )
    e.add_argument("--data", type=Path, help="data.yaml (default: the demo dataset)")
    _add_settings_options(e, Settings, skip=_ENSEMBLE_SKIPPED)
    e.add_argument(
        "--boxes",
        help="reuse the member boxes of an earlier ensemble run (its folder) instead of "
        "capturing: other fusion and calibration settings in seconds",
    )
    _add_settings_options(e, FusionSettings)
    e.add_argument(
        "--out",
        type=Path,
        default=Path("det_calib_ensemble"),
        help="output folder (default det_calib_ensemble)",
    )


def _calibrate_parser(sub: Any) -> None:

    c = sub.add_parser(
        "calibrate",
        help="capture logits, fit a calibrator, verify mAP, report, write a calibrated checkpoint",
        description="With no arguments: runs on the embedded demo detector and dataset.",
    )
    c.add_argument(
        "--model",
        type=Path,
        help="detector checkpoint .pt, or an export Ultralytics runs (.onnx, "
        "*_openvino_model/, .tflite, *_ncnn_model/, .engine) (default: the demo detector)",
    )
    c.add_argument(
        "--data",
        type=Path,
        help="data.yaml, or a classify model's class folders (default: the demo data)",
    )
    _add_settings_options(c, Settings)
    c.add_argument(
        "--out",
        type=Path,
        default=Path("det_calib_out"),
        help="output folder (default det_calib_out)",
    )


def _capture_parser(sub: Any) -> None:

    k = sub.add_parser(
        "capture",
        help="capture boxes and raw logits of one split into Parquet parts (shardable, Ray)",
        description="Writes one Parquet part per run (per shard with --shard, per batch with --ray) "
        "into OUT; `calibrate --boxes OUT` and det_calib.capture.read_parts read them.",
    )
    k.add_argument(
        "--model",
        type=Path,
        required=True,
        help="detector checkpoint .pt, or an export (.onnx, "
        "*_openvino_model/, .tflite, *_ncnn_model/, .engine)",
    )
    k.add_argument("--data", type=Path, required=True, help="data.yaml")
    k.add_argument("--split", required=True, help="split key in data.yaml")
    k.add_argument(
        "--out", type=Path, required=True, help="folder of Parquet parts (shared by all shards)"
    )
    k.add_argument(
        "--shard", help="i/n: capture only shard i of n (images assigned by a hash of their name)"
    )
    k.add_argument(
        "--heads",
        nargs="+",
        choices=["auto", *HEADS],
        default=["auto"],
        help="heads to capture in one pass (default auto: every head the model has)",
    )
    default = {
        f.name: f.default for f in dataclasses.fields(Settings)
    }  # Settings: the one source of defaults
    k.add_argument(
        "--conf-floor",
        type=float,
        default=default["conf_floor"],
        help=f"capture conf floor (default {default['conf_floor']}, as val)",
    )
    k.add_argument(
        "--iou",
        type=float,
        default=default["nms_iou"],
        help=f"NMS IoU (default {default['nms_iou']}, as predict)",
    )
    k.add_argument(
        "--max-det",
        type=int,
        default=default["max_det"],
        help=f"boxes per image at most (default {default['max_det']})",
    )
    k.add_argument("--imgsz", type=int, help="inference size (default: the model's training size)")
    k.add_argument(
        "--batch",
        type=int,
        default=default["batch"],
        help="images per forward pass, same letterbox shape only (default: 16 on a CUDA device, not "
        "bit-exact; 1 elsewhere: exactly single-image predict)",
    )
    k.add_argument("--device", help="torch device, e.g. cpu, 0 (default: Ultralytics' choice)")
    k.add_argument(
        "--coco-gt", help="COCO JSON ground truth instead of YOLO txt labels (fingerprinted)"
    )
    k.add_argument(
        "--limit", type=int, help="use only the first N images of the split (quick runs)"
    )
    k.add_argument(
        "--ray", action="store_true", help="run as a Ray Data job (pip install 'det_calib[ray]')"
    )
    k.add_argument(
        "--ray-images-per-part",
        type=int,
        default=256,
        help="images per Ray batch and part (default 256)",
    )
    k.add_argument(
        "--ray-actors",
        type=int,
        help="Ray actor pool size (default: one per GPU, else one per 2 CPUs)",
    )
    k.add_argument(
        "-q", "--quiet", dest="progress", action="store_false", help="no progress output"
    )


def _run_folder_parsers(sub: Any) -> None:
    """``apply``, ``report``, ``compare`` and ``thresholds``: the commands that read a run's outputs."""

    a = sub.add_parser(
        "apply", help="fold a calibration.json's calibrators into a checkpoint (any method)"
    )
    a.add_argument(
        "--model",
        type=Path,
        required=True,
        help="detector checkpoint .pt, or its export (.onnx, "
        "*_openvino_model/: the calibration is appended to the export's graph; .tflite, "
        "*_ncnn_model/, "
        ".engine: re-exported from --source)",
    )
    a.add_argument(
        "--calibration",
        type=Path,
        required=True,
        help="calibration.json of a calibrate run (or the run's folder)",
    )
    a.add_argument(
        "--out",
        type=Path,
        required=True,
        help="calibrated checkpoint (or .onnx, *_openvino_model/, "
        ".tflite, *_ncnn_model/, .engine) to write",
    )
    a.add_argument(
        "--source",
        type=Path,
        help="a LiteRT, NCNN or TensorRT --model: the .pt it was exported from "
        "(the calibration is folded into it and exported again with the export's own arguments)",
    )

    r = sub.add_parser(
        "report", help="(re)write report.html and report.md of a calibrate output folder"
    )
    r.add_argument("run_dir", type=Path)
    r.add_argument("--out", type=Path, help="write the report here instead of into RUN_DIR")
    r.add_argument(
        "--reference",
        metavar="RUN[:HEAD]",
        help="another run of the same detector (e.g. its .pt beside "
        "this export): show both engines' calibrations side by side",
    )

    m = sub.add_parser(
        "compare", help="compare the calibration of two or more runs, or heads (RUN:nms RUN:e2e)"
    )
    m.add_argument(
        "runs",
        nargs="+",
        metavar="RUN[:HEAD]",
        help="calibrate output folders, each optionally with :nms or :e2e (two or more)",
    )
    m.add_argument("--out", type=Path, default=Path("det_calib_compare"))
    m.add_argument(
        "--labels", nargs="+", metavar="NAME", help="one name per run, in order (after the runs)"
    )

    t = sub.add_parser(
        "thresholds",
        help="tune per-class conf thresholds on a calibrate output folder "
        "(writes thresholds.json into it)",
    )
    t.add_argument("run_dir", type=Path, help="output folder of `det-calib calibrate`")
    t.add_argument("--head", choices=list(HEADS), default="nms", help="head to tune (default nms)")
    _add_settings_options(t, Settings, only=_THRESHOLD_OPTIONS)
    # threshold_unit None: not given (risk control refuses it, :func:`_thresholds`)
    t.set_defaults(target_precision=_DefaultTarget(DEFAULT_TARGET_PRECISION), threshold_unit=None)
    _risk_options(t)


class _DefaultTarget(float):
    """``thresholds``' default target precision: equal to it, and marked as not given (risk control then
    certifies only the risks asked for)."""


def _risk_options(t: Any) -> None:
    """``thresholds``' risk-control options (docs/thresholds.md#risks-you-choose)."""
    t.add_argument(
        "--target-recall",
        type=float,
        help="certify a mean per-image recall >= R (missed objects <= 1 - R) on the fit images",
    )
    t.add_argument(
        "--max-fp-per-image",
        type=float,
        help="certify a mean of at most K false positives per image",
    )
    t.add_argument(
        "--fp-cap",
        type=float,
        help="bound on one image's false positives (default: "
        "the run's max_det; smaller is an assumption the guarantee then rests on)",
    )
    t.add_argument(
        "--guarantee",
        choices=["probability", "expectation"],
        help="with probability >= 1 - delta over the fit images (default), or in expectation (CRC)",
    )
    t.add_argument(
        "--precision-unit",
        choices=["image", "pooled"],
        help="with --target-recall "
        "or --max-fp-per-image: --target-precision as the mean precision of the images that keep a "
        "box "
        "(default) or the pooled box precision (its range: --fp-cap)",
    )
    t.add_argument("--per-class", action="store_true", help="also certify each class on its own")
    t.add_argument(
        "--class-sets",
        type=float,
        metavar="ALPHA",
        help="conformal class sets at 1 - ALPHA (needs per-class logits in boxes.parquet)",
    )


def _check_parser(sub: Any) -> None:

    codes = "; ".join(f"{k}: {v}" for k, v in EXIT_CODES.items())
    c = sub.add_parser(
        "check",
        help="check a run's calibration and detection quality on new images (labelled or not)",
        description="Labelled new images (--data): applies the run's calibrator to the run's model on them and tests, "
        "at the run's lowest conf threshold, whether calibration holds (calibration in the large, "
        "Hosmer-Lemeshow, per "
        "class) and whether detection quality holds (precision, recall against the run's eval "
        "split). Unlabelled "
        "images (--images): tests whether the output shifted (scores, boxes per image, class mix), "
        "not calibration.",
        epilog=f"exit codes: {codes}",
    )
    c.add_argument("run_dir", type=Path, help="output folder of `det-calib calibrate`")
    what = c.add_mutually_exclusive_group(required=True)
    what.add_argument("--data", type=Path, help="data.yaml of labelled new images")
    what.add_argument("--images", type=Path, help="folder of unlabelled new images")
    c.add_argument("--split", help="split of --data (default test, else val, else its only split)")
    c.add_argument(
        "--model",
        type=Path,
        help="capture with this detector (.pt or export) instead of the run's (same classes)",
    )
    c.add_argument(
        "--boxes",
        type=Path,
        help="reuse boxes captured earlier (a run folder, boxes.parquet, or "
        "`det-calib capture` parts of the split) instead of capturing",
    )
    c.add_argument(
        "--detections",
        type=Path,
        help="the new images' detections from a file (docs/detections.md)",
    )
    c.add_argument(
        "--head",
        choices=list(HEADS),
        action="append",
        dest="heads",
        help="head to check (repeatable; default every head of the run)",
    )
    c.add_argument(
        "--out",
        type=Path,
        help="output folder (default RUN_DIR/check-<data stem>-<split> or "
        "RUN_DIR/check-images-<folder name>)",
    )
    c.add_argument("--limit", type=int, help="use only the first N images (sorted)")
    c.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="the check's level, halved between its 2 verdicts (0.05)",
    )
    c.add_argument(
        "--min-boxes", type=int, default=30, help="kept boxes a calibration verdict needs (30)"
    )
    c.add_argument(
        "--n-boot", type=int, help="bootstrap resamples of the intervals (default the run's)"
    )
    c.add_argument(
        "--n-perm", type=int, default=999, help="permutations of the label-free tests (999)"
    )
    c.add_argument(
        "--batch",
        type=int,
        help="images per capture forward pass (default: 16 on a CUDA device, 1 elsewhere)",
    )
    c.add_argument("--device", help="torch device, e.g. cpu, 0")
    c.add_argument(
        "--no-report", dest="report", action="store_false", help="skip check.html/check.md"
    )
    c.add_argument(
        "-q", "--quiet", dest="progress", action="store_false", help="no progress output"
    )


def _own_run(command: str, args: argparse.Namespace) -> int | None:
    """The exit code of a task's own run of ``command`` where a registered task claims these arguments (a
    per-image task's: ``TaskRun``, its folder's part ``RUN_PARTS[command]``); None: the box pipeline runs it."""

    for task in TASKS.values():
        own = task.part(RUN_PARTS[command])
        claim = own.RUN.claims(args) if own is not None else None
        if claim is not None:
            return own.RUN.run(args, claim)
    return None


def _check(args: argparse.Namespace) -> int:
    if (code := _own_run("check", args)) is not None:
        return code

    result, out = check_run(
        args.run_dir,
        data=args.data,
        split=args.split,
        images=args.images,
        model=args.model,
        boxes=args.boxes,
        detections=args.detections,
        heads=args.heads,
        out=args.out,
        limit=args.limit,
        alpha=args.alpha,
        min_boxes=args.min_boxes,
        n_boot=args.n_boot,
        n_perm=args.n_perm,
        device=args.device,
        batch=args.batch,
        progress=args.progress,
        report=args.report,
    )
    print("\n".join(result.lines()))
    if result.timings is not None:
        print(result.timings.line())
    print(
        f"wrote check.json, boxes.parquet{', check.html, check.md' if args.report else ''} to "
        f"{out} "
        f"(exit code {result.exit_code})"
    )
    return result.exit_code


def _ensemble(args: argparse.Namespace) -> int:
    from det_calib.ensemble.ensemble_job import FusionSettings, ensemble

    s = _settings_from_args(args, Settings)
    s.boxes = args.boxes
    run = ensemble(
        args.models,
        args.data,
        out=args.out,
        settings=s,
        fusion=_settings_from_args(args, FusionSettings),
    )
    summary = run.files.get("summary")
    print(summary.read_text(encoding="utf-8").rstrip("\n") if summary else "")
    main_files = [p.name for k, p in run.files.items() if not k.startswith("figures/")]
    print(f"wrote {', '.join(sorted(main_files))} (and figures/) to {run.out_dir}")
    return 0


def _version() -> str:

    return package_version()


def _calibrate(args: argparse.Namespace) -> int:
    if (code := _own_run("calibrate", args)) is not None:
        return code

    run = calibrate(
        args.model, args.data, out=args.out, settings=_settings_from_args(args, Settings)
    )
    summary = run.files.get("summary")
    print(summary.read_text(encoding="utf-8").rstrip("\n") if summary else summary_text(run.result))
    rels = [
        p.relative_to(run.out_dir) for k, p in run.files.items() if not k.startswith("figures/")
    ]
    main_files = {
        r.parts[0] + ("/" if len(r.parts) > 1 else "") for r in rels
    }  # a folder (an OpenVINO export) once
    print(f"wrote {', '.join(sorted(main_files))} (and figures/) to {run.out_dir}")
    return 0


def _capture(args: argparse.Namespace) -> int:
    if args.ray and args.shard:
        raise InputError("--shard and --ray exclude each other: Ray splits the work itself")

    heads = "auto" if "auto" in args.heads else tuple(args.heads)
    opts = CaptureOptions(
        heads=heads,
        conf=args.conf_floor,
        iou=args.iou,
        max_det=args.max_det,
        imgsz=args.imgsz,
        batch=args.batch,
        device=args.device,
    )
    kw = {"options": opts, "coco_gt": args.coco_gt, "limit": args.limit}
    if args.ray:
        parts = capture_ray(
            args.model,
            args.data,
            args.split,
            args.out,
            images_per_part=args.ray_images_per_part,
            actors=args.ray_actors,
            **kw,
        )
        print(f"wrote {len(parts)} parts to {args.out}")
    else:
        part = capture_to_parts(
            args.model,
            args.data,
            args.split,
            args.out,
            shard=args.shard,
            progress=args.progress,
            **kw,
        )
        if not args.progress:  # (else the capture's own line said where it wrote, and what)
            print(f"wrote {part}")
    return 0


def _apply(args: argparse.Namespace) -> int:
    if Path(args.calibration).is_dir():  # a run's folder: its calibration.json
        args.calibration = Path(args.calibration) / "calibration.json"

    if is_export(args.model):
        print(
            "\n".join(apply_to_export(args.model, args.calibration, args.out, source=args.source))
        )
        return 0
    from det_calib.deploy.fold import write_run_checkpoint

    if args.source is not None:
        raise InputError(
            "`--source` is the .pt of an engine det_calib re-exports (LiteRT, NCNN, TensorRT); a "
            ".pt checkpoint is calibrated itself: drop it"
        )
    if Path(args.out).is_dir():
        raise InputError(
            f"`out` {args.out} is a folder: give the calibrated checkpoint's file name (e.g. "
            f"{Path(args.out) / 'calibrated.pt'})"
        )
    if Path(args.out).suffix != ".pt":
        raise InputError(
            f"`--out` {args.out} would hold a calibrated checkpoint: name it with .pt (Ultralytics "
            "picks a model's loader by its suffix)"
        )
    records = read_calibrators(args.calibration)
    # the checkpoint's writer says what it wrote, each head's map in words (one line, not two)
    write_run_checkpoint(
        args.model, args.out, records, metadata={"calibration": str(args.calibration)}
    )
    if (fitted_on := _fitted_on_another(args.calibration, args.model)) is not None:
        warnings.warn(
            f"{args.calibration} was fitted on {fitted_on}, not on {args.model}: its map fits that "
            f"model's scores (calibrate this one: det-calib calibrate --model {args.model})",
            stacklevel=1,
        )
    return 0


def _fitted_on_another(calibration: Path, model: Path) -> str | None:
    """The model a run's ``calibration.json`` was fitted on, where it is not ``model`` (another
    file's bytes, or, when that file is gone, another name); None where it is, or unrecorded."""

    try:
        recorded = json.loads(Path(calibration).read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, str) or not recorded:
        return None
    there = Path(recorded)
    if not there.is_file():
        return None if there.name == Path(model).name else recorded
    same = there.resolve() == Path(model).resolve()
    return None if same or model_fingerprint(there) == model_fingerprint(model) else recorded


def _report(args: argparse.Namespace) -> int:
    from det_calib.report import write_report

    files = write_report(args.run_dir, out_dir=args.out, reference=args.reference)
    print(f"wrote {', '.join(str(p) for k, p in files.items() if k in ('html', 'md'))}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    if (code := _own_run("compare", args)) is not None:
        return code
    from det_calib.report import compare_runs

    files = compare_runs(*args.runs, out_dir=args.out, labels=args.labels)
    print(files["txt"].read_text(encoding="utf-8").rstrip("\n"))
    print(
        f"wrote {', '.join(files[k].name for k in ('txt', 'md', 'html'))} (and figures/) to "
        f"{args.out}"
    )
    return 0


def _thresholds(args: argparse.Namespace) -> int:

    if (code := _own_run("thresholds", args)) is not None:
        return code
    _check_risk_options(args)
    args.threshold_unit = args.threshold_unit or "image"
    s = _settings_from_args(args, Settings)
    s.validate()
    lines = thresholds_command(
        args.run_dir,
        head=args.head,
        target_precision=(
            None if isinstance(s.target_precision, _DefaultTarget) else s.target_precision
        ),
        delta=s.delta,
        unit=s.threshold_unit,
        fallback=s.threshold_fallback,
        n_boot=s.n_boot,
        seed=s.seed,
        target_recall=args.target_recall,
        max_fp_per_image=args.max_fp_per_image,
        per_class=args.per_class,
        class_sets=args.class_sets,
        # risk control's own options, where given (else thresholds_command's defaults)
        **{
            k: getattr(args, k)
            for k in ("fp_cap", "guarantee", "precision_unit")
            if getattr(args, k) is not None
        },
    )
    print("\n".join(lines))
    return 0


def _check_risk_options(args: argparse.Namespace) -> None:
    """Refuse, in one line, an option of ``thresholds`` that the tuning asked for would not read:
    risk control (``--target-recall``, ``--max-fp-per-image``, or ``--precision-unit pooled``) has no
    ``--threshold-unit`` (its unit is the image); the per-class precision tuning has no
    ``--guarantee``, ``--fp-cap`` or ``--precision-unit``."""
    risk = (
        args.target_recall is not None
        or args.max_fp_per_image is not None
        or args.precision_unit == "pooled"
    )
    if (
        risk
        and args.precision_unit == "pooled"
        and isinstance(args.target_precision, _DefaultTarget)
    ):
        raise InputError("`--precision-unit pooled` certifies a --target-precision: give it one")
    if risk and args.threshold_unit is not None:
        raise InputError(
            "`--threshold-unit` sets the per-class precision tuning's unit; risk control "
            "(--target-recall, --max-fp-per-image, --precision-unit pooled) always takes the image "
            "as its unit: drop it (--precision-unit image|pooled sets the precision's form there)"
        )
    if not risk:
        for flag, value in (
            ("--guarantee", args.guarantee),
            ("--fp-cap", args.fp_cap),
            ("--precision-unit", args.precision_unit),
        ):
            if value is not None:
                raise InputError(
                    f"`{flag}` applies to risk control, asked with --target-recall, "
                    "--max-fp-per-image or --precision-unit pooled; without one of them, thresholds "
                    "tunes the per-class precision thresholds, which do not read it: drop it"
                )


def _demo_data(args: argparse.Namespace) -> int:

    if args.shifted:
        if args.with_train:
            raise InputError(
                "`--with-train` renders the demo's train split; --shifted renders its test split "
                "under a shift: give one of them"
            )
        kind, severity = args.shifted
        if not severity.isdigit():
            raise InputError(f"Expected a severity among 1..5, but got {severity!r}")
        print(shifted_data_yaml(kind, int(severity)))
        return 0
    print(demo_data_yaml(with_train=args.with_train))
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "calibrate": _calibrate,
    "capture": _capture,
    "apply": _apply,
    "report": _report,
    "compare": _compare,
    "thresholds": _thresholds,
    "demo-data": _demo_data,
    "check": _check,
    "ensemble": _ensemble,
}
"""Subcommand -> the function that runs it (a new subcommand: a parser in :func:`_parser` and an entry here)."""


def _error_line(e: Exception) -> str:
    """The error's first line, with the library's parameter names (`iou`, `out`) written as the flags (`--iou`)."""

    names = {
        **_flag_names(Settings),
        **_flag_names(FusionSettings),
        "models": "--model",
        "model": "--model",
        "data": "--data",
        "out": "--out",
        "images": "--images",
        "split": "--split",
        "alpha": "--alpha",
        "min_boxes": "--min-boxes",
        "n_perm": "--n-perm",
        "target_recall": "--target-recall",
        "max_fp_per_image": "--max-fp-per-image",
        "fp_cap": "--fp-cap",
        "class_sets": "--class-sets",
    }
    params = getattr(e, "params", None)  # None: any backquoted name may be a parameter
    if params is not None:
        names = {k: v for k, v in names.items() if k in params}
    return re.sub(
        r"`(\w+)`",
        lambda m: f"`{names[m.group(1)]}`" if m.group(1) in names else m.group(0),
        first_line(e),
    )


_TIMED = ("calibrate", "ensemble", "check")
"""The commands whose record and summary say where their time went (:mod:`det_calib.job.clock`)."""


def _runs_detector(args: argparse.Namespace) -> bool:
    """Whether the command imports torch and Ultralytics for its first image: ``calibrate``,
    ``ensemble`` and ``check`` unless they reuse boxes (``--boxes``) or read a detections file."""
    return args.command in ("calibrate", "ensemble", "check") and not (
        getattr(args, "boxes", None) or getattr(args, "detections", None)
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``det-calib``."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named with the command they were given to (the command's own options listed)
        parser.error(f"{args.command}: unrecognized arguments: {' '.join(extra)}")
    quiet = not getattr(args, "progress", True)
    # det_calib's own progress lines at INFO; other libraries' only from WARNING up (their INFO is
    # chatter, e.g. matplotlib's "generated new fontManager" on a fresh machine)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("det_calib").setLevel(logging.WARNING if quiet else logging.INFO)
    os.environ.setdefault("YOLO_VERBOSE", "False")
    formatwarning = warnings.formatwarning
    # a warning is one line (its message), not Python's file:line header and source line
    warnings.formatwarning = lambda message, category, *a, **k: f"det-calib: warning: {message}"
    # the command line (argv None) owns its process: its collector, allocator and BLAS threads
    with (
        tuned_process(owned=argv is None, preload=_runs_detector(args)),
        warnings.catch_warnings(),
    ):
        if args.command in _TIMED:  # from the interpreter's start when this is the command line
            clock.start(since_process=argv is None, first_import=FIRST_IMPORT)
        warnings.simplefilter("default")
        # deprecation notices are for the developers of the code that raised them, as in Python's own
        # default: e.g. Python 3.12's "this process is multi-threaded, use of fork() may lead to
        # deadlocks" from a data loader's workers on a GPU run, which would read as det_calib's warning
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        logging.captureWarnings(True)
        try:
            return _COMMANDS[args.command](args)
        except DetCalibError as e:
            print(f"det-calib: error: {_error_line(e)}", file=sys.stderr)
            return 2
        except OSError as e:  # unwritable --out, full disk, unreadable file
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            print(f"det-calib: error: {e.strerror or e}{where}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                "det-calib: interrupted: earlier outputs in the folder were left as they were",
                file=sys.stderr,
            )
            return 130
        except Exception as e:  # a bug: one line, and the traceback on request
            if os.environ.get("DET_CALIB_DEBUG"):
                raise
            print(
                f"det-calib: internal error: {type(e).__name__}: {first_line(e)} "
                "(set DET_CALIB_DEBUG=1 for the traceback)",
                file=sys.stderr,
            )
            return 1
        finally:
            logging.captureWarnings(False)
            warnings.formatwarning = formatwarning
            if (
                args.command in _TIMED
            ):  # a command that failed before its job took the clock leaves none running
                clock.reset()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

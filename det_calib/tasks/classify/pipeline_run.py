"""``calibrate`` for a classify model: load -> capture -> choose and fit -> evaluate -> fold -> verify -> write.

The data are a folder-per-class dataset (:mod:`det_calib.tasks.classify.class_folders`); the map is fitted
on the fit split (``val`` by default, the split Ultralytics validates on) and reported on the eval
split (``test``). The chosen map is folded into the model's last linear layer
(:mod:`det_calib.tasks.classify.deploy_fold`); plain Ultralytics then predicts the eval split with the
written checkpoint (the deployed figures) and validates both checkpoints (top-1 and top-5 must be
unchanged for a map that keeps the ranking, and are reported before and after for one that can
change it). An export (ONNX, OpenVINO, ...) is captured as its log-probabilities and its map is
written for use after the engine (no weights to fold into). Outputs: ``calibration.json``,
``summary.md``, ``classifier_map.json``, ``calibrated.pt`` (a ``.pt`` model), ``top1.parquet`` (each
image's top-1 answer and confidence, raw and calibrated: what ``thresholds`` reads) and the report
(``report.html``, ``report.md``, ``figures/``), each written atomically.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from det_calib.codec import encode
from det_calib.demo import cache_dir, demo_task_model
from det_calib.errors import InputError
from det_calib.io import write_json, write_text
from det_calib.tasks import CLASSIFY, answers_per_image
from det_calib.tasks.classify.capture_logits import capture_classify
from det_calib.tasks.classify.class_folders import check_model_classes, read_class_split
from det_calib.tasks.classify.demo_crops import classify_root
from det_calib.tasks.classify.deploy_fold import write_classify_checkpoint
from det_calib.tasks.classify.evaluation_figures import evaluate_classifier
from det_calib.tasks.classify.evaluation_val import classify_val
from det_calib.tasks.classify.report_summary import summary_markdown
from det_calib.tasks.classify.selection_choice import choose_classifier_map
from det_calib.tasks.classify.softmax_maps import MULTICLASS_METHODS, fit_multiclass
from det_calib.tasks.classify.thresholds_reject import TOP1_FILE, reject_threshold, write_top1
from det_calib.tasks.contract import TaskRun

log = logging.getLogger(__name__)

REJECT_TARGETS = (0.9, 0.95, 0.99)
"""Accuracies among answered images the run certifies a reject threshold for."""
REJECT_DELTA = 0.1
"""Each reject threshold's guarantee holds with probability at least ``1 - REJECT_DELTA``."""

__all__ = ["RUN", "calibrate_classifier", "classify_data_for", "run_classify_cli"]


def calibrate_classifier(
    model: str | Path,
    data: str | Path,
    out: str | Path,
    *,
    fit_split: str = "val",
    eval_split: str = "test",
    method: str = "auto",
    seed: int = 0,
    imgsz: int | None = None,
    limit: int | None = None,
    val: bool = True,
) -> dict:
    """Calibrate a classify model on a folder-per-class dataset; returns the written record."""
    from ultralytics import YOLO

    out = Path(out)
    yolo = YOLO(str(model), task=CLASSIFY)
    if not answers_per_image(yolo.task):
        raise InputError(
            f"{model} is a `{yolo.task}` model: a folder-per-class dataset needs a classify model"
        )
    names = tuple(str(n) for _, n in sorted(yolo.names.items()))
    splits = {s: read_class_split(data, s) for s in (fit_split, eval_split)}
    for s in splits.values():
        check_model_classes(s, names)
    picks = {s: _limited(sp.labels, limit, seed) for s, sp in splits.items()}
    caps = {
        s: capture_classify(yolo, [splits[s].paths[i] for i in picks[s]], imgsz=imgsz)
        for s in splits
    }
    y_fit, y_eval = (splits[s].labels[picks[s]] for s in (fit_split, eval_split))
    choice = (
        choose_classifier_map(caps[fit_split].logits, y_fit, seed=seed)
        if method == "auto"
        else None
    )
    chosen = choice.method if choice else method
    if chosen not in MULTICLASS_METHODS:
        raise InputError(
            f"unknown --method {method!r} for a classify model: choose auto or one of "
            f"{', '.join(MULTICLASS_METHODS)}"
        )
    mapping = fit_multiclass(chosen, caps[fit_split].logits, y_fit)
    raw = evaluate_classifier(caps[eval_split].probs, y_eval, seed=seed)
    calibrated = evaluate_classifier(mapping.proba(caps[eval_split].logits), y_eval, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    ckpt, p_deployed = _deploy(model, out, mapping, caps[eval_split], imgsz)
    deployed = evaluate_classifier(p_deployed, y_eval, seed=seed)
    p_fit = mapping.proba(caps[fit_split].logits)
    record = {
        "task": CLASSIFY,
        "model": str(model),
        "data": str(data),
        "fit_split": fit_split,
        "eval_split": eval_split,
        "images": {fit_split: int(y_fit.size), eval_split: int(y_eval.size)},
        "names": list(names),
        "method": chosen,
        "map": mapping.to_dict(),
        "keeps_top1": mapping.keeps_top1,
        "choice": None
        if choice is None
        else {"nll": choice.nll, "se": choice.se, "folds": choice.folds, "repeats": choice.repeats},
        "eval": {
            "raw": raw.to_dict(),
            "calibrated": calibrated.to_dict(),
            "deployed": deployed.to_dict(),
        },
        "top1_changed": _top1_changed(mapping, caps[eval_split].logits),
        "deployed_as": "calibrated.pt"
        if ckpt
        else "classifier_map.json applied to the engine's log-probabilities",
        "val": _val_pair(model, ckpt, data, eval_split, imgsz)
        if val and ckpt and limit is None
        else None,
        "reject": _reject_rules(p_fit, y_fit, p_deployed, y_eval),
    }
    # the page's plots load matplotlib, which the command line must not load before a detector's first image
    # (it asks every task whether the run is its own, this module included)
    from det_calib.tasks.classify.report_page import write_classifier_report

    write_classifier_report(out, record, caps[eval_split].probs, p_deployed, y_eval)
    write_top1(
        out / TOP1_FILE,
        {
            fit_split: (caps[fit_split], p_fit, y_fit),
            eval_split: (caps[eval_split], p_deployed, y_eval),
        },
    )
    write_json(out / "classifier_map.json", mapping.to_dict())
    write_json(out / "calibration.json", record)
    write_text(out / "summary.md", summary_markdown(record))
    return record


def _limited(labels: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """Indices of the images to use: all, or ``limit`` drawn at random (sorted)."""
    if limit is None or limit >= labels.size:
        return np.arange(labels.size)
    return np.sort(np.random.default_rng(seed).choice(labels.size, size=limit, replace=False))


def _deploy(
    model: str | Path, out: Path, mapping, cap, imgsz: int | None
) -> tuple[Path | None, np.ndarray]:
    """A ``.pt`` model: ``calibrated.pt`` written and run by plain Ultralytics; its class probabilities on
    the eval images. An export (no weights to fold into): no checkpoint, and the map applied to the
    engine's log-probabilities, as a user chains ``classifier_map.json`` after it."""
    if Path(model).suffix != ".pt":
        return None, mapping.proba(cap.logits)
    ckpt = write_classify_checkpoint(model, out / "calibrated.pt", mapping)
    return ckpt, capture_classify(ckpt, cap.paths, imgsz=imgsz).probs


def _reject_rules(
    p_fit: np.ndarray, y_fit: np.ndarray, p_eval: np.ndarray, y_eval: np.ndarray
) -> list[dict]:
    """The reject option at each of :data:`REJECT_TARGETS` (certified on the fit split's calibrated
    scores at :data:`REJECT_DELTA`), with what it gives on the eval split (deployed scores)."""
    rules = []
    for target in REJECT_TARGETS:
        r = reject_threshold(
            p_fit.max(1), p_fit.argmax(1) == y_fit, target=target, delta=REJECT_DELTA
        )
        on = p_eval.max(1) >= r.threshold if r.certified else np.zeros(y_eval.size, bool)
        rules.append(
            {
                **encode(r),
                "eval_answered": float(on.mean()),
                "eval_accuracy": float((p_eval.argmax(1) == y_eval)[on].mean())
                if on.any()
                else None,
            }
        )
    return rules


def _top1_changed(mapping, logits: np.ndarray) -> int:
    """Images whose top-1 class the map changes."""
    return int(np.sum(mapping.apply(logits).argmax(1) != logits.argmax(1)))


def _val_pair(
    model: str | Path, ckpt: Path, data: str | Path, split: str, imgsz: int | None
) -> dict:
    before, after = classify_val(model, data, split, imgsz), classify_val(ckpt, data, split, imgsz)
    return {
        "raw": before,
        "calibrated": after,
        "identical": before["top1"] == after["top1"] and before["top5"] == after["top5"],
    }


def run_classify_cli(args) -> int:
    """``det-calib calibrate --data FOLDER``: a classify run from the command line's settings."""
    unsupported = [
        flag
        for flag, on in (
            ("--per-class", args.per_class),
            ("--boxes", getattr(args, "boxes", None)),
            ("--detections", getattr(args, "detections", None)),
            # a detector's options: boxes, their heads, their match and their conf threshold
            ("--size-maps", getattr(args, "size_maps", False)),
            ("--target", getattr(args, "target", "correct") != "correct"),
            ("--head", getattr(args, "head", "auto") != "auto"),
            ("--iou", getattr(args, "iou", 0.5) != 0.5),
            ("--match", getattr(args, "match", "auto") != "auto"),
            ("--conf", getattr(args, "conf", None) not in (None, [], [0.25], (0.25,))),
        )
        if on
    ]
    if unsupported:
        raise InputError(f"{', '.join(unsupported)} is not available for a classify model")
    method = args.method if args.method in ("auto", *MULTICLASS_METHODS) else None
    if method is None:
        raise InputError(
            f"--method {args.method} is a detector's map: a classify model takes auto, "
            f"{', '.join(MULTICLASS_METHODS)}"
        )
    if args.model is None:
        raise InputError(
            "--data names a folder-per-class dataset: give its classify model with --model"
        )
    record = calibrate_classifier(
        args.model,
        args.data,
        args.out,
        fit_split=args.fit_split or "val",
        eval_split=args.eval_split or "test",
        method=method,
        seed=args.seed,
        imgsz=args.imgsz,
        limit=args.limit,
        val=args.run_val,
    )
    print(summary_markdown(record).rstrip("\n"))
    written = ("calibrated.pt, " if record["deployed_as"] == "calibrated.pt" else "") + (
        "calibration.json, classifier_map.json, top1.parquet, report.html, report.md, summary.md "
        "(and figures/)"
    )
    print(f"wrote {written} to {args.out}")
    return 0


def classify_data_for(model: str | Path | None, data: str | Path | None) -> Path | None:
    """The classification data a ``calibrate`` run reads, or None for a detection run: ``data`` when it
    is a folder (of class folders), else the demo classifier's crops (rendered on first use) when
    ``model`` is the demo classifier and no data is named."""
    if data is not None:
        return Path(data) if Path(data).is_dir() else None
    try:
        demo = demo_task_model("classify")
    except InputError:  # no demo files beside the package
        return None
    if (
        model is None
        or not Path(model).is_file()
        or not demo.is_file()
        or Path(model).resolve() != demo.resolve()
    ):
        return None
    return classify_root(cache_dir())


def _calibrate(args, folder: Path) -> int:
    args.data = folder  # a folder of class folders: a classify model's data
    return run_classify_cli(args)


RUN = TaskRun(claims=lambda args: classify_data_for(args.model, args.data), run=_calibrate)
"""``calibrate``'s run of a classify model: claimed where ``--data`` is a folder (of class folders), or where the
model is the demo classifier and no data is named (its crops)."""

"""``det-calib thresholds`` of a classify run: the reject threshold at the accuracy the user asks for.

A classifier answers an image only when its calibrated top-1 probability reaches the threshold and
defers the rest (:mod:`det_calib.tasks.classify.thresholds_reject`). ``calibrate`` certifies the
thresholds for accuracies 0.90, 0.95 and 0.99 at delta 0.1; this run certifies the one asked for
(``--target-precision``, read as the accuracy among answered images; ``--delta``) on the same fit split
images, from the run's ``top1.parquet``, and reports what it gives on the eval split (the deployed
model's answers). It writes ``thresholds.json`` into the run folder. Options that belong to boxes
(recall, false positives per image, per-class thresholds, class sets, the e2e head) get one line.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from det_calib.codec import encode
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.tasks.classify.task import is_classify_run
from det_calib.tasks.classify.thresholds_reject import read_top1, reject_threshold
from det_calib.tasks.contract import TaskRun

__all__ = ["RUN", "classify_thresholds"]

_BOX_ONLY = (
    ("--target-recall", "target_recall", None),
    ("--max-fp-per-image", "max_fp_per_image", None),
    ("--per-class", "per_class", False),
    ("--class-sets", "class_sets", None),
    ("--guarantee", "guarantee", None),
    ("--fp-cap", "fp_cap", None),
    ("--head e2e", "head", "nms"),
    ("--threshold-unit", "threshold_unit", None),
    ("--threshold-fallback drop", "threshold_fallback", "global"),
    ("--precision-unit", "precision_unit", None),
)
"""``thresholds``' options that speak of boxes, each with the value it has when not given."""


def classify_thresholds(run_dir: str | Path, record: dict, *, target: float, delta: float) -> dict:
    """The reject threshold certified at accuracy ``target`` with probability ``1 - delta`` on the run's
    fit split, with the share answered and the accuracy reached on the fit and eval splits.

    Raises:
        InputError: ``target`` or ``delta`` outside (0, 1), or the run has no ``top1.parquet``.
    """
    fit, ev = record["fit_split"], record["eval_split"]
    conf_fit, right_fit = read_top1(run_dir, fit)
    conf_eval, right_eval = read_top1(run_dir, ev)
    rule = reject_threshold(conf_fit, right_fit, target=target, delta=delta)
    on = conf_eval >= rule.threshold if rule.certified else np.zeros(conf_eval.size, bool)
    return {
        "task": record["task"],
        "kind": "reject option",
        **encode(rule),
        "fit_split": fit,
        "fit_images": int(conf_fit.size),
        "eval_split": ev,
        "eval_images": int(conf_eval.size),
        "eval_answered": float(on.mean()),
        "eval_accuracy": float(right_eval[on].mean()) if on.any() else None,
    }


def _lines(doc: dict, run_dir: Path) -> list[str]:
    head = (
        f"reject option: accuracy >= {doc['target']:g} among answered images, with probability "
        f">= {1 - doc['delta']:g} over the fit split's {doc['fit_images']} images"
    )
    if not doc["certified"]:
        return [
            f"{head}: cannot certify on these images (no threshold of the grid 0.05 ... 0.95 "
            "passes its test); answer every image only with a person checking, or give a lower "
            "--target-precision",
            f"wrote {run_dir / 'thresholds.json'}",
        ]
    acc = doc["eval_accuracy"]
    return [
        f"{head}: answer when the top-1 probability >= {doc['threshold']:.2f}",
        f"  fit split `{doc['fit_split']}`: {doc['answered']:.1%} answered, accuracy "
        f"{doc['accuracy']:.4f}",
        f"  eval split `{doc['eval_split']}` (the deployed model): {doc['eval_answered']:.1%} "
        f"answered, accuracy " + ("n/a (none answered)" if acc is None else f"{acc:.4f}"),
        f"wrote {run_dir / 'thresholds.json'}",
    ]


def _run(args, record: dict) -> int:
    given = [flag for flag, name, unset in _BOX_ONLY if getattr(args, name, unset) != unset]
    if given:
        raise InputError(
            f"{', '.join(given)} is a detector's option: a classify run's thresholds take "
            "--target-precision (the accuracy among answered images) and --delta"
        )
    target, delta = float(args.target_precision), float(args.delta)
    if not (math.isfinite(target) and math.isfinite(delta)):
        raise InputError(f"Expected a finite target and delta, but got {target} and {delta}")
    doc = classify_thresholds(args.run_dir, record, target=target, delta=delta)
    write_json(Path(args.run_dir) / "thresholds.json", doc)
    print("\n".join(_lines(doc, Path(args.run_dir))))
    return 0


RUN = TaskRun(claims=lambda args: is_classify_run(args.run_dir), run=_run)
"""``thresholds``' run of a classify run's folder: claimed where the run's record is a classify run's."""

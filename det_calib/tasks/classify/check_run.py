"""``det-calib check`` of a classify run: does its calibration hold on labelled new images?

The run's calibrated model (``calibrated.pt``; for an export, the engine with the run's
``classifier_map.json`` applied) predicts the new images; two verdicts, each at ``alpha / 2``:

* **calibration**: calibration in the large (as many top-1 answers right as their confidences say:
  the Poisson-binomial z-test) and Hosmer–Lemeshow over 10 equal-mass bins of top-1 confidence,
  Bonferroni between the two. Images are independent units here (one answer each), so no image
  clustering enters.
* **accuracy**: top-1 accuracy on the new images against the run's eval split, a two-proportion
  z-test.

Exit codes are ``check``'s (:data:`~det_calib.check.check_record.EXIT_CODES`): 0 both hold, 3
calibration drifted, 4 accuracy changed, 5 both, 6 too few images to tell.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from det_calib.check.check_record import MIN_IMAGES
from det_calib.check.drift_tests import calibration_in_the_large, hosmer_lemeshow, normal_sf
from det_calib.errors import InputError
from det_calib.io import write_json, write_text
from det_calib.tasks import CLASSIFY
from det_calib.tasks.classify.capture_logits import capture_classify
from det_calib.tasks.classify.class_folders import check_model_classes, read_class_split
from det_calib.tasks.classify.softmax_maps import MultiClassMap
from det_calib.tasks.classify.task import is_classify_run
from det_calib.tasks.contract import TaskRun

__all__ = ["check_classify"]


def _map_of(record: dict) -> MultiClassMap:
    m = record["map"]
    return MultiClassMap(
        m["method"], np.asarray(m["weight"]), np.asarray(m["bias"]), m.get("temperature", 1.0)
    )


def _probs(run_dir: Path, record: dict, paths: list[Path], model: str | Path | None) -> np.ndarray:
    ckpt = run_dir / "calibrated.pt"
    if model is None and ckpt.is_file():
        return capture_classify(ckpt, paths).probs.astype(np.float64)
    cap = capture_classify(model or record["model"], paths)
    return _map_of(record).proba(cap.logits)


def check_classify(
    run_dir: str | Path,
    record: dict,
    *,
    data: str | Path,
    split: str | None,
    out: str | Path | None,
    model: str | Path | None = None,
    limit: int | None = None,
    alpha: float = 0.05,
) -> tuple[dict, int]:
    """Check the classify run in ``run_dir`` (its record ``record``) on ``data/split``; write
    ``check.json`` and ``check.md``. Returns the check's record and its exit code."""
    run_dir = Path(run_dir)
    if data is None or not Path(data).is_dir():
        raise InputError(
            "a classify run is checked on labelled new images: give --data a folder of class "
            "folders"
        )
    new = read_class_split(data, split or "test")
    check_model_classes(new, record["names"])
    idx = np.arange(len(new)) if limit is None else np.arange(min(limit, len(new)))
    paths, y = [new.paths[i] for i in idx], new.labels[idx]
    p = _probs(run_dir, record, paths, model)
    conf, right = p.max(axis=1), p.argmax(axis=1) == y
    ids = np.arange(y.size)
    citl, hl = calibration_in_the_large(conf, right, ids), hosmer_lemeshow(conf, right, ids)
    p_cal = min(1.0, 2 * min(citl.p_value, hl.p_value if hl else 1.0))
    ref = record["eval"]["deployed"]
    n0, a0, a1 = ref["images"], ref["top1"], float(right.mean())
    pooled = (a0 * n0 + a1 * y.size) / (n0 + y.size)
    se = math.sqrt(max(pooled * (1 - pooled) * (1 / n0 + 1 / y.size), 1e-300))
    p_acc = 2 * normal_sf(abs(a1 - a0) / se)
    too_few = y.size < MIN_IMAGES
    drifted, changed = (not too_few and p_cal <= alpha / 2), (not too_few and p_acc <= alpha / 2)
    code = 6 if too_few else 3 * drifted + 4 * changed - 2 * (drifted and changed)  # 0, 3, 4 or 5
    result = {
        "task": CLASSIFY,
        "run": str(run_dir),
        "data": str(data),
        "split": new.name,
        "images": int(y.size),
        "expected_right": citl.expected,
        "right": int(right.sum()),
        "citl_p": citl.p_value,
        "hl_p": hl.p_value if hl else None,
        "calibration_p": p_cal,
        "calibration": "drifted" if drifted else ("too few images" if too_few else "holds"),
        "top1": a1,
        "top1_run": a0,
        "accuracy_p": p_acc,
        "accuracy": "changed" if changed else "holds",
        "alpha": alpha,
        "exit_code": code,
    }
    target = Path(out) if out else run_dir / f"check-{Path(data).name}-{new.name}"
    target.mkdir(parents=True, exist_ok=True)
    write_json(target / "check.json", result)
    write_text(target / "check.md", "\n".join(check_lines(result)) + "\n")
    return result, code


def check_lines(r: dict) -> list[str]:
    """The check's console lines (also ``check.md``)."""
    return [
        f"classify check on `{r['split']}` of {r['data']} ({r['images']} images)",
        f"calibration: {r['calibration']}: {r['right']} top-1 answers right against "
        f"{r['expected_right']:.1f} "
        f"expected (calibration in the large p {r['citl_p']:.3g}"
        + (f", Hosmer-Lemeshow p {r['hl_p']:.3g}" if r["hl_p"] is not None else "")
        + ")",
        f"accuracy: {r['accuracy']}: top-1 {r['top1_run']:.4f} on the run's eval split -> "
        f"{r['top1']:.4f} here "
        f"(p {r['accuracy_p']:.3g}); each verdict at alpha/2 = {r['alpha'] / 2:g}",
    ]


def run_check_cli(args, record: dict) -> int:
    """``det-calib check RUN --data FOLDER`` for a classify run: print the verdicts, return the exit code."""
    for flag, on in (
        ("--images", args.images),
        ("--boxes", args.boxes),
        ("--detections", args.detections),
    ):
        if on:
            raise InputError(
                f"{flag} is not available for a classify run: give --data a folder of class folders"
            )
    result, code = check_classify(
        args.run_dir,
        record,
        data=args.data,
        split=args.split,
        out=args.out,
        model=args.model,
        limit=args.limit,
        alpha=args.alpha,
    )
    print("\n".join(check_lines(result)))
    return code


RUN = TaskRun(claims=lambda args: is_classify_run(args.run_dir), run=run_check_cli)
"""``check``'s run of a classify run's folder: claimed where the run's record is a classify run's."""

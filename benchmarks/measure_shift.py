"""How each calibrator's kept-set calibration holds as the demo's test split is corrupted.

The corruption protocol used for detectors (ImageNet-C / COCO-C) at demo scale: the run's
detector captures the clean test split and its shifted copies (``det_calib.demo.shifted_data_yaml``:
blur, noise, contrast, JPEG at severities 1-5) once each; every calibrator the run compared
(``calibration_candidates``, with ``--method auto``; the deployed one otherwise) is applied to the
same logits, and for the boxes each keeps at the run's lowest conf threshold this prints: kept
boxes, observed correct vs expected (the sum of calibrated confidences), the z and p of
calibration in the large, the Hosmer-Lemeshow p, kept-set ECE against its sampling floor's 95%
range, and the detector's recall and mAP50 (the same for every calibrator of a global map).

    python benchmarks/measure_shift.py --run det_calib_out --head nms --severities 1 3 5
    python benchmarks/measure_shift.py --run det_calib_out --limit 100 --kinds blur noise

Prints a Markdown table (and writes it with ``--out FILE.md``; with ``--doc``, to
``docs/generated/measure_shift.md``, the table docs/check.md includes).
"""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.calibrators.base import calibrated_logits
from det_calib.calibrators.identity import Identity
from det_calib.calibrators.registry import calibrator_from_dict
from det_calib.check import drift_tests as drift
from det_calib.demo import demo_data_yaml, shifted_data_yaml
from det_calib.demo.shifts import CORRUPTIONS
from det_calib.evaluation.map_check import coco_map
from det_calib.metrics.operating_point import kept_ece, kept_ece_floor
from det_calib.numeric import sigmoid
from det_calib.record.calibrator_record import calibrator_of


def calibrators(run, head: str) -> dict[str, object]:
    """Name -> fitted calibrator: every candidate the run scored on its eval split, else the deployed one."""
    out: dict[str, object] = {}
    for c in run.head(head).candidates or []:
        d = (c.eval or {}).get("calibrator")
        if c.calibrator.method == "none":
            out["none"] = Identity().fit(None, None)
        elif isinstance(d, dict):
            out[c.calibrator.method] = calibrator_from_dict(d)
    rec = run.head(head).calibrator
    out.setdefault(f"{rec.method} (deployed)", calibrator_of(rec))
    deployed = next(
        (c.calibrator.method for c in run.head(head).candidates or [] if c.selected), None
    )
    return {f"{k} (deployed)" if k == deployed else k: v for k, v in out.items()}


def rows_of(
    label: str, boxes: pl.DataFrame, sp, cals: dict[str, object], conf: float, n_bins: int
) -> list[list[str]]:
    b = boxes.filter(~pl.col("ignore"))
    z, cls = b["logit"].to_numpy().astype(np.float64), b["cls"].to_numpy()
    y, img = b["correct"].to_numpy().astype(bool), b["image_id"].to_numpy()
    m = coco_map(boxes, sp.gt, sp.sizes, boxes["conf"].to_numpy().astype(np.float64))["map50"]
    n_gt = int(sp.gt.filter(~pl.col("crowd")).height)
    rows = []
    for name, cal in cals.items():
        p = (
            b["conf"].to_numpy().astype(np.float64)
            if isinstance(cal, Identity)
            else sigmoid(calibrated_logits(cal, z, cls))
        )
        k = p > conf
        c = drift.calibration_in_the_large(p[k], y[k], img[k])
        hl = drift.hosmer_lemeshow(p[k], y[k], img[k])
        e = kept_ece(p, y, threshold=conf, n_bins=n_bins)
        f = kept_ece_floor(p, threshold=conf, n_bins=n_bins)
        at = "yes" if f is not None and e <= f.high else "no"
        rows.append(
            [
                label,
                name,
                f"{c.boxes}",
                f"{c.observed} / {c.expected:.1f}",
                f"{c.z:+.2f}",
                _p(c.p_value),
                _p(hl.p_value) if hl else "n/a",
                f"{e:.4f} [{f.low:.4f}, {f.high:.4f}] {at}" if f else "n/a",
                f"{c.observed / n_gt:.3f}" if n_gt else "n/a",
                f"{m:.3f}",
            ]
        )
    return rows


def _p(p: float) -> str:
    return "n/a" if p is None or not math.isfinite(p) else ("<1e-4" if p < 1e-4 else f"{p:.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--run", type=Path, default=Path("det_calib_out"), help="a calibrate run on the demo"
    )
    ap.add_argument("--head", default="nms")
    ap.add_argument("--kinds", nargs="+", default=list(CORRUPTIONS), choices=list(CORRUPTIONS))
    ap.add_argument("--severities", nargs="+", type=int, default=[1, 3, 5])
    ap.add_argument("--limit", type=int, help="first N images of each split")
    ap.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    ap.add_argument(
        "--doc", action="store_true", help="also write it to docs/generated/measure_shift.md"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from det_calib.check.run_check import new_boxes

    splits = [("clean test", demo_data_yaml())] + [
        (f"{k}-{s}", shifted_data_yaml(k, s)) for k in args.kinds for s in args.severities
    ]
    header = [
        "split",
        "calibrator",
        "kept",
        "correct / expected",
        "z",
        "p",
        "HL p",
        "kept ECE [floor range] at floor",
        "recall",
        "mAP50",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, yml in splits:
        run, sp, tables = new_boxes(args.run, yml, "test", heads=[args.head], limit=args.limit)
        cals = calibrators(run, args.head)
        conf = float(min(run.settings.conf_thresholds))
        for r in rows_of(label, tables[args.head], sp, cals, conf, run.settings.ece_bins):
            lines.append("| " + " | ".join(r) + " |")
        print("\n".join(lines[-len(cals) :]), flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table("measure_shift", text)
    print(text)


if __name__ == "__main__":
    main()

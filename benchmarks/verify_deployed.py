"""The kept-set ECE of a run's deployed ``calibrated.pt``, measured through plain Ultralytics.

For each head of a finished ``det-calib calibrate`` run, a child Python process that does not
import det_calib loads ``calibrated.pt`` and the original model with ``ultralytics.YOLO`` and runs
``predict`` (one image at a time, ``conf`` = the run's lowest threshold, ``nms=False`` for the
one-to-one head) over the run's eval split (as many images as the run used: ``--limit`` runs use
the first N); this process then matches the kept boxes to the ground truth (one-to-one, COCO
protocol, the run's IoU) and prints the ECE (the run's bins) of the kept boxes of both models,
next to the figures the run itself reported (``operating_before`` / ``operating_after``). The
child reports whether any ``det_calib`` module was loaded in it; the script stops if one was.

Run from the repository root::

    python3 benchmarks/verify_deployed.py det_calib_out
    python3 benchmarks/verify_deployed.py runs/limit64 runs/limit128 det_calib_out
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

CHILD = r"""
import json, sys
import numpy as np
from ultralytics import YOLO
args = json.loads(sys.argv[1])
out = {}
for tag, path in (("raw", args["original"]), ("calibrated", args["calibrated"])):
    model = YOLO(path)
    rows = []
    for i, img in enumerate(args["images"]):
        r = model.predict(img, conf=args["conf"], nms=args["nms"], imgsz=args["imgsz"], verbose=False)[0]
        b = r.boxes
        for xyxy, c, k in zip(b.xyxy.cpu().numpy().tolist(), b.conf.cpu().numpy().tolist(),
                              b.cls.cpu().numpy().astype(int).tolist()):
            rows.append([i, *xyxy, c, k])
    out[tag] = rows
out["det_calib_loaded"] = any(m == "det_calib" or m.startswith("det_calib.") for m in sys.modules)
json.dump(out, open(args["out"], "w"))
"""


def deployed_ece(run: Path) -> list[str]:
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.metrics.calibration import ece
    from det_calib.record.run_result import RunResult

    res = RunResult.read(run / "calibration.json")
    st = res.settings
    boxes = pl.read_parquet(run / "boxes.parquet", columns=["split", "image_id"])
    n = int(boxes.filter(pl.col("split") == st.eval_split)["image_id"].max()) + 1
    sp = load_split(load_data_yaml(res.data), st.eval_split, limit=n)
    thr = min(st.conf_thresholds)
    lines = []
    for head in res.heads:
        with tempfile.TemporaryDirectory() as tmp:
            spec = {
                "original": res.model,
                "calibrated": str(run / "calibrated.pt"),
                "conf": thr,
                "nms": False if head == "e2e" else None,
                "imgsz": st.imgsz,
                "images": [str(p) for p in sp.images],
                "out": str(Path(tmp) / "pred.json"),
            }
            subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], check=True, cwd=tmp)
            pred = json.loads((Path(tmp) / "pred.json").read_text())
        if pred["det_calib_loaded"]:
            raise SystemExit(
                "the child process imported det_calib: the check is not of plain Ultralytics"
            )
        figures = {}
        for tag in ("raw", "calibrated"):
            a = np.array(pred[tag], dtype=np.float64).reshape(-1, 7)
            t = pl.DataFrame(
                {
                    "image_id": a[:, 0].astype(np.int64),
                    "x1": a[:, 1],
                    "y1": a[:, 2],
                    "x2": a[:, 3],
                    "y2": a[:, 4],
                    "conf": a[:, 5],
                    "cls": a[:, 6].astype(np.int32),
                }
            )
            m = match_boxes(t, sp.gt, iou=st.iou_match, loc_iou=st.loc_iou_match)
            m = m.filter(~pl.col("ignore") & (pl.col("conf") > thr))
            figures[tag] = (
                m.height,
                ece(m["conf"].to_numpy(), m["correct"].to_numpy(), n_bins=st.ece_bins),
            )
        ev = res.head(head).eval
        o0, o1 = ev.operating_before[0], ev.operating_after[0]
        rec = res.head(head).calibrator
        (n0, e0), (n1, e1) = figures["raw"], figures["calibrated"]
        lines.append(
            f"{run} [{head}] {rec.method if rec else '?'}: {n} eval images; plain Ultralytics "
            "predict at conf "
            f"{thr:g}: raw {n0} boxes ECE {e0:.4f}, calibrated.pt {n1} boxes ECE {e1:.4f}, ratio "
            f"{e1 / e0:.3f}; the run reported raw {o0.boxes} / {o0.ece:.4f}, calibrated {o1.boxes} "
            "/ "
            f"{o1.ece:.4f}; pycocotools mAP identical: {ev.map_identical}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="finished run folders")
    args = ap.parse_args()
    for run in args.runs:
        for line in deployed_ece(run):
            print(line, flush=True)


if __name__ == "__main__":
    main()

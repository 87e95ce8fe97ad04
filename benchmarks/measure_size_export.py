"""Where a size map re-ranks: the calibrated export's selection against the after-selection one (issue 42).

A size-conditioned map (``size-platt``) moves boxes of one class past each other, so *where* it is applied
changes which boxes a detector keeps:

- **in the calibrated export** (``calibrated.onnx``): on the one-to-many head every anchor's class scores are
  calibrated **before** Ultralytics' NMS, so NMS ranks, suppresses and thresholds by the calibrated scores;
  on the one-to-one head the map is applied to the rows of the engine's top-k (the top-k itself ranks by the
  raw scores), before Ultralytics' conf filter;
- **after the selection** (:func:`det_calib.attach`, :func:`det_calib.apply_calibrator`, and the run's own
  ``calibrated`` column): the detector's boxes as its raw scores select them (NMS or top-k at the capture
  floor), then rescored and thresholded.

For each head of the demo detector this exports it to ONNX (``nms=False`` for the one-to-one head), runs
``det-calib calibrate --model EXPORT --method size-platt`` on the demo, then runs plain Ultralytics ``predict``
(det_calib blocked in the child process, ``conf=0.001``) on the run's ``calibrated.onnx`` over the eval split,
and scores three box sets the same way: the raw engine's boxes (the run's capture), the after-selection
calibrated boxes (the run's ``calibrated`` column) and the calibrated export's boxes. Figures: COCO mAP50-95 and
mAP50 (det_calib's COCO engine, pycocotools' figures), kept boxes at 0.25 and their ECE (15 bins, IoU 0.5) and
LaECE_0 (25 bins), and how many boxes kept at 0.25 one selection has that the other has not.

Run from the repository root (a few minutes on 2 cores for the full demo)::

    PYTHONPATH=. python3 benchmarks/measure_size_export.py --doc
    PYTHONPATH=. python3 benchmarks/measure_size_export.py --limit 64 --work /tmp/size_export

``--doc`` writes docs/generated/size_export.md (included by docs/size_and_hook.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "det_calib" or name.startswith("det_calib."):
            raise ImportError("det_calib is blocked in this process")
sys.meta_path.insert(0, Block())
from ultralytics import YOLO
args = json.loads(sys.argv[1])
model = YOLO(args["model"], task="detect")
rows = []
for i, img in enumerate(args["images"]):
    b = model.predict(img, conf=args["conf"], verbose=False)[0].boxes
    for xyxy, c, k in zip(b.xyxy.cpu().numpy().tolist(), b.conf.cpu().numpy().tolist(),
                          b.cls.cpu().numpy().astype(int).tolist()):
        rows.append([i, *xyxy, c, k])
json.dump({"rows": rows, "det_calib_loaded": any(m == "det_calib" or m.startswith("det_calib.") for m in sys.modules)},
          open(args["out"], "w"))
"""

THRESHOLD = 0.25


def export(model: Path, head: str, folder: Path) -> Path:
    """The demo detector exported to ONNX with the head (``nms=False``: the one-to-one head)."""
    from ultralytics import YOLO

    folder.mkdir(parents=True, exist_ok=True)
    pt = folder / "demo.pt"
    shutil.copy(model, pt)
    return Path(
        YOLO(str(pt)).export(
            format="onnx", **({"nms": False} if head == "e2e" else {}), verbose=False
        )
    )


def calibrate(onnx: Path, data: str, limit: int | None, out: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "det_calib.cli",
        "calibrate",
        "--model",
        str(onnx),
        "--data",
        data,
        "--method",
        "size-platt",
        "--out",
        str(out),
        "-q",
        "--no-report",
        *(["--limit", str(limit)] if limit else []),
    ]
    print("$", " ".join(["det-calib", *cmd[3:]]), flush=True)
    subprocess.run(cmd, check=True)


def graph_boxes(model: Path, images: list[str]) -> pl.DataFrame:
    """Plain Ultralytics predict (det_calib blocked) of the calibrated export at conf 0.001, as a box table."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {
            "model": str(model),
            "images": images,
            "conf": 0.001,
            "out": str(Path(tmp) / "p.json"),
        }
        subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], check=True, cwd=tmp)
        pred = json.loads((Path(tmp) / "p.json").read_text())
    if pred["det_calib_loaded"]:
        raise SystemExit(
            "the child process imported det_calib: the check is not of plain Ultralytics"
        )
    a = np.array(pred["rows"], dtype=np.float64).reshape(-1, 7)
    return pl.DataFrame(
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


def figures(boxes: pl.DataFrame, split) -> dict:
    """mAP50-95, mAP50, and the kept set at 0.25: boxes, ECE, LaECE_0, and the kept boxes' keys."""
    from measure_targets_deployed import kept_figures

    from det_calib.evaluation.coco_engine import table_maps
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.metrics.operating_point import kept_ece

    m = table_maps(boxes, split.gt, [boxes["conf"].to_numpy()])[0]
    kept = boxes.filter(pl.col("conf") > THRESHOLD)
    rows = kept.select("image_id", "x1", "y1", "x2", "y2", "conf", "cls").to_numpy().tolist()
    n, la, _ = kept_figures(rows, split.gt)
    matched = match_boxes(kept, split.gt, iou=0.5, loc_iou=0.1).filter(~pl.col("ignore"))
    e = kept_ece(
        matched["conf"].to_numpy(), matched["correct"].to_numpy(), threshold=THRESHOLD, n_bins=15
    )
    keys = {
        (int(i), int(k), round(x1, 2), round(y1, 2), round(x2, 2), round(y2, 2))
        for i, x1, y1, x2, y2, _, k in rows
    }
    return {
        "map": m["map50_95"],
        "map50": m["map50"],
        "kept": n,
        "ece": e,
        "laece0": la,
        "keys": keys,
    }


def measure_head(head: str, model: Path, data: str, limit: int | None, work: Path) -> list[str]:
    """The three rows of one head: raw engine, after-selection calibrated, the calibrated export."""
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.record.run_result import RunResult

    onnx = export(model, head, work / f"export_{head}")
    run = work / f"run_{head}"
    calibrate(onnx, data, limit, run)
    res = RunResult.read(run / "calibration.json")
    ev = res.settings.eval_split
    table = pl.read_parquet(run / "boxes.parquet").filter(
        (pl.col("split") == ev) & (pl.col("head") == head)
    )
    n = int(table["image_id"].max()) + 1
    split = load_split(load_data_yaml(res.data), ev, limit=n)
    raw = figures(table, split)
    after = figures(table.with_columns(conf=pl.col("calibrated")), split)
    graph = figures(graph_boxes(run / "calibrated.onnx", [str(p) for p in split.images]), split)
    where = {
        "nms": "in the graph, before NMS",
        "e2e": "in the graph, on the top-k rows, before the conf filter",
    }[head]
    sets = [
        ("none (raw engine)", raw, ""),
        (
            "after the selection (attach, apply_calibrator)",
            after,
            f"{len(after['keys'] - graph['keys'])}",
        ),
        (f"calibrated.onnx: {where}", graph, f"{len(graph['keys'] - after['keys'])}"),
    ]
    return [
        f"| {head} | {name} | {n} | {f['map']:.4f} | {f['map50']:.4f} | {f['kept']} | "
        f"{f['ece']:.4f} | "
        f"{f['laece0']:.4f} | {only} |"
        for name, f, only in sets
    ]


HEADER = (
    "| head | size-platt applied | images | mAP50-95 | mAP50 | kept at 0.25 | kept-set ECE | "
    "kept-set LaECE_0 | "
    "kept boxes the other selection has not |\n|---|---|---:|---:|---:|---:|---:|---:|---|"
)


def main() -> None:
    from det_calib.demo import demo_data_yaml, demo_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--limit", type=int, default=None, help="images per split (default: the whole demo)"
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="where the exports and runs go (default: a temporary folder)",
    )
    ap.add_argument("--doc", action="store_true", help="write docs/generated/size_export.md")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        rows = [
            r
            for head in ("nms", "e2e")
            for r in measure_head(head, demo_model(), str(demo_data_yaml()), a.limit, work)
        ]
    body = HEADER + "\n" + "\n".join(rows)
    print(body)
    if a.doc:
        from doc_table import write_doc_table

        command = (
            "python3 benchmarks/measure_size_export.py"
            + (f" --limit {a.limit}" if a.limit else "")
            + " --doc"
        )
        write_doc_table(
            "size_export",
            body,
            command=command,
            note="The demo detector's ONNX exports, `--method size-platt`, the demo's test split; plain "
            "Ultralytics `predict` of calibrated.onnx at conf 0.001; kept set: conf > 0.25; ECE 15 "
            "bins "
            "at IoU 0.5, LaECE_0 25 bins at IoU >= 0.",
        )


if __name__ == "__main__":
    main()

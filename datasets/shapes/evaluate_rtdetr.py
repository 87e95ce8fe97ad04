"""Figures for the demo RT-DETR's model card: capture = predict, and the deployed kept-set ECE.

Usage (from the repository root, after the default run on the demo RT-DETR):

    det-calib calibrate --model datasets/shapes/rtdetr_shapes.pt --data "$(det-calib demo-data)" \\
        --map-engine pycocotools --out rtdetr_out
    python3 datasets/shapes/evaluate_rtdetr.py rtdetr_out [--split test]

Prints, on the split: whether the run's captured boxes equal plain ``RTDETR(pt).predict`` (one image at a
time) bit for bit (boxes, classes, confs), and the ECE (15 bins, IoU 0.5) of the boxes kept at conf 0.25 by
plain Ultralytics predict of the original and of ``calibrated.pt``, with the sampling floor of the latter.
The mAP figures (pycocotools, Ultralytics' RTDETRValidator) are in the run's summary.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("YOLO_VERBOSE", "False")


def _predict(model_path: Path, images: list[str], names: list[str], ids):
    """Plain Ultralytics predict, one image at a time, as a box table (conf floor 0.001)."""
    import numpy as np
    import polars as pl
    from ultralytics import YOLO

    model = YOLO(str(model_path))
    rows = []
    for path, name, i in zip(images, names, ids, strict=True):
        d = (
            model.predict(path, conf=0.001, verbose=False)[0]
            .boxes.data.cpu()
            .numpy()
            .astype(np.float64)
        )
        rows.append(
            pl.DataFrame(
                {
                    "image": [name] * len(d),
                    "image_id": np.full(len(d), i, np.int64),
                    "x1": d[:, 0],
                    "y1": d[:, 1],
                    "x2": d[:, 2],
                    "y2": d[:, 3],
                    "conf": d[:, 4],
                    "cls": d[:, 5].astype(np.int32),
                }
            )
        )
    return pl.concat(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "run", type=Path, help="the output folder of det-calib calibrate on the demo RT-DETR"
    )
    ap.add_argument("--split", default="test")
    args = ap.parse_args()

    import numpy as np
    import polars as pl

    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.metrics.operating_point import kept_ece, kept_ece_floor
    from det_calib.record.run_folder import load_run

    run = load_run(args.run)
    sp = load_split(load_data_yaml(run.result.data), args.split)
    images = [str(p) for p in sp.images]
    names, ids = sp.image_names(), np.arange(len(images))
    raw = _predict(Path(run.result.model), images, names, ids)
    captured = run.boxes.filter((pl.col("split") == args.split) & (pl.col("head") == "detr")).sort(
        "image_id", maintain_order=True
    )
    if captured.height:
        cols = ["x1", "y1", "x2", "y2"]
        same = (
            captured.height == raw.height
            and np.array_equal(
                captured.select(cols).to_numpy().astype(np.float32),
                raw.select(cols).to_numpy().astype(np.float32),
            )
            and np.array_equal(
                captured["conf"].to_numpy().astype(np.float32),
                raw["conf"].to_numpy().astype(np.float32),
            )
            and np.array_equal(captured["cls"].to_numpy(), raw["cls"].to_numpy())
        )
        print(f"capture = predict bit for bit on `{args.split}` ({raw.height} boxes): {same}")
    deployed = _predict(args.run / "calibrated.pt", images, names, ids)
    for label, boxes in (("raw (original.pt)", raw), ("deployed (calibrated.pt)", deployed)):
        m = match_boxes(boxes, sp.gt, iou=0.5, loc_iou=0.1)
        conf, correct = m["conf"].to_numpy(), m["correct"].to_numpy().astype(float)
        floor = kept_ece_floor(conf, threshold=0.25)
        print(
            f"{label}: {int((conf > 0.25).sum())} boxes kept at 0.25, ECE(15 bins, IoU 0.5) "
            f"{kept_ece(conf, correct, threshold=0.25):.4f}; sampling floor "
            f"{'n/a' if floor is None else f'{floor.mean:.4f} [{floor.low:.4f}, {floor.high:.4f}]'}"
        )


if __name__ == "__main__":
    main()

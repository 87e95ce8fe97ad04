"""Figures for the demo detector's model card, on the test split, for both head modes.

Usage (from the repository root; a few minutes on CPU):

    python datasets/shapes/evaluate.py [--model datasets/shapes/yolo26n_shapes.pt] [--split test]

Prints a Markdown table: Ultralytics val mAP50 and mAP50-95 (conf 0.001), and how many boxes
above conf 0.25 are correct and incorrect (one-to-one matching at IoU 0.5).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("YOLO_VERBOSE", "False")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--split", default="test")
    args = ap.parse_args()

    import tempfile
    from pathlib import Path

    from det_calib.capture import capture
    from det_calib.data import load_data_yaml, load_split, write_split_yaml
    from det_calib.demo import demo_data_yaml, demo_model
    from det_calib.pipeline import match_boxes
    from det_calib.verify import ultralytics_val

    model = args.model or str(demo_model())
    ds = load_data_yaml(demo_data_yaml())
    sp = load_split(ds, args.split)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        yml = write_split_yaml(ds, sp, Path(tmp))
        for head, label in (("nms", "`nms=None` (one-to-many + NMS)"), ("e2e", "`nms=False` (one-to-one)")):
            m = ultralytics_val(model, yml, split="val", head=head)
            boxes = match_boxes(capture(model, sp.images, head=head, progress=False), sp, iou=0.5, loc_iou=0.1)
            kept = boxes.filter(boxes["conf"] > 0.25)
            ok = int(kept["correct"].sum())
            rows.append(f"| {label} | {m['map50']:.3f} | {m['map50_95']:.3f} | {ok} | {kept.height - ok} |")
    n_gt = sp.gt.height
    print(f"{args.split} split: {len(sp.images)} images, {n_gt} objects\n")
    print("| head mode | mAP50 | mAP50-95 | boxes > 0.25 correct | boxes > 0.25 incorrect |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

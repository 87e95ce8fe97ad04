"""Figures for the demo detector's model card, on the test split, for both head modes.

Usage (from the repository root; a few minutes on CPU):

    python datasets/shapes/evaluate.py [--model det_calib/demo/assets/yolo26n_shapes.pt] [--split test]

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

    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.demo import demo_data_yaml, model_figures

    sp = load_split(load_data_yaml(demo_data_yaml()), args.split)
    print(f"{args.split} split: {len(sp.images)} images, {sp.gt.height} objects\n")
    print("| head mode | mAP50 | mAP50-95 | boxes > 0.25 correct | boxes > 0.25 incorrect |")
    print("|---|---:|---:|---:|---:|")
    for head, label in (
        ("nms", "`nms=None` (one-to-many + NMS)"),
        ("e2e", "`nms=False` (one-to-one)"),
    ):
        f = model_figures(args.model, split=args.split, head=head)
        print(
            f"| {label} | {f['map50']:.3f} | {f['map50_95']:.3f} | {f['correct']} | "
            f"{f['incorrect']} |"
        )


if __name__ == "__main__":
    main()

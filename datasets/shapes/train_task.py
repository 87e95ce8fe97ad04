"""Train a demo model of another Ultralytics task (segment, pose, OBB) on the shapes dataset, on CPU.

Usage (from the repository root; about 70 minutes per model on one CPU core):

    python3 datasets/shapes/train_task.py --task segment   # writes det_calib/demo/assets/yolo26n_shapes_seg.pt
    python3 datasets/shapes/train_task.py --task pose      # writes det_calib/demo/assets/yolo26n_shapes_pose.pt
    python3 datasets/shapes/train_task.py --task obb       # writes det_calib/demo/assets/yolo26n_shapes_obb.pt

The data are the detection demo's images with the task's labels of each object's visible region
(``det_calib.tasks.segment.demo_labels``, ``det_calib.tasks.pose.demo_labels``,
``det_calib.tasks.obb.demo_labels``: dataset seed 0, the train split written on first use). The model is
YOLO26n of the task built from its yaml (``yolo26n-seg.yaml``, ``yolo26n-pose.yaml``,
``yolo26n-obb.yaml``); every tensor it shares with the demo detector (backbone, neck, box and class
branches of both heads) starts from ``yolo26n_shapes.pt``, which was trained on the same train split, so
only the task's own branch (mask coefficients and prototypes, keypoints, angle) starts from random
weights. That is how task models are usually made (from a detector's weights), and it takes under a
third of the detector's epochs here.

The weights kept are Ultralytics' ``best.pt`` (best fitness on the yaml's ``val`` split, which is
``calib``); ``test`` is never looked at. Training is not part of CI; the weights are committed
with their model card.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from recipe import cpu_recipe  # datasets/shapes/recipe.py: the settings every demo model shares

ASSETS = (
    Path(__file__).resolve().parents[2] / "det_calib" / "demo" / "assets"
)  # the demo's weights (package data)
SUFFIX = {"segment": "seg", "pose": "pose", "obb": "obb"}


def task_data_yaml(task: str) -> Path:
    """The demo's data.yaml with the task's labels, train split included."""
    from det_calib.demo import demo_data_yaml

    return demo_data_yaml(task=task, with_train=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(SUFFIX), required=True)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument(
        "--close-mosaic", type=int, default=3, help="last epochs trained without mosaic"
    )
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr0", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--init",
        default=str(ASSETS / "yolo26n_shapes.pt"),
        help="detector whose shared tensors start the model ('' for random weights)",
    )
    ap.add_argument("--project", default="/tmp/det_calib_train")
    args = ap.parse_args()
    stem = f"yolo26n_shapes_{SUFFIX[args.task]}"

    from ultralytics import YOLO

    data = task_data_yaml(args.task)
    t0 = time.time()
    model = YOLO(f"yolo26n-{SUFFIX[args.task]}.yaml")
    if args.init:
        model.load(args.init)  # copies every tensor whose name and shape match
    model.train(
        data=str(data),
        epochs=args.epochs,
        close_mosaic=args.close_mosaic,
        imgsz=args.imgsz,
        warmup_epochs=1,
        scale=0.3,  # as for the demo detector: 8-pixel objects must stay visible
        **cpu_recipe(
            batch=args.batch, lr0=args.lr0, seed=args.seed, project=args.project, name=stem
        ),
    )
    best = Path(args.project) / stem / "weights" / "best.pt"
    out = ASSETS / f"{stem}.pt"
    shutil.copy(best, out)
    print(f"trained {args.epochs} epochs in {(time.time() - t0) / 60:.1f} min -> {out}")


if __name__ == "__main__":
    main()

"""Train the demo classifier (YOLO26n-cls from yaml) on crops of the shapes dataset, on CPU.

Usage (from the repository root; see MODEL_CARD_CLASSIFY.md for the time it took here):

    python3 datasets/shapes/train_classify.py   # writes det_calib/demo/assets/yolo26n_shapes_cls.pt

The data are one square crop per labelled object of the detection demo's images
(``det_calib.demo.demo_data_yaml(task="classify")``, ``det_calib/tasks/classify/demo_crops.py``:
dataset seed 0; ``train`` from the train split, ``val`` from ``calib``, ``test`` from ``test``),
written on first use into the demo cache. The model is
YOLO26n-cls built from ``yolo26n-cls.yaml`` (no pretrained weights can be downloaded here), trained
from scratch. The weights kept are Ultralytics' ``best.pt`` (best top-1 on ``val``, the calib
crops); ``test`` is never looked at. Training is not part of CI.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--imgsz", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr0", type=float, default=0.002)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--project", default="/tmp/det_calib_train")
    ap.add_argument("--name", default="yolo26n_shapes_cls")
    ap.add_argument("--out", default=str(ASSETS / "yolo26n_shapes_cls.pt"))
    args = ap.parse_args()

    from ultralytics import YOLO

    from det_calib.demo import demo_data_yaml

    data = demo_data_yaml(task="classify", with_train=True)
    t0 = time.time()
    YOLO("yolo26n-cls.yaml").train(
        data=str(data),
        epochs=args.epochs,
        imgsz=args.imgsz,
        warmup_epochs=1,
        erasing=0.0,  # random erasing (default 0.4) would hide most of a 64-px crop's object
        **cpu_recipe(
            batch=args.batch, lr0=args.lr0, seed=args.seed, project=args.project, name=args.name
        ),
    )
    best = Path(args.project) / args.name / "weights" / "best.pt"
    minutes = (time.time() - t0) / 60
    shutil.copy(best, args.out)
    print(f"trained {args.epochs} epochs in {minutes:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()

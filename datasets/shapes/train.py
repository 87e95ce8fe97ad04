"""Train the demo detector (YOLO26n from yaml) on the shapes dataset, on CPU, reproducibly.

Usage (from the repository root; about 90 minutes on a CPU; Ultralytics trains on CPU with
``cpu_count - 1`` torch threads, one on a 2-core machine, so two seeds train side by side there):

    python3 datasets/shapes/train.py           # writes det_calib/demo/assets/yolo26n_shapes.pt
    python3 datasets/shapes/train.py --seed 1  # an ensemble member: writes yolo26n_shapes_seed1.pt there

``--seed`` is the training seed only (weight initialisation, data order, augmentation): the data
(dataset seed 0) and every other setting stay those of the shipped model, so seed 0 reproduces it
and other seeds give members of a deep ensemble that differ from it in their seed alone
(``det-calib ensemble`` with no arguments uses ``yolo26n_shapes_seed*.pt`` beside it).

One run from scratch: 27 epochs, mosaic off for the last 6, an optimiser step after every batch.
The weights kept are Ultralytics' ``best.pt``: the epoch with the best fitness (0.9 mAP50-95 +
0.1 mAP50) on the data.yaml's ``val`` split, which is ``calib``; ``test`` is never looked at.
That is the checkpoint a practitioner brings to det_calib.

The dataset is generated first if it is not in the cache (see ``det_calib.demo``). Training is
not part of CI; the trained weights are committed, with their figures in ``MODEL_CARD.md``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from recipe import cpu_recipe  # datasets/shapes/recipe.py: the settings every demo model shares

ASSETS = Path(__file__).resolve().parents[2] / "det_calib" / "demo" / "assets"  # the demo's weights (package data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=27)
    ap.add_argument("--close-mosaic", type=int, default=6, help="last epochs trained without mosaic")
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr0", type=float, default=0.002)
    ap.add_argument("--seed", type=int, default=0,
                    help="training seed (0: the shipped model; others: ensemble members)")
    ap.add_argument("--project", default="/tmp/det_calib_train")
    ap.add_argument("--name", default=None, help="run name (default yolo26n_shapes, or yolo26n_shapes_seedN)")
    ap.add_argument("--out", default=None,
                    help="weights to write (default det_calib/demo/assets/yolo26n_shapes.pt, or _seedN.pt)")
    args = ap.parse_args()
    stem = "yolo26n_shapes" if args.seed == 0 else f"yolo26n_shapes_seed{args.seed}"
    args.name = args.name or stem
    args.out = args.out or str(ASSETS / f"{stem}.pt")

    from ultralytics import YOLO

    from det_calib.demo import demo_data_yaml

    data = demo_data_yaml(with_train=True)
    t0 = time.time()
    YOLO("yolo26n.yaml").train(
        data=str(data),
        epochs=args.epochs,
        close_mosaic=args.close_mosaic,
        imgsz=args.imgsz,
        warmup_epochs=1,
        scale=0.3,  # milder than the default 0.5: 8-pixel objects must stay visible
        **cpu_recipe(batch=args.batch, lr0=args.lr0, seed=args.seed,
                     project=args.project, name=args.name),
    )
    best = Path(args.project) / args.name / "weights" / "best.pt"
    minutes = (time.time() - t0) / 60
    shutil.copy(best, args.out)
    print(f"trained {args.epochs} epochs in {minutes:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()

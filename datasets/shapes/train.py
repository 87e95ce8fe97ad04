"""Train the demo detector (YOLO26n from yaml) on the shapes dataset, on CPU, reproducibly.

Usage (from the repository root; about 90 minutes on a 2-core CPU):

    python datasets/shapes/train.py                # writes datasets/shapes/yolo26n_shapes.pt

Two stages: 20 epochs from scratch with mosaic (off for the last 4), then 5 epochs of fine-tuning
without mosaic at a lower learning rate.

The dataset is generated first if it is not in the cache (see ``det_calib.demo``). Training is
not part of CI; the trained weights are committed.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--finetune-epochs", type=int, default=5,
                    help="a second stage from the first stage's last weights, without mosaic")
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--project", default="/tmp/det_calib_train")
    ap.add_argument("--out", default=str(HERE / "yolo26n_shapes.pt"))
    ap.add_argument("--stage2-only", action="store_true",
                    help="run only the fine-tune stage, from the first stage's last weights in --project")
    args = ap.parse_args()

    from det_calib.demo import demo_data_yaml

    data = demo_data_yaml(with_train=True)
    t0 = time.time()
    if not args.stage2_only:
        stage1(args, data)
    last = Path(args.project) / "yolo26n_shapes" / "weights" / "last.pt"
    if args.finetune_epochs:
        last = stage2(args, data, last)
    minutes = (time.time() - t0) / 60
    shutil.copy(last, args.out)
    print(f"trained {args.epochs} + {args.finetune_epochs} epochs in {minutes:.1f} min -> {args.out}")


def _common(args, data) -> dict:
    """Training arguments shared by both stages."""
    return dict(
        data=str(data),
        imgsz=args.imgsz,
        batch=args.batch,
        seed=args.seed,
        deterministic=True,
        device="cpu",
        workers=2,
        # from scratch on a short schedule: Ultralytics' automatic choice (AdamW at 8e-4, meant
        # for fine-tuning pretrained weights) learns too slowly here
        optimizer="AdamW",
        scale=0.3,  # milder than the default 0.5: 8-pixel objects must stay visible
        plots=False,  # plotting would try to download a font
        amp=False,
        project=args.project,
        exist_ok=True,
    )


def stage1(args, data) -> None:
    """From scratch, with mosaic (off for the last 4 epochs)."""
    from ultralytics import YOLO

    YOLO("yolo26n.yaml").train(
        **_common(args, data), name="yolo26n_shapes", epochs=args.epochs, warmup_epochs=1, lr0=0.003, close_mosaic=4
    )


def stage2(args, data, last: Path) -> Path:
    """Fine-tune from the first stage's last weights, without mosaic: images as the detector will
    see them. Returns the path of the final weights."""
    from ultralytics import YOLO

    YOLO(str(last)).train(
        **_common(args, data),
        name="yolo26n_shapes_ft",
        epochs=args.finetune_epochs,
        warmup_epochs=0,
        lr0=0.001,
        close_mosaic=args.finetune_epochs,
    )
    return Path(args.project) / "yolo26n_shapes_ft" / "weights" / "last.pt"

if __name__ == "__main__":
    main()

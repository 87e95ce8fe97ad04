"""Train the demo RT-DETR on the shapes dataset, on CPU, reproducibly.

Usage (from the repository root; see MODEL_CARD_RTDETR.md for the time it took). The shipped
model was trained in two stages on a shared 2-core CPU:

    # stage 1: 3 epochs (with mosaic) of a 16-epoch schedule, stopped after the third epoch
    python3 datasets/shapes/train_rtdetr.py --epochs 16 --close-mosaic 4 --name rtdetr_shapes
    # stage 2: 8 epochs without mosaic, from stage 1's last.pt; writes datasets/shapes/rtdetr_shapes.pt
    python3 datasets/shapes/train_rtdetr.py --init /tmp/det_calib_train/rtdetr_shapes/weights/last.pt \
        --epochs 8 --close-mosaic 8 --warmup-epochs 0 --name rtdetr_shapes_stage2

The model is Ultralytics' RT-DETR (``RTDETR``, ``RTDETRDecoder``: 100 queries, no NMS, a
varifocal-trained sigmoid score per class) in a small configuration, ``rtdetr-shapes.yaml``:
YOLO26n's backbone and neck feeding a 128-wide, 3-layer transformer decoder. The backbone and neck
start from the demo detector ``yolo26n_shapes.pt`` (trained on the same train split), so only the
decoder starts from random weights; that is how small DETRs are usually made (from a pretrained
backbone), and it is what lets one fit here in a few CPU hours.

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

HERE = Path(__file__).resolve().parent
DETECTOR = HERE.parents[1] / "det_calib" / "demo" / "assets" / "yolo26n_shapes.pt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--close-mosaic", type=int, default=4, help="last epochs trained without mosaic")
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr0", type=float, default=2e-4)
    ap.add_argument("--warmup-epochs", type=float, default=1.0)
    ap.add_argument("--init", default=None, help="start from this RT-DETR checkpoint (a stage's last.pt)")
    ap.add_argument("--fraction", type=float, default=1.0, help="share of the train split (timing runs)")
    ap.add_argument("--project", default="/tmp/det_calib_train")
    ap.add_argument("--name", default="rtdetr_shapes")
    ap.add_argument("--out", default=str(HERE / "rtdetr_shapes.pt"))
    args = ap.parse_args()

    from ultralytics import RTDETR, YOLO

    from det_calib.demo import demo_data_yaml

    data = demo_data_yaml(with_train=True)
    if args.init:  # a later stage: Ultralytics copies the checkpoint's weights into a fresh model
        model = RTDETR(args.init)
    else:
        model = RTDETR(str(HERE / "rtdetr-shapes.yaml"))
        # backbone and neck from the demo detector: every tensor of the same name and shape
        own = model.model.state_dict()
        shared = {k: v for k, v in YOLO(str(DETECTOR)).model.float().state_dict().items()
                  if k in own and own[k].shape == v.shape}
        own.update(shared)
        model.model.load_state_dict(own)
        print(f"{len(shared)} of {len(own)} tensors from {DETECTOR.name}; the decoder starts from random weights")
        # Ultralytics rebuilds the model from its yaml before training and copies in the weights of a
        # loaded checkpoint only: hand it the transferred model as that checkpoint
        model.ckpt = {"model": model.model}
    t0 = time.time()
    model.train(
        data=str(data),
        epochs=args.epochs,
        close_mosaic=args.close_mosaic,
        imgsz=args.imgsz,
        warmup_epochs=args.warmup_epochs,
        scale=0.3,  # as the detector: 8-pixel objects must stay visible
        fraction=args.fraction,
        **cpu_recipe(batch=args.batch, lr0=args.lr0, seed=0,
                     project=args.project, name=args.name),
    )
    best = Path(args.project) / args.name / "weights" / "best.pt"
    minutes = (time.time() - t0) / 60
    shutil.copy(best, args.out)
    print(f"trained {args.epochs} epochs in {minutes:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()

"""Capture overhead: det_calib.capture vs plain ``model.predict`` on the same images.

Both run Ultralytics' predictor over the same images at the same conf floor, image size and
batch; capture adds the logit gather and the box table. Runs alternate (plain, capture, plain,
capture...) so that machine load hits both alike; the median of each is compared.

    python benchmarks/bench_capture.py                  # demo detector, 96 test images, both heads
    python benchmarks/bench_capture.py --images 200 --repeats 5 --device cpu
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("YOLO_VERBOSE", "False")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="detector .pt (default: the demo detector)")
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    from ultralytics import YOLO

    from det_calib.capture import capture, default_imgsz
    from det_calib.data import list_images, load_data_yaml
    from det_calib.demo import demo_data_yaml, demo_model

    model = args.model or str(demo_model())
    ds = load_data_yaml(demo_data_yaml())
    images = [str(p) for p in list_images(ds.splits["test"], split="test")[: args.images]]
    yolo = YOLO(model)
    imgsz = default_imgsz(yolo)
    print(f"{len(images)} images, imgsz {imgsz}, batch {args.batch}, device {args.device}, conf 0.001")
    print(f"{'head':5s} {'plain predict [s]':>18s} {'capture [s]':>12s} {'ratio':>7s} {'boxes':>7s}")
    for head in ("nms", "e2e"):
        kw = dict(conf=0.001, imgsz=imgsz, batch=args.batch, device=args.device, verbose=False)
        if head == "e2e":
            kw["nms"] = False
        plain, cap, n = [], [], 0
        # one untimed warm-up of each
        list(yolo.predict(images[: args.batch], stream=True, **kw))
        capture(yolo, images[: args.batch], head=head, imgsz=imgsz, batch=args.batch, device=args.device,
                progress=False)
        for _ in range(args.repeats):
            t = time.perf_counter()
            n_plain = sum(len(r.boxes) for r in yolo.predict(images, stream=True, **kw))
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            df = capture(yolo, images, head=head, imgsz=imgsz, batch=args.batch, device=args.device, progress=False)
            cap.append(time.perf_counter() - t)
            n = df.height
            assert n == n_plain, (n, n_plain)
        p, c = statistics.median(plain), statistics.median(cap)
        print(f"{head:5s} {p:18.2f} {c:12.2f} {c / p:7.3f} {n:7d}")


if __name__ == "__main__":
    main()

"""A segment model's capture on box labels against plain Ultralytics ``predict`` of the same model and images.

    python benchmarks/bench_segment_capture.py --images 40 --repeats 3 [--doc segment_capture]

On box labels no figure reads a box's mask, so the capture rasterises none (``CaptureOptions.masks`` False:
``segm`` null, the boxes decided by predict's own empty-mask filter at prototype resolution,
:func:`det_calib.tasks.segment.mask_rebuild.filled_boxes`). This benchmark times, on the first ``--images`` test
images of the shapes demo (box labels) and the demo segment model:

- ``predict``: ``YOLO.predict`` one image at a time (``batch=1``, conf 0.001, ``retina_masks=False``, its
  default), every result consumed;
- the capture of the ``nms`` head as a run on box labels captures it (``masks=False``), and with masks
  (``masks=True``, what every segment capture did before);
- the capture of both heads in one pass without masks (``det-calib capture``'s default ``--heads auto``).

Every capture runs one worker (one image a forward pass, as ``predict``), in this process after a warm-up;
the runs alternate (predict, then each capture, the order turning each repeat) so that machine load hits
all alike. Printed: median wall and CPU seconds, and the median of the paired ratios to ``predict``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("YOLO_VERBOSE", "False")

CASES = ("predict", "capture nms, no masks", "capture nms, masks", "capture both heads, no masks")


def _images(n: int) -> list[str]:
    from det_calib.data.ground_truth import list_images, load_data_yaml
    from det_calib.demo import demo_data_yaml

    ds = load_data_yaml(demo_data_yaml())
    return [str(p) for p in list_images(ds.splits["test"], split="test")[:n]]


def _runners(model: str, images: list[str]) -> dict:
    from ultralytics import YOLO

    from det_calib.capture.predictor import Capturer

    yolo = YOLO(model)
    caps = {
        "capture nms, no masks": Capturer(model, heads="nms", conf=0.001, workers=1, masks=False),
        "capture nms, masks": Capturer(model, heads="nms", conf=0.001, workers=1, masks=True),
        "capture both heads, no masks": Capturer(
            model, heads="auto", conf=0.001, workers=1, masks=False
        ),
    }
    kw = {"conf": 0.001, "batch": 1, "imgsz": caps["capture nms, masks"].imgsz, "verbose": False}

    def predict(ims):
        return sum(len(r.boxes) for r in yolo.predict(ims, stream=True, **kw))

    def capturing(cap):
        return lambda ims: cap(ims, progress=False).height

    return {"predict": predict, **{k: capturing(c) for k, c in caps.items()}}


def main() -> None:
    from det_calib.demo import demo_task_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="segment model (default: the demo segment model)")
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--doc", metavar="NAME", help="also write the table to docs/generated/NAME.md")
    args = ap.parse_args()
    model = str(args.model or demo_task_model("segment"))
    images = _images(args.images)
    run = _runners(model, images)
    boxes = {
        k: f(images[:2]) for k, f in run.items()
    }  # warm-up (and the traced body's first shapes)
    wall: dict[str, list[float]] = {k: [] for k in CASES}
    cpu: dict[str, list[float]] = {k: [] for k in CASES}
    for r in range(args.repeats):
        for k in CASES[r % len(CASES) :] + CASES[: r % len(CASES)]:
            t, c = time.perf_counter(), time.process_time()
            boxes[k] = run[k](images)
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    lines = [
        "| run | boxes | wall s (median) | CPU s (median) | wall / predict | CPU / predict |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k in CASES:
        rw = statistics.median(a / b for a, b in zip(wall[k], wall["predict"]))
        rc = statistics.median(a / b for a, b in zip(cpu[k], cpu["predict"]))
        lines.append(
            f"| {k} | {boxes[k]} | {statistics.median(wall[k]):.2f} | "
            f"{statistics.median(cpu[k]):.2f} | "
            f"{rw:.2f} | {rc:.2f} |"
        )
    note = (
        f"{len(images)} test images of the shapes demo (box labels), `{os.path.basename(model)}`, "
        "conf 0.001, "
        f"one image a forward pass, {args.repeats} alternating repeats; ratios are medians of the "
        "paired "
        "ratios. `predict` keeps the boxes whose mask at the letterboxed size has a pixel, the "
        "capture those "
        "of `retina_masks=True` (its boxes: what a deployment's `retina_masks=True` predict "
        "keeps); "
        f"`predict`'s boxes are the nms head's."
    )
    print(note)
    print("\n".join(lines))
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(args.doc, "\n".join(lines), note=note)


if __name__ == "__main__":
    main()

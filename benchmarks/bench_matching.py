"""Time det_calib.matching.one_to_one.match_detections against pycocotools COCOeval.evaluate().

A seeded synthetic workload shaped like YOLO val output at conf 0.001: per image ~10 GT boxes
(8 classes, ~5% crowd), 300 detections of which ~40% are jittered copies of GT boxes (mostly the
right class) and the rest background boxes. The full workload is timed with det_calib only; a
subset of images is timed with both, and the labels are compared.

Usage:
    python3 benchmarks/bench_matching.py [--images 5000] [--dets 300] [--subset 300] [--iou 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import numpy as np

from det_calib.matching.one_to_one import match_detections


def make_workload(
    n_images: int,
    dets_per_image: int,
    *,
    gt_per_image: float = 10.0,
    n_classes: int = 8,
    seed: int = 0,
):
    rng = np.random.default_rng(seed)
    n_gt = rng.poisson(gt_per_image, n_images)
    gt_image = np.repeat(np.arange(n_images), n_gt)
    m = len(gt_image)
    gt_cls = rng.integers(0, n_classes, m)
    gt_xy = rng.uniform(0, 560, (m, 2))
    gt_xyxy = np.hstack([gt_xy, gt_xy + rng.uniform(8, 200, (m, 2))])
    gt_crowd = rng.random(m) < 0.05

    n = n_images * dets_per_image
    det_image = np.repeat(np.arange(n_images), dets_per_image)
    det_cls = rng.integers(0, n_classes, n)
    xy = rng.uniform(0, 600, (n, 2))
    det_xyxy = np.hstack([xy, xy + rng.uniform(4, 200, (n, 2))])
    # ~40% of detections are jittered copies of a GT box of their image
    near = (rng.random(n) < 0.4) & (n_gt[det_image] > 0)
    first_gt = np.concatenate([[0], np.cumsum(n_gt)[:-1]])
    src = first_gt[det_image[near]] + (rng.random(near.sum()) * n_gt[det_image[near]]).astype(
        np.int64
    )
    size = np.tile(gt_xyxy[src, 2:] - gt_xyxy[src, :2], 2)
    box = gt_xyxy[src] + rng.normal(0, 0.12, (len(src), 4)) * size
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    det_xyxy[near] = box
    det_cls[near] = np.where(rng.random(len(src)) < 0.85, gt_cls[src], det_cls[near])
    det_score = rng.random(n).astype(np.float32).astype(np.float64)  # float32 scores: some ties
    return det_image, det_xyxy, det_cls, det_score, gt_image, gt_xyxy, gt_cls, gt_crowd


def coco_eval(
    det_image,
    det_xyxy,
    det_cls,
    det_score,
    gt_image,
    gt_xyxy,
    gt_cls,
    gt_crowd,
    *,
    t,
    n_images,
    n_classes,
):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def xywh(b):
        return [b[0], b[1], b[2] - b[0], b[3] - b[1]]

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {
            "images": [{"id": i} for i in range(n_images)],
            "categories": [{"id": c} for c in range(n_classes)],
            "annotations": [
                {
                    "id": k + 1,
                    "image_id": int(i),
                    "category_id": int(c),
                    "bbox": xywh(b),
                    "area": (b[2] - b[0]) * (b[3] - b[1]),
                    "iscrowd": int(cr),
                }
                for k, (i, b, c, cr) in enumerate(zip(gt_image, gt_xyxy.tolist(), gt_cls, gt_crowd))
            ],
        }
        gt.createIndex()
        dt = gt.loadRes(
            [
                {"image_id": int(i), "category_id": int(c), "bbox": xywh(b), "score": float(s)}
                for i, b, c, s in zip(det_image, det_xyxy.tolist(), det_cls, det_score)
            ]
        )
        ev = COCOeval(gt, dt, "bbox")
        ev.params.iouThrs = np.array([t])
        ev.params.maxDets = [100_000]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        t0 = time.perf_counter()
        ev.evaluate()
        elapsed = time.perf_counter() - t0
    matched = np.zeros(len(det_image), dtype=bool)
    ignored = np.zeros(len(det_image), dtype=bool)
    for e in ev.evalImgs:
        if e is not None:
            ids = np.asarray(e["dtIds"], dtype=np.int64) - 1
            matched[ids] = e["dtMatches"][0] > 0
            ignored[ids] = e["dtIgnore"][0].astype(bool)
    return elapsed, matched, ignored


def best_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--dets", type=int, default=300, help="detections per image")
    ap.add_argument("--subset", type=int, default=300, help="images for the pycocotools comparison")
    ap.add_argument("--iou", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    data = make_workload(args.images, args.dets)
    n, m = len(data[0]), len(data[4])
    elapsed, r = best_time(lambda: match_detections(*data, iou_threshold=args.iou), args.repeat)
    print(f"full: {args.images} images, {n:,} detections, {m:,} GT, IoU {args.iou}")
    print(
        f"  det_calib: {elapsed:.2f} s (best of {args.repeat}); "
        f"correct {r.correct.mean():.3f}, ignored {r.ignore.mean():.4f}"
    )

    keep_d = data[0] < args.subset
    keep_g = data[4] < args.subset
    sub = tuple(a[keep_d] for a in data[:4]) + tuple(a[keep_g] for a in data[4:])
    t_ours, rs = best_time(lambda: match_detections(*sub, iou_threshold=args.iou), args.repeat)
    t_coco, matched, ignored = coco_eval(*sub, t=args.iou, n_images=args.subset, n_classes=8)
    agree = np.array_equal(rs.correct | rs.ignore, matched) and np.array_equal(rs.ignore, ignored)
    print(f"subset: {args.subset} images, {keep_d.sum():,} detections, {keep_g.sum():,} GT")
    print(f"  det_calib: {t_ours:.3f} s, pycocotools: {t_coco:.2f} s, ratio {t_coco / t_ours:.0f}x")
    n_matched = int(((rs.correct | rs.ignore) != matched).sum())
    n_ignore = int((rs.ignore != ignored).sum())
    print(
        f"  labels agree with pycocotools: {agree} ({n_matched} matched and {n_ignore} ignore "
        "flags differ)"
    )


if __name__ == "__main__":
    main()

"""Time det_calib.tasks.segment.matching.match_masks against pycocotools COCOeval(iouType="segm").evaluate().

Workload: the shapes demo's test split with its polygon labels (det_calib.tasks.segment.demo_labels),
and per image ``--dets`` synthetic detection masks shaped like a segment model's output at conf
0.001: about a third are eroded, dilated or shifted copies of the image's ground-truth masks (mostly
the right class), the rest copies of other objects' masks pasted into the image, with random classes
and scores. Both are timed on the same images and the labels compared (dtMatches/dtIgnore at one
IoU threshold, area range "all"). With ``--doc`` writes docs/generated/bench_mask_matching.md.

Usage:
    python3 benchmarks/bench_mask_matching.py [--images 100] [--dets 100] [--iou 0.5] [--doc]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.tasks import load_task_split
from det_calib.tasks.segment.demo_labels import write_segment_split
from det_calib.tasks.segment.labels import segment_rles
from det_calib.tasks.segment.matching import match_masks


def workload(n_images: int, dets_per_image: int, seed: int = 0):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_segment_split(root, "test", n_images)
        names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
        (root / "data.yaml").write_text(f"path: {root}\ntest: images/test\nnames:\n{names}\n")
        sp = load_task_split(load_data_yaml(root / "data.yaml"), "test", task="segment")
    rng = np.random.default_rng(seed)
    gt_rles = segment_rles(sp)
    gt_img, gt_cls = sp.gt["image_id"].to_numpy(), sp.gt["cls"].to_numpy().astype(np.int64)
    crowd = rng.random(len(gt_rles)) < 0.03
    kernel = np.ones((3, 3), np.uint8)
    di, dc, dr = [], [], []
    for img in range(len(sp.images)):
        w, h = (int(v) for v in sp.sizes[img])
        own = np.flatnonzero(gt_img == img)
        same_size = [j for j in range(len(gt_rles)) if gt_rles[j]["size"] == [h, w]]
        for k in range(dets_per_image):
            if own.size and k < dets_per_image // 3:
                j = int(rng.choice(own))
                m = mask_utils.decode(gt_rles[j])
                op = rng.integers(3)
                m = (
                    cv2.erode(m, kernel)
                    if op == 0
                    else cv2.dilate(m, kernel)
                    if op == 1
                    else np.roll(m, tuple(int(v) for v in rng.integers(-4, 5, 2)), axis=(0, 1))
                )
                rle = mask_utils.encode(np.asfortranarray(m))
                c = int(gt_cls[j]) if rng.random() < 0.85 else int(rng.integers(len(CLASS_NAMES)))
            else:
                rle = gt_rles[int(rng.choice(same_size))]
                c = int(rng.integers(len(CLASS_NAMES)))
            di.append(img), dc.append(c), dr.append(rle)
    score = rng.random(len(di)).astype(np.float32).astype(np.float64)
    return sp, (np.array(di), np.array(dc), score, dr, gt_img, gt_cls, gt_rles, crowd)


def coco_eval(
    sp, det_image, det_cls, det_score, det_rles, gt_image, gt_cls, gt_rles, gt_crowd, *, t
):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = {
        "images": [
            {"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(sp.sizes)
        ],
        "categories": [{"id": c} for c in range(len(CLASS_NAMES))],
        "annotations": [
            {
                "id": k + 1,
                "image_id": int(i),
                "category_id": int(c),
                "segmentation": r,
                "area": float(mask_utils.area(r)),
                "bbox": mask_utils.toBbox(r).tolist(),
                "iscrowd": int(z),
            }
            for k, (i, c, r, z) in enumerate(zip(gt_image, gt_cls, gt_rles, gt_crowd))
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes(
            [
                {"image_id": int(i), "category_id": int(c), "segmentation": r, "score": float(s)}
                for i, c, r, s in zip(det_image, det_cls, det_rles, det_score)
            ]
        )
        ev = COCOeval(gt, dt, "segm")
        ev.params.iouThrs = np.array([t])
        ev.params.maxDets = [10_000]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        t0 = time.perf_counter()
        ev.evaluate()
        seconds = time.perf_counter() - t0
    n = len(det_image)
    matched, ignored = np.zeros(n, bool), np.zeros(n, bool)
    for e in ev.evalImgs:
        if e is not None:
            ids = np.asarray(e["dtIds"]) - 1
            matched[ids] = e["dtMatches"][0] > 0
            ignored[ids] = e["dtIgnore"][0].astype(bool)
    return seconds, matched, ignored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--dets", type=int, default=100)
    ap.add_argument("--iou", type=float, default=0.5)
    ap.add_argument(
        "--doc",
        action="store_true",
        help="also write the table to docs/generated/bench_mask_matching.md",
    )
    args = ap.parse_args()
    sp, work = workload(args.images, args.dets)
    t0 = time.perf_counter()
    r = match_masks(*work, iou_threshold=args.iou)
    ours = time.perf_counter() - t0
    theirs, matched, ignored = coco_eval(sp, *work, t=args.iou)
    same = bool(np.array_equal(r.correct | r.ignore, matched) and np.array_equal(r.ignore, ignored))
    lines = [
        "<!-- written by benchmarks/bench_mask_matching.py; rerun it with --doc to refresh, do not "
        "edit -->",
        f"Mask matching at IoU {args.iou:g} on {args.images} demo test images ({sp.gt.height} GT "
        "masks, "
        f"{len(work[0]):,} detection masks).",
        "",
        "| matcher | seconds | labels equal to pycocotools |",
        "|---|---:|---|",
        f"| det_calib `match_masks` | {ours:.3f} | {'yes' if same else 'NO'} |",
        f"| pycocotools `COCOeval(iouType='segm').evaluate()` | {theirs:.3f} | (reference) |",
    ]
    if args.doc:
        out = Path(__file__).resolve().parents[1] / "docs" / "generated" / "bench_mask_matching.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(out)
    print("\n".join(lines))
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

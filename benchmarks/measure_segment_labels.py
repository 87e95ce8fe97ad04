"""Measure the shapes demo's polygon labels against the visible regions they describe.

For each image of the demo's calib and test splits (seed 0): every labelled object's visible region
(its pixels in the generator's owner map) and its polygon (det_calib.tasks.segment.demo_labels); the
polygon rasterised by pycocotools (as COCO's ``segm`` evaluation rasterises ground truth) is
compared with the region, and the polygon's tight box with the detect label box. With ``--doc``
writes docs/generated/segment_demo_labels.md.

Usage:
    python3 benchmarks/measure_segment_labels.py [--limit N] [--doc]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from det_calib.demo.shapes import SPLIT_SIZES, render_with_owners
from det_calib.tasks.segment.demo_labels import EPSILON, region_polygon, segment_lines


def measure(split: str, n: int) -> dict:
    ious, dev, verts, pieces, holes, nbytes = [], [], [], 0, 0, 0
    t0 = time.perf_counter()
    for i in range(n):
        r = render_with_owners(0, split, i)
        h, w = r.owners.shape
        polys = []
        for row, k in zip(r.labels, r.labelled):
            region = (r.owners == k).astype(np.uint8)
            poly = region_polygon(region)
            polys.append(poly)
            rle = mask_utils.merge(mask_utils.frPyObjects([poly.reshape(-1).tolist()], h, w))
            raster = mask_utils.decode(rle).astype(bool)
            ious.append((raster & (region > 0)).sum() / (raster | (region > 0)).sum())
            cx, cy, bw, bh = row[1:] * [w, h, w, h]
            box = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2])
            dev.append(np.abs(np.r_[poly.min(0), poly.max(0)] - box).max())
            verts.append(len(poly))
            pieces += cv2.connectedComponents(region, connectivity=8)[0] - 1 > 1
            _, hier = cv2.findContours(region, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
            holes += hier is not None and bool((hier[0][:, 3] >= 0).any())
        lines = segment_lines(r.labels, polys, w, h)
        nbytes += len(("\n".join(lines) + ("\n" if lines else "")).encode())
    return {
        "split": split,
        "images": n,
        "objects": len(ious),
        "pieces": pieces,
        "holes": holes,
        "iou": np.array(ious),
        "dev": np.array(dev),
        "verts": np.array(verts),
        "bytes": nbytes,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="images per split (default: all)")
    ap.add_argument(
        "--doc",
        action="store_true",
        help="also write the table to docs/generated/segment_demo_labels.md",
    )
    args = ap.parse_args()
    rows = [
        measure(s, min(SPLIT_SIZES[s], args.limit or SPLIT_SIZES[s])) for s in ("calib", "test")
    ]
    lines = [
        "<!-- written by benchmarks/measure_segment_labels.py; rerun it with --doc to refresh, do "
        "not edit -->",
        f"Polygon labels of the shapes demo (seed 0), `approxPolyDP` epsilon {EPSILON} px. IoU: "
        "the polygon "
        "rasterised by pycocotools against the object's visible pixels. Box: the largest distance "
        "(px) between a "
        "side of the polygon's tight box and the detect label box's.",
        "",
        "| split | images | objects | in several pieces | with holes | IoU min | IoU = 1 | box max "
        "dev (px) "
        "| vertices median / p95 / max | label bytes | s / image |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        v = r["verts"]
        vs = f"{int(np.median(v))} / {int(np.percentile(v, 95))} / {int(v.max())}"
        lines.append(
            f"| {r['split']} | {r['images']} | {r['objects']} | {r['pieces']} | {r['holes']} | "
            f"{r['iou'].min():.4f} "
            f"| {(r['iou'] == 1).mean():.1%} | {r['dev'].max():.2f} | {vs} | {r['bytes']:,} "
            f"| {r['seconds'] / r['images']:.3f} |"
        )
    if args.doc:
        out = Path(__file__).resolve().parents[1] / "docs" / "generated" / "segment_demo_labels.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Measure the shapes demo's keypoint and rotated-box labels (det_calib.tasks.pose.demo_labels /
det_calib.tasks.obb.demo_labels).

For each image of the demo's calib and test splits (seed 0), rendered once: the keypoints of every
labelled object (visibility counts, the box text against the detection labels) and its rotated box
(how often the unconstrained minimum-area rectangle pokes out of the image and the rectangle inside
it is used instead, the rotated box's area against the detect box's, ProbIoU of the two, every
visible pixel inside). With ``--doc`` writes docs/generated/pose_obb_demo_labels.md.

Usage:
    python3 benchmarks/measure_pose_obb_labels.py [--limit N] [--doc]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_table import write_doc_table  # noqa: E402

from det_calib.demo.shapes import SPLIT_SIZES, render_with_owners  # noqa: E402
from det_calib.tasks.obb.demo_labels import min_area_rect, obb_lines, rendered_rects  # noqa: E402
from det_calib.tasks.obb.labels import corners_to_xywhr  # noqa: E402
from det_calib.tasks.obb.matching import pair_probiou  # noqa: E402
from det_calib.tasks.pose.demo_labels import pose_lines, rendered_keypoints  # noqa: E402


def _area(q: np.ndarray) -> float:
    return float(np.hypot(*(q[1] - q[0])) * np.hypot(*(q[3] - q[0])))


def _pose_figures(r, acc: dict) -> None:
    h, w = r.owners.shape
    t0 = time.perf_counter()
    kp = rendered_keypoints(r)
    lines = pose_lines(r.labels, kp, w, h)
    acc["pose_s"] += time.perf_counter() - t0
    v = kp[:, :, 2].astype(int) if len(kp) else np.zeros((0, 5), int)
    acc["vis"] += np.bincount(v.reshape(-1), minlength=3)
    acc["occluded_obj"] += int((v == 1).any(1).sum())
    acc["truncated_obj"] += int((v == 0).any(1).sum())
    det = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in r.labels]
    acc["box_text_differs"] += sum(" ".join(p.split()[:5]) != d for p, d in zip(lines, det))
    acc["pose_bytes"] += len(("\n".join(lines) + ("\n" if lines else "")).encode())


def _obb_figures(r, acc: dict) -> None:
    h, w = r.owners.shape
    t0 = time.perf_counter()
    rects = rendered_rects(r)
    lines = obb_lines(r.labels, rects, w, h)
    acc["obb_s"] += time.perf_counter() - t0
    acc["obb_bytes"] += len(("\n".join(lines) + ("\n" if lines else "")).encode())
    for row, k, q in zip(r.labels, r.labelled, rects):
        ys, xs = np.nonzero(r.owners == k)
        corners = np.concatenate(
            [np.stack([xs + dx, ys + dy], 1) for dx in (0, 1) for dy in (0, 1)]
        )
        free = min_area_rect(corners)
        area = _area(q)
        if area > _area(free) * (1 + 1e-9):
            acc["inside_instead"].append(area / _area(free))
        cx, cy, bw, bh = row[1:] * [w, h, w, h]
        acc["area_ratio"].append(area / (bw * bh))
        acc["probiou_box"].append(
            float(pair_probiou(corners_to_xywhr(q[None])[0], np.array([cx, cy, bw, bh, 0.0])))
        )


def measure(split: str, n: int) -> dict:
    acc = {
        "split": split,
        "images": n,
        "objects": 0,
        "vis": np.zeros(3, int),
        "occluded_obj": 0,
        "truncated_obj": 0,
        "box_text_differs": 0,
        "pose_bytes": 0,
        "obb_bytes": 0,
        "pose_s": 0.0,
        "obb_s": 0.0,
        "render_s": 0.0,
        "inside_instead": [],
        "area_ratio": [],
        "probiou_box": [],
    }
    for i in range(n):
        t0 = time.perf_counter()
        r = render_with_owners(0, split, i)
        acc["render_s"] += time.perf_counter() - t0
        acc["objects"] += len(r.labelled)
        _pose_figures(r, acc)
        _obb_figures(r, acc)
    return acc


def _tables(rows: list[dict]) -> str:
    out = [
        "Keypoints (5 per object: centre, top, right, bottom, left). v: COCO visibility (2 "
        "visible, 1 under a later "
        "object, 0 outside the image).",
        "",
        "| split | images | objects | keypoints v=2 / v=1 / v=0 | objects with a v=1 / v=0 "
        "keypoint "
        "| box text = detect labels | label bytes | ms / image (labels; render) |",
        "|---|---:|---:|---|---|---|---:|---|",
    ]
    for r in rows:
        v = r["vis"] / max(r["vis"].sum(), 1)
        out.append(
            f"| {r['split']} | {r['images']} | {r['objects']} | {v[2]:.1%} / {v[1]:.1%} / "
            f"{v[0]:.1%} "
            f"| {r['occluded_obj']} / {r['truncated_obj']} | "
            f"{'yes' if r['box_text_differs'] == 0 else 'NO'} "
            f"| {r['pose_bytes']:,} | {1e3 * r['pose_s'] / r['images']:.1f}; "
            f"{1e3 * r['render_s'] / r['images']:.1f} |"
        )
    out += [
        "",
        "Rotated boxes (minimum-area rectangle of the visible pixels). Inside instead: objects "
        "whose unconstrained "
        "minimum pokes out of the image, so the smallest rectangle inside it is written (its area "
        "over the minimum's, "
        "median / max). Area: the rotated box's over the detect box's. ProbIoU: of the rotated box "
        "with the detect "
        "box (what an axis-aligned prediction would score).",
        "",
        "| split | objects | inside instead | its area / minimum's | area / detect box (p5 / "
        "median) "
        "| ProbIoU with the detect box (p5 / median) | label bytes | ms / image (labels) |",
        "|---|---:|---:|---|---|---|---:|---:|",
    ]
    for r in rows:
        ins = np.array(r["inside_instead"] or [1.0])
        ar, pb = np.array(r["area_ratio"]), np.array(r["probiou_box"])
        n_in = len(r["inside_instead"])
        out.append(
            f"| {r['split']} | {r['objects']} | {n_in} ({n_in / r['objects']:.1%})"
            f" | {np.median(ins):.2f} / {ins.max():.2f} | {np.percentile(ar, 5):.2f} / "
            f"{np.median(ar):.2f} "
            f"| {np.percentile(pb, 5):.2f} / {np.median(pb):.2f} | {r['obb_bytes']:,} "
            f"| {1e3 * r['obb_s'] / r['images']:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="images per split (default: all)")
    ap.add_argument(
        "--doc", action="store_true", help="also write docs/generated/pose_obb_demo_labels.md"
    )
    args = ap.parse_args()
    rows = [
        measure(s, min(SPLIT_SIZES[s], args.limit or SPLIT_SIZES[s])) for s in ("calib", "test")
    ]
    body = _tables(rows)
    if args.doc:
        write_doc_table("pose_obb_demo_labels", body, note="Shapes demo, seed 0.")
    print(body)


if __name__ == "__main__":
    main()

"""Synthetic files of detections of the fixture split (no forward pass): the ground truth jittered, now and
then the wrong class, with false positives; scores rounded to 5 decimals as Ultralytics' JSON rounds them.
Written as Ultralytics label folders, CSV tables, COCO results with a COCO ground truth (sparse ids)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from PIL import Image

FIXTURE = Path(__file__).resolve().parents[1] / "det_calib" / "demo" / "assets" / "fixture"
NAMES = ["circle", "ellipse", "square", "rectangle", "triangle", "hexagon", "star", "cross"]
COCO_IDS = [1, 3, 18, 22, 37, 44, 62, 90]
"""Sparse COCO category ids given to the eight classes (as MMDetection and Detectron2 write them)."""


def calibrate_argv(
    data: Path, detections: Path, out: Path, *extra, report: bool = False, n_boot: int = 50
) -> list[str]:
    """``det-calib calibrate`` of a file of detections, quiet, ``n_boot`` replicates, the report left
    out unless ``report``; ``extra``: more options."""
    return [
        "calibrate",
        "--data",
        str(data),
        "--detections",
        str(detections),
        "--out",
        str(out),
        *([] if report else ["--no-report"]),
        "-q",
        "--n-boot",
        str(n_boot),
        *map(str, extra),
    ]


def synthetic_rows(seed: int = 0, n_false: int = 25) -> list[dict]:
    """Detections of the fixture images: each ground truth found (jittered; now and then the wrong class),
    ``n_false`` random boxes per image; scores from a logit with a planted miscalibration, 5 decimals."""
    rng = np.random.default_rng(seed)
    rows = []
    for label in sorted((FIXTURE / "labels" / "fixture").glob("*.txt")):
        image = FIXTURE / "images" / "fixture" / f"{label.stem}.jpg"
        w, h = Image.open(image).size
        gt = np.loadtxt(label, ndmin=2)
        boxes = [
            (
                int(c if rng.random() > 0.1 else rng.integers(8)),
                cx + rng.normal(0, 0.01),
                cy + rng.normal(0, 0.01),
                bw * rng.uniform(0.8, 1.2),
                bh * rng.uniform(0.8, 1.2),
                rng.normal(2.0, 1.5),
            )
            for c, cx, cy, bw, bh in gt
        ]
        boxes += [
            (
                int(rng.integers(8)),
                *rng.uniform(0.1, 0.9, 2),
                *rng.uniform(0.03, 0.2, 2),
                rng.normal(-2.5, 1.5),
            )
            for _ in range(n_false)
        ]
        for c, cx, cy, bw, bh, z in boxes:
            score = round(float(1 / (1 + np.exp(-1.6 * z))), 5)
            rows.append(
                {
                    "stem": label.stem,
                    "file": image.name,
                    "cls": c,
                    "cx": cx,
                    "cy": cy,
                    "w": bw,
                    "h": bh,
                    "score": max(score, 0.001),
                    "img_w": w,
                    "img_h": h,
                }
            )
    return rows


def write_txt(rows: list[dict], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {}
    for r in rows:
        lines.setdefault(r["stem"], []).append(
            f"{r['cls']} {r['cx']:g} {r['cy']:g} {r['w']:g} {r['h']:g} {r['score']:g}"
        )
    for stem, ls in lines.items():
        (folder / f"{stem}.txt").write_text("\n".join(ls) + "\n")
    return folder


def pixels(r: dict) -> tuple[float, float, float, float]:
    """The box of a row in pixels, as its txt line rounds it (so that every format holds the same box)."""
    cx, cy, bw, bh = (float(f"{r[k]:g}") for k in ("cx", "cy", "w", "h"))
    return (
        (cx - bw / 2) * r["img_w"],
        (cy - bh / 2) * r["img_h"],
        (cx + bw / 2) * r["img_w"],
        (cy + bh / 2) * r["img_h"],
    )


def write_csv(rows: list[dict], path: Path, *, names: bool = False) -> Path:
    recs = []
    for r in rows:
        x1, y1, x2, y2 = pixels(r)
        recs.append(
            {
                "image": r["file"],
                "class": NAMES[r["cls"]] if names else r["cls"],
                "x1": x1,
                "y1": y1,
                "x2": x2,
                "y2": y2,
                "score": r["score"],
            }
        )
    pl.DataFrame(recs).write_csv(path)
    return path


def write_coco(rows: list[dict], folder: Path) -> tuple[Path, Path]:
    """A COCO ground truth of the fixture (sparse category ids, image ids 101...) and results of ``rows``."""
    folder.mkdir(parents=True, exist_ok=True)
    images, anns, ids = [], [], {}
    for k, label in enumerate(sorted((FIXTURE / "labels" / "fixture").glob("*.txt"))):
        name = f"{label.stem}.jpg"
        w, h = Image.open(FIXTURE / "images" / "fixture" / name).size
        ids[label.stem] = 101 + 7 * k
        images.append({"id": ids[label.stem], "file_name": name, "width": w, "height": h})
        for c, cx, cy, bw, bh in np.loadtxt(label, ndmin=2):
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": ids[label.stem],
                    "category_id": COCO_IDS[int(c)],
                    "bbox": [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h],
                    "area": bw * w * bh * h,
                    "iscrowd": 0,
                }
            )
    cats = [{"id": i, "name": n} for i, n in zip(COCO_IDS, NAMES, strict=True)] + [
        {"id": 2, "name": "bicycle"}
    ]
    gt = folder / "instances_fixture.json"
    gt.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    results = []
    for r in rows:
        x1, y1, x2, y2 = pixels(r)
        results.append(
            {
                "image_id": ids[r["stem"]],
                "category_id": COCO_IDS[r["cls"]],
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "score": r["score"],
            }
        )
    res = folder / "results.json"
    res.write_text(json.dumps(results))
    return gt, res

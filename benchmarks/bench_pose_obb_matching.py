"""Time OKS and rotated matching on the demo against their references, and check they agree.

On the first N demo test images (seed 0), with the demo's keypoints (det_calib.tasks.pose.demo_labels) and
rotated boxes (det_calib.tasks.obb.demo_labels) as ground truth, synthetic detections: ``--per-gt`` noisy
copies of each ground truth (noise from 2% to 30% of its size) and random false ones. OKS matching
at 0.5 against ``COCOeval(iouType="keypoints").evaluate()`` (maxDets 100); rotated matching at 0.5
against Ultralytics' ``OBBValidator._process_batch`` called image by image (its ten thresholds at
once, float32 as in validation). With ``--doc`` writes docs/generated/bench_pose_obb_matching.md.

Usage:
    python3 benchmarks/bench_pose_obb_matching.py [--images N] [--per-gt K] [--doc]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_table import write_doc_table  # noqa: E402

from det_calib.data.ground_truth import load_data_yaml  # noqa: E402
from det_calib.demo.shapes import CLASS_NAMES  # noqa: E402
from det_calib.tasks import load_task_split  # noqa: E402
from det_calib.tasks.obb.demo_labels import write_obb_split  # noqa: E402
from det_calib.tasks.obb.labels import split_xywhr  # noqa: E402
from det_calib.tasks.obb.matching import match_rotated  # noqa: E402
from det_calib.tasks.pose.demo_labels import write_pose_split  # noqa: E402
from det_calib.tasks.pose.labels import (  # noqa: E402
    AREA_COLUMN,
    NUM_KEYPOINTS_COLUMN,
    split_keypoints,
)
from det_calib.tasks.pose.matching import match_keypoints  # noqa: E402


def _yaml(root: Path, extra: str = "") -> Path:
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(f"path: {root}\ntest: images/test\nnames:\n{names}\n{extra}")
    return root / "data.yaml"


def _copies(rng, n_gt: int, per_gt: int) -> np.ndarray:
    return np.repeat(np.arange(n_gt), rng.integers(0, 2 * per_gt + 1, size=n_gt))


def bench_oks(root: Path, n: int, per_gt: int, rng) -> dict:
    write_pose_split(root, "test", n)
    sp = load_task_split(load_data_yaml(_yaml(root, "kpt_shape: [5, 3]\n")), "test", task="pose")
    g, gt = split_keypoints(sp), sp.gt
    src = _copies(rng, gt.height, per_gt)
    size = np.sqrt(gt[AREA_COLUMN].to_numpy())[src]
    dk = (
        g[src, :, :2]
        + rng.normal(size=(len(src), 5, 2))
        * (rng.uniform(0.02, 0.3, len(src)) * size)[:, None, None]
    )
    args = (
        gt["image_id"].to_numpy()[src],
        gt["cls"].to_numpy()[src],
        rng.uniform(size=len(src)),
        dk,
        gt["image_id"].to_numpy(),
        gt["cls"].to_numpy(),
        g,
        gt[AREA_COLUMN].to_numpy(),
        gt.select("x1", "y1", "x2", "y2").to_numpy(),
        gt["crowd"].to_numpy(),
        gt[NUM_KEYPOINTS_COLUMN].to_numpy(),
    )
    t0 = time.perf_counter()
    ours = match_keypoints(*args, oks_threshold=0.5, max_dets=100)
    t_ours = time.perf_counter() - t0
    ref, t_ref = _coco_keypoints(args)
    return {
        "what": "OKS (keypoints)",
        "gt": gt.height,
        "dets": len(src),
        "ours": t_ours,
        "ref": t_ref,
        "equal": bool(np.array_equal(ours.correct | ours.ignore, ref)),
        "ref_name": "pycocotools `COCOeval(iouType='keypoints').evaluate()`",
    }


def _coco_keypoints(args) -> tuple[np.ndarray, float]:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    di, dc, ds, dk, gi, gc, g, area, box, crowd, nk = args
    coco = COCO()
    coco.dataset = {
        "images": [{"id": int(i)} for i in np.unique(np.r_[gi, di])],
        "categories": [{"id": c} for c in range(len(CLASS_NAMES))],
        "annotations": [
            {
                "id": j + 1,
                "image_id": int(gi[j]),
                "category_id": int(gc[j]),
                "keypoints": g[j].reshape(-1).tolist(),
                "num_keypoints": int(nk[j]),
                "area": float(area[j]),
                "iscrowd": int(crowd[j]),
                "bbox": [box[j, 0], box[j, 1], box[j, 2] - box[j, 0], box[j, 3] - box[j, 1]],
            }
            for j in range(len(gi))
        ],
    }
    dets = [
        {
            "image_id": int(i),
            "category_id": int(c),
            "score": float(s),
            "keypoints": np.c_[k, np.ones(len(k))].reshape(-1).tolist(),
        }
        for i, c, s, k in zip(di, dc, ds, dk)
    ]
    matched = np.zeros(len(di), bool)
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        res = coco.loadRes(dets)
        t0 = time.perf_counter()
        ev = COCOeval(coco, res, "keypoints")
        ev.params.kpt_oks_sigmas = np.full(5, 1 / 5)  # 1/K, match_keypoints' default for K != 17
        ev.params.iouThrs, ev.params.maxDets = np.array([0.5]), [100]
        ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e10]], ["all"]
        ev.evaluate()
        t_ref = time.perf_counter() - t0
    for e in ev.evalImgs:
        if e is not None:
            matched[np.asarray(e["dtIds"], dtype=np.int64) - 1] = e["dtMatches"][0] > 0
    return matched, t_ref


def bench_rotated(root: Path, n: int, per_gt: int, rng) -> dict:
    import torch
    from ultralytics.models.yolo.obb import OBBValidator

    write_obb_split(root, "test", n)
    sp = load_task_split(load_data_yaml(_yaml(root)), "test", task="obb")
    g, gi, gc = split_xywhr(sp), sp.gt["image_id"].to_numpy(), sp.gt["cls"].to_numpy()
    src = _copies(rng, len(g), per_gt)
    s = rng.uniform(0.02, 0.3, len(src))[:, None]
    d = (
        g[src] * (1 + rng.normal(size=(len(src), 5)) * s * [0.1, 0.1, 1, 1, 0])
        + np.c_[np.zeros((len(src), 4)), rng.normal(size=len(src)) * s[:, 0]]
    )
    di, dc, ds = gi[src], gc[src], rng.uniform(size=len(src))
    order = np.lexsort((-ds, di))
    di, dc, ds, d = di[order], dc[order], ds[order], d[order]
    t0 = time.perf_counter()
    ours = match_rotated(di, dc, ds, d, gi, gc, g, iou_threshold=0.5)
    t_ours = time.perf_counter() - t0
    v, tp = OBBValidator(), []
    t0 = time.perf_counter()
    for i in range(n):
        dm, gm = di == i, gi == i
        preds = {
            "cls": torch.tensor(dc[dm], dtype=torch.float32),
            "bboxes": torch.tensor(d[dm], dtype=torch.float32),
        }
        batch = {
            "cls": torch.tensor(gc[gm], dtype=torch.float32),
            "bboxes": torch.tensor(g[gm], dtype=torch.float32),
        }
        tp.append(v._process_batch(preds, batch)["tp"][:, 0])
    t_ref = time.perf_counter() - t0
    return {
        "what": "rotated (ProbIoU)",
        "gt": len(g),
        "dets": len(d),
        "ours": t_ours,
        "ref": t_ref,
        "equal": bool(np.array_equal(ours.correct, np.concatenate(tp))),
        "ref_name": "Ultralytics `OBBValidator._process_batch`, image by image (10 thresholds, float32)",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100, help="demo test images (default 100)")
    ap.add_argument(
        "--per-gt", type=int, default=3, help="mean detections per ground truth (default 3)"
    )
    ap.add_argument(
        "--doc", action="store_true", help="also write docs/generated/bench_pose_obb_matching.md"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            bench_oks(Path(tmp) / "pose", args.images, args.per_gt, rng),
            bench_rotated(Path(tmp) / "obb", args.images, args.per_gt, rng),
        ]
    lines = [
        f"Matching at 0.5 on {args.images} demo test images, synthetic detections (noisy copies of "
        "the ground "
        "truth).",
        "",
        "| matching | GT | detections | det_calib s | reference s | labels equal | reference |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['gt']:,} | {r['dets']:,} | {r['ours']:.3f} | {r['ref']:.3f} "
            f"| {'yes' if r['equal'] else 'NO'} | {r['ref_name']} |"
        )
    body = "\n".join(lines)
    if args.doc:
        write_doc_table("bench_pose_obb_matching", body)
    print(body)


if __name__ == "__main__":
    main()

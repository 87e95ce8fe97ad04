"""What Ultralytics ``val(save_json=True, conf=0.001)`` JSON gives ``calibrate --detections``, against the
``.pt`` run of the same images, and which of val's differences from ``predict`` causes what.

On the demo detector, the first ``--images`` images of the calib and test splits (a data.yaml of links to
them, so that val reads exactly the run's images):

- the ``.pt`` run (``calibrate --model``, the nms head: single-image predict, det_calib's capture);
- val's JSON as val writes it (rect batches of ``--batch`` images, each batch letterboxed to one shape with
  half a stride of padding, multi-label NMS), read as is and with each box's top class only (the rows of one
  image and one box kept once, the highest score: predict's single-label decode, found from the file);
- val with single-label NMS (a validator subclass: isolates the multi-label NMS);
- the same with one image per batch (isolates the batch's shared shape);
- the same without val's half-stride padding (each image letterboxed as predict letterboxes it).

For each: the rows written, the ``.pt`` run's boxes found again (same class, IoU >= 0.9) and their score
difference, and the nms head's kept-set ECE at conf 0.25 raw -> calibrated with the chosen map, against
the ``.pt`` run's.

    python benchmarks/measure_val_json.py --images 64 --work /tmp/val_json --doc

Prints a Markdown table (with ``--doc``, writes ``docs/generated/val_json.md``, which docs/detections.md
embeds). Val's JSON files and the runs are kept in ``--work`` and reused when there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_table import write_doc_table  # noqa: E402


def limited_data(work: Path, n: int) -> Path:
    """A data.yaml of links to the first ``n`` images (and labels) of the demo's calib and test splits."""
    from det_calib.demo import demo_data_yaml

    src = demo_data_yaml().parent
    root = work / "data"
    for split in ("calib", "test"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for img in sorted((src / "images" / split).glob("*.png"))[:n]:
            link = root / "images" / split / img.name
            if not link.exists():
                os.symlink(img, link)
            label = src / "labels" / split / f"{img.stem}.txt"
            (root / "labels" / split / label.name).write_text(
                label.read_text() if label.exists() else ""
            )
    names = "\n".join(
        f"  {i}: {n}"
        for i, n in enumerate(
            ["circle", "ellipse", "square", "rectangle", "triangle", "hexagon", "star", "cross"]
        )
    )
    yaml = root / "data.yaml"
    yaml.write_text(
        f"path: {root}\ntrain: images/calib\nval: images/calib\ncalib: images/calib\n"
        f"test: images/test\nnames:\n{names}\n"
    )
    return yaml


def validator_class(*, single_label: bool, pad: float | None):
    """Ultralytics' detection validator with single-label NMS and/or another letterbox padding."""
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils import nms

    class Validator(DetectionValidator):
        def postprocess(self, preds):
            if not single_label:
                return super().postprocess(preds)
            outputs = nms.non_max_suppression(
                preds,
                self.args.conf,
                self.args.iou,
                nc=0,
                multi_label=False,
                agnostic=self.args.agnostic_nms,
                max_det=self.args.max_det,
                end2end=self.end2end,
            )
            return [
                {"bboxes": x[:, :4], "conf": x[:, 4], "cls": x[:, 5], "extra": x[:, 6:]}
                for x in outputs
            ]

        def build_dataset(self, img_path, mode="val", batch=None):
            ds = super().build_dataset(img_path, mode=mode, batch=batch)
            if (
                pad is not None
            ):  # one image a batch: each image's shape again with this padding (as set_rectangle)
                from PIL import Image

                assert ds.batch_size == 1, "another padding is measured with one image per batch"
                shapes = []
                for f in ds.im_files:
                    w, h = Image.open(f).size
                    shapes.append([h / w, 1] if h < w else [1, w / h] if h > w else [1, 1])
                ds.batch_shapes = (
                    np.ceil(np.array(shapes) * ds.imgsz / ds.stride + pad).astype(int) * ds.stride
                )
            return ds

    return Validator


def val_json(
    model_path: Path,
    data: Path,
    work: Path,
    name: str,
    *,
    batch: int,
    single_label: bool,
    pad: float | None,
) -> Path:
    """Both splits' val predictions.json, merged."""
    from ultralytics import YOLO

    out = work / f"{name}.json"
    if out.exists():
        return out
    rows = []
    for split in (
        "val",
        "test",
    ):  # val: the calib images (Ultralytics resolves only its own split keys)
        model = YOLO(str(model_path))
        v = model.val(
            data=str(data),
            split=split,
            save_json=True,
            conf=0.001,
            batch=batch,
            plots=False,
            verbose=False,
            project=str(work / "val"),
            name=f"{name}_{split}",
            exist_ok=True,
            validator=validator_class(single_label=single_label, pad=pad),
        )
        rows += json.loads((Path(v.save_dir) / "predictions.json").read_text())
    out.write_text(json.dumps(rows))
    return out


def top_class(path: Path) -> Path:
    """The rows of ``path`` with each box's top class only (rows of one image and one bbox kept once)."""
    out = path.with_name(path.stem + "_top.json")
    rows = json.loads(path.read_text())
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["image_id"], *r["bbox"])
        if key not in best or r["score"] > best[key]["score"]:
            best[key] = r
    out.write_text(json.dumps(list(best.values())))
    return out


def calibrate(data: Path, out: Path, **kw) -> dict:
    from det_calib.pipeline.calibrate_job import calibrate as run
    from det_calib.record.run_result import RunResult

    if not (out / "calibration.json").exists():
        run(data=data, out=out, run_val=False, report=False, progress=False, n_boot=200, **kw)
    h = RunResult.read(out / "calibration.json").results["nms"]
    return {
        "method": h.calibrator.method,
        "raw": h.eval.operating_before[0].ece,
        "calibrated": h.eval.operating_after[0].ece,
        "map": h.eval.map50_95_before,
    }


def score_difference(pt_boxes: pl.DataFrame, path: Path) -> dict:
    """The ``.pt`` run's boxes found in the file (same image and class, IoU >= 0.9), their score differences."""
    from det_calib.matching.one_to_one import box_iou

    rows = json.loads(path.read_text())
    file = pl.DataFrame(
        {
            "image": [str(r["image_id"]) for r in rows],
            "cls": [r["category_id"] - 1 for r in rows],
            "x1": [r["bbox"][0] for r in rows],
            "y1": [r["bbox"][1] for r in rows],
            "x2": [r["bbox"][0] + r["bbox"][2] for r in rows],
            "y2": [r["bbox"][1] + r["bbox"][3] for r in rows],
            "score": [r["score"] for r in rows],
        }
    )
    diffs, lost = [], 0
    by_key = dict(file.group_by(["image", "cls"]))
    for (image, cls), g in pt_boxes.with_columns(
        pl.col("image").map_elements(lambda s: Path(s).stem, return_dtype=pl.String)
    ).group_by(["image", "cls"]):
        f = by_key.get((image, cls))
        if f is None:
            lost += g.height
            continue
        iou = box_iou(
            g.select("x1", "y1", "x2", "y2").to_numpy(), f.select("x1", "y1", "x2", "y2").to_numpy()
        )
        j = iou.argmax(axis=1)
        hit = iou[np.arange(len(j)), j] >= 0.9
        lost += int((~hit).sum())
        diffs += list(np.abs(g["conf"].to_numpy()[hit] - f["score"].to_numpy()[j[hit]]))
    d = np.asarray(diffs)
    return {
        "rows": len(rows),
        "found": len(d),
        "lost": lost,
        "mean": float(d.mean()),
        "median": float(np.median(d)),
        "max": float(d.max()),
    }


def main() -> None:
    from det_calib.demo import demo_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64, help="images of each split (64)")
    ap.add_argument("--batch", type=int, default=16, help="val's batch (its default, 16)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/val_json"))
    ap.add_argument("--doc", action="store_true", help="write docs/generated/val_json.md")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    data = limited_data(a.work, a.images)
    model = demo_model()
    pt = calibrate(data, a.work / "pt", model=model, head="nms")
    pt_boxes = pl.read_parquet(a.work / "pt" / "boxes.parquet").filter(pl.col("head") == "nms")
    files = {
        f"val as written (batch {a.batch}, multi-label)": val_json(
            model, data, a.work, "val", batch=a.batch, single_label=False, pad=None
        )
    }
    files["val as written, top class per box"] = top_class(files[next(iter(files))])
    files[f"val single-label NMS (batch {a.batch})"] = val_json(
        model, data, a.work, "single", batch=a.batch, single_label=True, pad=None
    )
    files["val single-label, batch 1"] = val_json(
        model, data, a.work, "single_b1", batch=1, single_label=True, pad=None
    )
    files["val single-label, batch 1, no half-stride pad"] = val_json(
        model, data, a.work, "single_b1_pad0", batch=1, single_label=True, pad=0.0
    )
    lines = [
        "| source | rows | .pt boxes found (lost) | score diff mean / median / max | chosen map | "
        "kept-set ECE "
        "raw -> calibrated | minus the .pt run's |",
        "|---|---|---|---|---|---|---|",
        f"| .pt run (predict's capture) | {pt_boxes.height} | | | {pt['method']} | {pt['raw']:.4f} "
        "-> "
        f"{pt['calibrated']:.4f} | |",
    ]
    print("\n".join(lines), flush=True)
    for label, path in files.items():
        d = score_difference(pt_boxes, path)
        r = calibrate(data, a.work / f"run_{path.stem}", detections=str(path))
        lines.append(
            f"| {label} | {d['rows']} | {d['found']} ({d['lost']}) | {d['mean']:.4f} / "
            f"{d['median']:.4f} / "
            f"{d['max']:.4f} | {r['method']} | {r['raw']:.4f} -> {r['calibrated']:.4f} | "
            f"{r['raw'] - pt['raw']:+.4f}, {r['calibrated'] - pt['calibrated']:+.4f} |"
        )
        print(lines[-1], flush=True)
    if a.doc:
        write_doc_table(
            "val_json",
            "\n".join(lines),
            command=f"python3 benchmarks/measure_val_json.py --images "
            f"{a.images} --batch {a.batch} --doc",
            note=f"The demo detector, the first {a.images} images of the calib and test splits; nms "
            "head, kept set at conf 0.25, ECE of 15 bins.",
        )


if __name__ == "__main__":
    main()

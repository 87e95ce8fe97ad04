"""det_calib on a CUDA device: the checks and timings that need a GPU, in one short run.

The project's tests run on CPUs; this script is what a machine with an NVIDIA GPU runs to check the CUDA
paths (see docs/gpu.md for the last run's figures). On the embedded demo detector and data, on
``--device``:

1. **Capture equals predict**: the capture of both heads on ``--images`` images of the test split, against
   Ultralytics' ``predict`` on the same device one image at a time (``nms=None`` / ``nms=False``): boxes,
   confs and classes compared exactly, and the largest differences printed; the same for the demo segment
   model on 40 images (masks of ``predict(retina_masks=True)`` too); and how far ``--batch 16`` moves the
   logits from the exact batch-1 capture on the device.
2. **The default run on the GPU**: ``det-calib calibrate --device D`` (both heads, 16 images per capture
   forward pass, the default on CUDA; the verification in a spawned child beside the run), its summary
   beside the CPU run's figures.
3. **The calibrated checkpoint on the GPU**: the run's ``calibrated.pt`` through plain Ultralytics
   ``predict`` on the device (det_calib not involved), its kept set at 0.25 against the run's own
   ``calibrated`` column, box by box.
4. **Timings**: plain Ultralytics val of the two splits on the device beside the run's wall time (the
   issue's yardstick), and the capture of the test split at ``--batch`` 1 and 16.

Everything is written under ``--out`` (``gpu_check.json``, the run's ``summary.txt``), so a machine
that is given back after the run still returns the figures; ``--from-json`` turns that file into the
docs' table (``--doc`` writes it to ``docs/generated/gpu_check.md``) on any machine. Run from the
repository root::

    PYTHONPATH=. python3 benchmarks/gpu_check.py --device 0 --out /tmp/gpu_check
    PYTHONPATH=. python3 benchmarks/gpu_check.py --from-json /tmp/gpu_check/gpu_check.json --doc
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes.pt"
SEG_MODEL = REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes_seg.pt"
TASK_MODELS = {
    "pose": REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes_pose.pt",
    "obb": REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes_obb.pt",
}
BATCHES = (1, 16)


def _run_step(name: str, results: dict, fn) -> None:
    """Run one check; its figures or its error go into ``results[name]`` (the other checks still run)."""
    t = time.perf_counter()
    print(f"== {name}", flush=True)
    try:
        results[name] = fn()
        results[name]["seconds"] = round(time.perf_counter() - t, 2)
    except Exception as e:  # a check that breaks is a finding, not the end of the run
        results[name] = {
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-3000:],
        }
    print(
        json.dumps({k: v for k, v in results[name].items() if k != "traceback"}, indent=1),
        flush=True,
    )


def _predict_rows(yolo, images, device, head):
    import numpy as np

    kw = {"nms": False} if head == "e2e" else {}
    res = [
        yolo.predict(str(p), conf=0.001, imgsz=320, device=device, verbose=False, **kw)[0]
        for p in images
    ]
    return np.concatenate([r.boxes.data.cpu().numpy() for r in res]), [len(r.boxes) for r in res]


def _batch1_capture(model, images, device):
    """Both heads of ``model`` captured image by image (batch 1) on ``device``, at the demo's size."""
    from ultralytics import YOLO

    from det_calib.capture.predictor import capture

    return capture(
        YOLO(str(model)),
        images,
        heads=("nms", "e2e"),
        imgsz=320,
        batch=1,
        device=device,
        progress=False,
    )


def capture_equals_predict(images, device) -> dict:
    import numpy as np
    from ultralytics import YOLO

    df = _batch1_capture(MODEL, images, device)
    out = {"images": len(images), "device_name": _device_name(device)}
    for head in ("nms", "e2e"):
        rows = df.filter(df["head"] == head)
        ref, counts = _predict_rows(YOLO(str(MODEL)), images, device, head)
        got_counts = np.bincount(rows["image_id"].to_numpy(), minlength=len(images)).tolist()
        same_counts = got_counts == counts
        fig = {
            "boxes": rows.height,
            "predict_boxes": int(len(ref)),
            "same_boxes_per_image": same_counts,
        }
        if same_counts:
            xyxy = rows.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32)
            conf = rows["conf"].to_numpy().astype(np.float32)
            fig |= {
                "xyxy_exact": bool(np.array_equal(xyxy, ref[:, :4])),
                "conf_exact": bool(np.array_equal(conf, ref[:, 4])),
                "cls_exact": bool(np.array_equal(rows["cls"].to_numpy(), ref[:, 5].astype(int))),
                "xyxy_max_diff": float(np.abs(xyxy - ref[:, :4]).max()),
                "conf_max_diff": float(np.abs(conf - ref[:, 4]).max()),
                "sigmoid_logit_vs_conf": float(
                    np.abs(1 / (1 + np.exp(-rows["logit"].to_numpy())) - conf).max()
                ),
            }
        out[head] = fig
    return out


def segment_capture_equals_predict(images, device) -> dict:
    """The demo segment model: boxes, confs, classes and masks of both heads against
    ``predict(retina_masks=True)`` on the device, image by image."""
    import numpy as np
    import polars as pl
    from pycocotools import mask as mask_utils
    from ultralytics import YOLO

    df = _batch1_capture(SEG_MODEL, images, device)
    out = {"images": len(images)}
    for head in ("nms", "e2e"):
        yolo = YOLO(str(SEG_MODEL))
        kw = {"nms": False} if head == "e2e" else {}
        boxes = masks_equal = rows_equal = 0
        for i, p in enumerate(images):
            r = yolo.predict(
                str(p), imgsz=320, conf=1e-3, retina_masks=True, device=device, verbose=False, **kw
            )[0]
            d = df.filter((pl.col("head") == head) & (pl.col("image_id") == i))
            ref = r.boxes.data.cpu().numpy()
            boxes += len(ref)
            if d.height != len(ref):
                continue
            same = (
                np.array_equal(
                    d.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), ref[:, :4]
                )
                and np.array_equal(d["conf"].to_numpy().astype(np.float32), ref[:, 4])
                and np.array_equal(d["cls"].to_numpy(), ref[:, 5].astype(int))
            )
            rows_equal += len(ref) if same else 0
            if same and len(ref):
                h, w = r.orig_shape
                m = mask_utils.decode(
                    [{"size": [h, w], "counts": c} for c in d["segm"].to_list()]
                ).transpose(2, 0, 1)
                masks_equal += int(
                    np.array_equal(m, r.masks.data.cpu().numpy().astype(np.uint8))
                ) * len(ref)
        out[head] = {
            "predict_boxes": boxes,
            "rows_bit_equal": rows_equal,
            "masks_bit_equal": masks_equal,
        }
    return out


def task_capture_equals_predict(images, device) -> dict:
    """The demo pose and OBB models: boxes, confs, classes and keypoints / rotated boxes of both heads
    against ``predict`` on the device, image by image."""
    import numpy as np
    import polars as pl
    from ultralytics import YOLO

    out = {"images": len(images)}
    for task, model in TASK_MODELS.items():
        df = _batch1_capture(model, images, device)
        for head in ("nms", "e2e"):
            yolo = YOLO(str(model))
            kw = {"nms": False} if head == "e2e" else {}
            boxes = equal = 0
            for i, p in enumerate(images):
                r = yolo.predict(str(p), imgsz=320, conf=1e-3, device=device, verbose=False, **kw)[
                    0
                ]
                b = r.obb if task == "obb" else r.boxes
                d = df.filter((pl.col("head") == head) & (pl.col("image_id") == i))
                boxes += len(b)
                if d.height != len(b):
                    continue
                same = (
                    np.array_equal(
                        d.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32),
                        b.xyxy.cpu().numpy(),
                    )
                    and np.array_equal(
                        d["conf"].to_numpy().astype(np.float32), b.conf.cpu().numpy()
                    )
                    and np.array_equal(d["cls"].to_numpy(), b.cls.cpu().numpy().astype(int))
                )
                if same and task == "obb":
                    same = np.array_equal(
                        np.array(d["xywhr"].to_list(), dtype=np.float32).reshape(-1, 5),
                        r.obb.xywhr.cpu().numpy(),
                    )
                elif same and len(b):
                    same = np.array_equal(
                        np.array(d["kpts"].to_list(), dtype=np.float32),
                        r.keypoints.data.cpu().numpy(),
                    )
                equal += len(b) if same else 0
            out[f"{task} {head}"] = {"predict_boxes": boxes, "rows_bit_equal": equal}
    return out


def batched_capture(images, device) -> dict:
    """``--batch 16`` on the device against the exact batch-1 capture: how far its logits move."""
    import numpy as np
    import polars as pl

    from det_calib.capture.predictor import Capturer

    one = Capturer(str(MODEL), heads=("nms",), imgsz=320, batch=1, device=str(device))(
        images, progress=False
    )
    many = Capturer(str(MODEL), heads=("nms",), imgsz=320, batch=16, device=str(device))(
        images, progress=False
    )
    strong = [d.filter(pl.col("conf") > 0.01).sort("image_id", "conf") for d in (one, many)]
    out = {
        "boxes_batch1": one.height,
        "boxes_batch16": many.height,
        "strong_boxes": [d.height for d in strong],
    }
    if strong[0].height == strong[1].height:
        diff = strong[0]["logit"].to_numpy() - strong[1]["logit"].to_numpy()
        out["logit_max_diff_strong"] = float(np.abs(diff).max())
    return out


def ensemble_and_check(device, run_dir: Path, work: Path) -> dict:
    """``det-calib ensemble`` (the embedded demo ensemble) and ``det-calib check`` of the default run on the
    device: labelled (the test split) and unlabelled (its images), exit codes and their verdict lines."""
    import contextlib
    import io

    from det_calib.cli import main as cli

    cache = (
        Path(os.environ.get("DET_CALIB_CACHE", Path.home() / ".cache" / "det_calib"))
        / "shapes-v1-seed0"
    )
    out = {}
    for name, argv in (
        ("ensemble", ["ensemble", "--device", str(device), "--out", str(work / "ens")]),
        (
            "check_labelled",
            [
                "check",
                str(run_dir),
                "--data",
                str(cache / "data.yaml"),
                "--split",
                "test",
                "--device",
                str(device),
                "--out",
                str(work / "chk"),
            ],
        ),
        (
            "check_images",
            [
                "check",
                str(run_dir),
                "--images",
                str(cache / "images" / "test"),
                "--device",
                str(device),
                "--out",
                str(work / "chk_img"),
            ],
        ),
    ):
        shutil.rmtree(work / name, ignore_errors=True)
        buf = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(buf):
            rc = cli(argv)
        lines = buf.getvalue().splitlines()
        out[name] = {
            "exit": rc,
            "wall": round(time.perf_counter() - t, 2),
            "lines": [
                ln for ln in lines if ln.startswith(("[", "verdict", "check", "ensemble", "fused"))
            ][:12]
            or lines[-12:],
        }
    return out


def _device_name(device) -> str:
    import torch

    if not str(device).isdigit():
        return str(device)
    return torch.cuda.get_device_name(int(device)) if torch.cuda.is_available() else "no CUDA"


def default_run(device, run_dir: Path, out: Path) -> dict:
    from det_calib.cli import main

    shutil.rmtree(run_dir, ignore_errors=True)
    t = time.perf_counter()
    rc = main(["calibrate", "--device", str(device), "--out", str(run_dir)])
    wall = time.perf_counter() - t
    summary = (run_dir / "summary.txt").read_text() if (run_dir / "summary.txt").exists() else ""
    (out / "summary.txt").write_text(summary)
    rec = json.loads((run_dir / "calibration.json").read_text()) if rc == 0 else {}
    return {
        "exit": rc,
        "wall": round(wall, 2),
        "timings": rec.get("timings"),
        "summary_tail": summary.splitlines()[-40:],
    }


def calibrated_checkpoint(device, run_dir: Path) -> dict:
    """calibrated.pt through plain predict on the device: its kept set at 0.25 is the run's, box for box."""
    import numpy as np
    import polars as pl
    from ultralytics import YOLO

    boxes = pl.read_parquet(run_dir / "boxes.parquet").filter(pl.col("split") == "test")
    images = boxes.select("image", "image_id").unique().sort("image_id")
    yolo = YOLO(str(run_dir / "calibrated.pt"))
    out = {}
    for head in ("nms", "e2e"):
        rows = boxes.filter((pl.col("head") == head) & (pl.col("calibrated") > 0.25))
        kw = {"nms": False} if head == "e2e" else {}
        deployed, images_differing, conf_diff, xyxy_diff = 0, 0, 0.0, 0.0
        for name, image_id in images.iter_rows():
            r = yolo.predict(
                str(_image_path(name)), conf=0.25, imgsz=320, device=device, verbose=False, **kw
            )[0]
            d = r.boxes.data.cpu().numpy()
            mine = rows.filter(pl.col("image_id") == image_id).sort(
                ["calibrated", "x1"], descending=[True, False]
            )
            deployed += len(d)
            if len(d) != mine.height:
                images_differing += 1
                continue
            if len(d):
                d = d[np.lexsort((d[:, 0], -d[:, 4]))]
                conf_diff = max(
                    conf_diff, float(np.abs(d[:, 4] - mine["calibrated"].to_numpy()).max())
                )
                xyxy = mine.select("x1", "y1", "x2", "y2").to_numpy()
                xyxy_diff = max(xyxy_diff, float(np.abs(d[:, :4] - xyxy).max()))
        out[head] = {
            "kept_deployed": deployed,
            "kept_run": rows.height,
            "images_with_other_counts": images_differing,
            "conf_max_diff": conf_diff,
            "xyxy_max_diff": xyxy_diff,
        }
    return out


def _image_path(name: str) -> Path:
    cache = Path(os.environ.get("DET_CALIB_CACHE", Path.home() / ".cache" / "det_calib"))
    hits = list(cache.glob(f"shapes-v1-seed0/images/*/{Path(name).name}"))
    if not hits:
        raise FileNotFoundError(name)
    return hits[0]


def timings(device, out: Path) -> dict:
    import yaml
    from ultralytics import YOLO

    from det_calib.capture.predictor import Capturer

    cache = (
        Path(os.environ.get("DET_CALIB_CACHE", Path.home() / ".cache" / "det_calib"))
        / "shapes-v1-seed0"
    )
    d = yaml.safe_load((cache / "data.yaml").read_text())
    yamls = []
    for split in ("calib", "test"):
        y = dict(d, val=d[split])
        yamls.append(out / f"{split}.yaml")
        yamls[-1].write_text(yaml.safe_dump(y))
    kw = {
        "split": "val",
        "device": device,
        "plots": False,
        "verbose": False,
        "project": str(out / "val"),
    }
    YOLO(str(MODEL)).val(data=str(yamls[0]), name="warm-up", **kw)
    t = time.perf_counter()
    for i, y in enumerate(yamls):
        YOLO(str(MODEL)).val(data=str(y), name=str(i), **kw)
    val_wall = time.perf_counter() - t
    images = sorted((cache / "images" / "test").glob("*.png"))
    res = {"plain_val_two_splits_wall": round(val_wall, 2), "test_images": len(images)}
    for batch in BATCHES:
        cap = Capturer(str(MODEL), heads=("nms", "e2e"), imgsz=320, batch=batch, device=str(device))
        cap(images[:32], progress=False)  # warm-up
        t = time.perf_counter()
        cap(images, progress=False)
        res[f"capture_test_batch{batch}_wall"] = round(time.perf_counter() - t, 2)
    return res


def _environment(device) -> dict:
    import platform

    import torch
    import ultralytics

    return {
        "device": _device_name(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ultralytics": ultralytics.__version__,
    }


def _kept_ece(line: str) -> str:
    """``[nms] boxes kept at conf 0.25 (A raw -> B calibrated): ECE(...) x [..] -> y [..]; ...`` as
    ``nms: ECE x → y (A raw -> B calibrated)``."""
    return re.sub(
        r"^\[(\w+)\] boxes kept at conf 0.25 \((.*?)\): ECE\(15 bins, IoU 0.5\) ([\d.]+) \[.*?\] "
        r"-> "
        r"([\d.]+) \[.*",
        r"\1: ECE \3 → \4 (\2)",
        line,
    )


def doc_body(r: dict) -> str:
    """The docs' table of one run's ``gpu_check.json``."""

    def err(name):
        if name not in r:
            return "not run"
        return f"failed: {r[name]['error']}" if "error" in r[name] else None

    rows = []
    c = r.get("capture_equals_predict", {})
    rows.append(
        (
            "capture = `predict`, demo detector, both heads",
            err("capture_equals_predict")
            or "; ".join(
                f"{h}: {c[h]['boxes']:,} boxes on {c['images']} test images, boxes, confs and "
                "classes "
                + (
                    "bit-identical"
                    if c[h].get("xyxy_exact") and c[h].get("conf_exact") and c[h].get("cls_exact")
                    else f"NOT identical (largest differences: box {c[h].get('xyxy_max_diff')}, "
                    f"conf {c[h].get('conf_max_diff')})"
                )
                for h in ("nms", "e2e")
            ),
        )
    )
    g = r.get("segment_capture_equals_predict", {})
    rows.append(
        (
            "capture = `predict(retina_masks=True)`, demo segment model, both heads",
            err("segment_capture_equals_predict")
            or "; ".join(
                f"{h}: {g[h]['rows_bit_equal']:,} of {g[h]['predict_boxes']:,} boxes and "
                f"{g[h]['masks_bit_equal']:,} masks bit-identical on {g['images']} images"
                for h in ("nms", "e2e")
            ),
        )
    )
    tc = r.get("task_capture_equals_predict")
    if tc is not None:
        rows.append(
            (
                "capture = `predict`, demo pose and OBB models, both heads",
                err("task_capture_equals_predict")
                or "; ".join(
                    f"{k}: {v['rows_bit_equal']:,} of {v['predict_boxes']:,} boxes (with their "
                    + ("rotated boxes" if k.startswith("obb") else "keypoints")
                    + ") bit-identical"
                    for k, v in tc.items()
                    if k not in ("images", "seconds")
                )
                + f" on {tc.get('images')} images",
            )
        )
    b = r.get("batched_capture", {})
    rows.append(
        (
            "`--batch 16` against the exact batch-1 capture (nms head, same images)",
            err("batched_capture")
            or (
                f"{b['boxes_batch1']:,} → {b['boxes_batch16']:,} boxes above conf 0.001, "
                f"{b['strong_boxes'][0]:,} → "
                f"{b['strong_boxes'][1]:,} above 0.01"
                + (
                    f"; logits differ by up to {b['logit_max_diff_strong']:.1e}"
                    if "logit_max_diff_strong" in b
                    else ""
                )
                + ": not exact on the GPU either"
            ),
        )
    )
    d = r.get("default_run", {})
    if err("default_run"):
        rows.append(
            ("`det-calib calibrate --device 0` (the README's first command)", err("default_run"))
        )
    else:
        kept = [
            _kept_ece(ln)
            for ln in d.get("summary_tail", [])
            if re.match(r"^\[\w+\] boxes kept at conf 0.25", ln)
        ]
        same = [
            ln[1:4] + " " + ln.split("(")[1].split(";")[0]
            for ln in d.get("summary_tail", [])
            if "COCO mAP50-95" in ln
        ]
        rows.append(
            (
                "`det-calib calibrate --device 0` (the README's first command)",
                f"exit {d['exit']}; kept-set ECE at 0.25 "
                + "; ".join(kept)
                + "; COCO mAP "
                + ", ".join(same),
            )
        )
    e = r.get("ensemble_and_check", {})
    if err("ensemble_and_check"):
        rows.append(
            ("`det-calib ensemble` and `det-calib check` on the device", err("ensemble_and_check"))
        )
    else:
        ens = [
            _kept_ece(ln)
            for ln in e["ensemble"]["lines"]
            if re.match(r"^\[\w+\] boxes kept at conf 0.25", ln)
        ]
        rows.append(
            (
                "`det-calib ensemble --device 0` (the demo ensemble)",
                f"exit {e['ensemble']['exit']} in "
                f"{e['ensemble']['wall']:.0f} s; fused kept-set ECE at 0.25 " + "; ".join(ens),
            )
        )
        for name, what in (("check_labelled", "calibration: "), ("check_images", "output: ")):
            verdicts = [
                ln.split("]")[0] + "] " + ln.split(what, 1)[1].split(";")[0].split(" (")[0]
                for ln in e[name]["lines"]
                if what in ln
            ]
            label = (
                "`det-calib check RUN --data ... --split test --device 0`"
                if name == "check_labelled"
                else "`det-calib check RUN --images test/ --device 0`"
            )
            rows.append(
                (
                    label,
                    f"exit {e[name]['exit']} in {e[name]['wall']:.0f} s; " + "; ".join(verdicts),
                )
            )
    k = r.get("calibrated_checkpoint", {})
    rows.append(
        (
            "the run's `calibrated.pt` through plain Ultralytics `predict` on the GPU, kept at "
            "0.25",
            err("calibrated_checkpoint")
            or "; ".join(
                f"{h}: {k[h]['kept_deployed']:,} boxes kept (the run's: {k[h]['kept_run']:,}), "
                f"confs within {k[h]['conf_max_diff']:.1e} of the run's `calibrated` column, boxes "
                + ("equal" if k[h]["xyxy_max_diff"] == 0 else f"within {k[h]['xyxy_max_diff']:.1e}")
                for h in ("nms", "e2e")
            ),
        )
    )
    t = r.get("timings", {})
    if not err("timings") and not err("default_run"):
        stages = d["timings"]["stages"]
        rows.append(
            (
                "wall time: `calibrate` against plain Ultralytics val of the two splits",
                f"{d['wall']:.1f} s against {t['plain_val_two_splits_wall']:.1f} s "
                f"({d['wall'] / t['plain_val_two_splits_wall']:.1f}x); the run's stages (wall s): "
                + ", ".join(f"{n} {v['wall']:.1f}" for n, v in stages.items() if v["wall"] >= 0.05),
            )
        )
        rows.append(
            (
                "capture of the 400-image test split, both heads",
                f"{t['capture_test_batch1_wall']:.1f} s at "
                f"batch 1 (exact), {t['capture_test_batch16_wall']:.1f} s at `--batch 16`",
            )
        )
    env = r.get("environment", {})
    head = ", ".join(f"{k} {v}" for k, v in env.items())
    return (
        f"On {head or 'a CUDA device'}:\n\n| check | result |\n|---|---|\n"
        + "\n".join(f"| {a} | {b} |" for a, b in rows)
        + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="0")
    ap.add_argument(
        "--images", type=int, default=100, help="test images for the capture/predict check"
    )
    ap.add_argument("--out", type=Path, help="gpu_check.json, the run's summary.txt")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/gpu_check_work"),
        help="the run's folder, val's files",
    )
    ap.add_argument(
        "--only", help="run only these checks (comma-separated names, as in gpu_check.json)"
    )
    ap.add_argument(
        "--from-json",
        type=Path,
        help="print (with --doc: write) the table of an earlier run's json",
    )
    ap.add_argument(
        "--doc", action="store_true", help="write the table to docs/generated/gpu_check.md"
    )
    a = ap.parse_args()
    if a.from_json:
        body = doc_body(json.loads(a.from_json.read_text()))
        print(body)
        if a.doc:
            from doc_table import write_doc_table

            write_doc_table(
                "gpu_check", body, command="python3 benchmarks/gpu_check.py --device 0 --out OUT"
            )
        return 0
    if a.out is None:
        ap.error("--out is required (or --from-json)")
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from det_calib.cli import main as cli

    cli(["demo-data"])
    cache = (
        Path(os.environ.get("DET_CALIB_CACHE", Path.home() / ".cache" / "det_calib"))
        / "shapes-v1-seed0"
    )
    images = sorted((cache / "images" / "test").glob("*.png"))[: a.images]
    results: dict = {"environment": _environment(a.device)}
    run_dir = a.work / "run"
    only = set(a.only.split(",")) if a.only else None

    def _step(name, results, fn):  # the checks --only names
        if only is None or name in only:
            _run_step(name, results, fn)

    _step("capture_equals_predict", results, lambda: capture_equals_predict(images, a.device))
    _step(
        "segment_capture_equals_predict",
        results,
        lambda: segment_capture_equals_predict(images[:40], a.device),
    )
    _step(
        "task_capture_equals_predict",
        results,
        lambda: task_capture_equals_predict(images[:40], a.device),
    )
    _step("batched_capture", results, lambda: batched_capture(images, a.device))
    _step("default_run", results, lambda: default_run(a.device, run_dir, a.out))
    _step("calibrated_checkpoint", results, lambda: calibrated_checkpoint(a.device, run_dir))
    _step("ensemble_and_check", results, lambda: ensemble_and_check(a.device, run_dir, a.work))
    _step("timings", results, lambda: timings(a.device, a.work))
    (a.out / "gpu_check.json").write_text(json.dumps(results, indent=1))
    return 0 if not any("error" in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

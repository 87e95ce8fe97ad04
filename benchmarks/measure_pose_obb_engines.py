"""Parity of det_calib on exported pose and OBB engines (issue 40): capture and calibrated export.

For each demo model (``det_calib/demo/assets/yolo26n_shapes_pose.pt``, ``yolo26n_shapes_obb.pt``) and each engine
(ONNX FP32 and OpenVINO FP32, each with the one-to-many head ``nms`` and, exported with ``nms=False``, the
one-to-one head ``e2e``; OpenVINO INT8 with NNCF statistics on a share of the task's demo ``calib`` split,
``nms`` head, unless ``--no-int8``), exported by Ultralytics at 320 into ``--out``:

- **capture**: :class:`det_calib.capture.exported.ExportCapturer` on the images against Ultralytics'
  ``predict(conf=0.001)`` on the same export, one image at a time: the largest absolute difference of the box
  columns (OBB: the axis-aligned hull), the confs and the task payload (``kpts``: ``Results.keypoints.data``;
  ``xywhr``: ``Results.obb.xywhr``); and, on per-anchor outputs, of every class's captured logit against the
  logit of the class channels the plain runtime (onnxruntime / OpenVINO) outputs at the kept anchors;
- **calibrated export**: the export with a spline appended after its class scores
  (:func:`det_calib.deploy.calibrated_export.write_calibrated_export`; the spline is fitted on synthetic logits:
  what is measured is where and how exactly the graph applies it, not a calibration). Through the plain runtime:
  the largest change of any channel other than the class scores (box, keypoints, angle, row class), and the
  largest difference of its scores from the spline on the raw engine's scores. Through Ultralytics'
  ``predict`` on the calibrated and the raw export: of the boxes the raw export scores above 0.05 (the same
  number of the calibrated export's first boxes), how many have no box with the same box, class and payload,
  bit for bit, on the other side (a tie: two overlapping anchors of a class scored exactly alike, as an INT8
  engine's score levels make, which Ultralytics' NMS orders arbitrarily), and over the others the largest
  difference of their scores from the spline on the raw scores.

``--doc`` writes the table to docs/generated/pose_obb_engines.md. Run from the repository root::

    python3 benchmarks/measure_pose_obb_engines.py --out /tmp/pose_obb_engines --doc
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
IMGSZ = 320
ENGINES = (
    ("onnx fp32", "nms", {"format": "onnx"}),
    ("onnx fp32", "e2e", {"format": "onnx", "nms": False}),
    ("openvino fp32", "nms", {"format": "openvino"}),
    ("openvino fp32", "e2e", {"format": "openvino", "nms": False}),
    ("openvino int8", "nms", {"format": "openvino", "int8": True}),
)


def _spline():
    from det_calib.calibrators.registry import make_calibrator

    rng = np.random.default_rng(0)
    z = rng.normal(-2.0, 3.0, 20_000)
    y = rng.random(z.size) < 1 / (1 + np.exp(-(0.6 * z - 0.3 + 0.5 * np.tanh(z))))
    return make_calibrator("spline").fit(z, y)


def _export(task: str, kw: dict, folder: Path, fraction: float) -> Path:
    from ultralytics import YOLO

    from det_calib.demo import demo_data_yaml

    folder.mkdir(parents=True, exist_ok=True)
    pt = folder / f"{task}.pt"
    shutil.copy(ROOT / "det_calib" / "demo" / "assets" / f"yolo26n_shapes_{task}.pt", pt)
    if kw.get("int8"):
        data = demo_data_yaml(task="pose") if task == "pose" else demo_data_yaml(task="obb")
        kw = {**kw, "data": str(data), "fraction": fraction}
    return Path(YOLO(str(pt)).export(imgsz=IMGSZ, verbose=False, **kw))


def _runtime(export: Path):
    """The plain runtime's first output on a letterboxed image (no Ultralytics in the loop), compiled as
    Ultralytics compiles it."""
    import cv2
    from ultralytics.data.augment import LetterBox

    if str(export).endswith(".onnx"):
        import onnxruntime as ort

        sess = ort.InferenceSession(str(export), providers=["CPUExecutionProvider"])
        infer = lambda x: sess.run(None, {sess.get_inputs()[0].name: x})[0]
    else:
        import openvino as ov

        # Ultralytics' own OpenVINO settings on Linux x86: the CPU's default inference precision (bf16 where the
        # CPU has it), so that the runtime computes what `predict` computes
        compiled = ov.Core().compile_model(
            str(next(iter(sorted(export.glob("*.xml"))))), "CPU", {"PERFORMANCE_HINT": "LATENCY"}
        )
        infer = lambda x: compiled(x)[compiled.outputs[0]]

    def run(image: Path) -> np.ndarray:
        x = LetterBox((IMGSZ, IMGSZ), auto=False)(image=cv2.imread(str(image)))[
            ..., ::-1
        ].transpose(2, 0, 1)
        return infer((np.ascontiguousarray(x)[None] / 255.0).astype(np.float32))

    return run


def _ov_precision() -> str:
    import openvino as ov

    return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def _payload(r, task: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``predict``'s boxes (OBB: the hull), confs, classes and payload of one image, as float32 arrays."""
    b = r.obb if task == "obb" else r.boxes
    pay = r.obb.xywhr.numpy() if task == "obb" else r.keypoints.data.numpy().reshape(len(b), -1)
    return b.xyxy.numpy(), b.conf.numpy(), b.cls.numpy(), pay.reshape(len(b), -1)


def _capture_parity(export: Path, task: str, images: list[Path]) -> dict:
    import cv2
    import polars as pl
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer
    from det_calib.deploy.export_layout import score_layout

    cap = make_capturer(export)
    per_anchor = not cap.info.rows
    if per_anchor:
        cap = make_capturer(export, all_logits=True)
    table = cap(images, progress=False)
    column = "xywhr" if task == "obb" else "kpts"
    yolo, run = YOLO(str(export), task=task), _runtime(export)
    lo, hi = score_layout(cap.info).scores
    d = {"box": 0.0, "conf": 0.0, "payload": 0.0, "logits": None, "n": table.height}
    for i, image in enumerate(images):
        got = table.filter(pl.col("image_id") == i)
        xyxy, conf, _, pay = _payload(yolo.predict(str(image), conf=0.001, verbose=False)[0], task)
        assert got.height == len(conf), "the capture and predict keep different boxes"
        d["box"] = max(
            d["box"],
            _maxabs(got.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), xyxy),
        )
        d["conf"] = max(d["conf"], _maxabs(got["conf"].to_numpy().astype(np.float32), conf))
        d["payload"] = max(
            d["payload"],
            _maxabs(np.array(got[column].to_list(), np.float32).reshape(len(conf), -1), pay),
        )
        if per_anchor:
            cap.predict_image(cv2.imread(str(image)))
            k = cap.predictor.captured[1][0].long().numpy()
            want = logit_of_prob(run(image)[0, lo:hi][:, k].T).astype(np.float32)
            d["logits"] = max(d["logits"] or 0.0, _maxabs(np.stack(got["logits"].to_list()), want))
    return d


def _maxabs(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max(initial=0.0))


def _calibrated_parity(export: Path, task: str, images: list[Path], cal, folder: Path) -> dict:
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, read_export
    from det_calib.deploy.calibrated_export import write_calibrated_export
    from det_calib.deploy.export_layout import score_layout

    info = read_export(export)
    out = write_calibrated_export(
        export,
        folder / ("calibrated.onnx" if info.format == "onnx" else "calibrated_openvino_model"),
        {info.head: cal},
    )
    lay = score_layout(info)
    lo, hi = lay.scores
    raw_run, cal_run = _runtime(export), _runtime(out)
    raw_yolo, cal_yolo = YOLO(str(export), task=task), YOLO(str(out), task=task)
    d = {"other": 0.0, "scores": 0.0, "one_only": 0, "pred_conf": 0.0, "kept": 0}
    for image in images:
        raw, got = raw_run(image), cal_run(image)
        ch = np.arange(raw.shape[lay.axis])
        other = (ch < lo) | (ch >= hi)
        d["other"] = max(
            d["other"],
            _maxabs(np.take(got, ch[other], lay.axis), np.take(raw, ch[other], lay.axis)),
        )
        p, mine = np.take(raw, ch[lo:hi], lay.axis), np.take(got, ch[lo:hi], lay.axis)
        d["scores"] = max(
            d["scores"], _maxabs(mine, cal.predict_proba(logit_of_prob(p.ravel())).reshape(p.shape))
        )
        a = _payload(raw_yolo.predict(str(image), conf=0.001, verbose=False)[0], task)
        b = _payload(cal_yolo.predict(str(image), conf=0.001, verbose=False)[0], task)
        n = int((a[1] > 0.05).sum())
        (ra, ca), (rb, cb) = _rows(a, n), _rows(b, n)
        # boxes, class and payload equal bit for bit: the same box; a box kept by one side only comes from a tie
        # (two overlapping anchors of one class scored exactly alike, an INT8 engine's levels), which
        # Ultralytics' NMS orders arbitrarily
        keys_b = {r.tobytes(): j for j, r in enumerate(rb)}
        pairs = [(i, keys_b[r.tobytes()]) for i, r in enumerate(ra) if r.tobytes() in keys_b]
        d["one_only"] += n - len(pairs)
        if pairs:
            ia, ib = np.array(pairs).T
            d["pred_conf"] = max(
                d["pred_conf"], _maxabs(cb[ib], cal.predict_proba(logit_of_prob(ca[ia])))
            )
        d["kept"] += n
    return d


def _rows(pred: tuple, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` boxes as rows ``xyxy cls payload`` in a fixed order, and their confs in that order."""
    xyxy, conf, cls, pay = pred
    rows = np.concatenate([xyxy[:n], cls[:n, None], pay[:n]], axis=1)
    order = np.lexsort(rows.T[::-1])
    return rows[order], conf[:n][order]


def _fmt(v: float | None) -> str:
    return "–" if v is None else ("0" if v == 0 else f"{v:.1e}")


def _table(rows: list[tuple]) -> str:
    head = (
        "| task | engine | head | boxes | capture − predict: box / conf / payload | logits − "
        "runtime's class "
        "channels | calibrated export: other channels changed | scores − calibrator | predict (raw "
        "> 0.05): "
        "boxes | kept by one side only | scores − calibrator "
        "|\n|---|---|---|---:|---|---|---|---|---:|---:|---|\n"
    )
    body = ""
    for task, engine, head_name, c, k in rows:
        body += (
            f"| {task} | {engine} | {head_name} | {c['n']:,} | {_fmt(c['box'])} / "
            f"{_fmt(c['conf'])} / "
            f"{_fmt(c['payload'])} | {_fmt(c['logits'])} | {_fmt(k['other'])} | "
            f"{_fmt(k['scores'])} | "
            f"{k['kept']:,} | {k['one_only']} | {_fmt(k['pred_conf'])} |\n"
        )
    return head + body


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/det_calib_pose_obb_engines"))
    ap.add_argument("--images", type=int, default=20, help="first N images of the fixture split")
    ap.add_argument(
        "--fraction", type=float, default=0.05, help="share of the calib split for INT8 statistics"
    )
    ap.add_argument("--no-int8", action="store_true", help="skip the OpenVINO INT8 engines")
    ap.add_argument(
        "--doc",
        action="store_true",
        help="also write the table to docs/generated/pose_obb_engines.md",
    )
    a = ap.parse_args()
    fixture = ROOT / "det_calib" / "demo" / "assets" / "fixture" / "images" / "fixture"
    images = sorted(fixture.glob("*.jpg"))[: a.images]
    cal, rows = _spline(), []
    for task in ("pose", "obb"):
        for engine, head, kw in ENGINES:
            if a.no_int8 and kw.get("int8"):
                continue
            folder = a.out / task / f"{engine.replace(' ', '_')}_{head}"
            export = _export(task, kw, folder, a.fraction)
            rows.append(
                (
                    task,
                    engine,
                    head,
                    _capture_parity(export, task, images),
                    _calibrated_parity(export, task, images, cal, folder),
                )
            )
            print(_table(rows[-1:]).splitlines()[-1], flush=True)
    text = _table(rows)
    print(text)
    if a.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "pose_obb_engines",
            text,
            note=f"Demo models at {IMGSZ}, the first {len(images)} fixture "
            "images. Largest absolute differences; 0: bit-identical; –: no per-anchor class "
            "channels "
            "(top-k rows). payload: keypoints (pose, x y visibility) or xywhr (OBB). OpenVINO runs "
            "at "
            f"the CPU's default inference precision, as Ultralytics runs it ({_ov_precision()} "
            "here).",
        )


if __name__ == "__main__":
    main()

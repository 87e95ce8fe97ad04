"""Exported pose and OBB engines for the tests of their capture and calibrated export.

:func:`task_exports` exports the committed demo models (``det_calib/demo/assets/yolo26n_shapes_pose.pt``,
``yolo26n_shapes_obb.pt``: YOLO26 heads, ``Pose26`` / ``OBB26``) to ONNX (one-to-many per-anchor output and,
with ``nms=False``, the one-to-one top-k rows) and OpenVINO, and a legacy-head (YOLO11: ``Pose`` / ``OBB``)
checkpoint of each task (:func:`legacy_checkpoint`) to ONNX, all at 320. The exports are made once per test
session, in the session's temporary folder, and shared by the test modules that ask for them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "det_calib" / "demo" / "assets"
DEMO = {"pose": ASSETS / "yolo26n_shapes_pose.pt", "obb": ASSETS / "yolo26n_shapes_obb.pt"}
NAMES = {
    0: "circle",
    1: "ellipse",
    2: "square",
    3: "rectangle",
    4: "triangle",
    5: "hexagon",
    6: "star",
    7: "cross",
}
KPT_SHAPE = (5, 3)
IMGSZ = 320

EXPORTS = {  # name -> (task, source: "demo" | "legacy", export arguments)
    "pose_onnx": ("pose", "demo", {"format": "onnx"}),
    "pose_onnx_e2e": ("pose", "demo", {"format": "onnx", "nms": False}),
    "pose_openvino": ("pose", "demo", {"format": "openvino"}),
    "pose_openvino_e2e": ("pose", "demo", {"format": "openvino", "nms": False}),
    "pose11_onnx": ("pose", "legacy", {"format": "onnx"}),
    "obb_onnx": ("obb", "demo", {"format": "onnx"}),
    "obb_onnx_e2e": ("obb", "demo", {"format": "onnx", "nms": False}),
    "obb_openvino": ("obb", "demo", {"format": "openvino"}),
    "obb_openvino_e2e": ("obb", "demo", {"format": "openvino", "nms": False}),
    "obb11_onnx": ("obb", "legacy", {"format": "onnx"}),
}


def legacy_checkpoint(out: Path, task: str, *, seed: int = 0) -> Path:
    """A YOLO11n-pose (``kpt_shape [5, 3]``) or YOLO11n-obb checkpoint with the demo's 8 classes, built from
    Ultralytics' yaml (the legacy ``Pose`` / ``OBB`` head: one-to-many branch only), weights perturbed, class
    biases drawn so that scores spread over (0, 1) and the payload branch (``cv4``) far from its initial
    weights; saved in float32 as a checkpoint plain Ultralytics loads.

    Its scores are not a trained model's: on the demo's flat backgrounds many anchors see the same features and
    tie exactly, so the order of tied boxes (NMS, ``max_det``) is arbitrary; compare its outputs channel by
    channel, not box by box after NMS."""
    import torch
    from ultralytics.nn.tasks import OBBModel, PoseModel

    torch.manual_seed(seed)
    if task == "pose":
        model = PoseModel(
            "yolo11n-pose.yaml", nc=len(NAMES), data_kpt_shape=KPT_SHAPE, verbose=False
        )
    else:
        model = OBBModel("yolo11n-obb.yaml", nc=len(NAMES), verbose=False)
    head = model.model[-1]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for level in head.cv3:
            torch.nn.init.normal_(level[-1].weight, 0.0, 0.5)
            torch.nn.init.normal_(level[-1].bias, -2.0, 1.5)
        for p in head.cv4.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    model.names = dict(NAMES)
    model.args = {"task": task, "imgsz": IMGSZ}
    model.task = task
    torch.save(
        {
            "model": model.float().eval(),
            "train_args": {"task": task, "imgsz": IMGSZ},
            "ema": None,
            "optimizer": None,
            "epoch": -1,
        },
        out,
    )
    return Path(out)


def task_exports(tmp_path_factory) -> dict[str, Path]:
    """Name (a key of :data:`EXPORTS`) -> the export, made once per test session."""
    from ultralytics import YOLO

    root = tmp_path_factory.getbasetemp() / "pose_obb_exports"
    done = root / "exports.json"
    if done.is_file():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    out = {}
    for name, (task, source, kw) in EXPORTS.items():
        sub = root / name
        sub.mkdir()
        pt = sub / f"{task}.pt"
        if source == "demo":
            shutil.copy(DEMO[task], pt)
        else:
            legacy_checkpoint(pt, task)
        out[name] = Path(YOLO(str(pt)).export(imgsz=IMGSZ, verbose=False, **kw))
    done.write_text(json.dumps({k: str(v) for k, v in out.items()}))
    return out

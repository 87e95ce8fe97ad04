"""LiteRT and NCNN exports of the demo's segment, pose and OBB models, for the tests of their capture
(``tests/capture/test_exported_mobile_tasks.py``) and of their calibrated engine
(``tests/deploy/test_mobile_engines_tasks.py``).

:func:`mobile_task_exports` exports each committed demo model (``det_calib/demo/assets/yolo26n_shapes_seg.pt``,
``_pose.pt``, ``_obb.pt``) with Ultralytics' own ``export`` to LiteRT (FP32) and NCNN at 320, once per test
session (about 15 s an export), in the session's temporary folder; each export sits beside the copy of the
``.pt`` it was made from (:func:`source_of`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "det_calib" / "demo" / "assets"
MODELS = {
    "segment": ASSETS / "yolo26n_shapes_seg.pt",
    "pose": ASSETS / "yolo26n_shapes_pose.pt",
    "obb": ASSETS / "yolo26n_shapes_obb.pt",
}
ENGINES = {"litert": "litert fp32", "ncnn": "ncnn fp32"}
CASES = [(task, fmt) for task in MODELS for fmt in ENGINES]
IMGSZ = 320


def source_of(export: Path, task: str) -> Path:
    """The ``.pt`` ``export`` was made from (its copy beside the export)."""
    return Path(export).parent / MODELS[task].name


def mobile_task_exports(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """``(task, format)`` (the :data:`CASES`) -> the export, made once per test session."""
    from ultralytics import YOLO

    root = tmp_path_factory.getbasetemp() / "mobile_task_exports"
    done = root / "exports.json"
    if done.is_file():
        return {tuple(k.split("/")): Path(v) for k, v in json.loads(done.read_text()).items()}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    out = {}
    for task, fmt in CASES:
        sub = root / f"{task}_{fmt}"
        sub.mkdir()
        pt = source_of(sub / "x", task)
        shutil.copy(MODELS[task], pt)
        out[task, fmt] = Path(YOLO(str(pt)).export(format=fmt, imgsz=IMGSZ, verbose=False))
    done.write_text(json.dumps({f"{t}/{f}": str(v) for (t, f), v in out.items()}))
    return out

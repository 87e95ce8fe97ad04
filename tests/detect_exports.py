"""Exports of the demo detector made by Ultralytics' own ``export``, each made once per test session and
shared by the test modules that ask for it (``tests/deploy/test_exported_engines.py``,
``test_size_export_engines.py``, ``test_mobile_engines.py``, ``tests/system/test_detections_run.py``).

:func:`demo_export` makes one export (a name of :data:`EXPORTS`) on first use, in the session's temporary
folder, beside its own copy of the demo detector's ``.pt``; the INT8 exports calibrate their quantisation on
the fixture split, copied into the session's folder (Ultralytics writes its label cache beside the labels,
which then do not belong to the package). A test that writes beside an export copies it first.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes.pt"
FIXTURE = REPO / "det_calib" / "demo" / "assets" / "fixture"

EXPORTS = {  # name -> Ultralytics export arguments (the demo detector's own imgsz, 320)
    "onnx": {"format": "onnx"},
    "onnx_e2e": {"format": "onnx", "nms": False},
    "openvino": {"format": "openvino"},
    "openvino_int8": {"format": "openvino", "int8": True},
    "litert_fp32": {"format": "litert"},
    "litert_int8": {"format": "litert", "int8": True},
    "ncnn": {"format": "ncnn"},
}


def demo_export(tmp_path_factory, name: str) -> Path:
    """The demo detector's export ``name`` (a key of :data:`EXPORTS`), made once per test session."""
    from ultralytics import YOLO

    root = tmp_path_factory.getbasetemp() / "detect_exports"
    sub = root / name
    done = sub / "export.txt"
    if done.is_file():
        return Path(done.read_text())
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir(parents=True)
    kw = dict(EXPORTS[name])
    if kw.get("int8"):
        data = root / "fixture"
        if not data.is_dir():
            shutil.copytree(FIXTURE, data)
        kw["data"] = str(data / "data.yaml")
    pt = sub / "demo.pt"
    shutil.copy(DEMO, pt)
    made = Path(YOLO(str(pt)).export(verbose=False, **kw))
    done.write_text(str(made))
    return made

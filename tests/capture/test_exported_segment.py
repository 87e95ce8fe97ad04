"""ONNX and OpenVINO exports of a segment model: the capture's boxes, confs, classes and masks equal
Ultralytics' predict(retina_masks=True) on the same export, image by image, on both heads."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from pycocotools import mask as mask_utils

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

EXPORTS = {
    "onnx": {"format": "onnx"},
    "onnx_e2e": {"format": "onnx", "nms": False},
    "openvino": {"format": "openvino"},
    "openvino_e2e": {"format": "openvino", "nms": False},
}


@pytest.fixture(scope="module")
def seg_exports(tmp_path_factory, shapes_seg_path) -> dict[str, Path]:
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("seg_exports")
    out = {}
    for name, kw in EXPORTS.items():
        pt = folder / name / "shapes_seg.pt"
        pt.parent.mkdir()
        shutil.copy(shapes_seg_path, pt)
        out[name] = Path(YOLO(str(pt)).export(imgsz=320, **kw))
    return out


@pytest.mark.parametrize("name", list(EXPORTS))
def test_export_capture_equals_predict(seg_exports, fixture_images, name):
    from ultralytics import YOLO

    from det_calib.capture.exported import ExportCapturer, logit_of_prob, read_export

    info = read_export(seg_exports[name])
    assert info.task == "segment" and info.head == ("e2e" if name.endswith("e2e") else "nms")
    images = fixture_images[:4]
    cap = ExportCapturer(seg_exports[name], all_logits=not info.rows)
    table = cap(images, progress=False)
    assert table.schema["segm"] == pl.Binary
    yolo = YOLO(str(seg_exports[name]), task="segment")
    n = 0
    for i, im in enumerate(images):
        got = table.filter(pl.col("image_id") == i)
        want = yolo.predict(str(im), conf=0.001, retina_masks=True, verbose=False)[0]
        assert got.height == len(want.boxes) > 0
        np.testing.assert_array_equal(
            got.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32),
            want.boxes.xyxy.numpy(),
        )
        np.testing.assert_array_equal(
            got["conf"].to_numpy().astype(np.float32), want.boxes.conf.numpy()
        )
        np.testing.assert_array_equal(got["cls"].to_numpy(), want.boxes.cls.numpy().astype(int))
        np.testing.assert_array_equal(
            got["logit"].to_numpy(), logit_of_prob(want.boxes.conf.numpy())
        )
        h, w = want.orig_shape
        masks = mask_utils.decode([{"size": [h, w], "counts": c} for c in got["segm"].to_list()])
        np.testing.assert_array_equal(
            masks.transpose(2, 0, 1), want.masks.data.numpy().astype(np.uint8)
        )
        n += got.height
    assert n >= 40
    if (
        not info.rows
    ):  # every class's logit at the box's anchor (class scores between box and mask channels)
        lg = np.stack(table["logits"].to_list())
        np.testing.assert_allclose(
            lg[np.arange(table.height), table["cls"].to_numpy()], table["logit"], atol=1e-5
        )
        assert (lg.argmax(1) == table["cls"].to_numpy()).all()

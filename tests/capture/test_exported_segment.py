"""ONNX and OpenVINO exports of a segment model: the capture's boxes, confs, classes and masks equal
Ultralytics' predict(retina_masks=True) on the same export, image by image, on both heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from pycocotools import mask as mask_utils
from segment_checkpoints import SEG_EXPORTS, seg_export

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

EXPORTS = list(SEG_EXPORTS)


@pytest.fixture(scope="module")
def seg_exports(tmp_path_factory, demo_seg_checkpoint) -> dict[str, Path]:
    """The demo segment checkpoint's exports, shared with the session (tests/segment_checkpoints.py)."""
    return {name: seg_export(tmp_path_factory, demo_seg_checkpoint, name) for name in EXPORTS}


@pytest.mark.parametrize("name", EXPORTS)
def test_export_capture_equals_predict(seg_exports, fixture_images, name):
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer, read_export

    info = read_export(seg_exports[name])
    assert info.task == "segment" and info.head == ("e2e" if name.endswith("e2e") else "nms")
    images = fixture_images[:4]
    cap = make_capturer(seg_exports[name], all_logits=not info.rows)
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

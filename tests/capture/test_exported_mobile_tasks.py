"""LiteRT and NCNN exports of segment, pose and OBB models (the demo's YOLO26n-seg, -pose and -obb, exported by
Ultralytics at 320): the capture's boxes, confs, classes and logits, and each task's payload (masks, keypoints,
rotated boxes), equal Ultralytics' predict on the same engine, image by image and bit for bit, as for the ONNX
and OpenVINO exports (tests/capture/test_exported_segment.py, test_exported_pose_obb.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from mobile_task_exports import CASES, ENGINES, mobile_task_exports
from pycocotools import mask as mask_utils

pytest.importorskip("ai_edge_litert")
pytest.importorskip("litert_torch")
pytest.importorskip("ncnn")
pytest.importorskip("pnnx")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Each task's demo model exported to each engine (about a minute in all; shared with
    tests/deploy/test_mobile_engines_tasks.py)."""
    return mobile_task_exports(tmp_path_factory)


def _payload_equal(task: str, got: pl.DataFrame, want) -> None:
    if task == "segment":
        h, w = want.orig_shape
        masks = mask_utils.decode([{"size": [h, w], "counts": c} for c in got["segm"].to_list()])
        np.testing.assert_array_equal(
            masks.transpose(2, 0, 1), want.masks.data.numpy().astype(np.uint8)
        )
    elif task == "pose":
        kpts = np.array(got["kpts"].to_list(), dtype=np.float32).reshape(want.keypoints.data.shape)
        np.testing.assert_array_equal(kpts, want.keypoints.data.numpy())
    else:
        np.testing.assert_array_equal(
            np.array(got["xywhr"].to_list(), dtype=np.float32).reshape(-1, 5),
            want.obb.xywhr.numpy(),
        )


@pytest.mark.parametrize(("task", "fmt"), CASES)
def test_mobile_export_capture_equals_predict(exports, fixture_images, task, fmt):
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer, read_export

    info = read_export(exports[task, fmt])
    assert (info.task, info.engine, info.head, info.rows) == (task, ENGINES[fmt], "nms", False)
    images = fixture_images[:4]
    table = make_capturer(exports[task, fmt], all_logits=True)(images, progress=False)
    yolo = YOLO(str(exports[task, fmt]), task=task)
    n = 0
    for i, im in enumerate(images):
        got = table.filter(pl.col("image_id") == i)
        masks = (
            {"retina_masks": True} if task == "segment" else {}
        )  # the capture's masks are predict's at full size
        want = yolo.predict(str(im), conf=0.001, verbose=False, **masks)[0]
        boxes = want.obb if task == "obb" else want.boxes
        assert got.height == len(boxes) > 0
        np.testing.assert_array_equal(
            got.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), boxes.xyxy.numpy()
        )
        np.testing.assert_array_equal(got["conf"].to_numpy().astype(np.float32), boxes.conf.numpy())
        np.testing.assert_array_equal(got["cls"].to_numpy(), boxes.cls.numpy().astype(int))
        np.testing.assert_array_equal(got["logit"].to_numpy(), logit_of_prob(boxes.conf.numpy()))
        _payload_equal(task, got, want)
        n += got.height
    assert n >= 40
    # every class's logit was read: the box's own class is the largest, and its logit is the conf's
    lg = np.stack(table["logits"].to_list())
    assert lg.shape[1] == len(info.names)
    np.testing.assert_allclose(
        lg[np.arange(table.height), table["cls"].to_numpy()], table["logit"], atol=1e-5
    )
    assert (lg.argmax(1) == table["cls"].to_numpy()).all()

"""ONNX and OpenVINO exports of pose and OBB models (the demo's YOLO26n-pose / -obb, both heads; a YOLO11n
legacy head of each): the capture's boxes, confs, classes, keypoints and rotated boxes equal Ultralytics'
predict on the same export, image by image and bit for bit; the class scores are read where each task's
output holds them (after the 4 box channels, before the keypoints or the angle)."""

from __future__ import annotations

import cv2
import numpy as np
import polars as pl
import pytest
from pose_obb_exports import EXPORTS, IMGSZ, KPT_SHAPE, task_exports

from det_calib.errors import InputError

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

NC = 8


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return task_exports(tmp_path_factory)


def _raw_output(export, image) -> np.ndarray:
    """The engine's first output on the letterboxed image, run by the plain runtime (no Ultralytics)."""
    from ultralytics.data.augment import LetterBox

    x = LetterBox((IMGSZ, IMGSZ), auto=False)(image=cv2.imread(str(image)))[..., ::-1].transpose(
        2, 0, 1
    )
    x = (np.ascontiguousarray(x)[None] / 255.0).astype(np.float32)
    if str(export).endswith(".onnx"):
        import onnxruntime as ort

        sess = ort.InferenceSession(str(export), providers=["CPUExecutionProvider"])
        return sess.run(None, {sess.get_inputs()[0].name: x})[0]
    import openvino as ov

    compiled = ov.Core().compile_model(str(next(iter(sorted(export.glob("*.xml"))))), "CPU")
    return compiled(x)[compiled.outputs[0]]


def test_export_metadata_and_layout(exports):
    from det_calib.capture.exported import read_export
    from det_calib.deploy.export_layout import score_layout

    for name, (task, _source, kw) in EXPORTS.items():
        info = read_export(exports[name])
        assert info.task == task and info.names[7] == "cross"
        assert info.payload_shape == (KPT_SHAPE if task == "pose" else None)
        assert (info.head, info.rows) == (
            ("e2e", True) if kw.get("nms") is False else ("nms", False)
        )
        extra = 15 if task == "pose" else 1
        lay = score_layout(info)
        assert lay.channels == (6 + extra if info.rows else 4 + NC + extra)
        assert lay.scores == ((4, 5) if info.rows else (4, 4 + NC))


@pytest.mark.parametrize("name", list(EXPORTS))
def test_export_capture_equals_predict(exports, fixture_images, name):
    """Boxes (OBB: the hull), confs, classes, keypoints / xywhr bit-identical to ``predict`` on the export, one
    image at a time; the logit is the conf's; every class's logit (per-anchor exports) sits at the box's anchor
    in the class channels of the engine's own output."""
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer, read_export
    from det_calib.deploy.export_layout import score_layout

    task = EXPORTS[name][0]
    info = read_export(exports[name])
    images = [fixture_images[k] for k in (0, 3, 6, 9)]
    cap = make_capturer(exports[name], all_logits=not info.rows)
    table = cap(images, progress=False)
    column = {"pose": "kpts", "obb": "xywhr"}[task]
    assert column in table.columns
    yolo = YOLO(str(exports[name]), task=task)
    n = 0
    for i, im in enumerate(images):
        got = table.filter(pl.col("image_id") == i)
        want = yolo.predict(str(im), conf=0.001, verbose=False)[0]
        boxes = want.obb if task == "obb" else want.boxes
        assert got.height == len(boxes)
        np.testing.assert_array_equal(
            got.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), boxes.xyxy.numpy()
        )
        np.testing.assert_array_equal(got["conf"].to_numpy().astype(np.float32), boxes.conf.numpy())
        np.testing.assert_array_equal(got["cls"].to_numpy(), boxes.cls.numpy().astype(int))
        np.testing.assert_array_equal(got["logit"].to_numpy(), logit_of_prob(boxes.conf.numpy()))
        payload = np.array(got[column].to_list(), dtype=np.float32)
        if task == "obb":
            np.testing.assert_array_equal(payload.reshape(-1, 5), want.obb.xywhr.numpy())
        else:
            np.testing.assert_array_equal(
                payload.reshape(-1, *KPT_SHAPE), want.keypoints.data.numpy()
            )
        n += got.height
    assert n >= 40
    if info.rows:
        return
    lo, hi = score_layout(info).scores
    lg = np.stack(table["logits"].to_list())
    np.testing.assert_allclose(
        lg[np.arange(table.height), table["cls"].to_numpy()], table["logit"], atol=1e-5
    )
    assert (lg.argmax(1) == table["cls"].to_numpy()).all()
    # the same image through the plain runtime: the captured class scores are the output's class channels at the
    # anchors NMS kept, and the channels after them are the task's (visibilities in (0, 1); the angle)
    cap.predict_image(cv2.imread(str(images[0])))
    _, keep = cap.predictor.captured
    raw = _raw_output(exports[name], images[0])
    k = keep[0].long().numpy()
    first = table.filter(pl.col("image_id") == 0)
    np.testing.assert_array_equal(
        np.stack(first["logits"].to_list()), logit_of_prob(raw[0, lo:hi][:, k].T).astype(np.float32)
    )
    assert raw.shape[1] == score_layout(info).channels
    if task == "pose":
        vis = raw[0, hi + 2 :: 3]
        assert vis.shape[0] == KPT_SHAPE[0] and ((vis >= 0) & (vis <= 1)).all()


def test_export_reader_names_a_task_not_taken(exports):
    """A reader asked for other tasks refuses a pose or OBB export in one line naming its task."""
    from det_calib.capture.exported import load_export, read_export

    with pytest.raises(InputError, match="model task is `pose`: det_calib "):
        read_export(exports["pose_onnx"], tasks=("detect", "segment"))
    with pytest.raises(InputError, match="model task is `obb`"):
        load_export(exports["obb_onnx_e2e"], tasks=("detect", "segment"))

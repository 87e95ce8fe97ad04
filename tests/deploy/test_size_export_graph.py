"""The size map (size-platt) in the calibrated export's graph (det_calib/deploy/size_export.py), on hand-made exports.

An ONNX model and an OpenVINO model with Ultralytics' metadata, whose inputs are the letterboxed image
``images`` and the detections (per-anchor ``(1, 4 + nc, A)`` centre-size boxes, or top-k rows ``(1, N, 6)``)
and whose output is the detections as given, stand for a detector's export. The calibrated export must give
the boxes (and classes) back unchanged and every score as ``sigmoid(a z + b + c log(relative area))``, the area
of the box clipped to the image's rectangle found from the padding, over that rectangle's area: checked
against a float64 reference on planted letterboxed images (padding above and below, left and right, none),
boxes reaching into the padding or lying wholly inside it. The real exports of the demo detector are
tested in deploy/test_size_export_engines.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from det_calib.calibrators.size import SizePlattScaler
from det_calib.deploy.calibrated_export import write_calibrated_export
from det_calib.deploy.size_export import _PAD_VALUE, _reference_log_area, _sized_probs

pytestmark = pytest.mark.fast

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

NC, A, N, S = 3, 80, 40, 64
NAMES = {0: "a", 1: "b", 2: "c"}
CAL = SizePlattScaler.from_dict(
    {"format": "det_calib.SizePlattScaler", "version": 1, "a": 1.3, "b": -0.4, "c": -0.35}
)


def metadata(end2end: bool) -> dict:
    return {
        "task": "detect",
        "names": str(NAMES),
        "imgsz": f"[{S}, {S}]",
        "batch": "1",
        "end2end": str(end2end),
        "args": str({"nms": False, "half": False}),
    }


def det_shape(rows: bool) -> list[int]:
    return [1, N, 6] if rows else [1, 4 + NC, A]


def onnx_export(path, *, rows: bool, half: bool = False):
    import onnx
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    ins = [
        helper.make_tensor_value_info("images", elem, [1, 3, S, S]),
        helper.make_tensor_value_info("dets", elem, det_shape(rows)),
    ]
    out = helper.make_tensor_value_info("output0", elem, det_shape(rows))
    nodes = [
        helper.make_node("Identity", ["dets"], ["hidden"]),
        helper.make_node("Identity", ["hidden"], ["output0"]),
    ]
    graph = helper.make_graph(nodes, "export", ins, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, metadata(rows))
    onnx.save(model, str(path))
    return path


def openvino_export(folder, *, rows: bool):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    img = ops.parameter([1, 3, S, S], np.float32, name="images")
    dets = ops.parameter(det_shape(rows), np.float32, name="dets")
    model = ov.Model(
        [ops.result(ops.add(dets, ops.constant(np.float32(0.0))))], [img, dets], "export"
    )
    folder.mkdir()
    ov.save_model(model, str(folder / "export.xml"), compress_to_fp16=False)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata(rows)))
    return folder


#: The image's rectangle (x0, y0, x1, y1) in the S x S input: padded above and below, left and right, none.
RECTS = {"wide": (0, 8, S, S - 8), "tall": (12, 0, S - 12, S), "square": (0, 0, S, S)}


def letterboxed(rect, seed: int = 0) -> np.ndarray:
    """An input image: grey 114 outside ``rect``, random inside, with a grey 114 row and column in the middle
    of the image (padding only at the edges counts)."""
    rng = np.random.default_rng(seed)
    x = np.full((1, 3, S, S), _PAD_VALUE, np.float32)
    x0, y0, x1, y1 = rect
    x[:, :, y0:y1, x0:x1] = rng.uniform(0, 1, (1, 3, y1 - y0, x1 - x0))
    x[:, :, (y0 + y1) // 2, x0:x1] = _PAD_VALUE
    x[:, :, y0:y1, (x0 + x1) // 2] = _PAD_VALUE
    return x


def planted(rows: bool, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Detections and their corners: boxes anywhere in the input (some into the padding, some wholly in it)."""
    rng = np.random.default_rng(seed)
    n = N if rows else A
    c = rng.uniform(-4, S + 4, (n, 2))
    wh = np.exp(rng.uniform(np.log(0.5), np.log(S), (n, 2)))
    xyxy = np.column_stack([c - wh / 2, c + wh / 2]).astype(np.float32)
    xyxy[0] = [1, 1, 5, 4]  # wholly in the padding of the wide and tall images
    if rows:
        x = np.zeros((1, N, 6), np.float32)
        x[0, :, :4] = xyxy
        x[0, :, 4] = 1 / (1 + np.exp(-rng.normal(0, 3, N)))
        x[0, :, 5] = rng.integers(0, NC, N)
    else:
        x = np.zeros((1, 4 + NC, A), np.float32)
        x[0, :4] = np.column_stack([c, wh]).T.astype(np.float32)
        x[0, 4:] = 1 / (1 + np.exp(-rng.normal(0, 3, (NC, A))))
        xyxy = np.column_stack(
            [
                x[0, 0] - x[0, 2] / 2,
                x[0, 1] - x[0, 3] / 2,
                x[0, 0] + x[0, 2] / 2,
                x[0, 1] + x[0, 3] / 2,
            ]
        )  # float32, as Ultralytics' xywh2xyxy
    return x, xyxy


def check(got: np.ndarray, x: np.ndarray, xyxy: np.ndarray, rect, rows: bool) -> None:
    la = _reference_log_area(xyxy, rect)
    assert got.shape == x.shape and got.dtype == np.float32
    if rows:
        assert (got[0, :, [0, 1, 2, 3, 5]] == x[0, :, [0, 1, 2, 3, 5]]).all()
        np.testing.assert_allclose(
            got[0, :, 4], _sized_probs(CAL, x[0, :, 4], la), rtol=0, atol=2e-6
        )
    else:
        assert (got[0, :4] == x[0, :4]).all()
        np.testing.assert_allclose(
            got[0, 4:], _sized_probs(CAL, x[0, 4:], la[None, :]), rtol=0, atol=2e-6
        )
    assert (
        la.min() == pytest.approx(np.log(1e-8)) or rect == RECTS["square"]
    )  # the box in the padding


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
@pytest.mark.parametrize("shape", sorted(RECTS))
def test_onnx_size_term(tmp_path, rows, shape):
    import onnxruntime as ort

    head = "e2e" if rows else "nms"
    out = write_calibrated_export(
        onnx_export(tmp_path / "m.onnx", rows=rows), tmp_path / "c.onnx", {head: CAL}
    )
    x, xyxy = planted(rows)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"images": letterboxed(RECTS[shape]), "dets": x})
    check(got, x, xyxy, RECTS[shape], rows)


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
def test_onnx_fp16_engine(tmp_path, rows):
    """A float16 engine (image and output float16): the size term runs in float32 between casts."""
    import onnxruntime as ort

    head = "e2e" if rows else "nms"
    out = write_calibrated_export(
        onnx_export(tmp_path / "m.onnx", rows=rows, half=True), tmp_path / "c.onnx", {head: CAL}
    )
    x, _ = planted(rows)
    x = x.astype(np.float16)
    f = x.astype(np.float32)  # what the graph computes on, between its casts
    xyxy = (
        f[0, :, :4]
        if rows
        else np.column_stack(
            [
                f[0, 0] - f[0, 2] / 2,
                f[0, 1] - f[0, 3] / 2,
                f[0, 0] + f[0, 2] / 2,
                f[0, 1] + f[0, 3] / 2,
            ]
        )
    )
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"images": letterboxed(RECTS["wide"]).astype(np.float16), "dets": x})
    assert got.dtype == np.float16
    la = _reference_log_area(xyxy, RECTS["wide"])
    p = x[0, :, 4] if rows else x[0, 4:]
    want = _sized_probs(CAL, p.astype(np.float32), la if rows else la[None, :])
    np.testing.assert_allclose(
        (got[0, :, 4] if rows else got[0, 4:]).astype(np.float64), want, rtol=0, atol=5e-4
    )


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
@pytest.mark.parametrize("shape", sorted(RECTS))
def test_openvino_size_term(tmp_path, rows, shape):
    ov = pytest.importorskip("openvino")

    head = "e2e" if rows else "nms"
    out = write_calibrated_export(
        openvino_export(tmp_path / "m_openvino_model", rows=rows),
        tmp_path / "c_openvino_model",
        {head: CAL},
    )
    x, xyxy = planted(rows)
    compiled = ov.Core().compile_model(str(out / "export.xml"), "CPU")
    got = compiled({"images": letterboxed(RECTS[shape]), "dets": x})[compiled.output(0)]
    check(got, x, xyxy, RECTS[shape], rows)


def test_reference_log_area_known_answer():
    """A 10 x 10 box in a 100 x 50 image rectangle is 2% of it; half of a box outside the image is cut off."""
    rect = (0, 25, 100, 75)
    la = _reference_log_area(np.array([[10, 30, 20, 40], [-5, 30, 5, 40]], np.float32), rect)
    np.testing.assert_allclose(np.exp(la), [0.02, 0.01], rtol=1e-12)

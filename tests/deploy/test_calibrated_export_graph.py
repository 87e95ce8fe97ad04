"""The calibrated export's graph (det_calib/deploy/calibrated_export.py) on small hand-made exports.

An ONNX model and an OpenVINO model that pass their input through unchanged, carrying Ultralytics'
export metadata, stand for a detector's export: one with per-anchor output ``(B, 4 + nc,
anchors)`` (the one-to-many head) and one with top-k rows ``(B, N, 6)`` (the one-to-one head), in
float32 and (ONNX) float16. The calibrated export, run by the plain runtime on planted scores, must
give back the boxes and classes unchanged and, for every class channel or row, the calibrator's
own score (:func:`~det_calib.deploy.calibrated_export.calibrated_probs` and the calibrator's
``predict_proba``) to float32 rounding: for affine maps, per-class maps and maps with hinges. The real
exports of the demo detector are tested in deploy/test_exported_engines.py (minutes); these take about a second.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.exported import logit_of_prob, read_export
from det_calib.deploy.calibrated_export import (
    _deployed_map,
    calibrated_probs,
    write_calibrated_export,
)
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

NC, ANCHORS, ROWS = 3, 64, 40
NAMES = {0: "a", 1: "b", 2: "c"}


def metadata(end2end: bool) -> dict:
    return {
        "task": "detect",
        "names": str(NAMES),
        "imgsz": "[32, 32]",
        "batch": "1",
        "end2end": str(end2end),
        "args": str({"nms": False, "half": False}),
    }


def onnx_export(path, *, rows: bool, half: bool = False, opset: int = 17, outputs: int = 1):
    """An ONNX model whose output is its input (per-anchor or rows), with Ultralytics' metadata."""
    import onnx
    from onnx import TensorProto, helper

    shape = [1, ROWS, 6] if rows else [1, 4 + NC, ANCHORS]
    elem = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    x = helper.make_tensor_value_info("images", elem, shape)
    outs = [helper.make_tensor_value_info(f"output{i}", elem, shape) for i in range(outputs)]
    # two nodes in a row, so that only the output's producer is rewired (not every node's outputs)
    nodes = [helper.make_node("Identity", ["images"], ["hidden"])]
    nodes += [helper.make_node("Identity", ["hidden"], [f"output{i}"]) for i in range(outputs)]
    model = helper.make_model(
        helper.make_graph(nodes, "export", [x], outs),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    model.ir_version = 8
    helper.set_model_props(model, metadata(rows))
    onnx.save(model, str(path))
    return path


def openvino_export(folder, *, rows: bool):
    """An OpenVINO model folder whose output is its input, with Ultralytics' metadata.yaml."""
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    shape = [1, ROWS, 6] if rows else [1, 4 + NC, ANCHORS]
    x = ops.parameter(shape, np.float32, name="images")
    model = ov.Model([ops.result(ops.relu(x))], [x], "export")  # scores are >= 0: relu passes them
    folder.mkdir()
    ov.save_model(model, str(folder / "export.xml"), compress_to_fp16=False)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata(rows)))
    return folder


def planted_input(rows: bool, seed: int = 0) -> np.ndarray:
    """Boxes, and scores over (0, 1] with exact 0 and 1 and a wide logit range; rows also carry classes."""
    rng = np.random.default_rng(seed)
    if rows:
        x = np.zeros((1, ROWS, 6), np.float32)
        x[0, :, :4] = rng.uniform(0, 32, (ROWS, 4))
        x[0, :, 4] = 1 / (1 + np.exp(-rng.normal(0, 4, ROWS)))
        x[0, :2, 4] = [0.0, 1.0]
        x[0, :, 5] = rng.integers(0, NC, ROWS)
        return x
    x = np.zeros((1, 4 + NC, ANCHORS), np.float32)
    x[0, :4] = rng.uniform(0, 32, (4, ANCHORS))
    x[0, 4:] = 1 / (1 + np.exp(-rng.normal(0, 4, (NC, ANCHORS))))
    x[0, 4:, :2] = [[0.0, 1.0]] * NC
    return x


def fitted(method: str):
    """A calibrator fitted on planted boxes whose true map differs by class (and is not affine)."""
    rng = np.random.default_rng(1)
    k = rng.integers(0, NC, 6000)
    z = rng.normal(-1.0, 2.5, k.size)
    true = np.array([0.5, 0.9, 1.4])[k] * z + np.array([0.5, -0.4, 0.0])[k] + 0.8 * np.tanh(z)
    y = (rng.uniform(size=k.size) < 1 / (1 + np.exp(-true))).astype(float)
    cal = (
        make_calibrator(method, shrinkage=0.0)
        if method.startswith("class-")
        else make_calibrator(method)
    )
    return cal.fit(z, y, classes=k) if cal.per_class else cal.fit(z, y)


def expected(cal, x: np.ndarray, rows: bool) -> np.ndarray:
    """The calibrated output: boxes and classes as they were, each score through the calibrator."""
    out = x.astype(np.float64).copy()
    if rows:
        p, cls = out[0, :, 4], out[0, :, 5].astype(int)
        out[0, :, 4] = calibrated_probs(cal, p, cls, NC)
        own = cal.predict_proba(
            logit_of_prob(x[0, :, 4]), **({"classes": cls} if cal.per_class else {})
        )
    else:
        cls = np.repeat(np.arange(NC)[:, None], ANCHORS, 1)
        out[0, 4:] = calibrated_probs(cal, out[0, 4:], cls, NC)
        own = cal.predict_proba(
            logit_of_prob(x[0, 4:]).ravel(), **({"classes": cls.ravel()} if cal.per_class else {})
        )
        own = own.reshape(NC, ANCHORS)
    # the deployment tables are the calibrator (what the graph is built from)
    np.testing.assert_allclose(out[0, :, 4] if rows else out[0, 4:], own, rtol=0, atol=1e-9)
    return out


METHODS = ["temperature", "spline", "isotonic", "class-platt", "class-isotonic"]


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
@pytest.mark.parametrize("method", METHODS)
def test_onnx_graph_is_the_calibrator(tmp_path, method, rows):
    import onnx
    import onnxruntime as ort

    cal = fitted(method)
    src = onnx_export(tmp_path / "model.onnx", rows=rows)
    head = "e2e" if rows else "nms"
    assert read_export(src).head == head
    out = write_calibrated_export(
        src, tmp_path / "calibrated.onnx", {head: cal, "other": None}, metadata={"run": "r1"}
    )
    x = planted_input(rows)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"images": x})
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected(cal, x, rows), rtol=0, atol=2e-6)
    # the export keeps Ultralytics' metadata and records the calibration
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    info = read_export(out)
    assert (info.head, info.names, info.imgsz) == (head, list(NAMES.values()), (32, 32))
    rec = json.loads(props["det_calib"])
    assert rec["calibrator"] == cal.to_dict() and rec["head"] == head and rec["run"] == "r1"
    assert rec["source_export"] == str(src.resolve())


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
def test_onnx_fp16_output(tmp_path, rows):
    """A float16 engine: the map runs in float32 between two casts, the output stays float16."""
    import onnxruntime as ort

    cal = fitted("spline")
    head = "e2e" if rows else "nms"
    out = write_calibrated_export(
        onnx_export(tmp_path / "m.onnx", rows=rows, half=True), tmp_path / "c.onnx", {head: cal}
    )
    x = planted_input(rows).astype(np.float16)
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"images": x}
    )
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got.astype(np.float64), expected(cal, x.astype(np.float32), rows), rtol=1e-3, atol=1e-3
    )


@pytest.mark.parametrize("rows", [False, True], ids=["per-anchor", "rows"])
@pytest.mark.parametrize("method", ["spline", "class-platt", "class-isotonic"])
def test_openvino_graph_is_the_calibrator(tmp_path, method, rows):
    ov = pytest.importorskip("openvino")

    cal = fitted(method)
    src = openvino_export(tmp_path / "model_openvino_model", rows=rows)
    head = "e2e" if rows else "nms"
    out = write_calibrated_export(
        src, tmp_path / "calibrated_openvino_model", {head: cal}, metadata={"run": "r2"}
    )
    x = planted_input(rows)
    compiled = ov.Core().compile_model(str(out / "export.xml"), "CPU")
    got = compiled(x)[compiled.output(0)]
    np.testing.assert_allclose(got, expected(cal, x, rows), rtol=0, atol=2e-6)
    meta = yaml.safe_load((out / "metadata.yaml").read_text())
    assert (
        meta["task"] == "detect"
        and meta["det_calib"]["head"] == head
        and meta["det_calib"]["run"] == "r2"
    )
    assert meta["det_calib"]["calibrator"] == cal.to_dict()
    # written again over an existing folder: replaced, not nested
    write_calibrated_export(src, out, {head: cal})
    assert sorted(p.name for p in out.iterdir()) == ["export.bin", "export.xml", "metadata.yaml"]


def test_deployed_map_tables():
    """An affine map has no hinges; a map with hinges is its tables' sum of ReLUs (known answer:
    temperature 2 halves the logit)."""
    t = make_calibrator("temperature")
    t.temperature_ = 2.0
    m = _deployed_map(t, NC)
    assert m.x.shape == (NC, 0) and m.coef.shape == (NC, 0)
    assert m(np.array([-4.0, 0.0, 6.0]), np.array([0, 1, 2])).tolist() == [-2.0, 0.0, 3.0]
    cal = fitted("spline")
    m = _deployed_map(cal, NC)
    z = np.linspace(-8, 8, 101)
    for k in range(NC):
        np.testing.assert_allclose(
            m(z, np.full(z.size, k)), cal.transform_logits(z), rtol=0, atol=1e-9
        )


def test_bad_exports_are_refused(tmp_path):
    cal = fitted("spline")
    src = onnx_export(tmp_path / "m.onnx", rows=False)
    with pytest.raises(InputError, match="no calibrator for the `nms` head"):
        write_calibrated_export(src, tmp_path / "c.onnx", {"e2e": cal})
    with pytest.raises(InputError, match="opset 11"):
        write_calibrated_export(
            onnx_export(tmp_path / "old.onnx", rows=False, opset=11),
            tmp_path / "c.onnx",
            {"nms": cal},
        )
    with pytest.raises(InputError, match="expected one output tensor"):
        write_calibrated_export(
            onnx_export(tmp_path / "two.onnx", rows=False, outputs=2),
            tmp_path / "c.onnx",
            {"nms": cal},
        )
    assert not (tmp_path / "c.onnx").exists()

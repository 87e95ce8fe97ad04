"""Calibrated ONNX and OpenVINO exports of a segment model (YOLO26n-seg, both heads): in ``output0`` the class
scores, which sit between the 4 box channels and the 32 mask coefficients (rows: ``x1 y1 x2 y2 conf cls`` then
the coefficients), become the calibrator's; boxes, coefficients and the prototypes (``output1``) are the
uncalibrated export's, bit for bit; through Ultralytics' predict, the boxes and masks are the raw export's."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from segment_checkpoints import seg_export

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.exported import logit_of_prob, read_export
from det_calib.deploy.calibrated_export import write_calibrated_export

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
NC = 8


def _fit(method: str):
    rng = np.random.default_rng(0)
    k = rng.integers(0, NC, 20_000)
    z = rng.normal(-2.0, 3.0, k.size)
    y = rng.random(k.size) < 1 / (1 + np.exp(-(0.6 * z - 0.3 + 0.5 * np.tanh(z) + 0.1 * k)))
    cal = make_calibrator(method)
    return cal.fit(z, y, classes=k) if cal.per_class else cal.fit(z, y)


@pytest.fixture(scope="module")
def seg_exports(tmp_path_factory, demo_seg_checkpoint):
    """The demo segment checkpoint's exports, shared with the session (tests/segment_checkpoints.py)."""
    return {
        name: str(seg_export(tmp_path_factory, demo_seg_checkpoint, name))
        for name in ("onnx", "onnx_e2e", "openvino")
    }


def _letterboxed(image) -> np.ndarray:
    from ultralytics.data.augment import LetterBox

    x = LetterBox((320, 320), auto=False)(image=cv2.imread(str(image)))[..., ::-1].transpose(
        2, 0, 1
    )
    return (np.ascontiguousarray(x)[None] / 255.0).astype(np.float32)


def _run(export: Path, x: np.ndarray) -> list[np.ndarray]:
    """The plain runtime's outputs (onnxruntime, or OpenVINO's compiled model), in the export's order."""
    if str(export).endswith(".onnx"):
        import onnxruntime as ort

        sess = ort.InferenceSession(str(export), providers=["CPUExecutionProvider"])
        return sess.run([o.name for o in sess.get_outputs()], {sess.get_inputs()[0].name: x})
    import openvino as ov

    compiled = ov.Core().compile_model(str(next(iter(sorted(export.glob("*.xml"))))), "CPU")
    res = compiled(x)
    return [res[o] for o in compiled.outputs]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, method", [("onnx", "spline"), ("onnx_e2e", "class-platt"), ("openvino", "isotonic")]
)
def test_calibrated_segment_export_changes_only_the_scores(
    seg_exports, fixture_images, tmp_path, name, method
):
    export = Path(seg_exports[name])
    info = read_export(export)
    assert info.task == "segment" and info.rows == (name == "onnx_e2e")
    cal = _fit(method)
    out = tmp_path / ("cal.onnx" if name.startswith("onnx") else "cal_openvino_model")
    write_calibrated_export(export, out, {info.head: cal})
    for image in fixture_images[:3]:
        x = _letterboxed(image)
        (raw, proto0), (got, proto1) = _run(export, x), _run(out, x)
        assert raw.shape == got.shape and proto0.shape == proto1.shape == (1, 32, 80, 80)
        np.testing.assert_array_equal(proto1, proto0)
        if info.rows:  # (1, 300, 6 + 32): boxes, class and coefficients as they were
            keep = [0, 1, 2, 3, *range(5, raw.shape[-1])]
            np.testing.assert_array_equal(got[..., keep], raw[..., keep])
            p, cls, mine = raw[0, :, 4], raw[0, :, 5].astype(int), got[0, :, 4]
        else:  # (1, 4 + nc + 32, anchors)
            np.testing.assert_array_equal(got[:, :4], raw[:, :4])
            np.testing.assert_array_equal(got[:, 4 + NC :], raw[:, 4 + NC :])
            assert raw.shape[1] == 4 + NC + 32
            p, mine = raw[0, 4 : 4 + NC], got[0, 4 : 4 + NC]
            cls = np.broadcast_to(np.arange(NC)[:, None], p.shape)
        kw = {"classes": cls.reshape(-1)} if cal.per_class else {}
        want = cal.predict_proba(logit_of_prob(p.reshape(-1)), **kw).reshape(p.shape)
        assert np.abs(mine - want).max() < 1e-5
        assert np.abs(mine - p).max() > 1e-2  # not vacuous: the scores moved


@pytest.mark.slow
def test_calibrated_segment_export_predicts_the_raw_exports_boxes_and_masks(
    seg_exports, fixture_images, tmp_path
):
    """Ultralytics' predict on the raw and the calibrated ONNX (a global map: the same ranking): the boxes above
    a raw conf of 0.05 and their masks (retina_masks) are the same, their scores the calibrator's."""
    from ultralytics import YOLO

    cal = _fit("spline")
    out = write_calibrated_export(seg_exports["onnx"], tmp_path / "cal.onnx", {"nms": cal})
    compared = 0
    for image in fixture_images[:4]:
        a, b = (
            YOLO(str(m), task="segment").predict(
                str(image), conf=0.001, imgsz=320, retina_masks=True, verbose=False
            )[0]
            for m in (seg_exports["onnx"], out)
        )
        ka = a.boxes.conf.numpy() > 0.05
        n = int(ka.sum())
        ca = a.boxes.conf.numpy()
        assert (
            b.boxes.conf.numpy() > cal.predict_proba(logit_of_prob(np.float32([0.05])))[0] + 1e-5
        ).sum() <= n
        oa = np.lexsort(a.boxes.xyxy.numpy()[:n].T[::-1])
        ob = np.lexsort(b.boxes.xyxy.numpy()[:n].T[::-1])
        np.testing.assert_array_equal(b.boxes.xyxy.numpy()[:n][ob], a.boxes.xyxy.numpy()[:n][oa])
        np.testing.assert_array_equal(b.masks.data.numpy()[:n][ob], a.masks.data.numpy()[:n][oa])
        np.testing.assert_allclose(
            b.boxes.conf.numpy()[:n][ob], cal.predict_proba(logit_of_prob(ca[:n][oa])), atol=1e-5
        )
        compared += n
    assert compared >= 20

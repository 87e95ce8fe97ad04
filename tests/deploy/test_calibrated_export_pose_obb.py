"""Calibrated ONNX and OpenVINO exports of pose and OBB models (the demo's YOLO26n-pose / -obb, both heads; a
YOLO11n legacy head of each): the class scores, which sit after the 4 box channels and before the keypoints or
the angle (rows: ``box conf cls`` then the keypoints or the angle), become the calibrator's; every other channel
is the uncalibrated export's, bit for bit. Plain Ultralytics (det_calib blocked) runs the calibrated export: its
boxes, keypoints and rotated boxes are the raw export's, its scores the calibrator's on the raw scores."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_DET_CALIB
from pose_obb_exports import EXPORTS, IMGSZ, task_exports

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.exported import logit_of_prob, read_export
from det_calib.deploy.calibrated_export import write_calibrated_export
from det_calib.deploy.export_layout import score_layout
from det_calib.errors import InputError

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
NC = 8


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return task_exports(tmp_path_factory)


def _fit(method: str):
    rng = np.random.default_rng(0)
    k = rng.integers(0, NC, 20_000)
    z = rng.normal(-2.0, 3.0, k.size)
    y = rng.random(k.size) < 1 / (1 + np.exp(-(0.6 * z - 0.3 + 0.5 * np.tanh(z) + 0.1 * k)))
    cal = make_calibrator(method)
    return cal.fit(z, y, classes=k) if cal.per_class else cal.fit(z, y)


def _calibrated_name(export: Path) -> str:
    return "cal.onnx" if str(export).endswith(".onnx") else "cal_openvino_model"


_PLAIN_RUN = NO_DET_CALIB + textwrap.dedent(
    """
    import numpy as np, cv2
    from ultralytics.data.augment import LetterBox
    args = json.loads(sys.argv[1])
    x = [np.ascontiguousarray(LetterBox((args["imgsz"],) * 2, auto=False)(image=cv2.imread(p))[..., ::-1]
                              .transpose(2, 0, 1)[None]).astype(np.float32) / 255 for p in args["images"]]

    def run(model):  # the plain runtime's first output on each letterboxed image
        if model.endswith(".onnx"):
            import onnxruntime as ort
            s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            return np.concatenate([s.run(None, {s.get_inputs()[0].name: xi})[0] for xi in x])
        import glob, openvino as ov
        m = ov.Core().compile_model(glob.glob(model + "/*.xml")[0], "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return np.concatenate([m(xi)[0] for xi in x])

    out = {}
    for key, model in args["models"].items():
        out[key + "/output"] = run(model)
        for i, p in enumerate(args["images"]):
            r = YOLO(model, task=args["task"]).predict(p, conf=0.001, verbose=False)[0]
            b = r.obb if args["task"] == "obb" else r.boxes
            out[f"{key}/{i}/xyxy"], out[f"{key}/{i}/conf"] = b.xyxy.numpy(), b.conf.numpy()
            out[f"{key}/{i}/cls"] = b.cls.numpy()
            out[f"{key}/{i}/payload"] = r.obb.xywhr.numpy() if args["task"] == "obb" else r.keypoints.data.numpy()
    np.savez(args["npz"], **out)
    """
)


def _plain_ultralytics(
    task: str, models: dict[str, Path], images: list[Path], npz: Path
) -> dict[str, np.ndarray]:
    args = {
        "task": task,
        "models": {k: str(v) for k, v in models.items()},
        "images": [str(p) for p in images],
        "imgsz": IMGSZ,
        "npz": str(npz),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _PLAIN_RUN, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(np.load(npz))


def _scores_and_classes(info, raw: np.ndarray, got: np.ndarray):
    """Engine probabilities, their classes and the calibrated export's values at the same places; asserts every
    other channel is the raw export's, bit for bit."""
    lay = score_layout(info)
    lo, hi = lay.scores
    assert raw.shape == got.shape and raw.shape[lay.axis] == lay.channels
    if info.rows:  # (B, max_det, 6 + extra): box, class and keypoints / angle unchanged
        keep = [0, 1, 2, 3, *range(5, raw.shape[-1])]
        np.testing.assert_array_equal(got[..., keep], raw[..., keep])
        return raw[..., 4], raw[..., 5].astype(int), got[..., 4]
    np.testing.assert_array_equal(got[:, :lo], raw[:, :lo])
    np.testing.assert_array_equal(got[:, hi:], raw[:, hi:])
    p = raw[:, lo:hi]
    return p, np.broadcast_to(np.arange(NC)[None, :, None], p.shape), got[:, lo:hi]


def _kept_rows(o: dict, key: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` boxes ``predict`` gave (the highest scored) as rows ``xyxy cls payload...`` in a fixed order
    (the calibrated export may tie scores the raw one does not: float32 rounding of a map flatter than 1), and
    their confs in that order."""
    rows = np.concatenate(
        [
            o[key + "/xyxy"][:n],
            o[key + "/cls"][:n, None],
            o[key + "/payload"][:n].reshape(min(n, len(o[key + "/cls"])), -1),
        ],
        axis=1,
    )
    order = np.lexsort(rows.T[::-1])
    return rows[order], o[key + "/conf"][:n][order]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pose", "obb"])
def test_calibrated_pose_obb_exports_through_plain_ultralytics(
    exports, fixture_images, tmp_path, task
):
    """Every export of the task (YOLO26 per-anchor and top-k rows, ONNX and OpenVINO; YOLO11 legacy head) with
    a global map (spline) and a per-class one (class-platt): the plain runtime's output changes in the class
    scores only, which are the calibrator's (1e-5). Plain Ultralytics on the spline export of the demo models
    (both heads): the boxes, keypoints and rotated boxes of every box the raw export scores above 0.05 are the
    raw export's, bit for bit, their scores the calibrator's on the raw scores (1e-5)."""
    images = [fixture_images[k] for k in (0, 3, 6)]
    names = [n for n, (t, _, _) in EXPORTS.items() if t == task]
    cals = {"spline": _fit("spline"), "class-platt": _fit("class-platt")}
    models: dict[str, Path] = {}
    for name in names:
        info = read_export(exports[name])
        models[f"{name}/raw"] = exports[name]
        for method, cal in cals.items():
            out = tmp_path / name / method / _calibrated_name(exports[name])
            models[f"{name}/{method}"] = write_calibrated_export(
                exports[name], out, {info.head: cal}
            )
    o = _plain_ultralytics(task, models, images, tmp_path / "o.npz")
    compared = 0
    for name in names:
        info = read_export(exports[name])
        raw = o[f"{name}/raw/output"]
        for method, cal in cals.items():
            p, cls, mine = _scores_and_classes(info, raw, o[f"{name}/{method}/output"])
            kw = {"classes": cls.reshape(-1)} if cal.per_class else {}
            want = cal.predict_proba(logit_of_prob(p.reshape(-1)), **kw).reshape(p.shape)
            assert np.abs(mine - want).max() < 1e-5, (name, method)
            assert np.abs(mine - p).max() > 1e-2  # not vacuous: the scores moved
        if (
            EXPORTS[name][1] == "legacy"
        ):  # ties among its untrained scores make the order after NMS arbitrary
            continue
        for i in range(len(images)):
            n = int((o[f"{name}/raw/{i}/conf"] > 0.05).sum())
            (ra, ca), (rb, cb) = (_kept_rows(o, f"{name}/{k}/{i}", n) for k in ("raw", "spline"))
            np.testing.assert_array_equal(rb, ra)
            np.testing.assert_allclose(
                cb, cals["spline"].predict_proba(logit_of_prob(ca)), atol=1e-5
            )
            compared += n
    assert compared >= 60


def test_calibrated_export_refuses_an_output_of_another_layout(exports, tmp_path):
    """An export whose output does not have the task's channel count (here: a pose export whose metadata says 4
    keypoints, its output 5) is refused in one line instead of calibrating the wrong channels."""
    import onnx

    model = onnx.load(str(exports["pose_onnx"]))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["kpt_shape"] == "[5, 3]"
    for p in model.metadata_props:
        if p.key == "kpt_shape":
            p.value = "[4, 3]"
    bad = tmp_path / "pose_k4.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(InputError, match="outputs 24 values per anchor, found 27"):
        write_calibrated_export(bad, tmp_path / "cal.onnx", {"nms": _fit("temperature")})
    assert not (tmp_path / "cal.onnx").exists()

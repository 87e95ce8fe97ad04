"""Fold into pose and OBB models: plain Ultralytics (no det_calib) loads calibrated.pt of the demo YOLO26n-pose
and YOLO26n-obb and gives the original's boxes, keypoints (pose) and rotated boxes (OBB), bit for bit, on both
heads (``nms=None``: one-to-many + NMS; ``nms=False``: one-to-one); only the scores change, to the
calibrator's ``sigmoid(map(logit))``. On YOLO26 and YOLO11 pose and OBB heads the fold changes the class logits
alone: boxes, keypoints and angles are bit-equal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import NO_DET_CALIB

from det_calib.calibrators.registry import make_calibrator
from det_calib.cli import main
from det_calib.demo import _demo_root
from det_calib.deploy.fold import (
    _fold_calibrator,
    _fold_into_model,
    _write_folded_checkpoint,
    read_calibration_metadata,
    write_calibrated_checkpoint,
)
from det_calib.errors import InputError

pytest.importorskip("ultralytics")

# One child process (det_calib blocked) predicts with every checkpoint and head and saves each image's rows:
# pose: x1 y1 x2 y2 conf cls, then the K keypoints (x, y, conf); OBB: cx cy w h angle conf cls.
PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    import numpy as np
    spec = json.loads(sys.argv[1])
    arrays = {}
    for name, ckpt in spec["checkpoints"].items():
        for head in ("nms", "e2e"):
            model = YOLO(ckpt)
            kw = {"nms": False} if head == "e2e" else {"nms": None}
            for i, img in enumerate(spec["images"]):
                r = model.predict(img, conf=0.001, imgsz=320, verbose=False, **kw)[0]
                if r.obb is not None:
                    rows = r.obb.data.numpy()
                else:
                    rows = np.concatenate([r.boxes.data.numpy(), r.keypoints.data.flatten(1).numpy()], axis=1)
                arrays[f"{name}/{head}/{i}"] = rows
                arrays[f"{name}/{head}/{i}/task"] = np.array([r.obb is not None, r.keypoints is not None])
    np.savez_compressed(spec["out"], **arrays)
    print(json.dumps({"det_calib_loaded": any(m.startswith("det_calib") for m in sys.modules)}))
    """
)

GLOBAL_METHODS = (
    "temperature",
    "platt",
    "spline",
    "isotonic",
)  # one map for every class: ranking kept
TASKS = {
    "pose": ("yolo26n_shapes_pose.pt", 4, 5),
    "obb": ("yolo26n_shapes_obb.pt", 5, 6),
}  # conf, cls columns


def _plain_predict(tmp_path, checkpoints: dict, images) -> dict:
    out = tmp_path / "pred.npz"
    spec = {
        "checkpoints": {k: str(v) for k, v in checkpoints.items()},
        "images": [str(p) for p in images],
        "out": str(out),
    }
    run = subprocess.run(
        [sys.executable, "-c", PREDICT, json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"det_calib_loaded": False}
    z = np.load(out)
    return {k: z[k] for k in z.files}


def _synthetic_fit_data(seed=0, n=20_000):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(0.7 * z - 0.4)))
    return z, y


def _logit(p):
    p = np.asarray(p, dtype=np.float64)
    return np.log(p) - np.log1p(-p)


def _rows_above(rows: np.ndarray, conf_col: int, floor: float) -> np.ndarray:
    """The rows with conf above ``floor``, in the order of everything but their score (two maps may round a
    near tie apart, which reorders predict's rows without changing them)."""
    rows = rows[rows[:, conf_col] > floor]
    keys = [rows[:, j] for j in reversed(range(rows.shape[1])) if j != conf_col]
    return rows[np.lexsort(keys)] if len(rows) else rows


def _compare(
    pred, name: str, head: str, cal, n_images: int, conf_col: int, floor: float = 0.05
) -> int:
    """Assert that checkpoint ``name`` gives the original's rows (box, class, keypoints or rotated box) with the
    calibrated scores, for every image; returns the number of rows compared."""
    compared = 0
    calibrated_floor = float(cal.predict_proba(_logit([floor]))[0])
    for i in range(n_images):
        r0, r1 = pred[f"original/{head}/{i}"], pred[f"{name}/{head}/{i}"]
        b0 = _rows_above(r0, conf_col, floor)
        b1 = _rows_above(r1, conf_col, calibrated_floor - 2e-5)
        assert len(b1) >= len(b0)
        # the same rows: match the calibrated rows to the original's by everything but the score
        rest1 = np.delete(b1, conf_col, axis=1)
        rest0 = np.delete(b0, conf_col, axis=1)
        pick = [int(np.flatnonzero((rest1 == row).all(1))[0]) for row in rest0]
        np.testing.assert_array_equal(
            rest1[pick], rest0
        )  # boxes, classes, keypoints / angles bit for bit
        expected = cal.predict_proba(_logit(b0[:, conf_col]))
        np.testing.assert_allclose(b1[pick, conf_col], expected, atol=2e-5, rtol=0)
        # no row of the calibrated model above the floor that the original does not have
        assert (b1[:, conf_col] > calibrated_floor + 2e-5).sum() <= len(b0)
        compared += len(b0)
    return compared


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASKS))
def test_folded_pose_and_obb_checkpoints_keep_boxes_keypoints_and_angles_in_plain_ultralytics(
    tmp_path, fixture_images, task
):
    name, conf_col, _ = TASKS[task]
    source = _demo_root() / name
    z, y = _synthetic_fit_data()
    cals = {"T1.6": make_calibrator("temperature").fit(z, y)}
    cals["T1.6"].temperature_ = 1.6
    cals.update({m: make_calibrator(m).fit(z, y) for m in GLOBAL_METHODS[1:]})
    checkpoints = {"original": source}
    checkpoints["T1.6"] = write_calibrated_checkpoint(
        source, tmp_path / "T1.6.pt", {"nms": 1.6, "e2e": 1.6}
    )
    for method in GLOBAL_METHODS[1:]:
        checkpoints[method] = _write_folded_checkpoint(
            source, tmp_path / f"{method}.pt", dict.fromkeys(("nms", "e2e"), cals[method])
        )
    images = fixture_images[:4]
    pred = _plain_predict(tmp_path, checkpoints, images)
    assert pred["original/nms/0/task"].tolist() == [task == "obb", task == "pose"]
    for method, cal in cals.items():
        for head in ("nms", "e2e"):
            n = _compare(pred, method, head, cal, len(images), conf_col)
            assert n >= 10, (method, head, n)  # not vacuous
    if (
        task == "pose"
    ):  # the keypoints are real keypoints: inside their boxes mostly, not all at one point
        rows = pred["original/nms/0"]
        rows = rows[rows[:, 4] > 0.25]
        kx = rows[:, 6::3]
        assert len(rows) and (kx.std(1) > 1).all()
    else:  # some rotated boxes are turned
        rows = pred["original/nms/0"]
        assert (np.abs(np.sin(2 * rows[rows[:, 5] > 0.25, 4])) > 0.05).any()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_pose_and_obb_temperature_checkpoints_record_their_branches(tmp_path, task):
    out = write_calibrated_checkpoint(
        _demo_root() / TASKS[task][0], tmp_path / "cal.pt", {"nms": 1.5, "e2e": 0.8}
    )
    meta = read_calibration_metadata(out)
    assert meta["temperature"] == {"nms": 1.5, "e2e": 0.8}
    assert meta["folded_into"] == {"nms": "cv3", "e2e": "one2one_cv3"}
    ckpt = torch.load(out, map_location="cpu", weights_only=False)
    assert type(ckpt["model"].model[-1]).__name__ == {"pose": "Pose26", "obb": "OBB26"}[task]
    assert ckpt["train_args"]["task"] == task and ckpt["ema"] is None


@pytest.mark.fast
@pytest.mark.parametrize(
    "cfg", ["yolo26n-pose.yaml", "yolo11n-pose.yaml", "yolo26n-obb.yaml", "yolo11n-obb.yaml"]
)
def test_fold_changes_only_the_class_logits_of_a_pose_or_obb_head(cfg):
    from ultralytics.nn.tasks import OBBModel, PoseModel

    torch.manual_seed(0)
    model = (
        PoseModel(cfg, nc=8, data_kpt_shape=(5, 3), verbose=False)
        if "pose" in cfg
        else OBBModel(cfg, nc=8, verbose=False)
    ).eval()
    payload = "kpts" if "pose" in cfg else "angle"
    x = torch.randn(1, 3, 320, 320)
    z, y = _synthetic_fit_data()
    platt = make_calibrator("platt").fit(z, y)
    a, b = platt.affine_params(8)
    two_heads = "26" in cfg
    with torch.no_grad():
        _, raw0 = model(x)
        _fold_into_model(model, {"nms": 2.0})
        _fold_calibrator(model, "e2e" if two_heads else "nms", platt)
        _, raw1 = model(x)
    branches = (
        [("one2many", 2.0, "nms"), ("one2one", 1.0, "e2e")] if two_heads else [(None, 2.0, "nms")]
    )
    for key, t, head in branches:
        r0, r1 = (raw0[key], raw1[key]) if key else (raw0, raw1)
        want = r0["scores"] / t
        if head == ("e2e" if two_heads else "nms"):
            want = want * torch.tensor(a, dtype=torch.float32).view(1, -1, 1) + torch.tensor(
                b
            ).float().view(1, -1, 1)
        torch.testing.assert_close(r1["scores"], want, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(r1["boxes"], r0["boxes"], rtol=0, atol=0)
        torch.testing.assert_close(r1[payload], r0[payload], rtol=0, atol=0)


@pytest.mark.fast
def test_a_classify_model_is_refused_in_one_line(tmp_path, capsys):
    from ultralytics import YOLO

    src = tmp_path / "cls.pt"
    torch.save({"model": YOLO("yolo11n-cls.yaml").model, "train_args": {"task": "classify"}}, src)
    with pytest.raises(
        InputError, match="is a `classify` model: only detect, segment, pose, obb models"
    ):
        write_calibrated_checkpoint(src, tmp_path / "x.pt", {"nms": 1.5})
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"temperature": {"nms": 1.25}}))
    assert (
        main(
            [
                "apply",
                "--model",
                str(src),
                "--calibration",
                str(cal),
                "--out",
                str(tmp_path / "y.pt"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`classify` model" in err[0]
    assert not (tmp_path / "x.pt").exists() and not (tmp_path / "y.pt").exists()

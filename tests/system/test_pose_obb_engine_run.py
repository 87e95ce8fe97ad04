"""``det-calib calibrate`` on exported pose and OBB engines (the demo models' ONNX exports: pose with the
one-to-many head, OBB with the one-to-one head): matched by the task's rule, the run's boxes are the engine's
``predict`` (keypoints, rotated boxes), and the calibrated export it writes, run by plain Ultralytics with
det_calib blocked, gives the raw engine's boxes, keypoints and rotated boxes with the run's calibrated scores."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pytest
from conftest import NO_DET_CALIB
from pose_obb_exports import KPT_SHAPE, task_exports

from det_calib.capture.exported import logit_of_prob
from det_calib.cli import main
from det_calib.demo import demo_data_yaml

pytest.importorskip("onnxruntime")

CASES = {
    "pose": ("pose_onnx", "nms", "OKS >= 0.5"),
    "obb": ("obb_onnx_e2e", "e2e", "rotated IoU (ProbIoU) >= 0.5"),
}

_PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    import numpy as np
    args = json.loads(sys.argv[1])
    out = {}
    for key, model in (("raw", args["raw"]), ("cal", args["cal"])):
        yolo = YOLO(model, task=args["task"])
        for i, p in enumerate(args["images"]):
            r = yolo.predict(p, conf=0.001, verbose=False)[0]
            b = r.obb if args["task"] == "obb" else r.boxes
            pay = r.obb.xywhr.numpy() if args["task"] == "obb" else r.keypoints.data.numpy().reshape(len(b), -1)
            out[f"{key}/{i}/rows"] = np.concatenate([b.xyxy.numpy(), b.cls.numpy()[:, None], pay], axis=1)
            out[f"{key}/{i}/conf"] = b.conf.numpy()
    np.savez(args["npz"], **out)
    """
)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return task_exports(tmp_path_factory)


def _sorted(rows: np.ndarray, conf: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(rows[:n].T[::-1])
    return rows[:n][order], conf[:n][order]


@pytest.mark.slow
@pytest.mark.parametrize("task", list(CASES))
def test_calibrate_an_exported_pose_or_obb_engine(exports, tmp_path, capsys, task):
    from det_calib.deploy.posthoc import load_calibrators

    name, head, rule = CASES[task]
    data = demo_data_yaml(task="pose") if task == "pose" else demo_data_yaml(task="obb")
    out = tmp_path / "run"
    code = main(
        [
            "calibrate",
            "--model",
            str(exports[name]),
            "--data",
            str(data),
            "--limit",
            "16",
            "--method",
            "spline",
            "--head",
            head,
            "--n-boot",
            "20",
            "-q",
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    summary = (out / "summary.txt").read_text()
    assert f"matched by {rule}" in summary and "calibrated export calibrated.onnx" in summary
    engine = json.loads((out / "engine.json").read_text())
    assert (engine["engine"], engine["head"], engine["calibrated_export"]) == (
        "onnx fp32",
        head,
        "calibrated.onnx",
    )
    boxes = pl.read_parquet(out / "boxes.parquet")
    column = "kpts" if task == "pose" else "xywhr"
    assert column in boxes.columns and text.strip()
    test = boxes.filter(pl.col("split") == "test")
    images = [
        str(data.parent / "images" / "test" / im)
        for im in test["image"].unique(maintain_order=True)[:3]
    ]
    args = {
        "task": task,
        "raw": str(exports[name]),
        "cal": str(out / "calibrated.onnx"),
        "images": images,
        "npz": str(tmp_path / "o.npz"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _PREDICT, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    o = np.load(tmp_path / "o.npz")
    cal = load_calibrators(out / "calibration.json")[head]
    compared = 0
    for i, image in enumerate(images):
        raw_rows, raw_conf = o[f"raw/{i}/rows"], o[f"raw/{i}/conf"]
        # the run's boxes of this image are the raw engine's predict, keypoints / rotated boxes included
        mine = test.filter(pl.col("image") == image.rsplit("/", 1)[1])
        width = 5 if task == "obb" else KPT_SHAPE[0] * KPT_SHAPE[1]
        got = np.concatenate(
            [
                mine.select("x1", "y1", "x2", "y2").to_numpy(),
                mine["cls"].to_numpy()[:, None],
                np.array(mine[column].to_list(), np.float64).reshape(mine.height, width),
            ],
            axis=1,
        )
        np.testing.assert_array_equal(got.astype(np.float32), raw_rows)
        np.testing.assert_array_equal(mine["conf"].to_numpy().astype(np.float32), raw_conf)
        # the calibrated export: the same boxes above a raw 0.05, scored by the run's calibrator
        n = int((raw_conf > 0.05).sum())
        (ra, ca), (rb, cb) = (
            _sorted(raw_rows, raw_conf, n),
            _sorted(o[f"cal/{i}/rows"], o[f"cal/{i}/conf"], n),
        )
        np.testing.assert_array_equal(rb, ra)
        np.testing.assert_allclose(cb, cal.predict_proba(logit_of_prob(ca)), atol=1e-5)
        assert np.abs(cb - ca).max() > 1e-4  # not vacuous: the scores moved
        compared += n
    assert compared >= 10

"""benchmarks/measure_pose_obb.py's machinery (benchmarks/deployed_ece.py) on pose and OBB models: the kept-set
figures by OKS and by ProbIoU on tables built here with known answers, and the plain-Ultralytics child's
predictions of the demo pose and OBB models equal to det_calib's capture of the same images."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from det_calib.data.ground_truth import load_data_yaml
from det_calib.tasks import load_task_split
from det_calib.tasks.obb.labels import split_xywhr
from det_calib.tasks.obb.matching import _probiou
from det_calib.tasks.pose.labels import AREA_COLUMN, split_keypoints
from det_calib.tasks.pose.matching import oks

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    task: ROOT / f"det_calib/demo/assets/yolo26n_shapes_{task}.pt" for task in ("pose", "obb")
}


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("deployed_ece")


@pytest.fixture(scope="module")
def splits(small_demo):
    """The first 20 demo test images with their keypoints, and with their rotated boxes."""
    return {
        "pose": load_task_split(load_data_yaml(small_demo["pose"]), "test", task="pose", limit=20),
        "obb": load_task_split(load_data_yaml(small_demo["obb"]), "test", task="obb", limit=20),
    }


def _found(split, conf: float, payload: str, values) -> pl.DataFrame:
    """Every ground truth found once at ``conf``, its box as the detection's box, ``values`` as its payload."""
    dtype = pl.List(pl.List(pl.Float64)) if payload == "kpts" else pl.Array(pl.Float64, 5)
    return split.gt.select("image_id", "x1", "y1", "x2", "y2", "cls").with_columns(
        pl.lit(conf).alias("conf"),
        pl.Series(payload, [np.asarray(v).tolist() for v in values], dtype=dtype),
    )


def _with_copies(found: pl.DataFrame) -> pl.DataFrame:
    """Each detection again at 0.6 (a duplicate, wrong) and at 0.2 (not kept)."""
    return pl.concat(
        [
            found,
            found.with_columns(pl.lit(0.6).alias("conf")),
            found.with_columns(pl.lit(0.2).alias("conf")),
        ]
    )


def _unlabel(split, rows: list[int]):
    """The split with every keypoint of ground-truth ``rows`` unlabelled (v = 0, ``num_keypoints`` 0)."""
    k = split_keypoints(split).copy()
    k[rows, :, 2] = 0
    nk = split.gt["num_keypoints"].to_numpy().copy()
    nk[rows] = 0
    gt = split.gt.with_columns(
        pl.Series("kpts", k.reshape(len(k), -1), dtype=split.gt.schema["kpts"]),
        pl.Series("num_keypoints", nk, dtype=pl.Int32),
    )
    return dataclasses.replace(split, gt=gt)


@pytest.mark.fast
def test_oks_known_answers(bench, splits):
    """Found with their own keypoints: all correct; a ground truth with no labelled keypoint is ignored by
    OKS (the detection on it left out), and counts by box IoU."""
    pose_split = splits["pose"]
    found = _found(pose_split, 0.9, "kpts", split_keypoints(pose_split))
    n = pose_split.gt.height
    assert bench.kept_set_figures(found, pose_split, match="oks") == (n, pytest.approx(0.1))
    assert bench.kept_set_figures(_with_copies(found), pose_split, match="oks") == (
        2 * n,
        pytest.approx((0.1 + 0.6) / 2),
    )
    some = _unlabel(pose_split, [0, 5])
    assert bench.kept_set_figures(found, some, match="oks") == (n - 2, pytest.approx(0.1))
    assert bench.kept_set_figures(found, some, match="box") == (n, pytest.approx(0.1))


@pytest.mark.fast
def test_oks_decides(bench, splits):
    """Keypoints moved by 6 px: correct exactly where the OKS with the own ground truth stays >= 0.5."""
    pose_split = splits["pose"]
    g = pose_split.gt
    gk = split_keypoints(pose_split)
    moved = gk.copy()
    moved[:, :, :2] += 6.0
    found = _found(pose_split, 0.9, "kpts", moved)
    own = np.diag(
        oks(
            moved[:, :, :2],
            gk,
            g[AREA_COLUMN].to_numpy(),
            g.select("x1", "y1", "x2", "y2").to_numpy(),
        )
    )
    share = float(np.mean(own >= 0.5))
    assert 0.2 < share < 0.95  # not vacuous: small shapes fail, large ones pass
    n, ece = bench.kept_set_figures(found, pose_split, match="oks")
    assert n == g.height and ece == pytest.approx(abs(0.9 - share))


@pytest.mark.fast
def test_rotated_known_answers(bench, splits):
    obb_split = splits["obb"]
    xywhr = split_xywhr(obb_split)
    found = _found(obb_split, 0.9, "xywhr", xywhr)
    n = obb_split.gt.height
    assert bench.kept_set_figures(found, obb_split, match="rotated") == (n, pytest.approx(0.1))
    assert bench.kept_set_figures(_with_copies(found), obb_split, match="rotated") == (
        2 * n,
        pytest.approx((0.1 + 0.6) / 2),
    )


@pytest.mark.fast
def test_rotated_decides(bench, splits):
    """Turned by a right angle, sides not swapped: ProbIoU keeps near-squares (and circles), drops long boxes."""
    obb_split = splits["obb"]
    xywhr = split_xywhr(obb_split)
    turned = xywhr + [0, 0, 0, 0, np.pi / 2]
    own = np.array([_probiou(a[None], b[None])[0, 0] for a, b in zip(turned, xywhr)])
    share = float(np.mean(own >= 0.5))
    assert 0.2 < share < 1
    n, ece = bench.kept_set_figures(
        _found(obb_split, 0.9, "xywhr", turned), obb_split, match="rotated"
    )
    assert n == obb_split.gt.height and ece == pytest.approx(abs(0.9 - share))


@pytest.mark.fast
def test_tables_by_task(bench):
    rows = [[0, 1.0, 2.0, 30.0, 40.0, 0.7, 3]]
    kp = bench.prediction_table(rows, [[[1.0, 2.0, 0.5], [3.0, 4.0, 0.9]]], task="pose")
    assert kp.row(0) == (0, 1.0, 2.0, 30.0, 40.0, 0.7, 3, [[1.0, 2.0, 0.5], [3.0, 4.0, 0.9]])
    ob = bench.prediction_table(rows, [[15.0, 21.0, 29.0, 38.0, 0.3]], task="obb")
    assert ob["xywhr"].to_list() == [[15.0, 21.0, 29.0, 38.0, 0.3]]
    assert bench.prediction_table([], [], task="pose").height == 0
    base = dict(
        head="nms", method="platt", images=1, run_raw=0.1, run_calibrated=0.05, raw_at_floor=False
    )
    cases = [
        bench.Case(
            size=s,
            raw=(10, 0.2),
            calibrated=(10, 0.1),
            task="obb",
            match="rotated",
            maps={"OBB mAP": True},
            **base,
        )
        for s in ("--limit 64", "full")
    ]
    text = bench.table(cases, "obb.pt", floor=True)
    assert "| raw at floor | OBB mAP identical |" in text
    assert "| full | nms | platt | 1 | rotated IoU (ProbIoU) |" in text
    assert "| no | yes |" in text and "`predict`)" in text and ": met." in text
    assert (
        "within its sampling floor's range in 0 of 2 cases" in text
        and "no map in 0 case(s)" in text
    )
    mixed = [
        dataclasses.replace(cases[0], method="none", raw_at_floor=True),
        dataclasses.replace(cases[1], raw_at_floor=None),
    ]
    line = bench.floor_line(mixed)
    assert (
        "range in 1 of 1 cases" in line
        and "no map in 1 case(s), 1 of them with the raw ECE at its floor" in line
    )


def _capture_kept(model: Path, images: list[Path], task: str) -> pl.DataFrame:
    from det_calib.capture.predictor import capture

    df = capture(str(model), images, head="nms", conf=0.25, imgsz=320, progress=False)
    return df.filter(pl.col("conf") > 0.25)


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_child_predicts_as_the_capture(bench, task, splits):
    """The det_calib-blocked child's kept boxes and payloads equal det_calib's capture of the demo model (which
    is bit-identical to predict), so the deployed matching sees what Ultralytics deploys."""
    split = splits[task]
    images = list(split.images[:6])
    pred = bench.plain_predict(
        {
            "original": str(MODELS[task]),
            "calibrated": str(MODELS[task]),
            "conf": 0.25,
            "nms": None,
            "imgsz": 320,
            "images": [str(p) for p in images],
        }
    )
    assert pred["task"] == task and pred["raw"] == pred["calibrated"]
    t = bench.prediction_table(pred["raw"]["rows"], pred["raw"]["payload"], task=task)
    ref = _capture_kept(MODELS[task], images, task)
    assert t.height == ref.height > 5
    for col in ("image_id", "cls"):
        assert t[col].to_list() == ref[col].to_list()
    for col in ("x1", "y1", "x2", "y2", "conf"):
        np.testing.assert_array_equal(
            t[col].to_numpy().astype(np.float32), ref[col].to_numpy().astype(np.float32)
        )
    payload = "kpts" if task == "pose" else "xywhr"
    np.testing.assert_array_equal(
        np.asarray(t[payload].to_list(), dtype=np.float32),
        np.asarray(ref[payload].to_list(), dtype=np.float32),
    )
    n, ece = bench.kept_set_figures(t, split, match="oks" if task == "pose" else "rotated")
    assert n > 5 and 0 <= ece < 0.5

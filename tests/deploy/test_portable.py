"""The map where det_calib is not (det_calib.deploy.portable, portable_apply): for every calibrator in the
registry, the pure-Python function and the ONNX graph (onnxruntime) give the run's calibrated column to 1e-6
on every box; the per-class raw thresholds keep exactly the calibrated set; DeepStream's block parses back.
"""

from __future__ import annotations

import configparser
import json

import numpy as np
import polars as pl
import pytest
from detection_files import FIXTURE, calibrate_argv, synthetic_rows, write_txt

from det_calib.calibrators import registry
from det_calib.calibrators.base import box_kwargs
from det_calib.cli import main
from det_calib.deploy.portable import _deepstream_block, map_onnx, portable_head, raw_thresholds
from det_calib.deploy.portable_apply import _calibrated_score, _load_map, _log_relative_area
from det_calib.numeric import sigmoid

METHODS = registry.methods()
RUN_METHODS = [m for m in METHODS if m != "none"]
"""What `--method` takes (``none`` is a candidate of ``auto``, tested on its fitted form below)."""


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    return write_txt(synthetic_rows(seed=1, n_false=80), tmp_path_factory.mktemp("dets") / "labels")


def _onnx(graph, boxes: pl.DataFrame, *, sized: bool, dtype=np.float32, score=None) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    score = boxes["conf"].to_numpy() if score is None else score
    feed = {"score": score.astype(dtype), "class": boxes["cls"].to_numpy().astype(np.int64)}
    if sized:
        feed["log_area"] = _log_area(boxes).astype(dtype)
    return sess.run(None, feed)[0].astype(np.float64)


def _log_area(boxes: pl.DataFrame) -> np.ndarray:
    return np.array(
        [
            _log_relative_area(*r)
            for r in boxes.select("x1", "y1", "x2", "y2", "img_w", "img_h").iter_rows()
        ]
    )


@pytest.mark.parametrize("method", RUN_METHODS)
def test_portable_function_and_onnx_give_the_runs_calibrated_column(
    tmp_path, capsys, labels, method
):
    out = tmp_path / "out"
    code = main(calibrate_argv(FIXTURE / "data.yaml", labels, out, "--method", method, n_boot=20))
    assert code == 0, capsys.readouterr().err
    boxes = pl.read_parquet(out / "boxes.parquet")
    want = boxes["calibrated"].to_numpy()
    pmap = _load_map(out / "portable_map.json")
    head = pmap["heads"]["nms"]
    assert head["method"] == method
    sized = head["uses_size"]
    areas = _log_area(boxes) if sized else [None] * boxes.height
    got = np.array(
        [
            _calibrated_score(pmap, s, c, log_area=a)
            for s, c, a in zip(boxes["conf"], boxes["cls"], areas, strict=True)
        ]
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    graph64 = map_onnx(head, double=True)
    np.testing.assert_allclose(
        _onnx(graph64, boxes, sized=sized, dtype=np.float64), want, rtol=0, atol=1e-6
    )
    # the written graph takes an engine's float32 score: the same map of the score as float32 holds it
    as32 = boxes["conf"].to_numpy().astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(
        _onnx(str(out / "portable_map_nms.onnx"), boxes, sized=sized),
        _onnx(graph64, boxes, sized=sized, dtype=np.float64, score=as32),
        rtol=0,
        atol=1e-6,
    )
    assert np.abs(want - boxes["conf"].to_numpy()).max() > 1e-3  # the map moved the scores


@pytest.mark.parametrize(
    "method", [m for m in RUN_METHODS if not registry.method_spec(m).uses_size]
)
def test_raw_thresholds_keep_exactly_the_calibrated_set_and_deepstream_parses_back(
    tmp_path, capsys, labels, method
):
    out = tmp_path / "out"
    code = main(
        calibrate_argv(
            FIXTURE / "data.yaml", labels, out, "--method", method, "--conf", "0.3", n_boot=20
        )
    )
    assert code == 0, capsys.readouterr().err
    boxes = pl.read_parquet(out / "boxes.parquet")
    doc = json.loads((out / "raw_thresholds.json").read_text())
    r = np.array(doc["heads"]["nms"]["raw_thresholds"]["0.3"])
    kept_calibrated = boxes["calibrated"].to_numpy() > 0.3
    kept_raw = boxes["conf"].to_numpy() > r[boxes["cls"].to_numpy()]
    assert kept_calibrated.sum() > 20
    assert (kept_calibrated == kept_raw).all()
    cp = configparser.ConfigParser()
    cp.read_string((out / "deepstream_nms.txt").read_text())
    back = [cp.getfloat(f"class-attrs-{c}", "pre-cluster-threshold") for c in range(len(r))]
    np.testing.assert_allclose(back, r, rtol=1e-8)
    assert cp.getfloat("class-attrs-all", "pre-cluster-threshold") == pytest.approx(
        r.min(), rel=1e-8
    )


def _fitted(method: str, z: np.ndarray, y: np.ndarray, cls: np.ndarray, area: np.ndarray):
    cal = registry.make_calibrator(method)
    return cal.fit(z, y, **box_kwargs(cal, classes=cls, log_area=area))


@pytest.mark.parametrize("method", METHODS)
def test_no_map_splits_a_tie_of_stair_stepped_scores(method):
    """INT8 engines give a few score levels: every box of one level and class gets one calibrated score."""
    rng = np.random.default_rng(0)
    n = 4000
    levels = np.round(rng.uniform(0.02, 0.98, n) * 16) / 16  # 17 steps, as an INT8 score stair
    levels = np.clip(levels, 1 / 32, 1 - 1 / 32)
    z = np.log(levels) - np.log1p(-levels)
    cls = rng.integers(0, 3, n)
    y = (rng.random(n) < sigmoid(0.6 * z - 0.3)).astype(np.float64)
    area = np.full(n, -4.0)  # one size: a size map has no other reason to part two boxes
    cal = _fitted(method, z, y, cls, area)
    t = np.asarray(cal.transform_logits(z, **box_kwargs(cal, classes=cls, log_area=area)))
    df = pl.DataFrame({"z": z, "cls": cls, "t": t})
    spread = (
        df.group_by("z", "cls").agg((pl.col("t").max() - pl.col("t").min()).alias("d"))["d"].max()
    )
    assert spread == 0.0
    order = df.group_by("z", "cls").agg(pl.col("t").first()).sort("cls", "z")
    for _, g in order.group_by("cls"):
        assert (np.diff(g["t"].to_numpy()) >= 0).all()  # and the map keeps their order


@pytest.mark.parametrize("method", [m for m in METHODS if not registry.method_spec(m).uses_size])
def test_portable_map_of_a_fitted_calibrator_and_its_inverse(method):
    """Known answer on one calibrator: the portable head reproduces ``transform_logits``; each class's raw
    threshold is mapped back onto the calibrated conf."""
    rng = np.random.default_rng(3)
    n = 3000
    z = rng.normal(0, 2.5, n)
    cls = rng.integers(0, 4, n)
    y = (rng.random(n) < sigmoid(0.7 * z + 0.2 * cls - 0.4)).astype(np.float64)
    cal = _fitted(method, z, y, cls, None)
    head = portable_head(cal, method, 4)
    pmap = {"format": "det_calib.PortableMap", "version": 1, "eps": 1e-6, "heads": {"nms": head}}
    p = sigmoid(z)
    want = cal.deployed_conf(z, cls, p)
    got = np.array([_calibrated_score(pmap, s, c) for s, c in zip(p, cls, strict=True)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    r = raw_thresholds(head, 0.4, 4)
    back = [_calibrated_score(pmap, r[c], c) for c in range(4)]
    np.testing.assert_allclose(back, 0.4, atol=1e-9)
    assert map_onnx(head)[:2]  # a serialised graph
    assert "pre-cluster-threshold" in _deepstream_block(r)


def test_the_thresholds_commands_tuned_thresholds_as_a_deepstream_block(tmp_path, capsys, labels):
    from det_calib.deploy import tuned_deepstream
    from det_calib.thresholds.thresholds_file import class_thresholds

    out = tmp_path / "out"
    assert (
        main(
            calibrate_argv(FIXTURE / "data.yaml", labels, out, "--method", "class-platt", n_boot=20)
        )
        == 0
    )
    # 12 images certify nothing over images: the box-level rule gives thresholds to write (the block's format
    # is what is tested here)
    assert (
        main(
            [
                "thresholds",
                str(out),
                "--target-precision",
                "0.5",
                "--threshold-unit",
                "box",
                "--n-boot",
                "20",
            ]
        )
        == 0
    )
    capsys.readouterr()
    tuned = class_thresholds(out / "thresholds.json")
    cp = configparser.ConfigParser()
    cp.read_string(tuned_deepstream(out).read_text())
    boxes = pl.read_parquet(out / "boxes.parquet")
    raw = np.array([cp.getfloat(f"class-attrs-{c}", "pre-cluster-threshold") for c in range(8)])
    t = np.array([tuned[c] for c in range(8)])
    cls = boxes["cls"].to_numpy()
    kept_calibrated = boxes["calibrated"].to_numpy() > t[cls]
    assert kept_calibrated.sum() > 5
    assert (kept_calibrated == (boxes["conf"].to_numpy() > raw[cls])).all()

"""``calibrate --detections`` on the demo detector's own files (issue 55's "done when"): Ultralytics
``predict(save_txt=True, save_conf=True, conf=0.001)`` label folders of the calib and test splits, and the
same boxes as a CSV, give the nms head's figures of the ``.pt`` run on the same images: kept-set ECE raw and
calibrated within 0.002, the same chosen map, mAP identical (det_calib's COCO engine, pycocotools' figures).

Predict runs one image at a time: a Python list given to ``predict`` is one batch, letterboxed to one shape,
which changes the scores of every image of another aspect ratio (det_calib's capture is single-image predict).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from det_calib.cli import main
from det_calib.data.ground_truth import list_images, load_data_yaml
from det_calib.record.run_result import RunResult

pytestmark = pytest.mark.slow

LIMIT = 24


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_model_path):
    from ultralytics import YOLO

    from det_calib.demo import demo_data_yaml

    data = demo_data_yaml()
    tmp = tmp_path_factory.mktemp("demo_dets")
    ds = load_data_yaml(data)
    model = YOLO(str(demo_model_path))
    for split in ("calib", "test"):
        for image in list_images(ds.splits[split], split=split)[:LIMIT]:
            model.predict(str(image), save_txt=True, save_conf=True, conf=0.001, save=False, verbose=False,
                          project=str(tmp / "predict"), name=split, exist_ok=True)
    return data, tmp


def _run(argv: list) -> RunResult:
    out = Path(argv[argv.index("--out") + 1])
    assert main(["calibrate", *map(str, argv), "--limit", str(LIMIT), "--no-report", "-q", "--n-boot", "100"]) == 0
    return RunResult.read(out / "calibration.json")


def _figures(run: RunResult) -> tuple[str, float, float, float, float]:
    head = run.results["nms"]
    ev = head.eval
    return (head.calibrator.method, ev.operating_before[0].ece, ev.operating_after[0].ece, ev.map50_95_before,
            ev.map50_95_after)


@pytest.fixture(scope="module")
def pt_run(demo, demo_model_path):
    data, tmp = demo
    return _run(["--model", demo_model_path, "--data", data, "--head", "nms", "--no-val", "--out", tmp / "pt"])


def _assert_same(a: RunResult, b: RunResult) -> None:
    ma, ra, ca, m0a, m1a = _figures(a)
    mb, rb, cb, m0b, m1b = _figures(b)
    assert ma == mb
    assert abs(ra - rb) <= 0.002 and abs(ca - cb) <= 0.002, (ra, rb, ca, cb)
    assert m0a == pytest.approx(m0b, abs=1e-3) and m1b == m0b  # the file's own mAP is unchanged by the map


def test_predict_label_folders_give_the_pt_runs_figures(demo, pt_run):
    data, tmp = demo
    run = _run(["--data", data, "--detections", tmp / "predict", "--out", tmp / "txt"])
    _assert_same(pt_run, run)
    assert run.results["nms"].ultralytics_val.note.startswith("not run: a detections file")


def test_the_same_boxes_as_a_csv_give_the_same_figures(demo, pt_run):
    data, tmp = demo
    boxes = pl.read_parquet(tmp / "txt" / "boxes.parquet") if (tmp / "txt").is_dir() else None
    if boxes is None:
        pytest.skip("needs the label-folder run")
    csv = tmp / "dets.csv"
    boxes.select("image", pl.col("cls").alias("class"), "x1", "y1", "x2", "y2", pl.col("conf").alias("score")
                 ).write_csv(csv)
    run = _run(["--data", data, "--detections", csv, "--out", tmp / "csv"])
    _assert_same(pt_run, run)


def test_a_litert_int8_exports_file_gives_the_engine_runs_figures(demo, demo_model_path, tmp_path):
    """The demo's LiteRT INT8 export, dumped by plain Ultralytics predict: its file calibrates to the
    figures of ``calibrate --model`` of that engine, and the written per-class raw thresholds keep exactly
    the calibrated set on the file's scores (stair-stepped: whole multiples of 1/256 before the sigmoid's
    requantisation)."""
    import json
    import shutil

    import numpy as np
    from ultralytics import YOLO

    pytest.importorskip("ai_edge_litert")
    data, _ = demo
    fixture = tmp_path / "fixture"  # the export's calibration images; its label cache lands here, not in the package
    shutil.copytree(Path(__file__).resolve().parents[2] / "det_calib" / "demo" / "assets" / "fixture", fixture)
    shutil.copy(demo_model_path, tmp_path / "det.pt")
    engine = YOLO(str(tmp_path / "det.pt")).export(format="litert", int8=True, data=str(fixture / "data.yaml"))
    model = YOLO(engine, task="detect")
    ds = load_data_yaml(data)
    for split in ("calib", "test"):
        for image in list_images(ds.splits[split], split=split)[:LIMIT]:
            model.predict(str(image), save_txt=True, save_conf=True, conf=0.001, save=False, verbose=False,
                          project=str(tmp_path / "predict"), name=split, exist_ok=True)
    from_file = _run(["--data", data, "--detections", tmp_path / "predict", "--out", tmp_path / "file"])
    from_engine = _run(["--model", engine, "--data", data, "--head", "nms", "--no-val", "--out", tmp_path / "engine"])
    _assert_same(from_engine, from_file)
    boxes = pl.read_parquet(tmp_path / "file" / "boxes.parquet")
    doc = json.loads((tmp_path / "file" / "raw_thresholds.json").read_text())
    raw = np.array(doc["heads"]["nms"]["raw_thresholds"]["0.25"])
    kept = boxes["calibrated"].to_numpy() > 0.25
    assert kept.sum() > 20
    assert (kept == (boxes["conf"].to_numpy() > raw[boxes["cls"].to_numpy()])).all()

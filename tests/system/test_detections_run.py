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

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
            model.predict(
                str(image),
                save_txt=True,
                save_conf=True,
                conf=0.001,
                save=False,
                verbose=False,
                project=str(tmp / "predict"),
                name=split,
                exist_ok=True,
            )
    return data, tmp


def _run(argv: list) -> RunResult:
    out = Path(argv[argv.index("--out") + 1])
    assert (
        main(
            [
                "calibrate",
                *map(str, argv),
                "--limit",
                str(LIMIT),
                "--no-report",
                "-q",
                "--n-boot",
                "100",
            ]
        )
        == 0
    )
    return RunResult.read(out / "calibration.json")


def _figures(run: RunResult) -> tuple[str, float, float, float, float]:
    head = run.results["nms"]
    ev = head.eval
    return (
        head.calibrator.method,
        ev.operating_before[0].ece,
        ev.operating_after[0].ece,
        ev.map50_95_before,
        ev.map50_95_after,
    )


@pytest.fixture(scope="module")
def pt_run(demo, demo_model_path):
    data, tmp = demo
    return _run(
        [
            "--model",
            demo_model_path,
            "--data",
            data,
            "--head",
            "nms",
            "--no-val",
            "--out",
            tmp / "pt",
        ]
    )


def _assert_same(a: RunResult, b: RunResult) -> None:
    ma, ra, ca, m0a, m1a = _figures(a)
    mb, rb, cb, m0b, m1b = _figures(b)
    assert ma == mb
    assert abs(ra - rb) <= 0.002 and abs(ca - cb) <= 0.002, (ra, rb, ca, cb)
    assert (
        m0a == pytest.approx(m0b, abs=1e-3) and m1b == m0b
    )  # the file's own mAP is unchanged by the map


@pytest.fixture(scope="module")
def txt_run(demo) -> RunResult:
    data, tmp = demo
    return _run(["--data", data, "--detections", tmp / "predict", "--out", tmp / "txt"])


def test_predict_label_folders_give_the_pt_runs_figures(pt_run, txt_run):
    _assert_same(pt_run, txt_run)
    assert txt_run.results["nms"].ultralytics_val.note.startswith("not run: a detections file")


def test_the_same_boxes_as_a_csv_give_the_same_figures(demo, pt_run, txt_run):
    data, tmp = demo
    boxes = pl.read_parquet(tmp / "txt" / "boxes.parquet")
    csv = tmp / "dets.csv"
    boxes.select(
        "image", pl.col("cls").alias("class"), "x1", "y1", "x2", "y2", pl.col("conf").alias("score")
    ).write_csv(csv)
    run = _run(["--data", data, "--detections", csv, "--out", tmp / "csv"])
    _assert_same(pt_run, run)


def test_a_litert_int8_exports_file_gives_the_engine_runs_figures(demo, tmp_path_factory, tmp_path):
    """The demo's LiteRT INT8 export, dumped by plain Ultralytics predict: its file calibrates to the
    figures of ``calibrate --model`` of that engine, and the written per-class raw thresholds keep exactly
    the calibrated set on the file's scores (stair-stepped: whole multiples of 1/256 before the sigmoid's
    requantisation)."""
    import json

    import numpy as np
    from detect_exports import demo_export
    from ultralytics import YOLO

    pytest.importorskip("ai_edge_litert")
    data, _ = demo
    engine = str(
        demo_export(tmp_path_factory, "litert_int8")
    )  # the session's shared export (tests/detect_exports.py)
    model = YOLO(engine, task="detect")
    ds = load_data_yaml(data)
    for split in ("calib", "test"):
        for image in list_images(ds.splits[split], split=split)[:LIMIT]:
            model.predict(
                str(image),
                save_txt=True,
                save_conf=True,
                conf=0.001,
                save=False,
                verbose=False,
                project=str(tmp_path / "predict"),
                name=split,
                exist_ok=True,
            )
    from_file = _run(
        ["--data", data, "--detections", tmp_path / "predict", "--out", tmp_path / "file"]
    )
    from_engine = _run(
        [
            "--model",
            engine,
            "--data",
            data,
            "--head",
            "nms",
            "--no-val",
            "--out",
            tmp_path / "engine",
        ]
    )
    _assert_same(from_engine, from_file)
    boxes = pl.read_parquet(tmp_path / "file" / "boxes.parquet")
    doc = json.loads((tmp_path / "file" / "raw_thresholds.json").read_text())
    raw = np.array(doc["heads"]["nms"]["raw_thresholds"]["0.25"])
    kept = boxes["calibrated"].to_numpy() > 0.25
    assert kept.sum() > 20
    assert (kept == (boxes["conf"].to_numpy() > raw[boxes["cls"].to_numpy()])).all()


def test_boxes_of_the_file_run_give_its_figures(demo, txt_run):
    """``--detections FOLDER --boxes RUN``: the file run's saved boxes, not the file, give its figures."""
    data, tmp = demo
    again = _run(
        [
            "--data",
            data,
            "--detections",
            tmp / "predict",
            "--boxes",
            tmp / "txt",
            "--out",
            tmp / "again",
        ]
    )
    assert _figures(again) == _figures(txt_run)
    a, b = (pl.read_parquet(tmp / f / "boxes.parquet") for f in ("txt", "again"))
    assert (
        a["calibrated"].to_list() == b["calibrated"].to_list()
        and a["correct"].to_list() == b["correct"].to_list()
    )


def test_compare_and_thresholds_put_the_file_run_beside_the_pt_run(demo, pt_run, txt_run, capsys):
    """``compare`` shows the engine's file beside the ``.pt`` run (the same figures, as their boxes are the
    same to 6 digits); ``thresholds`` tunes the same per-class conf thresholds on both."""
    import json

    _, tmp = demo
    for run in ("pt", "txt"):
        # the box-level rule: the subset's images are too few to certify a threshold over images
        assert (
            main(
                [
                    "thresholds",
                    str(tmp / run),
                    "--target-precision",
                    "0.7",
                    "--threshold-unit",
                    "box",
                    "--n-boot",
                    "100",
                ]
            )
            == 0
        )
    doc = {
        run: json.loads((tmp / run / "thresholds.json").read_text())["heads"]["nms"]["criteria"][
            "target_precision"
        ]
        for run in ("pt", "txt")
    }
    assert [c["threshold"] for c in doc["pt"]["per_class"]] == [
        c["threshold"] for c in doc["txt"]["per_class"]
    ]
    assert doc["pt"]["global"]["threshold"] == doc["txt"]["global"]["threshold"]
    assert doc["txt"]["global"]["certified"] and doc["txt"]["global"]["threshold"] < 0.9
    assert (
        main(
            [
                "compare",
                str(tmp / "pt"),
                str(tmp / "txt"),
                "--labels",
                "pt",
                "file",
                "--out",
                str(tmp / "cmp"),
            ]
        )
        == 0
    )
    text = (tmp / "cmp" / "compare.txt").read_text()
    md = (tmp / "cmp" / "compare.md").read_text()
    assert "pt" in text and "file" in text and "threshold" in md.lower()
    ece = [f"{r.results['nms'].eval.operating_after[0].ece:.4f}" for r in (pt_run, txt_run)]
    assert all(e in text for e in ece), (ece, text)
    capsys.readouterr()


@pytest.fixture(scope="module")
def new_images(demo_model_path, tmp_path_factory):
    """New labelled images (the demo test split under blur, severity 3) and the demo detector's predict label
    folder of the first LIMIT of them."""
    from ultralytics import YOLO

    from det_calib.demo import shifted_data_yaml

    data = shifted_data_yaml("blur", 3)
    tmp = tmp_path_factory.mktemp("new_dets")
    model = YOLO(str(demo_model_path))
    for image in list_images(load_data_yaml(data).splits["test"], split="test")[:LIMIT]:
        model.predict(
            str(image),
            save_txt=True,
            save_conf=True,
            conf=0.001,
            save=False,
            verbose=False,
            project=str(tmp),
            name="predict",
            exist_ok=True,
        )
    return data, tmp / "predict"


def _check(run_dir: Path, out: Path, *argv) -> object:
    from det_calib.check.run_check import CHECK_FILE, CheckResult

    code = main(
        [
            "check",
            str(run_dir),
            *map(str, argv),
            "--limit",
            str(LIMIT),
            "--out",
            str(out),
            "-q",
            "--no-report",
            "--n-boot",
            "100",
        ]
    )
    r = CheckResult.read(out / CHECK_FILE)
    assert code == r.exit_code
    return r


def test_check_on_a_file_of_new_images_gives_the_model_checks_figures(
    demo, pt_run, txt_run, new_images, capsys
):
    """``check --detections`` of the new images' predict labels: on the file run and on the ``.pt`` run, the
    verdicts and figures of ``check`` capturing them with the model."""
    _, tmp = demo
    data, dets = new_images
    by_model = _check(tmp / "pt", tmp / "chk_model", "--data", data)
    file_on_file = _check(tmp / "txt", tmp / "chk_file", "--data", data, "--detections", dets)
    file_on_pt = _check(tmp / "pt", tmp / "chk_pt_file", "--data", data, "--detections", dets)
    assert file_on_file.detections["matched"] == file_on_file.detections["detections"] > 500
    a = by_model.labelled["nms"]
    for r in (file_on_file, file_on_pt):
        b = r.labelled["nms"]
        assert (r.calibration_verdict, r.detection_verdict) == (
            by_model.calibration_verdict,
            by_model.detection_verdict,
        )
        assert (
            b.calibration.boxes == a.calibration.boxes
            and b.calibration.observed == a.calibration.observed
        )
        assert b.operating[0].ece == pytest.approx(a.operating[0].ece, abs=0.002)
        assert b.calibration.p_value == pytest.approx(a.calibration.p_value, abs=0.01)
    out = capsys.readouterr().out
    assert f"[nms] detections from {dets} (yolo-txt)" in out

"""An RT-DETR run end to end (the demo RT-DETR, ``datasets/shapes/rtdetr_shapes.pt``):
``calibrate`` with both mAP checks (pycocotools, Ultralytics' RTDETRValidator), then ``report``, ``compare``,
``thresholds``, ``check``, ``calibrate --boxes`` and the capture to parts on it; and its ONNX and OpenVINO
exports captured as Ultralytics predicts them and calibrated in their graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
from families.rtdetr_models import RTDETR_DEMO, untrained_rtdetr

from det_calib.capture.predictor import capture
from det_calib.cli import main


def _run(args: list[str]) -> int:
    """``det-calib`` with ``args``, quiet where the command has ``-q``."""
    return main([*args, "-q"] if args[0] in ("calibrate", "check", "capture") else args)


@pytest.mark.slow  # about 2 minutes on a shared 2-core CPU
def test_rtdetr_run_and_its_subcommands(tmp_path, fixture_yaml, fixture_images):
    from ultralytics import YOLO

    from det_calib.capture.parts import read_parts

    model = RTDETR_DEMO
    assert model.is_file(), f"the committed demo RT-DETR is missing: {model}"
    out = tmp_path / "run"
    common = [
        "--model",
        str(model),
        "--data",
        str(fixture_yaml),
        "--fit-split",
        "fixture",
        "--eval-split",
        "fixture",
        "--method",
        "temperature",
    ]  # six fit images: the one map a weak model's few kept boxes fit
    assert _run(["calibrate", *common, "--map-engine", "pycocotools", "--out", str(out)]) == 0
    doc = json.loads((out / "calibration.json").read_text())
    assert doc["heads"] == ["detr"]
    ev = doc["eval"]["detr"]
    assert ev["map_engine"] == "pycocotools" and ev["map_identical"]  # pycocotools: mAP unchanged
    assert ev["map50_95_before"] == ev["map50_95_after"]
    val = doc["ultralytics_val"][
        "detr"
    ]  # Ultralytics' RT-DETR val of calibrated.pt and of the original
    assert val["verified"] and val["identical_at_equivalent_floor"]
    assert val["images_seen"] == val["images_expected"] == 6
    assert type(YOLO(str(out / "calibrated.pt"))).__name__ == "RTDETR"
    assert "detr" in (out / "report.md").read_text()

    assert _run(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert "detr" in (tmp_path / "rep" / "report.md").read_text()
    assert (
        _run(
            [
                "compare",
                str(out),
                f"{out}:detr",
                "--labels",
                "a",
                "b",
                "--out",
                str(tmp_path / "cmp"),
            ]
        )
        == 0
    )
    assert (tmp_path / "cmp" / "compare.md").is_file()
    assert (
        _run(
            [
                "thresholds",
                str(out),
                "--head",
                "detr",
                "--target-precision",
                "0.5",
                "--n-boot",
                "20",
            ]
        )
        == 0
    )
    assert list(json.loads((out / "thresholds.json").read_text())["heads"]) == ["detr"]
    code = _run(
        [
            "check",
            str(out),
            "--data",
            str(fixture_yaml),
            "--split",
            "fixture",
            "--out",
            str(tmp_path / "chk"),
        ]
    )
    assert code != 2 and list(
        json.loads((tmp_path / "chk" / "check.json").read_text())["heads"]
    ) == ["detr"]

    # --boxes: the run's own boxes, the same calibrator without a capture
    again = tmp_path / "again"
    assert _run(["calibrate", *common, "--boxes", str(out), "--out", str(again)]) == 0
    doc2 = json.loads((again / "calibration.json").read_text())
    assert (doc2["method"], doc2.get("calibrators"), doc2["temperature"]) == (
        doc["method"],
        doc.get("calibrators"),
        doc["temperature"],
    )

    # the capture to parts: the boxes the library capture gives
    parts = tmp_path / "parts"
    assert (
        _run(
            [
                "capture",
                "--model",
                str(model),
                "--data",
                str(fixture_yaml),
                "--split",
                "fixture",
                "--out",
                str(parts),
            ]
        )
        == 0
    )
    got = read_parts(parts).sort("image_id", maintain_order=True)
    want = capture(str(model), fixture_images, conf=0.001, progress=False)
    assert got.height == want.height > 0 and got["head"].unique().to_list() == ["detr"]
    np.testing.assert_array_equal(
        np.sort(got["logit"].to_numpy()), np.sort(want["logit"].to_numpy())
    )


@pytest.mark.slow  # an export takes 10 to 40 s
@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_rtdetr_exports_captured_and_calibrated(tmp_path, fixture_images, fmt):
    """An export's rows (box, score, class: RT-DETR exports its decoder's top-k) are captured as
    ``YOLO(export).predict`` gives them, and a calibrated export (a temperature, a spline) returns the same
    boxes with the calibrated score of each row's logit."""
    from ultralytics import YOLO

    from det_calib.calibrators.registry import make_calibrator
    from det_calib.capture.exported import make_capturer
    from det_calib.deploy.calibrated_export import write_calibrated_export

    pt = untrained_rtdetr(tmp_path / "rt.pt")
    export = YOLO(str(pt)).export(format=fmt, imgsz=320)
    images = [str(p) for p in fixture_images[:3]]
    cap = make_capturer(export, conf=0.001)
    assert cap.heads == ("detr",)
    df = cap(images, progress=False)
    engine = YOLO(export)
    assert type(engine).__name__ == "RTDETR"
    ref = np.concatenate(
        [engine.predict(p, conf=0.001, verbose=False)[0].boxes.data.numpy() for p in images]
    )
    assert df.height == len(ref) == 300
    np.testing.assert_array_equal(
        df.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), ref[:, :4]
    )
    np.testing.assert_array_equal(df["conf"].to_numpy().astype(np.float32), ref[:, 4])
    np.testing.assert_array_equal(df["cls"].to_numpy(), ref[:, 5].astype(int))

    temperature = make_calibrator("temperature")
    temperature.temperature_ = 2.0
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 2.0, 5000)
    spline = make_calibrator("spline").fit(
        z, rng.random(z.size) < 1 / (1 + np.exp(-(0.5 * z - 0.5)))
    )
    suffix = ".onnx" if fmt == "onnx" else "_openvino_model"
    for name, cal in {"temperature": temperature, "spline": spline}.items():
        out = write_calibrated_export(export, tmp_path / f"{name}{suffix}", {"detr": cal})
        calibrated = YOLO(str(out))
        assert type(calibrated).__name__ == "RTDETR"
        for p in images:
            raw = (
                engine.predict(p, conf=0.0, verbose=False)[0].boxes.data.numpy().astype(np.float64)
            )
            new = (
                calibrated.predict(p, conf=0.0, verbose=False)[0]
                .boxes.data.numpy()
                .astype(np.float64)
            )
            np.testing.assert_array_equal(
                new[:, [0, 1, 2, 3, 5]], raw[:, [0, 1, 2, 3, 5]]
            )  # the same rows
            logit = np.log(raw[:, 4] / (1 - raw[:, 4]))
            np.testing.assert_allclose(
                new[:, 4], cal.predict_proba(logit), atol=2e-5, rtol=0, err_msg=name
            )

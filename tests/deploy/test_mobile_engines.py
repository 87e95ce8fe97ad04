"""The engines on phones and edge boards: LiteRT (FP32, INT8) and NCNN exports, and the TensorRT reader.

The demo detector is exported once per session with Ultralytics' own ``export`` (LiteRT FP32,
LiteRT INT8 with statistics on the fixture split, NCNN) and calibrated once per engine on the
fixture split. TensorRT needs an NVIDIA GPU: only its reader (metadata, the runtime check) is tested.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from detect_exports import demo_export

pytest.importorskip("ai_edge_litert")
pytest.importorskip("litert_torch")
pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

MOBILE = ("litert_fp32", "litert_int8", "ncnn")


@pytest.fixture(scope="module")
def exports(tmp_path_factory, demo_model_path) -> dict[str, Path]:
    """``pt`` and its exports ``litert_fp32``, ``litert_int8`` and ``ncnn``, made by Ultralytics (the
    session's shared exports, tests/detect_exports.py)."""
    folder = tmp_path_factory.mktemp("mobile_exports")
    pt = folder / "demo.pt"
    shutil.copy(demo_model_path, pt)
    return {"pt": pt, **{name: demo_export(tmp_path_factory, name) for name in MOBILE}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, exports, fixture_yaml) -> dict[str, Path]:
    """``det-calib calibrate --model ENGINE`` on the fixture split (spline: a map with hinges)."""
    from det_calib.cli import main

    folder = tmp_path_factory.mktemp("mobile_runs")
    for name in ("pt", *MOBILE):
        code = main(
            [
                "calibrate",
                "--model",
                str(exports[name]),
                "--data",
                str(fixture_yaml),
                "--fit-split",
                "fixture",
                "--eval-split",
                "fixture",
                "--head",
                "nms",
                "--n-boot",
                "50",
                "-q",
                "--method",
                "spline",
                "--out",
                str(folder / name),
            ]
            + (["--no-val"] if name == "pt" else [])
        )
        assert code == 0
    return {name: folder / name for name in ("pt", *MOBILE)}


def test_mobile_export_metadata(exports):
    from det_calib.capture.exported import export_format, read_export

    fp32, int8, ncnn = (read_export(exports[k]) for k in MOBILE)
    assert [export_format(exports[k]) for k in MOBILE] == ["litert", "litert", "ncnn"]
    assert (fp32.engine, int8.engine, ncnn.engine) == ("litert fp32", "litert int8", "ncnn fp32")
    for info in (fp32, int8, ncnn):
        assert (info.head, info.rows, info.imgsz) == ("nms", False, (320, 320))
        assert info.names == [
            "circle",
            "ellipse",
            "square",
            "rectangle",
            "triangle",
            "hexagon",
            "star",
            "cross",
        ]
    assert ncnn.model_file.name == "model.ncnn.param" and fp32.model_file == exports["litert_fp32"]


@pytest.mark.parametrize("name", MOBILE)
def test_capture_equals_ultralytics_predict(exports, fixture_images, name):
    """Boxes, classes and confs of the capture are Ultralytics predict's on the export, image by image,
    exactly; the logit is read back from the engine's score."""
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer

    table = make_capturer(exports[name], all_logits=True)(fixture_images, progress=False)
    yolo = YOLO(str(exports[name]), task="detect")
    for i, im in enumerate(fixture_images):
        got = table.filter(pl.col("image_id") == i)
        want = yolo.predict(str(im), conf=0.001, verbose=False)[0].boxes
        assert got.height == len(want) > 0
        np.testing.assert_array_equal(got["conf"].to_numpy().astype(np.float32), want.conf.numpy())
        np.testing.assert_allclose(
            got.select("x1", "y1", "x2", "y2").to_numpy(), want.xyxy.numpy(), atol=1e-6
        )
        assert (got["cls"].to_numpy() == want.cls.numpy()).all()
        np.testing.assert_array_equal(got["logit"].to_numpy(), logit_of_prob(want.conf.numpy()))
    lg = np.stack(
        table["logits"].to_list()
    )  # every class's logit at the box's anchor; the box's class holds the max
    np.testing.assert_allclose(
        lg[np.arange(table.height), table["cls"].to_numpy()], table["logit"], atol=1e-5
    )


def test_fp32_engines_agree_and_int8_scores_on_a_grid(runs):
    """LiteRT FP32 and NCNN (the same graph in float32) give the same boxes and scores to float32 rounding;
    LiteRT INT8 scores are whole multiples of one step, tied boxes keep one calibrated score, and
    engine.json records the step."""
    from det_calib.deploy import engine_record

    def boxes(name):
        return pl.read_parquet(runs[name] / "boxes.parquet").sort(
            "image", "conf", descending=[False, True]
        )

    fp32, ncnn = boxes("litert_fp32"), boxes("ncnn")
    for name in ("litert_fp32", "ncnn"):
        assert engine_record(runs[name]).score_step is None
    kept_a, kept_b = fp32.filter(pl.col("conf") > 0.25), ncnn.filter(pl.col("conf") > 0.25)
    assert kept_a.height == kept_b.height > 0
    assert np.abs(kept_a["conf"].to_numpy() - kept_b["conf"].to_numpy()).max() < 1e-4
    b = boxes("litert_int8")
    step = engine_record(runs["litert_int8"]).score_step
    assert step is not None and 1 / 300 < step < 1 / 200  # an int8 output over [0, 1]: 256 levels
    k = b["conf"].to_numpy() / step
    assert np.abs(k - np.round(k)).max() < 1e-3
    ties = b.group_by("conf").agg(
        pl.col("calibrated").n_unique().alias("n"), pl.len().alias("boxes")
    )
    assert (
        ties["boxes"].max() > 1 and (ties["n"] == 1).all()
    )  # a global map: one calibrated score per level
    assert (
        "its scores are quantised: whole multiples of"
        in (runs["litert_int8"] / "summary.txt").read_text()
    )


@pytest.mark.parametrize("name", MOBILE)
def test_equivalent_threshold_through_plain_predict(runs, exports, fixture_images, name):
    """Plain Ultralytics predict on the raw engine at the run's equivalent raw threshold keeps exactly
    the boxes whose calibrated score is above 0.25, image by image."""
    from ultralytics import YOLO

    from det_calib.deploy import engine_record

    t = engine_record(runs[name]).equivalent_thresholds["nms"][0]
    assert t["conf"] == 0.25 and t["raw_conf"] is not None
    b = pl.read_parquet(runs[name] / "boxes.parquet")
    yolo = YOLO(str(exports[name]), task="detect")
    n = 0
    for im in fixture_images:
        want = np.sort(
            b.filter((pl.col("image") == im.name) & (pl.col("calibrated") > 0.25))[
                "conf"
            ].to_numpy()
        )
        got = np.sort(
            yolo.predict(str(im), conf=t["raw_conf"], verbose=False)[0].boxes.conf.numpy()
        )
        np.testing.assert_array_equal(got, want.astype(np.float32))
        n += got.size
    assert 0 < n < b.height


@pytest.mark.parametrize("name", ["litert_fp32", "ncnn"])
def test_calibrated_engine_reexported_scores_are_the_calibrator(
    runs, exports, fixture_images, tmp_path, name, capsys
):
    """`apply --model EXPORT --source PT`: the calibration folded into the .pt and exported again; plain
    Ultralytics on it gives the raw engine's boxes with the calibrator's scores."""
    from ultralytics import YOLO

    from det_calib.cli import main
    from det_calib.deploy.calibrated_export import calibrated_probs
    from det_calib.deploy.posthoc import load_calibrators

    out = tmp_path / ("calibrated.tflite" if name.startswith("litert") else "calibrated_ncnn_model")
    assert (
        main(
            [
                "apply",
                "--model",
                str(exports[name]),
                "--source",
                str(exports["pt"]),
                "--calibration",
                str(runs[name] / "calibration.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert f"wrote {out}" in capsys.readouterr().out and out.exists()
    assert not list(tmp_path.glob(".det_calib_reexport_*"))  # its staging folder is gone
    cal = load_calibrators(runs[name] / "calibration.json")["nms"]
    raw_y, cal_y = YOLO(str(exports[name]), task="detect"), YOLO(str(out), task="detect")
    n = 0
    for im in fixture_images[:4]:
        r = raw_y.predict(str(im), conf=0.001, verbose=False)[0].boxes
        c = cal_y.predict(str(im), conf=0.1, verbose=False)[0].boxes
        want = calibrated_probs(cal, r.conf.numpy(), r.cls.numpy().astype(int), 8)
        keep = want > 0.1
        assert len(c) == keep.sum()
        order = np.argsort(-want[keep], kind="stable")
        np.testing.assert_allclose(c.xyxy.numpy(), r.xyxy.numpy()[keep][order], atol=0.05)
        np.testing.assert_allclose(c.conf.numpy(), want[keep][order], atol=1e-4)
        n += len(c)
    assert n > 0


def test_int8_and_sourceless_apply_give_one_line_with_the_threshold(
    runs, exports, tmp_path, capsys
):
    from det_calib.cli import main

    cases = (
        (
            "litert_int8",
            ["--source", str(exports["pt"])],
            "quantising the calibrated checkpoint again does not keep the map",
        ),
        ("ncnn", [], "pass --source, the .pt"),
    )
    for name, extra, words in cases:
        code = main(
            [
                "apply",
                "--model",
                str(exports[name]),
                "--calibration",
                str(runs[name] / "calibration.json"),
                "--out",
                str(tmp_path / "x_ncnn_model"),
                *extra,
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert (
            code == 2 and len(err) == 1 and words in err[0] and "keeps what conf > 0." in err[0]
        ), err
    assert not (tmp_path / "x_ncnn_model").exists()


def test_runs_and_compare_of_the_four_engines(runs, tmp_path):
    from det_calib.report import compare_runs

    fp32 = json.loads((runs["litert_fp32"] / "engine.json").read_text())
    assert (fp32["engine"], fp32["calibrated_export"], fp32["format"]) == (
        "litert fp32",
        None,
        "litert",
    )
    assert not (runs["litert_fp32"] / "calibrated.pt").exists()
    summary = (runs["litert_fp32"] / "summary.txt").read_text()
    assert "no calibrated engine written" in summary and "--source SOURCE.pt" in summary
    assert (
        "deploy the raw engine at the threshold below"
        in (runs["litert_int8"] / "summary.txt").read_text()
    )
    files = compare_runs(
        *(str(runs[k]) for k in ("pt", *MOBILE)), out_dir=tmp_path, labels=["pt", *MOBILE]
    )
    md = files["md"].read_text()
    part = md.split("**Each engine with its own calibration")[1]
    rows = [ln for ln in part.split("\n\n")[1].splitlines() if ln.startswith("|")][2:]
    assert [ln.strip("|").split("|")[1].strip() for ln in rows] == [
        "pytorch",
        "litert fp32",
        "litert int8",
        "ncnn fp32",
    ]
    for name, row in zip(("pt", *MOBILE), rows):
        t = (
            json.loads((runs[name] / "engine.json").read_text())["equivalent_thresholds"]["nms"][0][
                "raw_conf"
            ]
            if name != "pt"
            else None
        )
        assert t is None or f"raw conf > {t:.6g}" in row


def test_damaged_mobile_exports_one_line_exit_2(exports, fixture_yaml, tmp_path, capsys):
    from det_calib.cli import main

    data = exports["litert_fp32"].read_bytes()
    (tmp_path / "cut.tflite").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.tflite").write_bytes(b"not a flatbuffer at all")
    nobin = tmp_path / "nobin_ncnn_model"
    shutil.copytree(exports["ncnn"], nobin)
    (nobin / "model.ncnn.bin").unlink()
    shortbin = tmp_path / "short_ncnn_model"
    shutil.copytree(exports["ncnn"], shortbin)
    b = (shortbin / "model.ncnn.bin").read_bytes()
    (shortbin / "model.ncnn.bin").write_bytes(b[: len(b) // 2])
    cases = {
        "cut.tflite": "no Ultralytics metadata in it (truncated or damaged",
        "junk.tflite": "no TFL3 identifier",
        "nobin_ncnn_model": "has model.ncnn.param but no weights model.ncnn.bin",
        "short_ncnn_model": "NCNN rejects its .bin file model.ncnn.bin",
    }
    for model, words in cases.items():
        code = main(
            [
                "calibrate",
                "--model",
                str(tmp_path / model),
                "--data",
                str(fixture_yaml),
                "--fit-split",
                "fixture",
                "--eval-split",
                "fixture",
                "-q",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and words in err[0], (model, err)
    assert not (tmp_path / "o").exists()


def test_tensorrt_reader_behind_the_same_interface(exports, tmp_path):
    """A TensorRT .engine is read like any export (Ultralytics' metadata header; runs through AutoBackend);
    without a GPU and the `tensorrt` module, one line names the extra. Its inference is untested here."""
    import importlib.util

    from ultralytics.nn.backends.base import BaseBackend

    from det_calib.capture.exported import export_format, load_export, read_export
    from det_calib.errors import InputError

    meta = BaseBackend.read_metadata(exports["litert_fp32"])
    meta["args"] = {"batch": 1, "quantize": 8, "nms": False}
    header = json.dumps(meta).encode()
    engine = tmp_path / "demo.engine"
    engine.write_bytes(len(header).to_bytes(4, "little") + header + b"\0" * 64)
    info = read_export(engine)
    assert export_format(engine) == "tensorrt" and info.engine == "tensorrt int8"
    assert (info.head, info.imgsz, len(info.names)) == ("nms", (320, 320), 8)
    (tmp_path / "bare.engine").write_bytes(b"\0" * 64)
    with pytest.raises(InputError, match="no Ultralytics metadata in it"):
        read_export(tmp_path / "bare.engine")
    if importlib.util.find_spec("tensorrt") is None:
        with pytest.raises(InputError, match=r"pip install 'det_calib\[tensorrt\]'"):
            load_export(engine)


def test_capture_and_check_read_a_mobile_export(runs, exports, fixture_yaml, tmp_path):
    from det_calib.capture.parts import read_parts
    from det_calib.cli import main

    assert (
        main(
            [
                "capture",
                "--model",
                str(exports["litert_int8"]),
                "--data",
                str(fixture_yaml),
                "--split",
                "fixture",
                "--out",
                str(tmp_path / "parts"),
                "-q",
            ]
        )
        == 0
    )
    parts = read_parts(tmp_path / "parts")
    run_boxes = pl.read_parquet(runs["litert_int8"] / "boxes.parquet")
    cols = ["image", "conf", "cls", "x1", "y1", "x2", "y2"]
    np.testing.assert_array_equal(
        parts.select(cols).sort(cols).to_numpy(), run_boxes.select(cols).sort(cols).to_numpy()
    )
    code = main(
        [
            "check",
            str(runs["ncnn"]),
            "--data",
            str(fixture_yaml),
            "--split",
            "fixture",
            "--n-boot",
            "50",
            "--no-report",
            "-q",
            "--out",
            str(tmp_path / "check"),
        ]
    )
    assert code in (0, 3, 4, 5, 6)
    assert json.loads((tmp_path / "check" / "check.json").read_text())

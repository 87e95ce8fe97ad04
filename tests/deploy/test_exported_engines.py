"""Exported engines: capture, calibrate, the calibrated export and the equivalent threshold.

The demo detector is exported once per session with Ultralytics' own ``export`` (ONNX FP32 with
the default one-to-many head, ONNX FP32 with the one-to-one head ``nms=False``, OpenVINO INT8
with NNCF statistics on the fixture split) and calibrated once per engine on the fixture split.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import NO_DET_CALIB
from detect_exports import demo_export

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
pytest.importorskip("nncf")


@pytest.fixture(scope="session")
def exports(tmp_path_factory, demo_model_path) -> dict[str, Path]:
    """``pt``, ``onnx`` (FP32, one-to-many), ``onnx_e2e`` (FP32, one-to-one) and ``int8`` (OpenVINO), the
    session's shared exports (tests/detect_exports.py)."""
    out = {name: demo_export(tmp_path_factory, name) for name in ("onnx", "onnx_e2e")}
    out["int8"] = demo_export(tmp_path_factory, "openvino_int8")
    out["pt"] = demo_model_path
    return out


def _calibrate_cli(model: Path, data: Path, out: Path, *extra: str) -> None:
    from det_calib.cli import main

    code = main(
        [
            "calibrate",
            "--model",
            str(model),
            "--data",
            str(data),
            "--fit-split",
            "fixture",
            "--eval-split",
            "fixture",
            "--head",
            "nms",
            "--n-boot",
            "50",
            "-q",
            "--out",
            str(out),
            *extra,
        ]
        + (["--no-val"] if model.suffix == ".pt" else [])
    )  # an export run has no val: it says so
    assert code == 0


@pytest.fixture(scope="session")
def runs(tmp_path_factory, exports, fixture_yaml) -> dict[str, Path]:
    """``det-calib calibrate --model ENGINE`` on the fixture split (spline: a map with hinges)."""
    folder = tmp_path_factory.mktemp("engine_runs")
    out = {}
    for name in ("pt", "onnx", "int8"):
        _calibrate_cli(exports[name], fixture_yaml, folder / name, "--method", "spline")
        out[name] = folder / name
    _calibrate_cli(
        exports["onnx_e2e"],
        fixture_yaml,
        folder / "onnx_e2e",
        "--method",
        "class-platt",
        "--head",
        "e2e",
    )
    out["onnx_e2e"] = folder / "onnx_e2e"
    return out


def test_export_metadata(exports):
    from det_calib.capture.exported import read_export

    onnx, e2e, int8 = (read_export(exports[k]) for k in ("onnx", "onnx_e2e", "int8"))
    assert (onnx.format, onnx.head, onnx.rows, onnx.precision, onnx.imgsz) == (
        "onnx",
        "nms",
        False,
        "fp32",
        (320, 320),
    )
    assert (e2e.head, e2e.rows) == ("e2e", True)
    assert (int8.format, int8.head, int8.precision, int8.engine) == (
        "openvino",
        "nms",
        "int8",
        "openvino int8",
    )
    assert (
        onnx.names
        == int8.names
        == ["circle", "ellipse", "square", "rectangle", "triangle", "hexagon", "star", "cross"]
    )


@pytest.mark.parametrize("name", ["onnx", "onnx_e2e", "int8"])
def test_capture_equals_ultralytics_predict(exports, fixture_images, name):
    """Boxes, classes and confs of the capture are predict's on the export, image by image (to 1e-6);
    the logit is the engine probability's."""
    from ultralytics import YOLO

    from det_calib.capture.exported import logit_of_prob, make_capturer

    cap = make_capturer(exports[name], all_logits=name != "onnx_e2e")
    table = cap(fixture_images, progress=False)
    yolo = YOLO(str(exports[name]), task="detect")
    for i, im in enumerate(fixture_images):
        got = table.filter(pl.col("image_id") == i)
        want = yolo.predict(str(im), conf=0.001, verbose=False)[0].boxes
        assert got.height == len(want) > 0
        np.testing.assert_allclose(got["conf"].to_numpy(), want.conf.numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(
            got.select("x1", "y1", "x2", "y2").to_numpy(), want.xyxy.numpy(), atol=1e-6
        )
        assert (got["cls"].to_numpy() == want.cls.numpy()).all()
        np.testing.assert_array_equal(got["logit"].to_numpy(), logit_of_prob(want.conf.numpy()))
        if i == 0:  # the per-image form (an ensemble member's): the same boxes
            import cv2

            xyxy, conf, cls, z = cap.predict_image(cv2.imread(str(im)))[cap.info.head]
            np.testing.assert_array_equal(conf, got["conf"].to_numpy().astype(np.float32))
            np.testing.assert_array_equal(z, got["logit"].to_numpy())
    if name != "onnx_e2e":  # every class's logit at the box's anchor; the box's class holds the max
        lg = np.stack(table["logits"].to_list())
        np.testing.assert_allclose(
            lg[np.arange(table.height), table["cls"].to_numpy()], table["logit"], atol=1e-5
        )
        assert (lg.argmax(1) == table["cls"].to_numpy()).all()


def test_logit_recovery_and_its_float32_limit():
    from det_calib.capture.exported import _LOGIT_CEILING as LOGIT_CEILING
    from det_calib.capture.exported import P_CEILING, logit_of_prob

    z = np.linspace(-12, 9, 400)
    p = (1 / (1 + np.exp(-z))).astype(np.float32)
    # exact to the float32 rounding of p: |dz| <= half an ulp of p over p(1 - p)
    bound = np.spacing(p).astype(np.float64) / (p * (1.0 - p.astype(np.float64)))
    assert (np.abs(logit_of_prob(p) - z) <= bound).all()
    assert np.abs(logit_of_prob(p) - z)[z < 5].max() < 1e-5
    assert (
        logit_of_prob(np.float32([1.0]))[0]
        == LOGIT_CEILING
        == logit_of_prob(np.float32([P_CEILING]))[0]
    )
    assert 16.63 < LOGIT_CEILING < 16.64
    assert (np.diff(logit_of_prob(np.sort(p))) >= 0).all()


_PLAIN_RUN = NO_DET_CALIB + textwrap.dedent(
    """
    import glob, numpy as np, cv2
    from ultralytics.data.augment import LetterBox
    def letterboxed(p):
        x = LetterBox((320, 320), auto=False)(image=cv2.imread(p))[..., ::-1].transpose(2, 0, 1)[None]
        return np.ascontiguousarray(x.astype(np.float32) / 255)
    for args in json.loads(sys.argv[1]):  # every export in this one process: one start-up
        ims = sorted(glob.glob(args["images"] + "/*.jpg"))
        x = [letterboxed(p) for p in ims]
        if args["format"] == "onnx":
            import onnxruntime as ort
            def run(f):
                s = ort.InferenceSession(f)
                return [s.run(None, {s.get_inputs()[0].name: xi})[0] for xi in x]
        else:
            import openvino as ov
            core = ov.Core()
            def run(d):
                xml = glob.glob(d + "/*.xml")[0]
                m = core.compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                return [m(xi)[0] for xi in x]
        out = {"raw": np.concatenate(run(args["raw"])), "cal": np.concatenate(run(args["cal"]))}
        kept = (("kept_cal", args["cal"], args["conf"]), ("kept_raw", args["raw"], args["raw_conf"]))
        for key, model, conf in kept:
            res = [YOLO(model, task="detect").predict(p, conf=conf, verbose=False)[0].boxes for p in ims]
            out[key] = np.concatenate(
                [np.c_[np.full(len(r), i), r.xyxy.numpy(), r.cls.numpy()] for i, r in enumerate(res)]
            )
            out[key + "_conf"] = np.concatenate([r.conf.numpy() for r in res])
        np.savez(args["npz"], **out)
    """
)


def _calibrator_on(cal, p: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """The run's calibrator itself (its own transform, not the deployment tables) on engine probabilities."""
    from det_calib.calibrators.base import calibrated_logits
    from det_calib.capture.exported import logit_of_prob
    from det_calib.numeric import sigmoid

    z = calibrated_logits(
        cal, logit_of_prob(p).ravel(), np.ascontiguousarray(cls).ravel().astype(np.int64)
    )
    return sigmoid(z).reshape(p.shape)


@pytest.fixture(scope="module")
def plain_runs(runs, exports, fixture_images, tmp_path_factory) -> dict[str, Path]:
    """Export name -> the ``.npz`` of :data:`_PLAIN_RUN` on its raw and calibrated export (the plain
    runtime's outputs, predict's boxes at 0.25 on the calibrated one and at the equivalent raw
    threshold on the raw one), every export in one process where det_calib cannot be imported."""
    from det_calib.capture.exported import read_export
    from det_calib.deploy import engine_record

    folder = tmp_path_factory.mktemp("plain_runs")
    cases = []
    for name in ("onnx", "int8", "onnx_e2e"):
        rec = engine_record(runs[name])
        info = read_export(exports[name])
        eq = rec.equivalent_thresholds[info.head][0]
        raw_conf = eq["raw_conf"] if eq["raw_conf"] is not None else min(eq["raw_conf_per_class"])
        cases.append(
            {
                "format": info.format,
                "raw": str(exports[name]),
                "cal": str(runs[name] / rec.calibrated_export),
                "images": str(fixture_images[0].parent),
                "conf": 0.25,
                "raw_conf": raw_conf,
                "npz": str(folder / f"{name}.npz"),
            }
        )
    proc = subprocess.run(
        [sys.executable, "-c", _PLAIN_RUN, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {name: folder / f"{name}.npz" for name in ("onnx", "int8", "onnx_e2e")}


@pytest.mark.parametrize("name", ["onnx", "int8", "onnx_e2e"])
def test_calibrated_export_scores_are_the_calibrator(runs, exports, plain_runs, name):
    """The calibrated export, run by the plain runtime and by Ultralytics with det_calib blocked:
    boxes unchanged, scores = the run's calibrator on the engine's raw scores (1e-5), and predict
    at the equivalent raw threshold on the raw engine keeps exactly the calibrated set at 0.25."""
    from det_calib.capture.exported import read_export
    from det_calib.deploy import calibrated_probs, engine_record
    from det_calib.deploy.posthoc import load_calibrators

    run = runs[name]
    rec = engine_record(run)
    info = read_export(exports[name])
    cal = load_calibrators(run / "calibration.json")[info.head]
    eq = rec.equivalent_thresholds[info.head][0]
    o = np.load(plain_runs[name])  # the plain runtime and predict at 0.25 / eq's raw threshold
    raw, calibrated = o["raw"], o["cal"]
    nc = len(info.names)
    if (
        info.rows
    ):  # (B, 300, 6): boxes and classes unchanged, the conf column calibrated by its row's class
        assert (raw[..., [0, 1, 2, 3, 5]] == calibrated[..., [0, 1, 2, 3, 5]]).all()
        p, cls, got = raw[..., 4], raw[..., 5].astype(int), calibrated[..., 4]
    else:  # (B, 4 + nc, anchors): every class channel calibrated
        assert (raw[:, :4] == calibrated[:, :4]).all()
        p, got = raw[:, 4:], calibrated[:, 4:]
        cls = np.broadcast_to(np.arange(nc)[None, :, None], p.shape)
    assert np.abs(_calibrator_on(cal, p, cls) - got).max() < 1e-5
    # the deployment tables the graph is built from are the calibrator
    assert np.abs(calibrated_probs(cal, p, cls, nc) - _calibrator_on(cal, p, cls)).max() < 1e-9
    if eq["raw_conf"] is not None:  # a global map: one raw conf keeps exactly the calibrated set
        kc, kr = o["kept_cal"], o["kept_raw"]
        assert kc.shape == kr.shape and len(kc) > 0
        np.testing.assert_allclose(kc, kr, atol=1e-4)
        np.testing.assert_allclose(
            o["kept_cal_conf"],
            _calibrator_on(cal, o["kept_raw_conf"], kr[:, 5].astype(int)),
            atol=1e-5,
        )


@pytest.mark.parametrize("name", ["pt", "onnx", "int8"])
def test_equivalent_threshold_keeps_exactly_the_calibrated_set(runs, name):
    from det_calib.deploy.calibrated_export import (
        _equivalent_raw_threshold as equivalent_raw_threshold,
    )
    from det_calib.record.calibrator_record import calibrator_of
    from det_calib.record.run_result import RunResult

    r = RunResult.read(runs[name] / "calibration.json")
    cal = calibrator_of(r.head("nms").calibrator)
    b = pl.read_parquet(runs[name] / "boxes.parquet")
    for c in (0.1, 0.25, 0.5):
        t = np.float32(equivalent_raw_threshold(cal, c, nc=8))
        kept_cal, kept_raw = (
            b["calibrated"].to_numpy() > c,
            b["conf"].to_numpy().astype(np.float32) > t,
        )
        assert (kept_cal == kept_raw).all() and 0 < kept_cal.sum() < b.height


def test_run_on_an_export(runs, exports):
    """The export run's outputs: the calibrated export instead of calibrated.pt, engine.json, val not run."""
    from det_calib.record.run_result import RunResult

    for name, deployed in (("onnx", "calibrated.onnx"), ("int8", "calibrated_openvino_model")):
        folder = runs[name]
        assert (folder / deployed).exists() and not (folder / "calibrated.pt").exists()
        r = RunResult.read(folder / "calibration.json")
        assert Path(r.model) == exports[name].resolve() and r.settings.imgsz == 320
        assert "exported engine" in r.head("nms").ultralytics_val.note
        assert "Engine" in (folder / "report.md").read_text()
    int8 = json.loads((runs["int8"] / "engine.json").read_text())
    assert (int8["engine"], int8["head"], int8["calibrated_export"]) == (
        "openvino int8",
        "nms",
        "calibrated_openvino_model",
    )
    t = int8["equivalent_thresholds"]["nms"][0]["raw_conf"]
    assert (
        f"raw conf > {t:.6g} on the raw engine keeps exactly the calibrated set at conf 0.25"
        in (runs["int8"] / "summary.txt").read_text()
    )


def _md_table(md: str, caption: str) -> list[list[str]]:
    part = md.split(f"**{caption}")[1]
    rows = [ln for ln in part.split("\n\n")[1].splitlines() if ln.startswith("|")][2:]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]


def test_int8_report_shows_its_calibration_next_to_the_pt(runs, tmp_path):
    """`det-calib report INT8_RUN --reference PT_RUN`: the engines table, its figures recomputed
    from each run's boxes (kept-set ECE at 0.25 raw and calibrated, equivalent thresholds)."""
    from det_calib.cli import main
    from det_calib.deploy.calibrated_export import (
        _equivalent_raw_threshold as equivalent_raw_threshold,
    )
    from det_calib.metrics.operating_point import kept_ece
    from det_calib.record.calibrator_record import calibrator_of
    from det_calib.record.run_result import RunResult

    assert (
        main(["report", str(runs["int8"]), "--reference", str(runs["pt"]), "--out", str(tmp_path)])
        == 0
    )
    rows = _md_table((tmp_path / "report.md").read_text(), "Each engine with its own calibration")
    assert [r[1] for r in rows] == ["pytorch", "openvino int8"]
    for row, name in zip(rows, ("pt", "int8")):
        r = RunResult.read(runs[name] / "calibration.json")
        b = pl.read_parquet(runs[name] / "boxes.parquet").filter(
            (pl.col("split") == r.settings.eval_split) & ~pl.col("ignore")
        )
        conf, cal, y = (b[c].to_numpy() for c in ("conf", "calibrated", "correct"))
        assert (
            row[4] == "0.25"
            and int(row[5]) == (conf > 0.25).sum()
            and int(row[9]) == (cal > 0.25).sum()
        )
        assert row[6] == f"{conf[conf > 0.25].mean():.3f}"
        assert row[7] == f"{kept_ece(conf, y, threshold=0.25, n_bins=r.settings.ece_bins):.4f}"
        assert row[8] == f"{kept_ece(cal, y, threshold=0.25, n_bins=r.settings.ece_bins):.4f}"
        t = equivalent_raw_threshold(calibrator_of(r.head("nms").calibrator), 0.25, nc=8)
        assert row[10] == f"raw conf > {t:.6g}"
    shift = _md_table((tmp_path / "report.md").read_text(), "How the scores and the kept set move")
    assert len(shift) == 1 and shift[0][1] == "0.25"


def test_compare_pt_fp32_int8(runs, tmp_path):
    """compare of the .pt, its FP32 and its INT8 export: engines and how the kept set moves."""
    from det_calib.record.run_folder import load_run
    from det_calib.report import compare_runs
    from det_calib.report.engines_section import _engine_shift as engine_shift

    files = compare_runs(
        *(str(runs[k]) for k in ("pt", "onnx", "int8")),
        out_dir=tmp_path,
        labels=["pt", "fp32", "int8"],
    )
    md = files["md"].read_text()
    engines = _md_table(md, "Each engine with its own calibration")
    assert [r[1] for r in engines] == ["pytorch", "onnx fp32", "openvino int8"]
    shift = _md_table(md, "How the scores and the kept set move")
    assert [r[0] for r in shift] == ["fp32", "int8"]
    pt = load_run(runs["pt"])
    for row, name in zip(shift, ("onnx", "int8")):
        s = engine_shift(pt, "nms", load_run(runs[name]), "nms", 0.25)
        kept_pt = int((pt.eval_boxes("nms").conf > 0.25).sum())
        kept = int((load_run(runs[name]).eval_boxes("nms").conf > 0.25).sum())
        assert (
            s.kept_both_raw + s.only_reference_raw == kept_pt
            and s.kept_both_raw + s.only_other_raw == kept
        )
        assert row[5] == f"{s.kept_both_raw} / {s.only_reference_raw} / {s.only_other_raw}"
        assert s.matched >= s.kept_both_raw and s.mean_abs_conf_diff >= abs(s.mean_conf_diff)
    # the FP32 export moves the scores far less than the INT8 one
    fp32, int8 = (engine_shift(pt, "nms", load_run(runs[k]), "nms", 0.25) for k in ("onnx", "int8"))
    assert fp32.mean_abs_conf_diff < int8.mean_abs_conf_diff


def test_capture_and_check_accept_an_export(runs, exports, fixture_yaml, tmp_path):
    from det_calib.capture.parts import read_parts
    from det_calib.cli import main

    assert (
        main(
            [
                "capture",
                "--model",
                str(exports["int8"]),
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
    run_boxes = pl.read_parquet(runs["int8"] / "boxes.parquet")
    assert parts.height > 0 and set(parts["head"]) == {"nms"}
    cols = [
        "image",
        "conf",
        "cls",
        "x1",
        "y1",
        "x2",
        "y2",
    ]  # the run's two halves of the split are the whole split
    np.testing.assert_array_equal(
        parts.select(cols).sort(cols).to_numpy(), run_boxes.select(cols).sort(cols).to_numpy()
    )
    code = main(
        [
            "check",
            str(runs["int8"]),
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


def test_apply_writes_a_calibrated_export(runs, exports, tmp_path, capsys):
    from det_calib.cli import main

    out = tmp_path / "mine_openvino_model"
    assert (
        main(
            [
                "apply",
                "--model",
                str(exports["int8"]),
                "--calibration",
                str(runs["int8"] / "calibration.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "openvino int8" in printed and re.search(
        r"calibrated conf > 0.25 keeps what conf > 0\.\d+", printed
    )
    assert (
        next(out.glob("*.bin")).read_bytes()
        == next((runs["int8"] / "calibrated_openvino_model").glob("*.bin")).read_bytes()
    )  # the same weights and calibration tables as the run's calibrated export
    # the .pt run's calibration on the INT8 export: written, with a note that it was fitted elsewhere
    assert (
        main(
            [
                "apply",
                "--model",
                str(exports["int8"]),
                "--calibration",
                str(runs["pt"] / "calibration.json"),
                "--out",
                str(tmp_path / "pt_cal_openvino_model"),
            ]
        )
        == 0
    )
    assert "not on this export" in capsys.readouterr().out
    # an ONNX graph is calibrated in place: a --source it would not read, or an --out that would name
    # its ONNX file .pt, refused in one line
    for extra, words in (
        (["--source", str(exports["pt"]), "--out", str(tmp_path / "c.onnx")], "drop it"),
        (
            ["--out", str(tmp_path / "c.pt")],
            "would hold an export in ONNX (.onnx): name it with .onnx",
        ),
    ):
        argv = [
            "--model",
            str(exports["onnx"]),
            "--calibration",
            str(runs["pt"] / "calibration.json"),
        ]
        assert main(["apply", *argv, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


_BLOCKED = textwrap.dedent(
    """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == sys.argv[1] or name.startswith(sys.argv[1] + "."):
                raise ImportError(name + " is blocked in this process")
    sys.meta_path.insert(0, Block())
    from det_calib.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize(
    ("module", "name", "extra"), [("onnxruntime", "onnx", "onnx"), ("openvino", "int8", "openvino")]
)
def test_missing_runtime_is_one_line_naming_the_extra(
    exports, fixture_yaml, tmp_path, module, name, extra
):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _BLOCKED,
            module,
            "calibrate",
            "--model",
            str(exports[name]),
            "--data",
            str(fixture_yaml),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and f"pip install 'det_calib[{extra}]'" in lines[0] and module in lines[0]
    )


def test_bad_exports(exports, tmp_path, fixture_yaml):
    import onnx

    from det_calib.capture.exported import make_capturer, read_export
    from det_calib.errors import InputError

    m = onnx.load(str(exports["onnx"]))
    del m.metadata_props[:]
    onnx.save(m, str(tmp_path / "plain.onnx"))
    with pytest.raises(InputError, match="no Ultralytics metadata"):
        read_export(tmp_path / "plain.onnx")
    with pytest.raises(InputError, match="model not found"):
        read_export(tmp_path / "missing.onnx")
    with pytest.raises(InputError, match="carries only the `nms` head"):
        make_capturer(exports["onnx"], head="e2e")
    with pytest.raises(InputError, match="export's size 320"):
        make_capturer(exports["onnx"], imgsz=640)
    from det_calib.cli import main

    assert (
        main(
            [
                "calibrate",
                "--model",
                str(exports["onnx"]),
                "--data",
                str(fixture_yaml),
                "--head",
                "e2e",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )


def test_onnx_fp16_output_and_old_opset(exports, runs, fixture_images, tmp_path):
    """An ONNX engine with a float16 output gets the map in float32 between two casts; an opset
    below 13 (no axes inputs) is refused in one line."""
    import cv2
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from ultralytics.data.augment import LetterBox

    from det_calib.deploy.calibrated_export import write_calibrated_export
    from det_calib.deploy.posthoc import load_calibrators
    from det_calib.errors import InputError

    m = onnx.load(str(exports["onnx"]))
    out = m.graph.output[0]
    for n in m.graph.node:
        n.output[:] = ["f32_out" if o == out.name else o for o in n.output]
    m.graph.node.append(helper.make_node("Cast", ["f32_out"], [out.name], to=TensorProto.FLOAT16))
    out.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.save(m, str(tmp_path / "half.onnx"))
    cal = load_calibrators(runs["onnx"] / "calibration.json")
    write_calibrated_export(tmp_path / "half.onnx", tmp_path / "half_cal.onnx", cal)
    x = LetterBox((320, 320), auto=False)(image=cv2.imread(str(fixture_images[0])))[
        ..., ::-1
    ].transpose(2, 0, 1)
    x = np.ascontiguousarray(x[None]).astype(np.float32) / 255
    raw, got = (
        ort.InferenceSession(str(tmp_path / f)).run(None, {"images": x})[0]
        for f in ("half.onnx", "half_cal.onnx")
    )
    assert raw.dtype == got.dtype == np.float16 and (raw[:, :4] == got[:, :4]).all()
    cls = np.broadcast_to(np.arange(8)[None, :, None], raw[:, 4:].shape)
    assert (
        np.abs(_calibrator_on(cal["nms"], raw[:, 4:].astype(np.float32), cls) - got[:, 4:]).max()
        < 1e-3
    )
    m = onnx.load(str(exports["onnx"]))
    m.opset_import[0].version = 12
    onnx.save(m, str(tmp_path / "old.onnx"))
    with pytest.raises(InputError, match="opset 12; the calibrated export needs opset 13"):
        write_calibrated_export(tmp_path / "old.onnx", tmp_path / "old_cal.onnx", cal)

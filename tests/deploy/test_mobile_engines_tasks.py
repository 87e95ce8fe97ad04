"""The calibrated LiteRT and NCNN engines of segment, pose and OBB models (the demo's YOLO26n-seg, -pose and -obb,
exported by Ultralytics at 320, FP32, the one-to-many head they carry): ``det-calib calibrate`` on each engine
(the demo's task data, 12 images a split), ``det-calib apply --source`` re-exports the calibrated checkpoint, and
plain Ultralytics (det_calib blocked in its process) runs both engines. Every box the calibrated engine keeps
above 0.05 is a box of the raw engine's whose calibrated score is above 0.05, with the raw engine's box, class and
mask, keypoints or rotated box, bit for bit; its score is the run's calibrator on the raw engine's score, to 1e-5.
A source of another task, a calibration without the export's head and an INT8 LiteRT export get one line and exit
code 2. The exports are shared with tests/capture/test_exported_mobile_tasks.py (tests/mobile_task_exports.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_DET_CALIB
from mobile_task_exports import CASES, ENGINES, IMGSZ, MODELS, mobile_task_exports, source_of

from det_calib.capture.exported import logit_of_prob
from det_calib.cli import main

pytest.importorskip("ai_edge_litert")
pytest.importorskip("litert_torch")
pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

METHODS = {
    "segment": "spline",
    "pose": "platt",
    "obb": "temperature",
}  # hinges, an affine map, the classic fold
CONF = 0.05  # the calibrated engine's predict threshold
ATOL = 1e-5  # the calibrated engine's score against the run's calibrator on the raw score (measured: 7.3e-7 at most)
N_IMAGES = 6


def _data_yaml(task: str) -> Path:
    from det_calib.demo import demo_data_yaml

    return demo_data_yaml(task=task)


def _engine_out(folder: Path, fmt: str) -> Path:
    return folder / ("calibrated.tflite" if fmt == "litert" else "calibrated_ncnn_model")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[tuple[str, str], Path]:
    return mobile_task_exports(tmp_path_factory)


@pytest.fixture(scope="module")
def engines(tmp_path_factory, exports) -> dict[tuple[str, str], Path]:
    """``(task, format)`` -> the folder of its run (``run/``) and calibrated engine, made through the command line:
    ``calibrate --model ENGINE`` (fit on 12 calib images, eval on 12 test images), then ``apply --source``."""
    folder = tmp_path_factory.mktemp("mobile_task_engines")
    out = {}
    for task, fmt in CASES:
        sub = folder / f"{task}_{fmt}"
        assert (
            main(
                [
                    "calibrate",
                    "--model",
                    str(exports[task, fmt]),
                    "--data",
                    str(_data_yaml(task)),
                    "--limit",
                    "12",
                    "--head",
                    "nms",
                    "--method",
                    METHODS[task],
                    "--n-boot",
                    "20",
                    "--no-report",
                    "-q",
                    "--out",
                    str(sub / "run"),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "apply",
                    "--model",
                    str(exports[task, fmt]),
                    "--source",
                    str(source_of(exports[task, fmt], task)),
                    "--calibration",
                    str(sub / "run" / "calibration.json"),
                    "--out",
                    str(_engine_out(sub, fmt)),
                ]
            )
            == 0
        )
        out[task, fmt] = sub
    return out


_PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    import numpy as np
    args = json.loads(sys.argv[1])
    out = {}
    for key, case in args["cases"].items():
        task = case["task"]
        for engine, conf in (("raw", 0.001), ("cal", args["conf"])):
            yolo = YOLO(case[engine], task=task)
            for i, p in enumerate(args["images"][task]):
                r = yolo.predict(p, conf=conf, verbose=False, retina_masks=True)[0]
                b = r.obb if task == "obb" else r.boxes
                n, h, w = len(b), *r.orig_shape
                pay = {"obb": lambda: r.obb.xywhr.numpy(), "segment": lambda: np.zeros((n, 0), np.float32),
                       "pose": lambda: r.keypoints.data.numpy().reshape(n, -1) if n else np.zeros((0, 15))}[task]()
                k = f"{key}/{engine}/{i}"
                out[k + "/rows"] = np.concatenate([b.xyxy.numpy(), b.cls.numpy()[:, None], pay], axis=1)
                out[k + "/conf"] = b.conf.numpy()
                if task == "segment":
                    out[k + "/masks"] = r.masks.data.numpy().astype(bool) if n else np.zeros((0, h, w), bool)
    np.savez_compressed(args["npz"], **out)
    """
)


@pytest.fixture(scope="module")
def predicted(tmp_path_factory, exports, engines) -> dict[str, np.ndarray]:
    """Plain Ultralytics predict, in a process where det_calib cannot be imported, on the first test images of
    each task: the raw engine at conf 0.001, the calibrated one at :data:`CONF`; masks at the image's size."""
    folder = tmp_path_factory.mktemp("mobile_task_predict")
    images = {
        task: [
            str(p)
            for p in sorted((_data_yaml(task).parent / "images" / "test").iterdir())[:N_IMAGES]
        ]
        for task in MODELS
    }
    cases = {
        f"{t}_{f}": {
            "task": t,
            "raw": str(exports[t, f]),
            "cal": str(_engine_out(engines[t, f], f)),
        }
        for t, f in CASES
    }
    args = {"cases": cases, "images": images, "conf": CONF, "npz": str(folder / "o.npz")}
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
    }  # NCNN's OpenMP workers sleep while waiting (engines_mobile.md)
    proc = subprocess.run(
        [sys.executable, "-c", _PREDICT, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(np.load(folder / "o.npz"))


def _by_rows(rows: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    """``rows`` and ``rest`` in the lexicographic order of the rows (box, class, payload): the calibrated engine
    can tie scores the raw one does not (a map flatter than 1, in float32), so the order after NMS may differ."""
    order = np.lexsort(rows.T[::-1])
    return [a[order] for a in (rows, *rest)]


@pytest.mark.parametrize(("task", "fmt"), CASES)
def test_calibrated_engine_is_the_raw_engine_rescored(exports, engines, predicted, task, fmt):
    from det_calib.capture.exported import read_export
    from det_calib.deploy.posthoc import load_calibrators

    cal = load_calibrators(engines[task, fmt] / "run" / "calibration.json")["nms"]
    out = _engine_out(engines[task, fmt], fmt)
    info = read_export(out)
    assert (info.task, info.engine, info.head, info.imgsz) == (
        task,
        ENGINES[fmt],
        "nms",
        (IMGSZ, IMGSZ),
    )
    compared, moved = 0, 0.0
    for i in range(N_IMAGES):
        raw, mine = (f"{task}_{fmt}/{engine}/{i}" for engine in ("raw", "cal"))
        want = cal.predict_proba(logit_of_prob(predicted[raw + "/conf"]))
        keep = want > CONF
        assert predicted[mine + "/conf"].size == keep.sum()
        assert predicted[raw + "/conf"].size < 300  # no box cut by max_det
        r_masks, c_masks = (
            ([predicted[raw + "/masks"][keep]], [predicted[mine + "/masks"]])
            if task == "segment"
            else ([], [])
        )
        r_rows, r_want, r_conf, *r_masks = _by_rows(
            predicted[raw + "/rows"][keep], want[keep], predicted[raw + "/conf"][keep], *r_masks
        )
        c_rows, c_conf, *c_masks = _by_rows(
            predicted[mine + "/rows"], predicted[mine + "/conf"], *c_masks
        )
        np.testing.assert_array_equal(
            c_rows, r_rows
        )  # boxes, classes, keypoints / rotated boxes: bit for bit
        for a, b in zip(c_masks, r_masks):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c_conf, r_want, rtol=0, atol=ATOL)
        compared += keep.sum()
        moved = max(moved, float(np.abs(c_conf - r_conf).max(initial=0)))
    assert compared >= 30
    assert moved > 1e-2  # not vacuous: the calibrated scores are not the raw ones


def test_bad_sources_and_calibrations_one_line_exit_2(exports, engines, tmp_path, capsys):
    """A source of another task than the export's, or a calibration without the export's head: one line, exit 2,
    nothing written."""
    seg = exports["segment", "litert"]
    e2e = tmp_path / "e2e"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(source_of(seg, "segment")),
                "--data",
                str(_data_yaml("segment")),
                "--limit",
                "4",
                "--head",
                "e2e",
                "--method",
                "temperature",
                "--n-boot",
                "20",
                "--no-val",
                "--no-report",
                "-q",
                "--out",
                str(e2e),
            ]
        )
        == 0
    )
    capsys.readouterr()
    run = engines["segment", "litert"] / "run" / "calibration.json"
    cases = {
        "pose source": (
            [source_of(exports["pose", "litert"], "pose")],
            run,
            "is a `pose` model and yolo26n_shapes_seg.tflite a `segment` export: not the .pt",
        ),
        "detector source": (
            [MODELS["segment"].parent / "yolo26n_shapes.pt"],
            run,
            "is a `detect` model and yolo26n_shapes_seg.tflite a `segment` export",
        ),
        "e2e calibration": (
            [source_of(seg, "segment")],
            e2e / "calibration.json",
            "has no calibrator for the `nms` head the export carries (it has: e2e)",
        ),
    }
    for name, (source, calibration, words) in cases.items():
        code = main(
            [
                "apply",
                "--model",
                str(seg),
                "--source",
                str(source[0]),
                "--calibration",
                str(calibration),
                "--out",
                str(tmp_path / "x.tflite"),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and words in err[0], (name, err)
    assert not (tmp_path / "x.tflite").exists() and not list(tmp_path.glob(".det_calib_reexport_*"))


def test_int8_segment_engine_refused_with_its_threshold(engines, tmp_path, capsys):
    """An INT8 LiteRT export of the segment model is refused as the detector's is: re-exporting the calibrated
    checkpoint quantises it again, which does not keep the map; the line gives the equivalent raw threshold."""
    import shutil

    from ultralytics import YOLO

    pt = tmp_path / MODELS["segment"].name
    shutil.copy(MODELS["segment"], pt)
    int8 = YOLO(str(pt)).export(
        format="litert",
        int8=True,
        imgsz=IMGSZ,
        data=str(_data_yaml("segment")),
        fraction=0.05,
        verbose=False,
    )
    capsys.readouterr()  # the exporter's progress
    code = main(
        [
            "apply",
            "--model",
            str(int8),
            "--source",
            str(pt),
            "--calibration",
            str(engines["segment", "litert"] / "run" / "calibration.json"),
            "--out",
            str(tmp_path / "c.tflite"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "no calibrated litert int8 engine: quantising the calibrated checkpoint again" in err[0]
    assert "keeps what conf > 0." in err[0]
    assert not (tmp_path / "c.tflite").exists()

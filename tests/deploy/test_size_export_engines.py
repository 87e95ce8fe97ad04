"""The size map (size-platt) in the calibrated exports of the demo detector: plain Ultralytics gets the run's scores.

The demo detector is exported by Ultralytics (ONNX with the one-to-many head, ONNX with the one-to-one head
``nms=False``, OpenVINO FP32) and each export is calibrated with ``--method size-platt`` on the fixture split,
whose images (288 x 384 and 384 x 288) the 320 x 320 engines see letterboxed with padding. Plain Ultralytics
``predict`` on the run's calibrated export, in a process where det_calib cannot be imported, must give:

- boxes and classes that are the raw engine's own (the graph changes only the scores);
- each box's conf equal to the run's ``calibrated`` column for that box (to 1e-5; float32 on both sides);
- on the one-to-one head (the map on the engine's top-k rows) exactly the run's boxes whose calibrated conf
  is above 0.25; on the one-to-many head (the map before NMS, which then ranks by the calibrated scores) the
  same set but for the boxes NMS keeps or suppresses differently (a few at most).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import NO_DET_CALIB
from detect_exports import demo_export

pytestmark = pytest.mark.slow

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

ENGINES = ("onnx", "onnx_e2e", "openvino")  # exports of tests/detect_exports.py


@pytest.fixture(scope="module")
def size_runs(tmp_path_factory, fixture_yaml) -> dict[str, tuple[Path, Path]]:
    """Engine -> (its export, its ``--method size-platt`` run on the fixture split)."""
    from det_calib.cli import main

    folder = tmp_path_factory.mktemp("size_exports")
    out = {}
    for name in ENGINES:
        sub = folder / name
        sub.mkdir()
        made = demo_export(
            tmp_path_factory, name
        )  # the session's shared export (tests/detect_exports.py)
        head = "e2e" if name == "onnx_e2e" else "nms"
        code = main(
            [
                "calibrate",
                "--model",
                str(made),
                "--data",
                str(fixture_yaml),
                "--fit-split",
                "fixture",
                "--eval-split",
                "fixture",
                "--head",
                head,
                "--method",
                "size-platt",
                "--n-boot",
                "20",
                "-q",
                "--no-report",
                "--out",
                str(sub / "run"),
            ]
        )
        assert code == 0
        out[name] = (made, sub / "run")
    return out


_PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    args = json.loads(sys.argv[1])
    out = {}
    for name, case in args["cases"].items():  # every engine in this one process: one start-up
        out[name] = {}
        for key, model, conf in (("cal", case["cal"], 0.25), ("raw", case["raw"], 0.001)):
            m = YOLO(model, task="detect")
            rows = []
            for i, p in enumerate(args["images"]):
                b = m.predict(p, conf=conf, verbose=False)[0].boxes
                rows += [[i, *x, c, k] for x, c, k in zip(b.xyxy.tolist(), b.conf.tolist(), b.cls.tolist())]
            out[name][key] = rows
    json.dump(out, open(args["out"], "w"))
    """
)


def _find(rows: np.ndarray, r: np.ndarray) -> int | None:
    """Index of the row of ``rows`` with ``r``'s image, class and corners (to 1e-3 px), else None."""
    d = np.abs(rows[:, 1:5] - r[1:5]).max(1)
    d[(rows[:, 0] != r[0]) | (rows[:, 6] != r[6])] = np.inf
    j = int(np.argmin(d)) if len(d) else -1
    return j if j >= 0 and d[j] < 1e-3 else None


@pytest.fixture(scope="module")
def predicted(size_runs, fixture_images, tmp_path_factory) -> dict[str, dict]:
    """Engine -> plain Ultralytics' predictions (det_calib blocked) of its calibrated export at conf
    0.25 (``cal``) and of its raw export at 0.001 (``raw``), every engine in one process."""
    cases = {}
    for name, (export, run) in size_runs.items():
        rec = json.loads((run / "engine.json").read_text())
        cases[name] = {"cal": str(run / rec["calibrated_export"]), "raw": str(export)}
    out = tmp_path_factory.mktemp("size_predict") / "p.json"
    spec = {"cases": cases, "images": [str(p) for p in fixture_images], "out": str(out)}
    proc = subprocess.run(
        [sys.executable, "-c", _PREDICT, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_plain_ultralytics_gets_the_runs_size_calibrated_scores(
    size_runs, predicted, fixture_images, name
):
    from det_calib.record.run_result import RunResult

    export, run = size_runs[name]
    res = RunResult.read(run / "calibration.json")
    head = "e2e" if name == "onnx_e2e" else "nms"
    assert res.head(head).calibrator.method == "size-platt"
    assert res.head(head).calibrator.params["map"]["c"] != 0  # a size term to carry
    rec = json.loads((run / "engine.json").read_text())
    assert rec["equivalent_thresholds"][head] == []  # no raw threshold can keep a size map's set
    pred = predicted[name]  # plain Ultralytics on (run / rec["calibrated_export"]) and on export
    cal, raw = (np.array(pred[k], dtype=np.float64).reshape(-1, 7) for k in ("cal", "raw"))
    b = pl.read_parquet(run / "boxes.parquet").filter(
        pl.col("head") == head
    )  # the two halves: every image once
    index = {
        Path(p).name: i for i, p in enumerate(fixture_images)
    }  # the predict loop's image numbers
    b = b.with_columns(
        image_id=pl.col("image").map_elements(lambda p: index[Path(p).name], return_dtype=pl.Int64)
    )
    ref = (
        b.select("image_id", "x1", "y1", "x2", "y2", "calibrated", "cls")
        .to_numpy()
        .astype(np.float64)
    )
    assert len(cal) >= 20
    # the graph changes no box: every calibrated box is one of the raw engine's, with its class
    assert all(_find(raw, r) is not None for r in cal)
    found = [(_find(ref, r), r) for r in cal]
    got = np.array([r[5] for j, r in found if j is not None])
    want = np.array([ref[j, 5] for j, r in found if j is not None])
    assert np.abs(got - want).max() < 1e-5
    # the raw scores would differ by far more: the map (and its size term) is applied
    raw_conf = np.array([b["conf"][j] for j, _ in found if j is not None])
    assert np.abs(raw_conf - want).max() > 0.02
    kept_ref = int((ref[:, 5] > 0.25).sum())
    missing = sum(j is None for j, _ in found)
    if head == "e2e":  # the map on the top-k rows: the run's calibrated set exactly
        assert missing == 0 and len(cal) == kept_ref
    else:  # before NMS: NMS ranks by the calibrated scores, a few boxes differ
        assert missing <= max(2, len(cal) // 20) and abs(len(cal) - kept_ref) <= max(
            2, len(cal) // 20
        )

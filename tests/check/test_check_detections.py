"""``det-calib check --detections``: the new images' boxes from a file of detections, no model run.

Synthetic detections of the fixture split (tests/detection_files.py); the demo detector's own files of new
images (Ultralytics predict label folders) are checked in tests/system/test_detections_run.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from detection_files import FIXTURE, calibrate_argv, synthetic_rows, write_csv, write_txt

from det_calib.check.run_check import CHECK_FILE, CheckResult
from det_calib.cli import main

DATA = FIXTURE / "data.yaml"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return synthetic_rows()


@pytest.fixture(scope="module")
def det_run(tmp_path_factory, rows) -> Path:
    """A run calibrated from a label folder of the fixture split (platt: a map of every box)."""
    tmp = tmp_path_factory.mktemp("det_run")
    folder = write_txt(rows, tmp / "labels")
    assert main(calibrate_argv(DATA, folder, tmp / "run", "--method", "platt")) == 0
    return tmp / "run"


def _check(capsys, run: Path, *argv) -> tuple[int, str, str]:
    code = main(["check", str(run), *map(str, argv), "-q", "--n-boot", "50", "--no-report"])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_a_labelled_check_scores_the_files_boxes_with_the_runs_map(tmp_path, capsys, det_run, rows):
    """The file's boxes, placed on the new split's images and matched by the run's rule, get the run's
    calibrated conf: on the run's own images, exactly the run's ``calibrated`` and ``correct`` columns."""
    csv = write_csv(rows, tmp_path / "dets.csv")  # another format of the same boxes
    code, out, err = _check(
        capsys, det_run, "--data", DATA, "--detections", csv, "--out", tmp_path / "chk"
    )
    assert code in (0, 3, 4, 5, 6), err
    assert (
        f"[nms] detections from {csv} (table): {len(rows)} of {len(rows)} detections matched on 12 "
        "of 12 images" in out
    )
    r = CheckResult.read(tmp_path / "chk" / CHECK_FILE)
    assert r.model == f"detections:{csv.resolve()}" and r.detections["matched"] == len(rows)
    assert r.labelled["nms"].operating[0].boxes > 30
    new = pl.read_parquet(tmp_path / "chk" / "boxes.parquet").sort("image", "conf", "x1")
    then = pl.read_parquet(det_run / "boxes.parquet").sort("image", "conf", "x1")
    assert new.height == then.height == len(rows)
    np.testing.assert_allclose(
        new["calibrated"].to_numpy(), then["calibrated"].to_numpy(), rtol=0, atol=1e-9
    )
    assert new["correct"].to_list() == then["correct"].to_list()


def test_an_unlabelled_check_leaves_out_the_images_past_the_limit(tmp_path, capsys, det_run, rows):
    folder = write_txt(rows, tmp_path / "labels")
    code, out, err = _check(
        capsys,
        det_run,
        "--images",
        FIXTURE / "images",
        "--detections",
        folder,
        "--limit",
        "6",
        "--out",
        tmp_path / "u",
    )
    assert code in (0, 4, 6), err
    r = CheckResult.read(tmp_path / "u" / CHECK_FILE)
    first = sorted({r["stem"] for r in rows})[:6]
    n = sum(x["stem"] in first for x in rows)
    assert (r.detections["matched"], r.detections["outside"], r.detections["images"]) == (
        n,
        len(rows) - n,
        6,
    )
    assert r.unlabelled["nms"].line in out
    assert (
        f"{n} of {len(rows)} detections matched on 6 of 6 images ({len(rows) - n} of images "
        "outside the checked "
        "images left out)" in out
    )


def test_a_model_run_is_checked_on_a_file_of_its_head(tmp_path, capsys, rows, demo_model_path):
    """A ``.pt`` run with both heads checked on a file: the file holds one head, named with ``--head``."""
    from det_calib.pipeline.calibrate_job import calibrate

    run = tmp_path / "pt"
    calibrate(
        demo_model_path,
        DATA,
        out=run,
        run_val=False,
        n_boot=20,
        progress=False,
        report=False,
        method="platt",
    )
    folder = write_txt(rows, tmp_path / "labels")
    code, _, err = _check(
        capsys, run, "--data", DATA, "--detections", folder, "--out", tmp_path / "c1"
    )
    _one_line(
        code,
        err,
        "Expected one `--head` with `--detections` (a file holds one head's boxes), but the run "
        "has "
        "nms, e2e",
        tmp_path / "c1",
    )
    code, _, err = _check(
        capsys,
        run,
        "--data",
        DATA,
        "--detections",
        folder,
        "--head",
        "e2e",
        "--out",
        tmp_path / "c2",
    )
    assert code in (0, 3, 4, 5, 6), err
    r = CheckResult.read(tmp_path / "c2" / CHECK_FILE)
    assert r.heads == ["e2e"] and r.labelled["e2e"].method == "platt"


def _one_line(code: int, err: str, pattern: str, out: Path) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(pattern, lines[0]) or pattern in lines[0], lines[0]
    assert not out.exists(), "a refused check wrote its output folder"


def test_bad_input_is_refused_in_one_line(tmp_path, capsys, det_run, rows):
    folder = write_txt(rows, tmp_path / "labels")
    out = tmp_path / "chk"
    code, _, err = _check(capsys, det_run, "--data", DATA, "--out", out)
    _one_line(
        code,
        err,
        f"the run in {det_run} was calibrated from a file of detections "
        f"({det_run.parent / 'labels'}), not a model: check it on a file of the new images' "
        "detections with "
        "`--detections`",
        out,
    )
    code, _, err = _check(
        capsys, det_run, "--data", DATA, "--detections", folder, "--model", "x.pt", "--out", out
    )
    _one_line(code, err, "`--model` and `--detections` exclude each other", out)
    code, _, err = _check(
        capsys, det_run, "--data", DATA, "--detections", folder, "--boxes", det_run, "--out", out
    )
    _one_line(code, err, "`--boxes` and `--detections` exclude each other", out)
    stray = write_txt(
        [{**r, "stem": "elsewhere"} if i < 3 else r for i, r in enumerate(rows)], tmp_path / "stray"
    )
    code, _, err = _check(capsys, det_run, "--data", DATA, "--detections", stray, "--out", out)
    _one_line(code, err, r"1 image\(s\) in .* are not in the ground truth .*: elsewhere", out)
    high = write_txt([r for r in rows if r["score"] > 0.9], tmp_path / "high")
    code, _, err = _check(capsys, det_run, "--data", DATA, "--detections", high, "--out", out)
    _one_line(
        code,
        err,
        r"the lowest score in .* is 0\.9\d*, but the check's kept set \(calibrated conf above "
        r"0\.25\) "
        r"keeps circle boxes from a raw score of 0\.84\d*: boxes it needs were never written",
        out,
    )
    code, _, err = _check(
        capsys, det_run, "--data", DATA, "--detections", tmp_path / "missing.json", "--out", out
    )
    _one_line(code, err, "Expected `--detections` to be a COCO results JSON", out)
    assert json.loads((det_run / "calibration.json").read_text())["heads"] == ["nms"]

"""``calibrate --detections``: COCO results JSON, Ultralytics label folders and plain tables as a box
table (det_calib.job.detections_file); bad input refused in one line with exit code 2, nothing written.

The detections are synthetic (the fixture split's ground truth jittered, with false positives, scores
rounded to 5 decimals as Ultralytics' JSON rounds them), so no forward pass runs here; the demo
detector's own files are tested in tests/system/test_detections_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from detection_files import (
    FIXTURE,
    NAMES,
    calibrate_argv,
    pixels,
    synthetic_rows,
    write_coco,
    write_csv,
    write_txt,
)

from det_calib.cli import main


def calibrate_cli(capsys, data: Path, detections: Path, out: Path, *extra) -> tuple[int, str, str]:
    code = main(calibrate_argv(data, detections, out, *extra))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return synthetic_rows()


@pytest.fixture(scope="module")
def txt_run(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("txt")
    folder = write_txt(rows, tmp / "labels")
    code = main(calibrate_argv(FIXTURE / "data.yaml", folder, tmp / "out", "--method", "platt"))
    assert code == 0
    return tmp / "out"


def both_boxes(run_a, run_b) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two runs' ``boxes.parquet`` in the same order (image, score, corner), to compare row by row."""
    return tuple(
        pl.read_parquet(run / "boxes.parquet").sort("image", "conf", "x1") for run in (run_a, run_b)
    )


def test_label_folder_calibrates_and_says_what_it_matched(txt_run, rows):
    summary = (txt_run / "summary.txt").read_text()
    assert f"{len(rows)} of {len(rows)} detections matched on 12 of 12 images" in summary
    assert "Ultralytics val not run: it cannot run a foreign engine" in summary
    # the file is named as the run's source, its lines come before the timing line, and nothing
    # speaks of a checkpoint or of a capture the run did not make
    lines = summary.splitlines()
    assert lines[0].startswith("detections ") and "calibrated.pt" not in summary
    assert "det_calib captured" not in summary and "; the file's boxes, scored by" in summary
    timing = next(i for i, ln in enumerate(lines) if ln.startswith("time: "))
    assert timing > max(i for i, ln in enumerate(lines) if "detections matched on" in ln)
    doc = json.loads((txt_run / "calibration.json").read_text())
    assert doc["heads"] == ["nms"]
    boxes = pl.read_parquet(txt_run / "boxes.parquet")
    assert boxes.height == len(rows)
    z = boxes["logit"].to_numpy()
    p = boxes["conf"].to_numpy()
    np.testing.assert_allclose(
        1 / (1 + np.exp(-z)), p, rtol=0, atol=1e-12
    )  # the logit of the score
    assert boxes["correct"].sum() > 20 and (~boxes["correct"]).sum() > 100


def test_a_table_gives_the_same_run_as_the_label_folder(tmp_path, capsys, txt_run, rows):
    csv = write_csv(rows, tmp_path / "dets.csv", names=True)  # class names, not ids
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", csv, tmp_path / "out", "--method", "platt"
    )
    assert code == 0, err
    a, b = both_boxes(txt_run, tmp_path / "out")
    np.testing.assert_allclose(a["calibrated"].to_numpy(), b["calibrated"].to_numpy(), atol=1e-9)
    np.testing.assert_allclose(
        a.select("x1", "y1", "x2", "y2").to_numpy(),
        b.select("x1", "y1", "x2", "y2").to_numpy(),
        atol=1e-3,
    )  # the txt holds 6 significant digits
    assert a["correct"].to_list() == b["correct"].to_list()


def test_coco_results_with_sparse_category_ids_and_a_coco_ground_truth(
    tmp_path, capsys, txt_run, rows
):
    gt, res = write_coco(rows, tmp_path / "coco")
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", res, tmp_path / "out", "--coco-gt", gt, "--method", "platt"
    )
    assert code == 0, err
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert f"{len(rows)} of {len(rows)} detections matched on 12 of 12 images" in summary
    a, b = both_boxes(txt_run, tmp_path / "out")
    assert a["cls"].to_list() == b["cls"].to_list()  # category 18 is class 2 (square), by name
    assert a["correct"].to_list() == b["correct"].to_list()


def test_ultralytics_save_json_convention_stem_and_class_plus_one(tmp_path, capsys, txt_run, rows):
    """Ultralytics' ``val(save_json=True)`` on a YOLO dataset: image_id the stem, category_id = class + 1."""
    dets = []
    for r in rows:
        x1, y1, x2, y2 = pixels(r)
        dets.append(
            {
                "image_id": r["stem"],
                "category_id": r["cls"] + 1,
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "score": r["score"],
            }
        )
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps(dets))
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", path, tmp_path / "out", "--method", "platt"
    )
    assert code == 0, err
    a, b = both_boxes(txt_run, tmp_path / "out")
    np.testing.assert_allclose(a["calibrated"].to_numpy(), b["calibrated"].to_numpy(), atol=1e-9)


def test_a_file_written_at_a_high_conf_is_fitted_above_its_lowest_score(tmp_path, capsys, rows):
    high = [r for r in rows if r["score"] > 0.2]
    folder = write_txt(high, tmp_path / "labels")
    code, out, err = calibrate_cli(
        capsys,
        FIXTURE / "data.yaml",
        folder,
        tmp_path / "out",
        "--method",
        "platt",
        "--conf",
        "0.1",
        "--conf",
        "0.5",
    )
    assert code == 0, err
    low = min(r["score"] for r in high)
    assert f"the file's lowest score is {low:.4g}: fitted only above it" in out
    assert "cannot be evaluated (its boxes below were never written): 0.1;" in out
    doc = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert doc["fit_min_conf"] == pytest.approx(low, abs=1e-6)


# ------------------------------------------------------------------------------------------ bad input
def _one_error(code: int, err: str, out: Path) -> str:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert not out.exists(), "a refused run wrote its output folder"
    return lines[0]


def _bad_txt(tmp: Path, rows: list[dict], edit) -> Path:
    folder = write_txt(rows, tmp / "labels")
    first = sorted(folder.glob("*.txt"))[0]
    first.write_text(edit(first.read_text()))
    return folder


BAD = {
    "unknown image": (
        lambda tmp, rows: write_txt(
            [{**r, "stem": f"elsewhere_{i % 5}"} if i < 50 else r for i, r in enumerate(rows)],
            tmp / "labels",
        ),
        r"5 image\(s\) in .* are not in the ground truth .*: "
        r"elsewhere_0, elsewhere_1, elsewhere_2\.\.\.",
    ),
    "class not in the names": (
        lambda tmp, rows: _bad_txt(tmp, rows, lambda t: "9" + t[1:]),
        r"class id 9 in the label files under .* is not a class \(0\.\.7\)",
    ),
    "wrong value count": (
        lambda tmp, rows: _bad_txt(tmp, rows, lambda t: t + "3 0.5 0.5 0.1 0.1\n"),
        r"fixture_00000\.txt:\d+: Expected 6 values \(cls cx cy w h conf\), but got 5 \(no conf",
    ),
    "score above 1": (
        lambda tmp, rows: _bad_txt(tmp, rows, lambda t: t + "3 0.5 0.5 0.1 0.1 1.5\n"),
        r"Expected every score in .* in \[0, 1\], but got 1\.5 \(1 detection",
    ),
    "negative width": (
        lambda tmp, rows: _bad_txt(tmp, rows, lambda t: t + "3 0.5 0.5 -0.1 0.1 0.5\n"),
        r"Expected non-negative box widths and heights in .*, but got width -\d",
    ),
    "no label files": (
        lambda tmp, rows: (tmp / "empty").mkdir() or tmp / "empty",
        r"no label \.txt files under",
    ),
    "nan score": (
        lambda tmp, rows: _table(tmp, rows, score=float("nan")),
        r"Expected every score in .* in \[0, 1\], but got nan",
    ),
    "class name not in the names": (
        lambda tmp, rows: _table(tmp, rows, klass="bicycle"),
        r"class `bicycle` in .* is not a class name of the data",
    ),
    "empty json": (
        lambda tmp, rows: _write(tmp / "d.json", ""),
        r"the detections file .*d\.json is empty",
    ),
    "truncated json": (
        lambda tmp, rows: _write(
            tmp / "d.json",
            json.dumps(
                [
                    {
                        "image_id": "fixture_00000",
                        "category_id": 1,
                        "bbox": [1, 2, 3, 4],
                        "score": 0.5,
                    }
                ]
                * 3
            )[:-20],
        ),
        r"cannot read the detections file .* \(truncated or not JSON\)",
    ),
    "json category not a class": (
        lambda tmp, rows: _write(
            tmp / "d.json",
            json.dumps(
                [
                    {
                        "image_id": "fixture_00000",
                        "category_id": 12,
                        "bbox": [1, 2, 3, 4],
                        "score": 0.5,
                    }
                ]
            ),
        ),
        r"category_id 12 in .* is not a class \(class id \+ 1, 1\.\.8\)",
    ),
    "truncated csv": (
        lambda tmp, rows: _write(
            tmp / "d.csv", "image,class,x1,y1,x2,y2,score\nfixture_00000.jpg,1,2"
        ),
        r"row 2 of .*d\.csv lacks a value of image, class, x1, y1, x2, y2, score \(truncated",
    ),
    "unknown suffix": (
        lambda tmp, rows: _write(tmp / "d.xml", "<x/>"),
        r"Expected `--detections` to end in \.json",
    ),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _table(
    tmp: Path, rows: list[dict], *, score: float | None = None, klass: str | None = None
) -> Path:
    path = write_csv(rows[:40], tmp / "d.csv", names=True)
    df = pl.read_csv(path)
    if score is not None:
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == 3)
            .then(score)
            .otherwise(pl.col("score"))
            .alias("score")
        )
    if klass is not None:
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == 3)
            .then(pl.lit(klass))
            .otherwise(pl.col("class"))
            .alias("class")
        )
    df.write_csv(path)
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_bad_detections_are_refused_in_one_line(tmp_path, capsys, rows, case):
    make, pattern = BAD[case]
    source = make(tmp_path, rows)
    code, _, err = calibrate_cli(capsys, FIXTURE / "data.yaml", source, tmp_path / "out")
    line = _one_error(code, err, tmp_path / "out")
    import re

    assert re.search(pattern, line), line


def test_a_coco_image_id_not_in_the_coco_ground_truth_is_refused(tmp_path, capsys, rows):
    gt, res = write_coco(rows, tmp_path / "coco")
    dets = json.loads(res.read_text())
    dets[0]["image_id"] = 999
    res.write_text(json.dumps(dets))
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", res, tmp_path / "out", "--coco-gt", gt
    )
    line = _one_error(code, err, tmp_path / "out")
    assert "1 image(s) in" in line and ": 999" in line, line
    dets[0]["image_id"], dets[0]["category_id"] = (
        101,
        2,
    )  # bicycle: in the ground truth, not a class
    res.write_text(json.dumps(dets))
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", res, tmp_path / "out", "--coco-gt", gt
    )
    assert "category_id 2 in" in _one_error(code, err, tmp_path / "out")


def test_both_heads_from_one_file_is_refused(tmp_path, capsys, rows):
    folder = write_txt(rows, tmp_path / "labels")
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", folder, tmp_path / "out", "--head", "both"
    )
    assert "`--head` nms or e2e" in _one_error(code, err, tmp_path / "out")


def test_a_model_beside_the_file_is_refused(tmp_path, capsys, rows):
    folder = write_txt(rows, tmp_path / "labels")
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", folder, tmp_path / "out", "--model", "yolo26n.pt"
    )
    assert "`--model` and `--detections` exclude each other" in _one_error(
        code, err, tmp_path / "out"
    )


def test_the_file_needs_its_data_and_no_capture_option(tmp_path, capsys, rows):
    """Without ``--data`` the run would score the file against the demo's labels; options of
    det_calib's own capture would be recorded as applied while the engine's boxes are used as written."""
    folder = write_txt(rows, tmp_path / "labels")
    argv = calibrate_argv(FIXTURE / "data.yaml", folder, tmp_path / "out")
    i = argv.index("--data")
    code = main(argv[:i] + argv[i + 2 :])
    line = _one_error(code, capsys.readouterr().err, tmp_path / "out")
    assert "`--detections` needs `--data`" in line, line
    for extra in (
        ["--conf-floor", "0.2"],
        ["--max-det", "5"],
        ["--imgsz", "1280"],
        ["--batch", "4"],
    ):
        code, _, err = calibrate_cli(
            capsys, FIXTURE / "data.yaml", folder, tmp_path / "out", *extra
        )
        line = _one_error(code, err, tmp_path / "out")
        assert f"`{extra[0]}` sets det_calib's own capture" in line, line


def test_a_file_of_some_of_the_images_is_refused(tmp_path, capsys, caplog, rows):
    """A dump at conf 0.001 of a few images: the others would count as images without a box (recall
    and mAP would collapse); refused, naming how many it covers. Written at a high conf, it runs with a
    warning (such a file's images may keep no box)."""
    stems = sorted({r["stem"] for r in rows})
    few = [r for r in rows if r["stem"] in stems[: len(stems) // 5]]
    folder = write_txt(few, tmp_path / "labels")
    code, _, err = calibrate_cli(capsys, FIXTURE / "data.yaml", folder, tmp_path / "out")
    line = _one_error(code, err, tmp_path / "out")
    assert "has detections on" in line and "the others would count as images without a box" in line
    some = [{**r, "score": max(r["score"], 0.02)} for r in rows if r["stem"] in stems[:4]]
    high = write_txt(some, tmp_path / "high")  # written at conf 0.02
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", high, tmp_path / "out2", "--method", "temperature"
    )
    assert code == 0, err
    assert any("(it was written at conf 0.02)" in r.getMessage() for r in caplog.records)


def test_the_same_image_name_in_two_splits(tmp_path, capsys, rows):
    """Two splits' folders holding the same file names: a file naming images by file name alone is
    refused (it cannot say which split's image it scored; the first split took them all before),
    and a file naming them by split folder and file calibrates."""
    import shutil

    import yaml

    root = tmp_path / "d"
    for split in ("calib", "test"):
        shutil.copytree(FIXTURE / "images" / "fixture", root / "images" / split)
        shutil.copytree(FIXTURE / "labels" / "fixture", root / "labels" / split)
    spec = {"path": str(root), "calib": "images/calib", "test": "images/test"}
    (root / "data.yaml").write_text(yaml.safe_dump({**spec, "names": dict(enumerate(NAMES))}))
    plain = write_csv(rows, tmp_path / "plain.csv")
    code, _, err = calibrate_cli(capsys, root / "data.yaml", plain, tmp_path / "out")
    line = _one_error(code, err, tmp_path / "out")
    assert "name more than one of the run's images" in line and "test/0001.jpg" in line, line
    named = pl.concat(
        pl.read_csv(plain).with_columns((pl.lit(f"{s}/") + pl.col("image")).alias("image"))
        for s in ("calib", "test")
    )
    named.write_csv(tmp_path / "named.csv")
    code, _, err = calibrate_cli(
        capsys, root / "data.yaml", tmp_path / "named.csv", tmp_path / "o2"
    )
    assert code == 0, err
    summary = (tmp_path / "o2" / "summary.txt").read_text()
    assert f"{named.height} of {named.height} detections matched on 24 of 24 images" in summary


# ------------------------------------------------------------------------------ --boxes of a detections run
def _eval_figures(run: Path) -> tuple:
    from det_calib.record.run_result import RunResult

    h = RunResult.read(run / "calibration.json").results["nms"]
    return (
        h.calibrator.method,
        [(o.conf, o.boxes, o.correct, o.ece, o.laece0) for o in h.eval.operating_after],
        h.eval.map50_95_before,
        h.eval.map50_95_after,
        h.eval.images,
        h.eval.n_gt,
    )


def test_boxes_of_a_detections_run_give_the_same_run(tmp_path, capsys, txt_run, rows):
    """``--detections FILE --boxes RUN`` reads no file: RUN's boxes, matched again, give RUN's figures; with
    another method, the figures of a run of that method on the file."""
    folder = txt_run.parent / "labels"
    code, out, err = calibrate_cli(
        capsys,
        FIXTURE / "data.yaml",
        folder,
        tmp_path / "again",
        "--method",
        "platt",
        "--boxes",
        txt_run,
    )
    assert code == 0, err
    assert (
        f"{len(rows)} of {len(rows)} detections matched on 12 of 12 images" in out
    )  # what the file held
    assert _eval_figures(tmp_path / "again") == _eval_figures(txt_run)
    a, b = both_boxes(txt_run, tmp_path / "again")
    assert (
        a["calibrated"].to_list() == b["calibrated"].to_list()
        and a["correct"].to_list() == b["correct"].to_list()
    )
    code, _, err = calibrate_cli(
        capsys,
        FIXTURE / "data.yaml",
        folder,
        tmp_path / "iso_boxes",
        "--method",
        "isotonic",
        "--boxes",
        tmp_path / "again",
    )
    assert code == 0, err
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", folder, tmp_path / "iso", "--method", "isotonic"
    )
    assert code == 0, err
    assert _eval_figures(tmp_path / "iso_boxes") == _eval_figures(tmp_path / "iso")
    assert _eval_figures(tmp_path / "iso")[0] == "isotonic"
    assert json.loads((tmp_path / "iso_boxes" / "portable_map.json").read_text()) == json.loads(
        (tmp_path / "iso" / "portable_map.json").read_text()
    )


def test_boxes_of_a_detections_run_are_checked_against_the_file(
    tmp_path, capsys, txt_run, rows, demo_model_path
):
    other = write_txt(rows, tmp_path / "other")
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", other, tmp_path / "out", "--boxes", txt_run
    )
    line = _one_error(code, err, tmp_path / "out")
    assert (
        f"were read from another file of detections ({txt_run.parent / 'labels'}, not "
        f"{other.resolve()})" in line
    )
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", other, tmp_path / "out", "--boxes", "runs/calib"
    )
    assert "Expected `--boxes` to be a run of a file of detections" in _one_error(
        code, err, tmp_path / "out"
    )
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(FIXTURE / "data.yaml"),
            "--boxes",
            str(txt_run),
            "--out",
            str(tmp_path / "out"),
            "-q",
            "--no-report",
            "--no-val",
        ]
    )
    line = _one_error(code, capsys.readouterr().err, tmp_path / "out")
    assert (
        f"were read from a file of detections ({txt_run.parent / 'labels'}): give that file with "
        "`--detections`" in line
    )
    # the run folder alone (no model, no data): its record names the file, which must be given again
    code = main(["calibrate", "--boxes", str(txt_run), "--out", str(tmp_path / "out"), "-q"])
    line = _one_error(code, capsys.readouterr().err, tmp_path / "out")
    assert (
        f"was calibrated from a file of detections ({txt_run.parent / 'labels'}): name it again "
        "with `--detections`, and `--data`" in line
    ), line


def test_a_table_of_per_class_scores_gives_the_same_run(tmp_path, capsys, txt_run, rows):
    """Per-class score columns in place of class and score: the class is the highest-scored one."""
    rng = np.random.default_rng(5)
    recs = []
    for r in rows:
        x1, y1, x2, y2 = pixels(r)
        others = rng.uniform(0, r["score"], len(NAMES))  # every other class scored lower
        others[r["cls"]] = r["score"]
        recs.append(
            {
                "image": r["file"],
                "x1": x1,
                "y1": y1,
                "x2": x2,
                "y2": y2,
                **{f"score_{n}": float(v) for n, v in zip(NAMES, others, strict=True)},
            }
        )
    path = tmp_path / "dets.parquet"
    pl.DataFrame(recs).write_parquet(path)
    code, _, err = calibrate_cli(
        capsys, FIXTURE / "data.yaml", path, tmp_path / "out", "--method", "platt"
    )
    assert code == 0, err
    a, b = both_boxes(txt_run, tmp_path / "out")
    assert a["cls"].to_list() == b["cls"].to_list()
    np.testing.assert_allclose(a["calibrated"].to_numpy(), b["calibrated"].to_numpy(), atol=1e-9)
    pl.DataFrame(recs).drop("score_star").write_parquet(path)
    code, _, err = calibrate_cli(capsys, FIXTURE / "data.yaml", path, tmp_path / "out2")
    assert "lacks score_star" in _one_error(code, err, tmp_path / "out2")


def test_report_compare_and_thresholds_read_a_detections_run(tmp_path, capsys, rows):
    folder = write_txt(rows, tmp_path / "labels")
    runs = []
    for method in ("platt", "isotonic"):
        out = tmp_path / method
        assert (
            main(
                calibrate_argv(FIXTURE / "data.yaml", folder, out, "--method", method, report=True)
            )
            == 0
        )
        assert (out / "report.html").is_file() and "Ultralytics val" in (
            out / "report.md"
        ).read_text()
        runs.append(out)
    assert main(["compare", *map(str, runs), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "compare.md").is_file()
    assert main(["thresholds", str(runs[0]), "--target-precision", "0.6", "--n-boot", "50"]) == 0
    doc = json.loads((runs[0] / "thresholds.json").read_text())
    assert "nms" in json.dumps(doc)
    capsys.readouterr()


def test_limit_leaves_out_the_other_images_of_a_coco_file_and_head_e2e_names_the_head(
    tmp_path, capsys, rows
):
    gt, res = write_coco(rows, tmp_path / "coco")
    code, out, err = calibrate_cli(
        capsys,
        FIXTURE / "data.yaml",
        res,
        tmp_path / "out",
        "--coco-gt",
        gt,
        "--limit",
        "8",
        "--method",
        "platt",
        "--head",
        "e2e",
    )
    assert code == 0, err
    n = sum(r["stem"] < "fixture_00008" for r in rows)
    assert (
        f"[e2e] detections from {res} (coco-json): {n} of {len(rows)} detections matched on 8 of 8 "
        "images "
        f"({len(rows) - n} of images outside the run's splits left out)" in out
    )
    assert json.loads((tmp_path / "out" / "portable_map.json").read_text())["heads"].keys() == {
        "e2e"
    }
    assert set(pl.read_parquet(tmp_path / "out" / "boxes.parquet")["head"]) == {"e2e"}

"""Pose and OBB models through everything around the run, on the demo pose and OBB models with small
limits: the Python API's run, its report's Matching picture, ``compare``, ``check`` (labelled, and
``--images``), ``thresholds``, ``--boxes``, ``apply_calibrator`` / ``filter_results`` / ``attach`` on
plain Ultralytics results; ``ensemble`` refuses pose and OBB members in one line."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

import det_calib
from det_calib.cli import main
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import _demo_root, demo_data_yaml, demo_model, demo_task_model
from det_calib.errors import InputError
from det_calib.matching.one_to_one import match_boxes
from det_calib.numeric import logit, sigmoid
from det_calib.record.run_folder import load_run
from det_calib.report.task_examples import _run_task_panels
from det_calib.tasks import load_task_split
from det_calib.tasks.obb.labels import split_xywhr
from det_calib.tasks.obb.matching import match_rotated
from det_calib.tasks.pose.labels import split_keypoints
from det_calib.tasks.pose.matching import match_keypoints

LIMIT = 16
QUICK = ["--no-val", "--n-boot", "20", "-q"]
TASKS = ("pose", "obb")
PAYLOAD = {"pose": "kpts", "obb": "xywhr"}
RULE = {"pose": "oks", "obb": "rotated"}
MAX_FIGURE_BYTES = 300_000


def _model(task: str) -> Path:
    return demo_task_model(task)


def _yaml(task: str) -> Path:
    return demo_data_yaml(task=task)


def _error(capsys, *argv) -> str:
    """The one error line of a command that must fail with exit 2."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _ok(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def runs(demo_task_runs) -> dict[str, Path]:
    """One run per task through the Python API (both heads, the temperature, the task's demo data, ``limit``
    :data:`LIMIT`): the session's runs of tests/conftest.py (``demo_task_runs``)."""
    out = {}
    for task in TASKS:
        run = demo_task_runs[task]
        assert (
            run.result.matching.by == RULE[task]
            and run.out_dir.name == task
            and run.out_dir.is_dir()
        )
        assert run.boxes[PAYLOAD[task]].null_count() == 0 and run.boxes["correct"].any()
        assert Path(run.result.data) == _yaml(task).resolve()
        out[task] = run.out_dir
    return out


def _split(task: str, split: str, limit: int):
    return load_task_split(load_data_yaml(_yaml(task)), split, task=task, limit=limit)


def _by_rule(task: str, boxes: pl.DataFrame, sp) -> np.ndarray:
    """The boxes' labels by the task's own matching, computed here from the arrays."""
    g = sp.gt
    if task == "pose":
        k = np.stack([np.asarray(v, dtype=np.float64) for v in boxes["kpts"].to_list()])
        r = match_keypoints(
            boxes["image_id"],
            boxes["cls"],
            boxes["conf"],
            k,
            g["image_id"],
            g["cls"],
            split_keypoints(sp),
            g["area"],
            g.select("x1", "y1", "x2", "y2").to_numpy(),
            g["crowd"],
        )
    else:
        r = match_rotated(
            boxes["image_id"],
            boxes["cls"],
            boxes["conf"],
            np.asarray(boxes["xywhr"].to_list()),
            g["image_id"],
            g["cls"],
            split_xywhr(sp),
        )
    return r.correct


# ------------------------------------------------------------------------------------------ report
@pytest.mark.parametrize("task", TASKS)
def test_report_pictures_the_matching(runs, task):
    md = (runs[task] / "report.md").read_text()
    assert "## Matching" in md and md.index("## Matching") < md.index("## Reliability")
    words = "correct by OKS >= 0.5" if task == "pose" else "correct by rotated IoU (ProbIoU) >= 0.5"
    assert words in md
    measure = (
        "OKS" if task == "pose" else "rotated IoU (ProbIoU)"
    )  # the tables' headings name it too
    assert f"ECE (15 bins, {measure} 0.5)" in md and "ECE (15 bins, IoU 0.5)" not in md
    png = (runs[task] / "figures" / "matching_nms.png").read_bytes()
    assert len(png) <= MAX_FIGURE_BYTES and Image.open(io.BytesIO(png)).mode == "P"
    run = load_run(runs[task])
    panels = _run_task_panels(run, "nms", 0.25)
    assert 0 < len(panels) <= 4
    ev = run.boxes.filter((pl.col("split") == run.eval_split("nms")) & (pl.col("head") == "nms"))
    for p in panels:  # each panel says what boxes.parquet says of the boxes it shows
        rows = ev.filter(
            (pl.col("image") == p.title.split(":")[0]) & (pl.col("calibrated") > 0.25)
        ).sort("calibrated")
        assert p.state == ["matched" if c else "unmatched" for c in rows["correct"]]


@pytest.mark.parametrize("task", TASKS)
def test_report_draws_no_picture_where_the_labels_changed(runs, tmp_path, task):
    copy = shutil.copytree(runs[task], tmp_path / "run")
    b = pl.read_parquet(copy / "boxes.parquet")
    shown = _run_task_panels(load_run(copy), "nms", 0.25)[0].title.split(":")[0]
    first = b.with_row_index().filter(
        (pl.col("image") == shown) & (pl.col("split") == "test") & (pl.col("head") == "nms")
    )["index"][0]
    b.with_columns(
        pl.when(pl.int_range(b.height) == first)
        .then(~pl.col("correct"))
        .otherwise(pl.col("correct"))
        .alias("correct")
    ).write_parquet(copy / "boxes.parquet")
    with pytest.raises(InputError, match="the labels of split `test` changed since the run"):
        _run_task_panels(load_run(copy), "nms", 0.25)
    assert main(["report", str(copy)]) == 0
    md = (copy / "report.md").read_text()
    what = "keypoints" if task == "pose" else "rotated boxes"
    assert (
        f"(The picture of matched {what} is not drawn: the labels of split `test` changed since "
        "the run" in md
    )
    assert "figures/matching_nms.png" not in md


# ------------------------------------------------------------------------------------------ compare, thresholds
def test_compare_and_thresholds(capsys, runs, tmp_path):
    _ok(capsys, "compare", runs["pose"], runs["obb"], "--out", tmp_path / "cmp")
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "by=oks" in md and "by=rotated" in md
    for task in TASKS:
        copy = shutil.copytree(runs[task], tmp_path / task)
        _ok(capsys, "thresholds", copy, "--target-precision", "0.5")
        th = json.loads((copy / "thresholds.json").read_text())
        assert th and (copy / "thresholds.json").stat().st_size > 100


# ------------------------------------------------------------------------------------------ check
@pytest.mark.parametrize("task", TASKS)
def test_check_labels_new_images_by_the_runs_rule(capsys, runs, tmp_path, task):
    out = tmp_path / "chk"
    code = main(
        [
            "check",
            str(runs[task]),
            "--data",
            str(_yaml(task)),
            "--split",
            "calib",
            "--limit",
            "8",
            "--n-boot",
            "20",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code in (0, 3, 4, 5, 6), capsys.readouterr().err  # a verdict, not an error
    chk = json.loads((out / "check.json").read_text())
    assert chk["kind"] == "labelled" and chk["matching"]["by"] == RULE[task]
    boxes = pl.read_parquet(out / "boxes.parquet")
    assert boxes.height > 0 and boxes[PAYLOAD[task]].null_count() == 0
    assert sorted(boxes["head"].unique()) == ["e2e", "nms"]
    for head in ("nms", "e2e"):
        b = boxes.filter(pl.col("head") == head)
        assert b["correct"].to_list() == _by_rule(task, b, _split(task, "calib", 8)).tolist()
    code = main(
        [
            "check",
            str(runs[task]),
            "--images",
            str(_yaml(task).parent / "images" / "calib"),
            "--limit",
            "8",
            "--n-boot",
            "20",
            "--out",
            str(tmp_path / "chk_images"),
            "-q",
        ]
    )
    assert code in (0, 4, 6), capsys.readouterr().err
    assert json.loads((tmp_path / "chk_images" / "check.json").read_text())["kind"] == "unlabelled"


@pytest.mark.parametrize(
    "task,words",
    [
        ("pose", "the run matched boxes by OKS, but split `calib`"),
        ("obb", "the run matched boxes by rotated IoU (ProbIoU), but split `calib`"),
    ],
)
def test_check_refuses_box_labels_in_one_line(capsys, runs, tmp_path, task, words):
    line = _error(
        capsys,
        "check",
        runs[task],
        "--data",
        demo_data_yaml(),
        "--split",
        "calib",
        "--limit",
        "4",
        "--out",
        tmp_path / "chk",
    )
    assert words in line and "check it on" in line


# ------------------------------------------------------------------------------------------ --boxes
@pytest.mark.parametrize("task", TASKS)
def test_boxes_reuse_keeps_the_payload_and_matches_again(capsys, runs, tmp_path, task):
    cols = [PAYLOAD[task], "correct", "iou", "ignore"]
    _ok(
        capsys,
        "calibrate",
        "--model",
        _model(task),
        "--boxes",
        runs[task],
        "--limit",
        str(LIMIT),
        "--head",
        "nms",
        "--no-report",
        *QUICK,
        "--out",
        tmp_path / "same",
    )
    a, b = (
        pl.read_parquet(d / "boxes.parquet").filter(pl.col("head") == "nms")
        for d in (runs[task], tmp_path / "same")
    )
    assert a.select(cols).equals(b.select(cols))
    _ok(
        capsys,
        "calibrate",
        "--model",
        _model(task),
        "--boxes",
        runs[task],
        "--limit",
        str(LIMIT),
        "--head",
        "nms",
        "--match",
        "box",
        "--no-report",
        *QUICK,
        "--out",
        tmp_path / "box",
    )
    c = pl.read_parquet(tmp_path / "box" / "boxes.parquet")
    assert (
        json.loads((tmp_path / "box" / "calibration.json").read_text())["matching"]["by"] == "box"
    )
    for split in ("calib", "test"):
        raw = c.filter(pl.col("split") == split).drop(
            "correct", "iou", "ignore", "loc_iou", "calibrated"
        )
        want = match_boxes(raw, _split(task, split, LIMIT).gt, iou=0.5, loc_iou=0.1)
        assert c.filter(pl.col("split") == split)["correct"].to_list() == want["correct"].to_list()


# ------------------------------------------------------------------------------------------ Python API on Results
def _images(task: str, n: int = 4) -> list[Path]:
    return _split(task, "test", n).images


def _payload(r, task: str) -> np.ndarray:
    return (r.keypoints.data if task == "pose" else r.obb.xywhr).cpu().double().numpy()


def _scored(r, task: str):
    return r.boxes if task == "pose" else r.obb


@pytest.mark.parametrize("task", TASKS)
def test_apply_calibrator_and_filter_results(runs, task):
    from ultralytics import YOLO

    t = json.loads((runs[task] / "calibration.json").read_text())["temperature"]["nms"]
    model = YOLO(str(_model(task)))
    for img in _images(task):
        raw = model.predict(img, conf=0.05, verbose=False)[0]
        res = det_calib.apply_calibrator(
            model.predict(img, conf=0.05, verbose=False)[0],
            runs[task] / "calibration.json",
            head="nms",
        )
        before, after = _scored(raw, task), _scored(res, task)
        assert len(before) == len(after) > 0
        want = sigmoid(logit(before.conf.double().numpy()) / t)
        assert np.allclose(after.conf.double().numpy(), want, atol=1e-6)
        assert np.array_equal(after.cls.numpy(), before.cls.numpy())
        assert np.array_equal(
            _payload(res, task), _payload(raw, task)
        )  # keypoints / rotated boxes untouched
        kept = det_calib.filter_results(res, dict.fromkeys(range(len(model.names)), 0.5))
        keep = after.conf.numpy() > 0.5
        assert np.array_equal(_scored(kept, task).conf.numpy(), after.conf.numpy()[keep])
        assert np.array_equal(_payload(kept, task), _payload(res, task)[keep])


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("head,nms", [("nms", None), ("e2e", False)])
def test_attach_rescores_the_models_own_boxes(runs, task, head, nms):
    from ultralytics import YOLO

    t = json.loads((runs[task] / "calibration.json").read_text())["temperature"][head]
    raw_model = YOLO(str(_model(task)))
    attached = det_calib.attach(YOLO(str(_model(task))), runs[task])
    seen = 0
    for img in _images(task):
        raw = raw_model.predict(img, conf=0.001, nms=nms, verbose=False)[0]
        got = attached.predict(img, conf=0.25, nms=nms, verbose=False)[0]
        b0, b1 = _scored(raw, task), _scored(got, task)
        key0 = np.c_[b0.xyxy.double().numpy(), b0.cls.numpy()]
        for i, row in enumerate(np.c_[b1.xyxy.double().numpy(), b1.cls.numpy()]):
            j = int(np.argmin(np.abs(key0 - row).max(1)))
            assert np.abs(key0[j] - row).max() < 1e-3  # one of the model's own boxes, same class
            assert np.allclose(_payload(got, task)[i], _payload(raw, task)[j], atol=1e-4)
            assert abs(float(b1.conf[i]) - sigmoid(logit(float(b0.conf[j])) / t)) < 1e-5
            seen += 1
        assert (b1.conf.numpy() > 0.25).all()
        assert got.calibrated_probs.shape == (len(b1), len(raw_model.names))
    assert seen > 0
    det_calib.detach(attached)


# ------------------------------------------------------------------------------------------ ensemble
@pytest.mark.parametrize(
    "name,words",
    [
        (
            "yolo26n_shapes_pose.pt",
            "is a pose model: det-calib ensemble fuses boxes and cannot fuse keypoints",
        ),
        (
            "yolo26n_shapes_obb.pt",
            "is an OBB model: det-calib ensemble fuses boxes and cannot fuse rotated boxes",
        ),
    ],
)
def test_ensemble_refuses_pose_and_obb_members(capsys, tmp_path, name, words):
    for models in ((_demo_root() / name, demo_model()), (demo_model(), _demo_root() / name)):
        line = _error(
            capsys,
            "ensemble",
            *(a for m in models for a in ("--model", m)),
            "--data",
            demo_data_yaml(),
            "--limit",
            "4",
            "--out",
            tmp_path / "ens",
        )
        assert words in line and name in line
        assert not (tmp_path / "ens").exists()

"""Pose and OBB models through the command line: the demo models with no ``--data`` (both heads), each
matched by its task's own rule (OKS, rotated IoU) and saying so in the summary, calibration.json and the
report; ``--match box`` on both; bad input (data that does not fit the model, malformed keypoint and OBB
labels, a rule of another task) as one line and exit 2; a detector's run records no rule, as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from det_calib.cli import main
from det_calib.data import MatchingRule
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import demo_data_yaml, demo_model, demo_task_model
from det_calib.tasks import load_task_split, match_split

QUICK = ["--n-boot", "20", "-q"]
MATCH_COLUMNS = ["correct", "iou", "ignore", "loc_iou", "calibrated"]


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


def task_dataset(root: Path, source: Path, *, n: int = 4, edit=None, yaml_edit=None) -> Path:
    """``n`` images of each of calib and test from the demo data of ``source`` (a data.yaml), with its
    labels (each line through ``edit``) and its yaml (through ``yaml_edit``)."""
    src = source.parent
    for split in ("calib", "test"):
        for d in ("images", "labels"):
            (root / d / split).mkdir(parents=True, exist_ok=True)
        for img in sorted((src / "images" / split).glob("*.png"))[:n]:
            shutil.copy(img, root / "images" / split / img.name)
            lines = (src / "labels" / split / f"{img.stem}.txt").read_text().splitlines()
            (root / "labels" / split / f"{img.stem}.txt").write_text(
                "".join(f"{edit(ln) if edit else ln}\n" for ln in lines)
            )
    text = "\n".join(
        ln
        for ln in source.read_text().splitlines()
        if not ln.startswith(("path:", "train:", "val:", "calib:", "test:"))
    )
    text = f"path: {root}\ntrain: images/calib\nval: images/calib\ncalib: images/calib\ntest: images/test\n{text}\n"
    (root / "data.yaml").write_text(yaml_edit(text) if yaml_edit else text)
    return root / "data.yaml"


def _labels_are(run: Path, limit: int | None, task: str) -> None:
    """The run's labels of every head and split are its boxes matched again by its recorded rule
    (``match_split``: the task's ``match`` hook; box IoU where the run records none) against the ground
    truth read for ``task`` and that rule."""
    c = json.loads((run / "calibration.json").read_text())
    boxes = pl.read_parquet(run / "boxes.parquet")
    ds = load_data_yaml(c["data"])
    rule = MatchingRule.from_dict(c["matching"]) if c.get("matching") else None
    for split in ("calib", "test"):
        sp = load_task_split(ds, split, task=task, match=rule.by if rule else "box", limit=limit)
        for head in c["heads"]:
            got = boxes.filter((pl.col("split") == split) & (pl.col("head") == head))
            want = match_split(got.drop(MATCH_COLUMNS), sp, rule, iou=0.5, loc_iou=0.1)
            assert got.height and got["correct"].to_list() == want["correct"].to_list()
            assert np.array_equal(got["iou"].to_numpy(), want["iou"].to_numpy())
            assert got["correct"].any() and not got["correct"].all()


@pytest.fixture(scope="module")
def pose_run(demo_task_runs) -> Path:
    """The session's run of the demo pose model (conftest's ``demo_task_runs``): its demo data (the first 16
    images of each split), both heads, Ultralytics val, the report. Read, never written into."""
    return demo_task_runs["pose"].out_dir


@pytest.fixture(scope="module")
def obb_run(demo_task_runs) -> Path:
    """The session's run of the demo OBB model, as ``pose_run``."""
    return demo_task_runs["obb"].out_dir


def test_demo_pose_model_matches_by_oks(pose_run):
    c = json.loads((pose_run / "calibration.json").read_text())
    assert c["data"] == str(demo_data_yaml(task="pose").resolve()) and c["heads"] == ["nms", "e2e"]
    reason = "a pose model, 5 keypoints, sigmas 1/K = 0.2 each (Ultralytics' rule for other than 17 keypoints)"
    assert c["matching"] == {"by": "oks", "option": "auto", "reason": reason, "sigmas": [0.2] * 5}
    summary = (pose_run / "summary.txt").read_text()
    assert f"matched by OKS >= 0.5 ({reason})" in summary
    assert "[nms] boxes kept at conf 0.25" in summary and "ECE(15 bins, OKS 0.5)" in summary
    assert "[e2e] boxes kept at conf 0.25" in summary
    md = (pose_run / "report.md").read_text()
    assert (
        "## Matching" in md
        and "its keypoints match a ground truth of the same class with OKS >= 0.5" in md
    )
    _labels_are(pose_run, 16, "pose")


def test_demo_obb_model_matches_by_rotated_iou(obb_run):
    c = json.loads((obb_run / "calibration.json").read_text())
    assert c["data"] == str(demo_data_yaml(task="obb").resolve()) and c["heads"] == ["nms", "e2e"]
    assert c["matching"] == {"by": "rotated", "option": "auto", "reason": "an OBB model"}
    summary = (obb_run / "summary.txt").read_text()
    assert "matched by rotated IoU (ProbIoU) >= 0.5 (an OBB model)" in summary
    assert "ECE(15 bins, rotated IoU (ProbIoU) 0.5)" in summary
    _labels_are(obb_run, 16, "obb")


def test_the_summary_says_where_calibrated_pt_is(pose_run, obb_run):
    """A pose or OBB run writes calibrated.pt (the class-branch fold), and no line says it could not."""
    for run in (pose_run, obb_run):
        assert (run / "calibrated.pt").is_file()
        assert "no calibrated.pt" not in (run / "summary.txt").read_text()


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_match_box(capsys, tmp_path, task):
    model = demo_task_model(task)
    _ok(
        capsys,
        "calibrate",
        "--model",
        model,
        "--match",
        "box",
        "--limit",
        "12",
        "--head",
        "nms",
        "--no-report",
        "--no-val",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    c = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert c["matching"]["by"] == "box" and c["matching"]["option"] == "box"
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert "matched by box IoU >= 0.5 (a" in summary and "ECE(15 bins, IoU 0.5)" in summary
    _labels_are(tmp_path / "run", 12, task)


def test_obb_model_on_box_labels(capsys, tmp_path):
    """Box labels for an OBB model: refused by the task's rule (auto, rotated), matched box to box with --match box."""
    data = task_dataset(tmp_path / "d", demo_data_yaml(), n=8)
    line = _error(
        capsys,
        "calibrate",
        "--model",
        demo_task_model("obb"),
        "--data",
        data,
        *QUICK,
        "--out",
        tmp_path / "r",
    )
    assert "has box labels (`cls cx cy w h`) for an OBB model" in line and "use --match box" in line
    _ok(
        capsys,
        "calibrate",
        "--model",
        demo_task_model("obb"),
        "--data",
        data,
        "--match",
        "box",
        "--head",
        "nms",
        "--no-report",
        "--no-val",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    c = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert c["matching"]["by"] == "box"
    _labels_are(tmp_path / "run", None, "obb")


def _drop_last_keypoint(line: str) -> str:
    return " ".join(line.split()[:-3])


def _three_corners(line: str) -> str:
    return " ".join(line.split()[:7])


@pytest.mark.parametrize(
    "case,want",
    [
        (
            "pose data, detect model",
            "declares kpt_shape [5, 3] (pose labels), but the model's task is `detect`",
        ),
        ("detect data, pose model", "has no `kpt_shape`: box labels for a pose model"),
        (
            "keypoint count",
            "expected 20 values `cls cx cy w h` and 5 keypoints `x y v` (kpt_shape [5, 3]), got 17 "
            "(4 keypoints)",
        ),
        ("kpt_shape", "kpt_shape [4, 3] but the model's is [5, 3] (5 keypoints)"),
        (
            "three corners",
            "expected 9 values `cls x1 y1 x2 y2 x3 y3 x4 y4` (4 corners), got 7 (3 corners)",
        ),
        (
            "oks for a detector",
            "--match oks needs a pose model (its boxes' keypoints); this model's task is `detect`",
        ),
        (
            "rotated for a pose model",
            "--match rotated needs an OBB model (its rotated boxes); this model's task is `pose`",
        ),
        (
            "mask for an OBB model",
            "--match mask needs a segment model (its boxes' masks); this model's task is `obb`",
        ),
    ],
)
def test_bad_input(capsys, tmp_path, case, want):
    pose, obb = demo_data_yaml(task="pose"), demo_data_yaml(task="obb")
    model, data, extra = {  # each case built only when asked for
        "pose data, detect model": lambda: (demo_model(), pose, []),
        "detect data, pose model": lambda: (demo_task_model("pose"), demo_data_yaml(), []),
        "keypoint count": lambda: (
            demo_task_model("pose"),
            task_dataset(tmp_path / "d", pose, edit=_drop_last_keypoint),
            [],
        ),
        "kpt_shape": lambda: (
            demo_task_model("pose"),
            task_dataset(
                tmp_path / "d",
                pose,
                yaml_edit=lambda t: t.replace("kpt_shape: [5, 3]", "kpt_shape: [4, 3]").replace(
                    "flip_idx: [0, 1, 4, 3, 2]", ""
                ),
            ),
            [],
        ),
        "three corners": lambda: (
            demo_task_model("obb"),
            task_dataset(tmp_path / "d", obb, edit=_three_corners),
            [],
        ),
        "oks for a detector": lambda: (demo_model(), demo_data_yaml(), ["--match", "oks"]),
        "rotated for a pose model": lambda: (demo_task_model("pose"), pose, ["--match", "rotated"]),
        "mask for an OBB model": lambda: (demo_task_model("obb"), obb, ["--match", "mask"]),
    }[case]()
    line = _error(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        data,
        "--limit",
        "4",
        *extra,
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    assert want in line


def test_a_detector_run_records_no_rule(capsys, tmp_path):
    """A detector's run is as before: no `matching` record, no rule line, labels by box IoU."""
    _ok(
        capsys,
        "calibrate",
        "--limit",
        "8",
        "--head",
        "nms",
        "--no-report",
        "--no-val",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    c = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert "matching" not in c or c["matching"] is None
    assert "matched by" not in (tmp_path / "run" / "summary.txt").read_text()
    _labels_are(tmp_path / "run", 8, "detect")


def test_boxes_and_check_on_a_pose_run(capsys, pose_run, tmp_path):
    """--boxes reuses a pose run's boxes (keypoints kept, labels by OKS again); check labels new images by the
    run's recorded rule."""
    _ok(
        capsys,
        "calibrate",
        "--model",
        demo_task_model("pose"),
        "--boxes",
        pose_run,
        "--limit",
        "16",
        "--no-report",
        "--no-val",
        *QUICK,
        "--out",
        tmp_path / "reused",
    )
    a = pl.read_parquet(pose_run / "boxes.parquet")
    b = pl.read_parquet(tmp_path / "reused" / "boxes.parquet")
    assert a.select("kpts", "correct", "iou").equals(b.select("kpts", "correct", "iou"))
    assert (
        json.loads((tmp_path / "reused" / "calibration.json").read_text())["matching"]["by"]
        == "oks"
    )
    data = task_dataset(tmp_path / "new", demo_data_yaml(task="pose"), n=8)
    code = main(
        [
            "check",
            str(pose_run),
            "--data",
            str(data),
            "--split",
            "test",
            "--n-boot",
            "20",
            "--out",
            str(tmp_path / "chk"),
            "-q",
        ]
    )
    assert code in (0, 3, 4, 5, 6), capsys.readouterr().err  # a verdict, not an error
    chk = json.loads((tmp_path / "chk" / "check.json").read_text())
    assert chk["matching"]["by"] == "oks" and chk["kind"] == "labelled"
    line = _error(
        capsys,
        "check",
        pose_run,
        "--data",
        demo_data_yaml(),
        "--split",
        "test",
        "--limit",
        "4",
        "--out",
        tmp_path / "chk2",
    )
    assert "the run matched boxes by OKS, but split `test`" in line and "has no keypoints" in line


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_ensemble_refuses_pose_and_obb_members(capsys, tmp_path, task):
    model = demo_task_model(task)
    line = _error(
        capsys,
        "ensemble",
        "--model",
        model,
        "--model",
        demo_model(),
        "--data",
        demo_data_yaml(),
        "--limit",
        "4",
        "--out",
        tmp_path / "ens",
    )
    what = (
        "a pose model: det-calib ensemble fuses boxes and cannot fuse keypoints"
        if task == "pose"
        else "an OBB model: det-calib ensemble fuses boxes and cannot fuse rotated boxes"
    )
    assert f"is {what}" in line


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_capture_to_parts_and_calibrate_from_them(task, tmp_path, capsys):
    """`det-calib capture` reads a pose or OBB split's labels as its task's (it read them as box
    labels and failed on keypoint lines), and `calibrate --boxes` on those parts takes the same split
    (its fingerprint read the same way) and matches by the task's rule, as a run that captures itself."""
    model, data = (
        (demo_task_model("pose"), demo_data_yaml(task="pose"))
        if task == "pose"
        else (demo_task_model("obb"), demo_data_yaml(task="obb"))
    )
    for split in ("calib", "test"):
        _ok(
            capsys,
            "capture",
            "--model",
            model,
            "--data",
            data,
            "--split",
            split,
            "--limit",
            6,
            "--out",
            tmp_path / "parts" / split,
            "-q",
        )
    _ok(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        data,
        "--boxes",
        tmp_path / "parts",
        "--limit",
        6,
        "--out",
        tmp_path / "from_parts",
        "--no-report",
        *QUICK,
    )
    _ok(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        data,
        "--limit",
        6,
        "--out",
        tmp_path / "direct",
        "--no-report",
        "--no-val",
        *QUICK,
    )  # no val, as the run from the parts (a run on reused boxes has none)
    rule = "OKS" if task == "pose" else "rotated IoU"
    runs = [
        json.loads((tmp_path / r / "calibration.json").read_text())
        for r in ("from_parts", "direct")
    ]
    assert (
        runs[0]["matching"] == runs[1]["matching"]
        and rule in (tmp_path / "from_parts" / "summary.txt").read_text()
    )
    cols = ["split", "head", "image", "conf", "correct"]
    a, b = (
        pl.read_parquet(tmp_path / r / "boxes.parquet").select(cols).sort(cols)
        for r in ("from_parts", "direct")
    )
    assert a.height > 0 and a.equals(b)

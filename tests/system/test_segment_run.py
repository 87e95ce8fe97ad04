"""A segment model through the command line: the calibrate job on polygon and box-only labels
(``--match``), the demo segment model with no ``--data``, its report, and compare, check, thresholds and
``--boxes`` on its run; bad input (pose and OBB models on polygons, malformed polygons, ``--match mask`` where it
cannot be) as one line and exit 2.

The segment model is the tests' YOLO26n-seg (``shapes_seg_path``: the demo detector's layers, mask
branches perturbed), so box IoU and mask IoU label its boxes differently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from det_calib.capture.predictor import capture
from det_calib.cli import main
from det_calib.data import MatchingRule
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import demo_data_yaml, demo_model
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.matching.one_to_one import match_boxes
from det_calib.tasks import load_task_split, match_split

LIMIT = ["--limit", "12"]
QUICK = ["--no-val", "--n-boot", "20", "-q"]


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


def make_dataset(root: Path, *, n: int = 6, box_only: bool = False) -> Path:
    """``n`` images of each of the segment demo's calib and test splits, with its polygon labels
    (``box_only``: the detection demo's box labels of the same images)."""
    seg = demo_data_yaml(task="segment").parent
    for split in ("calib", "test"):
        for d in ("images", "labels"):
            (root / d / split).mkdir(parents=True, exist_ok=True)
        for img in sorted((seg / "images" / split).glob("*.png"))[:n]:
            shutil.copy(img, root / "images" / split / img.name)
            src = (seg.parent / seg.name.split("-seg")[0]) if box_only else seg
            shutil.copy(
                src / "labels" / split / f"{img.stem}.txt",
                root / "labels" / split / f"{img.stem}.txt",
            )
    names = "\n".join(f"  {i}: {c}" for i, c in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(
        f"path: {root}\ntrain: images/calib\nval: images/calib\ncalib: images/calib\n"
        f"test: images/test\nnames:\n{names}\n"
    )
    return root / "data.yaml"


@pytest.fixture(scope="module")
def seg_home(tmp_path_factory, shapes_seg_path) -> Path:
    """A folder of demo files whose demo segment model is the tests' YOLO26n-seg (``DET_CALIB_DEMO_DIR``)."""
    home = tmp_path_factory.mktemp("demo")
    shutil.copy(shapes_seg_path, home / "yolo26n_shapes_seg.pt")
    return home


@pytest.fixture(scope="module")
def seg_run(seg_home, tmp_path_factory) -> Path:
    """``calibrate --model <the demo segment model>`` with no ``--data``: the segment demo data."""
    out = tmp_path_factory.mktemp("runs") / "seg"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DET_CALIB_DEMO_DIR", str(seg_home))
        code = main(
            [
                "calibrate",
                "--model",
                str(seg_home / "yolo26n_shapes_seg.pt"),
                *LIMIT,
                "--head",
                "nms",
                "--no-val",
                "--n-boot",
                "20",
                "-q",
                "--out",
                str(out),
            ]
        )
    assert code == 0
    return out


def test_demo_segment_model_matches_by_masks(seg_run):
    c = json.loads((seg_run / "calibration.json").read_text())
    assert c["data"] == str(demo_data_yaml(task="segment").resolve())
    assert c["matching"] == {
        "by": "mask",
        "option": "auto",
        "reason": "a segment model, every ground truth has a mask",
    }
    summary = (seg_run / "summary.txt").read_text()
    assert "matched by mask IoU >= 0.5 (a segment model, every ground truth has a mask)" in summary
    boxes = pl.read_parquet(seg_run / "boxes.parquet")
    assert boxes["segm"].null_count() == 0
    # the run's labels are the mask matching's, and differ from the box matching's (untrained masks)
    ds = load_data_yaml(c["data"])
    rule = MatchingRule.from_dict(c["matching"])
    for split in ("calib", "test"):
        sp = load_task_split(ds, split, task="segment", limit=12)
        raw = boxes.filter(pl.col("split") == split).drop(
            "correct", "iou", "ignore", "loc_iou", "calibrated"
        )
        by_mask = match_split(raw, sp, rule, iou=0.5, loc_iou=0.1)
        by_box = match_boxes(raw, sp.gt, iou=0.5, loc_iou=0.1)
        got = boxes.filter(pl.col("split") == split)
        assert got["correct"].to_list() == by_mask["correct"].to_list()
        assert np.allclose(got["iou"].to_numpy(), by_mask["iou"].to_numpy())
        assert got["correct"].sum() < by_box["correct"].sum()


def test_report_says_the_rule_and_shows_masks(seg_run):
    md = (seg_run / "report.md").read_text()
    assert "## Matching" in md
    assert "its mask overlaps a ground-truth mask of the same class with IoU >= 0.5" in md
    png = seg_run / "figures" / "matching_nms.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert md.index("## Matching") < md.index("## Reliability")


def test_box_only_labels_match_by_boxes(capsys, seg_home, tmp_path):
    data = make_dataset(tmp_path / "boxes", box_only=True)
    model = seg_home / "yolo26n_shapes_seg.pt"
    _ok(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        data,
        "--head",
        "nms",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    c = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert c["matching"] == {
        "by": "box",
        "option": "auto",
        "reason": "a segment model on box-only labels",
    }
    # no mask rasterised: the boxes are those of a capture with masks, labelled by box IoU
    boxes = pl.read_parquet(tmp_path / "run" / "boxes.parquet")
    assert boxes["segm"].null_count() == boxes.height > 0
    ds = load_data_yaml(data)
    for split in ("calib", "test"):
        sp = load_task_split(ds, split, task="segment")
        got = boxes.filter(pl.col("split") == split)
        full = capture(
            str(model),
            sp.images,
            head="nms",
            split=split,
            image_names=sp.image_names(),
            progress=False,
            workers=1,
        )
        assert full["segm"].null_count() == 0
        assert got.select(full.drop("segm").columns).equals(full.drop("segm"))
        by_box = match_boxes(full.drop("segm"), sp.gt, iou=0.5, loc_iou=0.1)
        assert got["correct"].to_list() == by_box["correct"].to_list()
    # the report's picture draws the kept boxes' masks, rebuilt for its few images
    png = tmp_path / "run" / "figures" / "matching_nms.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert (
        "matched by box IoU >= 0.5 (a segment model on box-only labels)"
        in (tmp_path / "run" / "summary.txt").read_text()
    )
    line = _error(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        data,
        "--match",
        "mask",
        *QUICK,
        "--out",
        tmp_path / "run2",
    )
    assert "--match mask needs a mask for every ground truth" in line


def test_match_box_on_polygons(capsys, seg_home, tmp_path):
    data = make_dataset(tmp_path / "polys")
    _ok(
        capsys,
        "calibrate",
        "--model",
        seg_home / "yolo26n_shapes_seg.pt",
        "--data",
        data,
        "--match",
        "box",
        "--head",
        "nms",
        "--no-report",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    c = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert c["matching"]["by"] == "box" and c["matching"]["option"] == "box"


def test_tools_on_a_segment_run(capsys, seg_run, seg_home, tmp_path):
    """compare, check (labelled and label-free), thresholds and --boxes each work on a segment run."""
    model = seg_home / "yolo26n_shapes_seg.pt"
    reused = tmp_path / "reused"
    _ok(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        demo_data_yaml(task="segment"),
        "--boxes",
        seg_run,
        *LIMIT,
        "--head",
        "nms",
        "--no-report",
        *QUICK,
        "--out",
        reused,
    )
    a = pl.read_parquet(seg_run / "boxes.parquet")
    b = pl.read_parquet(reused / "boxes.parquet")
    assert a.select("segm", "correct", "iou").equals(b.select("segm", "correct", "iou"))
    assert json.loads((reused / "calibration.json").read_text())["matching"]["by"] == "mask"
    _ok(capsys, "compare", seg_run, reused, "--out", tmp_path / "cmp")
    assert (tmp_path / "cmp" / "compare.md").is_file()
    copy = shutil.copytree(seg_run, tmp_path / "copy")
    _ok(capsys, "thresholds", copy, "--target-precision", "0.5")
    assert json.loads((copy / "thresholds.json").read_text())
    data = make_dataset(tmp_path / "new", n=8)
    code = main(
        [
            "check",
            str(seg_run),
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
    assert chk["matching"]["by"] == "mask" and chk["kind"] == "labelled"
    code = main(
        [
            "check",
            str(seg_run),
            "--images",
            str(data.parent / "images" / "test"),
            "--n-boot",
            "20",
            "--out",
            str(tmp_path / "chk2"),
            "-q",
        ]
    )
    assert code in (0, 4, 6), capsys.readouterr().err
    assert json.loads((tmp_path / "chk2" / "check.json").read_text())["kind"] == "unlabelled"
    box_data = make_dataset(tmp_path / "boxonly", n=4, box_only=True)
    line = _error(
        capsys, "check", seg_run, "--data", box_data, "--split", "test", "--out", tmp_path / "chk3"
    )
    assert "the run matched boxes by mask IoU" in line


def test_ensemble_refuses_segment_members(capsys, seg_home, tmp_path):
    line = _error(
        capsys,
        "ensemble",
        "--model",
        seg_home / "yolo26n_shapes_seg.pt",
        "--model",
        demo_model(),
        "--data",
        make_dataset(tmp_path / "d"),
        "--limit",
        "4",
        "--out",
        tmp_path / "ens",
    )
    assert "is a segment model: det-calib ensemble fuses boxes and cannot fuse masks" in line


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "task,want",
    [
        ("pose", "has no `kpt_shape`: box labels for a pose model"),
        ("obb", "expected 9 values `cls x1 y1 x2 y2 x3 y3 x4 y4` (4 corners)"),
    ],
)
def test_pose_and_obb_models_refuse_polygon_labels(capsys, tmp_path, task, want):
    """Pose and OBB models are calibrated on their own labels (tests/system/test_pose_obb_run.py), not on polygons."""
    from det_calib.demo import demo_task_model

    model = demo_task_model(task)
    line = _error(
        capsys,
        "calibrate",
        "--model",
        model,
        "--data",
        make_dataset(tmp_path / "d", n=2),
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    assert want in line


def test_mask_matching_of_a_detector_is_refused(capsys, tmp_path):
    line = _error(
        capsys,
        "calibrate",
        "--model",
        demo_model(),
        "--data",
        make_dataset(tmp_path / "d", n=2),
        "--match",
        "mask",
        *QUICK,
        "--out",
        tmp_path / "run",
    )
    assert "--match mask needs a segment model" in line and "task is `detect`" in line


@pytest.mark.parametrize(
    "line,reason",
    [
        (
            "0 0.1 0.1 0.5 0.1 0.5 0.5 0.3",
            "polygon with an odd number of coordinates (7; x y pairs expected)",
        ),
        (
            "0 0.1 0.1 0.5 0.1 1.2 0.5",
            "polygon point 3 outside the image: value 1.2 outside [0, 1]",
        ),
    ],
)
def test_malformed_polygons(capsys, seg_home, tmp_path, line, reason):
    """Every label file with the bad polygon: nothing left to calibrate on, one line naming it, exit 2
    (one bad file among good ones is left out with a warning, as for box labels)."""
    data = make_dataset(tmp_path / "d", n=3)
    for lbl in (data.parent / "labels").rglob("*.txt"):
        lbl.write_text(line + "\n" + lbl.read_text())
    for model in (demo_model(), seg_home / "yolo26n_shapes_seg.pt"):
        err = _error(
            capsys, "calibrate", "--model", model, "--data", data, *QUICK, "--out", tmp_path / "run"
        )
        assert reason in err

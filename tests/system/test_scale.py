"""COCO scale (issue 26): warning floods summarised, a 1,000-class run, work that grows with the boxes;
the post-capture job without torch in its process (issue 58: the detector read and folded in a child).

The speed and memory targets themselves are measured by ``benchmarks/bench_scale.py``; here:
what a user sees with thousands of bad files, that a LVIS-sized class count runs and keeps a
readable report, and the invariants the faster paths rest on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from det_calib.capture import read_parts
from det_calib.data.ground_truth import _MAX_LISTED_WARNINGS, load_data_yaml, load_split
from det_calib.demo.coco_shaped import write_coco_shaped
from det_calib.deploy.fold import write_run_checkpoint
from det_calib.record.run_result import read_calibrators

REPO = Path(__file__).resolve().parents[2]


def test_two_hundred_bad_label_files_print_at_most_ten_lines_before_the_error(tmp_path):
    """200 label files with a class id out of range (every image of the fit split): a few named
    with file, line and reason, one count, then the one error; exit code 2."""
    s = write_coco_shaped(tmp_path / "set", 200, n_classes=8, bad_label_files=200, background=5)
    # the command as a user runs it, in its own process (pytest would capture the log lines)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "det_calib.cli",
            "calibrate",
            "--model",
            str(s.model),
            "--data",
            str(s.data),
            "--no-val",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    err = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2
    assert err[-1].startswith(
        "det-calib: error: split `calib` has no usable images: the label files of all 200"
    )
    before = err[:-1]
    assert len(before) <= 10, before
    named = [
        ln for ln in before if "malformed label" in ln and "class id 11 out of range 0..7" in ln
    ]
    assert len(named) == _MAX_LISTED_WARNINGS
    assert all(ln.startswith("det-calib: warning: split `calib`: skipping image ") for ln in named)
    assert all(":" in ln.split("malformed label ")[1] for ln in named)  # file:line: reason
    (count,) = [ln for ln in before if "more files with malformed labels" in ln]
    assert (
        f"... and {200 - _MAX_LISTED_WARNINGS} more files with malformed labels (200 of 200 images "
        "left out); "
        "all listed in calibration.json" in count
    )


def test_unreadable_images_are_summarised(tmp_path, fixture_yaml):
    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    images = sorted((root / "images" / "fixture").glob("*.jpg"))
    for img in images[:6]:
        img.write_bytes(b"not an image")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = load_split(load_data_yaml(root / "data.yaml"), "fixture")
    msgs = [str(w.message) for w in caught]
    assert len(sp.images) == 6 and sp.corrupt == [str(p) for p in images[:6]]
    assert msgs[:_MAX_LISTED_WARNINGS] == [
        f"skipping unreadable image {p}" for p in images[:_MAX_LISTED_WARNINGS]
    ]
    assert msgs[_MAX_LISTED_WARNINGS:] == [
        f"... and {6 - _MAX_LISTED_WARNINGS} more unreadable images (6 of 12 left "
        "out); all listed in calibration.json (corrupt_images)"
    ]


def test_bad_labels_are_listed_in_calibration_json(tmp_path, demo_model_path, fixture_yaml):
    """Every malformed label file, with line and reason, in calibration.json (the warnings name a few)."""
    from det_calib.pipeline import calibrate
    from det_calib.record.run_result import RunResult

    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    labels = sorted((root / "labels" / "fixture").glob("*.txt"))
    for lbl in labels[:5]:
        lbl.write_text(lbl.read_text() + "99 0.5 0.5 0.1 0.1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = calibrate(
            demo_model_path,
            root / "data.yaml",
            out=tmp_path / "out",
            n_boot=20,
            progress=False,
            method="temperature",
            run_val=False,
            report=False,
        )
    doc = json.loads((run.out_dir / "calibration.json").read_text())
    assert len(doc["bad_labels"]) == 5 and all(
        "class id 99 out of range" in b for b in doc["bad_labels"]
    )
    assert sorted(b.split(":")[0] for b in doc["bad_labels"]) == [str(p) for p in labels[:5]]
    assert RunResult.read(run.out_dir / "calibration.json").bad_labels == doc["bad_labels"]


@pytest.fixture(scope="module")
def lvis_run(tmp_path_factory):
    """A 1,000-class COCO-shaped set (60 images per split, both heads), calibrated from its parts."""
    from det_calib.pipeline import calibrate

    tmp = tmp_path_factory.mktemp("lvis")
    s = write_coco_shaped(tmp / "set", 60, n_classes=1000, seed=5, gt_per_image=12)
    run = calibrate(
        s.model,
        s.data,
        out=tmp / "run",
        boxes=str(s.parts),
        head="both",
        run_val=False,
        progress=False,
        n_boot=50,
        method="temperature",
    )
    return s, run


def test_a_thousand_classes_run_and_keep_a_readable_report(lvis_run):
    from det_calib.report.per_class_section import _MAX_CLASS_PANELS as MAX_CLASS_PANELS
    from det_calib.report.per_class_section import _MAX_SPARSE_PANELS as MAX_SPARSE_PANELS
    from det_calib.report.per_class_section import _shown_classes as shown_classes

    s, run = lvis_run
    doc = json.loads((run.out_dir / "calibration.json").read_text())
    assert len(doc["class_names"]) == 1000
    for head in ("nms", "e2e"):
        per_class = run.result.head(head).per_class
        assert len(per_class) > 500  # most of the 1,000 classes have boxes or ground truth
        shown, note = shown_classes(per_class)
        assert len(shown) == MAX_CLASS_PANELS and note is not None
        enough = [r for r in per_class if not r.few_boxes]
        worst = sorted((r.ece_before for r in enough if r.ece_before is not None), reverse=True)
        n_sparse = sum(r.few_boxes for r in shown)
        assert 0 < n_sparse <= MAX_SPARSE_PANELS
        # the worst classes first (as many as there are panels after the sparse ones), then the sparse
        assert [r.ece_before for r in shown[: MAX_CLASS_PANELS - n_sparse]] == worst[
            : MAX_CLASS_PANELS - n_sparse
        ]
        assert all(r.few_boxes for r in shown[MAX_CLASS_PANELS - n_sparse :])
    md = (run.out_dir / "report.md").read_text()
    assert md.count(f"{MAX_CLASS_PANELS} of ") >= 2  # each head's figures say what they draw
    html = (run.out_dir / "report.html").read_text()
    # every class with boxes is in each head's per-class table
    for head in ("nms", "e2e"):
        n_rows = (
            html.split(f'class="per-class" data-head="{head}"')[1]
            .split("</table>")[0]
            .count(" data-cls=")
        )
        assert n_rows == len(run.result.head(head).per_class)


def test_per_class_grouping_equals_a_mask_per_class(lvis_run):
    """The per-class figures come from one stable sort by class: they equal a mask per class."""
    from det_calib import metrics

    s, run = lvis_run
    b = run.boxes.filter(
        (pl.col("head") == "nms") & (pl.col("split") == "test") & ~pl.col("ignore")
    )
    cls, conf, y = b["cls"].to_numpy(), b["conf"].to_numpy(), b["correct"].to_numpy()
    by_cls = {r.cls: r for r in run.result.head("nms").per_class}
    for c in np.unique(cls)[::37]:
        m = cls == c
        assert by_cls[int(c)].boxes == int(m.sum()) and by_cls[int(c)].correct == int(y[m].sum())
        assert by_cls[int(c)].ece_before == metrics.ece(conf[m], y[m], n_bins=15)


# The command line in a fresh process, torch and Ultralytics watched: where either is first imported
# (the det_calib frames of the stack), whether torch is in sys.modules at the job's points (the box
# table read, the figures drawn, the outputs written), and what each model child process ran.
WATCHED_RUN = r"""
import importlib.abc, importlib.machinery, json, sys, traceback
imported = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("torch", "ultralytics") or name in imported:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        run = spec.loader.exec_module
        def exec_module(module):
            imported[name] = [f"{f.filename.split('det_calib/')[-1]}:{f.lineno} {f.name}"
                              for f in traceback.extract_stack() if "det_calib" in f.filename]
            return run(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Watch())
import det_calib.cli as cli
from det_calib.job import capturing
from det_calib.pipeline import calibrate_job
points = {}
def at(name, fn):
    def wrapped(*a, **k):
        points.setdefault(name, "torch" in sys.modules)
        return fn(*a, **k)
    return wrapped
capturing.reuse_boxes = at("box table read", capturing.reuse_boxes)
capturing.read_run_detections = at("box table read", capturing.read_run_detections)
calibrate_job.evaluate = at("figures", calibrate_job.evaluate)
calibrate_job.write_run_outputs = at("outputs", calibrate_job.write_run_outputs)
from det_calib.job import model_process
children = []
in_child = model_process._in_child
def counted(stage, target, *rest):
    children.append(target)
    return in_child(stage, target, *rest)
model_process._in_child = counted
sys.argv = ["det-calib", *sys.argv[1:]]
code = cli.main()
print(json.dumps({"code": code, "imported": imported, "points": points, "children": children}))
"""


def _watched(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", WATCHED_RUN, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "YOLO_OFFLINE": "1"},
        cwd=REPO,
    )
    assert r.stdout.strip(), r.stderr[-2000:]
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "stderr": r.stderr}


@pytest.fixture(scope="module")
def coco_set(tmp_path_factory):
    """A small COCO-shaped set: a checkpoint, its data and capture parts."""
    return write_coco_shaped(tmp_path_factory.mktemp("coco_shaped"), 40, n_classes=4)


def test_boxes_run_imports_no_torch_and_folds_the_same_checkpoint(coco_set, tmp_path):
    out = tmp_path / "run"
    got = _watched(
        "calibrate",
        "--model",
        str(coco_set.model),
        "--data",
        str(coco_set.data),
        "--boxes",
        str(coco_set.parts),
        "--no-val",
        "--n-boot",
        "20",
        "--out",
        str(out),
        "--quiet",
    )
    assert got["code"] == 0, got["stderr"][-2000:]
    # the command ran every point of the job, torch out of the process at each and at the end
    assert got["points"] == {"box table read": False, "figures": False, "outputs": False}
    assert got["imported"] == {}, got["imported"]
    # one model child, the fold's: the model's facts were read where the parts recorded them
    assert got["children"] == ["det_calib.deploy.fold:write_run_checkpoint"]
    # the checkpoint the child wrote is the one this process (torch imported) writes of the same maps
    here = tmp_path / "here.pt"
    records = read_calibrators(out / "calibration.json")
    assert {r.method for r in records.values()} - {"temperature"}, "a map other than T folds too"
    write_run_checkpoint(coco_set.model, here, records, metadata={})
    a, b = (
        torch.load(p, map_location="cpu", weights_only=False) for p in (out / "calibrated.pt", here)
    )
    sa, sb = a["model"].state_dict(), b["model"].state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a["det_calib"]["calibrators"] == b["det_calib"]["calibrators"]


def test_detections_run_imports_no_torch(coco_set, tmp_path):
    dets = tmp_path / "dets.parquet"
    # both splits' folders hold the same file names: the file names each image by split folder
    boxes = pl.concat(
        read_parts(coco_set.parts / s).with_columns(
            (pl.lit(f"{s}/") + pl.col("image")).alias("image")
        )
        for s in ("calib", "test")
    )
    boxes.filter(pl.col("head") == "nms").select(
        "image", pl.col("cls").alias("class"), "x1", "y1", "x2", "y2", pl.col("conf").alias("score")
    ).write_parquet(dets)
    got = _watched(
        "calibrate",
        "--data",
        str(coco_set.data),
        "--detections",
        str(dets),
        "--no-val",
        "--n-boot",
        "20",
        "--no-report",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
    )
    assert got["code"] == 0, got["stderr"][-2000:]
    assert got["points"] == {"box table read": False, "figures": False, "outputs": False}
    assert got["imported"] == {}, got["imported"]


def test_a_corrupt_checkpoint_is_one_line_exit_2_before_the_boxes_are_read(coco_set, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    got = _watched(
        "calibrate",
        "--model",
        str(bad),
        "--data",
        str(coco_set.data),
        "--boxes",
        str(coco_set.parts),
        "--no-val",
        "--out",
        str(tmp_path / "run"),
    )
    assert got["code"] == 2
    assert (
        got["stderr"]
        .strip()
        .splitlines()[-1]
        .startswith(f"det-calib: error: cannot load model {bad}: ")
    )
    assert got["points"] == {} and "torch" not in got["imported"]

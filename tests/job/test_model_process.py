"""The detector where torch is not imported: ``calibrate --boxes`` (and ``--detections``) as the command
line runs them import neither torch nor Ultralytics in the run's process; the model's facts and the
fold run in a child, with the same checkpoint and the same one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch

from det_calib.capture.parts import read_parts
from det_calib.demo.coco_shaped import write_coco_shaped
from det_calib.deploy.fold import write_run_checkpoint
from det_calib.errors import InputError
from det_calib.job.model_process import _in_child, _read_facts, model_facts
from det_calib.record.run_result import read_calibrators

REPO = Path(__file__).resolve().parents[2]

# The command line in a fresh process, torch and Ultralytics watched: where either is first imported
# (the det_calib frames of the stack), and whether torch is in sys.modules at the job's points (the
# box table read, the figures drawn, the outputs written).
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
sys.argv = ["det-calib", *sys.argv[1:]]
code = cli.main()
print(json.dumps({"code": code, "imported": imported, "points": points}))
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
    boxes = pl.concat(read_parts(coco_set.parts / s) for s in ("calib", "test"))
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


def test_the_childs_facts_and_errors_are_those_read_here(coco_set, tmp_path):
    # torch is imported in this process: model_facts reads here; the child reads the same
    assert model_facts(coco_set.model) == _read_facts(coco_set.model)
    child = _in_child(
        "model load", "det_calib.job.model_process:_read_facts", (coco_set.model,), {}
    )
    assert child == _read_facts(coco_set.model)
    assert child.names == [f"class{i:02d}" for i in range(4)] and child.heads == ["nms", "e2e"]
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError) as here:
        _read_facts(bad)
    with pytest.raises(InputError) as there:
        _in_child("model load", "det_calib.job.model_process:_read_facts", (bad,), {})
    assert str(there.value) == str(here.value) and str(here.value).startswith("cannot load model")

"""The mAP check of pose and OBB runs: ``calibrate --method temperature --limit 16`` on each demo model (both
heads; the session's runs, ``demo_task_runs`` in tests/conftest.py) reports the task's mAP before and after,
identical for a temperature, in the summary, calibration.json (the ``pose_map_*`` keys only where measured) and
the report; Ultralytics' own PoseValidator / OBBValidator agrees on the original and the calibrated.pt (one pass,
both heads), and plain Ultralytics' val of the written calibrated.pt gives the original's figures at the
equivalent floor."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import demo_data_yaml
from det_calib.report.text_summary import summary_text
from det_calib.tasks import load_task_split
from det_calib.tasks.pose.evaluation_map import POSE_MAP_KEYS, coco_keypoint_maps

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pose_run(demo_task_runs) -> Path:
    """The session's run of the demo pose model (tests/conftest.py: ``--limit 16 --method temperature
    --n-boot 20``, both heads, val and report)."""
    return demo_task_runs["pose"].out_dir


@pytest.fixture(scope="module")
def obb_run(demo_task_runs) -> Path:
    return demo_task_runs["obb"].out_dir


def _val_identical(c: dict, head: str, keys: tuple[str, ...]) -> dict:
    uv = c["ultralytics_val"][head]
    assert uv["identical_at_equivalent_floor"] is True
    o, e = uv["original"], uv["calibrated_equivalent_floor"]
    for k in keys:
        assert o[k] == e[k] and o[k] > 0.3, (head, k)
    return uv


def test_pose_run_reports_keypoint_map_identical_for_a_temperature(pose_run):
    c = json.loads((pose_run / "calibration.json").read_text())
    summary = (pose_run / "summary.txt").read_text()
    boxes = pl.read_parquet(pose_run / "boxes.parquet")
    sp = load_task_split(load_data_yaml(demo_data_yaml(task="pose")), "test", task="pose", limit=16)
    for head in ("nms", "e2e"):
        ev = c["eval"][head]
        t = c["temperature"][head]
        assert t != 1.0  # a real temperature: the scores changed
        assert ev["pose_map_identical"] is True and ev["map_identical"] is True
        assert ev["pose_map50_95_before"] == ev["pose_map50_95_after"] > 0.3
        assert ev["pose_map50_before"] == ev["pose_map50_after"]
        # the figure is pycocotools' keypoints mAP of the run's own boxes (raw scores), with Ultralytics' sigmas
        b = boxes.filter((pl.col("head") == head) & (pl.col("split") == "test"))
        ref = coco_keypoint_maps(b, sp, [b["conf"].to_numpy()], max_dets=300)[0]
        assert abs(ref["map50_95"] - ev["pose_map50_95_before"]) < 1e-12
        assert (
            f"[{head}] keypoint mAP50-95 {ev['pose_map50_95_before']:.4f} -> "
            f"{ev['pose_map50_95_after']:.4f}" in summary
        )
        uv = _val_identical(c, head, ("map50_95", "map50", "pose_map50_95", "pose_map50"))
        assert (
            f"[{head}] Ultralytics val keypoint mAP50-95 original "
            f"{uv['original']['pose_map50_95']:.4f}" in summary
        )
    assert (
        summary_text(c).split("\ntime:")[0] == summary.split("\ntime:")[0]
    )  # the json holds every figure
    md = (pose_run / "report.md").read_text()
    assert "**Keypoint mAP by pycocotools keypoints (OKS)" in md and "| keypoint mAP50-95 |" in md


def test_obb_run_reports_rotated_map_identical_for_a_temperature(obb_run):
    c = json.loads((obb_run / "calibration.json").read_text())
    summary = (obb_run / "summary.txt").read_text()
    for head in ("nms", "e2e"):
        ev = c["eval"][head]
        assert not set(POSE_MAP_KEYS) & set(ev) and not any(
            k.startswith("mask_") for k in ev
        )  # only where measured
        assert ev["map_identical"] is True
        uv = _val_identical(c, head, ("map50_95", "map50"))
        assert "pose_map50_95" not in uv["original"]
        assert (
            f"[{head}] Ultralytics val rotated-box mAP50-95 original "
            f"{uv['original']['map50_95']:.4f}" in summary
        )
        assert f"[{head}] COCO mAP50-95 of the axis-aligned hulls" in summary
    md = (obb_run / "report.md").read_text()
    assert "| rotated-box mAP50-95 |" in md and "Ultralytics' OBBValidator" in md


def test_plain_val_of_calibrated_pt_equals_the_original(pose_run, obb_run, tmp_path):
    """Stock ``YOLO(calibrated.pt).val()`` at the equivalent floor: the original's figures, as the run recorded."""
    from ultralytics import YOLO

    from det_calib.pipeline.val_view import write_split_yaml

    for run, task in ((pose_run, "pose"), (obb_run, "obb")):
        c = json.loads((run / "calibration.json").read_text())
        ds = load_data_yaml(demo_data_yaml(task=task))
        data = write_split_yaml(
            ds, load_task_split(ds, "test", task=task, limit=16), tmp_path / run.name
        )
        uv = _val_identical(c, "nms", ("map50_95",))
        m = YOLO(str(run / "calibrated.pt")).val(
            data=str(data),
            split="val",
            imgsz=320,
            batch=16,
            plots=False,
            verbose=False,
            conf=uv["calibrated_equivalent_floor"]["conf"],
            project=str(tmp_path / run.name),
            name="val",
        )
        assert float(m.box.map) == uv["original"]["map50_95"]
        if hasattr(m, "pose"):
            assert float(m.pose.map) == uv["original"]["pose_map50_95"]

"""Ultralytics' own PoseValidator and OBBValidator before and after calibration: one val pass for both heads of
the demo YOLO26n-pose / YOLO26n-obb and of its calibrated.pt (box and keypoint mAP; rotated-box mAP), equal to
separate vals of each and to stock ``YOLO(model).val()``; a temperature at the equivalent floor leaves every
figure identical."""

from __future__ import annotations

import pytest

from det_calib.calibrators.temperature import equivalent_threshold
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import _demo_root, demo_data_yaml
from det_calib.deploy.fold import write_calibrated_checkpoint
from det_calib.evaluation.map_check import ultralytics_val, ultralytics_val_heads
from det_calib.pipeline.val_view import write_split_yaml
from det_calib.tasks import load_task_split

pytest.importorskip("ultralytics")
N_IMAGES = 16
TASKS = {
    "pose": "yolo26n_shapes_pose.pt",
    "obb": "yolo26n_shapes_obb.pt",
}


@pytest.fixture(scope="module", params=sorted(TASKS))
def task_pair(request, tmp_path_factory):
    """(task, original, calibrated, temperatures, data.yaml of the first 16 demo test images)."""
    task = request.param
    name = TASKS[task]
    d = tmp_path_factory.mktemp(task)
    ds = load_data_yaml(demo_data_yaml(task=task))
    yml = write_split_yaml(
        ds, load_task_split(ds, "test", task=task, limit=N_IMAGES), d
    )  # carries kpt_shape for the pose validator
    original = _demo_root() / name
    ts = {"nms": 0.7, "e2e": 1.4}
    return task, original, write_calibrated_checkpoint(original, d / "cal.pt", ts), ts, yml


@pytest.mark.slow
def test_one_val_pass_for_both_heads_equals_separate_and_stock_vals(task_pair):
    from ultralytics import YOLO

    task, original, calibrated, ts, yml = task_pair
    confs = {h: (0.001, equivalent_threshold(0.001, t)) for h, t in ts.items()}
    both = ultralytics_val_heads(original, calibrated, yml, split="val", imgsz=320, confs=confs)
    keys = {"conf", "map50_95", "map50"} | (
        {"pose_map50_95", "pose_map50"} if task == "pose" else set()
    )
    for head, (o, c) in both.items():
        assert set(o) == set(c) == keys
        assert o == ultralytics_val(original, yml, split="val", head=head, imgsz=320)
        assert c == ultralytics_val(
            calibrated, yml, split="val", head=head, conf=confs[head][1], imgsz=320
        )
        # a temperature at the equivalent floor: the same candidates, boxes and keypoints/angles: identical mAP
        assert {k: v for k, v in o.items() if k != "conf"} == {
            k: v for k, v in c.items() if k != "conf"
        }
        assert o["map50_95"] > 0.3 and o.get("pose_map50_95", 1) > 0.3  # not vacuous
    assert both["nms"][0] != both["e2e"][0]  # two heads, two sets of figures
    # stock Ultralytics (its own validator class, no det_calib code in the pass) gives the original's figures
    m = YOLO(str(original)).val(
        data=str(yml),
        split="val",
        imgsz=320,
        batch=16,
        plots=False,
        verbose=False,
        save_json=False,
        project=str(yml.parent),
        name="stock",
    )
    assert type(m).__name__ == {"pose": "PoseMetrics", "obb": "OBBMetrics"}[task]
    assert (float(m.box.map), float(m.box.map50)) == (
        both["nms"][0]["map50_95"],
        both["nms"][0]["map50"],
    )
    if task == "pose":
        assert (float(m.pose.map), float(m.pose.map50)) == (
            both["nms"][0]["pose_map50_95"],
            both["nms"][0]["pose_map50"],
        )

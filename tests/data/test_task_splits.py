"""One split read for a model's task (``load_task_split``): each task's ground truth, and the data that does not
fit the model refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.tasks import get_task, load_task_split
from det_calib.tasks.contract import label_values
from det_calib.tasks.obb.labels import load_obb_split
from det_calib.tasks.pose.labels import load_pose_split

pytestmark = pytest.mark.fast


def _copy(root: Path, source: Path, *, n: int = 3, yaml_edit=None, first_empty: bool = False):
    """``n`` calib images of the demo data of ``source`` with their labels (the first label file emptied
    when ``first_empty``), read back as a Dataset."""
    for d in ("images", "labels"):
        (root / d / "calib").mkdir(parents=True)
    for i, img in enumerate(sorted((source.parent / "images" / "calib").glob("*.png"))[:n]):
        shutil.copy(img, root / "images" / "calib" / img.name)
        text = (source.parent / "labels" / "calib" / f"{img.stem}.txt").read_text()
        (root / "labels" / "calib" / f"{img.stem}.txt").write_text(
            "" if first_empty and i == 0 else text
        )
    keep = [
        ln
        for ln in source.read_text().splitlines()
        if not ln.startswith(("path:", "train:", "val:", "calib:", "test:"))
    ]
    text = "\n".join([f"path: {root}", "val: images/calib", "calib: images/calib", *keep]) + "\n"
    (root / "data.yaml").write_text(yaml_edit(text) if yaml_edit else text)
    return load_data_yaml(root / "data.yaml")


def test_each_task_reads_its_own_ground_truth(tmp_path, small_demo):
    pose = _copy(tmp_path / "pose", small_demo["pose"])
    obb = _copy(tmp_path / "obb", small_demo["obb"])
    boxes = _copy(tmp_path / "box", small_demo["detect"])
    seg = _copy(tmp_path / "seg", small_demo["segment"])
    sp = load_task_split(pose, "calib", task="pose", payload_shape=(5, 3))
    assert get_task("pose").payload in sp.gt.columns and sp.gt.equals(
        load_pose_split(pose, "calib").gt
    )
    sp = load_task_split(obb, "calib", task="obb")
    assert get_task("obb").payload in sp.gt.columns and sp.gt.equals(
        load_obb_split(obb, "calib").gt
    )
    assert get_task("segment").payload in load_task_split(seg, "calib", task="segment").gt.columns
    assert load_task_split(seg, "calib", task="segment", match="box").gt.equals(
        load_split(seg, "calib").gt
    )
    assert load_task_split(boxes, "calib", task="detect").gt.equals(load_split(boxes, "calib").gt)
    # --match box: a pose or OBB model on its own labels keeps the task's checks; the boxes are the same rows
    assert (
        load_task_split(pose, "calib", task="pose", match="box")
        .gt.select("x1", "y1", "x2", "y2")
        .equals(load_split(boxes, "calib").gt.select("x1", "y1", "x2", "y2"))
    )
    assert (
        get_task("obb").payload in load_task_split(obb, "calib", task="obb", match="box").gt.columns
    )
    # and on box labels, the box labels
    assert load_task_split(boxes, "calib", task="pose", match="box").gt.equals(
        load_split(boxes, "calib").gt
    )
    assert load_task_split(boxes, "calib", task="obb", match="box").gt.equals(
        load_split(boxes, "calib").gt
    )


def test_label_values(tmp_path, small_demo):
    assert label_values(_copy(tmp_path / "obb", small_demo["obb"], first_empty=True), "calib") == 9
    assert label_values(_copy(tmp_path / "pose", small_demo["pose"]), "calib") == 20
    assert label_values(_copy(tmp_path / "box", small_demo["detect"]), "calib") == 5
    with pytest.raises(InputError, match="split `test` not in"):
        label_values(_copy(tmp_path / "b2", small_demo["detect"]), "test")


def test_data_that_does_not_fit_the_model(tmp_path, small_demo):
    pose = _copy(tmp_path / "pose", small_demo["pose"])
    boxes = _copy(
        tmp_path / "box", small_demo["detect"], first_empty=True
    )  # the sniff skips an empty file
    for task in ("detect", "segment", "obb"):
        with pytest.raises(
            InputError,
            match=rf"declares kpt_shape \[5, 3\] \(pose labels\), but the model's task is "
            rf"`{task}`",
        ):
            load_task_split(pose, "calib", task=task)
    for match in ("auto", "oks"):
        with pytest.raises(InputError, match="has no `kpt_shape`: box labels for a pose model"):
            load_task_split(boxes, "calib", task="pose", match=match, payload_shape=(5, 3))
    with pytest.raises(
        InputError, match=r"kpt_shape \[5, 3\] but the model's is \[17, 3\] \(17 keypoints\)"
    ):
        load_task_split(pose, "calib", task="pose", payload_shape=(17, 3))
    for match in ("auto", "rotated"):
        with pytest.raises(
            InputError, match=r"has box labels \(`cls cx cy w h`\) for an OBB model"
        ):
            load_task_split(boxes, "calib", task="obb", match=match)
    with pytest.raises(InputError, match="COCO JSON has no rotated boxes"):
        load_task_split(boxes, "calib", task="obb", coco_gt=tmp_path / "x.json")

"""Keypoint mAP (pycocotools ``keypoints``) of the demo pose model's captured boxes, before and after calibration.

Parity: the figures equal pycocotools run on COCO JSON files written here independently (the ground truth read
from the YOLO label text, the detections as Ultralytics' ``pred_to_json`` writes them), with Ultralytics' sigma
rule. Identity: a temperature (any single increasing map) leaves the keypoint mAP and the box mAP identical;
scores that rank differently move it (the check is not blind)."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.predictor import capture
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import _demo_root, demo_data_yaml
from det_calib.errors import InputError
from det_calib.evaluation.figures import _task_map_check
from det_calib.job.settings import Settings
from det_calib.tasks import load_task_split
from det_calib.tasks.pose.evaluation_map import POSE_MAP_KEYS, coco_keypoint_maps, pose_map_check

pytest.importorskip("ultralytics")
pytest.importorskip("pycocotools")
N_IMAGES = 16


@pytest.fixture(scope="module")
def pose_case():
    """The first 16 test images of the pose demo and the demo pose model's boxes on them, both heads."""
    ds = load_data_yaml(demo_data_yaml(task="pose"))
    sp = load_task_split(ds, "test", task="pose", limit=N_IMAGES)
    boxes = capture(
        str(_demo_root() / "yolo26n_shapes_pose.pt"),
        sp.images,
        heads=("nms", "e2e"),
        conf=1e-3,
        split="test",
        progress=False,
        workers=1,
    )
    return ds, sp, boxes


def _reference_gt(sp) -> dict:
    """The split's ground truth as a COCO keypoints JSON, read here from the label files' text."""
    anns = []
    for img_id, (img, (w, h)) in enumerate(zip(sp.images, sp.sizes)):
        label = img.parent.parent.parent / "labels" / img.parent.name / (img.stem + ".txt")
        for line in label.read_text().splitlines():
            v = [float(t) for t in line.split()]
            cx, cy, bw, bh = v[1] * w, v[2] * h, v[3] * w, v[4] * h
            kp = np.asarray(v[5:]).reshape(-1, 3) * [w, h, 1]
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": img_id,
                    "category_id": int(v[0]),
                    "iscrowd": 0,
                    "bbox": [cx - bw / 2, cy - bh / 2, bw, bh],
                    "area": 0.53 * bw * bh,
                    "keypoints": kp.reshape(-1).tolist(),
                    "num_keypoints": int((kp[:, 2] > 0).sum()),
                }
            )
    return {
        "images": [{"id": i} for i in range(len(sp.images))],
        "annotations": anns,
        "categories": [{"id": c} for c in range(8)],
    }


def _reference_maps(tmp_path, sp, boxes: pl.DataFrame, scores: np.ndarray, max_dets: int) -> dict:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt_path, dt_path = tmp_path / "gt.json", tmp_path / "dt.json"
    gt_path.write_text(json.dumps(_reference_gt(sp)))
    dets = [
        {
            "image_id": int(i),
            "category_id": int(c),
            "score": float(s),
            "keypoints": np.asarray(k, dtype=np.float64).reshape(-1).tolist(),
        }
        for i, c, s, k in zip(boxes["image_id"], boxes["cls"], scores, boxes["kpts"].to_list())
    ]
    dt_path.write_text(json.dumps(dets))
    sigmas = (
        np.ones(5) / 5
    )  # Ultralytics' PoseValidator.init_metrics: kpt_shape [5, 3], no kpt_oks_sigmas
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        ev = COCOeval(gt, gt.loadRes(str(dt_path)), "keypoints")
        ev.params.kpt_oks_sigmas = np.asarray(sigmas, dtype=np.float64)
        ev.params.maxDets = [max_dets]
        ev.evaluate()
        ev.accumulate()
    prec = ev.eval["precision"][:, :, :, 0, 0]
    mean = lambda x: float(x[x > -1].mean())  # noqa: E731
    return {"map50_95": mean(prec), "map50": mean(prec[0]), "map75": mean(prec[5])}


@pytest.mark.slow
@pytest.mark.parametrize("head", ["nms", "e2e"])
def test_keypoint_map_equals_pycocotools_on_json_files(tmp_path, pose_case, head):
    _, sp, boxes = pose_case
    b = boxes.filter(pl.col("head") == head)
    assert b.height > 100
    scores = b["conf"].to_numpy().astype(np.float64)
    ours = coco_keypoint_maps(b, sp, [scores], max_dets=300)[0]
    ref = _reference_maps(tmp_path, sp, b, scores, 300)
    assert ours == ref
    assert 0.3 < ours["map50_95"] < 1  # not vacuous: the model finds keypoints, not all of them


@pytest.mark.slow
def test_temperature_leaves_keypoint_and_box_map_identical(pose_case):
    _, sp, boxes = pose_case
    s = Settings(max_det=300, map_engine="pycocotools")
    for head in ("nms", "e2e"):
        b = boxes.filter(pl.col("head") == head)
        t = make_calibrator("temperature")
        t.temperature_ = 1.7
        out = pose_map_check(b, sp, t, s)
        assert out["pose_map_identical"] is True and out["map_identical"] is True
        assert out["pose_map50_95_before"] == out["pose_map50_95_after"] > 0.3
        assert out["pose_map50_before"] == out["pose_map50_after"]
        assert _task_map_check(b, sp, t, s) == out  # the evaluator's dispatch on the kpts column
        # scores that rank the boxes otherwise move the keypoint mAP: the check sees the order
        rng = np.random.default_rng(0)
        shuffled = coco_keypoint_maps(b, sp, [rng.uniform(size=b.height)], max_dets=300)[0]
        assert shuffled["map50_95"] < out["pose_map50_95_before"] - 0.05


@pytest.mark.slow
def test_a_split_without_keypoints_measures_box_map_only(pose_case):
    _, sp, boxes = pose_case
    b = boxes.filter(pl.col("head") == "nms")
    plain = type(sp)(
        name=sp.name,
        images=sp.images,
        sizes=sp.sizes,
        corrupt=sp.corrupt,
        root=sp.root,
        gt=sp.gt.drop("kpts", "area", "num_keypoints"),
        bad_labels=sp.bad_labels,
    )
    t = make_calibrator("temperature")
    t.temperature_ = 0.8
    out = pose_map_check(b, plain, t, Settings(max_det=300))
    assert all(out[k] is None for k in POSE_MAP_KEYS) and out["map_identical"] is True
    with pytest.raises(InputError, match="read without keypoints"):
        coco_keypoint_maps(b, plain, [b["conf"].to_numpy()])


@pytest.mark.slow
def test_sigmas_of_the_dataset_are_used(pose_case):
    _, sp, boxes = pose_case
    b = boxes.filter(pl.col("head") == "nms")
    sc = b["conf"].to_numpy()
    default = coco_keypoint_maps(b, sp, [sc])[0]
    assert coco_keypoint_maps(b, sp, [sc], sigmas=[0.2] * 5)[0] == default  # 1/K for K = 5
    tight = coco_keypoint_maps(b, sp, [sc], sigmas=[0.02] * 5)[0]
    assert tight["map50_95"] < default["map50_95"]
    with pytest.raises(InputError, match="sigmas"):
        coco_keypoint_maps(b, sp, [sc], sigmas=[0.1] * 4)

"""Pose and OBB models: the capture's boxes, confs, classes, keypoints and rotated boxes equal
predict's, image by image and bit for bit, on both heads; its logits are the class branch's raw
scores; parts carry the payload columns; the calibration run still refuses these tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from det_calib.capture.predictor import capture, check_task, load_detector
from det_calib.errors import InputError
from det_calib.tasks import task_names

pytest.importorskip("ultralytics")

NOISE = 0.05
PAYLOAD_NOISE = 0.5


def task_model(cfg: str, seed: int = 0):
    """A yaml-built pose or OBB model, weights perturbed: varied scores, two distinct heads (YOLO26),
    keypoints and angles far from their initial values (OBB26 angles beyond +-pi/2), class biases
    drawn so that scores spread like a trained model's."""
    from ultralytics import YOLO

    torch.manual_seed(seed)
    yolo = YOLO(cfg)
    head = yolo.model.model[-1]
    payload = [
        m
        for name, m in head.named_children()
        if name.startswith(("cv4", "one2one_cv4")) and not name.endswith("sigma")
    ]
    with torch.no_grad():
        for p in yolo.model.parameters():
            p.add_(torch.randn_like(p) * NOISE)
        for branch in payload:
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * PAYLOAD_NOISE)
        for branch in [head.cv3] + (
            [head.one2one_cv3] if getattr(head, "one2one_cv3", None) else []
        ):
            for level in branch:
                torch.nn.init.normal_(level[-1].weight, 0.0, 0.05)
                torch.nn.init.normal_(level[-1].bias, -4.0, 1.5)
    return yolo


def _predict(yolo, images, head: str):
    kw = {"nms": False} if head == "e2e" else {}
    return [
        yolo.predict(str(p), imgsz=320, conf=1e-3, max_det=300, verbose=False, **kw)[0]
        for p in images
    ]


def _assert_equal_to_predict(df: pl.DataFrame, results, task: str) -> int:
    n = 0
    for i, r in enumerate(results):
        d = df.filter(pl.col("image_id") == i)
        boxes = r.obb if task == "obb" else r.boxes
        ref = boxes.data.numpy()
        assert d.height == len(ref), f"image {i}: {d.height} boxes, predict {len(ref)}"
        xyxy = d.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32)
        np.testing.assert_array_equal(xyxy, boxes.xyxy.numpy())  # OBB: the axis-aligned hull
        np.testing.assert_array_equal(d["conf"].to_numpy().astype(np.float32), boxes.conf.numpy())
        np.testing.assert_array_equal(d["cls"].to_numpy(), boxes.cls.numpy().astype(int))
        sig32 = torch.sigmoid(torch.tensor(d["logit"].to_numpy(), dtype=torch.float32)).numpy()
        assert (
            np.abs(sig32 - d["conf"].to_numpy()).max(initial=0) <= 1e-6
        )  # the logit is the box's class logit
        if task == "obb":
            got = np.array(d["xywhr"].to_list(), dtype=np.float32).reshape(-1, 5)
            np.testing.assert_array_equal(got, r.obb.xywhr.numpy())
        elif len(ref):
            got = np.array(d["kpts"].to_list(), dtype=np.float32)
            np.testing.assert_array_equal(got, r.keypoints.data.numpy())
        n += len(ref)
    return n


@pytest.mark.parametrize(
    "cfg", ["yolo26n-pose.yaml", "yolo11n-pose.yaml", "yolo26n-obb.yaml", "yolo11n-obb.yaml"]
)
def test_pose_obb_capture_equals_predict(cfg, fixture_images):
    task = "obb" if "obb" in cfg else "pose"
    images = [fixture_images[k] for k in (0, 3, 6, 9)]
    df = capture(
        task_model(cfg), images, heads="auto", imgsz=320, conf=1e-3, progress=False, workers=1
    )
    column = {"pose": "kpts", "obb": "xywhr"}[task]
    assert df.schema[column] == (
        pl.List(pl.List(pl.Float32)) if task == "pose" else pl.List(pl.Float32)
    )
    assert not ({"segm", "kpts", "xywhr"} - {column}) & set(df.columns)  # only this task's payload
    heads = sorted(df["head"].unique())
    assert heads == (["e2e", "nms"] if cfg.startswith("yolo26") else ["nms"])
    for head in heads:
        n = _assert_equal_to_predict(
            df.filter(pl.col("head") == head), _predict(task_model(cfg), images, head), task
        )
        assert n >= 20, (head, n)
    if task == "pose":
        kpts = np.array(df["kpts"].to_list(), dtype=np.float32)
        assert kpts.shape[1:] == (17, 3)
        conf = kpts[..., 2]
        assert (
            (conf >= 0).all() and (conf <= 1).all() and conf.std() > 0.05
        )  # keypoint confidences (sigmoid)
    else:  # rotated boxes, not their hulls
        xywhr = np.array(df["xywhr"].to_list(), dtype=np.float32)
        assert np.mean(np.abs(np.sin(2 * xywhr[:, 4])) > 0.2) > 0.3
        hull_w = df["x2"].to_numpy() - df["x1"].to_numpy()
        assert (hull_w >= np.minimum(xywhr[:, 2], xywhr[:, 3]) - 1e-3).all()


def test_single_head_equals_both_heads(fixture_images):
    images = fixture_images[:3]
    for cfg in ("yolo26n-pose.yaml", "yolo26n-obb.yaml"):
        both = capture(
            task_model(cfg), images, heads=("nms", "e2e"), imgsz=320, progress=False, workers=1
        )
        for head in ("nms", "e2e"):
            one = capture(task_model(cfg), images, head=head, imgsz=320, progress=False, workers=1)
            assert one.height > 0
            assert one.equals(both.filter(pl.col("head") == head))


def shapes_task_model(folder, demo_model, task: str):
    """A YOLO26n-pose (5 keypoints, as the shapes demo's) or YOLO26n-obb for the demo's 8 classes,
    the demo detector's layers copied in (realistic boxes and scores on both heads); saved as
    Ultralytics saves. Returns its path."""
    import ultralytics
    import yaml
    from ultralytics import YOLO

    cfg = yaml.safe_load(
        (Path(ultralytics.__file__).parent / f"cfg/models/26/yolo26-{task}.yaml").read_text()
    )
    cfg["nc"] = 8
    if task == "pose":
        cfg["kpt_shape"] = [5, 3]
    spec = folder / f"yolo26n-{task}.yaml"  # the `n` in the name selects the scale
    spec.write_text(yaml.safe_dump(cfg, sort_keys=False))
    torch.manual_seed(0)
    yolo = YOLO(str(spec)).load(str(demo_model))
    yolo.model.names = dict(YOLO(str(demo_model)).names)
    path = folder / f"shapes_{task}.pt"
    yolo.save(str(path))
    return path


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_shapes_task_model_equals_predict_and_parts_and_ray_carry_payload(
    task, tmp_path, demo_model_path, fixture_yaml, fixture_images, local_ray
):
    """The demo detector's layers: confident boxes; shards (some empty) and Ray parts read back as
    the single-process capture, payload included, and so does the box table's reader."""
    from ultralytics import YOLO

    from det_calib.capture.parts import capture_to_parts, read_parts
    from det_calib.data.box_table import read_boxes

    model = shapes_task_model(tmp_path, demo_model_path, task)
    direct = capture(
        str(model),
        fixture_images,
        heads="auto",
        imgsz=320,
        split="fixture",
        image_names=[p.name for p in fixture_images],
        progress=False,
        workers=1,
    )
    for head in ("nms", "e2e"):
        d = direct.filter(pl.col("head") == head)
        assert (
            _assert_equal_to_predict(d, _predict(YOLO(str(model)), fixture_images, head), task)
            >= 20
        )
        assert d.filter(pl.col("conf") > 0.25).height >= 8
    n = 16  # 12 images: at least 4 shards are empty
    for i in range(n):
        capture_to_parts(
            model,
            fixture_yaml,
            "fixture",
            tmp_path / "shards",
            shard=f"{i}/{n}",
            imgsz=320,
            progress=False,
        )
    shards = read_parts(tmp_path / "shards", expect_model=model)
    column = {"pose": "kpts", "obb": "xywhr"}[task]
    assert shards.schema[column] == direct.schema[column] and shards.height == direct.height > 0
    assert shards.drop("image").equals(direct.drop("image"))
    shards.write_parquet(tmp_path / "boxes.parquet")
    assert read_boxes(tmp_path / "boxes.parquet", matched=False).equals(shards)

    pytest.importorskip("ray")  # the step needs Ray (conftest's local_ray is None without it)
    from det_calib.capture.ray_capture import capture_ray

    capture_ray(  # on the session's Ray instance (conftest's ``local_ray``)
        model, fixture_yaml, "fixture", tmp_path / "ray", images_per_part=5, actors=2, imgsz=320
    )
    assert read_parts(tmp_path / "ray", expect_model=model).equals(shards)


@pytest.mark.fast
def test_capture_and_run_accept_pose_and_obb():
    assert task_names() == ("detect", "segment", "pose", "obb")
    for task in ("pose", "obb"):
        check_task(task, task_names())
        check_task(task)  # the calibration run takes them (tests/system/test_pose_obb_run.py)
        assert load_detector(f"yolo26n-{task}.yaml").task == task
        assert load_detector(f"yolo11n-{task}.yaml", tasks=task_names()).task == task
    with pytest.raises(
        InputError, match="a classify model is calibrated on a folder of class folders"
    ):
        load_detector("yolo26n-cls.yaml")

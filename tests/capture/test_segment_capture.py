"""Segment models: the capture's boxes, confs, classes and masks equal predict(retina_masks=True)'s,
image by image, on both heads; its logits are the class branch's raw scores."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from pycocotools import mask as mask_utils

from det_calib.capture.predictor import capture

pytest.importorskip("ultralytics")

NOISE = 0.05
MASK_NOISE = 0.5


def segment_model(cfg: str, seed: int = 0):
    """A yaml-built segment model, weights perturbed: varied scores, two distinct heads (YOLO26),
    masks unlike their boxes, and some boxes whose mask is empty; class biases drawn so that scores
    spread like a trained model's."""
    from ultralytics import YOLO

    torch.manual_seed(seed)
    yolo = YOLO(cfg)
    head = yolo.model.model[-1]
    mask_branches = [head.proto, head.cv4] + (
        [head.one2one_cv4] if getattr(head, "one2one_cv4", None) else []
    )
    with torch.no_grad():
        for p in yolo.model.parameters():
            p.add_(torch.randn_like(p) * NOISE)
        for branch in mask_branches:
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * MASK_NOISE)
        for branch in [head.cv3] + (
            [head.one2one_cv3] if getattr(head, "one2one_cv3", None) else []
        ):
            for level in branch:  # class scores spread over (0, 1) like a trained model's
                torch.nn.init.normal_(level[-1].weight, 0.0, 0.05)
                torch.nn.init.normal_(level[-1].bias, -4.0, 1.5)
    return yolo


def _predict(yolo, images, head: str):
    """predict(retina_masks=True), one image at a time; with the number of rows each image had
    before the predictor's empty-mask filter."""
    from ultralytics.models.yolo.segment import SegmentationPredictor

    before = []

    class Recording(SegmentationPredictor):
        def construct_result(self, pred, img, orig_img, img_path, proto):
            before.append(len(pred))
            return super().construct_result(pred, img, orig_img, img_path, proto)

    kw = {"nms": False} if head == "e2e" else {}
    results = [
        yolo.predict(
            str(p),
            imgsz=320,
            conf=1e-3,
            max_det=300,
            retina_masks=True,
            predictor=Recording,
            verbose=False,
            **kw,
        )[0]
        for p in images
    ]
    return results, before


def _assert_equal_to_predict(df: pl.DataFrame, results) -> tuple[int, list[float]]:
    n, fills = 0, []
    for i, r in enumerate(results):
        d = df.filter(pl.col("image_id") == i)
        ref = r.boxes.data.numpy()
        assert d.height == len(ref), f"image {i}: {d.height} boxes, predict {len(ref)}"
        np.testing.assert_array_equal(
            d.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), ref[:, :4]
        )
        np.testing.assert_array_equal(d["conf"].to_numpy().astype(np.float32), ref[:, 4])
        np.testing.assert_array_equal(d["cls"].to_numpy(), ref[:, 5].astype(int))
        sig32 = torch.sigmoid(torch.tensor(d["logit"].to_numpy(), dtype=torch.float32)).numpy()
        assert (
            np.abs(sig32 - d["conf"].to_numpy()).max(initial=0) <= 1e-6
        )  # the logit is the box's class logit
        h, w = r.orig_shape
        assert (d["img_h"] == h).all() and (d["img_w"] == w).all()
        if not len(ref):
            assert r.masks is None
            continue
        masks = mask_utils.decode(
            [{"size": [h, w], "counts": c} for c in d["segm"].to_list()]
        ).transpose(2, 0, 1)
        np.testing.assert_array_equal(masks, r.masks.data.numpy().astype(np.uint8))
        area = np.maximum((ref[:, 2] - ref[:, 0]) * (ref[:, 3] - ref[:, 1]), 1)
        fills += list(masks.reshape(len(masks), -1).sum(1) / area)
        n += len(ref)
    return n, fills


@pytest.mark.parametrize("cfg", ["yolo26n-seg.yaml", "yolo11n-seg.yaml"])
def test_segment_capture_equals_predict(cfg, fixture_images):
    images = [fixture_images[k] for k in (0, 3, 6, 9)]
    df = capture(
        segment_model(cfg), images, heads="auto", imgsz=320, conf=1e-3, progress=False, workers=1
    )
    assert df.schema["segm"] == pl.Binary
    heads = sorted(df["head"].unique())
    assert heads == (["e2e", "nms"] if cfg.startswith("yolo26") else ["nms"])
    dropped, fills = 0, []
    for head in heads:
        results, before = _predict(segment_model(cfg), images, head)
        n, f = _assert_equal_to_predict(df.filter(pl.col("head") == head), results)
        dropped += sum(before) - n
        fills += f
        assert n >= 20, (head, n)
    # not vacuous: many masks that are not their boxes; some boxes had empty masks and were dropped
    unlike = float(np.mean(np.array(fills) < 0.9))
    assert unlike >= 0.1 and dropped > 0, (unlike, dropped)
    shapes = {(h, w) for h, w in df.select("img_h", "img_w").unique().iter_rows()}
    assert len(shapes) >= 2  # images of two sizes


def test_single_head_equals_both_heads(fixture_images):
    images = fixture_images[:3]
    both = capture(
        segment_model("yolo26n-seg.yaml"),
        images,
        heads=("nms", "e2e"),
        imgsz=320,
        progress=False,
        workers=1,
    )
    for head in ("nms", "e2e"):
        one = capture(
            segment_model("yolo26n-seg.yaml"),
            images,
            head=head,
            imgsz=320,
            progress=False,
            workers=1,
        )
        assert one.height > 0
        assert one.equals(both.filter(pl.col("head") == head))


def test_detector_table_has_no_segm(demo_model_path, fixture_images):
    df = capture(
        str(demo_model_path), fixture_images[:2], heads="auto", imgsz=320, progress=False, workers=1
    )
    assert "segm" not in df.columns and df.height > 0


def test_shapes_segment_model_equals_predict(shapes_seg_path, fixture_images):
    """The demo detector's layers in a YOLO26n-seg: realistic boxes, the demo's classes."""
    from ultralytics import YOLO

    images = fixture_images[:4]
    df = capture(str(shapes_seg_path), images, heads="auto", imgsz=320, progress=False, workers=1)
    for head in ("nms", "e2e"):
        results, _ = _predict(YOLO(str(shapes_seg_path)), images, head)
        n, _ = _assert_equal_to_predict(df.filter(pl.col("head") == head), results)
        assert n >= 20
        assert (
            df.filter((pl.col("head") == head) & (pl.col("conf") > 0.25)).height >= 8
        )  # confident boxes


def test_capture_without_masks_keeps_the_boxes(fixture_images):
    """payload=False (a segment model on box labels): the same boxes (predict's empty-mask filter decided
    without rasterising), segm null."""
    images = [fixture_images[k] for k in (0, 3, 6, 9)]
    with_masks = capture(
        segment_model("yolo26n-seg.yaml"),
        images,
        heads="auto",
        imgsz=320,
        conf=1e-3,
        progress=False,
        workers=1,
    )
    from det_calib.capture.predictor import Capturer

    without = Capturer(
        segment_model("yolo26n-seg.yaml"),
        heads="auto",
        imgsz=320,
        conf=1e-3,
        workers=1,
        payload=False,
    )(images, progress=False)
    assert (
        without.schema["segm"] == pl.Binary and without["segm"].null_count() == without.height > 100
    )
    assert without.drop("segm").equals(with_masks.drop("segm"))


def test_parts_on_box_labels_have_no_masks(tmp_path, shapes_seg_path, fixture_yaml, fixture_images):
    """A capture to parts on box labels rasterises no mask: the boxes of the capture with masks, segm null."""
    from det_calib.capture.parts import capture_to_parts, read_parts

    direct = capture(
        str(shapes_seg_path),
        fixture_images,
        heads="auto",
        imgsz=320,
        split="fixture",
        image_names=[p.name for p in fixture_images],
        progress=False,
        workers=1,
    )
    capture_to_parts(
        shapes_seg_path, fixture_yaml, "fixture", tmp_path / "parts", imgsz=320, progress=False
    )
    parts = read_parts(tmp_path / "parts", expect_model=shapes_seg_path)
    assert parts["segm"].null_count() == parts.height == direct.height > 0
    assert parts.drop("image", "segm").equals(direct.drop("image", "segm"))


def test_parts_carry_masks(
    tmp_path, shapes_seg_path, polygon_fixture_yaml, fixture_images, local_ray
):
    """Shards (some empty) and Ray parts read back as the single-process capture, masks included (polygon labels)."""
    from det_calib.capture.parts import capture_to_parts, read_parts
    from det_calib.data.box_table import read_boxes

    fixture_yaml = polygon_fixture_yaml
    direct = capture(
        str(shapes_seg_path),
        fixture_images,
        heads="auto",
        imgsz=320,
        split="fixture",
        image_names=[p.name for p in fixture_images],
        progress=False,
        workers=1,
    )
    n = 16  # 12 images: at least 4 shards are empty
    for i in range(n):
        capture_to_parts(
            shapes_seg_path,
            fixture_yaml,
            "fixture",
            tmp_path / "shards",
            shard=f"{i}/{n}",
            imgsz=320,
            progress=False,
        )
    shards = read_parts(tmp_path / "shards", expect_model=shapes_seg_path)
    assert shards.schema["segm"] == pl.Binary and shards.height == direct.height > 0
    assert shards["segm"].null_count() == 0
    assert shards.drop("image").equals(direct.drop("image"))
    # the box table's reader keeps the column (a run's --boxes reuse reads boxes.parquet through it)
    shards.write_parquet(tmp_path / "boxes.parquet")
    assert read_boxes(tmp_path / "boxes.parquet", matched=False).equals(shards)

    pytest.importorskip("ray")  # the step needs Ray (conftest's local_ray is None without it)
    from det_calib.capture.ray_capture import capture_ray

    capture_ray(  # on the session's Ray instance (conftest's ``local_ray``)
        shapes_seg_path,
        fixture_yaml,
        "fixture",
        tmp_path / "ray",
        images_per_part=5,
        actors=2,
        imgsz=320,
    )
    assert read_parts(tmp_path / "ray", expect_model=shapes_seg_path).equals(shards)

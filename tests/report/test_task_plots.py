"""The pose and OBB matching figures: rotated-box corners, one panel per image, a palette PNG."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from det_calib.report.task_plots import _PALETTE, _palette_png
from det_calib.tasks.obb.report_panel import RotatedPanel, rotated_examples_figure, xywhr_corners
from det_calib.tasks.pose.report_panel import PosePanel, pose_examples_figure

pytestmark = pytest.mark.fast


def test_corners_equal_ultralytics_xywhr2xyxyxyxy():
    from ultralytics.utils.ops import xywhr2xyxyxyxy

    rng = np.random.default_rng(0)
    b = np.c_[rng.uniform(0, 300, (50, 2)), rng.uniform(1, 80, (50, 2)), rng.uniform(-4, 4, 50)]
    want = xywhr2xyxyxyxy(torch.as_tensor(b)).numpy()
    assert np.allclose(xywhr_corners(b), want, atol=1e-9)
    # the corners span the box: sides w and h, centre at (cx, cy)
    q = xywhr_corners(b)
    assert np.allclose(np.linalg.norm(q[:, 1] - q[:, 2], axis=1), b[:, 2])
    assert np.allclose(np.linalg.norm(q[:, 0] - q[:, 1], axis=1), b[:, 3])
    assert np.allclose(q.mean(1), b[:, :2])


def _image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(
        0, 256, (60, 80, 3), dtype=np.uint8
    )  # noise: a PNG's worst case


def _pose() -> PosePanel:
    gt = np.array(
        [[[10, 10, 2], [20, 10, 2], [15, 20, 1]], [[50, 40, 2], [60, 40, 0], [55, 50, 2]]], float
    )
    kpts = np.array(
        [
            [[11, 10, 0.9], [20, 11, 0.8], [15, 21, 0.3]],
            [[70, 50, 0.9], [75, 50, 0.9], [72, 55, 0.2]],
        ]
    )
    return PosePanel(
        "a.png: 1 matched, 1 not",
        _image(),
        gt,
        kpts,
        ["matched", "unmatched"],
        ["circle 0.90, OKS 0.95", "star 0.30, OKS 0.00"],
        [(8, 8, 22, 22), (68, 48, 79, 59)],
        [0, -1],
    )


def _rotated() -> RotatedPanel:
    gt = np.array([[20, 20, 16, 8, 0.3], [60, 40, 10, 10, 0.0]])
    boxes = np.array([[21, 20, 16, 8, 0.35], [40, 50, 12, 4, -1.2]])
    return RotatedPanel(
        "b.png: 1 matched, 1 not",
        _image(1),
        gt,
        boxes,
        ["matched", "unmatched"],
        ["rectangle 0.91, ProbIoU 0.93", "square 0.40, ProbIoU 0.00"],
    )


@pytest.mark.parametrize(
    "draw,panel", [(pose_examples_figure, _pose), (rotated_examples_figure, _rotated)]
)
def test_one_panel_per_image_in_a_palette_png(draw, panel):
    one, three = (Image.open(io.BytesIO(draw([panel()] * n))) for n in (1, 3))
    assert one.format == three.format == "PNG" and one.mode == three.mode == "P"
    assert one.size[1] == three.size[1] and three.size[0] == 3 * one.size[0]
    assert len(three.getcolors(maxcolors=1 << 16)) <= _PALETTE
    with pytest.raises(ValueError, match="at least one panel"):
        draw([])


def test_palette_png_keeps_the_picture():
    rgb = np.zeros((40, 50, 3), np.uint8)
    rgb[10:30, 5:25] = (0, 153, 136)  # the matched colour on black: two colours survive exactly
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    out = np.asarray(Image.open(io.BytesIO(_palette_png(buf.getvalue()))).convert("RGB"))
    assert out.shape == rgb.shape and np.array_equal(out, rgb)
    yy, xx = np.mgrid[0:240, 0:320]
    grain = np.random.default_rng(2).integers(0, 16, (240, 320, 1))
    photo = np.clip(np.stack([xx * 0.75, yy, 120 + 0 * xx], -1) + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(photo).save(
        buf, format="PNG"
    )  # a gradient with grain, as the demo's backgrounds
    small = _palette_png(buf.getvalue())
    assert len(small) < len(buf.getvalue()) / 2
    back = np.asarray(Image.open(io.BytesIO(small)).convert("RGB"), dtype=float)
    assert np.abs(back - photo).mean() < 4

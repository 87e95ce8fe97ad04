"""The Matching section's figure: kept masks coloured by their match over the image, ground truths outlined."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from det_calib.tasks.segment.report_plots import (
    _ALPHA,
    COLOURS,
    MaskPanel,
    _composite,
    mask_examples_figure,
)

pytestmark = pytest.mark.fast


def _panel() -> MaskPanel:
    img = np.full((20, 30, 3), 200, np.uint8)
    ok, bad, gt = (np.zeros((20, 30), np.uint8) for _ in range(3))
    ok[2:8, 2:8] = 1
    bad[10:15, 20:28] = 1
    gt[2:9, 2:9] = 1
    return MaskPanel(
        "a.png: 1 matched, 1 not",
        img,
        gt[None],
        np.stack([ok, bad]),
        ["matched", "unmatched"],
        ["circle 0.90", "star 0.30"],
        [(2, 2), (20, 10)],
        gt_boxes=[(12.0, 1.0, 18.0, 6.0)],
    )


def test_masks_are_blended_in_their_state_colour():
    p = _panel()
    out = _composite(p)
    base = 200 * 0.75
    for (y, x), state in (((4, 4), "matched"), ((12, 24), "unmatched")):
        rgb = np.array([int(COLOURS[state][i : i + 2], 16) for i in (1, 3, 5)])
        assert np.allclose(out[y, x], (1 - _ALPHA) * base + _ALPHA * rgb, atol=1)
    assert np.allclose(out[18, 1], base, atol=1)  # outside every mask: the image, dimmed


def test_figure_is_a_png_of_one_panel_per_image():
    png = mask_examples_figure([_panel(), _panel()])
    im = Image.open(io.BytesIO(png))
    assert im.format == "PNG" and im.size[0] > im.size[1]
    with pytest.raises(ValueError, match="at least one panel"):
        mask_examples_figure([])

"""Masks rebuilt from mask coefficients and protos equal Ultralytics' predict (retina_masks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from det_calib.demo import fixture_data_yaml
from det_calib.tasks import get_task
from det_calib.tasks.segment.mask_rebuild import (
    _encode_masks,
    _mask_rles,
    _rebuild_masks,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def filled_boxes(protos, coefficients, boxes, image_shape):
    """The segment task's rebuild without rasterising: which boxes keep a mask."""
    keep, masks = get_task("segment").rebuild_payload(
        protos, coefficients, boxes, image_shape, rasterise=False
    )
    assert masks == [None] * int(keep.sum())
    return keep


pytest.importorskip("ultralytics")

NOISE = 0.05
MASK_NOISE = 0.5


def _predict(end2end: bool):
    """predict of a yaml-built YOLO26n-seg (random weights) on four fixture images, with each
    image's protos and every box row of the predictor (before its empty-mask filter)."""
    from ultralytics import YOLO
    from ultralytics.models.yolo.segment import SegmentationPredictor

    seen = []

    class Recording(SegmentationPredictor):
        def construct_result(self, pred, img, orig_img, img_path, proto):
            result = super().construct_result(pred, img, orig_img, img_path, proto)
            seen.append((pred.clone(), proto.clone(), orig_img.shape[:2]))  # boxes scaled in place
            return result

    torch.manual_seed(0)
    model = YOLO("yolo26n-seg.yaml")
    head = model.model.model[-1]
    with (
        torch.no_grad()
    ):  # random weights, perturbed: varied scores, two distinct heads, masks unlike boxes
        for p in model.model.parameters():
            p.add_(torch.randn_like(p) * NOISE)
        for branch in (head.proto, head.cv4, head.one2one_cv4):
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * MASK_NOISE)
    images = sorted((fixture_data_yaml().parent / "images" / "fixture").glob("*.jpg"))[:4]
    results = model.predict(
        [str(p) for p in images],
        imgsz=320,
        conf=1e-4,
        max_det=60,
        retina_masks=True,
        predictor=Recording,
        verbose=False,
        nms=False if end2end else None,
    )
    return results, seen


@pytest.mark.parametrize("end2end", [False, True], ids=["one-to-many", "one-to-one"])
def test_rebuilt_masks_equal_predict(end2end):
    results, seen = _predict(end2end)
    assert len(results) == len(seen) == 4
    shapes, n_boxes, n_dropped, fills = set(), 0, 0, []
    for res, (pred, proto, shape) in zip(results, seen):
        masks = _rebuild_masks(proto, pred[:, 6:], pred[:, :4], shape)
        keep = (
            masks.reshape(len(masks), -1).max(1) > 0
        )  # the predictor drops boxes with empty masks
        assert int(keep.sum()) == len(res.boxes)
        np.testing.assert_array_equal(pred[keep.tolist(), :4].numpy(), res.boxes.xyxy.numpy())
        np.testing.assert_array_equal(masks[keep], res.masks.data.numpy().astype(np.uint8))
        # and through RLE, box by box
        rles = _mask_rles(proto, pred[:, 6:], pred[:, :4], shape)
        decoded = mask_utils.decode([{"size": list(shape), "counts": c} for c in rles]).transpose(
            2, 0, 1
        )
        np.testing.assert_array_equal(decoded, masks)
        shapes.add(tuple(shape))
        n_boxes += len(res.boxes)
        n_dropped += int((~keep).sum())
        b = res.boxes.xyxy.numpy()
        area = np.maximum((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), 1)
        fills += list(masks[keep].reshape(int(keep.sum()), -1).sum(1) / area)
    # not vacuous: letterboxed sizes, many boxes, masks that are not their boxes, empty masks dropped
    assert n_boxes >= 100 and len(shapes) >= 2 and n_dropped >= 5 and np.median(fills) < 0.5


@pytest.mark.parametrize("end2end", [False, True], ids=["one-to-many", "one-to-one"])
def test_filled_boxes_equal_the_rebuilt_masks(end2end):
    """The empty-mask filter decided without rasterising is the rebuilt masks' own, box for box."""
    _, seen = _predict(end2end)
    n, empty = 0, 0
    for pred, proto, shape in seen:
        masks = _rebuild_masks(proto, pred[:, 6:], pred[:, :4], shape)
        want = masks.reshape(len(masks), -1).max(1, initial=0) > 0
        np.testing.assert_array_equal(filled_boxes(proto, pred[:, 6:], pred[:, :4], shape), want)
        n, empty = n + len(want), empty + int((~want).sum())
    assert n >= 100 and empty >= 5  # not vacuous: many boxes, some of them empty


def test_filled_boxes_edge_cases():
    """Boxes with no pixel (zero width, outside the image) are empty; a box on a positive plateau is filled."""
    protos = torch.zeros(2, 8, 8)
    protos[0] = 1.0  # every prototype value 1: a coefficient's sign is the mask
    coef = torch.tensor([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    boxes = torch.tensor(
        [
            [4.0, 4.0, 20.0, 20.0],
            [5.0, 5.0, 5.0, 9.0],
            [4.0, 4.0, 20.0, 20.0],
            [40.0, 40.0, 50.0, 50.0],
        ]
    )
    np.testing.assert_array_equal(
        filled_boxes(protos, coef, boxes, (32, 32)), [True, False, False, False]
    )
    assert filled_boxes(protos, coef[:0], boxes[:0], (32, 32)).shape == (0,)


def test_encode_masks_known_answer():
    m = np.zeros((2, 5, 4), np.uint8)
    m[0, 1:3, 1:4] = 1
    counts = _encode_masks(m)
    assert len(counts) == 2
    assert mask_utils.area({"size": [5, 4], "counts": counts[0]}) == 6
    assert mask_utils.area({"size": [5, 4], "counts": counts[1]}) == 0
    assert _encode_masks(np.zeros((0, 5, 4), np.uint8)) == []
    with pytest.raises(ValueError, match=r"shape \(n, H, W\)"):
        _encode_masks(np.zeros((5, 4), np.uint8))


def test_the_capture_asks_the_task_with_prototypes():
    """The capture rebuilds a payload through the task (``Task.rebuild_payload``): the segment task, the
    one registered task with prototypes, keeps the boxes whose mask has a pixel with their RLE counts (the
    mask is the box's pixels on a positive plateau); a task without prototypes refuses."""
    from det_calib.tasks import TASKS

    assert [t.name for t in TASKS.values() if t.prototypes] == ["segment"]
    protos = torch.zeros(2, 8, 8)
    protos[0] = 1.0
    coef = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    boxes = torch.tensor([[4.0, 4.0, 20.0, 12.0], [4.0, 4.0, 20.0, 20.0], [0.0, 16.0, 32.0, 32.0]])
    keep, rles = get_task("segment").rebuild_payload(protos, coef, boxes, (32, 32))
    assert keep.tolist() == [True, False, True] and len(rles) == 2
    want = np.zeros((2, 32, 32), np.uint8)
    want[0, 4:12, 4:20] = want[1, 16:32, 0:32] = 1
    for r, w in zip(rles, want):
        assert np.array_equal(mask_utils.decode({"size": [32, 32], "counts": r}), w)
    with pytest.raises(NotImplementedError, match="a detect model carries no prototypes"):
        get_task("detect").rebuild_payload(protos, coef, boxes, (32, 32))

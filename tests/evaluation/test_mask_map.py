"""Box and mask mAP of a segment model's boxes by pycocotools, before and after calibration."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from pycocotools import mask as mask_utils
from segment_checkpoints import predict_table

from det_calib.calibrators.registry import make_calibrator
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.tasks import load_task_split
from det_calib.tasks.segment.evaluation_map import (
    MASK_MAP_KEYS,
    coco_mask_maps,
    segment_map_check,
    segment_maps,
)
from det_calib.tasks.segment.labels import segment_rles

N_IMAGES = 12


@dataclass
class _Settings:
    max_det: int = 300
    map_engine: str = "pycocotools"


@pytest.fixture(scope="module")
def seg_split(small_demo):
    return load_task_split(
        load_data_yaml(small_demo["segment"]), "test", task="segment", limit=N_IMAGES
    )


def _gt_as_detections(split, *, box_masks: bool = False) -> pl.DataFrame:
    """The split's ground truth as detections (score 1 - k/1000): each GT's own mask, or its box filled."""
    g = split.gt
    counts = g["segm"].to_list()
    if box_masks:
        counts = []
        for i, x1, y1, x2, y2 in g.select("image_id", "x1", "y1", "x2", "y2").iter_rows():
            w, h = (int(v) for v in split.sizes[i])
            counts.append(
                mask_utils.frPyObjects(np.array([[x1, y1, x2 - x1, y2 - y1]]), h, w)[0]["counts"]
            )
    conf = 1 - np.arange(g.height) / (10 * g.height)
    return g.select("image_id", "x1", "y1", "x2", "y2", "cls").with_columns(
        pl.Series("conf", conf),
        pl.Series("logit", np.log(conf) - np.log1p(-conf + 1e-12)),
        pl.Series("segm", counts, dtype=pl.Binary),
    )


@pytest.mark.fast
def test_masks_are_scored_as_masks_and_boxes_as_boxes(seg_split):
    own = _gt_as_detections(seg_split)
    assert coco_mask_maps(own, seg_split, [own["conf"].to_numpy()])[0]["map50_95"] == pytest.approx(
        1.0
    )
    # the GT boxes filled as masks: box mAP stays 1, mask mAP falls (shapes are not their boxes)
    boxy = _gt_as_detections(seg_split, box_masks=True)
    both = segment_maps(boxy, seg_split, [boxy["conf"].to_numpy()])[0]
    assert both["bbox"]["map50_95"] == pytest.approx(1.0)
    assert 0.05 < both["segm"]["map50_95"] < 0.9


@pytest.mark.fast
def test_mask_map_equals_pycocotools_on_planted_detections(seg_split):
    """Every other GT found (its own mask), the others missed, under two scorings: the figures equal a
    COCOeval built here on its own from the masks (no box, no area range of det_calib's), and about half
    the objects are found."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    d = _gt_as_detections(seg_split)[::2]
    scores = [d["conf"].to_numpy(), d["conf"].to_numpy()[::-1].copy()]
    got = coco_mask_maps(d, seg_split, scores)
    rles = segment_rles(seg_split)
    coco = COCO()
    images = [
        {"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(seg_split.sizes)
    ]
    coco.dataset = {
        "images": images,
        "categories": [{"id": c} for c in sorted(set(seg_split.gt["cls"].to_list()))],
        "annotations": [
            {
                "id": k + 1,
                "image_id": int(i),
                "category_id": int(c),
                "segmentation": r,
                "area": float(mask_utils.area(r)),
                "iscrowd": 0,
            }
            for k, (i, c, r) in enumerate(zip(seg_split.gt["image_id"], seg_split.gt["cls"], rles))
        ],
    }
    coco.createIndex()
    for sc, mine in zip(scores, got):
        dets = [
            {
                "image_id": int(i),
                "category_id": int(c),
                "score": float(s),
                "segmentation": rles[2 * k],
            }
            for k, (i, c, s) in enumerate(zip(d["image_id"], d["cls"], sc))
        ]
        ev = COCOeval(coco, coco.loadRes(dets), "segm")
        ev.params.maxDets = [300]
        ev.evaluate()
        ev.accumulate()
        p = ev.eval["precision"][:, :, :, 0, 0]
        assert mine["map50_95"] == pytest.approx(float(p[p > -1].mean()), abs=1e-12)
        assert 0.3 < mine["map50_95"] < 0.7  # half the objects found


@pytest.fixture(scope="module")
def predicted(demo_seg_checkpoint, seg_split):
    return predict_table(demo_seg_checkpoint, seg_split.images)


@pytest.mark.slow
def test_segment_map_check_identical_for_a_ranking_preserving_map(predicted, seg_split):
    z = np.random.default_rng(0).normal(-1, 2, 5000)
    y = np.random.default_rng(1).random(5000) < 1 / (1 + np.exp(-0.6 * z))
    out = segment_map_check(predicted, seg_split, make_calibrator("platt").fit(z, y), _Settings())
    assert out["map_identical"] is True and out["mask_map_identical"] is True
    assert out["mask_map50_95_before"] == out["mask_map50_95_after"] > 0
    assert out["map50_95_before"] != out["mask_map50_95_before"]  # two protocols, two figures
    # not vacuous: a scoring that inverts the order changes both figures
    flipped = segment_maps(
        predicted, seg_split, [predicted["conf"].to_numpy(), 1 - predicted["conf"].to_numpy()]
    )
    assert flipped[0]["segm"] != flipped[1]["segm"] and flipped[0]["bbox"] != flipped[1]["bbox"]


@pytest.mark.slow
def test_box_only_labels_give_no_mask_map(predicted, small_demo):
    box_only = load_split(load_data_yaml(small_demo["segment"]), "test", limit=N_IMAGES)
    out = segment_map_check(
        predicted,
        box_only,
        make_calibrator("none").fit(np.zeros(4), np.array([0, 1, 0, 1])),
        _Settings(),
    )
    assert all(out[k] is None for k in MASK_MAP_KEYS) and out["map_identical"] is True
    with pytest.raises(InputError, match="read without masks"):
        coco_mask_maps(predicted, box_only, [predicted["conf"].to_numpy()])
    with pytest.raises(InputError, match="needs a mask for every box"):
        coco_mask_maps(
            predicted.with_columns(pl.lit(None, dtype=pl.Binary).alias("segm")),
            box_only,
            [predicted["conf"].to_numpy()],
        )

"""benchmarks/measure_segment.py's measuring function (the deployed kept-set ECE of a segment model) on
tables built here with known answers, by mask IoU and by box IoU."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from pycocotools import mask as mask_utils

from det_calib.data.ground_truth import load_data_yaml
from det_calib.tasks import load_task_split
from det_calib.tasks.segment.labels import segment_rles

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("measure_segment")


@pytest.fixture(scope="module")
def split(small_demo):
    return load_task_split(load_data_yaml(small_demo["segment"]), "test", task="segment", limit=20)


def _box_rle(split, i, x1, y1, x2, y2) -> bytes:
    w, h = (int(v) for v in split.sizes[i])
    return mask_utils.frPyObjects(np.array([[x1, y1, x2 - x1, y2 - y1]]), h, w)[0]["counts"]


def _detections(split, conf: float, *, box_masks: bool = False) -> pl.DataFrame:
    """Every ground truth found once at ``conf``: its own box, and its own mask or its box filled."""
    g = split.gt
    segm = (
        [_box_rle(split, *r) for r in g.select("image_id", "x1", "y1", "x2", "y2").iter_rows()]
        if box_masks
        else g["segm"].to_list()
    )
    return g.select("image_id", "x1", "y1", "x2", "y2", "cls").with_columns(
        pl.lit(conf).alias("conf"), pl.Series("segm", segm, dtype=pl.Binary)
    )


@pytest.mark.parametrize("match", ["mask", "box"])
def test_known_answers(bench, split, match):
    n = split.gt.height
    found = _detections(split, 0.9)
    assert bench.kept_set_figures(found, split, match=match) == (n, pytest.approx(0.1))
    # each found twice (0.9 and 0.6): the second copy is a duplicate, wrong; a third copy below 0.25 is not kept
    twice = pl.concat(
        [
            found,
            found.with_columns(pl.lit(0.6).alias("conf")),
            found.with_columns(pl.lit(0.2).alias("conf")),
        ]
    )
    assert bench.kept_set_figures(twice, split, match=match) == (
        2 * n,
        pytest.approx((0.1 + 0.6) / 2),
    )


def test_masks_decide_where_the_run_matched_by_masks(bench, split):
    """A box-filled mask matches by box IoU, and by mask IoU exactly where the shape fills half its box."""
    boxy = _detections(split, 0.9, box_masks=True)
    n = split.gt.height
    assert bench.kept_set_figures(boxy, split, match="box") == (n, pytest.approx(0.1))
    gt = segment_rles(split)
    ious = [
        mask_utils.iou([{"size": g["size"], "counts": c}], [g], [0])[0, 0]
        for g, c in zip(gt, boxy["segm"].to_list())
    ]
    share = float(np.mean(np.asarray(ious) >= 0.5))
    assert 0.2 < share < 1  # not vacuous: some shapes fill less than half their box
    assert bench.kept_set_figures(boxy, split, match="mask") == (n, pytest.approx(abs(0.9 - share)))


def test_prediction_table_and_verdict(bench, split):
    rows = [[0, 1.0, 2.0, 30.0, 40.0, 0.7, 3]]
    counts = split.gt["segm"][0].decode()
    t = bench.prediction_table(rows, [counts])
    assert t.row(0) == (0, 1.0, 2.0, 30.0, 40.0, 0.7, 3, counts.encode())
    assert bench.prediction_table([], []).height == 0
    case = dict(
        size="full",
        head="nms",
        method="temperature",
        images=1,
        match="mask",
        run_raw=0.1,
        run_calibrated=0.05,
        maps={"box mAP": True, "mask mAP": True},
    )
    good = [
        bench.Case(raw=(10, 0.2), calibrated=(10, 0.1), **case),
        bench.Case(raw=(10, 0.2), calibrated=(10, 0.2), **case),
    ]
    assert bench.verdict(good) == (pytest.approx(0.75), pytest.approx(1.0), True)
    bad = good + [bench.Case(raw=(10, 0.1), calibrated=(10, 0.11), **case)]
    assert bench.verdict(bad)[2] is False  # 1.1x: a case above 1.05x
    assert "NOT met" in bench.table(bad, "m.pt") and "| full | nms | temperature |" in bench.table(
        good, "m.pt"
    )

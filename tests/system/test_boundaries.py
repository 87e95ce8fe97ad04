"""Values exactly on every boundary the product compares against.

| comparison | where | rule |
|---|---|---|
| matching IoU | ``matching`` (tau = 0.5 for ``correct``, 0.1 for ``loc_iou``) | ``IoU >= tau`` matches |
| kept set | ``thresholds``, the thresholded ECE | ``conf > t`` (as Ultralytics' NMS filter) |
| equal-width bins | ECE, MCE, D-ECE, LaECE | ``[lo, hi)``, the last closed at 1; 0 in the first |
| fit subset | ``--fit-min-conf`` | ``conf >= fit_min_conf`` (in ``run/test_head_figures``, on a real run) |
| bootstrap | ``metrics.bootstrap_ci`` | every image can be drawn, uniformly |
"""

from __future__ import annotations

import functools

import numpy as np
import polars as pl
import pytest

from det_calib.errors import InputError
from det_calib.evaluation.kept_set import (
    equivalent_threshold,
    precision_recall_vs_conf,
    threshold_shift,
)
from det_calib.matching.one_to_one import box_iou, match_table
from det_calib.metrics import calibration as metrics
from det_calib.metrics.detection_metrics import dece

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


# ----------------------------------------------------------------------------- matching
def _table(boxes, scores, cls=None):
    n = len(boxes)
    b = np.asarray(boxes, dtype=float)
    return pl.DataFrame(
        {
            "image_id": np.zeros(n, np.int64),
            "x1": b[:, 0],
            "y1": b[:, 1],
            "x2": b[:, 2],
            "y2": b[:, 3],
            "cls": np.asarray(cls if cls is not None else [0] * n, np.int32),
            "conf": np.asarray(scores, float),
        }
    )


@pytest.mark.parametrize(
    "tau, box", [(0.5, [0, 0, 10, 5]), (0.1, [0, 0, 10, 1]), (0.1, [0, 0, 1, 10])]
)
def test_match_table_iou_exactly_at_threshold(tau, box):
    gt = _table([[0, 0, 10, 10]], [1.0]).drop("conf").with_columns(pl.lit(False).alias("crowd"))
    r = match_table(_table([box], [0.9]), gt, iou_threshold=tau)
    assert r["iou"][0] == tau and r["correct"][0]
    r = match_table(_table([box], [0.9]), gt, iou_threshold=float(np.nextafter(tau, 1)))
    assert not r["correct"][0]


def test_match_table_passes_max_dets_and_takes_empty_ground_truth():
    gt = _table([[0, 0, 10, 10], [20, 0, 30, 10]], [1.0, 1.0]).drop("conf")
    boxes = _table([[0, 0, 10, 10], [20, 0, 30, 10]], [0.9, 0.8])
    assert match_table(boxes, gt)["correct"].to_list() == [True, True]
    # COCO maxDets: only the top-scoring box of each (image, class) is matched
    assert match_table(boxes, gt, max_dets=1)["correct"].to_list() == [True, False]
    r = match_table(boxes, gt.head(0))
    assert r["correct"].to_list() == [False, False] and r["iou"].to_list() == [0.0, 0.0]
    assert (
        r.schema["correct"] == pl.Boolean
        and r.schema["iou"] == pl.Float64
        and r.schema["ignore"] == pl.Boolean
    )


def test_iou_of_boxes_smaller_than_a_pixel():
    """Normalised (0..1) coordinates: every union is below 1 and must still count."""
    assert box_iou([[0, 0, 0.5, 0.5]], [[0, 0, 0.5, 0.25], [0.5, 0, 1, 0.5]]).tolist() == [
        [0.5, 0.0]
    ]


def test_crowd_flags_as_integers():
    a, b = [[0, 0, 10, 10]], [[0, 0, 20, 10], [0, 0, 20, 10]]
    assert box_iou(a, b, crowd=np.array([0, 1])).tolist() == [
        [0.5, 1.0]
    ]  # crowd: intersection / det area
    assert box_iou(a, b, crowd=np.array([1, 0])).tolist() == [[1.0, 0.5]]
    for bad in (np.array([0, 2]), np.array([0.0, 1.0])):
        with pytest.raises(InputError, match="`crowd` must hold booleans"):
            box_iou(a, b, crowd=bad)


# ----------------------------------------------------------------------------- kept set
def test_threshold_shift_score_on_the_threshold_is_not_kept():
    t = 0.25
    before = np.array([0.25, 0.5, np.nextafter(0.25, 1), 0.1])
    after = np.array([0.3, 0.25, 0.2, 0.25])
    y = np.array([True, False, True, True])
    s = threshold_shift(before, after, y, conf=t, n_gt=5)
    assert (s.kept_before, s.kept_after) == (2, 1)  # 0.5, 0.25+ulp / 0.3
    assert (s.added, s.added_correct, s.removed, s.removed_correct) == (1, 1, 2, 1)
    assert s.precision_before == 0.5 and s.precision_after == 1.0
    assert s.recall_before == 0.2 and s.recall_after == 0.2


def test_precision_recall_vs_conf_on_the_grid():
    conf = np.array([0.25, 0.5, 0.75, 1.0])
    y = np.array([False, True, True, True])
    pr = precision_recall_vs_conf(conf, y, n_gt=4, grid=np.array([0.0, 0.25, 0.5, 0.75, 1.0]))
    assert pr.kept.tolist() == [4, 3, 2, 1, 0]
    assert pr.precision[:4].tolist() == [0.75, 1.0, 1.0, 1.0] and np.isnan(pr.precision[4])
    assert pr.recall.tolist() == [0.75, 0.75, 0.5, 0.25, 0.0]


# ----------------------------------------------------------------------------- bins
@pytest.mark.parametrize("m", [2, 10, 15, 25])
def test_value_on_each_edge_goes_to_the_upper_bin(m):
    edges = np.linspace(0.0, 1.0, m + 1)
    rb = metrics.reliability_bins(edges, np.zeros(m + 1), n_bins=m)
    assert rb.count.tolist() == [1] * (m - 1) + [
        2
    ]  # 0 in the first, 1.0 with the last edge below it
    below = np.nextafter(edges[1:-1], 0.0)
    rb = metrics.reliability_bins(below, np.zeros(m - 1), n_bins=m)
    assert rb.count.tolist() == [1] * (m - 1) + [0]


def test_ece_mce_laece_dece_with_scores_on_edges():
    # M = 4: edges 0, .25, .5, .75, 1. Bins: {0, .2} {.25} {.5} {.75, 1}
    conf = [0.0, 0.2, 0.25, 0.5, 0.75, 1.0]
    y = [0, 1, 1, 0, 1, 1]
    # |0.1-0.5|*2 + |0.25-1| + |0.5-0| + |0.875-1|*2 = 0.8 + 0.75 + 0.5 + 0.25 = 2.3
    assert metrics.ece(conf, y, n_bins=4) == pytest.approx(2.3 / 6, abs=1e-15)
    assert metrics.mce(conf, y, n_bins=4) == pytest.approx(0.75, abs=1e-15)
    # LaECE uses the same bins, per class; IoU targets instead of flags
    tgt = [0.0, 0.6, 0.9, 0.0, 0.8, 0.7]
    # class 0 alone: |0.2-0.6| + |0.25-0.9| + |0.5-0| + |1.75-1.5| = 0.4+0.65+0.5+0.25 = 1.8
    assert metrics.laece(conf, tgt, [0] * 6, n_bins=4) == pytest.approx(1.8 / 6, abs=1e-15)
    # two classes: {0, .25, .75} class 0 and {.2, .5, 1} class 1
    cls = [0, 1, 0, 1, 0, 1]
    c0 = (0.0 + abs(0.25 - 0.9) + abs(0.75 - 0.8)) / 3  # bins {0}, {.25}, {.75}
    c1 = (abs(0.2 - 0.6) + 0.5 + abs(1.0 - 0.7)) / 3  # bins {.2}, {.5}, {1}
    assert metrics.laece(conf, tgt, cls, n_bins=4) == pytest.approx((c0 + c1) / 2, abs=1e-15)
    # D-ECE: a feature on an edge moves the box to the upper feature bin
    f_on = [[0.5]] * 6
    f_mixed = [[0.0], [0.5], [0.0], [0.5], [0.0], [0.5]]
    assert dece(conf, y, f_on, n_bins=[4, 2]) == pytest.approx(2.3 / 6, abs=1e-15)
    # (0, .2) split -> |0-0| + |0.2-1|; .75 and 1 split -> |.75-1| + |1-1|
    assert dece(conf, y, f_mixed, n_bins=[4, 2]) == pytest.approx(
        (0.8 + 0.75 + 0.5 + 0.25) / 6, abs=1e-15
    )


# ----------------------------------------------------------------------------- bootstrap
def _recorder(seen, n_img):
    def stat(ids, weights=None):
        if weights is None:
            seen.append(np.bincount(ids.astype(int), minlength=n_img))
        else:
            seen.append(np.bincount(ids.astype(int), weights=weights, minlength=n_img))
        return 0.0

    return stat


@pytest.mark.parametrize("weighted", [True, False])
def test_bootstrap_draws_every_image_uniformly(weighted):
    n_img = 4
    ids = np.repeat(np.arange(n_img), [1, 2, 3, 1])  # image k has a known number of boxes
    seen: list[np.ndarray] = []
    stat = _recorder(seen, n_img)
    if not weighted:
        stat = functools.partial(lambda f, ids: f(ids), stat)  # hides `weights`: the indexing path
    metrics.bootstrap_ci(stat, ids, ids.astype(float), n_boot=2000, seed=3)
    boxes = np.array(seen)  # (n_boot, n_img) boxes of each image in each replicate
    draws = boxes / np.array([1, 2, 3, 1])
    assert np.array_equal(draws, np.round(draws))  # all boxes of a drawn image, once per draw
    assert (draws.sum(axis=1) == n_img).all()  # as many draws as images
    # each image drawn with probability 1/n_img per draw: mean n_img * 1/n_img = 1 per replicate
    np.testing.assert_allclose(draws.mean(axis=0), 1.0, atol=0.08)
    assert (draws[:, -1] > 0).mean() == pytest.approx(1 - (3 / 4) ** 4, abs=0.04)


def test_bootstrap_paths_agree_and_cover_the_last_image():
    rng = np.random.default_rng(0)
    img = np.repeat(np.arange(5), 30)
    conf = rng.uniform(size=150)
    y = rng.uniform(size=150) < conf
    y[img == 4] = ~y[
        img == 4
    ]  # the last image is badly calibrated: dropping it would narrow the interval
    f = functools.partial(metrics.ece, n_bins=10)
    # the percentile interval reads the draws directly (the default bias-corrected one is replayed in
    # run/test_head_figures)
    a = metrics.bootstrap_ci(f, img, conf, y, n_boot=300, seed=5, method="percentile")
    b = metrics.bootstrap_ci(
        lambda c, yy: metrics.ece(c, yy, n_bins=10),
        img,
        conf,
        y,
        n_boot=300,
        seed=5,
        method="percentile",
    )
    assert a == pytest.approx(b, rel=1e-12)
    # replay: images drawn with default_rng(seed).integers(0, n_img, n_img)
    r = np.random.default_rng(5)
    stats = []
    for _ in range(300):
        idx = np.concatenate([np.flatnonzero(img == k) for k in r.integers(0, 5, 5)])
        stats.append(metrics.ece(conf[idx], y[idx], n_bins=10))
    assert list(a) == pytest.approx(np.percentile(stats, [2.5, 97.5]).tolist(), rel=1e-12)


# ----------------------------------------------------------------------------- kept set: contract
def test_kept_set_compares_in_float64():
    """float32 scores (as Ultralytics reports them) are compared with the threshold in float64:
    float32(0.3) = 0.30000001192... is above 0.3 (numpy would compare in float32 otherwise)."""
    p = np.float32([0.3, 0.2])
    s = threshold_shift(
        p, np.float32([0.2, 0.3]), [1.0, 0.0], conf=0.3, n_gt=2
    )  # 0/1 floats as flags
    assert (s.kept_before, s.kept_after, s.removed_correct, s.added, s.added_correct) == (
        1,
        1,
        1,
        1,
        0,
    )


def test_threshold_shift_fields_and_bounds():
    s = threshold_shift(
        np.array([0.9, 0.1]),
        np.array([0.8, 0.2]),
        np.array([True, False]),
        conf=0.5,
        n_gt=3,
        temperature=2.0,
    )
    d = s.to_dict()
    assert (
        d["conf"] == 0.5 and type(d["conf"]) is float and d["n_gt"] == 3 and type(d["n_gt"]) is int
    )
    assert d["equivalent_conf"] == 0.5  # logit(0.5) = 0 for any T
    assert threshold_shift(
        np.array([0.9]), np.array([0.8]), np.array([True]), conf=0.25, n_gt=1, temperature=2.0
    ).equivalent_conf == pytest.approx(1 / (1 + 3**0.5))
    # thresholds 0 and 1 are valid (everything above 0, nothing above 1); no equivalent threshold there
    for t, kept in ((0.0, 2), (1.0, 0)):
        s = threshold_shift(
            np.array([0.9, 1.0]),
            np.array([0.8, 0.2]),
            np.array([True, False]),
            conf=t,
            n_gt=0,
            temperature=2.0,
        )
        assert s.kept_before == kept and s.equivalent_conf is None
        assert np.isnan(s.recall_before) and np.isnan(s.recall_after)
    assert np.isnan(
        threshold_shift(
            np.array([0.1]), np.array([0.1]), np.array([True]), conf=0.5, n_gt=1
        ).precision_before
    )
    for bad in (-0.1, 1.1):
        with pytest.raises(InputError, match="`conf` in \\[0, 1\\]"):
            threshold_shift(np.array([0.5]), np.array([0.5]), np.array([True]), conf=bad, n_gt=1)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(InputError, match="`conf` in \\(0, 1\\)"):
            equivalent_threshold(bad, 2.0)


def test_precision_recall_default_grid_and_no_ground_truth():
    pr = precision_recall_vs_conf(np.array([0.25, 0.75]), np.array([True, False]), n_gt=0)
    assert len(pr.thresholds) == 201 and pr.thresholds[0] == 0.0 and pr.thresholds[-1] == 1.0
    assert pr.thresholds[50] == 0.25 and pr.kept[50] == 1 and pr.kept[49] == 2
    assert pr.recall.shape == (201,) and np.isnan(pr.recall).all()

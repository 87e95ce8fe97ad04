"""Operating-point metrics: kept-set ECE and LaECE_0 with the reference toolkit's conventions."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.metrics import bootstrap
from det_calib.metrics.calibration import bootstrap_ci, ece
from det_calib.metrics.operating_point import (
    LaECE0Targets,
    _KeptCells,
    _laece_of_drawn_targets,
    _reference_bin_index,
    _top_k_per_image_class,
    kept_ece,
    kept_ece_floor,
    kept_laece_floor,
    laece0,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

GT_XY = np.array([[0.0, 0.0, 10.0, 10.0]])


def _one_image(dets):
    """dets: (cls, score, x1, y1, x2, y2) rows on image 0."""
    d = np.asarray(dets, dtype=float)
    return np.zeros(len(d), int), d[:, 2:6], d[:, 0].astype(int), d[:, 1]


def test_laece0_hand_worked_case():
    di, dx, dc, s = _one_image(
        [
            (0, 0.9, 0, 0, 10, 10),  # IoU 1 with the class-0 GT: target 1
            (0, 0.6, 5, 0, 15, 10),  # the GT is taken: target 0
            (1, 0.8, 0, 0, 10, 10),  # class 1 has no GT: not averaged
            (0, 0.2, 0, 0, 10, 10),  # below the 0.25 threshold: not scored
        ]
    )
    got = laece0(di, dx, dc, s, [0], GT_XY, [0], threshold=0.25, n_bins=10)
    assert got == pytest.approx(0.5 * abs(0.9 - 1.0) + 0.5 * abs(0.6 - 0.0))


def test_laece0_tau_zero_takes_any_free_ground_truth():
    # a box overlapping its GT at IoU 0.25: LaECE_0 targets 0.25, tau = 0.5 targets 0
    di, dx, dc, s = _one_image([(0, 0.7, 0, 0, 10, 2.5)])
    assert laece0(di, dx, dc, s, [0], GT_XY, [0], threshold=0.25) == pytest.approx(0.7 - 0.25)
    assert laece0(di, dx, dc, s, [0], GT_XY, [0], threshold=0.25, tau=0.5) == pytest.approx(0.7)


def test_laece0_scores_only_top_100_per_image_and_class():
    scores = 0.3 + 0.005 * np.arange(101)
    dets = [(0, sc, 100 + i, 100, 110 + i, 110) for i, sc in enumerate(scores)]  # IoU 0 with the GT
    di, dx, dc, s = _one_image(dets)
    got = laece0(di, dx, dc, s, [0], GT_XY, [0], threshold=0.25, n_bins=1)
    # the best box takes the GT at IoU 0 (target 0), all targets are 0: one bin, error = mean conf
    assert got == pytest.approx(np.sort(scores)[1:].mean())


def test_laece0_drops_classes_with_zero_error_and_first_bin_is_closed_at_zero():
    gt_xy = np.array([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]])
    di, dx, dc, s = _one_image([(0, 1.0, 0, 0, 10, 10), (1, 0.4, 20, 20, 30, 25)])
    # class 0: conf 1 and IoU 1, error exactly 0 -> dropped; class 1: |0.4 - 0.5|
    assert laece0(di, dx, dc, s, [0, 0], gt_xy, [0, 1], threshold=0.25) == pytest.approx(0.1)
    assert _reference_bin_index(np.array([0.0, 0.04, 0.04000001, 1.0]), 25).tolist() == [
        0,
        0,
        1,
        24,
    ]


def test_top_k_per_image_class():
    img = np.array([0, 0, 0, 1, 0])
    cls = np.array([0, 0, 1, 0, 0])
    score = np.array([0.1, 0.9, 0.5, 0.2, 0.4])
    assert _top_k_per_image_class(img, cls, score, 2).tolist() == [False, True, True, True, True]


@pytest.mark.parametrize(("lo", "hi"), [(0, 50), (-7, 9), (-(2**40), 2**40), (0, 1)])
def test_top_k_per_image_class_is_the_three_key_sort(lo, hi):
    """The (image, class) pairs sorted by one key where their ranges allow (by two where they do not:
    ids 2**41 apart): the boxes of the three-key lexsort, with tied scores kept in input order."""
    rng = np.random.default_rng(abs(lo) + hi)
    n = 5000
    img = rng.integers(lo, hi, n, endpoint=True)
    cls = rng.integers(lo, hi, n, endpoint=True) // 3
    score = np.round(rng.uniform(size=n), 1)  # many ties
    for k in (1, 2, 5):
        order = np.lexsort((-score, cls, img))
        new = np.r_[True, (img[order][1:] != img[order][:-1]) | (cls[order][1:] != cls[order][:-1])]
        start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
        want = np.zeros(n, dtype=bool)
        want[order] = np.arange(n) - start < k
        assert np.array_equal(_top_k_per_image_class(img, cls, score, k), want)


def test_kept_ece_is_ece_of_the_kept_boxes():
    rng = np.random.default_rng(0)
    conf = rng.uniform(size=500)
    y = rng.uniform(size=500) < conf
    keep = conf > 0.25
    assert kept_ece(conf, y, threshold=0.25) == ece(conf[keep], y[keep])
    assert np.isnan(kept_ece(conf, y, threshold=0.9999))
    with pytest.raises(InputError, match="`conf` and `correct`"):
        kept_ece(conf, y[:3], threshold=0.25)


def test_bootstrap_methods():
    rng = np.random.default_rng(1)
    img = np.repeat(np.arange(60), 10)
    conf = rng.uniform(size=600)
    y = rng.uniform(size=600) < conf**1.3
    theta = ece(conf, y)
    p = bootstrap_ci(ece, img, conf, y, n_boot=300, seed=2, method="percentile")
    b = bootstrap_ci(ece, img, conf, y, n_boot=300, seed=2, method="basic")
    bc = bootstrap_ci(ece, img, conf, y, n_boot=300, seed=2)
    assert b == pytest.approx((2 * theta - p[1], 2 * theta - p[0]))
    assert bc[0] >= 0.0 and bc[0] < bc[1]
    # the binned error is biased upward: percentile sits higher than the bias-corrected interval
    assert bc[0] <= p[0] and bc[1] <= p[1]
    assert bc[0] <= theta <= bc[1]
    with pytest.raises(InputError, match="`method`"):
        bootstrap_ci(ece, img, conf, y, n_boot=10, method="bca")


def test_laece0_counts_an_inverted_box_as_unmatched():
    di, dx, dc, s = _one_image([(0, 0.6, 10, 10, 0, 0), (0, 0.5, 0, 0, 10, 10)])
    # the inverted box (higher score) overlaps nothing but still takes the free GT at tau = 0
    # with IoU 0; the second box finds no free GT: both targets 0
    assert laece0(di, dx, dc, s, [0], GT_XY, [0], threshold=0.25, n_bins=10) == pytest.approx(0.55)


def test_kept_ece_floor_is_the_ece_of_labels_drawn_from_the_confidences():
    rng = np.random.default_rng(5)
    conf = rng.beta(2.0, 2.0, 3000)
    f = kept_ece_floor(conf, threshold=0.25, n_draws=200, seed=3)
    # the same draws, one at a time, through kept_ece: the same mean and percentiles
    kept = conf[conf > 0.25]
    draws = np.random.default_rng(3).random((200, kept.size)) < kept
    vals = np.array([kept_ece(kept, y, threshold=0.25) for y in draws])
    assert f.mean == pytest.approx(vals.mean(), rel=1e-12)
    assert (f.low, f.high) == pytest.approx(tuple(np.percentile(vals, [2.5, 97.5])), rel=1e-12)
    # a perfectly calibrated detector's own kept-set ECE lies in the range about 95% of the time
    inside = [
        f.low <= kept_ece(conf, rng.random(conf.size) < conf, threshold=0.25) <= f.high
        for _ in range(300)
    ]
    assert 0.88 <= np.mean(inside) <= 0.995
    # fewer boxes, a higher floor (roughly 1 / sqrt(n))
    small = kept_ece_floor(conf[:300], threshold=0.25, seed=3)
    assert small.mean > 2 * f.mean


def test_kept_ece_floor_edge_cases():
    assert kept_ece_floor(np.array([0.1, 0.2]), threshold=0.25) is None
    assert (
        kept_ece_floor(np.full(50, 1.0), threshold=0.25).mean == 0.0
    )  # certain labels: no sampling error
    a = kept_ece_floor(np.linspace(0.3, 0.9, 500), threshold=0.25, seed=1)
    assert a == kept_ece_floor(np.linspace(0.3, 0.9, 500), threshold=0.25, seed=1)  # fixed seed
    with pytest.raises(InputError, match="n_draws"):
        kept_ece_floor(np.ones(3), threshold=0.25, n_draws=1)
    with pytest.raises(InputError, match="conf"):
        kept_ece_floor(np.ones((3, 2)), threshold=0.25)


def _scene(seed=0, n_img=30):
    """Detections (jittered copies of planted GT boxes plus background boxes) on ``n_img`` images;
    class 3 only on images 0 and 1, so some bootstrap replicates draw none of its boxes."""
    rng = np.random.default_rng(seed)
    gi = np.repeat(np.arange(n_img), 4)
    gc = rng.integers(0, 3, gi.size)
    gc[:8] = 3  # images 0 and 1: class 3 only
    xy = rng.uniform(0, 200, (gi.size, 2))
    gx = np.column_stack([xy, xy + rng.uniform(10, 40, (gi.size, 2))])
    src = np.repeat(np.arange(gi.size), 3)
    n_bg = 150
    di = np.concatenate([gi[src], rng.integers(2, n_img, n_bg)])
    dc = np.concatenate([gc[src], rng.integers(0, 3, n_bg)])
    q = rng.uniform(0, 200, (n_bg, 2))
    dx = np.concatenate([gx[src] + rng.normal(0, 3, (src.size, 4)), np.column_stack([q, q + 20.0])])
    z = rng.normal(0.0, 2.0, di.size)
    p = 1.0 / (1.0 + np.exp(-z))
    p[:4] = [0.25, 0.5, 0.04, 0.08]  # the threshold itself (not kept) and reference bin edges
    y = rng.uniform(size=p.size) < p
    return dict(di=di, dx=dx, dc=dc, z=z, p=p, y=y, gi=gi, gx=gx, gc=gc, n_img=n_img)


@pytest.mark.parametrize("thr", [0.25, 0.6, 0.999])
def test_bootstrap_of_operating_statistics_equals_the_indexed_path(thr):
    """kept_ece and LaECE0Targets.statistic hoist the kept mask, classes and bins out of the
    replicates (kept ECE as per-image bin sums); the replicates equal those of the plain indexed
    path, the weighted public path up to float summation order for LaECE_0, and a class none of whose kept boxes
    is drawn is left out of the average."""
    from det_calib.metrics import calibration as metrics
    from det_calib.metrics.operating_point import LaECE0Targets, _laece_binned

    s = _scene()
    img, n_img, n_boot, seed = s["di"], s["n_img"], 150, 4
    p, y = s["p"], s["y"]
    rep = lambda f, *a: bootstrap._replicates(f, img, n_img, list(a), n_boot, seed)  # noqa: E731

    fast = rep(functools.partial(kept_ece, threshold=thr, n_bins=15), p, y)
    indexed = rep(lambda c, yy: kept_ece(c, yy, threshold=thr, n_bins=15), p, y)
    np.testing.assert_allclose(fast, indexed, rtol=1e-12, atol=1e-15)
    assert np.isnan(fast).all() == (not (p > thr).any())

    t = LaECE0Targets(img, s["dx"], s["dc"], s["z"], s["gi"], s["gx"], s["gc"])
    stat = t.statistic(threshold=thr, n_bins=25)
    fast = rep(stat, p)
    weighted = rep(lambda c, *, weights=None: stat(c, weights=weights), p)
    # pooled (image, cell) sums times the draw counts: the same sums in another order
    np.testing.assert_allclose(fast, weighted, rtol=1e-12, atol=0)
    assert np.array_equal(np.isnan(fast), np.isnan(weighted))
    gt_classes = t.gt_classes
    indexed = rep(
        lambda c, tg, k, u: _laece_binned(c, tg, k, u, gt_classes, thr, 25, None),
        p,
        t.target,
        t.cls,
        t.use,
    )
    np.testing.assert_allclose(fast, indexed, rtol=1e-12, atol=0)
    if thr == 0.25:
        mult = np.concatenate(
            list(bootstrap._multiplicities(np.random.default_rng(seed), n_img, n_boot))
        )
        out = (mult[:, 0] + mult[:, 1]) == 0
        assert out.any() and (~out).any()  # class 3 weighted out in some replicates, not in others
        assert not np.isnan(fast).any()
        lo, hi = metrics.bootstrap_ci(stat, img, p, n_boot=n_boot, seed=seed, method="normal")
        assert (lo, hi) == pytest.approx(
            metrics.bootstrap_ci(
                lambda c, *, weights=None: stat(c, weights=weights),
                img,
                p,
                n_boot=n_boot,
                seed=seed,
                method="normal",
            ),
            rel=1e-12,
            abs=0,
        )


def test_bootstrap_kept_ece_checks_once_and_refuses_bad_input():
    img = np.arange(4)
    with pytest.raises(InputError, match="`conf` to contain values in"):
        bootstrap_ci(
            functools.partial(kept_ece, threshold=0.25), img, [0.1, 0.5, 1.5, 0.3], [1, 0, 1, 0]
        )
    with pytest.raises(InputError, match="`correct` to be bool or 0/1"):
        bootstrap_ci(
            functools.partial(kept_ece, threshold=0.25), img, [0.1, 0.5, 0.7, 0.3], [1, 0, 2, 0]
        )
    with pytest.raises(InputError, match="same shape"):
        bootstrap_ci(
            functools.partial(kept_ece, threshold=0.25),
            img,
            [0.1, 0.5, 0.7, 0.3],
            [[1, 0, 1, 0]] * 4,
        )
    # nothing kept: every replicate is nan, so is the interval (no validation of the labels needed)
    lo, hi = bootstrap_ci(
        functools.partial(kept_ece, threshold=0.9), img, [0.1, 0.5, 0.7, 0.3], [1, 0, 2, 0]
    )
    assert np.isnan(lo) and np.isnan(hi)


def _laece_boxes(conf, cls, target, n_cls):
    """LaECE0Targets of one box per image, box ``i`` of class ``cls[i]`` whose target is ``target[i]``:
    a same-class ground truth overlapping it at IoU ``target[i]`` when above 0, otherwise one ground
    truth of the next class (the box matches none). Every class has ground truth."""
    from det_calib.metrics.operating_point import LaECE0Targets

    n = conf.size
    box = np.tile([0.0, 0.0, 10.0, 10.0], (n, 1))
    matched = target > 0
    gt = np.column_stack(
        [np.zeros(n), np.zeros(n), np.full(n, 10.0), np.where(matched, 10.0 * target, 10.0)]
    )
    gt_cls = np.where(matched, cls, (cls + 1) % n_cls)
    ids = np.arange(n)
    gi, gx, gc = (
        np.concatenate([ids, [n] * n_cls]),
        np.vstack([gt, np.tile([0.0, 0.0, 1.0, 1.0], (n_cls, 1))]),
        np.concatenate([gt_cls, np.arange(n_cls)]),
    )
    return LaECE0Targets(ids, box, cls, conf, gi, gx, gc)


def _model_targets(conf, pool, rng):
    """Targets with mean exactly ``conf``: matched with probability conf / mean(pool) and an IoU from
    ``pool``; above that mean always matched, the IoU lifted towards 1."""
    m = pool.mean()
    u = rng.choice(pool, conf.size)
    lift = np.clip((conf - m) / (1 - m), 0, 1)
    return np.where(rng.random(conf.size) < np.minimum(conf / m, 1), u + (1 - u) * lift, 0.0)


def test_kept_laece_floor_known_answers():
    """One class, every conf 0.5 in one bin, every match at IoU 0.8: LaECE_0 is
    |0.5 - 0.8 K / n| with K ~ Binomial(n, 0.5 / 0.8), whose mean is computed exactly; above the
    mean IoU (conf 0.95, IoUs 0.5 and 0.9) every box is matched, its IoU lifted to mean 0.95."""
    from math import comb

    n = 400
    t = _laece_boxes(np.full(n, 0.5), np.zeros(n, int), np.full(n, 0.8), 1)
    assert t.laece(np.full(n, 0.5), threshold=0.25) == pytest.approx(0.3)
    f = kept_laece_floor(t, np.full(n, 0.5), threshold=0.25, n_draws=2000, seed=1)
    exact = sum(
        comb(n, k) * 0.625**k * 0.375 ** (n - k) * abs(0.5 - 0.8 * k / n) for k in range(n + 1)
    )
    assert exact == pytest.approx(0.01545, abs=5e-5)
    assert f.mean == pytest.approx(exact, rel=0.06)
    assert f.low < exact < f.high
    # above the mean IoU 0.7: targets 0.5 + 0.5 * 5/6 or 0.9 + 0.1 * 5/6, mean 0.95, each 1/30 from it:
    # LaECE_0 = |mean of n signs| / 30, E = sqrt(2 / (pi n)) / 30
    pool = np.tile([0.5, 0.9], n // 2)
    t = _laece_boxes(np.full(n, 0.95), np.zeros(n, int), pool, 1)
    f = kept_laece_floor(t, np.full(n, 0.95), threshold=0.25, n_draws=2000, seed=1)
    assert f.mean == pytest.approx(np.sqrt(2 / (np.pi * n)) / 30, rel=0.08)


def test_kept_laece_floor_holds_a_calibrated_set_and_not_a_miscalibrated_one():
    """Eight classes, 1,200 kept boxes, targets drawn from the floor's own model (a detector whose
    conf is its expected IoU, matched IoUs from a pool of mean 0.8): its measured LaECE_0 lies within
    the floor's range in most of 40 sets, with the pool passed in and with the kept boxes' own matched
    IoUs (the default); boxes whose targets have mean 0.8 x conf lie above the range in every set."""
    rng = np.random.default_rng(11)
    n, k = 1200, 8
    cls = rng.integers(0, k, n)
    conf = rng.uniform(0.26, 0.9, n)
    pool = rng.uniform(0.6, 1.0, 500)
    inside = {"pool": 0, "own": 0}
    for _ in range(40):
        t = _laece_boxes(conf, cls, _model_targets(conf, pool, rng), k)
        measured = t.laece(conf, threshold=0.25)
        for name, iou in (("pool", pool), ("own", None)):
            f = kept_laece_floor(t, conf, threshold=0.25, iou=iou)
            inside[name] += f.low <= measured <= f.high
    assert inside["pool"] >= 34 and inside["own"] >= 34  # 38 of 40 expected
    for _ in range(5):
        t = _laece_boxes(conf, cls, _model_targets(0.8 * conf, pool, rng), k)
        assert t.laece(conf, threshold=0.25) > kept_laece_floor(t, conf, threshold=0.25).high


def test_kept_laece_floor_edge_cases():
    rng = np.random.default_rng(2)
    n = 300
    conf, cls = rng.uniform(0.3, 0.9, n), rng.integers(0, 3, n)
    t = _laece_boxes(conf, cls, np.where(rng.random(n) < 0.6, rng.uniform(0.4, 1.0, n), 0.0), 3)
    a = kept_laece_floor(t, conf, threshold=0.25, seed=4)
    assert a == kept_laece_floor(t, conf, threshold=0.25, seed=4)  # fixed seed
    assert a != kept_laece_floor(t, conf, threshold=0.25, seed=5)
    assert a.low < a.mean < a.high
    # the kept set only: at 0.7 the floor is that of the boxes above 0.7 alone (same IoUs, same draws)
    pool = t.target[t.target > 0]
    top = conf > 0.7
    alone = _laece_boxes(conf[top], cls[top], t.target[top], 3)
    assert kept_laece_floor(t, conf, threshold=0.7, iou=pool) == kept_laece_floor(
        alone, conf[top], threshold=0.25, iou=pool
    )
    assert kept_laece_floor(t, conf, threshold=0.95) is None  # nothing kept
    unmatched = _laece_boxes(conf, cls, np.zeros(n), 3)
    assert kept_laece_floor(unmatched, conf, threshold=0.25) is None  # no IoU to draw from
    # an IoU distribution passed in replaces the kept boxes' own: all IoUs 1, targets are Bernoulli(conf)
    ones = kept_laece_floor(unmatched, conf, threshold=0.25, iou=np.ones(5))
    assert ones is not None and ones.mean > 0
    with pytest.raises(InputError, match="iou"):
        kept_laece_floor(t, conf, threshold=0.25, iou=np.array([0.0, 0.5]))
    with pytest.raises(InputError, match="conf"):
        kept_laece_floor(t, conf[:-1], threshold=0.25)
    with pytest.raises(InputError, match="n_draws"):
        kept_laece_floor(t, conf, threshold=0.25, n_draws=1)


def test_kept_laece_floor_is_fast():
    """It runs for every scored calibrator of every head: 200 draws of 5,000 kept boxes in 8 classes
    well under the 0.5 s per head it may take (measured about 20 ms)."""
    import time

    rng = np.random.default_rng(0)
    n = 5000
    conf, cls = rng.uniform(0.26, 0.99, n), rng.integers(0, 8, n)
    t = _laece_boxes(conf, cls, _model_targets(conf, rng.uniform(0.5, 1.0, 300), rng), 8)
    took = []
    for _ in range(
        3
    ):  # the best of three: the first call also pays for the allocator's first pages
        start = time.perf_counter()
        kept_laece_floor(t, conf, threshold=0.25)
        took.append(time.perf_counter() - start)
    assert min(took) < 0.25


def test_kept_set_is_strictly_above_the_threshold():
    # a box exactly at the threshold is not kept (Ultralytics keeps conf > thres)
    assert kept_ece([0.25, 0.5, 0.9], [1, 1, 0], threshold=0.25, n_bins=10) == pytest.approx(
        (0.5 + 0.9) / 2
    )


def test_laece0_targets_equal_laece0():
    """LaECE0Targets.laece is laece0 on the same boxes (scores a monotone map of the raw ones): a
    class with a single kept box, one whose error is exactly 0 (dropped), one without GT (not
    averaged), a box exactly at the threshold (not kept), and the scene of the bootstrap tests."""
    from det_calib.metrics.operating_point import LaECE0Targets

    di, dx, dc, s = _one_image(
        [
            (0, 0.9, 0, 0, 10, 10),  # class 0: IoU 1
            (0, 0.6, 5, 0, 15, 10),  # class 0: GT taken, target 0
            (1, 0.7, 20, 20, 30, 25),  # class 1: one box, IoU 0.5
            (2, 0.8, 0, 0, 10, 10),  # class 2: no GT
            (3, 1.0, 40, 40, 50, 50),  # class 3: conf 1, IoU 1: error exactly 0, dropped
            (0, 0.3, 0, 0, 10, 10),  # exactly at the threshold below: not kept
        ]
    )
    gx = np.array([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0], [40.0, 40.0, 50.0, 50.0]])
    gi, gc = [0, 0, 0], [0, 1, 3]
    t = LaECE0Targets(di, dx, dc, s, gi, gx, gc)
    want = ((0.5 * 0.1 + 0.5 * 0.6) + 0.2) / 2  # class 0 (two bins of 10), class 1
    assert laece0(di, dx, dc, s, gi, gx, gc, threshold=0.3, n_bins=10) == pytest.approx(want)
    assert t.laece(s, threshold=0.3, n_bins=10) == pytest.approx(want, rel=1e-12)
    assert t.statistic(threshold=0.3, n_bins=10)(s) == pytest.approx(want, rel=1e-12)
    # one bin: class 0's boxes share it (|1.5 - 1| / 2)
    assert t.laece(s, threshold=0.3, n_bins=1) == pytest.approx((0.25 + 0.2) / 2, rel=1e-12)
    # no class qualifies: nan; no GT at all: nan (silently: no mean of an empty array)
    none = LaECE0Targets(di, dx, dc, s, np.zeros(0, int), np.zeros((0, 4)), np.zeros(0, int))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(t.laece(s, threshold=0.95, n_bins=10))
        assert np.isnan(none.laece(s, threshold=0.3, n_bins=10))
    sc = _scene()
    p = 1.0 / (1.0 + np.exp(-sc["z"]))
    t = LaECE0Targets(sc["di"], sc["dx"], sc["dc"], sc["z"], sc["gi"], sc["gx"], sc["gc"])
    for thr in (0.25, float(np.sort(p)[len(p) // 3]), 0.6):
        for n_bins in (10, 25):
            want = laece0(
                sc["di"],
                sc["dx"],
                sc["dc"],
                p,
                sc["gi"],
                sc["gx"],
                sc["gc"],
                threshold=thr,
                n_bins=n_bins,
            )
            assert t.laece(p, threshold=thr, n_bins=n_bins) == pytest.approx(want, rel=1e-12)


def test_bootstrap_of_operating_statistics_passes_the_bin_count():
    """The prepared replicates use the statistic's bin count (and its default when none is given),
    and both operating statistics take the prepared path."""
    from det_calib.metrics.operating_point import LaECE0Targets, _laece_binned

    s = _scene()
    img, n_img, p, y = s["di"], s["n_img"], s["p"], s["y"]
    rep = lambda f, *a: bootstrap._replicates(f, img, n_img, list(a), 40, 2)  # noqa: E731
    for options in ({"n_bins": 10}, {}):
        fast = rep(functools.partial(kept_ece, threshold=0.25, **options), p, y)
        indexed = rep(lambda c, yy: kept_ece(c, yy, threshold=0.25, **options), p, y)  # noqa: B023
        np.testing.assert_allclose(fast, indexed, rtol=1e-12, atol=1e-15)
    t = LaECE0Targets(img, s["dx"], s["dc"], s["z"], s["gi"], s["gx"], s["gc"])
    for n_bins, stat in (
        (10, t.statistic(threshold=0.25, n_bins=10)),
        (25, t.statistic(threshold=0.25)),
    ):
        indexed = rep(
            lambda c, tg, k, u: _laece_binned(c, tg, k, u, t.gt_classes, 0.25, n_bins, None),  # noqa: B023
            p,
            t.target,
            t.cls,
            t.use,
        )
        np.testing.assert_allclose(rep(stat, p), indexed, rtol=1e-12, atol=0)
        assert stat(p) == t.laece(p, threshold=0.25, n_bins=n_bins)
        assert bootstrap._batch_statistic(stat, img, n_img, [p]) is not None
    assert (
        bootstrap._batch_statistic(functools.partial(kept_ece, threshold=0.25), img, n_img, [p, y])
        is not None
    )


@pytest.mark.parametrize("n_cls", [1, 3, 9, 80])
def test_laece_replicates_in_blocks_equal_each_replicate_weighted(n_cls):
    """The LaECE_0 of a block of replicates (one sparse product of pooled (image, cell) sums for the
    block, class means grouped by how many classes a replicate averages) is, replicate by replicate,
    the weighted public path's number up to float summation order, with few classes or many (numpy's
    pairwise sums above 8 values included), nan where it is nan."""
    rng = np.random.default_rng(n_cls)
    n, n_img = 3000, 120
    di = rng.integers(0, n_img, n)
    xy = rng.uniform(0, 90, (n, 2))
    dx = np.column_stack([xy, xy + rng.uniform(5, 30, (n, 2))])
    dc = rng.integers(0, n_cls, n)
    p = rng.uniform(size=n)
    gi = rng.integers(0, n_img, n // 2)
    gx = dx[rng.integers(0, n, n // 2)] + np.tile(rng.normal(0, 2, (n // 2, 2)), 2)  # shifted boxes
    gc = rng.integers(0, max(1, n_cls - 1), n // 2)  # the last class without ground truth
    t = LaECE0Targets(di, dx, dc, np.log(p / (1 - p)), gi, gx, gc)
    stat = t.statistic(threshold=0.25, n_bins=25)
    rep = lambda f: bootstrap._replicates(f, di, n_img, [p], 300, 7)  # noqa: E731
    fast = rep(stat)
    slow = rep(lambda c, *, weights=None: stat(c, weights=weights))
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0)
    assert np.array_equal(np.isnan(fast), np.isnan(slow))
    assert not np.isnan(fast).all()


def _drawn_laece_reference(cells, s, u, n_draws, rng):
    """The floor's draws written plainly: every box's lifted IoU computed, kept where matched."""
    s_conf, count = cells.sums(s), cells.sums(np.ones(s.size))
    m = float(u.mean())
    p = np.minimum(s / m, 1.0)
    lift = np.clip((s - m) / (1.0 - m), 0.0, 1.0) if m < 1.0 else np.zeros(s.size)
    rows, vals = max(1, (1 << 20) // s.size), []
    for start in range(0, n_draws, rows):
        d = min(rows, n_draws - start)
        drawn = u[rng.integers(0, u.size, size=(d, s.size))]
        t = np.where(rng.random((d, s.size)) < p, drawn + (1.0 - drawn) * lift, 0.0)
        s_t = np.stack([cells.sums(row) for row in t])
        vals.append(cells.laece(np.abs(s_conf - s_t), count))
    return np.concatenate(vals)


@pytest.mark.parametrize(
    ("n", "iou_lo", "iou_one"),
    [(40, 0.4, False), (3000, 0.6, False), (70001, 0.3, False), (9, 0, True)],
)
def test_drawn_targets_lift_only_the_boxes_above_the_mean_iou(n, iou_lo, iou_one):
    """The floor's draws lift only the boxes whose conf is above the mean matched IoU and zero the
    unmatched ones in place: the same draws, bit for bit, as lifting every box (by 0 below the mean)
    and choosing with ``np.where``, one block of draws or several (70,001 boxes: 14 draws a block)."""
    rng = np.random.default_rng(n)
    s = rng.uniform(0.25, 1.0, n)
    k = rng.integers(0, 7, n)
    u = np.ones(3) if iou_one else rng.uniform(iou_lo, 1.0, max(1, n // 2))
    cells = _KeptCells.of(s, k, np.arange(6), 25)
    got = _laece_of_drawn_targets(cells, s, u, 200, np.random.default_rng(1))
    want = _drawn_laece_reference(cells, s, u, 200, np.random.default_rng(1))
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isfinite(got).all()

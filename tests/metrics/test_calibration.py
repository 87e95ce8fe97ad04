"""Tests for det_calib.metrics.calibration: known answers, textbook loops, netcal/sklearn parity, bootstrap."""

from __future__ import annotations

import dataclasses
import doctest
import functools
import math

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss

from det_calib.errors import InputError
from det_calib.metrics import bootstrap
from det_calib.metrics import calibration as metrics
from det_calib.metrics.binning import ReliabilityBins
from det_calib.metrics.calibration import (
    ace,
    bootstrap_ci,
    brier,
    calibration_summary,
    ece,
    laece,
    mce,
    nll,
    nll_logits,
    per_class,
    reliability_bins,
)
from det_calib.metrics.detection_metrics import box_features, dece, laace

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.fixture(scope="module")
def netcal_metrics():
    """netcal is a declared test dependency: missing it is a failure, not a skip."""
    try:
        from netcal import metrics as netcal_metrics
    except ImportError as e:  # pragma: no cover - environment problem
        pytest.fail(f"netcal is a declared test dependency (pip install netcal): {e}")
    return netcal_metrics


def _data(n: int, seed: int, *, power: float = 1.0):
    """Random conf with exact 0s, 1s and values on common bin edges; correct ~ Bernoulli(conf**power)."""
    rng = np.random.default_rng(seed)
    conf = rng.uniform(size=n)
    conf[:10] = 1.0
    conf[10:20] = 0.0
    conf[20:40] = rng.choice([0.1, 0.2, 0.25, 0.5, 0.75, 0.8], size=20)
    correct = rng.uniform(size=n) < conf**power
    return conf, correct


def _textbook_ece(conf, correct, n_bins):
    """ECE by the book: bins [m/M, (m+1)/M), the last closed; sum |B|/n * |acc(B) - conf(B)|."""
    conf = np.asarray(conf, float)
    correct = np.asarray(correct, float)
    total = 0.0
    for m in range(n_bins):
        lo, hi = m / n_bins, (m + 1) / n_bins
        in_bin = (conf >= lo) & ((conf < hi) if m < n_bins - 1 else (conf <= hi))
        if in_bin.any():
            total += in_bin.sum() / len(conf) * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return total


# ------------------------------------------------------------------------------------------
# bin convention


@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 25, 100])
def test_uniform_index_equals_searchsorted_on_linspace_edges(n_bins):
    rng = np.random.default_rng(n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    near = [np.nextafter(edges, -1.0), np.nextafter(edges, 2.0), np.arange(n_bins + 1) / n_bins]
    x = np.concatenate([rng.uniform(size=5000), edges, *near])
    x = np.clip(x, 0.0, 1.0)
    expected = np.minimum(np.searchsorted(edges, x, side="right") - 1, n_bins - 1)
    np.testing.assert_array_equal(metrics.uniform_index(x, n_bins), expected)
    assert metrics.uniform_index(np.array([1.0]), n_bins)[0] == n_bins - 1


# ------------------------------------------------------------------------------------------
# ECE / MCE / ACE


def test_ece_hand_worked_example_with_conf_one_in_last_bin():
    # 4 bins: [0, .25) {0.0, 0.1}: acc 0, conf .05 -> gap .05
    #         [.25, .5) {0.25}: acc 1, conf .25 -> .75 (an edge value goes to the upper bin)
    #         [.5, .75) {0.5}: acc 1, conf .5 -> .5
    #         [.75, 1] {0.75, 1.0, 1.0}: acc 2/3, conf 2.75/3 -> .25 (1.0 is in the last bin)
    # ECE = (2*.05 + .75 + .5 + 3*.25) / 7 = 2.1 / 7 = 0.3; MCE = .75
    conf = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.0]
    correct = [0, 0, 1, 1, 0, 1, 1]
    rb = reliability_bins(conf, correct, n_bins=4)
    assert rb.count.tolist() == [2, 1, 1, 3]
    assert rb.count.dtype == np.int64
    np.testing.assert_allclose(rb.acc, [0.0, 1.0, 1.0, 2 / 3])
    np.testing.assert_allclose(rb.conf, [0.05, 0.25, 0.5, 2.75 / 3])
    np.testing.assert_allclose(rb.gap, [-0.05, 0.75, 0.5, 2 / 3 - 2.75 / 3])
    np.testing.assert_allclose(rb.edges, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert ece(conf, correct, n_bins=4) == pytest.approx(0.3, abs=1e-12)
    assert rb.ece() == pytest.approx(0.3, abs=1e-12)
    assert mce(conf, correct, n_bins=4) == pytest.approx(0.75, abs=1e-12)
    # all boxes at conf 1.0 and correct: perfectly calibrated, not dropped
    assert ece([1.0, 1.0], [1, 1], n_bins=15) == 0.0
    assert ece([1.0, 1.0], [0, 0], n_bins=15) == 1.0


def test_empty_bins_are_nan_and_skipped():
    rb = reliability_bins([0.05, 0.95], [0, 1], n_bins=10)
    assert rb.count.tolist() == [1] + [0] * 8 + [1]
    assert np.isnan(rb.conf[1:9]).all() and np.isnan(rb.acc[1:9]).all()
    assert rb.ece() == pytest.approx(0.05)
    assert rb.mce() == pytest.approx(0.05)


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15, 20])
@pytest.mark.parametrize("seed", [0, 1])
def test_ece_equals_textbook_loop(n_bins, seed):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(size=3000) ** 0.5
    conf[:5] = 1.0
    conf[5:10] = 0.0
    correct = rng.uniform(size=3000) < conf**2
    assert ece(conf, correct, n_bins=n_bins) == pytest.approx(
        _textbook_ece(conf, correct, n_bins), abs=1e-12
    )
    # lists work as well as arrays
    assert ece(conf.tolist(), correct.astype(int).tolist(), n_bins=n_bins) == pytest.approx(
        ece(conf, correct, n_bins=n_bins), abs=1e-15
    )


def test_ece_perfectly_calibrated_is_small_and_overconfident_is_large():
    rng = np.random.default_rng(123)
    conf = rng.uniform(size=200_000)
    calibrated = rng.uniform(size=conf.size) < conf
    assert ece(conf, calibrated) < 0.01
    # accuracy conf**2: expected ECE -> E|c - c^2| = 1/2 - 1/3 = 1/6 for uniform c
    overconfident = rng.uniform(size=conf.size) < conf**2
    assert ece(conf, overconfident) == pytest.approx(1 / 6, abs=0.01)
    assert mce(conf, overconfident) > 0.2


def test_ace_known_answers_and_equal_mass_assignment():
    # sorted: 0.1(0) 0.2(1) | 0.4(1) 0.6(1) | 0.8(0) 0.9(1)
    # gaps: |.5-.15| = .35, |1-.5| = .5, |.5-.85| = .35 -> ACE = 1.2/3 = 0.4
    conf = [0.9, 0.1, 0.2, 0.8, 0.4, 0.6]
    correct = [1, 0, 1, 0, 1, 1]
    assert ace(conf, correct, n_bins=3) == pytest.approx(0.4, abs=1e-12)
    rb = reliability_bins(conf, correct, n_bins=3, strategy="quantile")
    assert rb.count.tolist() == [2, 2, 2]
    np.testing.assert_allclose(rb.edges, [0.0, 0.4, 0.8, 1.0])
    np.testing.assert_allclose(rb.conf, [0.15, 0.5, 0.85])
    # n = 7, M = 3: rank r -> floor(3r/7) = 0,0,0,1,1,2,2
    rb7 = reliability_bins(np.linspace(0.1, 0.7, 7), np.ones(7), n_bins=3, strategy="quantile")
    assert rb7.count.tolist() == [3, 2, 2]
    # more bins than boxes: floor(5r/2) -> bins 0 and 2, the rest empty
    rb2 = reliability_bins([0.3, 0.6], [1, 0], n_bins=5, strategy="quantile")
    assert rb2.count.tolist() == [1, 0, 1, 0, 0]
    assert ace([0.3, 0.6], [1, 0], n_bins=5) == pytest.approx((0.7 + 0.6) / 2)


def test_ace_ties_are_split_by_input_order():
    # four tied boxes, M = 2: the first two (by input order) form bin 0
    # bin 0: acc 1, conf .5 -> .5; bin 1: acc 0 -> .5; ACE = .5 while ECE = 0
    assert ace([0.5] * 4, [1, 1, 0, 0], n_bins=2) == pytest.approx(0.5)
    assert ace([0.5] * 4, [1, 0, 1, 0], n_bins=2) == pytest.approx(0.0)
    assert ece([0.5] * 4, [1, 1, 0, 0], n_bins=2) == pytest.approx(0.0)


def test_ace_fractional_weights_split_weight_equally():
    conf = [0.9, 0.1, 0.2, 0.8, 0.4, 0.6]
    correct = [1, 0, 1, 0, 1, 1]
    # total weight 3 over 3 bins: one unit (two boxes) per bin, as unweighted
    assert ace(conf, correct, n_bins=3, weights=[0.5] * 6) == pytest.approx(0.4, abs=1e-12)
    # sorted (conf, weight, correct) laid end to end on the weight axis (total W = 5.5):
    #   .1 [0, 1.5) y0 | .2 [1.5, 2.5) y1 | .4 [2.5, 3) y1 | .6 [3, 3.5) y1 | .8 [3.5, 4.5) y0 | .9 [4.5, 5.5) y1
    # bins cut at W/3 = 11/6 and 2W/3 = 11/3; a box straddling a cut is split:
    #   bin 0: .1 x 1.5, .2 x 1/3            -> |target - conf| sums: |1/3 - (.15 + .2/3)|      = 7/60
    #   bin 1: .2 x 2/3, .4 x .5, .6 x .5, .8 x 1/6 -> |(2/3 + 1) - (.4/3 + .2 + .3 + .8/6)| = 0.9
    #   bin 2: .8 x 5/6, .9 x 1              -> |1 - (.8 * 5/6 + .9)|                       = 17/30
    # ACE = (7/60 + 54/60 + 34/60) / 5.5 = (95/60) / 5.5 = 19/66
    w = [1, 1.5, 1, 1, 0.5, 0.5]
    rb = reliability_bins(conf, correct, n_bins=3, strategy="quantile", weights=w)
    np.testing.assert_allclose(rb.count, [11 / 6] * 3)
    assert rb.count.dtype == np.float64
    assert rb.ece() == pytest.approx(19 / 66, abs=1e-12)
    assert ace(conf, correct, n_bins=3, weights=w) == pytest.approx(19 / 66, abs=1e-12)
    np.testing.assert_allclose(rb.edges, [0.0, 0.2, 0.8, 1.0])  # the box at each cut


# ------------------------------------------------------------------------------------------
# netcal parity


@pytest.mark.parametrize("n_bins", [1, 2, 5, 10, 15, 20, 25, 50])
def test_ece_mce_match_netcal(netcal_metrics, n_bins):
    conf, correct = _data(4000, seed=n_bins, power=2.0)
    y = correct.astype(np.float64)
    expected_ece = netcal_metrics.ECE(bins=n_bins, detection=True).measure(conf, y)
    expected_mce = netcal_metrics.MCE(bins=n_bins, detection=True).measure(conf, y)
    assert ece(conf, correct, n_bins=n_bins) == pytest.approx(expected_ece, abs=1e-9)
    assert mce(conf, correct, n_bins=n_bins) == pytest.approx(expected_mce, abs=1e-9)


@pytest.mark.parametrize("n_bins", [3, 10, 15])
def test_ace_matches_netcal_when_bins_are_full(netcal_metrics, n_bins):
    # netcal's ACE is the unweighted mean over np.quantile bins (equal_intervals=False);
    # with n a multiple of M and distinct values, both put exactly n/M boxes in each bin.
    rng = np.random.default_rng(7)
    conf = rng.uniform(size=100 * n_bins)
    y = (rng.uniform(size=conf.size) < conf**1.5).astype(np.float64)
    expected = netcal_metrics.ACE(bins=n_bins, detection=True, equal_intervals=False).measure(
        conf, y
    )
    assert ace(conf, y, n_bins=n_bins) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "n_bins",
    [1, 2, 3, 5, [5, 2, 2, 2, 2], [10, 1, 1, 1, 1], [4, 3, 2, 5, 1], [1, 4, 4, 4, 4]],
    ids=str,
)
def test_dece_matches_netcal(netcal_metrics, n_bins):
    n = 6000
    conf, correct = _data(n, seed=11, power=1.5)
    rng = np.random.default_rng(12)
    features = rng.uniform(size=(n, 4))
    features[:15] = 1.0
    features[15:30] = 0.0
    features[30:60, 2] = 0.5
    y = correct.astype(np.float64)
    expected = netcal_metrics.ECE(bins=n_bins, detection=True).measure(
        np.column_stack([conf, features]), y
    )
    got = dece(conf, correct, features, n_bins=n_bins)
    assert got == pytest.approx(expected, abs=1e-9)
    # features make the bins finer: D-ECE >= ECE with the same confidence bins (Jensen)
    conf_bins = n_bins if isinstance(n_bins, int) else n_bins[0]
    assert got >= ece(conf, correct, n_bins=conf_bins) - 1e-12


@pytest.mark.parametrize("n_bins", [[8, 3, 3, 3, 3], [40, 40, 40, 40, 40]], ids=str)
def test_dece_is_the_sum_over_its_occupied_joint_bins(n_bins):
    """D-ECE's joint bins ranked by counting (few bins) or by sorting (more bins than boxes) give
    the number np.unique's bins give, bit for bit."""
    n = 3000
    conf, correct = _data(n, seed=21)
    features = np.random.default_rng(22).uniform(size=(n, 4))
    idx = [metrics.uniform_index(conf, n_bins[0])] + [
        metrics.uniform_index(features[:, j], b) for j, b in enumerate(n_bins[1:])
    ]
    _, cell = np.unique(np.ravel_multi_index(tuple(idx), tuple(n_bins)), return_inverse=True)
    cell = cell.ravel()
    count = np.bincount(cell, weights=np.ones(n))
    s_conf = np.bincount(cell, weights=conf)
    s_tgt = np.bincount(cell, weights=correct.astype(np.float64))
    want = float(np.abs(s_tgt[count > 0] - s_conf[count > 0]).sum() / count.sum())
    assert dece(conf, correct, features, n_bins=n_bins) == want


def test_dece_without_features_is_ece():
    conf, correct = _data(1000, seed=3)
    expected = ece(conf, correct, n_bins=15)
    assert dece(conf, correct, np.empty((1000, 0)), n_bins=15) == pytest.approx(expected, abs=1e-15)


# ------------------------------------------------------------------------------------------
# NLL, Brier


def test_nll_logits_matches_sklearn_log_loss():
    rng = np.random.default_rng(5)
    z = rng.normal(scale=3.0, size=5000)
    y = rng.uniform(size=z.size) < 1 / (1 + np.exp(-z))
    for temperature in (1.0, 2.5, 0.7):
        p = 1 / (1 + np.exp(-z / temperature))
        expected = log_loss(y, p, labels=[False, True])
        assert nll_logits(z, y, temperature=temperature) == pytest.approx(expected, rel=1e-10)
        assert nll(p, y) == pytest.approx(expected, rel=1e-10)


def test_nll_logits_exact_for_saturated_logits():
    assert 1 / (1 + np.exp(-50.0)) == 1.0  # float64 sigmoid saturates: probabilities lose this
    tail = math.log1p(math.exp(-50.0))  # 1.93e-22
    assert nll_logits([50.0], [1]) == pytest.approx(tail, rel=1e-12, abs=0)
    assert nll_logits([-50.0], [0]) == pytest.approx(tail, rel=1e-12, abs=0)
    assert nll_logits([50.0], [0]) == pytest.approx(50.0 + tail, rel=1e-15)
    assert nll_logits([50.0, -50.0, 50.0, -50.0], [1, 0, 0, 1]) == pytest.approx(
        25.0 + tail, rel=1e-15
    )
    assert nll_logits([1e4, -1e4], [0, 1]) == pytest.approx(1e4, rel=1e-15)
    assert nll_logits([1e4, -1e4], [1, 0]) == 0.0
    assert nll_logits([100.0], [0], temperature=2.0) == pytest.approx(50.0, rel=1e-15)
    # the clipped probability version is finite but capped at -log(eps)
    assert nll([1.0], [0], eps=1e-12) == pytest.approx(-math.log(1e-12), rel=1e-6)


def test_brier_matches_sklearn():
    rng = np.random.default_rng(8)
    p = rng.uniform(size=3000)
    y = rng.uniform(size=p.size) < p**2
    assert brier(p, y) == pytest.approx(brier_score_loss(y, p), rel=1e-12)
    assert brier([1.0, 0.0], [1, 0]) == 0.0


# ------------------------------------------------------------------------------------------
# LaECE / LaACE


def test_laece_laace_hand_worked_example():
    # class 0 (10 bins):
    #   bin 9: conf .92, .96 -> mean .94; target .95 (matched), 0 (unmatched) -> mean .475; gap .465
    #   bin 3: conf .35, target .6 -> gap .25
    #   LaECE_0 = (2 * .465 + 1 * .25) / 3 = 1.18 / 3
    #   LaACE_0 = (|.95-.92| + |0-.96| + |.6-.35|) / 3 = (.03 + .96 + .25) / 3 = 1.24 / 3
    # class 5: conf .55, target .7 -> LaECE_5 = LaACE_5 = .15
    # LaECE = (1.18/3 + .15) / 2 = 0.2716667; LaACE = (1.24/3 + .15) / 2 = 0.2816667
    conf = [0.92, 0.55, 0.96, 0.35]
    target = [0.95, 0.7, 0.0, 0.6]
    cls = [0, 5, 0, 0]
    assert laece(conf, target, cls, n_bins=10) == pytest.approx((1.18 / 3 + 0.15) / 2, abs=1e-12)
    assert laace(conf, target, cls) == pytest.approx((1.24 / 3 + 0.15) / 2, abs=1e-12)
    # one bin: per class |mean conf - mean target|: class 0 |.7433 - .5167| = .2267
    assert laece(conf, target, cls, n_bins=1) == pytest.approx(
        (abs(2.23 - 1.55) / 3 + 0.15) / 2, abs=1e-12
    )
    # IoU a hair above 1 (float noise from matching) is accepted and clipped
    assert laace([1.0], [1.0 + 1e-12], [0]) == 0.0


def test_laece_with_iou_one_is_class_averaged_ece():
    conf, correct = _data(2000, seed=4)
    cls = np.random.default_rng(4).integers(0, 3, size=2000)
    expected = np.mean([ece(conf[cls == c], correct[cls == c], n_bins=25) for c in range(3)])
    assert laece(conf, correct.astype(float), cls) == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------------
# weights


def test_integer_weights_equal_duplicated_data():
    rng = np.random.default_rng(9)
    n = 800
    conf = np.round(rng.uniform(size=n), 2)  # ties, for the quantile bins
    conf[:5] = 1.0
    correct = rng.uniform(size=n) < conf
    logits = rng.normal(scale=4, size=n)
    iou = np.where(correct, rng.uniform(0.5, 1, size=n), 0.0)
    cls = rng.integers(0, 4, size=n)
    feats = rng.uniform(size=(n, 2))
    w = rng.integers(0, 4, size=n)  # includes zeros: dropped boxes
    rep = lambda a: np.repeat(a, w, axis=0)  # noqa: E731
    cases = [
        (ece, (conf, correct), {"n_bins": 15}),
        (ace, (conf, correct), {"n_bins": 15}),
        (ace, (conf, correct), {"n_bins": 7}),
        (mce, (conf, correct), {"n_bins": 15}),
        (nll, (conf, correct), {}),
        (nll_logits, (logits, correct), {"temperature": 1.7}),
        (brier, (conf, correct), {}),
        (dece, (conf, correct, feats), {"n_bins": [5, 3, 3]}),
        (laece, (conf, iou, cls), {"n_bins": 25}),
        (laace, (conf, iou, cls), {}),
    ]
    for fn, args, kw in cases:
        weighted = fn(*args, weights=w, **kw)
        duplicated = fn(*[rep(a) for a in args], **kw)
        assert weighted == pytest.approx(duplicated, abs=1e-12), fn.__name__
    for strategy in ("uniform", "quantile"):
        a = reliability_bins(conf, correct, n_bins=10, strategy=strategy, weights=w)
        b = reliability_bins(rep(conf), rep(correct), n_bins=10, strategy=strategy)
        np.testing.assert_array_equal(a.count, b.count)
        np.testing.assert_allclose(a.conf, b.conf, atol=1e-12)
        np.testing.assert_allclose(a.acc, b.acc, atol=1e-12)
        np.testing.assert_allclose(a.edges, b.edges, atol=0)


def test_all_zero_weights_give_nan():
    assert math.isnan(ece([0.5, 0.6], [1, 0], weights=[0, 0]))
    assert math.isnan(nll([0.5, 0.6], [1, 0], weights=[0, 0]))


# ------------------------------------------------------------------------------------------
# bootstrap


def _image_dataset(n_images=60, per_image=30, seed=0):
    rng = np.random.default_rng(seed)
    image_ids = np.repeat(np.arange(n_images), per_image)
    conf = rng.uniform(size=image_ids.size)
    correct = rng.uniform(size=conf.size) < conf**2
    return image_ids, conf, correct


def test_bootstrap_deterministic_and_contains_estimate():
    img, conf, correct = _image_dataset()
    a = bootstrap_ci(ece, img, conf, correct, n_boot=300, seed=3)
    b = bootstrap_ci(ece, img, conf, correct, n_boot=300, seed=3)
    c = bootstrap_ci(ece, img, conf, correct, n_boot=300, seed=4)
    assert a == b
    assert a != c
    point = ece(conf, correct)
    assert a[0] < point < a[1]
    lo50, hi50 = bootstrap_ci(ece, img, conf, correct, n_boot=300, seed=3, level=0.5)
    assert a[0] < lo50 < hi50 < a[1]


def test_bootstrap_weighted_and_indexed_paths_agree():
    img, conf, correct = _image_dataset()
    shuffle = np.random.default_rng(1).permutation(
        img.size
    )  # boxes of an image need not be adjacent
    img, conf, correct = img[shuffle], conf[shuffle], correct[shuffle]
    fast = bootstrap_ci(functools.partial(ece, n_bins=10), img, conf, correct, n_boot=200, seed=5)
    slow = bootstrap_ci(lambda c, y: ece(c, y, n_bins=10), img, conf, correct, n_boot=200, seed=5)
    np.testing.assert_allclose(fast, slow, atol=1e-12)


def test_bootstrap_resamples_whole_images():
    sizes = np.array([1, 2, 3, 4, 5])
    img = np.repeat(np.array([10, 20, 30, 40, 50]), sizes)
    seen = []

    def statistic(ids):
        seen.append(ids.copy())
        return float(len(ids))

    bootstrap_ci(
        statistic, img, img, n_boot=50, seed=0, method="percentile"
    )  # bc also evaluates the estimate
    assert len(seen) == 50
    for ids in seen:
        drawn = {k: np.sum(ids == k) / s for k, s in zip([10, 20, 30, 40, 50], sizes)}
        assert all(float(v).is_integer() for v in drawn.values())  # all boxes of a drawn image
        assert sum(drawn.values()) == 5  # as many image draws as images
    assert any(
        max(np.sum(ids == k) / s for k, s in zip([10, 20, 30, 40, 50], sizes)) >= 2 for ids in seen
    )


def test_bootstrap_interval_reflects_image_level_variance():
    # 40 images x 200 boxes; within an image every box is identical (conf .7, same outcome).
    # brier = .49 - .4 * acc, and acc varies only between images: the image bootstrap width is
    # about 2 * 1.96 * .4 * sqrt(p(1-p)/40); resampling boxes would be sqrt(200) times narrower.
    rng = np.random.default_rng(2)
    n_images, per_image = 40, 200
    image_correct = rng.uniform(size=n_images) < 0.5
    img = np.repeat(np.arange(n_images), per_image)
    conf = np.full(img.size, 0.7)
    correct = image_correct[img]
    p = correct.mean()
    lo, hi = bootstrap_ci(brier, img, conf, correct, n_boot=500, seed=0)
    box_lo, box_hi = bootstrap_ci(brier, np.arange(img.size), conf, correct, n_boot=500, seed=0)
    expected_width = 2 * 1.96 * 0.4 * math.sqrt(p * (1 - p) / n_images)
    assert 0.7 * expected_width < hi - lo < 1.3 * expected_width
    assert hi - lo > 5 * (box_hi - box_lo)
    assert lo < brier(conf, correct) < hi


def _known_replicates(x, img, *, n_boot, seed):
    """The replicates of |mean| that bootstrap_ci draws, computed here from the documented draws:
    replicate b takes ``rng.integers(0, n_img, size=n_img)`` (image k: the k-th smallest id) and
    every box of each drawn image, once per draw."""
    ids = np.unique(img)
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(n_boot):
        drawn = rng.integers(0, ids.size, size=ids.size)
        reps.append(abs(np.concatenate([x[img == ids[k]] for k in drawn]).mean()))
    return np.array(reps)


def _quantile(sorted_values, q):
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    h = (len(sorted_values) - 1) * q
    j = math.floor(h)
    return sorted_values[j] + (h - j) * (
        sorted_values[min(j + 1, len(sorted_values) - 1)] - sorted_values[j]
    )


@pytest.mark.parametrize("path", ["indexed", "weighted"])
def test_bootstrap_ci_known_answers_of_every_method(path):
    """Each method's bounds, computed from replicates known independently (same seed, same draws)
    on a statistic biased under resampling: |mean| near 0, whose replicates sit mostly above the
    estimate, so the bias correction moves BC far from the plain percentiles."""
    from scipy import stats

    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 6, 40)  # 40 images of 1 to 5 boxes, ids not contiguous, boxes shuffled
    img = np.repeat(1000 + 7 * rng.permutation(40), sizes)
    x = rng.normal(0.08, 1.0, img.size)
    order = rng.permutation(img.size)
    img, x = img[order], x[order]
    if path == "indexed":

        def statistic(v):
            return float(abs(v.mean()))
    else:

        def statistic(v, weights=None):
            return float(abs(np.average(v, weights=weights)))

    n_boot, seed, level = 400, 9, 0.9
    reps = np.sort(_known_replicates(x, img, n_boot=n_boot, seed=seed))
    theta = abs(x.mean())
    a = (1 - level) / 2
    q_lo, q_hi = _quantile(reps, a), _quantile(reps, 1 - a)
    z = stats.norm.ppf(1 - a)
    share = (np.sum(reps < theta) + 0.5 * np.sum(reps == theta)) / n_boot
    z0 = stats.norm.ppf(share)
    expected = {
        "percentile": (q_lo, q_hi),
        "basic": (2 * theta - q_hi, 2 * theta - q_lo),
        "normal": (theta - z * reps.std(ddof=1), theta + z * reps.std(ddof=1)),
        "bc": (
            _quantile(reps, stats.norm.cdf(2 * z0 - z)),
            _quantile(reps, stats.norm.cdf(2 * z0 + z)),
        ),
    }
    assert 0.2 < share < 0.45  # biased: most replicates above the estimate (z0 about -0.35)
    # the correction moves the interval down: the upper bound by about a quarter of the interval
    assert (
        expected["bc"][0] < expected["percentile"][0]
        and expected["bc"][1] < expected["percentile"][1] - 0.03
    )
    for method, (lo, hi) in expected.items():
        got = bootstrap_ci(statistic, img, x, n_boot=n_boot, seed=seed, level=level, method=method)
        assert got == pytest.approx((lo, hi), rel=1e-12, abs=1e-15), method
    assert bootstrap_ci(statistic, img, x, n_boot=n_boot, seed=seed, level=level) == pytest.approx(
        expected["bc"], rel=1e-12, abs=1e-15
    )  # bc is the default


def test_bootstrap_ci_bc_counts_ties_with_the_estimate_half():
    """BC's share of replicates below the estimate counts ties half: the max of 30 image values,
    whose replicates equal the estimate whenever the largest image is drawn (about 64%)."""
    from scipy import stats

    x = np.arange(30, dtype=float) ** 1.5
    img = np.arange(30)  # one box per image: a replicate is the max of the drawn images' values
    rng = np.random.default_rng(2)
    maxes = np.sort([x[rng.integers(0, 30, 30)].max() for _ in range(500)])
    theta = x.max()
    below, ties = np.sum(maxes < theta), np.sum(maxes == theta)
    assert below > 100 and ties > 250
    share = (below + 0.5 * ties) / 500
    z0, z = stats.norm.ppf(share), stats.norm.ppf(0.975)
    expected = (
        _quantile(maxes, stats.norm.cdf(2 * z0 - z)),
        _quantile(maxes, stats.norm.cdf(2 * z0 + z)),
    )
    got = bootstrap_ci(lambda v: float(v.max()), img, x, n_boot=500, seed=2, method="bc")
    assert got == pytest.approx(expected, rel=1e-12)
    # counting the ties as below, or as above, gives another interval: the test tells them apart
    for wrong in (below + ties - 0.5, below + 0.5):
        z0w = stats.norm.ppf(wrong / 500)
        other = (
            _quantile(maxes, stats.norm.cdf(2 * z0w - z)),
            _quantile(maxes, stats.norm.cdf(2 * z0w + z)),
        )
        assert other != pytest.approx(expected, rel=1e-6)


def test_bootstrap_bad_input():
    img, conf, correct = _image_dataset(n_images=5, per_image=4)
    with pytest.raises(InputError, match="`image_ids` and `arrays\\[1\\]`.*20 and 19"):
        bootstrap_ci(ece, img, conf, correct[:-1])
    with pytest.raises(InputError, match="`level`"):
        bootstrap_ci(ece, img, conf, correct, level=95)
    with pytest.raises(InputError, match="`n_boot` to be an integer larger than 0, but got 0"):
        bootstrap_ci(ece, img, conf, correct, n_boot=0)


# ------------------------------------------------------------------------------------------
# per class, summary, box features, dataclass


def test_per_class_applies_metric_to_each_class():
    conf, correct = _data(1500, seed=6)
    cls = np.random.default_rng(6).choice([2, 7, 9], size=1500)
    res = per_class(ece, conf, correct, cls, n_bins=10)
    assert list(res) == [2, 7, 9]
    for c, v in res.items():
        assert v == pytest.approx(ece(conf[cls == c], correct[cls == c], n_bins=10), abs=1e-15)
    w = np.random.default_rng(0).integers(1, 3, size=1500)
    res_w = per_class(brier, conf, correct, cls, weights=w)
    assert res_w[7] == pytest.approx(brier(conf[cls == 7], correct[cls == 7], weights=w[cls == 7]))
    with pytest.raises(InputError, match="`conf` and `cls`"):
        per_class(ece, conf, correct, cls[:-1])


def test_calibration_summary():
    conf = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.0]
    correct = [0, 0, 1, 1, 0, 1, 1]
    s = calibration_summary(conf, correct, n_bins=4)
    assert set(s) == {"ece", "ace", "mce", "nll", "brier", "n", "n_correct", "n_bins"}
    assert s["ece"] == pytest.approx(0.3)
    assert s["mce"] == pytest.approx(0.75)
    assert s["ace"] == pytest.approx(ace(conf, correct, n_bins=4))
    assert s["nll"] == pytest.approx(nll(conf, correct))
    assert s["brier"] == pytest.approx(brier(conf, correct))
    assert (s["n"], s["n_correct"], s["n_bins"]) == (7, 4, 4)
    empty = calibration_summary([], [], n_bins=15)
    assert empty["n"] == 0 and empty["n_correct"] == 0
    assert all(math.isnan(empty[k]) for k in ("ece", "ace", "mce", "nll", "brier"))


def test_box_features():
    f = box_features([0, 90], [10, 0], [50, 110], [30, 40], [100, 100], 40)
    # box 2 reaches past the right border: centre x = 1.0, width .2
    np.testing.assert_allclose(f, [[0.25, 0.5, 0.5, 0.5], [1.0, 0.5, 0.2, 1.0]])
    np.testing.assert_allclose(
        box_features([-20], [0], [20], [200], 100, 100), [[0.0, 1.0, 0.4, 1.0]]
    )
    assert box_features([], [], [], [], 10, 10).shape == (0, 4)
    with pytest.raises(InputError, match="`img_w`"):
        box_features([0], [0], [1], [1], 0, 10)
    # an inverted box (x2 < x1) gets width 0 rather than an error: detectors can emit them
    assert box_features([5], [0], [1], [1], 10, 10).tolist() == [[0.3, 0.05, 0.0, 0.1]]
    with pytest.raises(InputError, match="`x1` and `y2`"):
        box_features([0, 1], [0, 1], [1, 2], [1], 10, 10)


def test_reliability_bins_dataclass():
    rb = reliability_bins([0.2, 0.7], [1, 1], n_bins=2)
    assert rb.n_bins == 2 and rb.strategy == "uniform"
    with pytest.raises(dataclasses.FrozenInstanceError):
        rb.count = np.array([1, 1])  # type: ignore[misc]
    with pytest.raises(ValueError):
        rb.count[0] = 5  # arrays are read-only
    with pytest.raises(InputError, match="shapes"):
        ReliabilityBins(edges=[0, 1], count=[1, 2], conf=[0.1, 0.2], acc=[0, 1], strategy="uniform")


# ------------------------------------------------------------------------------------------
# empty and bad input


def test_empty_inputs_give_nan():
    e = np.array([])
    for value in (
        ece(e, e),
        ace(e, e),
        mce(e, e),
        nll(e, e),
        nll_logits(e, e),
        brier(e, e),
        dece(e, e, np.empty((0, 4))),
        laece(e, e, np.array([], dtype=int)),
        laace(e, e, np.array([], dtype=int)),
    ):
        assert math.isnan(value)
    rb = reliability_bins(e, e, n_bins=3, strategy="quantile")
    assert rb.count.tolist() == [0, 0, 0] and np.isnan(rb.conf).all()
    assert all(math.isnan(v) for v in bootstrap_ci(ece, e, e, e, n_boot=5))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: ece([0.5], [1], n_bins=0),
            "Expected argument `n_bins` to be an integer larger than 0, but got 0",
        ),
        (
            lambda: ece([0.5], [1], n_bins=2.5),
            "`n_bins` to be an integer larger than 0, but got 2.5",
        ),
        (lambda: ace([0.5], [1], n_bins=True), "`n_bins` to be an integer"),
        (
            lambda: laece([0.5], [0.5], [0], n_bins=-1),
            "`n_bins` to be an integer larger than 0, but got -1",
        ),
        (
            lambda: ece([0.5, 0.6], [1]),
            "Expected arguments `conf` and `correct` to have the same length, but got 2 and 1",
        ),
        (
            lambda: nll([0.5], [1, 0]),
            "`prob` and `correct` to have the same length, but got 1 and 2",
        ),
        (lambda: nll_logits([0.5], [1, 0]), "`logits` and `correct`"),
        (lambda: laece([0.5], [0.5, 0.1], [0]), "`conf` and `target_iou`"),
        (lambda: laace([0.5], [0.5], [0, 1]), "`conf` and `cls`"),
        (lambda: dece([0.5, 0.5], [1, 0], np.zeros((3, 2))), "`conf` and `features`"),
        (
            lambda: ece([0.5, 1.2], [1, 0]),
            r"`conf` to contain values in \[0, 1\], but got values in \[0.5, 1.2\]",
        ),
        (lambda: ece([-0.1], [1]), r"`conf` to contain values in \[0, 1\]"),
        (lambda: brier([1.5], [1]), r"`prob` to contain values in \[0, 1\]"),
        (lambda: ece([np.nan], [1]), "`conf` to be finite"),
        (lambda: nll_logits([np.inf], [1]), "`logits` to be finite"),
        (lambda: ece([0.5], [0.5]), "`correct` to be bool or 0/1"),
        (lambda: ece([[0.5]], [1]), r"`conf` to be one-dimensional, but got shape \(1, 1\)"),
        (lambda: ece([0.5], [1], weights=[-1.0]), "`weights` to be non-negative"),
        (lambda: ece([0.5], [1], weights=[1.0, 2.0]), "`conf` and `weights`"),
        (lambda: reliability_bins([0.5], [1], strategy="equal"), "`strategy` to be one of"),
        (
            lambda: nll_logits([0.5], [1], temperature=0.0),
            "`temperature` to be a finite number larger than 0",
        ),
        (lambda: nll([0.5], [1], eps=0.0), "`eps`"),
        (lambda: dece([0.5], [1], [0.5]), r"`features` to have shape \(n, J\)"),
        (
            lambda: dece([0.5], [1], [[0.5, 1.5]]),
            r"`features\[:, 1\]` to contain values in \[0, 1\]",
        ),
        (lambda: dece([0.5], [1], [[0.5, 0.5]], n_bins=[2, 2]), "sequence of 3 integers"),
        (
            lambda: dece([0.5], [1], [[0.5, 0.5]], n_bins=[2, 0, 2]),
            "`n_bins` to be an integer larger than 0, but got 0$",
        ),
        (lambda: laece([0.5], [1.1], [0]), r"`target_iou` to contain values in \[0, 1\]"),
        (lambda: laace([0.5], [0.5], [0.5]), "`cls` to hold integer class ids"),
    ],
)
def test_bad_input_raises_input_error(call, match):
    with pytest.raises(InputError, match=match) as info:
        call()
    assert isinstance(info.value, ValueError)


def test_docstring_examples():
    result = doctest.testmod(metrics, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10
    assert result.failed == 0


@pytest.mark.parametrize(
    "statistic, n_arrays",
    [
        (metrics.ece, 2),
        (functools.partial(metrics.ece, n_bins=7), 2),
        (functools.partial(metrics.ace, n_bins=5), 2),
        (metrics.mce, 2),
        (metrics.brier, 2),
        (functools.partial(metrics.laece, n_bins=10), 3),
    ],
)
def test_bootstrap_unchecked_core_gives_the_checked_numbers(statistic, n_arrays, monkeypatch):
    """The module's metrics are validated once, not per replicate, and give bit-identical intervals."""
    rng = np.random.default_rng(5)
    img = np.repeat(np.arange(40), 6)
    conf = rng.uniform(size=img.size)
    arrays = [conf, rng.uniform(size=img.size) < conf, rng.integers(0, 3, img.size)]
    if n_arrays == 3:
        arrays[1] = np.where(arrays[1], rng.uniform(0.5, 1.0, img.size), 0.0)

    def checked(*a, weights=None):  # not recognised: the public, validating path every replicate
        return statistic(*a, weights=weights)

    from det_calib.metrics import binning, detection_metrics

    real = (
        metrics.as_unit
    )  # det_calib.metrics.metric_inputs' check, as the metric modules import it

    calls = []
    for module in (
        metrics,
        binning,
        detection_metrics,
    ):  # every module of the metrics that validates conf
        monkeypatch.setattr(module, "as_unit", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    fast = metrics.bootstrap_ci(statistic, img, *arrays[:n_arrays], n_boot=60, seed=3)
    n_fast = len(calls)
    slow = metrics.bootstrap_ci(checked, img, *arrays[:n_arrays], n_boot=60, seed=3)
    if metrics.ece not in (statistic, getattr(statistic, "func", None)):
        assert fast == slow  # exact, not approx
    else:  # plain ECE takes the per-image bin-sum shortcut: same draws, float summation order differs
        np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-15)
    per_call = n_arrays - 1  # as_unit checks conf (and target_iou for laece)
    assert n_fast == 2 * per_call  # once before the loop, once for the estimate
    assert len(calls) - n_fast == 61 * per_call


def test_bootstrap_unchecked_path_still_refuses_bad_input():
    img = np.arange(4)
    with pytest.raises(InputError, match="`conf` to contain values in"):
        metrics.bootstrap_ci(
            functools.partial(metrics.ece, n_bins=3), img, [0.1, 0.2, 1.5, 0.3], [1, 0, 1, 0]
        )
    with pytest.raises(InputError, match="`correct` to be bool or 0/1"):
        metrics.bootstrap_ci(metrics.brier, img, [0.1, 0.2, 0.5, 0.3], [1, 0, 2, 0])


@pytest.mark.parametrize("n_img, n_bins", [(50, 15), (7, 10), (3, 4)])
def test_bootstrap_ece_fast_path_equals_the_weighted_path(n_img, n_bins):
    """bootstrap_ci takes a per-image bin-sum shortcut for plain ECE; same draws, same interval."""
    from det_calib.metrics.calibration import bootstrap_ci, ece

    rng = np.random.default_rng(n_img)
    img = rng.integers(0, n_img, size=40 * n_img)
    conf = rng.uniform(size=img.size)
    conf[:5] = [0.0, 1.0, 0.5, 1 / n_bins, 2 / n_bins]  # edges
    y = rng.uniform(size=img.size) < conf

    def slow(c, t, *, weights=None):  # not `ece` itself: takes the generic weighted path
        return ece(c, t, n_bins=n_bins, weights=weights)

    fast = bootstrap_ci(functools.partial(ece, n_bins=n_bins), img, conf, y, n_boot=300, seed=3)
    ref = bootstrap_ci(slow, img, conf, y, n_boot=300, seed=3)
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-15)
    if n_bins == 15:
        np.testing.assert_allclose(
            bootstrap_ci(ece, img, conf, y, n_boot=300, seed=3), ref, rtol=1e-12
        )


def test_calibration_summary_defaults_and_bad_input_names_the_argument():
    rng = np.random.default_rng(2)
    p = rng.uniform(0, 1, 300)
    y = rng.random(300) < p
    s = metrics.calibration_summary(p, y)
    assert s["n_bins"] == 15 and s["ece"] == pytest.approx(metrics.ece(p, y, n_bins=15), abs=1e-15)
    with pytest.raises(InputError, match="arguments `conf` and `correct` to have the same length"):
        metrics.calibration_summary(p, y[:-1])
    with pytest.raises(InputError, match="`conf`"):
        metrics.calibration_summary(p + 1.0, y)
    with pytest.raises(InputError, match="`correct`"):
        metrics.calibration_summary(p, np.full(300, 2))
    with pytest.raises(InputError, match="`cls`"):
        metrics.per_class(metrics.ece, p, y, np.full(300, 0.5))


@pytest.mark.parametrize("fn", [functools.partial(metrics.laece, n_bins=10), laace])
def test_a_class_weighted_out_is_not_averaged_in(fn):
    """Bootstrap replicates weight the boxes of undrawn images by 0: a class whose boxes all have
    weight 0 drops out of the class average (it is not a class with error 0, nor nan)."""
    rng = np.random.default_rng(4)
    n = 120
    p = rng.uniform(0, 1, n)
    t = np.where(rng.random(n) < p, rng.uniform(0.5, 1, n), 0.0)
    k = np.arange(n) % 3
    w = np.where(k == 1, 0.0, rng.integers(1, 4, n).astype(float))
    keep = k != 1
    want = fn(
        np.repeat(p[keep], w[keep].astype(int)),
        np.repeat(t[keep], w[keep].astype(int)),
        np.repeat(k[keep], w[keep].astype(int)),
    )
    assert fn(p, t, k, weights=w) == pytest.approx(want, rel=1e-12)
    assert math.isnan(fn(p, t, k, weights=np.zeros(n)))


def test_nll_checks_name_the_argument():
    p, y = np.array([0.2, 0.7, 0.9]), np.array([0, 1, 1])
    for eps in (0.5, 1.0, 0.0):
        with pytest.raises(InputError, match="`eps`"):
            metrics.nll(p, y, eps=eps)
    with pytest.raises(InputError, match="`prob`"):
        metrics.nll(p + 1.0, y)
    with pytest.raises(InputError, match="`correct`"):
        metrics.nll(p, [0, 2, 1])
    with pytest.raises(InputError, match="`prob` and `weights`"):
        metrics.nll(p, y, weights=[1.0, 2.0])
    # a probability of 0 or 1 on the wrong side costs -log(eps), not inf
    assert metrics.nll([0.0, 1.0], [1, 0]) == pytest.approx(-math.log(1e-12), rel=1e-6)
    with pytest.raises(InputError, match="arguments `conf` and `correct`"):
        metrics.per_class(metrics.ece, p, y[:-1], [0, 0, 1])


def test_one_box_and_light_weights_have_their_error():
    """A total weight of 1 or less is still a sample: one box's ECE/ACE/MCE/D-ECE is |y - p|, and
    fractional weights give the weighted mean gap."""
    for fn in (metrics.ece, metrics.ace, metrics.mce, dece):
        extra = {"features": np.array([[0.5, 0.5, 0.1, 0.1]])} if fn is dece else {}
        assert fn([0.7], [1], **extra) == pytest.approx(0.3, abs=1e-12)
        assert fn([0.7], [0], **extra) == pytest.approx(0.7, abs=1e-12)
    p, y = np.array([0.2, 0.9]), np.array([1, 1])
    assert metrics.ece(p, y, n_bins=2, weights=[0.25, 0.25]) == pytest.approx(0.45, abs=1e-12)
    assert math.isnan(
        metrics.ece(p, y, n_bins=2, weights=[0.0, 0.0])
    )  # no weight at all: no estimate


def test_default_bins_and_dece_arguments():
    rng = np.random.default_rng(8)
    p = rng.uniform(0, 1, 400)
    y = rng.random(400) < p
    f = rng.uniform(0, 1, (400, 4))
    assert metrics.ace(p, y) == pytest.approx(metrics.ace(p, y, n_bins=15), abs=1e-15)
    assert metrics.ace(p, y) != pytest.approx(metrics.ace(p, y, n_bins=16), abs=1e-9)
    assert dece(p, y, features=f) == pytest.approx(dece(p, y, features=f, n_bins=10), abs=1e-15)
    assert dece(p, y, features=f) != pytest.approx(dece(p, y, features=f, n_bins=11), abs=1e-9)
    with pytest.raises(InputError, match="arguments `conf` and `correct` to have the same length"):
        dece(p, y[:-1], features=f)
    with pytest.raises(InputError, match="`conf`"):
        dece(p + 1.0, y, features=f)
    with pytest.raises(InputError, match="`correct`"):
        dece(p, np.full(400, 3), features=f)
    with pytest.raises(InputError, match="`conf` and `weights`"):
        dece(p, y, features=f, weights=np.ones(3))


@pytest.mark.parametrize("n_img", [1, 2, 3, 7, 200, 255, 256, 257, 400, 65535, 65536, 65537, 70001])
def test_bootstrap_draw_blocks_are_the_sequential_draws(n_img, monkeypatch):
    """One (r, n_img) rng.integers call per block gives the draws of r calls of size n_img, so the
    replicates of a seed do not depend on the block size (numpy's int64 bounded integers keep no
    buffer across values; the uint8/uint16 ones would)."""
    n_boot = 7 if n_img > 1000 else 23
    rng = np.random.default_rng(n_img)
    want = np.stack(
        [np.bincount(rng.integers(0, n_img, size=n_img), minlength=n_img) for _ in range(n_boot)]
    )
    after = rng.integers(0, 2**40)
    for chunk in (
        bootstrap._DRAW_CHUNK,
        5 * n_img,
        1,
    ):  # one block, blocks of 5 rows (the last short), rows
        monkeypatch.setattr(bootstrap, "_DRAW_CHUNK", chunk)
        rng = np.random.default_rng(n_img)
        got = np.concatenate(list(bootstrap._multiplicities(rng, n_img, n_boot)))
        assert got.dtype == np.int64 and np.array_equal(got, want)
        assert (
            rng.integers(0, 2**40) == after
        )  # the generator is left where the sequential calls leave it


@pytest.mark.parametrize("n_img", [1, 5, 300])
@pytest.mark.parametrize("span", [1, 299, 300, 900, 1000, 1 << 14])
def test_bootstrap_counts_a_few_rows_at_a_time_equal_one_bincount(n_img, span, monkeypatch):
    """The draw counts, counted a few rows at a time (or one row: a span below ``n_img``, the last
    group short), equal one bincount of the whole block with each row offset into its own range."""
    monkeypatch.setattr(bootstrap, "_COUNT_SPAN", span)
    draws = np.random.default_rng(span).integers(0, n_img, size=(11, n_img))
    want = np.bincount(
        (draws + (np.arange(11) * n_img)[:, None]).ravel(), minlength=11 * n_img
    ).reshape(11, n_img)
    got = bootstrap._counts(draws, n_img)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    assert got.sum() == 11 * n_img and (got.sum(axis=1) == n_img).all()


def test_the_last_draws_are_kept_whatever_their_size(monkeypatch):
    """A budget below one draw still keeps the last two draws (a class's raw then calibrated scores;
    a size bin's images then every image): each drawn once, given back as drawn, in the dtype asked;
    a third draw evicts the least recently used; a draw over the bound on one kept draw is not kept."""
    monkeypatch.setattr("det_calib.metrics.bootstrap_tables._CACHE_BYTES", 10)
    monkeypatch.setattr("det_calib.metrics.bootstrap_tables._cache", {})
    calls = []

    def draw(rng, n_img, n_boot):
        calls.append(n_img)
        return bootstrap._multiplicities(rng, n_img, n_boot)

    def blocks(n_img, dtype=np.int64):
        return list(bootstrap.seeded_multiplicities(5, n_img, 30, draw, 1 << 20, dtype))

    want = {
        n: np.concatenate(list(bootstrap._multiplicities(np.random.default_rng(5), n, 30)))
        for n in (40, 41, 42)
    }
    for n, dtype in ((40, np.int64), (41, np.float64), (40, np.float64), (41, np.int64)):
        got = blocks(n, dtype)
        assert all(b.dtype == dtype for b in got)
        assert np.array_equal(np.concatenate(got), want[n])
    assert calls == [40, 41]  # each drawn once
    assert np.array_equal(np.concatenate(blocks(42)), want[42])
    assert np.array_equal(np.concatenate(blocks(41)), want[41])
    assert calls == [40, 41, 42]  # 41 still kept; 40, the least recently used, went
    assert np.array_equal(np.concatenate(blocks(40)), want[40])
    assert calls == [40, 41, 42, 40]
    # a draw over the bound on one kept draw is never kept: drawn again at each use, the same counts
    monkeypatch.setattr("det_calib.metrics.bootstrap_tables._KEEP_MAX_BYTES", 41 * 30)
    for _ in range(2):
        got = blocks(42, np.float64)
        assert all(b.dtype == np.float64 for b in got)
        assert np.array_equal(np.concatenate(got), want[42])
    assert calls == [40, 41, 42, 40, 42, 42]
    assert np.array_equal(np.concatenate(blocks(41)), want[41])  # the kept draws stay kept
    assert calls == [40, 41, 42, 40, 42, 42]


def _rare_class_boxes(seed=0):
    """40 images; class 3 only in images 0 and 1, class 4 only in image 2: replicates draw none of
    them now and then (their boxes then all weigh 0)."""
    rng = np.random.default_rng(seed)
    img = rng.integers(3, 40, 600)
    cls = rng.integers(0, 3, img.size)
    img[:9], cls[:9] = [0, 0, 0, 1, 1, 2, 2, 2, 2], [3, 3, 3, 3, 3, 4, 4, 4, 4]
    conf = rng.uniform(size=img.size)
    conf[9:14] = [0.0, 1.0, 0.2, 0.04, 0.08]  # bin edges of 25 bins
    iou = np.where(rng.uniform(size=img.size) < conf, rng.uniform(0.5, 1.0, img.size), 0.0)
    return img, conf, iou, cls


def test_bootstrap_laece_prepared_path_equals_the_indexed_path_with_classes_weighted_out():
    """laece's replicates pool the boxes into (image, class, bin) sums once (det_calib.metrics.bootstrap_tables);
    a class none of whose images is drawn is left out of the class average exactly as on the
    resampled (indexed) boxes."""
    img, conf, iou, cls = _rare_class_boxes()
    n_boot = 200
    fast = bootstrap._replicates(
        functools.partial(laece, n_bins=25), img, 40, [conf, iou, cls], n_boot, 3
    )
    weighted = bootstrap._replicates(
        lambda c, t, k, *, weights=None: laece(c, t, k, n_bins=25, weights=weights),
        img,
        40,
        [conf, iou, cls],
        n_boot,
        3,
    )
    indexed = bootstrap._replicates(
        lambda c, t, k: laece(c, t, k, n_bins=25), img, 40, [conf, iou, cls], n_boot, 3
    )
    # the same sums in another order (pooled per image, cell): equal up to float summation order
    np.testing.assert_allclose(fast, weighted, rtol=1e-13, atol=0)
    np.testing.assert_allclose(fast, indexed, rtol=1e-12, atol=0)
    mult = np.concatenate(list(bootstrap._multiplicities(np.random.default_rng(3), 40, n_boot)))
    assert (
        (mult[:, 0] + mult[:, 1] == 0) & (mult[:, 2] > 0)
    ).any()  # class 3 weighted out, class 4 not
    assert ((mult[:, 2] == 0) & (mult[:, 0] > 0)).any()
    # averaging a weighted-out class in (as nan, or as 0) would give another number
    b = int(np.flatnonzero(mult[:, 0] + mult[:, 1] == 0)[0])
    w = mult[b][img].astype(np.float64)
    keep = w > 0
    assert fast[b] == pytest.approx(
        laece(conf[keep], iou[keep], cls[keep], n_bins=25, weights=w[keep]), rel=1e-13
    )
    assert not np.isnan(fast).any()


def test_bootstrap_ci_of_laece_is_unchanged_by_the_prepared_path():
    img, conf, iou, cls = _rare_class_boxes(1)
    fast = bootstrap_ci(
        functools.partial(laece, n_bins=25), img, conf, iou, cls, n_boot=300, seed=0
    )
    slow = bootstrap_ci(
        lambda c, t, k: laece(c, t, k, n_bins=25), img, conf, iou, cls, n_boot=300, seed=0
    )
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_ece_replicates_from_per_image_tables_on_sparse_bins():
    """The per-image bin tables give ece(weights = draw counts) for every replicate, also with empty
    bins, bins of one box, one box in all, and no box at all (image 5 has none: nan), silently."""
    import warnings

    img = np.array([0, 0, 1, 2, 2, 2, 3, 4, 4])
    conf = np.array([0.05, 0.95, 0.5, 0.1, 0.12, 0.7, 0.33, 0.9, 0.91])
    y = np.array([0, 1, 1, 0, 1, 1, 0, 1, 0])
    mult = np.array(
        [
            [1, 1, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 6],
            [0, 1, 0, 0, 0, 5],
            [2, 0, 1, 0, 0, 3],
            [0, 0, 0, 3, 0, 3],
            [1, 2, 0, 0, 3, 0],
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = metrics._ece_tables(img, 6, conf, y, 10)(mult)
    want = [metrics.ece(conf, y, n_bins=10, weights=m[img].astype(float)) for m in mult]
    assert np.isnan(want[1]) and want[2] == pytest.approx(
        0.5
    )  # no box; one box (conf 0.5, correct)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


class _Unhashable:
    """A statistic that cannot be a dict key (``__eq__`` without ``__hash__``)."""

    def __eq__(self, other):
        return self is other

    def __call__(self, conf, correct, *, weights=None):
        return ece(conf, correct, n_bins=10, weights=weights)


def test_bootstrap_dispatch_of_statistics():
    """Which statistics take a prepared path: the module's metrics (bare or as partials with keyword
    options) and those carrying `_bootstrap_prepare`; a partial that fixes `weights` or positional
    arguments, an unhashable callable or a plain function takes the generic path, with the same
    replicates (a partial's fixed weights times the draw counts)."""
    from det_calib.metrics.operating_point import kept_ece

    rng = np.random.default_rng(9)
    img = np.repeat(np.arange(25), 8)
    conf = rng.uniform(size=img.size)
    y = rng.uniform(size=img.size) < conf
    iou = np.where(y, rng.uniform(0.5, 1.0, img.size), 0.0)
    k = rng.integers(0, 3, img.size)
    for stat, arrays in (
        (ece, [conf, y]),
        (functools.partial(ece, n_bins=7), [conf, y]),
        (ace, [conf, y]),
        (metrics.mce, [conf, y]),
        (metrics.brier, [conf, y]),
        (laece, [conf, iou, k]),
        (functools.partial(kept_ece, threshold=0.3), [conf, y]),
    ):
        assert bootstrap._batch_statistic(stat, img, 25, arrays) is not None
    for stat in (
        functools.partial(ece, weights=np.ones(img.size)),
        functools.partial(ece, conf),
        _Unhashable(),
        lambda c, t, *, weights=None: ece(c, t, weights=weights),
    ):
        assert bootstrap._batch_statistic(stat, img, 25, [conf, y]) is None
    rep = lambda f, *a: bootstrap._replicates(f, img, 25, list(a), 30, 1)  # noqa: E731
    want = rep(lambda c, t: ece(c, t, n_bins=10), conf, y)
    np.testing.assert_allclose(rep(_Unhashable(), conf, y), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        rep(functools.partial(ece, n_bins=10, weights=np.ones(img.size)), conf, y),
        want,
        rtol=1e-12,
        atol=1e-15,
    )
    # the default bin count of the prepared laece is laece's own (25)
    np.testing.assert_allclose(
        rep(laece, conf, iou, k),
        rep(lambda c, t, kk: laece(c, t, kk), conf, iou, k),
        rtol=1e-12,
        atol=0,
    )


def test_bootstrap_keeps_the_weights_a_partial_binds():
    """A statistic with weights bound in a partial: each replicate weighs a box by its weight times
    its image's draw count, as the indexed path does with the weights drawn along with the boxes;
    bound weights of the wrong length are refused by name."""
    rng = np.random.default_rng(11)
    img = np.repeat(np.arange(40), 6)
    conf = rng.uniform(size=img.size)
    y = rng.uniform(size=img.size) < conf**2  # over-confident: ECE depends on how boxes are weighed
    w = rng.uniform(0.1, 5.0, img.size)
    rep = lambda f, *a: bootstrap._replicates(f, img, 40, list(a), 50, 3)  # noqa: E731
    bound = rep(functools.partial(ece, n_bins=10, weights=w), conf, y)
    indexed = rep(lambda c, t, ww: ece(c, t, n_bins=10, weights=ww), conf, y, w)
    np.testing.assert_allclose(bound, indexed, rtol=1e-12, atol=1e-15)
    assert (
        np.abs(bound - rep(functools.partial(ece, n_bins=10), conf, y)).max() > 1e-3
    )  # the weights matter
    ci = bootstrap_ci(functools.partial(ece, n_bins=10, weights=w), img, conf, y, n_boot=50, seed=3)
    ref = bootstrap_ci(
        lambda c, t, ww: ece(c, t, n_bins=10, weights=ww), img, conf, y, w, n_boot=50, seed=3
    )
    np.testing.assert_allclose(ci, ref, rtol=1e-12)
    with pytest.raises(InputError, match="bound `weights`"):
        bootstrap_ci(functools.partial(ece, weights=w[:-1]), img, conf, y, n_boot=5)


def test_indexed_replicates_keep_each_image_in_its_box_order():
    """The indexed path resamples images: replicate b lists the boxes of image 0 mult[0] times, then
    those of image 1, ..., each image's boxes in their original order (an order-sensitive statistic
    sees exactly that)."""
    rng = np.random.default_rng(2)
    img = rng.integers(0, 12, 300)
    x = rng.uniform(size=300)
    stat = lambda a: float(np.sum(a * np.arange(1, a.size + 1)))  # noqa: E731
    got = bootstrap._replicates(stat, img, 12, [x], 20, 4)
    mult = np.concatenate(list(bootstrap._multiplicities(np.random.default_rng(4), 12, 20)))
    for b, m in enumerate(mult):
        idx = np.concatenate([np.flatnonzero(img == i) for i in range(12) for _ in range(m[i])])
        assert got[b] == pytest.approx(stat(x[idx]), rel=1e-13)


def test_bootstrap_sd_is_the_spread_of_bootstrap_ci_replicates_and_the_standard_error():
    rng = np.random.default_rng(7)
    img = np.repeat(np.arange(400), 3)
    conf = rng.uniform(0.3, 1.0, img.size)
    y = rng.uniform(size=img.size) < conf
    sd = metrics.bootstrap_sd(metrics.ece, img, conf, y, n_boot=300, seed=2)
    lo, hi = metrics.bootstrap_ci(metrics.ece, img, conf, y, n_boot=300, seed=2, method="normal")
    assert sd == pytest.approx((hi - lo) / (2 * 1.959963984540054), rel=1e-9)  # the same replicates
    # a mean over 400 independent images: the bootstrap SD is its standard error, sd(x) / sqrt(400)
    x = rng.normal(size=img.size)
    mean = lambda v, weights=None: float(np.average(v, weights=weights))  # noqa: E731
    assert metrics.bootstrap_sd(mean, np.arange(img.size), x, n_boot=2000, seed=0) == pytest.approx(
        x.std() / np.sqrt(img.size), rel=0.1
    )
    with pytest.raises(InputError, match="same non-zero length"):
        metrics.bootstrap_sd(metrics.ece, img[:5], conf, y)


@pytest.mark.parametrize(
    "ids",
    [
        np.array([3, 3, 0, 79, 5, 6, 1] * 30),  # small ids: ranked by counting
        np.arange(210, dtype=np.uint32)[::-1] // 3,  # unsigned: counted
        np.array([5, -1, 5, 2, 0, 9, 4] * 30),  # a negative id: sorted
        np.array([0, 10**9, 3, 17, 2, 5, 8] * 30),  # a range wider than twice the ids: sorted
        np.array([2**63 - 1, 0, 5, 3, 9, 1, 2] * 30, dtype=np.uint64),  # 64-bit unsigned: sorted
    ],
)
def test_class_and_image_ids_group_alike_counted_or_sorted(ids):
    """Class ids and image ids are only groups: LaECE, LaACE and the image bootstrap give the same
    numbers for any ids as for their ranks among the distinct ids (the ids ranked by counting where
    they are small non-negative integers, by sorting elsewhere: np.unique's inverse either way)."""
    rng = np.random.default_rng(ids.size)
    conf = rng.uniform(size=ids.size)
    iou = rng.uniform(size=ids.size) * (rng.uniform(size=ids.size) < conf)
    rank = np.unique(ids, return_inverse=True)[1].ravel()
    assert metrics.laece(conf, iou, ids) == metrics.laece(conf, iou, rank)
    assert laace(conf, iou, ids) == laace(conf, iou, rank)
    fn = functools.partial(metrics.laece, n_bins=10)
    boot = dict(n_boot=50, seed=2)
    cls = rng.integers(0, 3, ids.size)
    assert metrics.bootstrap_ci(fn, ids, conf, iou, cls, **boot) == metrics.bootstrap_ci(
        fn, rank, conf, iou, cls, **boot
    )
    assert metrics.bootstrap_ci(fn, rank, conf, iou, ids, **boot) == metrics.bootstrap_ci(
        fn, rank, conf, iou, rank, **boot
    )  # the ids as class ids

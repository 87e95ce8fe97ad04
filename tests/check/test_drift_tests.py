"""det_calib/check/drift_tests.py: known answers recomputed by plain loops, and parity with scipy.

The statistical properties (false alarms, power, clustering) are tested with the check command in
tests/check/test_run_check.py; here each figure is recomputed from its definition on small
inputs, including the edges (no box, one image, zero variance, ties on a bin edge, a zero
denominator), and the defaults the docstrings state.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from det_calib.check import drift_tests as drift

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def clustered_var(resid, img):
    """m / (m - 1) * sum over images of (image residual sum - their mean)^2; 0 below two images."""
    ids = sorted(set(img))
    if len(ids) < 2:
        return 0.0
    sums = [sum(r for r, i in zip(resid, img) if i == k) for k in ids]
    mean = sum(sums) / len(sums)
    return len(ids) / (len(ids) - 1) * sum((s - mean) ** 2 for s in sums)


def test_calibration_in_the_large_by_hand():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, 60)
    y = rng.uniform(size=60) < p
    img = rng.integers(0, 7, 60)
    r = drift.calibration_in_the_large(p, y, img)
    vb = sum(q * (1 - q) for q in p)
    vc = clustered_var(list(y - p), list(img))
    o, e = int(y.sum()), float(p.sum())
    assert (r.boxes, r.images, r.observed) == (60, len(set(img)), o)
    assert r.expected == pytest.approx(e, rel=1e-12) and r.var_binomial == pytest.approx(
        vb, rel=1e-12
    )
    assert r.var_clustered == pytest.approx(vc, rel=1e-12)
    assert r.design_effect == pytest.approx(max(1.0, vc / vb), rel=1e-12)
    assert r.z == pytest.approx((o - e) / math.sqrt(max(vb, vc)), rel=1e-12)
    assert r.detectable_gap == pytest.approx(1.959964 * math.sqrt(max(vb, vc)) / 60, rel=1e-12)


def test_calibration_in_the_large_edges():
    """No box; one image (no clustered variance); zero variance (every conf 1) with a miss: z = -inf."""
    e = drift.calibration_in_the_large([], [], [])
    assert e[:4] == (0, 0, 0, 0.0) and (e.var_binomial, e.var_clustered) == (0.0, 0.0)
    assert all(
        math.isnan(v)
        for v in (
            e.mean_conf,
            e.fraction_correct,
            e.design_effect,
            e.z,
            e.p_value,
            e.detectable_gap,
        )
    )
    one = drift.calibration_in_the_large([0.2, 0.9, 0.6], [0, 1, 0], [4, 4, 4])
    assert one.images == 1 and one.var_clustered == 0.0 and one.design_effect == 1.0
    sure = drift.calibration_in_the_large([1.0, 1.0, 1.0], [1, 0, 1], [0, 0, 0])
    assert sure.z == -math.inf and sure.p_value == 0.0
    exact = drift.calibration_in_the_large([1.0, 1.0], [1, 1], [0, 0])
    assert exact.z == 0.0 and exact.p_value == 1.0


def test_hosmer_lemeshow_by_hand():
    """Ten equal-mass bins by default; the statistic over bins divided by the design effect."""
    rng = np.random.default_rng(2)
    p = rng.uniform(0.1, 0.9, 700)
    y = rng.uniform(size=700) < p
    img = np.arange(700) // 7
    hl = drift.hosmer_lemeshow(p, y, img)
    assert hl.groups == 10
    parts = np.array_split(np.argsort(p, kind="stable"), 10)
    stat = sum((y[i].sum() - p[i].sum()) ** 2 / np.sum(p[i] * (1 - p[i])) for i in parts)
    deff = drift.calibration_in_the_large(p, y, img).design_effect
    assert hl.statistic == pytest.approx(stat / deff, rel=1e-12) and hl.design_effect == deff
    assert hl.p_value == pytest.approx(drift._chi2_sf(stat / deff, 10), rel=1e-12)
    assert drift.hosmer_lemeshow(p[:200], y[:200], img[:200]).groups == 6  # 200 // 30


def test_citl_change_is_a_z_test():
    rng = np.random.default_rng(3)
    a = (rng.uniform(0.2, 0.9, 300), rng.uniform(size=300) < 0.5, np.arange(300) // 3)
    b = (rng.uniform(0.2, 0.9, 200), rng.uniform(size=200) < 0.7, np.arange(200) // 4)
    c = drift.citl_change(a, b)
    ca, cb = drift.calibration_in_the_large(*a), drift.calibration_in_the_large(*b)
    v = (
        max(ca.var_binomial, ca.var_clustered) / 300**2
        + max(cb.var_binomial, cb.var_clustered) / 200**2
    )
    g0, g1 = ca.fraction_correct - ca.mean_conf, cb.fraction_correct - cb.mean_conf
    assert c.df == 1 and (c.then, c.now) == (g0, g1)
    assert c.statistic == pytest.approx((g1 - g0) / math.sqrt(v), rel=1e-12)


def test_binned_change_by_hand_with_ties_on_the_edges():
    """Confidences on a 0.1 grid, so the pooled quantile edges fall on box scores: a box equal to an
    edge belongs to the bin above it (``edges <= p``); a bin where every conf is 1 has no variance
    and adds nothing; ten bins by default."""
    rng = np.random.default_rng(4)
    p0 = np.round(rng.uniform(0, 1, 600), 1)
    p1 = np.round(rng.uniform(0, 1, 500), 1)
    p0[:120], p1[:100] = 1.0, 1.0
    y0, y1 = rng.uniform(size=600) < p0, rng.uniform(size=500) < 0.8 * p1
    i0, i1 = np.arange(600) // 3, np.arange(500) // 5
    c = drift.binned_change((p0, y0, i0), (p1, y1, i1))
    g = 10
    edges = np.quantile(np.concatenate([p0, p1]), np.linspace(0, 1, g + 1)[1:-1])
    assert np.isin(edges, np.concatenate([p0, p1])).any()  # the ties this test is about
    stat = 0.0
    for k in range(g):
        m0 = np.array([(edges <= q).sum() == k for q in p0])
        m1 = np.array([(edges <= q).sum() == k for q in p1])
        if not m0.any() or not m1.any():
            continue
        v = (
            np.sum(p0[m0] * (1 - p0[m0])) / m0.sum() ** 2
            + np.sum(p1[m1] * (1 - p1[m1])) / m1.sum() ** 2
        )
        if v > 0:
            stat += ((y1[m1] - p1[m1]).mean() - (y0[m0] - p0[m0]).mean()) ** 2 / v
    deff = max(
        drift.calibration_in_the_large(p0, y0, i0).design_effect,
        drift.calibration_in_the_large(p1, y1, i1).design_effect,
    )
    assert c.df == g and c.statistic == pytest.approx(stat / deff, rel=1e-12)


def test_clustered_ratio_var_and_ratio_test_by_hand():
    num, den = [3.0, 0.0, 2.0, 5.0, 1.0], [4.0, 2.0, 2.0, 6.0, 3.0]
    r = sum(num) / sum(den)
    v = 5 / 4 * sum((a - r * b) ** 2 for a, b in zip(num, den)) / sum(den) ** 2
    assert drift._clustered_ratio_var(num, den) == pytest.approx(v, rel=1e-12)
    assert drift._clustered_ratio_var([1, 0, 1, 1], [1, 1, 1, 1]) == pytest.approx(
        0.0625, rel=1e-12
    )
    t = drift.ratio_test(num, den, [1, 1, 0, 2], [3, 2, 2, 4])
    s0 = math.sqrt(max(v, r * (1 - r) / sum(den)))
    r1 = 4 / 11
    s1 = math.sqrt(max(drift._clustered_ratio_var([1, 1, 0, 2], [3, 2, 2, 4]), r1 * (1 - r1) / 11))
    assert (t.se_then, t.se_now) == pytest.approx((s0, s1), rel=1e-12)
    assert t.z == pytest.approx((r1 - r) / math.sqrt(s0 * s0 + s1 * s1), rel=1e-12)


def test_ratio_test_edges():
    """Both ratios exact (no variance): z = -inf when the ratio fell, +inf when it rose; a side
    with a zero denominator: nan, no error."""
    down = drift.ratio_test([2, 3], [2, 3], [0, 0], [2, 3])
    assert (down.then, down.now, down.z, down.p_value) == (1.0, 0.0, -math.inf, 0.0)
    assert drift.ratio_test([0, 0], [2, 3], [2, 3], [2, 3]).z == math.inf
    none = drift.ratio_test([0, 0], [0, 0], [1, 1], [2, 2])
    assert (
        math.isnan(none.then)
        and math.isnan(none.z)
        and math.isnan(none.p_value)
        and none.now == 0.5
    )


def test_ks_distance_with_ties_equals_scipy():
    stats = pytest.importorskip("scipy.stats")
    a, b = [0.1, 0.2, 0.2, 0.3, 0.3, 0.3], [0.2, 0.2, 0.3, 0.5]
    assert drift._ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)
    rng = np.random.default_rng(5)
    x, y = np.round(rng.uniform(size=80), 1), np.round(rng.uniform(size=50) ** 2, 1)
    assert drift._ks_distance(x, y) == pytest.approx(stats.ks_2samp(x, y).statistic, abs=1e-12)


def test_shift_tests_class_mix_is_the_contingency_chi2():
    """The class-mix statistic is the Pearson chi-square of the 2 x classes table of kept boxes
    (scipy's, without continuity correction); 999 permutations by default."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(6)
    ia, ib = rng.integers(0, 30, 150), rng.integers(0, 20, 120)
    ka, kb = rng.integers(0, 4, 150), np.minimum(rng.integers(0, 4, 120), rng.integers(0, 4, 120))
    s = drift.shift_tests(
        rng.uniform(size=150), ia, ka, 30, rng.uniform(size=120), ib, kb, 20, n_classes=4
    )
    table = np.array([np.bincount(ka, minlength=4), np.bincount(kb, minlength=4)])
    ref = stats.chi2_contingency(table, correction=False).statistic
    assert s.n_perm == 999 and s.class_chi2 == pytest.approx(ref, rel=1e-12)
    assert s.per_image == pytest.approx(120 / 20 - 150 / 30, abs=1e-12)


def test_shift_tests_with_no_kept_box_on_either_side():
    """No kept box then or now (a head that keeps nothing at the conf): statistics undefined, none raises."""
    e = np.zeros(0)
    s = drift.shift_tests(
        e,
        e.astype(int),
        e.astype(int),
        5,
        e,
        e.astype(int),
        e.astype(int),
        4,
        n_classes=3,
        n_perm=9,
    )
    assert (s.ks, s.ks_p, s.class_chi2, s.class_chi2_p) == (None, None, None, None)
    assert (s.per_image, s.per_image_p) == (0.0, 1.0)


def test_crowded_images_by_hand():
    # median 2 boxes per image with a box: the cut is max(20, 10 * 2) = 20 boxes
    img = np.r_[np.repeat(np.arange(30), 2), np.full(20, 40), np.full(19, 41), np.full(55, 42)]
    assert drift.crowded_images(img).tolist() == [42, 40]  # most boxes first; 41 (19) is one short
    assert drift.crowded_images(img, min_boxes=50).tolist() == [42]
    assert (
        drift.crowded_images(np.repeat(np.arange(5), 30)).tolist() == []
    )  # 30 each: the median itself
    assert drift.crowded_images(np.zeros(0, np.int64)).size == 0


def test_count_change_is_the_conditional_binomial():
    stats = pytest.importorskip("scipy.stats")
    for k0, m0, k1, m1 in ((1, 400, 3, 400), (0, 300, 12, 300), (5, 200, 1, 600), (2, 100, 2, 100)):
        q = m1 / (m0 + m1)
        n = k0 + k1
        lower, upper = stats.binom.cdf(k1, n, q), stats.binom.sf(k1 - 1, n, q)
        assert drift.count_change(k0, m0, k1, m1) == pytest.approx(
            min(1.0, 2 * min(lower, upper)), rel=1e-12
        )
    assert drift.count_change(0, 400, 0, 400) == 1.0

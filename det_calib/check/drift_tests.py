"""Tests of whether a deployed calibration, and the detector behind it, still hold on new images.

Stateless maths for :mod:`det_calib.check.run_check`; every test takes the boxes kept at an operating
threshold with their image ids, because boxes of one image are correlated (a hard image makes
all its boxes wrong together). Where a test assumes independent boxes, its variance is replaced
by the image-clustered (sandwich) variance whenever that is larger, so that correlation within
images does not read as drift.

- :func:`calibration_in_the_large` — observed correct vs the sum of calibrated confidences, z and p
- :func:`hosmer_lemeshow` — chi-square over equal-mass bins of the kept boxes, corrected for clustering
- :func:`citl_change`, :func:`binned_change` — has calibration (in the large, binned) changed between two sets?
- :func:`crowded_images`, :func:`count_change` — the few images holding many boxes each, set apart
  from the tests above (they would set the image-clustered variance alone), and whether there are
  more or fewer of them
- :func:`ratio_test` — two ratios (precision, recall) compared, image-clustered variances
- :func:`shift_tests` — label-free: kept-score distribution (KS), boxes kept per image, class mix,
  each by an image-level permutation test

p-values: :func:`normal_sf` and :func:`chi2_sf` (closed forms, no scipy at run time).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from det_calib.errors import InputError

__all__ = [
    "CITL",
    "CROWDED_FACTOR",
    "CROWDED_MIN_BOXES",
    "Change",
    "HosmerLemeshow",
    "RatioTest",
    "ShiftStats",
    "binned_change",
    "calibration_in_the_large",
    "citl_change",
    "count_change",
    "crowded_images",
    "hosmer_lemeshow",
    "normal_sf",
    "ratio_test",
    "shift_tests",
]


def normal_sf(z: float) -> float:
    """Two-sided p-value of a standard normal statistic, ``P(|Z| >= |z|)``.

    >>> round(normal_sf(1.959964), 4)
    0.05
    """
    return float(math.erfc(abs(float(z)) / math.sqrt(2.0)))


def _chi2_sf(x: float, df: int) -> float:
    """Upper tail ``P(X >= x)`` of a chi-square variable with integer ``df`` degrees of freedom.

    Closed forms: for even ``df`` a Poisson sum, for odd ``df`` the normal tail plus a sum.

    >>> round(_chi2_sf(3.841459, 1), 4), round(_chi2_sf(18.307038, 10), 4)
    (0.05, 0.05)
    """
    k = int(df)
    if k < 1:
        raise InputError(f"Expected argument `df` to be an integer larger than 0, but got {df!r}")
    if x <= 0:
        return 1.0
    h = float(x) / 2.0
    if k % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, k // 2):
            term *= h / i
            total += term
        return float(min(1.0, math.exp(-h) * total))
    total = math.erfc(math.sqrt(h))
    term = math.sqrt(h) * math.exp(-h) / math.gamma(1.5)
    for i in range(1, (k + 1) // 2):
        total += term
        term *= h / (i + 0.5)
    return float(min(1.0, max(0.0, total)))


def _groups(img: np.ndarray) -> tuple[np.ndarray, int]:
    _, inv = np.unique(np.asarray(img), return_inverse=True)
    inv = inv.ravel()
    return inv, int(inv.max()) + 1 if inv.size else 0


def _clustered_sum_var(resid: np.ndarray, img: np.ndarray) -> float:
    """Sandwich variance of ``sum(resid)`` with images as clusters: ``m/(m-1) sum_i r_i^2``
    (``r_i`` the image's residual sum, centred), 0 with fewer than two images."""
    inv, m = _groups(img)
    if m < 2:
        return 0.0
    r = np.bincount(inv, weights=resid, minlength=m)
    r = r - r.mean()
    return float(m / (m - 1) * np.sum(r * r))


class CITL(NamedTuple):
    """Calibration in the large of a set of boxes: are as many correct as their confidences say?

    ``expected`` is the sum of the confidences, ``observed`` the number correct; ``var_binomial``
    the Poisson-binomial variance ``sum p (1 - p)``; ``var_clustered`` the image-clustered one;
    ``z = (observed - expected) / sqrt(max of the two)``, ``p_value`` two-sided; ``design_effect``
    their ratio (>= 1); ``detectable_gap``: the gap between fraction correct and mean confidence
    this many boxes would show at ``p = 0.05`` (1.96 standard errors over the box count).
    """

    boxes: int
    images: int
    observed: int
    expected: float
    mean_conf: float
    fraction_correct: float
    var_binomial: float
    var_clustered: float
    design_effect: float
    z: float
    p_value: float
    detectable_gap: float


def calibration_in_the_large(conf: Any, correct: Any, image_id: Any) -> CITL:
    """:class:`CITL` of boxes with confidences ``conf`` (n,), flags ``correct`` (n,) and images ``image_id``.

    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.3, 0.9, 2000); y = rng.uniform(size=2000) < p
    >>> r = calibration_in_the_large(p, y, np.arange(2000) // 5)
    >>> abs(r.z) < 3, r.p_value > 0.01
    (True, True)
    """
    p = np.asarray(conf, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    img = np.asarray(image_id)
    if p.shape != y.shape or p.shape != img.shape or p.ndim != 1:
        raise InputError(
            f"Expected arguments `conf`, `correct` and `image_id` of the same shape (n,), but got "
            f"{p.shape}, {y.shape} and {img.shape}"
        )
    n = int(p.size)
    if n == 0:
        nan = float("nan")
        return CITL(0, 0, 0, 0.0, nan, nan, 0.0, 0.0, nan, nan, nan, nan)
    vb = float(np.sum(p * (1 - p)))
    vc = _clustered_sum_var(y - p, img)
    v = max(vb, vc)
    o, e = int(y.sum()), float(p.sum())
    z = (o - e) / math.sqrt(v) if v > 0 else (0.0 if o == e else math.copysign(math.inf, o - e))
    return CITL(
        n,
        _groups(img)[1],
        o,
        e,
        e / n,
        o / n,
        vb,
        vc,
        max(1.0, vc / vb) if vb > 0 else 1.0,
        float(z),
        normal_sf(z),
        1.959964 * math.sqrt(v) / n,
    )


class HosmerLemeshow(NamedTuple):
    """Hosmer–Lemeshow test over equal-mass bins of boxes (an external check: ``df = groups``).

    ``statistic`` is ``sum_g (O_g - E_g)^2 / V_g`` (``V_g = sum p (1 - p)`` over the bin) divided
    by ``design_effect`` (the image clustering's, from :func:`calibration_in_the_large`, >= 1: a
    first-order Rao–Scott correction); ``p_value`` from chi-square with ``groups`` degrees of
    freedom; ``edges`` the bins' lower confidence bounds.
    """

    groups: int
    statistic: float
    design_effect: float
    p_value: float
    observed: tuple[int, ...]
    expected: tuple[float, ...]
    edges: tuple[float, ...]


def hosmer_lemeshow(
    conf: Any, correct: Any, image_id: Any, *, max_groups: int = 10, boxes_per_group: int = 30
) -> HosmerLemeshow | None:
    """:class:`HosmerLemeshow` of boxes: ``min(max_groups, n // boxes_per_group)`` equal-mass bins
    by confidence (at least 2); None when there are fewer than ``2 * boxes_per_group`` boxes.

    >>> rng = np.random.default_rng(1)
    >>> p = rng.uniform(0.3, 0.9, 3000); y = rng.uniform(size=3000) < p
    >>> hl = hosmer_lemeshow(p, y, np.arange(3000) // 5)
    >>> hl.groups, hl.p_value > 0.01, hosmer_lemeshow(1 - p, y, np.arange(3000) // 5).p_value < 1e-6
    (10, True, True)
    """
    p = np.asarray(conf, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    g = min(int(max_groups), p.size // int(boxes_per_group))
    if g < 2:
        return None
    order = np.argsort(p, kind="stable")
    parts = np.array_split(order, g)
    obs = tuple(int(y[i].sum()) for i in parts)
    exp = tuple(float(p[i].sum()) for i in parts)
    var = [float(np.sum(p[i] * (1 - p[i]))) for i in parts]
    stat = sum((o - e) ** 2 / v for o, e, v in zip(obs, exp, var) if v > 0)
    deff = calibration_in_the_large(p, y, image_id).design_effect
    stat /= deff
    return HosmerLemeshow(
        g,
        float(stat),
        float(deff),
        _chi2_sf(stat, g),
        obs,
        exp,
        tuple(float(p[i[0]]) for i in parts),
    )


CROWDED_FACTOR = 10
"""An image is crowded when it holds at least this many times the median kept boxes per image."""
CROWDED_MIN_BOXES = 20
"""... and at least this many kept boxes."""


def crowded_images(
    image_id: Any, *, factor: float = CROWDED_FACTOR, min_boxes: int = CROWDED_MIN_BOXES
) -> np.ndarray:
    """The crowded images of a set of boxes: their ids, most boxes first.

    An image is crowded when it holds at least ``max(min_boxes, factor * median)`` boxes, the
    median taken over the images with a box. The rule reads box counts only, never the flags, so
    setting these images apart does not select on the outcome the tests then look at. A handful
    of them can carry most of the image-clustered variance of a sum over boxes (on the demo's nms
    head, swarms of 30 to 200 wrong boxes on one textured image, in clean renders as in blurred
    ones), so the change tests of :mod:`det_calib.check` run on the other images and report
    these by name.

    >>> crowded_images(np.r_[np.repeat(np.arange(50), 3), np.full(40, 7), np.full(35, 9)]).tolist()
    [7, 9]
    >>> crowded_images(np.repeat(np.arange(50), 3)).tolist()
    []
    """
    ids, n = np.unique(np.asarray(image_id), return_counts=True)
    if not n.size:
        return ids
    cut = max(float(min_boxes), float(factor) * float(np.median(n)))
    order = np.argsort(-n, kind="stable")
    return ids[order][n[order] >= cut]


def count_change(k_then: int, m_then: int, k_now: int, m_now: int) -> float:
    """Two-sided p-value of a change in the rate of an image-level event (``k`` of ``m`` images then
    and now): the exact conditional test, ``k_now`` given ``k_then + k_now`` binomial with
    ``m_now / (m_then + m_now)``, twice the smaller tail (at most 1).

    >>> count_change(1, 400, 3, 400)  # 3 of 4 events on one side: 2 * 5/16
    0.625
    >>> count_change(1, 400, 12, 400) < 0.01
    True
    """
    n = int(k_then) + int(k_now)
    if n == 0 or m_then <= 0 or m_now <= 0:
        return 1.0
    q = m_now / (m_then + m_now)
    pmf = np.array([math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1)])
    k = int(k_now)
    return float(min(1.0, 2 * min(pmf[: k + 1].sum(), pmf[k:].sum())))


class Change(NamedTuple):
    """A calibration figure then and now and the test of their difference (``df`` 1: a z-test,
    else a chi-square over ``df`` bins); ``then``/``now`` the gaps (fraction correct minus mean
    confidence) of the pooled boxes."""

    then: float
    now: float
    statistic: float
    df: int
    p_value: float


def _gap_var(c: CITL) -> float:
    return max(c.var_binomial, c.var_clustered) / (c.boxes * c.boxes)


def citl_change(then: tuple[Any, Any, Any], now: tuple[Any, Any, Any]) -> Change | None:
    """Has calibration in the large changed? ``then``/``now``: ``(conf, correct, image_id)`` of two
    sets of boxes; the gap ``fraction correct - mean conf`` of each, ``z = (gap_now - gap_then) /
    sqrt(var_then + var_now)`` (each variance as in :func:`calibration_in_the_large`), as
    ``statistic``; None when a side has no box.

    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.3, 0.9, 1000); img = np.arange(1000) // 4
    >>> ok = citl_change((p, rng.uniform(size=1000) < p, img), (p, rng.uniform(size=1000) < p, img))
    >>> off = citl_change((p, rng.uniform(size=1000) < p, img), (p, rng.uniform(size=1000) < p - 0.15, img))
    >>> ok.p_value > 0.01, off.p_value < 1e-6
    (True, True)
    """
    a, b = calibration_in_the_large(*then), calibration_in_the_large(*now)
    if not a.boxes or not b.boxes:
        return None
    g0, g1 = a.fraction_correct - a.mean_conf, b.fraction_correct - b.mean_conf
    v = _gap_var(a) + _gap_var(b)
    z = (g1 - g0) / math.sqrt(v) if v > 0 else 0.0
    return Change(float(g0), float(g1), float(z), 1, normal_sf(z))


def binned_change(
    then: tuple[Any, Any, Any],
    now: tuple[Any, Any, Any],
    *,
    max_groups: int = 10,
    boxes_per_group: int = 30,
) -> Change | None:
    """Has the reliability curve changed? A two-sample Hosmer–Lemeshow test: bins with equal
    shares of the pooled boxes' confidences, in each bin the gap ``fraction correct - mean conf``
    of both sets, ``sum_g (gap_now - gap_then)^2 / (V_then/n_then^2 + V_now/n_now^2)`` (``V = sum p
    (1 - p)`` over the bin) divided by the larger design effect of image clustering, chi-square
    with ``df`` = bins; None with fewer than ``boxes_per_group`` boxes a bin on a side, in two bins.

    >>> rng = np.random.default_rng(1)
    >>> p = rng.uniform(0.3, 0.95, 3000); img = np.arange(3000) // 5
    >>> y0, y1 = rng.uniform(size=3000) < p, rng.uniform(size=3000) < 0.3 + 0.5 * (p - 0.3)
    >>> binned_change((p, y0, img), (p, rng.uniform(size=3000) < p, img)).p_value > 0.01
    True
    >>> binned_change((p, y0, img), (p, y1, img)).p_value < 1e-6
    True
    """
    (p0, y0, i0), (p1, y1, i1) = (
        (np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(i))
        for p, y, i in (then, now)
    )
    g = min(int(max_groups), min(p0.size, p1.size) // int(boxes_per_group))
    if g < 2:
        return None
    edges = np.quantile(np.concatenate([p0, p1]), np.linspace(0, 1, g + 1)[1:-1])
    b0, b1 = np.searchsorted(edges, p0, side="right"), np.searchsorted(edges, p1, side="right")
    stat = 0.0
    for k in range(g):
        m0, m1 = b0 == k, b1 == k
        if not m0.any() or not m1.any():
            continue
        d = (y1[m1] - p1[m1]).mean() - (y0[m0] - p0[m0]).mean()
        v = (
            np.sum(p0[m0] * (1 - p0[m0])) / m0.sum() ** 2
            + np.sum(p1[m1] * (1 - p1[m1])) / m1.sum() ** 2
        )
        stat += d * d / v if v > 0 else 0.0
    deff = max(
        calibration_in_the_large(p0, y0, i0).design_effect,
        calibration_in_the_large(p1, y1, i1).design_effect,
    )
    stat /= deff
    c0, c1 = calibration_in_the_large(p0, y0, i0), calibration_in_the_large(p1, y1, i1)
    return Change(
        float(c0.fraction_correct - c0.mean_conf),
        float(c1.fraction_correct - c1.mean_conf),
        float(stat),
        g,
        _chi2_sf(stat, g),
    )


def _clustered_ratio_var(num: Any, den: Any) -> float:
    """Linearised variance of the ratio ``sum num / sum den`` over clusters (one entry per image):
    ``m / (m - 1) * sum_i (num_i - r den_i)^2 / (sum den)^2``; nan with fewer than 2 clusters
    or a zero denominator.

    >>> round(_clustered_ratio_var([1, 0, 1, 1], [1, 1, 1, 1]), 6)  # 4/3 * 0.75 / 16
    0.0625
    """
    a = np.asarray(num, dtype=np.float64)
    b = np.asarray(den, dtype=np.float64)
    m, d = a.size, float(b.sum())
    if m < 2 or d <= 0:
        return float("nan")
    r = float(a.sum()) / d
    return float(m / (m - 1) * np.sum((a - r * b) ** 2) / (d * d))


class RatioTest(NamedTuple):
    """Two ratios (``then``, ``now``: e.g. precision = correct / kept, summed over images) compared:
    ``z = (now - then) / sqrt(var_then + var_now)`` with image-clustered variances (each at least
    the binomial ``r (1 - r) / den``), ``p_value`` two-sided."""

    then: float
    now: float
    se_then: float
    se_now: float
    z: float
    p_value: float


def ratio_test(num_then: Any, den_then: Any, num_now: Any, den_now: Any) -> RatioTest:
    """:class:`RatioTest` of per-image numerators and denominators of two sets of images.

    >>> t = ratio_test([3, 2, 4, 3], [4, 4, 4, 4], [1, 0, 1, 1], [4, 4, 4, 4])
    >>> round(t.then, 3), round(t.now, 3), t.p_value < 0.05
    (0.75, 0.188, True)
    """
    out = []
    for num, den in ((num_then, den_then), (num_now, den_now)):
        a, b = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
        d = float(b.sum())
        r = float(a.sum()) / d if d > 0 else float("nan")
        v = _clustered_ratio_var(a, b)
        vb = r * (1 - r) / d if d > 0 else float("nan")
        out.append(
            (
                r,
                math.sqrt(max(v, vb))
                if math.isfinite(v)
                else math.sqrt(vb)
                if math.isfinite(vb)
                else math.nan,
            )
        )
    (r0, s0), (r1, s1) = out
    se = math.hypot(s0, s1)
    if not (math.isfinite(r0) and math.isfinite(r1) and math.isfinite(se)):
        return RatioTest(r0, r1, s0, s1, float("nan"), float("nan"))
    z = (r1 - r0) / se if se > 0 else (0.0 if r1 == r0 else math.copysign(math.inf, r1 - r0))
    return RatioTest(r0, r1, s0, s1, float(z), normal_sf(z))


# ------------------------------------------------------------------------------ without labels
def _ks_distance(a: Any, b: Any) -> float:
    """Two-sample Kolmogorov–Smirnov distance ``max |F_a - F_b|`` (nan when a sample is empty).

    >>> _ks_distance([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]), _ks_distance([0.1, 0.2], [0.8, 0.9])
    (0.0, 1.0)
    """
    x, y = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if not x.size or not y.size:
        return float("nan")
    grid = np.concatenate([x, y])
    fa = np.searchsorted(x, grid, side="right") / x.size
    fb = np.searchsorted(y, grid, side="right") / y.size
    return float(np.max(np.abs(fa - fb)))


class ShiftStats(NamedTuple):
    """Label-free comparison of the boxes kept on two sets of images (reference, new).

    ``ks``: KS distance of the kept boxes' confidences; ``per_image``: mean boxes kept per image,
    new minus reference; ``class_chi2``: chi-square statistic of the 2 x classes table of kept
    boxes. ``*_p``: image-level permutation p-values (``(1 + #{perm >= observed}) / (1 + n_perm)``;
    None where the statistic is undefined, e.g. no kept box on one side).
    """

    ks: float | None
    ks_p: float | None
    per_image: float
    per_image_p: float
    class_chi2: float | None
    class_chi2_p: float | None
    n_perm: int


def _chi2_table(counts_a: np.ndarray, counts_b: np.ndarray) -> np.ndarray:
    """Chi-square statistics of 2 x C tables, one per row of ``counts_a``/``counts_b`` (R, C)."""
    tab = np.stack([counts_a, counts_b], axis=1).astype(np.float64)  # (R, 2, C)
    col = tab.sum(axis=1, keepdims=True)
    row = tab.sum(axis=2, keepdims=True)
    tot = tab.sum(axis=(1, 2), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        exp = row * col / tot
        term = np.where(exp > 0, (tab - exp) ** 2 / exp, 0.0)
    return term.sum(axis=(1, 2))


def shift_tests(
    conf_ref: Any,
    img_ref: Any,
    cls_ref: Any,
    n_img_ref: int,
    conf_new: Any,
    img_new: Any,
    cls_new: Any,
    n_img_new: int,
    *,
    n_classes: int,
    n_perm: int = 999,
    seed: int = 0,
) -> ShiftStats:
    """:class:`ShiftStats` of the kept boxes of a reference and a new set of images.

    Args:
        conf_ref, img_ref, cls_ref: (n,) confidence, image id (0..n_img_ref-1) and class of the
            reference's kept boxes; ``n_img_ref`` its image count (images without a kept box count).
        conf_new, img_new, cls_new, n_img_new: The same for the new images.
        n_classes: Number of classes.
        n_perm: Permutations: the images of both sets are pooled and relabelled at random, the
            image count of each side kept; each statistic is recomputed.
        seed: Seed of the permutations.

    >>> rng = np.random.default_rng(0)
    >>> ia, ib = np.repeat(np.arange(50), 4), np.repeat(np.arange(50), 4)
    >>> s = shift_tests(rng.uniform(size=200), ia, ia % 3, 50, rng.uniform(size=200) ** 3, ib, ib % 3, 50,
    ...                 n_classes=3, n_perm=199)
    >>> s.ks_p < 0.01, s.per_image_p > 0.5
    (True, True)
    """
    ca, cb = np.asarray(conf_ref, dtype=np.float64), np.asarray(conf_new, dtype=np.float64)
    ia, ib = np.asarray(img_ref, dtype=np.int64), np.asarray(img_new, dtype=np.int64)
    ka, kb = np.asarray(cls_ref, dtype=np.int64), np.asarray(cls_new, dtype=np.int64)
    na, nb = int(n_img_ref), int(n_img_new)
    if na < 1 or nb < 1:
        raise InputError(f"Expected at least one image on each side, but got {na} and {nb}")
    # pooled images 0..na+nb-1; boxes carry their pooled image
    conf = np.concatenate([ca, cb])
    pimg = np.concatenate([ia, ib + na])
    cls = np.concatenate([ka, kb])
    per_img = np.bincount(pimg, minlength=na + nb).astype(np.float64)
    cls_img = np.zeros((na + nb, n_classes))
    np.add.at(cls_img, (pimg, np.clip(cls, 0, n_classes - 1)), 1.0)
    sides = _relabellings(na, nb, n_perm, seed)
    ks, both = _ks_per_labelling(conf, pimg, sides)
    mean_new = sides.astype(np.float64) @ per_img / nb
    mean_ref = (~sides).astype(np.float64) @ per_img / na
    diff = mean_new - mean_ref
    cc_new = sides.astype(np.float64) @ cls_img
    cc_ref = (~sides).astype(np.float64) @ cls_img
    chi = np.where(both, _chi2_table(cc_ref, cc_new), np.nan)
    return ShiftStats(
        ks=float(ks[0]) if np.isfinite(ks[0]) else None,
        ks_p=_perm_p(ks),
        per_image=float(diff[0]),
        per_image_p=_perm_p(np.abs(diff)),
        class_chi2=float(chi[0]) if np.isfinite(chi[0]) else None,
        class_chi2_p=_perm_p(chi),
        n_perm=int(n_perm),
    )


def _relabellings(na: int, nb: int, n_perm: int, seed: int) -> np.ndarray:
    """``(n_perm + 1, na + nb)`` sides of the pooled images (True: "new"): row 0 the observed
    labelling, then ``n_perm`` random ones that keep each side's image count."""
    rng = np.random.default_rng(seed)
    sides = np.zeros((n_perm + 1, na + nb), dtype=bool)  # True: "new"; row 0 the observed labelling
    sides[0, na:] = True
    for r in range(1, n_perm + 1):
        sides[r, rng.permutation(na + nb)[:nb]] = True
    return sides


def _ks_per_labelling(
    conf: np.ndarray, pimg: np.ndarray, sides: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The two-sample KS statistic of the boxes' confidences under each labelling (nan where a side
    has no box), and whether both sides have boxes."""
    order = np.argsort(conf, kind="stable")
    img_sorted = pimg[order]
    last = np.r_[conf[order][1:] != conf[order][:-1], True][
        : conf.size
    ]  # ends of runs of tied scores (none: no box)
    new_boxes = sides[:, img_sorted]  # (R, n) in sorted order
    n_new = new_boxes.sum(axis=1)
    n_ref = conf.size - n_new
    both = (n_new > 0) & (n_ref > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        fb = np.cumsum(new_boxes, axis=1)[:, last] / n_new[:, None]
        fa = np.cumsum(~new_boxes, axis=1)[:, last] / n_ref[:, None]
        ks = np.where(both, np.abs(fa - fb).max(axis=1) if last.any() else 0.0, np.nan)
    return ks, both


def _perm_p(stat: np.ndarray) -> float | None:
    """Permutation p-value of the observed ``stat[0]`` among the finite permuted ones; None when
    the observed one is not finite."""
    if not np.isfinite(stat[0]):
        return None
    rest = stat[1:][np.isfinite(stat[1:])]
    return float((1 + np.count_nonzero(rest >= stat[0] - 1e-12)) / (1 + rest.size))

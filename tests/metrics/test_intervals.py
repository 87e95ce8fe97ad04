"""Every interval det_calib writes contains the estimate printed beside it.

A binned calibration error is biased upward by sampling noise, and its bootstrap replicates more
so: on few boxes the estimate can sit below nearly every replicate, where no percentile-type
interval (plain, basic or bias-corrected) contains it. ``bootstrap_ci``'s default then falls back
to the normal interval. Planted cases here (few images, calibrated and miscalibrated scores)
include ones where the bias-corrected interval alone excludes its estimate; the fixture run and
the demo run (tests/system/test_pipeline.py, tests/system/test_cli.py) check every interval of
``calibration.json``, ``summary.txt`` and ``report.md``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import interval_violations, printed_interval_violations

from det_calib.evaluation.figures import _scores_of
from det_calib.metrics import bootstrap
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import kept_ece

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _planted(n_img: int, per_img: int, temperature: float, seed: int):
    """Boxes whose true probability of being correct is ``sigmoid(z)``; reported ``sigmoid(z / T)``."""
    rng = np.random.default_rng(seed)
    n = n_img * per_img
    z = rng.normal(-1.0, 2.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-z))
    p = 1 / (1 + np.exp(-z / temperature))
    img = np.repeat(np.arange(n_img), per_img)
    loc = np.where(y, rng.uniform(0.5, 1.0, n), 0.0)
    cls = rng.integers(0, 4, n)
    return p, y, img, loc, cls, z


CASES = [
    (n_img, per_img, t, seed)
    for n_img, per_img in ((8, 5), (20, 10), (60, 20))
    for t in (1.0, 0.7, 1.5)
    for seed in range(4)
]


@pytest.mark.parametrize("statistic", ["ece", "kept_ece", "laece", "mce"])
def test_default_interval_contains_the_estimate_on_planted_cases(statistic):
    fns = {
        "ece": functools.partial(metrics.ece, n_bins=15),
        "kept_ece": functools.partial(kept_ece, threshold=0.25, n_bins=15),
        "laece": functools.partial(metrics.laece, n_bins=25),
        "mce": functools.partial(metrics.mce, n_bins=15),
    }
    fn = fns[statistic]
    bc_excluded = 0
    for n_img, per_img, t, seed in CASES:
        p, y, img, loc, cls, _ = _planted(n_img, per_img, t, seed)
        args = (p, loc, cls) if statistic == "laece" else (p, y)
        est = fn(*args)
        lo, hi = metrics.bootstrap_ci(fn, img, *args, n_boot=200, seed=seed)
        assert lo <= est <= hi, (statistic, n_img, per_img, t, seed, est, lo, hi)
        assert lo >= 0.0  # a binned error's interval never goes below 0
        blo, bhi = metrics.bootstrap_ci(fn, img, *args, n_boot=200, seed=seed, method="bc")
        bc_excluded += not blo <= est <= bhi
        if blo <= est <= bhi:  # where BC contains the estimate, it is the interval given
            assert (lo, hi) == (blo, bhi)
    if statistic in ("ece", "kept_ece", "laece"):
        # the planted cases reach the fallback: BC alone excludes the estimate in some of them
        assert bc_excluded > 0


def test_fallback_is_the_normal_interval_raised_to_the_lowest_replicate():
    """Where BC excludes the estimate: ``theta -+ 1.96 sd`` of the replicates, its low end raised to
    ``min(lowest replicate, theta)``, recomputed here from the same replicates."""
    found = 0
    for seed in range(30):
        p, y, img, *_ = _planted(8, 5, 1.0, seed)
        fn = functools.partial(metrics.ece, n_bins=15)
        est = fn(p, y)
        blo, bhi = metrics.bootstrap_ci(fn, img, p, y, n_boot=300, seed=seed, method="bc")
        if blo <= est <= bhi:
            continue
        found += 1
        _, inv = np.unique(img, return_inverse=True)
        reps = bootstrap._replicates(fn, inv.ravel(), int(inv.max()) + 1, [p, y], 300, seed)
        half = 1.959963984540054 * np.std(reps, ddof=1)
        lo, hi = metrics.bootstrap_ci(fn, img, p, y, n_boot=300, seed=seed)
        assert hi == pytest.approx(est + half, rel=1e-12)
        assert lo == pytest.approx(max(est - half, min(reps.min(), est)), rel=1e-12, abs=1e-15)
    assert found > 0


def test_scores_of_planted_cases_contain_their_estimates():
    """The all-box figures of a head (``Scores``, as calibration.json writes them)."""
    for n_img, per_img, t, seed in CASES[::3]:
        p, y, img, loc, cls, z = _planted(n_img, per_img, t, seed)
        feats = np.random.default_rng(seed).uniform(size=(len(p), 4))
        s = _scores_of(
            p,
            y,
            logit=z,
            temperature=t,
            loc_iou=loc,
            cls_id=cls,
            features=feats,
            image_id=img,
            ece_bins=15,
            laece_bins=25,
            dece_bins=[8, 3, 3, 3, 3],
            n_boot=100,
            seed=seed,
        )
        bad, n = interval_violations(s.to_flat("after"))
        assert n == 2 and not bad, bad


def test_the_checkers_find_an_interval_without_its_estimate():
    """The checkers used on every run fail where they should (they are not vacuous)."""
    bad, n = interval_violations(
        {
            "eval": {
                "nms": {
                    "ece_after": 0.05,
                    "ece_after_ci": [0.06, 0.07],
                    "laece0": 0.1,
                    "laece0_ci": [0.05, 0.2],
                }
            }
        }
    )
    assert n == 2 and bad == [".eval.nms.ece_after_ci: 0.05 not in [0.06, 0.07]"]
    bad, n = interval_violations({"x_ci": [0.0, 1.0]})
    assert bad == [".x_ci: no estimate `x` beside it"]
    bad, n = printed_interval_violations("ECE 0.0617 [0.0463, 0.0692] -> 0.0458 [0.0306, 0.0409]")
    assert n == 2 and bad == ["0.0458 [0.0306, 0.0409]"]


def test_the_checker_reads_a_floor_gaps_ranges_by_its_reason():
    """A floor gap's ranges are checked against the ECE beside them: inside where the reason says the
    gap is a few images' or the fit's sampling, above where no map of the score reaches the floor."""
    images = {"reason": "images", "ece_without": 0.04, "floor_without_range": [0.02, 0.05]}
    sampling = {"reason": "sampling", "refit_ece": 0.004, "refit_floor_range": [0.002, 0.007]}
    score = {"reason": "score", "refit_ece": 0.09, "refit_floor_range": [0.02, 0.05]}
    for gap in (images, sampling, score):
        assert interval_violations({"floor_gap": gap}) == ([], 1)
    bad, _ = interval_violations({"floor_gap": {**images, "ece_without": 0.06}})
    assert bad == [".floor_gap.floor_without_range: 0.06 not in [0.02, 0.05]"]
    bad, _ = interval_violations({"floor_gap": {**score, "refit_ece": 0.03}})
    assert bad == [".floor_gap.refit_floor_range: 0.03 not above [0.02, 0.05] (reason score)"]


@pytest.mark.parametrize("method", ["bc-normal", "bc", "basic", "normal", "percentile"])
def test_an_interval_given_its_estimate_is_the_one_computed_with_it(method):
    """``estimate=``, the figure a caller computed already, gives the interval bootstrap_ci computes
    itself, bit for bit; and it is used as given, not computed again (another estimate moves every
    method's interval but the percentile one, which needs none)."""
    rng = np.random.default_rng(5)
    img = rng.integers(0, 60, 3000)
    conf = rng.uniform(size=img.size)
    y = rng.uniform(size=img.size) < conf**1.5
    fn = functools.partial(metrics.ece, n_bins=15)
    e = metrics.ece(conf, y, n_bins=15)
    own = metrics.bootstrap_ci(fn, img, conf, y, n_boot=200, seed=3, method=method)
    given = metrics.bootstrap_ci(fn, img, conf, y, n_boot=200, seed=3, method=method, estimate=e)
    assert given == own
    other = metrics.bootstrap_ci(
        fn, img, conf, y, n_boot=200, seed=3, method=method, estimate=e + 0.01
    )
    assert (other == own) == (method == "percentile")

"""The classifier's reject option: its guarantee holds over repeated draws of calibration images, it
certifies nothing it cannot, and bad targets get one line."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.tasks.classify.thresholds_reject import reject_threshold

pytestmark = pytest.mark.fast


def _draw(rng, n, skew=1.0):
    conf = rng.uniform(0.2, 1.0, n)
    right = rng.random(n) < conf**skew  # skew > 1: over-confident scores
    return conf, right


@pytest.mark.parametrize(
    ("target", "delta", "skew"), [(0.9, 0.1, 1.0), (0.9, 0.05, 2.0), (0.8, 0.1, 1.5)]
)
def test_the_guarantee_holds_over_repeated_calibration_draws(target, delta, skew):
    """Violation: the true accuracy above the certified threshold is below the target. The true
    accuracy of answered images at lambda is known in closed form for these draws."""
    rng = np.random.default_rng(0)
    reps, violations, certified = 200, 0, 0
    for _ in range(reps):
        r = reject_threshold(*_draw(rng, 3000, skew), target=target, delta=delta)
        if not r.certified:
            continue
        certified += 1
        lam = max(r.threshold, 0.2)
        # E[conf^skew | conf >= lam] for conf ~ U(0.2, 1)
        true_acc = (1 - lam ** (skew + 1)) / ((skew + 1) * (1 - lam))
        violations += true_acc < target
    se = np.sqrt(delta * (1 - delta) / reps)
    assert certified > 0.25 * reps  # the rule certifies something in most draws (3,000 images)
    assert violations / reps <= delta + 2 * se


def test_the_plug_in_threshold_would_break_it_and_the_rule_is_above_it():
    """The lowest threshold whose calibration accuracy reaches the target (no guarantee) lies
    below the certified one."""
    rng = np.random.default_rng(1)
    conf, right = _draw(rng, 2000, 1.0)
    r = reject_threshold(conf, right, target=0.9, delta=0.1)
    grid = np.linspace(0, 1, 201)
    plug = min(lam for lam in grid if (conf >= lam).any() and right[conf >= lam].mean() >= 0.9)
    assert r.certified and r.threshold > plug and r.accuracy >= 0.9


def test_nothing_is_certified_when_no_threshold_reaches_the_target():
    rng = np.random.default_rng(2)
    conf = rng.uniform(0.5, 1.0, 300)
    right = rng.random(300) < 0.6  # 60% right whatever the score
    r = reject_threshold(conf, right, target=0.95, delta=0.1)
    assert not r.certified and np.isnan(r.threshold) and r.answered == 0.0


@pytest.mark.parametrize(
    ("target", "delta", "words"),
    [(1.0, 0.1, "target accuracy"), (0.9, 0.0, "delta"), (-0.1, 0.1, "target accuracy")],
)
def test_bad_targets_get_one_line(target, delta, words):
    with pytest.raises(InputError, match=f"the {words} must lie strictly between 0 and 1"):
        reject_threshold(np.array([0.9]), np.array([True]), target=target, delta=delta)

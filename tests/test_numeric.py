"""det_calib.numeric: the shared elementwise primitives against scipy / scikit-learn."""

import math

import numpy as np
import pytest
from scipy import special
from sklearn.metrics import log_loss

from det_calib import numeric

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.fixture
def z():
    rng = np.random.default_rng(0)
    return np.concatenate(
        [rng.normal(0, 8, 2000), [0.0, -745.0, -710.0, 710.0, 1e4, -1e4, 36.0, -36.0]]
    )


def test_sigmoid_and_expit_match_scipy_without_warnings(z):
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s, e = numeric.sigmoid(z), numeric.expit(z)
    ref = special.expit(z)
    # the tanh form is exact to an absolute 1e-16 (relative error grows only where p < 1e-2)
    np.testing.assert_allclose(s, ref, rtol=1e-14, atol=2e-16)
    np.testing.assert_allclose(e, ref, rtol=1e-15, atol=0)
    assert numeric.sigmoid(0.0) == 0.5 and s.dtype == np.float64
    np.testing.assert_array_equal(
        numeric.sigmoid(-z) + s, np.ones_like(z)
    )  # symmetric, exact at the sum


def test_logit_inverts_sigmoid_and_limits():
    p = np.linspace(1e-9, 1 - 1e-9, 1001)
    np.testing.assert_allclose(numeric.logit(p), special.logit(p), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(numeric.expit(numeric.logit(p)), p, rtol=1e-12)
    np.testing.assert_allclose(numeric.sigmoid(numeric.logit(p)), p, rtol=1e-12, atol=2e-16)
    with np.errstate(all="raise"):
        assert numeric.logit(np.array([0.0, 1.0])).tolist() == [-math.inf, math.inf]
    assert numeric.logit_threshold(0.0) == -math.inf and numeric.logit_threshold(-1.0) == -math.inf
    assert numeric.logit_threshold(0.25) == pytest.approx(math.log(1 / 3), rel=1e-15)


def test_softplus_log_sigmoid_logsumexp(z):
    np.testing.assert_allclose(numeric._softplus(z), np.logaddexp(0.0, z), rtol=0)
    np.testing.assert_allclose(
        numeric._log_sigmoid(z), special.log_expit(z), rtol=1e-13, atol=1e-300
    )
    a = np.random.default_rng(1).normal(0, 30, (50, 7))
    np.testing.assert_allclose(numeric.logsumexp(a), special.logsumexp(a, axis=1), rtol=1e-14)
    np.testing.assert_allclose(
        numeric.log_softmax(a), special.log_softmax(a, axis=1), rtol=1e-12, atol=1e-12
    )


def test_weighted_mean_known_answers_and_nan_cases():
    x = np.array([1.0, 2.0, 4.0])
    assert numeric.weighted_mean(x) == pytest.approx(7 / 3)
    assert numeric.weighted_mean(x, np.array([1.0, 0.0, 3.0])) == 13 / 4
    assert math.isnan(numeric.weighted_mean(np.array([])))
    assert math.isnan(numeric.weighted_mean(x, np.zeros(3)))


def test_binary_nll_logits_matches_log_loss_and_stays_finite():
    rng = np.random.default_rng(2)
    zz = rng.normal(0, 3, 5000)
    y = rng.random(5000) < special.expit(zz)
    w = rng.random(5000)
    ref = log_loss(y, special.expit(zz), sample_weight=w)
    assert numeric.binary_nll_logits(zz, y, w) == pytest.approx(ref, rel=1e-10)
    # where sigmoid rounds to 1.0 the loss from probabilities is 0 (or inf); from logits it is exact
    assert numeric.binary_nll_logits([50.0], [1]) == pytest.approx(math.exp(-50), rel=1e-12)
    assert numeric.binary_nll_logits([50.0], [0]) == pytest.approx(50.0, rel=1e-15)
    assert math.isnan(numeric.binary_nll_logits([], []))


def test_binary_nll_terms_is_the_fit_form_and_agrees_with_the_reporting_form():
    rng = np.random.default_rng(3)
    zz = rng.normal(0, 4, 3000)
    y = (rng.random(3000) < 0.5).astype(np.float64)
    terms = numeric.binary_nll_terms(zz, y)
    np.testing.assert_array_equal(
        terms, np.logaddexp(0.0, zz) - y * zz
    )  # bit for bit: the pinned fits
    assert numeric.weighted_mean(terms) == pytest.approx(
        numeric.binary_nll_logits(zz, y), rel=1e-13
    )

"""The classifier maps (temperature, vector, matrix scaling): planted answers, parity with
scikit-learn's multinomial logistic regression, top-1 kept or measured, one-line errors; and the
multi-class calibration metrics against netcal and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.numeric import log_softmax
from det_calib.tasks.classify.metrics import (
    classwise_ece,
    multiclass_brier,
    multiclass_nll,
    top_k_accuracy,
    top_label_ece,
)
from det_calib.tasks.classify.softmax_maps import _KEEPS_TOP1, MULTICLASS_METHODS, fit_multiclass


def _draw(z: np.ndarray, seed: int) -> np.ndarray:
    """Labels drawn from softmax(z): z is calibrated for them."""
    p = np.exp(log_softmax(z, axis=1))
    u = np.random.default_rng(seed).random(len(z))[:, None]
    return (u > np.cumsum(p, axis=1)).sum(axis=1).clip(0, z.shape[1] - 1)


@pytest.mark.fast
def test_temperature_recovers_a_planted_over_confident_classifier():
    """The textbook case: logits x3 -> T within 5% of 3, top-1 unchanged."""
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 1.5, (20_000, 8))
    y = _draw(z, 2)
    m = fit_multiclass("temperature", 3.0 * z, y)
    assert abs(m.temperature - 3.0) / 3.0 < 0.05
    assert (m.apply(3.0 * z).argmax(1) == z.argmax(1)).all()


@pytest.mark.fast
def test_vector_scaling_recovers_planted_per_class_scales_and_biases():
    rng = np.random.default_rng(3)
    k = 5
    z = rng.normal(0.0, 2.0, (40_000, k))
    w_true, b_true = np.array([0.5, 1.0, 2.0, 0.8, 1.5]), np.array([0.3, -0.2, 0.0, 0.5, -0.6])
    y = _draw(z * w_true + b_true, 4)
    m = fit_multiclass("vector", z, y)
    assert np.allclose(np.diag(m.weight), w_true, atol=0.06)
    # the bias is identified up to a shared shift (softmax ignores it)
    assert np.allclose(m.bias - m.bias.mean(), b_true - b_true.mean(), atol=0.06)


@pytest.mark.fast
def test_matrix_scaling_is_multinomial_logistic_regression_on_the_logits():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(5)
    z = rng.normal(0.0, 2.0, (3000, 4))
    mix = np.eye(4) + 0.3 * rng.normal(size=(4, 4))
    y = _draw(z @ mix.T, 6)
    ours = fit_multiclass("matrix", z, y)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(z, y)
    p_ref = ref.predict_proba(z)
    assert multiclass_nll(ours.proba(z), y) == pytest.approx(multiclass_nll(p_ref, y), abs=1e-7)
    assert np.abs(ours.proba(z) - p_ref).max() < 1e-4


@pytest.mark.fast
def test_a_penalty_pulls_matrix_scaling_towards_a_diagonal_map():
    rng = np.random.default_rng(7)
    z = rng.normal(0.0, 2.0, (400, 4))
    y = _draw(z, 8)
    free = fit_multiclass("matrix", z, y)
    held = fit_multiclass("matrix", z, y, offdiag_l2=1.0)
    off = ~np.eye(4, dtype=bool)
    assert np.abs(held.weight[off]).sum() < 0.2 * np.abs(free.weight[off]).sum()


@pytest.mark.fast
def test_which_maps_keep_top1_and_none_is_the_identity():
    assert set(_KEEPS_TOP1) == set(MULTICLASS_METHODS)
    assert _KEEPS_TOP1["temperature"] and _KEEPS_TOP1["none"]
    assert not _KEEPS_TOP1["vector"] and not _KEEPS_TOP1["matrix"]
    z = np.random.default_rng(9).normal(size=(50, 3))
    assert np.array_equal(fit_multiclass("none", z, np.zeros(50, int)).apply(z), z)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("logits", "labels", "words"),
    [
        (np.zeros((4, 1)), np.zeros(4, int), "K >= 2"),
        (np.zeros((4, 3)), np.zeros(3, int), "3 labels for 4 images"),
        (np.zeros((4, 3)), np.array([0, 1, 2, 3]), "integers in [0, 3)"),
        (np.full((4, 3), np.nan), np.zeros(4, int), "NaN"),
        (np.zeros((0, 3)), np.zeros(0, int), "no images"),
    ],
)
def test_bad_input_gets_one_line(logits, labels, words):
    with pytest.raises(InputError, match=words.replace("[", r"\[").replace(")", r"\)")):
        fit_multiclass("vector", logits, labels)


@pytest.mark.fast
def test_unknown_method_and_matrix_beyond_its_class_count_are_refused():
    with pytest.raises(InputError, match="unknown classifier map 'platt'"):
        fit_multiclass("platt", np.zeros((2, 2)), np.zeros(2, int))
    with pytest.raises(InputError, match="matrix scaling fits"):
        fit_multiclass("matrix", np.zeros((2, 101)), np.zeros(2, int))


@pytest.mark.fast
def test_metrics_match_netcal_and_scikit_learn():
    from netcal.metrics import ECE
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(11)
    z = rng.normal(0.0, 2.0, (5000, 6))
    y = _draw(0.6 * z, 12)  # over-confident
    p = np.exp(log_softmax(z, axis=1))
    assert top_label_ece(p, y) == pytest.approx(ECE(bins=15).measure(p, y), abs=1e-9)
    assert top_label_ece(p, y) > 0.05
    assert multiclass_nll(p, y) == pytest.approx(log_loss(y, p), rel=1e-9)
    onehot = np.eye(6)[y]
    assert multiclass_brier(p, y) == pytest.approx(((p - onehot) ** 2).sum(1).mean(), rel=1e-12)
    by_hand = np.mean([ECE(bins=15).measure(p[:, k], (y == k).astype(int)) for k in range(6)])
    assert classwise_ece(p, y) == pytest.approx(by_hand, abs=1e-9)
    assert top_k_accuracy(p, y, 1) == pytest.approx(np.mean(p.argmax(1) == y))
    assert top_k_accuracy(p, y, 6) == 1.0

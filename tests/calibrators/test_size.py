"""The size-conditioned calibrator: known answers, parity with scikit-learn, persistence, and its
opt-in place in ``auto``'s cross-validation."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.calibrators import registry
from det_calib.calibrators.base import _reranks, calibrated_logits, log_area
from det_calib.calibrators.size import SizePlattScaler
from det_calib.errors import DegenerateFitError, InputError
from det_calib.selection.cross_validation import select_calibrator

pytestmark = pytest.mark.fast


def _planted(n=40_000, a=1.3, b=-0.4, c=0.35, seed=0):
    rng = np.random.default_rng(seed)
    z, s = rng.normal(-1.0, 2.0, n), rng.uniform(-9.0, -1.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(a * z + b + c * s)))
    return z, y, s, np.arange(n) // 8


def test_it_recovers_a_planted_size_term():
    z, y, s, _ = _planted()
    m = SizePlattScaler().fit(z, y, log_area=s)
    assert m.a_ == pytest.approx(1.3, abs=0.05) and m.b_ == pytest.approx(-0.4, abs=0.1)
    assert m.c_ == pytest.approx(0.35, abs=0.03)
    assert m.nll_after_ < m.nll_before_


def test_it_matches_scikit_learns_unpenalised_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    z, y, s, _ = _planted(n=5000, seed=3)
    w = np.random.default_rng(1).uniform(0.5, 2.0, z.size)
    m = SizePlattScaler().fit(z, y, log_area=s, weights=w)
    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(
        np.column_stack([z, s]), y, sample_weight=w
    )
    np.testing.assert_allclose([m.a_, m.c_, m.b_], [*ref.coef_[0], ref.intercept_[0]], atol=1e-4)


def test_without_a_size_term_it_is_platt():
    rng = np.random.default_rng(2)
    z, s = rng.normal(0, 2, 30_000), rng.uniform(-8, -1, 30_000)
    y = rng.random(z.size) < 1 / (1 + np.exp(-(0.8 * z + 0.3)))
    m = SizePlattScaler().fit(z, y, log_area=s)
    p = registry.make_calibrator("platt").fit(z, y)
    assert abs(m.c_) < 0.03 and m.a_ == pytest.approx(p.a_, abs=0.02)


def test_the_map_reads_the_size_and_reranks():
    z, y, s, _ = _planted(n=5000)
    m = SizePlattScaler().fit(z, y, log_area=s)
    t = m.transform_logits(np.array([1.0, 1.0]), log_area=np.array([-8.0, -2.0]))
    assert t[1] - t[0] == pytest.approx(6 * m.c_)
    assert (
        _reranks(m)
        and registry.method_spec("size-platt").reranks
        and "size-platt" not in registry.global_methods()
    )
    assert m.equivalent_conf(0.25) is None
    np.testing.assert_array_equal(
        calibrated_logits(m, z, np.zeros(z.size), s), m.transform_logits(z, log_area=s)
    )
    with pytest.raises(InputError, match="log_area"):
        m.transform_logits(z)
    with pytest.raises(InputError, match="log_area"):
        calibrated_logits(m, z, np.zeros(z.size))


def test_log_area_is_the_log_of_the_relative_area():
    xyxy = np.array([[0.0, 0.0, 32.0, 32.0], [10.0, 10.0, 10.0, 50.0], [0.0, 0.0, 640.0, 480.0]])
    got = log_area(xyxy, np.array([640, 640, 640]), np.array([480, 480, 480]))
    np.testing.assert_allclose(got, [np.log(1024 / 307200), np.log(1e-8), 0.0])


def test_it_persists_and_refuses_bad_state():
    z, y, s, _ = _planted(n=3000)
    m = SizePlattScaler().fit(z, y, log_area=s)
    back = registry.calibrator_from_dict(m.to_dict())
    np.testing.assert_array_equal(
        back.transform_logits(z, log_area=s), m.transform_logits(z, log_area=s)
    )
    assert "c = " in SizePlattScaler.words(m.to_dict(), "size-platt")
    with pytest.raises(InputError, match="`a`"):
        SizePlattScaler.from_dict({**m.to_dict(), "a": -1.0})
    with pytest.raises(InputError, match="version"):
        SizePlattScaler.from_dict({**m.to_dict(), "version": 9})
    with pytest.raises(DegenerateFitError):
        SizePlattScaler().fit(z, np.zeros(z.size, bool), log_area=s)


def test_auto_tries_it_only_when_asked_and_chooses_it_on_a_planted_size_effect():
    z, y, s, g = _planted(n=20_000)
    plain = select_calibrator(
        z, y, groups=g, methods=registry.global_methods(), n_repeats=1, log_area=s
    )
    assert "size-platt" not in {c.method for c in plain.candidates}
    opted = select_calibrator(
        z, y, groups=g, methods=(*registry.global_methods(), "size-platt"), n_repeats=1, log_area=s
    )
    assert opted.chosen.method == "size-platt"
    assert opted.calibrator.c_ == pytest.approx(0.35, abs=0.05)
    # without sizes it is skipped, not failed
    blind = select_calibrator(z, y, groups=g, methods=("platt", "size-platt"), n_repeats=1)
    assert {c.method for c in blind.candidates} == {"none", "platt"}


def test_settings_opt_in():
    from det_calib.job.settings import Settings

    assert "size-platt" not in Settings().auto_methods()
    assert "size-platt" not in Settings(per_class=True).auto_methods()
    assert "size-platt" in Settings(size_maps=True).auto_methods()
    assert "class-platt" not in Settings(size_maps=True).auto_methods()

"""TemperatureScaler's JSON state and the weighted NLL: gaps found by mutation testing
(``benchmarks/mutation.py calibrators/temperature``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from det_calib.calibrators.temperature import TemperatureScaler, binary_nll
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def test_binary_nll_integer_weights_equal_repeated_boxes():
    z = np.array([-2.0, 0.5, 3.0, -0.3])
    y = np.array([0, 1, 1, 1])
    w = np.array([3, 0, 1, 2])
    rep = np.repeat(np.arange(4), w)
    for t in (1.0, 1.7):
        assert binary_nll(z, y, t, weights=w) == pytest.approx(
            binary_nll(z[rep], y[rep], t), rel=1e-12
        )
        assert binary_nll(z, y, t, weights=w) != pytest.approx(binary_nll(z, y, t), rel=1e-6)
    # the known answer: softplus(z / T) - y z / T, averaged
    want = np.mean(np.logaddexp(0, z / 2) - y * z / 2)
    assert binary_nll(z, y, 2.0) == pytest.approx(want, rel=1e-12)


def test_json_round_trip_keeps_every_setting_and_diagnostic():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, 500)
    y = rng.random(500) < 1 / (1 + np.exp(-z / 1.5))
    s = TemperatureScaler(kind="sigmoid", tol=1e-8, max_iter=57, min_samples=20).fit(z, y)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["format"] == "det_calib.TemperatureScaler" and d["version"] == 1
    r = TemperatureScaler.from_dict(d)
    assert (r.kind, r.tol, r.max_iter, r.min_samples) == ("sigmoid", 1e-8, 57, 20)
    assert r.temperature_ == s.temperature_
    for attr in ("n_iter_", "nll_before_", "nll_after_", "n_samples_"):
        assert getattr(r, attr) == getattr(s, attr), attr
    assert d["n_samples"] == 500 and math.isfinite(d["nll_after"]) and d["n_iter"] >= 1
    # only kind and temperature are required: the constructor's defaults fill the rest
    m = TemperatureScaler.from_dict({"kind": "softmax", "temperature": 2.0})
    assert (m.kind, m.tol, m.max_iter, m.min_samples, m.temperature_) == (
        "softmax",
        1e-6,
        100,
        10,
        2.0,
    )
    assert not hasattr(m, "nll_after_")


@pytest.mark.parametrize(
    "patch, match", [({"format": "other"}, "`format`"), ({"version": 2}, "`version`")]
)
def test_from_dict_rejects_other_formats(patch, match):
    d = {"kind": "sigmoid", "temperature": 1.2, **patch}
    with pytest.raises(InputError, match=match):
        TemperatureScaler.from_dict(d)


def test_repr_shows_the_settings_and_the_fitted_temperature():
    s = TemperatureScaler(kind="softmax", tol=1e-7, max_iter=9)
    assert repr(s) == "TemperatureScaler(kind='softmax', tol=1e-07, max_iter=9)"
    s = TemperatureScaler.from_dict({"kind": "sigmoid", "temperature": 1.2345678})
    assert (
        repr(s)
        == "TemperatureScaler(kind='sigmoid', tol=1e-06, max_iter=100, temperature_=1.23457)"
    )


def test_a_scaler_rebuilt_without_diagnostics_saves_them_as_null():
    d = TemperatureScaler.from_dict({"kind": "sigmoid", "temperature": 1.5}).to_dict()
    assert d["temperature"] == 1.5
    assert (d["n_iter"], d["nll_before"], d["nll_after"], d["n_samples"]) == (
        None,
        None,
        None,
        None,
    )

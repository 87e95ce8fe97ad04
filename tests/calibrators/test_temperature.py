"""Temperature scaling: known answers, parity (scipy, scikit-learn, netcal), invariants, bad input."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import expit, log_softmax
from sklearn.metrics import log_loss

from det_calib.calibrators import temperature as calibrators
from det_calib.calibrators.temperature import (
    _T_MAX,
    _T_MIN,
    ConvergenceWarning,
    NotFittedError,
    TemperatureScaler,
    binary_nll,
    fit_temperature,
    softmax_nll,
)
from det_calib.errors import DegenerateFitError, InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def planted(
    t: float,
    n: int,
    *,
    mean: float = 0.0,
    std: float = 3.0,
    seed: int = 0,
    clip: float | None = None,
):
    """Logits z ~ N(mean, std^2) and labels ~ Bernoulli(sigmoid(z / t))."""
    rng = np.random.default_rng(seed)
    z = rng.normal(mean, std, n)
    if clip is not None:
        z = np.clip(z, -clip, clip)
    y = rng.random(n) < expit(z / t)
    return z, y


def nll_reference(z, y, t):
    """Binary NLL written independently of the module (logaddexp form)."""
    a = z / t
    return float(np.mean(np.logaddexp(0.0, a) - np.asarray(y, float) * a))


# ---------------------------------------------------------------------------------------------
# known answers


@pytest.mark.parametrize("t_true", [2.5, 0.5])
def test_recovers_planted_temperature_sigmoid(t_true):
    z, y = planted(t_true, 200_000)
    scaler = TemperatureScaler().fit(z, y)
    assert abs(scaler.temperature_ - t_true) < 0.05
    assert scaler.n_samples_ == 200_000
    assert scaler.nll_after_ < scaler.nll_before_
    assert scaler.n_iter_ < 20


def test_recovers_planted_temperature_softmax():
    torch.manual_seed(0)
    logits = 9 * torch.randn(5000, 10)
    labels = torch.distributions.Categorical(logits=logits / 3).sample()
    grid = np.round(np.linspace(0.5, 6.0, 551), 4)  # step 0.01
    z, y, rows = logits.double().numpy(), labels.numpy(), np.arange(5000)
    nll = [
        -np.mean(log_softmax(z / t, axis=1)[rows, y]) for t in grid
    ]  # numpy: torch is slow on a busy CPU
    t_grid = grid[int(np.argmin(nll))]
    assert t_grid == pytest.approx(2.98, abs=0.015)

    t = fit_temperature(logits, labels, kind="softmax")
    assert abs(t - t_grid) < 0.01
    # the fitted optimum is at least as good as the best grid point
    assert softmax_nll(logits, labels, t) <= min(nll) + 1e-12


# ---------------------------------------------------------------------------------------------
# parity


def test_parity_scipy_gradient_sklearn():
    z, y = planted(1.7, 20_000, mean=-2.0)
    scaler = TemperatureScaler().fit(z, y)
    t = scaler.temperature_

    ref = minimize_scalar(
        lambda s: nll_reference(z, y, s),
        bounds=(0.1, 10.0),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert t == pytest.approx(ref.x, rel=1e-5)

    # dNLL/dT = mean((p - y) * (-z / T^2)) vanishes at the optimum
    grad = np.mean((expit(z / t) - y) * (-z / t**2))
    assert abs(grad) < 1e-8

    assert scaler.nll_after_ == pytest.approx(log_loss(y, expit(z / t)), rel=1e-10)
    assert scaler.nll_after_ == pytest.approx(nll_reference(z, y, t), rel=1e-12)
    assert scaler.nll_before_ == pytest.approx(log_loss(y, expit(z)), rel=1e-10)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("t_rel", [0.2, 5.0])
def test_parity_scipy_across_scales(scale, t_rel):
    # optimum from T = 2e-4 to T = 5e3: exercises the bisection fallback (Hessian in log T < 0 far
    # from the optimum) as well as plain Newton steps
    z, y = planted(t_rel * scale, 3000, mean=-1.0 * scale, std=3.0 * scale, seed=5)
    t = fit_temperature(z, y)
    ref = minimize_scalar(
        lambda u: nll_reference(z, y, np.exp(u)),
        bounds=(np.log(1e-5), np.log(1e5)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert t == pytest.approx(np.exp(ref.x), rel=1e-5)


def test_parity_scipy_softmax():
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 4.0, (3000, 5))
    y = np.array(
        [rng.choice(5, p=p) for p in np.exp(z / 1.5) / np.exp(z / 1.5).sum(1, keepdims=True)]
    )
    t = fit_temperature(z, y, kind="softmax")
    ref = minimize_scalar(
        lambda s: softmax_nll(z, y, s),
        bounds=(0.1, 10.0),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert t == pytest.approx(ref.x, rel=1e-5)
    logp = torch.log_softmax(torch.from_numpy(z) / t, dim=1)
    assert softmax_nll(z, y, t) == pytest.approx(
        torch.nn.functional.nll_loss(logp, torch.from_numpy(y)).item()
    )


@pytest.mark.parametrize("t_true", [2.5, 0.5])
def test_parity_netcal(t_true):
    # netcal is a declared test dependency: a failed import fails this test (no importorskip).
    from netcal.scaling import TemperatureScaling

    # netcal takes probabilities and rebuilds logits with logit(clip(conf, eps, 1 - eps)), so keep
    # |z| < 8 where float64 round-trips the logit to ~1e-13.
    z, y = planted(t_true, 20_000, clip=7.9)
    t = fit_temperature(z, y)

    # Default settings (method="mle") already agree to ~2e-5: netcal minimises the mean BCE over the
    # weight w = 1/T with scipy.optimize.minimize (L-BFGS-B, finite-difference gradient, default
    # tolerances), in float64 because the input is float64. It exposes no tolerance option.
    ts = TemperatureScaling(detection=True, method="mle")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts.fit(expit(z).reshape(-1, 1), y.astype(np.float64))
    w = np.asarray(ts.temperature, dtype=np.float64).reshape(
        -1
    )  # netcal's "temperature" is the weight 1/T
    assert w.shape == (1,)
    assert abs(t - 1.0 / w[0]) < 1e-4


# ---------------------------------------------------------------------------------------------
# invariants and numerics


@pytest.mark.parametrize("t", [0.3, 1.0, 2.7])
def test_temperature_preserves_ranking(t):
    rng = np.random.default_rng(2)
    z = rng.normal(-1.0, 2.0, 5000)  # distinct, moderate: sigmoid(z / t) does not round to ties
    scaler = TemperatureScaler.from_dict({"kind": "sigmoid", "temperature": t})
    p = scaler.predict_proba(z)
    order = np.argsort(z, kind="stable")
    assert np.array_equal(np.argsort(p, kind="stable"), order)
    assert np.all(np.diff(p[order]) > 0)
    # far tails may round to equal probabilities, but never reverse the order
    zz = np.sort(rng.normal(0.0, 40.0, 5000))
    assert np.all(np.diff(scaler.predict_proba(zz)) >= 0)


def test_extreme_logits_are_stable():
    z, y = planted(5.0, 50_000, std=30.0)  # logits up to +-150
    z[:3] = [1000.0, -1000.0, 700.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler = TemperatureScaler().fit(z, y)
    assert abs(scaler.temperature_ - 5.0) < 0.3
    assert np.isfinite([scaler.nll_before_, scaler.nll_after_]).all()
    assert np.isfinite(binary_nll([1e4, -1e4], [0, 1], 1.0))
    assert binary_nll([1e4, -1e4], [0, 1], 1.0) == pytest.approx(1e4)
    zs = np.array([[1000.0, -1000.0, 0.0], [-50.0, 50.0, 49.0]])
    assert softmax_nll(zs, [1, 2], 1.0) == pytest.approx((2000.0 + np.logaddexp(0, 1.0)) / 2)


def test_weights_match_repeated_rows():
    z, y = planted(1.5, 2000, seed=3)
    counts = np.random.default_rng(4).integers(0, 4, z.size)
    t_weighted = fit_temperature(z, y, weights=counts)
    t_repeated = fit_temperature(np.repeat(z, counts), np.repeat(y, counts))
    assert t_weighted == pytest.approx(t_repeated, rel=1e-9)


def test_max_iter_warns():
    z, y = planted(2.5, 2000)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        t = fit_temperature(z, y, max_iter=1)
    assert np.isfinite(t) and t > 0


# ---------------------------------------------------------------------------------------------
# degenerate and bad input


def test_degenerate_inputs():
    z, _ = planted(2.0, 100)
    with pytest.raises(DegenerateFitError, match="no incorrect boxes"):
        fit_temperature(z, np.ones(100, bool))
    with pytest.raises(DegenerateFitError, match="no correct boxes"):
        fit_temperature(z, np.zeros(100, bool))
    with pytest.raises(DegenerateFitError, match="at least 2 samples, got 1"):
        fit_temperature([0.3], [1], min_samples=1)
    with pytest.raises(DegenerateFitError, match="at least 10 samples, got 4"):
        fit_temperature([0.3, -1.0, 2.0, -0.5], [1, 0, 1, 1])
    with pytest.raises(DegenerateFitError, match="separable.*T -> 0"):
        fit_temperature(z, z > 0)
    with pytest.raises(DegenerateFitError, match="T -> inf"):
        fit_temperature(z, z < 0)  # anti-correlated
    with pytest.raises(DegenerateFitError, match="all logits zero"):
        fit_temperature(np.zeros(100), z > 0)
    bad = z.copy()
    bad[[3, 7]] = [np.nan, np.inf]
    with pytest.raises(DegenerateFitError, match="2 samples with non-finite logits"):
        fit_temperature(bad, z > 0.5)
    # optimum outside [T_MIN, T_MAX]
    zt, yt = planted(2.5, 2000)
    with pytest.raises(
        DegenerateFitError, match=f"T -> 0: the optimum lies outside \\[{_T_MIN:g}, {_T_MAX:g}\\]"
    ):
        fit_temperature(zt * 1e-5, yt)
    with pytest.raises(DegenerateFitError, match="T -> inf: the optimum lies outside"):
        fit_temperature(zt * 1e4, yt)
    # softmax: the label is always the arg-max class
    zs = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(DegenerateFitError, match="arg-max"):
        fit_temperature(zs, zs.argmax(1), kind="softmax")
    # zero weights do not count as samples
    with pytest.raises(DegenerateFitError, match="no incorrect boxes"):
        fit_temperature(
            z[:20], np.arange(20) < 10, weights=(np.arange(20) < 10).astype(float), min_samples=2
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"logits": np.zeros((20, 2)), "labels": np.zeros(20)}, "`logits` of shape \\(n,\\)"),
        (
            {"logits": np.zeros(20), "labels": np.zeros(19)},
            "length of `logits` \\(20\\), but got 19",
        ),
        ({"logits": np.zeros(20), "labels": np.full(20, 2)}, "`labels` to hold only 0/1"),
        ({"logits": np.zeros(20), "labels": np.zeros((20, 1))}, "`labels` of shape \\(n,\\)"),
        (
            {"logits": np.ones(20), "labels": np.zeros(20), "weights": np.ones(3)},
            "`weights` of shape \\(20,\\)",
        ),
        (
            {"logits": np.ones(20), "labels": np.zeros(20), "weights": -np.ones(20)},
            "`weights` to be finite and >= 0",
        ),
        ({"logits": np.ones(20), "labels": np.zeros(20), "kind": "relu"}, "`kind` to be one of"),
        ({"logits": np.ones(20), "labels": np.zeros(20), "tol": 0}, "`tol`"),
        ({"logits": np.ones(20), "labels": np.zeros(20), "max_iter": 0}, "`max_iter`"),
        (
            {"logits": np.zeros(20), "labels": np.zeros(20), "kind": "softmax"},
            "`logits` of shape \\(n, K\\)",
        ),
        (
            {"logits": np.zeros((20, 3)), "labels": np.full(20, 3), "kind": "softmax"},
            "class ids in \\[0, 3\\)",
        ),
        (
            {"logits": np.zeros((20, 3)), "labels": np.full(20, 0.5), "kind": "softmax"},
            "integer class ids",
        ),
    ],
)
def test_bad_input_raises_input_error(kwargs, match):
    kwargs = dict(kwargs)
    with pytest.raises(InputError, match=match):
        fit_temperature(kwargs.pop("logits"), kwargs.pop("labels"), **kwargs)


def test_not_fitted():
    scaler = TemperatureScaler()
    for method in (scaler.predict_proba, scaler.transform_logits):
        with pytest.raises(NotFittedError, match="not fitted yet"):
            method(np.zeros(3))
    with pytest.raises(NotFittedError):
        scaler.to_dict()


# ---------------------------------------------------------------------------------------------
# estimator API and persistence


def test_estimator_api_and_json_round_trip():
    z, y = planted(1.7, 5000, mean=-2.0)
    scaler = TemperatureScaler(kind="sigmoid", tol=1e-8, max_iter=50)
    assert scaler.tol == 1e-8 and scaler.max_iter == 50 and not hasattr(scaler, "temperature_")
    assert scaler.fit(z, y) is scaler

    d = json.loads(json.dumps(scaler.to_dict()))
    assert d["kind"] == "sigmoid" and d["temperature"] == scaler.temperature_
    back = TemperatureScaler.from_dict(d)
    for attr in (
        "temperature_",
        "n_iter_",
        "nll_before_",
        "nll_after_",
        "n_samples_",
        "kind",
        "tol",
        "max_iter",
    ):
        assert getattr(back, attr) == getattr(scaler, attr)
    np.testing.assert_array_equal(back.predict_proba(z), scaler.predict_proba(z))
    np.testing.assert_allclose(scaler.transform_logits(z), z / scaler.temperature_)
    np.testing.assert_allclose(scaler.predict_proba(z), expit(z / scaler.temperature_))

    with pytest.raises(InputError, match="temperature"):
        TemperatureScaler.from_dict({"kind": "sigmoid", "temperature": 0.0})
    with pytest.raises(InputError, match="missing the key 'temperature'"):
        TemperatureScaler.from_dict({"kind": "sigmoid"})


def test_softmax_estimator_rows_sum_to_one():
    torch.manual_seed(1)
    logits = 5 * torch.randn(500, 4)
    labels = torch.distributions.Categorical(logits=logits / 2).sample()
    scaler = TemperatureScaler(kind="softmax").fit(logits, labels)
    p = scaler.predict_proba(logits)
    assert p.shape == (500, 4)
    np.testing.assert_allclose(p.sum(1), 1.0)
    np.testing.assert_allclose(
        p, torch.softmax(logits.double() / scaler.temperature_, 1).numpy(), rtol=1e-12
    )
    assert (
        TemperatureScaler.from_dict(json.loads(json.dumps(scaler.to_dict()))).temperature_
        == scaler.temperature_
    )


def test_numpy_special_functions_match_scipy():
    """det_calib.numeric's expit / logsumexp / log_softmax (no scipy at run time) agree with scipy."""
    from scipy import special

    from det_calib import numeric

    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            rng.normal(0, 5, 1000),
            [-1000.0, -745.0, -709.0, -40.0, 0.0, 40.0, 1000.0, np.inf, -np.inf],
        ]
    )
    np.testing.assert_allclose(numeric.expit(x), special.expit(x), rtol=1e-15, atol=0)
    a = np.concatenate(
        [rng.normal(0, 30, (200, 5)), [[1000.0, 999.0, -1000.0, 0.0, 1.0]], [[-np.inf] * 4 + [2.0]]]
    )
    np.testing.assert_allclose(
        numeric.logsumexp(a, axis=1), special.logsumexp(a, axis=1), rtol=1e-14
    )
    np.testing.assert_allclose(
        numeric.logsumexp(a.T, axis=0), special.logsumexp(a.T, axis=0), rtol=1e-14
    )
    np.testing.assert_allclose(
        numeric.log_softmax(a, axis=1), special.log_softmax(a, axis=1), rtol=1e-13, atol=1e-13
    )
    inf_rows = np.array([[np.inf, 0.0], [-np.inf, -np.inf]])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(
            numeric.logsumexp(inf_rows, axis=1), special.logsumexp(inf_rows, axis=1)
        )


def test_estimator_weights_match_repeated_rows():
    """TemperatureScaler.fit passes its weights on: integer weights fit like repeated rows."""
    rng = np.random.default_rng(3)
    z, y = planted(1.8, 400, seed=3)
    counts = rng.integers(0, 4, 400)
    rep = np.repeat(np.arange(400), counts)
    a = TemperatureScaler().fit(z, y, weights=counts)
    b = TemperatureScaler().fit(z[rep], y[rep])
    assert a.temperature_ == pytest.approx(b.temperature_, rel=1e-7)
    assert a.nll_after_ == pytest.approx(b.nll_after_, rel=1e-9)
    assert a.temperature_ != pytest.approx(TemperatureScaler().fit(z, y).temperature_, rel=1e-4)


def test_binary_nll_default_temperature_is_one_and_labels_are_checked():
    # known answer: softplus(2) - 2 = log(1 + exp(-2)) at T = 1
    assert binary_nll([2.0], [1]) == pytest.approx(np.log1p(np.exp(-2.0)), rel=1e-12)
    with pytest.raises(InputError, match="`labels`"):
        binary_nll([0.0, 1.0], [0, 2])
    with pytest.raises(InputError, match="`logits` of shape \\(n,\\)"):
        binary_nll([[0.0, 1.0]], [1])


def test_transform_logits_checks_the_shape_of_its_kind():
    s = TemperatureScaler.from_dict({"kind": "sigmoid", "temperature": 2.0})
    np.testing.assert_array_equal(s.transform_logits([1.0, -3.0]), [0.5, -1.5])
    with pytest.raises(InputError, match="kind='sigmoid'"):
        s.transform_logits([[1.0, -3.0]])
    m = TemperatureScaler.from_dict({"kind": "softmax", "temperature": 2.0})
    np.testing.assert_array_equal(m.transform_logits([[1.0, -3.0]]), [[0.5, -1.5]])
    with pytest.raises(InputError, match="kind='softmax'"):
        m.transform_logits([1.0, -3.0])


@pytest.mark.parametrize("kind", ["sigmoid", "softmax"])
def test_objective_value_and_derivatives_in_log_t(kind):
    """The fit's objective ``u -> (NLL, dNLL/du, d2NLL/du2)`` at ``u = log T``, weighted: the value
    against an independent NLL (scipy), the derivatives against its finite differences."""
    rng = np.random.default_rng(5)
    n = 300
    w = rng.uniform(0.2, 2.0, n)
    if kind == "sigmoid":
        z = rng.normal(0.0, 3.0, n)
        y = (rng.random(n) < expit(z / 1.7)).astype(np.float64)
        fgh = calibrators._sigmoid_objective(z, y, w)

        def ref(u):
            a = z * np.exp(-u)
            return np.average(np.logaddexp(0.0, a) - y * a, weights=w)
    else:
        z = rng.normal(0.0, 2.0, (n, 4))
        y = rng.integers(0, 4, n)
        fgh = calibrators._softmax_objective(z, y, w)

        def ref(u):
            return np.average(-log_softmax(z * np.exp(-u), axis=1)[np.arange(n), y], weights=w)

    for u in (-0.7, 0.0, 0.9):
        f, g, h = fgh(u)
        assert f == pytest.approx(ref(u), rel=1e-12)
        e = 1e-4
        assert g == pytest.approx((ref(u + e) - ref(u - e)) / (2 * e), rel=1e-6)
        e = 1e-3
        assert h == pytest.approx((ref(u + e) - 2 * ref(u) + ref(u - e)) / e**2, rel=1e-4)


def test_softmax_weights_match_repeated_rows():
    rng = np.random.default_rng(6)
    z = rng.normal(0.0, 2.0, (300, 3))
    y = np.argmax(z / 1.5 + rng.gumbel(size=(300, 3)), axis=1)  # softmax(z / 1.5) labels
    counts = rng.integers(0, 4, 300)
    rep = np.repeat(np.arange(300), counts)
    for t in (1.0, 1.6):
        assert softmax_nll(z, y, t, weights=counts) == pytest.approx(
            softmax_nll(z[rep], y[rep], t), rel=1e-12
        )
    a = TemperatureScaler(kind="softmax").fit(z, y, weights=counts)
    b = TemperatureScaler(kind="softmax").fit(z[rep], y[rep])
    assert a.temperature_ == pytest.approx(b.temperature_, rel=1e-7)
    assert (a.nll_before_, a.nll_after_) == pytest.approx((b.nll_before_, b.nll_after_), rel=1e-9)
    # and the default temperature is 1: the mean of -log_softmax(z)[y]
    assert softmax_nll(z, y) == pytest.approx(
        np.mean(-log_softmax(z, axis=1)[np.arange(300), y]), rel=1e-12
    )


def test_estimator_defaults():
    s = TemperatureScaler()
    assert (s.kind, s.tol, s.max_iter, s.min_samples) == ("sigmoid", 1e-6, 100, 10)


def test_fit_converges_quickly_without_warning():
    """The safeguarded Newton fit ends on its step test in a few evaluations (not at max_iter)."""
    z, y = planted(1.7, 5000, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = TemperatureScaler().fit(z, y)
    assert s.temperature_ == pytest.approx(1.7, rel=0.1) and 2 <= s.n_iter_ <= 12


def test_zero_weight_boxes_do_not_hide_a_degenerate_fit():
    """Separable boxes plus contradicting boxes of weight 0: still separable (and the reason is
    named), and uninformative boxes plus weight-0 informative ones: still uninformative."""
    z = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0] * 3)
    y = z > 0
    zz, yy = np.concatenate([z, [2.5, -2.5]]), np.concatenate([y, [False, True]])
    w = np.concatenate([np.ones(z.size), [0.0, 0.0]])
    with pytest.raises(DegenerateFitError, match="every correct box has logit >= 0"):
        fit_temperature(zz, yy, weights=w)
    fit_temperature(zz, yy)  # with the contradicting boxes counted it is a regular fit
    with pytest.raises(DegenerateFitError, match="uninformative"):
        fit_temperature(zz, ~yy, weights=w)


def _outcome(fit):
    """("ok", T) or ("refused", message) of a fit."""
    try:
        return "ok", round(fit().temperature_, 6)
    except DegenerateFitError as e:
        return "refused", str(e)


SIGMOID_CASES = {
    "all_correct": "no incorrect boxes",
    "all_zero_logits": "all logits zero",
    "separable": "perfectly separable",
    "uninformative": "uninformative or anti-correlated",
    "exactly_uninformative": "uninformative or anti-correlated",
    "fine": None,
    "shifted": None,
}


@pytest.mark.parametrize("case", sorted(SIGMOID_CASES))
def test_weight_zero_boxes_play_no_part_in_the_degeneracy_checks(case):
    """A fit with weights behaves as the fit on the boxes of positive weight: the same T, or the same
    refusal. The weight-0 boxes are chosen to break each degeneracy if they were counted (both
    labels, a box against the order, two very confident right boxes)."""
    rng = np.random.default_rng(3)
    z = rng.normal(3.0 if case == "shifted" else 0.0, 2, 40)
    y = rng.random(40) < expit(z)
    if case == "all_correct":
        y[:] = True
    elif case == "all_zero_logits":
        z[:] = 0.0
    elif case == "separable":
        y = z > 0
    elif case == "uninformative":
        y = z < 0  # anti-correlated: the NLL falls toward T -> inf
    elif case == "exactly_uninformative":  # the NLL's slope at T = inf is exactly 0
        z, y = np.tile([1.0, 1.0, -1.0, -1.0], 10), np.tile([True, False, True, False], 10)
    z0 = np.array([-3.0, 3.0, 2.5, -2.5, 60.0, -60.0])  # weight 0
    y0 = np.array([True, False, True, False, True, False])
    zz, yy = np.concatenate([z, z0]), np.concatenate([y, y0])
    w = np.concatenate([np.ones(z.size), np.zeros(z0.size)])
    weighted = _outcome(lambda: TemperatureScaler(kind="sigmoid").fit(zz, yy, weights=w))
    assert weighted == _outcome(lambda: TemperatureScaler(kind="sigmoid").fit(z, y))
    want = SIGMOID_CASES[case]
    assert (
        weighted[0] == "ok" if want is None else (weighted[0] == "refused" and want in weighted[1])
    ), weighted


@pytest.mark.parametrize("case", ["separable", "uninformative", "fine"])
def test_weight_zero_rows_play_no_part_in_the_softmax_checks(case):
    rng = np.random.default_rng(4)
    z = rng.normal(0, 2, (40, 3))
    if case == "separable":
        y = z.argmax(1)
    elif case == "uninformative":
        y = z.argmin(1)
    else:
        p = np.exp(log_softmax(z, axis=1))
        y = (rng.random(40)[:, None] > np.cumsum(p, axis=1)).sum(1)
    z0 = np.array([[60.0, 0.0, 0.0], [0.0, 60.0, 0.0], [0.0, 0.0, 5.0]])  # weight 0
    y0 = np.array([0, 1, 0])  # two sure and right, one against the arg-max
    w = np.concatenate([np.ones(40), np.zeros(3)])
    weighted = _outcome(
        lambda: TemperatureScaler(kind="softmax").fit(
            np.vstack([z, z0]), np.concatenate([y, y0]), weights=w
        )
    )
    assert weighted == _outcome(lambda: TemperatureScaler(kind="softmax").fit(z, y))
    want = {
        "separable": "perfectly separable",
        "uninformative": "uninformative or anti-correlated",
        "fine": None,
    }[case]
    assert (
        weighted[0] == "ok" if want is None else (weighted[0] == "refused" and want in weighted[1])
    ), weighted


def test_min_samples_is_the_least_number_of_boxes_accepted():
    rng = np.random.default_rng(5)
    z = rng.normal(0, 2, 12)
    y = np.array([True, False] * 6)
    TemperatureScaler(kind="sigmoid", min_samples=12).fit(z, y)  # exactly min_samples: accepted
    with pytest.raises(DegenerateFitError, match="at least 12 samples, got 11"):
        TemperatureScaler(kind="sigmoid", min_samples=12).fit(z[:11], y[:11])
    w = np.ones(12)
    w[0] = 0.0  # a weight-0 box is not a sample
    with pytest.raises(DegenerateFitError, match="at least 12 samples, got 11"):
        TemperatureScaler(kind="sigmoid", min_samples=12).fit(z, y, weights=w)

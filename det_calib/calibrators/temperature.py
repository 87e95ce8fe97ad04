"""Temperature scaling: fit one scalar ``T`` so that ``sigmoid(z / T)`` (or ``softmax(z / T)``) is calibrated.

Two kinds of input are supported:

``kind="sigmoid"`` (detection, the default)
    ``logits`` has shape ``(n,)``: the raw pre-sigmoid logit of each box's predicted class;
    ``labels`` has shape ``(n,)``: 1/True when the box is a correct detection (matched to a
    ground truth), 0/False otherwise. The objective is the mean binary NLL of ``sigmoid(z / T)``.
``kind="softmax"`` (the textbook classifier case)
    ``logits`` has shape ``(n, K)``; ``labels`` has shape ``(n,)`` and holds integer class ids in
    ``[0, K)``. The objective is the mean categorical NLL of ``softmax(z / T)``.

The fit works on ``u = log T`` with a safeguarded Newton method (analytic first and second
derivatives in ``u``, a bracket on the sign of the derivative, bisection when the Newton step is
not usable) in float64 with log-sum-exp arithmetic, so logits of +-50 or +-1000 are fine.

Why the fit can fail, and how it is detected: with ``beta = 1 / T`` the NLL is convex in ``beta``,
so its derivative in ``beta`` increases and its limits at ``beta -> 0`` and ``beta -> inf`` decide
whether a finite positive optimum exists:

* ``dNLL/dbeta(0) = mean(w * (mean_k z_k - z_y)) >= 0`` (sigmoid: ``mean(w * (0.5 - y) * z) >= 0``):
  the logits are uninformative or anti-correlated with the labels, the optimum is at ``T -> inf``.
* ``dNLL/dbeta(inf) = mean(w * (max_k z_k - z_y)) == 0`` (sigmoid: every correct box has ``z >= 0``
  and every incorrect box ``z <= 0``): the data are separable by the sign of the logit, the NLL
  decreases all the way to ``T -> 0``.

Both raise :class:`~det_calib.errors.DegenerateFitError`, as does an optimum outside
``[T_MIN, T_MAX]``, which catches the nearly degenerate cases. A fit never returns 0, inf or nan.

Example:
    >>> import numpy as np
    >>> from det_calib.calibrators.temperature import TemperatureScaler
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(0.0, 3.0, 10_000)
    >>> y = rng.random(10_000) < 1 / (1 + np.exp(-z / 2.0))
    >>> scaler = TemperatureScaler().fit(z, y)
    >>> round(scaler.temperature_, 1)
    2.0
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from det_calib.calibrators.base import LogitCalibrator, NotFittedError
from det_calib.calibrators.fit_support import check_fit, check_logits
from det_calib.calibrators.registry import register
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import (
    binary_nll_terms,
    expit,
    log_softmax,
    logit_threshold,
    logsumexp,
    weighted_mean,
)
from det_calib.validation import check_choice

__all__ = [
    "ConvergenceWarning",
    "NotFittedError",
    "TemperatureScaler",
    "binary_nll",
    "equivalent_threshold",
    "fit_temperature",
    "softmax_nll",
]

_log = logging.getLogger(__name__)

_Kind = Literal["sigmoid", "softmax"]
_KINDS: tuple[str, ...] = ("sigmoid", "softmax")

#: A fitted temperature must lie in ``[T_MIN, T_MAX]``; an optimum outside it is reported as
#: degenerate (it means the NLL keeps decreasing towards T -> 0 or T -> inf).
_T_MIN = 1e-4
_T_MAX = 1e4

_FORMAT = "det_calib.TemperatureScaler"
_FORMAT_VERSION = 1


class ConvergenceWarning(UserWarning):
    """The temperature fit stopped at ``max_iter`` before the step in ``log T`` fell below ``tol``."""


# --------------------------------------------------------------------------------------------
# input validation


def _check_kind(kind: Any) -> str:
    return check_choice(kind, _KINDS, "kind")


def _check_temperature(temperature: Any) -> float:
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise InputError(
            f"Expected argument `temperature` to be a number, but got {temperature!r}"
        ) from None
    if not (math.isfinite(t) and t > 0):
        raise InputError(
            f"Expected argument `temperature` to be finite and > 0, but got {temperature!r}"
        )
    return t


# --------------------------------------------------------------------------------------------
# objectives


def binary_nll(logits: Any, labels: Any, temperature: float = 1.0, weights: Any = None) -> float:
    """Mean binary negative log-likelihood of ``sigmoid(logits / temperature)`` (natural log).

    Computed as ``softplus(a) - y * a`` with ``a = z / T``, which is exact for any finite logit.

    Args:
        logits: Raw logits, shape ``(n,)``.
        labels: 1/True for a correct box, 0/False otherwise, shape ``(n,)``.
        temperature: ``T > 0``.
        weights: Optional non-negative sample weights, shape ``(n,)``; the mean is weighted.

    Returns:
        The (weighted) mean NLL in nats.

    Raises:
        InputError: Wrong shapes, labels not 0/1, or a non-positive temperature.
    """
    z, y, w = check_fit(logits, labels, weights)
    return _binary_nll(z, y, w, _check_temperature(temperature))


def _binary_nll(z: np.ndarray, y: np.ndarray, w: np.ndarray | None, t: float) -> float:
    a = z / t
    return weighted_mean(binary_nll_terms(a, y), w)


def softmax_nll(logits: Any, labels: Any, temperature: float = 1.0, weights: Any = None) -> float:
    """Mean categorical negative log-likelihood of ``softmax(logits / temperature)`` (natural log).

    Args:
        logits: Raw logits, shape ``(n, K)``.
        labels: Integer class ids in ``[0, K)``, shape ``(n,)``.
        temperature: ``T > 0``.
        weights: Optional non-negative sample weights, shape ``(n,)``; the mean is weighted.

    Returns:
        The (weighted) mean NLL in nats.

    Raises:
        InputError: Wrong shapes, class ids out of range, or a non-positive temperature.
    """
    z, y, w = check_fit(logits, labels, weights, kind="softmax")
    return _softmax_nll(z, y, w, _check_temperature(temperature))


def _softmax_nll(z: np.ndarray, y: np.ndarray, w: np.ndarray | None, t: float) -> float:
    a = z / t
    return weighted_mean(logsumexp(a, axis=1) - a[np.arange(a.shape[0]), y], w)


_Objective = Callable[[float], tuple[float, float, float]]


def _sigmoid_objective(z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> _Objective:
    """Return ``u -> (NLL, dNLL/du, d2NLL/du2)`` at ``u = log T`` for the sigmoid objective.

    With ``c = exp(-u)``, ``a = c z``, ``p = sigmoid(a)``:
    ``f = mean(softplus(a)) - c mean(y z)``, ``f' = -(mean(p a) - c mean(y z))``,
    ``f'' = mean(p (1 - p) a^2) + mean(p a) - c mean(y z)``.
    ``softplus(a) = max(a, 0) - log(sigmoid(|a|))`` reuses ``p`` (``sigmoid(|a|) = 0.5 + |p - 0.5|``,
    which lies in [0.5, 1], so the log is accurate), saving a ``logaddexp`` per evaluation.
    """
    yz = weighted_mean(y * z, w)

    def fgh(u: float) -> tuple[float, float, float]:
        c = math.exp(-u)
        a = z * c
        p = expit(a)
        q = p - 0.5
        np.abs(q, out=q)
        q += 0.5
        np.log(q, out=q)
        sp = np.maximum(a, 0.0)
        sp -= q  # softplus(a)
        pa = p * a
        m_pa = weighted_mean(pa, w)
        p -= 1.0
        p *= pa
        p *= a  # -p (1 - p) a^2
        g = -(m_pa - c * yz)
        return weighted_mean(sp, w) - c * yz, g, -weighted_mean(p, w) - g

    return fgh


def _softmax_objective(z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> _Objective:
    """Return ``u -> (NLL, dNLL/du, d2NLL/du2)`` at ``u = log T`` for the softmax objective.

    With ``c = exp(-u)``, ``a = c z``, ``p = softmax(a)``, ``m = E_p[a]``, ``v = Var_p[a]``:
    ``f = mean(lse(a) - a_y)``, ``f' = -mean(m - a_y)``, ``f'' = mean(v + m - a_y)``.
    """
    zy = weighted_mean(z[np.arange(z.shape[0]), y], w)

    def fgh(u: float) -> tuple[float, float, float]:
        c = math.exp(-u)
        a = z * c
        lse = logsumexp(a, axis=1)
        p = np.exp(a - lse[:, None])
        m = np.einsum("ij,ij->i", p, a)
        v = np.einsum("ij,ij->i", p, (a - m[:, None]) ** 2)
        g = -(weighted_mean(m, w) - c * zy)
        return weighted_mean(lse, w) - c * zy, g, weighted_mean(v, w) - g

    return fgh


# --------------------------------------------------------------------------------------------
# the fit


def _check_degenerate(
    z: np.ndarray, y: np.ndarray, w: np.ndarray | None, kind: str, min_samples: int
) -> None:
    """Raise DegenerateFitError when no finite positive temperature can be fitted."""
    n_used = int(z.shape[0] if w is None else np.count_nonzero(w))
    need = max(2, min_samples)
    if n_used < need:
        raise DegenerateFitError(f"temperature fit needs at least {need} samples, got {n_used}")
    if not np.isfinite(z).all():
        bad = int(
            np.count_nonzero(~np.isfinite(z).all(axis=-1) if z.ndim == 2 else ~np.isfinite(z))
        )
        raise DegenerateFitError(
            f"temperature fit got {bad} samples with non-finite logits (nan or inf)"
        )
    used = slice(None) if w is None else w > 0
    if kind == "sigmoid":
        yu = y[used]  # a soft label in (0, 1) counts toward both sides
        if not (yu > 0).any():
            raise DegenerateFitError("temperature fit got no correct boxes (all labels 0)")
        if not (yu < 1).any():
            raise DegenerateFitError("temperature fit got no incorrect boxes (all labels 1)")
    if not np.any(z[used]):
        raise DegenerateFitError(
            "temperature fit got all logits zero: every temperature gives the same probabilities"
        )

    # Limits of dNLL/dbeta (beta = 1/T; the NLL is convex in beta), see the module docstring.
    if kind == "sigmoid":
        d_zero = weighted_mean((0.5 - y) * z, w)
        d_inf = weighted_mean((1.0 - y) * np.maximum(z, 0.0) + y * np.maximum(-z, 0.0), w)
    else:
        rows = np.arange(z.shape[0])
        zy = z[rows, y]
        d_zero = weighted_mean(z.mean(axis=1) - zy, w)
        d_inf = weighted_mean(z.max(axis=1) - zy, w)
    if d_inf <= 0.0:
        what = (
            "every correct box has logit >= 0 and every incorrect box logit <= 0"
            if kind == "sigmoid"
            else "every label is the arg-max class"
        )
        raise DegenerateFitError(
            f"temperature fit is degenerate: the data are perfectly separable ({what}), so the NLL "
            "decreases "
            "towards T -> 0"
        )
    if d_zero >= 0.0:
        raise DegenerateFitError(
            "temperature fit is degenerate: the logits are uninformative or anti-correlated with "
            "the labels, "
            "so the NLL decreases towards T -> inf"
        )


def _fit(
    z: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    *,
    kind: str,
    tol: float,
    max_iter: int,
    min_samples: int,
) -> tuple[float, int]:
    """Fit on validated float64 arrays; return ``(T, number of objective evaluations)``."""
    _check_degenerate(z, y, w, kind, min_samples)
    fgh = (_sigmoid_objective if kind == "sigmoid" else _softmax_objective)(z, y, w)

    # Bracket [lo, hi] on u = log T holds the minimum: dNLL/du changes sign from - to + exactly once
    # (the NLL is convex in beta = exp(-u), so it is unimodal in u).
    lo, hi = math.log(_T_MIN), math.log(_T_MAX)
    u, f_prev, newton_failed = 0.0, math.inf, False
    converged = False
    n_eval = 0
    with np.errstate(over="ignore", under="ignore"):
        for _ in range(max_iter):
            f, g, h = fgh(u)
            n_eval += 1
            if not (math.isfinite(f) and math.isfinite(g) and math.isfinite(h)):
                raise DegenerateFitError(
                    f"temperature fit hit a non-finite NLL at T={math.exp(u):.6g}"
                )
            if g == 0.0:
                converged = True
                break
            if g < 0.0:
                lo = u
            else:
                hi = u
            # the previous step increased the NLL: do not trust Newton this time
            newton_failed = f > f_prev + 1e-12 * abs(f_prev)
            cand = u - g / h if h > 0.0 else math.nan
            if newton_failed or not (lo < cand < hi):
                cand = 0.5 * (lo + hi)
            step = cand - u
            u, f_prev = cand, f
            if abs(step) < tol:
                converged = True
                break

    t = math.exp(u)
    if u - math.log(_T_MIN) < 1e-3 or math.log(_T_MAX) - u < 1e-3:
        direction = "T -> 0" if u < 0 else "T -> inf"
        raise DegenerateFitError(
            f"temperature fit is degenerate: it runs off to {direction}: the optimum lies outside "
            f"[{_T_MIN:g}, {_T_MAX:g}] (nearly separable data or badly scaled logits)"
        )
    if not converged:
        warnings.warn(
            f"temperature fit did not converge in max_iter={max_iter} iterations (T={t:.6g}, last "
            "step in log T "
            f"{abs(step):.2g} >= tol={tol:g})",
            ConvergenceWarning,
            stacklevel=3,
        )
    _log.debug("fit_temperature(kind=%s): T=%.8g after %d evaluations", kind, t, n_eval)
    return t, n_eval


def _check_options(tol: Any, max_iter: Any, min_samples: Any) -> None:
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise InputError(f"Expected argument `tol` to be a number > 0, but got {tol!r}")
    if not (
        isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool) and max_iter >= 1
    ):
        raise InputError(
            f"Expected argument `max_iter` to be an integer >= 1, but got {max_iter!r}"
        )
    if not (
        isinstance(min_samples, (int, np.integer))
        and not isinstance(min_samples, bool)
        and min_samples >= 1
    ):
        raise InputError(
            f"Expected argument `min_samples` to be an integer >= 1, but got {min_samples!r}"
        )


def fit_temperature(
    logits: Any,
    labels: Any,
    *,
    kind: _Kind = "sigmoid",
    weights: Any = None,
    tol: float = 1e-6,
    max_iter: int = 100,
    min_samples: int = 10,
) -> float:
    """Fit the temperature ``T`` minimising the mean NLL of ``sigmoid(z / T)`` or ``softmax(z / T)``.

    Args:
        logits: ``(n,)`` raw box logits for ``kind="sigmoid"``; ``(n, K)`` class logits for
            ``kind="softmax"``. numpy array, sequence or torch tensor; computed in float64.
        labels: ``(n,)``; bool or 0/1 (sigmoid: 1 = correct box) or integer class ids (softmax).
        kind: ``"sigmoid"`` or ``"softmax"``.
        weights: Optional ``(n,)`` non-negative sample weights (rows with weight 0 are ignored).
        tol: Stop when the Newton/bisection step in ``log T`` is below ``tol`` (relative
            precision of ``T``).
        max_iter: Maximum number of objective evaluations. Hitting it emits a
            :class:`ConvergenceWarning` and returns the current estimate.
        min_samples: Minimum number of samples (with positive weight); at least 2 is always required.

    Returns:
        The temperature, a finite float in ``[T_MIN, T_MAX]``.

    Raises:
        InputError: Wrong shapes or lengths, labels that are not 0/1 or valid class ids, bad
            weights or options. The message names the argument.
        DegenerateFitError: Too few samples, no correct or no incorrect boxes, non-finite or
            all-zero logits, or data whose optimum is at ``T -> 0`` (separable) or ``T -> inf``.

    Example:
        >>> round(fit_temperature([-2.0, -1.0, 1.0, 2.0, 0.5], [0, 1, 0, 1, 1], min_samples=2), 3)
        1.909
    """
    kind = _check_kind(kind)
    _check_options(tol, max_iter, min_samples)
    z, y, w = check_fit(logits, labels, weights, kind=kind)
    t, _ = _fit(
        z, y, w, kind=kind, tol=float(tol), max_iter=int(max_iter), min_samples=int(min_samples)
    )
    return t


# --------------------------------------------------------------------------------------------
# the estimator


@register("temperature", order=10)
class TemperatureScaler(LogitCalibrator):
    """Temperature scaling as a small scikit-learn style estimator.

    Args:
        kind: ``"sigmoid"`` (box logits, shape ``(n,)``) or ``"softmax"`` (class logits, ``(n, K)``).
        tol: Convergence tolerance on ``log T``, see :func:`fit_temperature`.
        max_iter: Maximum number of objective evaluations.
        min_samples: Minimum number of fit samples.

    Attributes:
        temperature_ (float): The fitted temperature.
        n_iter_ (int): Objective evaluations the fit used.
        nll_before_ (float): Mean NLL on the fit data at ``T = 1``.
        nll_after_ (float): Mean NLL on the fit data at ``T = temperature_``.
        n_samples_ (int): Number of fit samples (rows).

    Methods that need the fitted state raise :class:`NotFittedError` (a ``RuntimeError``) before
    :meth:`fit` or :meth:`from_dict`.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> logits = rng.normal(0.0, 3.0, 20_000)
        >>> labels = rng.random(20_000) < 1 / (1 + np.exp(-logits / 2.0))  # true temperature 2
        >>> scaler = TemperatureScaler(kind="sigmoid").fit(logits, labels)
        >>> bool(abs(scaler.temperature_ - 2.0) < 0.1)
        True
        >>> scaler.predict_proba([0.0]).tolist()
        [0.5]
    """

    def __init__(
        self,
        *,
        kind: _Kind = "sigmoid",
        tol: float = 1e-6,
        max_iter: int = 100,
        min_samples: int = 10,
    ):
        self.kind = kind
        self.tol = tol
        self.max_iter = max_iter
        self.min_samples = min_samples

    def __repr__(self) -> str:
        fitted = f", temperature_={self.temperature_:.6g}" if hasattr(self, "temperature_") else ""
        return f"TemperatureScaler(kind={self.kind!r}, tol={self.tol!r}, max_iter={self.max_iter!r}{fitted})"

    format = _FORMAT
    soft_labels = True  # the sigmoid NLL is linear in the label: soft labels give the cross-entropy
    _fitted_attr = "temperature_"

    @classmethod
    def of_temperature(cls, temperature: float) -> TemperatureScaler:
        """A fitted sigmoid scaler of temperature ``temperature`` (a run's record read back)."""
        obj = cls(kind="sigmoid")
        obj.temperature_ = _check_temperature(temperature)
        return obj

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        t = d.get("temperature")
        return f"temperature T = {'n/a' if not isinstance(t, (int, float)) else f'{float(t):.3f}'}"

    def fit(
        self,
        logits: Any,
        labels: Any,
        weights: Any = None,
        *,
        classes: Any = None,
        groups: Any = None,
    ) -> TemperatureScaler:
        """Fit the temperature; see :func:`fit_temperature` for the arguments and errors.

        Returns:
            ``self``.
        """
        kind = _check_kind(self.kind)
        _check_options(self.tol, self.max_iter, self.min_samples)
        z, y, w = check_fit(logits, labels, weights, kind=kind)
        t, n_eval = _fit(
            z,
            y,
            w,
            kind=kind,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            min_samples=int(self.min_samples),
        )
        nll = _binary_nll if kind == "sigmoid" else _softmax_nll
        self.temperature_ = t
        self.n_iter_ = n_eval
        self.nll_before_ = nll(z, y, w, 1.0)
        self.nll_after_ = nll(z, y, w, t)
        self.n_samples_ = int(z.shape[0])
        return self

    def _check_fitted(self) -> float:
        if not hasattr(self, "temperature_"):
            raise NotFittedError(
                "This TemperatureScaler instance is not fitted yet. Call `fit` with appropriate "
                "arguments "
                "(or build it with `TemperatureScaler.from_dict`) before using this method."
            )
        return self.temperature_

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Return the scaled logits ``z / T`` (float64, same shape as ``logits``)."""
        t = self._check_fitted()
        return check_logits(logits, _check_kind(self.kind)) / t

    def predict_proba(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Calibrated probabilities.

        Returns:
            ``sigmoid(z / T)`` with shape ``(n,)`` for ``kind="sigmoid"``; the rows of
            ``softmax(z / T)`` with shape ``(n, K)`` for ``kind="softmax"``.
        """
        a = self.transform_logits(logits)
        if self.kind == "sigmoid":
            return expit(a)
        return np.exp(log_softmax(a, axis=1))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state (plain str/int/float values), the inverse of :meth:`from_dict`."""
        t = self._check_fitted()
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "kind": self.kind,
            "temperature": float(t),
            "tol": float(self.tol),
            "max_iter": int(self.max_iter),
            "min_samples": int(self.min_samples),
            "n_iter": getattr(self, "n_iter_", None),
            "nll_before": getattr(self, "nll_before_", None),
            "nll_after": getattr(self, "nll_after_", None),
            "n_samples": getattr(self, "n_samples_", None),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TemperatureScaler:
        """Rebuild a fitted scaler from :meth:`to_dict` output.

        Only ``kind`` and ``temperature`` are required; fit diagnostics are restored when present.

        Raises:
            InputError: Not a mapping, an unknown ``format``/``version``, an unknown kind, or a
                temperature that is not finite and positive.
        """
        if not isinstance(d, dict):
            raise InputError(f"Expected argument `d` to be a dict, but got {type(d).__name__}")
        if d.get("format", _FORMAT) != _FORMAT:
            raise InputError(f"Expected `format` {_FORMAT!r}, but got {d.get('format')!r}")
        if d.get("version", _FORMAT_VERSION) != _FORMAT_VERSION:
            raise InputError(f"Expected `version` {_FORMAT_VERSION}, but got {d.get('version')!r}")
        for key in ("kind", "temperature"):
            if key not in d:
                raise InputError(
                    f"TemperatureScaler dict is missing the key {key!r}; has {sorted(d)}"
                )
        obj = cls(
            kind=_check_kind(d["kind"]),
            tol=d.get("tol", 1e-6),
            max_iter=d.get("max_iter", 100),
            min_samples=d.get("min_samples", 10),
        )
        obj.temperature_ = _check_temperature(d["temperature"])
        for key in ("n_iter", "nll_before", "nll_after", "n_samples"):
            if d.get(key) is not None:
                setattr(obj, key + "_", d[key])
        return obj

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        return np.full(n_classes, 1.0 / float(self._check_fitted())), np.zeros(n_classes)

    def equivalent_conf(self, conf: float, cls: int | None = None) -> float | None:
        """``sigmoid(logit(conf) / T)`` (:func:`equivalent_threshold`; in (0, 1), else None)."""
        if not 0 < conf < 1:
            return None
        return equivalent_threshold(
            conf, float(self._check_fitted())
        )  # the figures of earlier runs, bit for bit


def equivalent_threshold(conf: float, temperature: float) -> float:
    """The calibrated threshold ``sigmoid(logit(conf) / T)`` that keeps the raw set at ``conf``."""
    if not 0 < conf < 1:
        raise InputError(f"Expected argument `conf` in (0, 1), but got {conf}")
    if not temperature > 0:
        raise InputError(f"Expected argument `temperature` > 0, but got {temperature}")
    z = logit_threshold(conf)
    return 1.0 / (
        1.0 + math.exp(-z / temperature)
    )  # scalar; the figures of earlier runs, bit for bit

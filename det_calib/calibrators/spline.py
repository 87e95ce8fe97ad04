"""Spline calibration: a monotone piecewise-linear map of the logit, fitted by maximum likelihood.

:class:`SplineCalibrator` reports ``sigmoid(g(z))`` with

    ``g(z) = b + a z + sum_j c_j relu(z - k_j)``,   ``j = 1..K``,

a linear spline in the raw logit ``z`` with ``K`` knots ``k_j``: Platt scaling (``K = 0``) whose
slope may change at each knot. It keeps Platt's one-parameter-per-feature logistic form (so it is
fitted, like Platt, by penalised maximum likelihood with Newton's method on a convex objective)
and reaches the shape one affine map cannot: YOLO scores are typically under-confident in the
operating range (accuracy above confidence) while the sea of low scores pins an affine map.

* **Knots** are placed where the decisions are made: at the ``j / (K + 1)`` weighted quantiles
  of the logits of the *correct* fit boxes. Correct boxes sit in the operating range, so the
  knots do too, with no conf floor to choose.
* **Ridge toward Platt**: the objective is
  ``sum_i w_i NLL_i + ridge / 2 * sum_j c_j^2``; ``ridge`` is a pseudo-count of boxes (a hinge
  with little data stays near the Platt slope). ``ridge = 0`` is the unpenalised fit (the same
  optimum as scikit-learn's ``LogisticRegression(penalty=None)`` on the hinge features).
* **Monotone**: every segment slope ``a + c_1 + ... + c_j`` must be at least :data:`MIN_SLOPE`.
  When the fit breaks that (or does not converge: a region where the boxes are separable), the
  ridge is raised tenfold, up to :data:`MAX_RIDGE`; still broken, the last knot is dropped and the
  fit repeated, down to plain Platt (``K = 0``), which needs ``a > 0`` or raises
  :class:`~det_calib.errors.DegenerateFitError`. ``ridge_`` and ``knots_`` record what was used.

The fitted map is a strictly increasing :class:`~det_calib.calibrators.isotonic.PiecewiseLinear` (``map_``):
one map for every class keeps the ranking (mAP unchanged), folds into a detector as ReLU hinges
(:func:`det_calib.deploy.fold.fold_calibrator`), and is applied, exported and plotted as the isotonic map is.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(-1.0, 3.0, 200_000)
    >>> g = -0.5 + 0.8 * z + 0.6 * np.maximum(z, 0.0)  # slope 0.8, then 1.4 above z = 0
    >>> y = rng.random(z.size) < 1 / (1 + np.exp(-g))
    >>> s = SplineCalibrator(knots=[0.0], ridge=0.0).fit(z, y)
    >>> round(s.a_, 1), round(float(s.c_[0]), 1)
    (0.8, 0.6)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from det_calib.calibrators.affine import (
    check_degenerate,
    check_format,
    finite_params,
    fit_affine,
    prepare_fit,
)
from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.fit_support import check_logits
from det_calib.calibrators.isotonic import PiecewiseLinear
from det_calib.calibrators.registry import register
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import binary_nll_terms, sigmoid, weighted_mean

__all__ = ["SplineCalibrator"]

_log = logging.getLogger(__name__)

#: Smallest slope of any segment of a fitted map (keeps it strictly increasing).
_MIN_SLOPE = 1e-2
#: The ridge is raised tenfold, up to this, before a knot is dropped.
_MAX_RIDGE = 1e6
#: Knots closer than this (in logit) are merged.
_MIN_GAP = 1e-3

_FORMAT = "det_calib.SplineCalibrator"
_VERSION = 1


def _weighted_quantiles(x: np.ndarray, w: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Weighted quantiles of ``x`` (the smallest value whose cumulative weight reaches ``level``)."""
    order = np.argsort(x, kind="stable")
    xs, cw = x[order], np.cumsum(w[order])
    idx = np.searchsorted(cw, levels * cw[-1], side="left")
    return xs[np.clip(idx, 0, xs.size - 1)]


def _spline_knots(logits: Any, labels: Any, n_knots: int, *, weights: Any = None) -> np.ndarray:
    """Knots of a spline fit: the ``j / (n_knots + 1)`` weighted quantiles of the correct boxes' logits
    (with soft labels, of every box's logit weighted by its label).

    Args:
        logits: ``(n,)`` raw logits of the fit boxes.
        labels: ``(n,)`` 0/1, 1 = correct box.
        n_knots: Number of knots wanted (>= 0).
        weights: Optional ``(n,)`` non-negative weights.

    Returns:
        ``(K,)`` strictly increasing knots, ``K <= n_knots`` (coinciding quantiles are merged;
        every knot has correct boxes strictly above it).

    >>> _spline_knots([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 1, 1, 1, 0], 1).tolist()
    [2.0]
    """
    z, y, w = prepare_fit(logits, labels, weights)
    pos = (y > 0) & (w > 0)
    if n_knots <= 0 or not pos.any():
        return np.zeros(0)
    zp, wp = z[pos], (w * y)[pos]  # the correct mass: a soft label weighs its box by y
    q = _weighted_quantiles(zp, wp, np.arange(1, n_knots + 1) / (n_knots + 1))
    q = q[q < zp.max()]  # a knot above every correct box has nothing to fit
    keep = np.concatenate([[True], np.diff(q) > _MIN_GAP]) if q.size else np.zeros(0, dtype=bool)
    return q[keep]


def _design(z: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """``(n, K + 2)`` features ``[1, z, relu(z - k_1), ..., relu(z - k_K)]``."""
    x = np.empty((z.shape[0], knots.size + 2))
    x[:, 0] = 1.0
    x[:, 1] = z
    for j, k in enumerate(knots):
        np.maximum(z - k, 0.0, out=x[:, j + 2])
    return x


def _newton(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    ridge: float,
    init: np.ndarray,
    *,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, int, bool]:
    """Minimise ``sum w NLL(x @ theta) + ridge / 2 * |theta[2:]|^2`` by Newton with backtracking.

    Returns ``(theta, iterations, converged)``.
    """
    m = x.shape[1]
    pen = np.zeros(m)
    pen[2:] = ridge

    def objective(th: np.ndarray) -> float:
        return float(np.dot(w, binary_nll_terms(x @ th, y)) + 0.5 * np.dot(pen, th * th))

    theta = init.copy()
    f = objective(theta)
    scale = max(float(w.sum()), 1.0)
    for it in range(1, max_iter + 1):
        p = sigmoid(x @ theta)
        g = x.T @ (w * (p - y)) + pen * theta
        h = (x * (w * p * (1.0 - p))[:, None]).T @ x + np.diag(pen) + 1e-12 * scale * np.eye(m)
        try:
            step = -np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            return theta, it, False
        if not np.isfinite(step).all():
            return theta, it, False
        t = 1.0
        for _ in range(40):
            new = theta + t * step
            f_new = objective(new)
            if f_new <= f + 1e-12 * max(1.0, abs(f)):
                break
            t *= 0.5
        else:
            return theta, it, False
        moved = float(np.max(np.abs(new - theta)))
        theta, f = new, f_new
        if moved < tol * (1.0 + float(np.max(np.abs(theta)))):
            return theta, it, True
    return theta, max_iter, False


def _slopes(theta: np.ndarray) -> np.ndarray:
    """Segment slopes ``a, a + c_1, ..., a + c_1 + ... + c_K``."""
    return theta[1] + np.concatenate([[0.0], np.cumsum(theta[2:])])


@register("spline", order=30)
class SplineCalibrator(LogitCalibrator):
    """Monotone piecewise-linear calibration of the logit: ``sigmoid(b + a z + sum_j c_j relu(z - k_j))``.

    Args:
        n_knots: Number of knots ``K`` (placed by :func:`spline_knots`); 0 is Platt scaling.
            Ignored when ``knots`` is given.
        knots: Explicit knots (strictly increasing logits) instead of data-placed ones.
        ridge: Penalty ``ridge / 2 * sum_j c_j^2`` on the slope changes, in pseudo-boxes (>= 0):
            it shrinks the map toward Platt.
        tol: Newton stops when no parameter moves by more than ``tol * (1 + max |theta|)``.
        max_iter: Most Newton iterations per fit.
        min_samples: Minimum number of fit boxes (with positive weight).

    Attributes:
        knots_ (ndarray): ``(K,)`` the knots of the fitted map (fewer than asked when knots were
            merged or dropped to keep the map monotone).
        a_ (float): Slope left of the first knot (> 0).
        b_ (float): Intercept.
        c_ (ndarray): ``(K,)`` slope changes at the knots.
        ridge_ (float): The ridge used (raised above ``ridge`` when needed for monotonicity).
        map_ (PiecewiseLinear): The map, raw logit -> calibrated logit, every slope >= :data:`MIN_SLOPE`.
        n_iter_ (int): Newton iterations of the final fit.
        n_samples_ (int): Fit boxes.
        nll_before_ (float), nll_after_ (float): Weighted mean NLL of the raw and calibrated fit boxes.
    """

    format = _FORMAT
    soft_labels = True  # penalised NLL linear in the label; knots at quantiles of the label mass
    deploy_form = "hinges"
    _fitted_attr = "map_"

    def __init__(
        self,
        *,
        n_knots: int = 2,
        knots: Sequence[float] | None = None,
        ridge: float = 10.0,
        tol: float = 1e-9,
        max_iter: int = 100,
        min_samples: int = 10,
    ):
        self.n_knots = n_knots
        self.knots = knots
        self.ridge = ridge
        self.tol = tol
        self.max_iter = max_iter
        self.min_samples = min_samples

    def __repr__(self) -> str:
        fitted = f", knots_={np.round(self.knots_, 4).tolist()}" if hasattr(self, "knots_") else ""
        return f"SplineCalibrator(n_knots={self.n_knots!r}, ridge={self.ridge!r}{fitted})"

    def _check_options(self) -> np.ndarray | None:
        n = self.n_knots
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InputError(f"Expected argument `n_knots` to be an integer >= 0, but got {n!r}")
        r = self.ridge
        if (
            isinstance(r, bool)
            or not isinstance(r, (int, float))
            or not (r >= 0)
            or not math.isfinite(r)
        ):
            raise InputError(f"Expected argument `ridge` to be a finite number >= 0, but got {r!r}")
        if not (isinstance(self.tol, (int, float)) and self.tol > 0):
            raise InputError(f"Expected argument `tol` to be a number > 0, but got {self.tol!r}")
        mi = self.max_iter
        if isinstance(mi, bool) or not isinstance(mi, (int, np.integer)) or mi < 1:
            raise InputError(f"Expected argument `max_iter` to be an integer >= 1, but got {mi!r}")
        if self.knots is None:
            return None
        k = np.asarray(self.knots, dtype=np.float64)
        if k.ndim != 1 or not np.isfinite(k).all() or (np.diff(k) <= 0).any():
            raise InputError(
                "Expected argument `knots` to be finite, strictly increasing numbers, but got "
                f"{self.knots!r}"
            )
        return k

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> SplineCalibrator:
        """Fit the map by penalised maximum likelihood.

        Args:
            logits: ``(n,)`` raw box logits.
            labels: ``(n,)`` bool or 0/1, 1 = correct box.
            classes: Ignored (one map for every class).
            weights: Optional ``(n,)`` non-negative box weights.

        Returns:
            ``self``.

        Raises:
            InputError: Wrong shapes, labels or options.
            DegenerateFitError: Too few boxes, one label only, constant or separable logits, or no
                increasing map (even Platt's slope is <= 0).
        """
        fixed = self._check_options()
        z, y, w = prepare_fit(logits, labels, weights)
        check_degenerate(z, y, w, "spline", int(self.min_samples))
        used = w > 0
        z, y, w = z[used], y[used].astype(np.float64), w[used]
        knots = fixed if fixed is not None else _spline_knots(z, y, int(self.n_knots), weights=w)
        a0, b0, _ = fit_affine(
            z,
            y,
            w,
            np.zeros(z.shape[0], dtype=np.int64),
            1,
            fit_bias=True,
            prior=(1.0, 0.0),
            lam=0.0,
        )
        platt = np.array([b0[0], a0[0]])
        ridge = float(self.ridge)
        while True:
            x = _design(z, knots)
            init = np.concatenate([platt, np.zeros(knots.size)])
            theta, it, ok = _newton(
                x, y, w, ridge, init, tol=float(self.tol), max_iter=int(self.max_iter)
            )
            good = ok and np.isfinite(theta).all() and (_slopes(theta) >= _MIN_SLOPE).all()
            if good:
                break
            if knots.size and ridge < _MAX_RIDGE:
                ridge = max(10.0 * ridge, 1.0)
                continue
            if knots.size:
                _log.info("spline fit: dropping knot %.4g to keep the map increasing", knots[-1])
                knots, ridge = knots[:-1], float(self.ridge)
                continue
            raise DegenerateFitError(
                f"spline fit gave slope a = {theta[1]:.3g}: the logits are uninformative or "
                "anti-correlated "
                "with the labels"
                if ok
                else "spline fit did not converge (nearly separable data)"
            )
        if ridge != float(self.ridge):
            _log.info("spline fit: ridge raised to %g to keep every slope >= %g", ridge, _MIN_SLOPE)
        self._set(knots, theta)
        self.ridge_ = ridge
        self.n_iter_ = int(it)
        self.n_samples_ = int(used.sum())
        self.nll_before_ = weighted_mean(binary_nll_terms(z, y), w)
        self.nll_after_ = weighted_mean(binary_nll_terms(self.map_(z), y), w)
        return self

    def _set(self, knots: np.ndarray, theta: np.ndarray) -> None:
        self.knots_ = np.asarray(knots, dtype=np.float64)
        self.b_, self.a_ = float(theta[0]), float(theta[1])
        self.c_ = np.asarray(theta[2:], dtype=np.float64)
        self.map_ = self._as_map()

    def _as_map(self) -> PiecewiseLinear:
        """The fitted spline as a :class:`PiecewiseLinear` (exact: the same function everywhere)."""
        k = self.knots_
        if k.size == 0:  # Platt: one segment; any point is a knot
            return PiecewiseLinear([0.0], [self.b_], self.a_)
        vals = (
            self.b_ + self.a_ * k + np.array([np.dot(self.c_, np.maximum(kj - k, 0.0)) for kj in k])
        )
        return PiecewiseLinear(k, vals, self.a_, right_slope=self.a_ + float(self.c_.sum()))

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Calibrated logits ``g(z)`` (float64, ``(n,)``); ``classes`` is ignored."""
        self._check_fitted()
        z = check_logits(logits, "sigmoid")
        out = self.b_ + self.a_ * z
        for kj, cj in zip(self.knots_, self.c_, strict=True):
            out += cj * np.maximum(z - kj, 0.0)
        return out

    @property
    def slopes_(self) -> np.ndarray:
        """``(K + 1,)`` slope of each segment, left to right (all >= :data:`MIN_SLOPE`)."""
        self._check_fitted()
        return _slopes(np.concatenate([[self.b_, self.a_], self.c_]))

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return f"spline ({len(d.get('knots') or [])} knots)"

    def hinge_maps(self, n_classes: int) -> list[PiecewiseLinear]:
        self._check_fitted()
        return [self.map_] * n_classes

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"format": "det_calib.SplineCalibrator", "version": 1, "knots": [K], "a", "b",
        "c": [K], "ridge", "n_knots", "n_samples", "nll_before", "nll_after"}``."""
        self._check_fitted()
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "knots": [float(v) for v in self.knots_],
            "a": self.a_,
            "b": self.b_,
            "c": [float(v) for v in self.c_],
            "ridge": float(getattr(self, "ridge_", self.ridge)),
            "n_knots": int(self.n_knots),
            "n_samples": getattr(self, "n_samples_", None),
            "nll_before": getattr(self, "nll_before_", None),
            "nll_after": getattr(self, "nll_after_", None),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplineCalibrator:
        """Rebuild from :meth:`to_dict` output; raises InputError on a bad format, version or value
        (including a map that is not increasing)."""
        d = check_format(d, _FORMAT)
        knots = d.get("knots")
        c = d.get("c")
        if not isinstance(knots, list) or not isinstance(c, list) or len(knots) != len(c):
            raise InputError(
                "SplineCalibrator dict: `knots` and `c` must be lists of the same length"
            )
        k = np.asarray([finite_params(v, "knots") for v in knots], dtype=np.float64)
        if (np.diff(k) <= 0).any():
            raise InputError("SplineCalibrator dict: `knots` must be strictly increasing")
        theta = np.concatenate(
            [
                [finite_params(d.get("b"), "b"), finite_params(d.get("a"), "a")],
                [finite_params(v, "c") for v in c],
            ]
        )
        if not (_slopes(theta) > 0).all():
            raise InputError(
                "SplineCalibrator dict: every segment slope a + c_1 + ... + c_j must be > 0"
            )
        ridge = finite_params(d.get("ridge", 0.0), "ridge")
        obj = cls(n_knots=int(d.get("n_knots", k.size)), ridge=ridge)
        obj._set(k, theta)
        obj.ridge_ = ridge
        for key in ("n_samples", "nll_before", "nll_after"):
            if d.get(key) is not None:
                setattr(obj, key + "_", d[key])
        return obj

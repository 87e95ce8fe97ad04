"""Affine calibrators in logit space: Platt, per-class temperature and per-class Platt.

Every calibrator here maps a box's raw logit ``z`` to a calibrated logit and reports
``sigmoid`` of it:

* :class:`PlattScaler`: ``sigmoid(a * z + b)`` with ``a > 0``, one ``(a, b)`` for all boxes,
  fitted by unpenalised maximum likelihood (the same optimum as scikit-learn's
  ``LogisticRegression(penalty=None)`` on the single feature ``z``).
* :class:`ClassAffineScaler`: one map per predicted class, ``sigmoid(a_c * z + b_c)``
  (``kind="platt"``) or ``sigmoid(z / T_c)`` (``kind="temperature"``, ``b_c = 0``), **shrunk
  toward the global fit**: class c minimises
  ``sum_i w_i NLL_i + lam / 2 * ((a_c - a_g)^2 + (b_c - b_g)^2)`` where ``(a_g, b_g)`` is the global
  fit of the same kind and ``lam`` is a pseudo-count of boxes. A class with few boxes stays near
  the global map; a class with many boxes gets its own. ``lam`` is chosen by K-fold
  cross-validation (grouped by image when ``groups`` is given) over :data:`SHRINKAGE_GRID`,
  taking the strongest shrinkage whose held-out NLL is within one standard error of the best.

All fits are Newton's method with a backtracking line search in float64 on a convex objective;
the per-class fits run for every class at once (per-class sums with ``np.bincount``).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(-1.0, 3.0, 20_000)
    >>> y = rng.random(20_000) < 1 / (1 + np.exp(-(1.5 * z - 0.7)))
    >>> p = PlattScaler().fit(z, y)
    >>> round(p.a_, 1), round(p.b_, 1)
    (1.5, -0.7)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from det_calib.calibrators.base import LogitCalibrator, number_words, spread_words
from det_calib.calibrators.fit_support import (
    check_classes,
    check_degenerate,
    check_fit,
    check_logits,
    group_folds,
)
from det_calib.calibrators.registry import register
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import binary_nll_terms, sigmoid, weighted_mean

__all__ = ["ClassAffineScaler", "PlattScaler", "group_folds", "sigmoid"]

_log = logging.getLogger(__name__)

#: Candidate shrinkage strengths (pseudo-boxes) for the per-class fits; ``inf`` = the global map.
_SHRINKAGE_GRID: tuple[float, ...] = (1.0, 10.0, 100.0, 1000.0, 10000.0, math.inf)

_PLATT_FORMAT = "det_calib.PlattScaler"
_CLASS_FORMAT = "det_calib.ClassAffineScaler"
_VERSION = 1


# --------------------------------------------------------------------------------------------
# small shared pieces


def prepare_fit(
    logits: Any, labels: Any, weights: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z, y, w = check_fit(logits, labels, weights)
    return z, y, (np.ones(z.shape[0]) if w is None else w)


# --------------------------------------------------------------------------------------------
# the affine fit for many classes at once


def fit_affine(
    z: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    k: np.ndarray,
    n_cls: int,
    *,
    fit_bias: bool,
    prior: tuple[float, float],
    lam: float,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    tol: float = 1e-9,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Penalised logistic fit of ``(a_c, b_c)`` per class ``c`` in ``[0, n_cls)``.

    Minimises ``sum_i w_i [softplus(t_i) - y_i t_i] + lam/2 ((a_c - a0)^2 + (b_c - b0)^2)`` with
    ``t_i = a_{k_i} z_i + b_{k_i}``; ``b`` stays 0 when ``fit_bias`` is False. ``lam = 0`` with
    ``n_cls = 1`` is the plain maximum-likelihood fit. Returns ``(a, b, iterations)``.
    """
    a0, b0 = prior
    if init is None:
        a = np.full(n_cls, a0 if lam > 0 else 1.0)
        b = np.full(n_cls, b0 if (lam > 0 and fit_bias) else 0.0)
    else:
        a, b = init[0].copy(), init[1].copy()
    wz, wz2 = w * z, w * z * z

    def per_class(x: np.ndarray) -> np.ndarray:
        return np.bincount(k, weights=x, minlength=n_cls)

    def loss(a_: np.ndarray, b_: np.ndarray) -> np.ndarray:
        t = a_[k] * z + b_[k]
        out = per_class(w * binary_nll_terms(t, y))
        return out + 0.5 * lam * ((a_ - a0) ** 2 + (b_ - b0) ** 2)

    f = loss(a, b)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (`it` is read after the loop)
        p = sigmoid(a[k] * z + b[k])
        da, db = _newton_direction(
            per_class,
            p - y,
            p * (1.0 - p),
            w,
            wz,
            wz2,
            a,
            b,
            lam=lam,
            prior=prior,
            fit_bias=fit_bias,
        )
        a_new, b_new, f_new = _backtrack(loss, a, b, f, da, db)
        moved = max(
            float(np.max(np.abs(a_new - a), initial=0.0)),
            float(np.max(np.abs(b_new - b), initial=0.0)),
        )
        a, b, f = a_new, b_new, f_new
        if moved < tol * (1.0 + float(np.max(np.abs(a), initial=0.0))):
            break
    return a, b, it


def _newton_direction(per_class, r, h, w, wz, wz2, a, b, *, lam, prior, fit_bias):
    """Every class's Newton direction ``(da, db)`` from residuals ``r = p - y`` and curvatures ``h``.

    A 2x2 solve per class when ``fit_bias``; otherwise a 1-D step in ``a`` and ``db = 0``. A class
    whose Hessian is singular gets a zero step.
    """
    a0, b0 = prior
    ga = per_class(r * wz) + lam * (a - a0)
    haa = per_class(h * wz2) + lam
    if not fit_bias:
        return -ga / np.where(haa > 0, haa, np.inf), np.zeros(a.shape[0])
    gb = per_class(r * w) + lam * (b - b0)
    hab = per_class(h * wz)
    hbb = per_class(h * w) + lam
    det = haa * hbb - hab * hab
    det = np.where(det > 0, det, np.inf)
    return -(hbb * ga - hab * gb) / det, -(haa * gb - hab * ga) / det


def _backtrack(loss, a, b, f, da, db):
    """Backtracking line search per class: halve a class's step while its loss rises.

    After 40 halvings a class whose loss still rises keeps its old ``(a, b)`` and loss.
    Returns the new ``(a, b, loss)``.
    """
    step = np.ones(a.shape[0])
    for _ in range(40):
        a_new, b_new = a + step * da, b + step * db
        f_new = loss(a_new, b_new)
        bad = f_new > f + 1e-12 * np.maximum(1.0, np.abs(f))
        if not bad.any():
            return a_new, b_new, f_new
        step = np.where(bad, 0.5 * step, step)
    return np.where(bad, a, a_new), np.where(bad, b, b_new), np.where(bad, f, f_new)


def _heldout_nll(z, y, w, k, a, b) -> float:
    t = a[k] * z + b[k]
    return float(np.dot(w, binary_nll_terms(t, y)))


# --------------------------------------------------------------------------------------------
# shared estimator plumbing


_LogitCalibrator = LogitCalibrator  # the contract's base (det_calib.calibrators.base)


def check_format(d: Any, fmt: str) -> dict:
    if not isinstance(d, dict):
        raise InputError(f"Expected argument `d` to be a dict, but got {type(d).__name__}")
    if d.get("format") != fmt:
        raise InputError(f"Expected `format` {fmt!r}, but got {d.get('format')!r}")
    if d.get("version") != _VERSION:
        raise InputError(f"Expected `version` {_VERSION} of {fmt}, but got {d.get('version')!r}")
    return d


def finite_params(x: Any, name: str, *, positive: bool = False) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise InputError(f"Expected `{name}` to be a number, but got {x!r}") from None
    if not math.isfinite(v) or (positive and v <= 0):
        raise InputError(
            f"Expected `{name}` to be finite{' and > 0' if positive else ''}, but got {x!r}"
        )
    return v


# --------------------------------------------------------------------------------------------
# Platt


@register("platt", order=20)
class PlattScaler(LogitCalibrator):
    """Platt scaling on the logit: ``p = sigmoid(a * z + b)``, one map for every box.

    Args:
        tol: Newton stops when no parameter moves by more than ``tol * (1 + |a|)``.
        max_iter: Maximum Newton iterations.
        min_samples: Minimum number of fit boxes (with positive weight).

    Attributes:
        a_ (float): Slope, ``> 0`` (a fit with ``a <= 0``, logits anti-correlated with
            correctness, raises :class:`~det_calib.errors.DegenerateFitError`).
        b_ (float): Intercept.
        n_iter_ (int): Newton iterations used.
        n_samples_ (int): Fit boxes.
        nll_before_ (float): Weighted mean NLL of ``sigmoid(z)`` on the fit boxes.
        nll_after_ (float): Weighted mean NLL of the fitted map on the fit boxes.
    """

    format = _PLATT_FORMAT
    soft_labels = (
        True  # the penalised NLL is linear in the label: soft labels give the cross-entropy
    )
    _fitted_attr = "a_"

    def __init__(self, *, tol: float = 1e-9, max_iter: int = 100, min_samples: int = 10):
        self.tol = tol
        self.max_iter = max_iter
        self.min_samples = min_samples

    def __repr__(self) -> str:
        fitted = f", a_={self.a_:.6g}, b_={self.b_:.6g}" if hasattr(self, "a_") else ""
        return f"PlattScaler(tol={self.tol!r}, max_iter={self.max_iter!r}{fitted})"

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> PlattScaler:
        """Fit ``(a, b)`` by maximum likelihood.

        Args:
            logits: ``(n,)`` raw box logits.
            labels: ``(n,)`` bool or 0/1, 1 = correct box.
            classes: Ignored (accepted so that every calibrator has the same signature).
            weights: Optional ``(n,)`` non-negative box weights.

        Returns:
            ``self``.

        Raises:
            InputError: Wrong shapes or labels.
            DegenerateFitError: Too few boxes, one label only, constant or separable logits, or a
                fitted slope ``a <= 0``.
        """
        z, y, w = prepare_fit(logits, labels, weights)
        check_degenerate(z, y, w, "Platt", int(self.min_samples))
        a, b, it = fit_affine(
            z,
            y,
            w,
            np.zeros(z.shape[0], dtype=np.int64),
            1,
            fit_bias=True,
            prior=(1.0, 0.0),
            lam=0.0,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
        )
        if not (np.isfinite(a[0]) and np.isfinite(b[0])) or a[0] <= 0:
            raise DegenerateFitError(
                f"Platt fit gave slope a = {a[0]:.3g} <= 0: the logits are uninformative or "
                "anti-correlated "
                "with the labels"
            )
        self.a_, self.b_ = float(a[0]), float(b[0])
        self.n_iter_ = int(it)
        self.n_samples_ = int(z.shape[0])
        self.nll_before_ = weighted_mean(binary_nll_terms(z, y), w)
        t = self.a_ * z + self.b_
        self.nll_after_ = weighted_mean(binary_nll_terms(t, y), w)
        return self

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """``a * z + b`` (float64, shape ``(n,)``); ``classes`` is ignored."""
        self._check_fitted()
        return self.a_ * check_logits(logits, "sigmoid") + self.b_

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return f"Platt a = {number_words(d.get('a'))}, b = {number_words(d.get('b'))}"

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        return np.full(n_classes, float(self.a_)), np.full(n_classes, float(self.b_))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"format": "det_calib.PlattScaler", "version": 1, "a", "b", "n_samples",
        "nll_before", "nll_after"}``."""
        self._check_fitted()
        return {
            "format": _PLATT_FORMAT,
            "version": _VERSION,
            "a": self.a_,
            "b": self.b_,
            "n_samples": getattr(self, "n_samples_", None),
            "nll_before": getattr(self, "nll_before_", None),
            "nll_after": getattr(self, "nll_after_", None),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlattScaler:
        """Rebuild from :meth:`to_dict` output; raises InputError on a bad format, version or value."""
        d = check_format(d, _PLATT_FORMAT)
        obj = cls()
        obj.a_ = finite_params(d.get("a"), "a", positive=True)
        obj.b_ = finite_params(d.get("b"), "b")
        for key in ("n_samples", "nll_before", "nll_after"):
            if d.get(key) is not None:
                setattr(obj, key + "_", d[key])
        return obj


# --------------------------------------------------------------------------------------------
# per class, shrunk toward the global map


def _class_affine(kind: str):
    def build(
        *, seed: int = 0, shrinkage: Any = "auto", fit_min_conf: float = 0.0
    ) -> ClassAffineScaler:
        return ClassAffineScaler(kind=kind, shrinkage=shrinkage, seed=seed)

    return build


@register("class-temperature", order=40, build=_class_affine("temperature"))
@register("class-platt", order=50, build=_class_affine("platt"))
class ClassAffineScaler(LogitCalibrator):
    """Per-class temperature or Platt scaling, shrunk toward the global fit of the same kind.

    Args:
        kind: ``"platt"`` (``a_c z + b_c``) or ``"temperature"`` (``z / T_c``, i.e. ``b_c = 0``).
        shrinkage: ``"auto"`` (choose ``lam`` from ``shrinkage_grid`` by ``n_folds``-fold CV on
            held-out NLL, then the strongest shrinkage within one standard error of the best),
            or a fixed ``lam >= 0`` in pseudo-boxes (``inf``: every class gets the global map).
        shrinkage_grid: Candidates for ``"auto"``.
        n_folds: Folds of the shrinkage CV (grouped by ``groups`` when given to :meth:`fit`).
        min_samples: Minimum number of fit boxes for the global fit.
        seed: Seed of the fold assignment.

    Attributes:
        a_ (ndarray): ``(n_classes_,)`` per-class slope (``1 / T_c`` for ``kind="temperature"``).
        b_ (ndarray): ``(n_classes_,)`` per-class intercept (zeros for temperature).
        global_a_ (float), global_b_ (float): The global fit the classes are shrunk toward; used
            for class ids ``>= n_classes_``.
        shrinkage_ (float): The ``lam`` used.
        cv_nll_ (dict[float, float] | None): Held-out mean NLL per grid value (``"auto"`` only).
        class_counts_ (ndarray): ``(n_classes_,)`` fit boxes per class.
    """

    format = _CLASS_FORMAT
    soft_labels = True
    per_class = True
    _fitted_attr = "a_"

    def __init__(
        self,
        *,
        kind: Literal["platt", "temperature"] = "platt",
        shrinkage: float | Literal["auto"] = "auto",
        shrinkage_grid: Sequence[float] = _SHRINKAGE_GRID,
        n_folds: int = 3,
        min_samples: int = 10,
        seed: int = 0,
    ):
        self.kind = kind
        self.shrinkage = shrinkage
        self.shrinkage_grid = shrinkage_grid
        self.n_folds = n_folds
        self.min_samples = min_samples
        self.seed = seed

    def __repr__(self) -> str:
        fitted = f", shrinkage_={self.shrinkage_:.3g}" if hasattr(self, "shrinkage_") else ""
        return f"ClassAffineScaler(kind={self.kind!r}, shrinkage={self.shrinkage!r}{fitted})"

    def _check_options(self) -> None:
        if self.kind not in ("platt", "temperature"):
            raise InputError(
                f"Expected argument `kind` to be 'platt' or 'temperature', but got {self.kind!r}"
            )
        s = self.shrinkage
        number = isinstance(s, (int, float)) and not isinstance(s, bool)
        if s != "auto" and not (number and s >= 0 and not math.isnan(s)):
            raise InputError(
                f"Expected argument `shrinkage` to be 'auto' or a number >= 0, but got {s!r}"
            )
        if not self.shrinkage_grid or any(not (g > 0) for g in self.shrinkage_grid):
            raise InputError(
                "Expected argument `shrinkage_grid` to hold numbers > 0, but got "
                f"{self.shrinkage_grid!r}"
            )

    def _global(self, z, y, w) -> tuple[float, float]:
        what = "per-class Platt" if self.kind == "platt" else "per-class temperature"
        check_degenerate(z, y, w, what, int(self.min_samples))
        a, b, _ = fit_affine(
            z,
            y,
            w,
            np.zeros(z.shape[0], dtype=np.int64),
            1,
            fit_bias=self.kind == "platt",
            prior=(1.0, 0.0),
            lam=0.0,
        )
        if not np.isfinite(a[0]) or a[0] <= 0:
            raise DegenerateFitError(
                f"{what} fit: the global slope is {a[0]:.3g} <= 0 (anti-correlated logits)"
            )
        return float(a[0]), float(b[0])

    def _path(self, z, y, w, k, n_cls, prior, grid) -> list[tuple[np.ndarray, np.ndarray]]:
        """Fits along ``grid`` sorted from strongest to weakest shrinkage, warm-started."""
        out = []
        init = (np.full(n_cls, prior[0]), np.full(n_cls, prior[1]))
        for lam in grid:
            if math.isinf(lam):
                out.append(init)
                continue
            a, b, _ = fit_affine(
                z, y, w, k, n_cls, fit_bias=self.kind == "platt", prior=prior, lam=lam, init=init
            )
            init = (a, b)
            out.append(init)
        return out

    def _choose_shrinkage(
        self, z, y, w, k, n_cls, prior, groups
    ) -> tuple[float, dict[float, float]]:
        """K-fold CV over the shrinkage grid: ``(lam, {grid value: mean held-out NLL per weight})``.

        Takes the strongest shrinkage whose mean held-out NLL is within one standard error of the
        best. A fold whose global fit is degenerate shrinks toward the full data's global fit.
        """
        grid = sorted((float(g) for g in self.shrinkage_grid), reverse=True)
        folds = group_folds(z.shape[0], int(self.n_folds), groups, seed=int(self.seed))
        scores = np.zeros((int(self.n_folds), len(grid)))
        for f in range(int(self.n_folds)):
            tr, te = folds != f, folds == f
            try:
                pr = self._global(z[tr], y[tr], w[tr])
            except DegenerateFitError:
                pr = prior
            path = self._path(z[tr], y[tr], w[tr], k[tr], n_cls, pr, grid)
            for j, (a, b) in enumerate(path):
                scores[f, j] = _heldout_nll(z[te], y[te], w[te], k[te], a, b) / max(
                    w[te].sum(), 1e-300
                )
        mean = scores.mean(axis=0)
        se = scores.std(axis=0, ddof=1) / math.sqrt(scores.shape[0])
        best = int(np.argmin(mean))
        # strongest shrinkage (grid is sorted strongest first) within one SE of the best
        lam = grid[next(j for j in range(len(grid)) if mean[j] <= mean[best] + se[best])]
        return lam, {float(g): float(m) for g, m in zip(grid, mean, strict=True)}

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> ClassAffineScaler:
        """Fit the global map, choose the shrinkage, fit every class.

        Args:
            logits: ``(n,)`` raw box logits.
            labels: ``(n,)`` bool or 0/1.
            classes: ``(n,)`` integer predicted class ids (required).
            weights: Optional ``(n,)`` non-negative box weights.
            groups: Optional ``(n,)`` image ids: the shrinkage CV keeps an image's boxes in one fold.

        Returns:
            ``self``.

        Raises:
            InputError: Bad shapes or options.
            DegenerateFitError: The global fit is degenerate (see :class:`PlattScaler`).
        """
        self._check_options()
        z, y, w = prepare_fit(logits, labels, weights)
        k = check_classes(classes, z.shape[0])
        n_cls = int(k.max()) + 1 if k.size else 0
        prior = self._global(z, y, w)
        cv: dict[float, float] | None = None
        if self.shrinkage == "auto":
            lam, cv = self._choose_shrinkage(z, y, w, k, n_cls, prior, groups)
        else:
            lam = float(self.shrinkage)
        if math.isinf(lam):
            a, b = np.full(n_cls, prior[0]), np.full(n_cls, prior[1])
        else:
            a, b, _ = fit_affine(
                z, y, w, k, n_cls, fit_bias=self.kind == "platt", prior=prior, lam=lam
            )
        if not (np.isfinite(a).all() and np.isfinite(b).all()) or (a <= 0).any():
            bad = int(np.flatnonzero(~(a > 0))[0]) if (a <= 0).any() else -1
            raise DegenerateFitError(
                f"per-class {self.kind} fit gave a non-positive or non-finite slope (class {bad}); "
                "use more shrinkage"
            )
        self.global_a_, self.global_b_ = prior
        self.a_, self.b_ = a, b
        self.shrinkage_ = lam
        self.cv_nll_ = cv
        self.class_counts_ = np.bincount(k, minlength=n_cls)
        self.n_classes_ = n_cls
        return self

    @property
    def temperatures_(self) -> np.ndarray:
        """``(n_classes_,)`` per-class temperatures ``1 / a_c`` (meaningful for ``kind="temperature"``)."""
        self._check_fitted()
        return 1.0 / self.a_

    def params_for(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)`` of length ``n_classes``: fitted classes, then the global map for unseen ids."""
        self._check_fitted()
        a = np.full(n_classes, self.global_a_)
        b = np.full(n_classes, self.global_b_)
        m = min(n_classes, self.n_classes_)
        a[:m], b[:m] = self.a_[:m], self.b_[:m]
        return a, b

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        a = d.get("a") or []
        if method == "class-temperature":
            ts = [1.0 / x for x in a if isinstance(x, (int, float)) and x > 0]
            return f"class-temperature ({len(ts)} classes, {spread_words('T', ts)})"
        return f"{method} ({len(a)} classes, {spread_words('a', d.get('a'))}, {spread_words('b', d.get('b'))})"

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        pa, pb = self.params_for(n_classes)
        return np.asarray(pa, dtype=np.float64), np.asarray(pb, dtype=np.float64)

    @property
    def cv_grid(self) -> tuple[float, ...]:
        return tuple(self.shrinkage_grid)

    def fit_grid(self, logits, labels, *, classes, weights, grid, build) -> list[ClassAffineScaler]:
        """One fit per shrinkage of ``grid`` sharing the global fit, warm-started from strong to
        weak shrinkage (the fold fits of ``auto``'s CV)."""
        z, y, k, w = logits, labels, classes, weights
        kind, seed = self.kind, self.seed
        proto = ClassAffineScaler(kind=kind, shrinkage=math.inf, seed=seed)
        n_cls = int(k.max()) + 1
        prior = proto._global(z, y, w)
        order = sorted(range(len(grid)), key=lambda j: -grid[j])
        path = proto._path(z, y, w, k, n_cls, prior, [grid[j] for j in order])
        out: list[Any] = [None] * len(grid)
        for j, (a, b) in zip(order, path, strict=True):
            cal = ClassAffineScaler(kind=kind, shrinkage=grid[j])
            cal.a_, cal.b_, cal.global_a_, cal.global_b_ = a, b, prior[0], prior[1]
            cal.shrinkage_, cal.cv_nll_, cal.n_classes_ = grid[j], None, n_cls
            out[j] = cal
        return out

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """``a_c * z + b_c`` per box (float64, ``(n,)``); class ids never seen in the fit get the global map."""
        self._check_fitted()
        z = check_logits(logits, "sigmoid")
        k = check_classes(classes, z.shape[0])
        a, b = self.params_for(max(int(k.max()) + 1 if k.size else 0, self.n_classes_))
        return a[k] * z + b[k]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state.

        ``{"format": "det_calib.ClassAffineScaler", "version": 1, "kind", "a": [n_classes floats],
        "b": [...], "global_a", "global_b", "shrinkage" (float or "inf"), "class_counts": [ints],
        "cv_nll": {str(lam): nll} or null}``.
        """
        self._check_fitted()
        return {
            "format": _CLASS_FORMAT,
            "version": _VERSION,
            "kind": self.kind,
            "a": [float(v) for v in self.a_],
            "b": [float(v) for v in self.b_],
            "global_a": float(self.global_a_),
            "global_b": float(self.global_b_),
            "shrinkage": "inf" if math.isinf(self.shrinkage_) else float(self.shrinkage_),
            "class_counts": [
                int(v) for v in getattr(self, "class_counts_", np.zeros(len(self.a_)))
            ],
            "cv_nll": None
            if self.cv_nll_ is None
            else {str(k): v for k, v in self.cv_nll_.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClassAffineScaler:
        """Rebuild from :meth:`to_dict` output; raises InputError on a bad format, version or value."""
        d = check_format(d, _CLASS_FORMAT)
        obj = cls(kind=d.get("kind"))
        obj._check_options()
        a = np.asarray(
            [finite_params(v, "a", positive=True) for v in d.get("a", [])], dtype=np.float64
        )
        b = np.asarray([finite_params(v, "b") for v in d.get("b", [])], dtype=np.float64)
        if a.shape != b.shape:
            raise InputError(
                f"ClassAffineScaler dict: `a` and `b` differ in length ({a.size} vs {b.size})"
            )
        obj.a_, obj.b_ = a, b
        obj.global_a_ = finite_params(d.get("global_a"), "global_a", positive=True)
        obj.global_b_ = finite_params(d.get("global_b"), "global_b")
        s = d.get("shrinkage", "inf")
        obj.shrinkage_ = math.inf if s == "inf" else float(s)
        obj.cv_nll_ = (
            None
            if d.get("cv_nll") is None
            else {float(k): float(v) for k, v in d["cv_nll"].items()}
        )
        obj.class_counts_ = np.asarray(d.get("class_counts", [0] * a.size), dtype=np.int64)
        obj.n_classes_ = int(a.size)
        return obj

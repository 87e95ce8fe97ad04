"""The size-conditioned calibrator: Platt on the logit plus a term in the box's relative size.

:class:`SizePlattScaler` reports ``sigmoid(a * z + b + c * log_area)``, with ``z`` the box's raw
logit and ``log_area = log(box area / image area)`` (:func:`~det_calib.calibrators.base.log_area`,
the size measured against the image, so that one map serves images of any resolution). It is
fitted by unpenalised maximum likelihood (Newton's method with a backtracking line search in
float64; the same optimum as scikit-learn's ``LogisticRegression(penalty=None)`` on the features
``(z, log_area)``). With ``c = 0`` it is Platt.

Detectors' confidence depends on box size (small boxes are often over-confident): the ``c`` term
moves a small box's score and a large box's score apart at the same logit. It therefore
**re-ranks boxes** within a class (two boxes of different sizes can swap), so the ranking, hence
mAP, can change (measured and shown before and after, as for the per-class maps), and it cannot
fold into the class conv (the conv sees no box): a run that deploys it writes no
``calibrated.pt``; its deployment is :func:`det_calib.attach` (a predict-time hook),
:func:`det_calib.apply_calibrator` after the detector's selection, or an ONNX / OpenVINO export whose
graph computes it from the boxes of its own output (:mod:`det_calib.deploy.size_export`).

It is opt-in: ``--method size-platt``, or ``--method auto --size-maps`` (``auto`` then also
cross-validates it against the maps that keep the ranking).

>>> rng = np.random.default_rng(0)
>>> z, s = rng.normal(-1.0, 2.0, 100_000), rng.uniform(-9.0, -1.0, 100_000)
>>> y = rng.random(100_000) < 1 / (1 + np.exp(-(1.2 * z - 0.5 + 0.3 * s)))
>>> m = SizePlattScaler().fit(z, y, log_area=s)
>>> round(m.a_, 1), round(m.b_, 1), round(m.c_, 1)
(1.2, -0.5, 0.3)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator, number_words
from det_calib.calibrators.fit_support import check_degenerate, check_fit, check_logits
from det_calib.calibrators.registry import register
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import binary_nll_terms, sigmoid, weighted_mean

__all__ = ["SizePlattScaler"]

_FORMAT = "det_calib.SizePlattScaler"
_VERSION = 1


def _check_area(log_area: Any, n: int) -> np.ndarray:
    if log_area is None:
        raise InputError(
            "SizePlattScaler reads each box's size: Expected argument `log_area`, but got None"
        )
    a = np.asarray(log_area, dtype=np.float64).reshape(-1)
    if a.shape != (n,):
        raise InputError(
            f"Expected argument `log_area` of shape ({n},), but got {np.shape(log_area)}"
        )
    if not np.isfinite(a).all():
        raise InputError("Expected argument `log_area` to be finite, but got nan or inf")
    return a


def _newton(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, tol: float, max_iter: int
) -> tuple[np.ndarray, int]:
    """Weighted logistic regression of ``y`` on the columns of ``x`` (``(n, p)``), no penalty:
    Newton's method with a backtracking line search; returns the coefficients and the iterations."""
    beta = np.zeros(x.shape[1])
    beta[0] = 1.0  # start at the raw scores (a = 1)

    def loss(b: np.ndarray) -> float:
        return float(np.sum(w * binary_nll_terms(x @ b, y)))

    cur = loss(beta)
    for it in range(1, max_iter + 1):
        p = sigmoid(x @ beta)
        grad = x.T @ (w * (p - y))
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + 1e-12 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-10:
            new = beta - t * step
            val = loss(new)
            if math.isfinite(val) and val <= cur + 1e-12 * abs(cur):
                break
            t /= 2
        moved = np.max(np.abs(new - beta))
        beta, cur = new, val
        if moved <= tol * (1 + abs(beta[0])):
            return beta, it
    return beta, max_iter


@register("size-platt", order=55)
class SizePlattScaler(LogitCalibrator):
    """``p = sigmoid(a * z + b + c * log_area)``: Platt with a term in the box's log relative area.

    Args:
        tol: Newton stops when no parameter moves by more than ``tol * (1 + |a|)``.
        max_iter: Maximum Newton iterations.
        min_samples: Minimum number of fit boxes (with positive weight).

    Attributes:
        a_ (float): Slope on the logit, ``> 0`` (otherwise :class:`~det_calib.errors.DegenerateFitError`).
        b_ (float): Intercept.
        c_ (float): Slope on ``log_area`` (``c > 0``: larger boxes are scored higher at one logit).
        n_samples_, n_iter_ (int): Fit boxes, Newton iterations.
        nll_before_, nll_after_ (float): Weighted mean NLL of the raw and the fitted scores on the fit boxes.
    """

    format = _FORMAT
    uses_size = True
    soft_labels = (
        True  # the NLL is linear in the label: soft labels give the cross-entropy (--target iou)
    )
    _fitted_attr = "a_"

    def __init__(self, *, tol: float = 1e-9, max_iter: int = 100, min_samples: int = 10):
        self.tol = tol
        self.max_iter = max_iter
        self.min_samples = min_samples

    def __repr__(self) -> str:
        fitted = (
            f", a_={self.a_:.6g}, b_={self.b_:.6g}, c_={self.c_:.6g}" if hasattr(self, "a_") else ""
        )
        return f"SizePlattScaler(tol={self.tol!r}, max_iter={self.max_iter!r}{fitted})"

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
        log_area: Any = None,
    ) -> SizePlattScaler:
        """Fit ``(a, b, c)`` by maximum likelihood on boxes with raw logits ``logits``, 0/1 (or soft) ``labels``
        and sizes ``log_area`` (each ``(n,)``); ``classes`` and ``groups`` are ignored.

        Raises:
            InputError: Wrong shapes or labels, or no ``log_area``.
            DegenerateFitError: Too few boxes, one label only, constant or separable logits, or a
                fitted slope ``a <= 0``.
        """
        z, y, w = check_fit(logits, labels, weights)
        w = np.ones(z.shape[0]) if w is None else w
        s = _check_area(log_area, z.shape[0])
        check_degenerate(z, y, w, "size-Platt", int(self.min_samples))
        beta, it = _newton(
            np.column_stack([z, np.ones_like(z), s]),
            y,
            w,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
        )
        if not np.isfinite(beta).all() or beta[0] <= 0:
            raise DegenerateFitError(
                f"size-Platt fit gave slope a = {beta[0]:.3g} <= 0: the logits are "
                "uninformative or anti-correlated with the labels"
            )
        self.a_, self.b_, self.c_ = (float(v) for v in beta)
        self.n_iter_, self.n_samples_ = int(it), int(z.shape[0])
        self.nll_before_ = weighted_mean(binary_nll_terms(z, y), w)
        self.nll_after_ = weighted_mean(binary_nll_terms(self.a_ * z + self.b_ + self.c_ * s, y), w)
        return self

    def transform_logits(
        self, logits: Any, *, classes: Any = None, log_area: Any = None
    ) -> np.ndarray:
        """``a * z + b + c * log_area`` (float64, ``(n,)``); ``classes`` is ignored."""
        self._check_fitted()
        z = check_logits(logits, "sigmoid")
        return self.a_ * z + self.b_ + self.c_ * _check_area(log_area, z.shape[0])

    def equivalent_conf(self, conf: float, cls: int | None = None) -> float | None:
        """None: the calibrated conf of a box depends on its size, so no one calibrated threshold
        keeps the boxes a raw threshold keeps."""
        return None

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return (
            f"size-Platt a = {number_words(d.get('a'))}, b = {number_words(d.get('b'))}, "
            f"c = {number_words(d.get('c'))} per unit of log relative area"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"format": "det_calib.SizePlattScaler", "version": 1, "a", "b", "c",
        "n_samples", "nll_before", "nll_after"}``."""
        self._check_fitted()
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "a": self.a_,
            "b": self.b_,
            "c": self.c_,
            "n_samples": getattr(self, "n_samples_", None),
            "nll_before": getattr(self, "nll_before_", None),
            "nll_after": getattr(self, "nll_after_", None),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SizePlattScaler:
        """Rebuild from :meth:`to_dict` output; raises InputError on a bad format, version or value."""
        if not isinstance(d, dict) or d.get("format") != _FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise InputError(f"Expected `format` {_FORMAT!r}, but got {got!r}")
        if d.get("version") != _VERSION:
            raise InputError(
                f"Expected `version` {_VERSION} of {_FORMAT}, but got {d.get('version')!r}"
            )
        obj = cls()
        for name in ("a", "b", "c"):
            v = d.get(name)
            bad = isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            if bad or (name == "a" and v <= 0):
                want = "a finite number" + (" > 0" if name == "a" else "")
                raise InputError(f"Expected `{name}` of {_FORMAT} to be {want}, but got {v!r}")
            setattr(obj, f"{name}_", float(v))
        for name in ("n_samples", "nll_before", "nll_after"):
            if d.get(name) is not None:
                setattr(obj, f"{name}_", d[name])
        return obj

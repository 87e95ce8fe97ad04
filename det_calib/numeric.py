"""Elementwise numerics shared by the whole package: sigmoid, logit, softplus, the log-sum-exp
family, the weighted mean and the binary NLL from logits (the exact binomial tail of the certified
thresholds is theirs: :mod:`det_calib.thresholds.certification`).

Every function works in float64 and is overflow-free for any finite input. This is the one home of
these primitives; :mod:`det_calib.metrics`, :mod:`det_calib.calibrators`,
:mod:`det_calib.selection` and :mod:`det_calib.thresholds` import them from
here, and only from here.

Two logistic functions live here on purpose. :func:`sigmoid` (``0.5 (1 + tanh(z / 2))``) is the
confidence the package reports everywhere; :func:`expit` (``1 / (1 + exp(-z))``) is the form the
temperature fit's Newton objective was written and pinned with. ``expit`` is accurate to a few ulp
relative everywhere; ``sigmoid`` to about 1e-16 absolute (its relative error grows where the value
is far below 0.01, from the ``1 + tanh`` cancellation). They are not bit-identical, and the figures
of a run depend on each where it is used today, so neither replaces the other.

>>> float(sigmoid(0.0)), float(logit(0.5))
(0.5, 0.0)
>>> binary_nll_logits([50.0], [1])  # log1p(exp(-50)); sigmoid(50) == 1.0 in float64
1.9287498479639178e-22
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "binary_nll_logits",
    "binary_nll_terms",
    "expit",
    "log_softmax",
    "logit",
    "logit_threshold",
    "logsumexp",
    "sigmoid",
    "weighted_mean",
]


def sigmoid(z: ArrayLike) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-z))`` in float64, shape of ``z``.

    Written as ``0.5 (1 + tanh(z / 2))``: exact at 0 (0.5), saturating to 0 and 1 without
    overflow warnings for any finite ``z``; absolute error about 1e-16 (use :func:`expit` where
    the relative accuracy of tiny values matters). This is the confidence a calibrated head
    reports (``sigmoid(z / T)`` for a temperature: divide first, then call this).
    """
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64)))


def expit(x: ArrayLike) -> np.ndarray:
    """Logistic sigmoid ``1 / (1 + exp(-x))``, elementwise, accurate over the whole float range.

    ``exp(-x)`` overflows to ``inf`` for ``x < -709``, which gives the correct limit 0 (the
    relative error elsewhere is a few ulp, also for large negative ``x``); the overflow warning is
    silenced. Matches ``scipy.special.expit`` (tested). Used by the temperature fit's objective.
    """
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def logit(p: ArrayLike) -> np.ndarray:
    """``log(p / (1 - p))`` as ``log(p) - log1p(-p)`` in float64, shape of ``p``.

    ``p = 0`` gives ``-inf`` and ``p = 1`` gives ``+inf`` (no warning); clip first where a finite
    value is needed.
    """
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def logit_threshold(conf: float) -> float:
    """Logit of one confidence threshold, a Python float: ``-inf`` for ``conf <= 0``.

    Scalar ``math.log(conf) - math.log1p(-conf)``; the logit-space floor a threshold on the
    confidence becomes (``z > logit_threshold(c)`` iff ``sigmoid(z) > c``, up to rounding).
    """
    return -math.inf if conf <= 0 else math.log(conf) - math.log1p(-conf)


def _softplus(a: ArrayLike) -> np.ndarray:
    """``log(1 + exp(a))`` without overflow (``logaddexp(0, a)``)."""
    return np.logaddexp(0.0, a)


def _log_sigmoid(a: ArrayLike) -> np.ndarray:
    """``log(sigmoid(a)) = -softplus(-a)`` without overflow or cancellation."""
    return -np.logaddexp(0.0, -np.asarray(a, dtype=np.float64))


def logsumexp(a: ArrayLike, axis: int = 1) -> np.ndarray:
    """``log(sum(exp(a), axis))`` without overflow: the maximum along ``axis`` is factored out.

    A row whose maximum is infinite (or all ``-inf``) is shifted by 0 instead, so it gives
    ``inf``/``-inf`` as the limit. Matches ``scipy.special.logsumexp`` (tested).
    """
    a = np.asarray(a, dtype=float)
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):  # log(0) = -inf for an all -inf row
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return np.squeeze(out, axis=axis)


def log_softmax(a: ArrayLike, axis: int = 1) -> np.ndarray:
    """``a - logsumexp(a, axis)``: log-probabilities of the softmax along ``axis``."""
    a = np.asarray(a, dtype=float)
    return a - np.expand_dims(logsumexp(a, axis=axis), axis)


def weighted_mean(x: np.ndarray, w: np.ndarray | None = None) -> float:
    """Mean of ``x`` (shape ``(n,)``), weighted by ``w`` (shape ``(n,)``) when given.

    Returns nan for no values, or for weights that sum to zero or less.
    """
    if x.size == 0:
        return float("nan")
    if w is None:
        return float(x.mean())
    total = float(w.sum())
    if total <= 0.0:
        return float("nan")
    return float(np.dot(w, x) / total)


def binary_nll_terms(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-element binary NLL of ``sigmoid(z)`` as ``softplus(z) - y z`` (``y`` float 0/1; for a soft
    label ``y`` in [0, 1] the same expression is the cross-entropy ``y softplus(-z) + (1 - y) softplus(z)``).

    The form every fit objective is written with (temperature, Platt, per-class, isotonic,
    selection): it is linear in ``y``, which the gradients use. Exact for ``y = 0``; for ``y = 1``
    it loses relative accuracy where ``z`` is large (``softplus(z) - z`` cancels), so report
    losses with :func:`binary_nll_logits`.
    """
    return _softplus(z) - y * z


def binary_nll_logits(z: ArrayLike, y: ArrayLike, w: np.ndarray | None = None) -> float:
    """Mean binary cross-entropy of ``sigmoid(z)`` against 0/1 labels ``y`` (or soft labels in [0, 1]:
    ``y softplus(-z) + (1 - y) softplus(z)``), from the logits.

    Per element ``softplus(-z)`` if ``y`` is 1 else ``softplus(z)``: no cancellation, so the loss
    is accurate to rounding for any finite ``z``, also where ``sigmoid(z)`` rounds to 0 or 1.
    Unchecked: the caller validates (``z`` float64, ``y`` 0/1, ``w`` non-negative, same length).

    Args:
        z: (n,) logits (already divided by any temperature).
        y: (n,) labels, 0/1 or bool, or soft labels in [0, 1].
        w: Optional (n,) weights; the mean is weighted.

    Returns:
        The (weighted) mean NLL in nats; nan for no elements.
    """
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y)
    if y.dtype == bool or np.isin(y, (0, 1)).all():
        return weighted_mean(np.logaddexp(0.0, np.where(y > 0.5, -z, z)), w)
    # soft labels in [0, 1]: the cross-entropy y softplus(-z) + (1 - y) softplus(z), as accurate
    y = y.astype(np.float64)
    return weighted_mean(y * np.logaddexp(0.0, -z) + (1.0 - y) * np.logaddexp(0.0, z), w)

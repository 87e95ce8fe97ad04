"""Calibration of a classifier's class probabilities (one ``(K,)`` probability vector per image).

``top_label_ece``
    The ECE of the top-1 probability against top-1 correctness: equal-width bins (15 by default)
    of ``max_k p_k``, the gap ``|accuracy - mean confidence|`` of each bin weighted by its share of
    images (the textbook "confidence ECE"; :func:`det_calib.metrics.calibration.ece` on
    ``(max_k p_k, argmax_k p_k == y)``).
``classwise_ece``
    The mean over classes of the ECE of ``p_k`` against ``y == k`` over every image (each class's
    one-vs-rest reliability, as in Kull et al.'s class-wise ECE).
``multiclass_nll``, ``multiclass_brier``
    The mean categorical NLL ``-log p_y`` and the mean multi-class Brier score
    ``sum_k (p_k - [y == k])^2``.
``top_k_accuracy``
    The share of images whose true class is among the ``k`` most probable.

Example:
    >>> import numpy as np
    >>> p = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
    >>> y = np.array([0, 1, 1])
    >>> round(top_label_ece(p, y, n_bins=10), 4)
    0.3
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.metrics.calibration import ece

__all__ = ["classwise_ece", "multiclass_brier", "multiclass_nll", "top_k_accuracy", "top_label_ece"]


def _checked(prob: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(prob, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2 or p.shape[0] != y.shape[0] or p.shape[0] == 0:
        raise InputError(
            f"class probabilities must be an (n, K) array with one label per row, got "
            f"{p.shape} and {y.shape}"
        )
    if y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= p.shape[1]:
        raise InputError(f"class labels must be integers in [0, {p.shape[1]})")
    if not np.isfinite(p).all() or p.min() < 0 or p.max() > 1:
        raise InputError("class probabilities must be finite and in [0, 1]")
    return p, y.astype(np.int64)


def top_label_ece(prob: ArrayLike, labels: ArrayLike, *, n_bins: int = 15) -> float:
    """ECE of the top-1 probability against top-1 correctness, equal-width bins."""
    p, y = _checked(prob, labels)
    return ece(p.max(axis=1), p.argmax(axis=1) == y, n_bins=n_bins)


def classwise_ece(prob: ArrayLike, labels: ArrayLike, *, n_bins: int = 15) -> float:
    """Mean over classes of each class's one-vs-rest ECE, equal-width bins."""
    p, y = _checked(prob, labels)
    return float(np.mean([ece(p[:, k], y == k, n_bins=n_bins) for k in range(p.shape[1])]))


def multiclass_nll(prob: ArrayLike, labels: ArrayLike, *, eps: float = 1e-12) -> float:
    """Mean ``-log p_y`` (probabilities clipped below at ``eps``)."""
    p, y = _checked(prob, labels)
    return float(-np.mean(np.log(np.maximum(p[np.arange(y.size), y], eps))))


def multiclass_brier(prob: ArrayLike, labels: ArrayLike) -> float:
    """Mean ``sum_k (p_k - [y == k])^2``."""
    p, y = _checked(prob, labels)
    onehot = np.zeros_like(p)
    onehot[np.arange(y.size), y] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def top_k_accuracy(prob: ArrayLike, labels: ArrayLike, k: int = 1) -> float:
    """Share of images whose true class is among the ``k`` most probable (ties broken by class
    order, as ``torch.topk`` would on the same scores)."""
    p, y = _checked(prob, labels)
    k = min(int(k), p.shape[1])
    top = np.argsort(-p, axis=1, kind="stable")[:, :k]
    return float(np.mean((top == y[:, None]).any(axis=1)))

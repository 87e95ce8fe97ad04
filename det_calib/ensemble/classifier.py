"""The classifier form of the method: average the members' probabilities, then one temperature.

For a classifier the ensemble half of the method is three lines: average the members' predicted
class probabilities, and fit one temperature on the averaged output on a held-out split. The
temperature acts on the log of the averaged probabilities (``softmax(log p_bar / T)``, which is
``p_bar`` itself at ``T = 1``), fitted by NLL with det_calib's solver, or chosen on a small grid
by ECE of the top-class confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from det_calib import metrics
from det_calib.calibrators import fit_temperature
from det_calib.errors import InputError

_DEFAULT_GRID = tuple(
    float(t) for t in np.round(np.exp(np.linspace(np.log(0.25), np.log(4.0), 49)), 4)
)
"""Temperatures the ``ece`` criterion tries: 49 log-spaced values from 0.25 to 4 (ratio ~1.06)."""


@dataclass(frozen=True)
class EnsembleTemperature:
    """The result of :func:`ensemble_temperature`.

    Attributes:
        temperature: The fitted ``T``.
        mean_probs: ``(n, K)`` the members' averaged probabilities.
        probs: ``(n, K)`` the calibrated probabilities ``softmax(log mean_probs / T)``.
        nll_before, nll_after: Mean NLL of the labels under ``mean_probs`` and ``probs``.
        ece_before, ece_after: ECE of the top-class confidence (equal-width bins).
        by: ``nll`` or ``ece``.
    """

    temperature: float
    mean_probs: np.ndarray
    probs: np.ndarray
    nll_before: float
    nll_after: float
    ece_before: float
    ece_after: float
    by: str


def _softmax_t(logp: np.ndarray, t: float) -> np.ndarray:
    a = logp / t
    a = a - a.max(axis=1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=1, keepdims=True)


def _top_ece(p: np.ndarray, y: np.ndarray, n_bins: int) -> float:

    return metrics.ece(p.max(axis=1), p.argmax(axis=1) == y, n_bins=n_bins)


def _nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))))


def ensemble_temperature(
    member_probs: Any,
    labels: Any,
    *,
    by: Literal["nll", "ece"] = "nll",
    grid: tuple[float, ...] = _DEFAULT_GRID,
    n_bins: int = 15,
) -> EnsembleTemperature:
    """Average the members' class probabilities, then fit one temperature on the average.

    Args:
        member_probs: ``(M, n, K)`` probabilities of ``M`` members on the same ``n`` held-out
            samples (or a list of ``M`` arrays ``(n, K)``); each row sums to 1.
        labels: ``(n,)`` integer class ids.
        by: ``nll`` (default): the NLL-optimal temperature (:func:`det_calib.fit_temperature`,
            ``kind="softmax"``); ``ece``: the temperature of ``grid`` with the lowest ECE of the
            top-class confidence (ties: the one closest to 1).
        grid: Temperatures ``by="ece"`` tries.
        n_bins: ECE bins.

    Returns:
        An :class:`EnsembleTemperature`.

    Raises:
        InputError: Shapes that disagree, probabilities that are not distributions, bad labels.
    """

    p = np.asarray(member_probs, dtype=np.float64)
    if p.ndim == 2:
        p = p[None]
    if p.ndim != 3 or p.shape[1] < 2 or p.shape[2] < 2:
        raise InputError(
            f"Expected `member_probs` of shape (members, n, classes), but got {p.shape}"
        )
    if not np.isfinite(p).all() or (p < 0).any() or not np.allclose(p.sum(axis=2), 1, atol=1e-6):
        raise InputError(
            "Expected every row of `member_probs` to be a probability distribution (>= 0, sums to "
            "1)"
        )
    y = np.asarray(labels)
    if (
        y.shape != (p.shape[1],)
        or not np.issubdtype(y.dtype, np.integer)
        or y.min() < 0
        or y.max() >= p.shape[2]
    ):
        raise InputError(
            f"Expected `labels` of {p.shape[1]} class ids in [0, {p.shape[2]}), but got shape "
            f"{y.shape}"
        )
    mean = p.mean(axis=0)
    logp = np.log(np.clip(mean, 1e-300, None))
    if by == "nll":
        t = float(fit_temperature(logp, y, kind="softmax"))
    elif by == "ece":
        scores = [(_top_ece(_softmax_t(logp, g), y, n_bins), abs(np.log(g)), g) for g in grid]
        t = float(min(scores)[2])
    else:
        raise InputError(f"Expected `by` to be nll or ece, but got {by!r}")
    cal = _softmax_t(logp, t)
    return EnsembleTemperature(
        t,
        mean,
        cal,
        _nll(mean, y),
        _nll(cal, y),
        _top_ece(mean, y, n_bins),
        _top_ece(cal, y, n_bins),
        by,
    )

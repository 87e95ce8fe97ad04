"""Certified target precision: the exact binomial test of fixed-sequence testing, the design
effect of image clustering, and the threshold it certifies per class (the method:
:mod:`det_calib.thresholds.per_class`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from det_calib.errors import InputError
from det_calib.numeric import binom_sf
from det_calib.thresholds.criteria import Unit
from det_calib.thresholds.grid_counts import ClassCounts, figures_at

__all__ = ["certified_threshold", "certify_precision", "design_effect", "min_certifiable", "precision_lower_bound",
           "testable"]

def precision_lower_bound(k: np.ndarray, n: np.ndarray, *, delta: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound at level ``1 - delta`` of a proportion ``k / n``.

    The ``p`` solving ``P(Bin(n, p) >= k) = delta`` (bisection, 1e-10); 0 where ``k == 0``,
    nan where ``n == 0``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    k, n = np.broadcast_arrays(k, n)
    lo, hi = np.zeros(k.shape), np.ones(k.shape)
    for _ in range(40):
        mid = (lo + hi) / 2
        up = binom_sf(k, n, mid) > delta  # the tail is increasing in p: the root is below mid
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    out = np.where(k > 0, lo, 0.0)
    return np.where(n > 0, out, np.nan)


def design_effect(kept: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Design effect of image clustering on the precision ``sum tp / sum kept``, per column, >= 1.

    Linearised variance of the ratio estimator over m images,
    ``m / (m - 1) * sum_i (tp_i - p kept_i)^2 / n^2``, divided by the binomial ``p (1 - p) / n``.
    Works on (..., m, G) arrays (leading axes: resamples).
    """
    n = kept.sum(-2)
    k = tp.sum(-2)
    m = (kept > 0).sum(-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        ss = (tp * tp).sum(-2) - 2 * p * (tp * kept).sum(-2) + p * p * (kept * kept).sum(-2)
        var_c = np.where(m > 1, m / np.maximum(m - 1, 1) * ss / (n * n), np.nan)
        var_b = p * (1 - p) / n
        d = var_c / var_b
    return np.where(np.isfinite(d), np.maximum(d, 1.0), 1.0)


def testable(n: np.ndarray, *, target: float, delta: float) -> np.ndarray:
    """Which thresholds enter the test sequence: a rule on the kept counts ``n`` only (no labels).

    A threshold is tested when an observed precision halfway between the target and 1 would
    certify the target there, ``P(Bin(n, target) >= ceil(n (1 + target) / 2)) <= delta``. Tiny
    sets at the top of the score range, where one wrong box would stop the sequence at once
    (with ``n`` at the bare minimum only a perfect record certifies), are skipped. Because the
    rule reads no label, the sequence is fixed given the scores and the test stays exact.
    """
    n = np.asarray(n, dtype=np.float64)
    k = np.ceil(n * (1 + target) / 2)
    return (n > 0) & (binom_sf(k, n, target) <= delta)


def min_certifiable(target: float, delta: float) -> int:
    """Smallest number of boxes at which a threshold enters the test sequence (see :func:`testable`)."""
    lo = max(1, math.ceil(math.log(delta) / math.log(target)))
    for start in range(lo, 10_000_000, 4096):
        n = np.arange(start, start + 4096)
        ok = testable(n, target=target, delta=delta)
        if ok.any():
            return int(n[np.argmax(ok)])
    raise InputError(f"target precision {target} cannot be certified at delta {delta}")  # pragma: no cover


def certify_precision(
    n: np.ndarray, k: np.ndarray, *, target: float, delta: float, deff: np.ndarray | None = None
) -> np.ndarray:
    """Fixed-sequence test over grid thresholds from high to low; vectorised over leading axes.

    The thresholds of :func:`testable` (on the raw counts) are tested from the highest down; at
    each, ``H0: precision < target`` is rejected when ``P(Bin(n*, target) >= k*) <= delta``,
    with ``n* = n / deff``, ``k* = k / deff``. The first non-rejection stops the sequence.

    Args:
        n: (..., G) boxes kept at each threshold (grid increasing along the last axis).
        k: (..., G) correct boxes among them.
        target: Target precision in (0, 1).
        delta: Error level in (0, 1).
        deff: (..., G) design effects (>= 1) that shrink the counts; None: box-level test.

    Returns:
        (...,) index into the grid of the certified threshold (the lowest rejected before the
        first failure), -1 where none.
    """
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    test = testable(n, target=target, delta=delta)
    ne, ke = (n, k) if deff is None else (n / deff, k / deff)
    reject = test & (binom_sf(ke, ne, target) <= delta)
    g = n.shape[-1]
    pos = np.arange(g)
    fail = test & ~reject
    # highest failing threshold; everything at or below it is out of the sequence
    top_fail = np.where(fail.any(-1), g - 1 - np.argmax(fail[..., ::-1], -1), -1)
    ok = reject & (pos > top_fail[..., None])
    return np.where(ok.any(-1), np.argmax(ok, -1), -1)


def certified_threshold(c: ClassCounts, *, target: float, delta: float, unit: Unit) -> dict[str, Any]:
    deff = design_effect(c.kept, c.tp) if unit == "image" else None
    j = int(certify_precision(c.n, c.k, target=target, delta=delta, deff=deff))
    out = figures_at(c, j)
    if j >= 0:
        d = 1.0 if deff is None else deff[j]
        out["precision_lower"] = float(precision_lower_bound(c.k[j] / d, c.n[j] / d, delta=delta))
    else:
        out["precision_lower"] = None
    out["deff"] = float(deff[j]) if (j >= 0 and deff is not None) else None
    out["certified"] = j >= 0
    if j >= 0:
        out["flag"] = None
    elif not testable(c.n, target=target, delta=delta).any():
        out["flag"] = "too_few_boxes"
    else:
        out["flag"] = "target_not_reached"
    return out

"""The binning every binned metric shares (the conventions: :mod:`det_calib.metrics.calibration`):
equal-width and equal-mass bin sums and the :class:`ReliabilityBins` of a set of boxes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.metrics.metric_inputs import (
    as_binary,
    as_unit,
    as_weights,
    check_lengths,
    check_positive_int,
)
from det_calib.validation import check_choice

__all__ = [
    "ReliabilityBins",
    "dense_ids",
    "gap_sum",
    "reliability_bins",
    "reliability_core",
    "uniform_index",
]

_Strategy = Literal["uniform", "quantile"]
_STRATEGIES = ("uniform", "quantile")


def _check_strategy(strategy: object) -> str:
    return str(check_choice(strategy, _STRATEGIES, "strategy"))


def _uniform_edges(n_bins: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n_bins + 1)


def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` of 1-D ids (the distinct ids in order, and each id's
    rank among them), the inverse raveled. Non-negative integer ids of a range no wider than twice
    their count (image and class ids) are ranked by counting, not sorting: the same arrays, about
    80 times faster on a million class ids.

    >>> [a.tolist() for a in dense_ids(np.array([7, 2, 7, 3]))]
    [[2, 3, 7], [2, 0, 2, 1]]
    """
    if (ids.dtype.kind == "i" or ids.dtype.kind == "u" and ids.dtype.itemsize < 8) and ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi < 2 * ids.size + 1024:
            present = np.bincount(ids, minlength=hi + 1) > 0
            return np.flatnonzero(present).astype(ids.dtype), (np.cumsum(present) - 1)[ids]
    values, inverse = np.unique(ids, return_inverse=True)
    return values, inverse.ravel()


def uniform_index(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bin of each value in [0, 1]: ``[lo, hi)``, the last bin closed at 1.

    Identical to ``np.searchsorted(linspace(0, 1, M + 1), x, side="right") - 1`` (capped at
    M - 1), i.e. to np.histogram / netcal on those edges, but O(1) per value: ``floor(x * M)`` is
    off by at most one bin near an edge (rounding of ``x * M`` and of the linspace edges), and
    one comparison with the actual edges on each side fixes it.
    """
    edges = _uniform_edges(n_bins)
    idx = np.minimum((x * n_bins).astype(np.int64), n_bins - 1)
    idx -= x < edges[idx]
    up = x >= edges[idx + 1]
    up &= idx < n_bins - 1
    idx += up
    return idx


def _sums_uniform(conf: np.ndarray, target: np.ndarray, w: np.ndarray | None, n_bins: int):
    idx = uniform_index(conf, n_bins)
    if w is None:
        count = np.bincount(idx, minlength=n_bins).astype(np.float64)
        s_conf = np.bincount(idx, weights=conf, minlength=n_bins)
        s_tgt = np.bincount(idx, weights=target, minlength=n_bins)
    else:
        count = np.bincount(idx, weights=w, minlength=n_bins)
        s_conf = np.bincount(idx, weights=w * conf, minlength=n_bins)
        s_tgt = np.bincount(idx, weights=w * target, minlength=n_bins)
    return count, s_conf, s_tgt


def _sums_quantile(conf: np.ndarray, target: np.ndarray, w: np.ndarray | None, n_bins: int):
    """Per-bin weight, weighted sums of conf and target, and edges, for equal-mass bins.

    Boxes are laid end to end along a "weight axis" in stable confidence order, box ``i`` covering
    ``[S_i, S_i + w_i)``; bin ``m`` is the stretch ``[b_m, b_{m+1})`` with ``b_m = ceil(m W / M)``
    for integer weights (so a box of weight k is exactly k copies of weight 1) and ``m W / M``
    otherwise. A box's contribution to a bin is its overlap with the stretch.
    """
    n = conf.size
    order = np.argsort(conf, kind="stable")
    c, t = conf[order], target[order]
    ww = np.ones(n) if w is None else w[order]
    cum_w = np.concatenate([[0.0], np.cumsum(ww)])
    total = cum_w[-1]
    m = np.arange(n_bins + 1)
    if np.all(ww == np.round(ww)) and total < 2**53:
        w_int = round(total)
        bounds = (-((-m * w_int) // n_bins)).astype(np.float64)  # ceil(m W / M), exact
    else:
        bounds = m * (total / n_bins)
        bounds[-1] = total
    if n == 0:
        zeros = np.zeros(n_bins)
        return zeros, zeros.copy(), zeros.copy(), _uniform_edges(n_bins)
    k = np.clip(np.searchsorted(cum_w, bounds, side="right") - 1, 0, n - 1)
    part = np.clip(bounds - cum_w[k], 0.0, ww[k])

    def at_bounds(vals: np.ndarray | None) -> np.ndarray:
        if vals is None:  # the weight itself
            return cum_w[k] + part
        cv = np.concatenate([[0.0], np.cumsum(ww * vals)])
        return cv[k] + vals[k] * part

    count = np.diff(at_bounds(None))
    s_conf = np.diff(at_bounds(c))
    s_tgt = np.diff(at_bounds(t))
    edges = np.where(bounds < total, c[k], 1.0)
    edges[0], edges[-1] = 0.0, 1.0
    return count, s_conf, s_tgt, edges


def gap_sum(count: np.ndarray, s_conf: np.ndarray, s_tgt: np.ndarray) -> float:
    """``sum_m |B_m|/N * |mean target - mean conf|`` over non-empty bins (nan if N == 0)."""
    total = float(count.sum())
    if total <= 0.0:
        return float("nan")
    nonempty = count > 0
    return float(np.abs(s_tgt[nonempty] - s_conf[nonempty]).sum() / total)


@dataclass(frozen=True, eq=False)
class ReliabilityBins:
    """Per-bin statistics of a reliability diagram.

    Attributes:
        edges: (M + 1,) bin edges in [0, 1]. Equal-width: ``linspace(0, 1, M + 1)``. Equal-mass:
            ``edges[0] = 0``, ``edges[M] = 1`` and ``edges[m]`` the smallest confidence in bin
            ``m`` (or 1.0 when no box reaches bin ``m``).
        count: (M,) number of boxes per bin (int64), or total weight per bin when fractional
            weights were given (float64).
        conf: (M,) mean confidence per bin, nan when empty.
        acc: (M,) fraction correct per bin, nan when empty.
        strategy: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass).
    """

    edges: np.ndarray
    count: np.ndarray
    conf: np.ndarray
    acc: np.ndarray
    strategy: _Strategy

    def __post_init__(self) -> None:
        _check_strategy(self.strategy)
        for name in ("edges", "count", "conf", "acc"):
            arr = np.array(getattr(self, name))
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        m = self.count.shape
        if (
            self.count.ndim != 1
            or self.conf.shape != m
            or self.acc.shape != m
            or self.edges.shape != (m[0] + 1,)
        ):
            raise InputError(
                f"ReliabilityBins needs edges (M+1,) and count/conf/acc (M,), but got shapes "
                f"{self.edges.shape}, {self.count.shape}, {self.conf.shape}, {self.acc.shape}"
            )

    @property
    def n_bins(self) -> int:
        """Number of bins M."""
        return int(self.count.shape[0])

    @property
    def gap(self) -> np.ndarray:
        """(M,) ``acc - conf`` per bin (negative: overconfident); nan for empty bins."""
        return self.acc - self.conf

    def ece(self) -> float:
        """``sum_m count_m / N * |acc_m - conf_m|`` over non-empty bins; nan when N == 0."""
        total = float(self.count.sum())
        if total <= 0.0:
            return float("nan")
        nonempty = self.count > 0
        return float(np.sum(self.count[nonempty] / total * np.abs(self.gap[nonempty])))

    def mce(self) -> float:
        """Largest ``|acc_m - conf_m|`` over non-empty bins; nan when all bins are empty."""
        nonempty = self.count > 0
        if not nonempty.any():
            return float("nan")
        return float(np.max(np.abs(self.gap[nonempty])))


def reliability_core(conf, target, w, n_bins, strategy) -> ReliabilityBins:
    if strategy == "uniform":
        count, s_conf, s_tgt = _sums_uniform(conf, target, w, n_bins)
        edges = _uniform_edges(n_bins)
    else:
        count, s_conf, s_tgt, edges = _sums_quantile(conf, target, w, n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(count > 0, s_conf / count, np.nan)
        mean_acc = np.where(count > 0, s_tgt / count, np.nan)
    if np.all(count == np.round(count)):
        count = np.round(count).astype(np.int64)
    return ReliabilityBins(
        edges=edges, count=count, conf=mean_conf, acc=mean_acc, strategy=strategy
    )


def reliability_bins(
    conf: ArrayLike,
    correct: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: _Strategy = "uniform",
    weights: ArrayLike | None = None,
) -> ReliabilityBins:
    """Bin boxes by confidence and return count, mean confidence and accuracy per bin.

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1, the matched flag.
        n_bins: Number of bins M.
        strategy: ``"uniform"``: equal-width bins ``[m/M, (m+1)/M)``, the last closed at 1.0.
            ``"quantile"``: equal-mass bins; the box of (stable) confidence rank r goes to bin
            ``floor(r * M / n)``, so counts differ by at most one.
        weights: Optional (n,) non-negative weights; integer weights equal repeating boxes.

    Returns:
        A :class:`ReliabilityBins` with (M + 1,) edges and (M,) count, conf, acc.

    Raises:
        InputError: Bad ``n_bins`` or ``strategy``, lengths differ, conf outside [0, 1].

    >>> rb = reliability_bins([0.1, 0.2, 0.9, 1.0], [0, 1, 1, 1], n_bins=2)
    >>> rb.count.tolist(), rb.acc.tolist()
    ([2, 2], [0.5, 1.0])
    >>> round(rb.ece(), 6)  # 2/4*|0.5-0.15| + 2/4*|1-0.95|
    0.2
    """
    n_bins = check_positive_int(n_bins)
    strategy = _check_strategy(strategy)
    c = as_unit(conf, "conf")
    y = as_binary(correct, "correct")
    n = check_lengths(conf=c, correct=y)
    w = as_weights(weights, n, "conf")
    return reliability_core(c, y, w, n_bins, strategy)

"""Calibration metrics for detector box confidences: pure numpy functions on per-box arrays.

Every metric takes one value per box (confidence, binary ``correct`` flag, optionally IoU, class
id, normalised box features) and returns a float; the definitions are those of
``NOTES-metrics.md``. Record ``n_bins`` (and the matching IoU threshold) with every figure.

Bin conventions (shared by every binned metric here):

* **Equal-width** (``"uniform"``; ECE, MCE, D-ECE, LaECE): edges ``np.linspace(0, 1, M + 1)``;
  bin ``m`` is ``[edges[m], edges[m + 1])`` except the last, which is closed: ``conf == 1.0`` is
  in bin ``M - 1``. A value equal to an interior edge goes to the upper bin (numpy
  ``searchsorted(..., side="right")``, as ``np.histogram``/``np.histogramdd`` and netcal).
* **Equal-mass** (``"quantile"``; ACE): boxes sorted by confidence (stable sort, so ties keep
  their input order); the box of rank ``r`` (0-based, of ``n``) goes to bin ``floor(r * M / n)``,
  so bin counts differ by at most one, and tied confidences may straddle a bin boundary
  (deterministically, by input order). With integer weights a box counts as that many copies;
  with fractional weights the bins hold equal total weight and a box may be split between two
  bins.

Weights: the metrics accept ``weights=`` (non-negative, one per box). Integer weights give exactly
the metric of the data with each box repeated that many times; :func:`bootstrap_ci` uses this to
resample images without copying arrays.

Empty inputs (no boxes, or zero total weight) give ``nan``; they do not raise.

Parity with netcal (``netcal.metrics.ECE(bins, detection=True)``, version 1.4): netcal clips
every column of ``X`` to ``[eps, 1 - eps]`` (``eps = np.finfo(X.dtype).eps``) before binning, and
bins with ``np.histogramdd``/``scipy.stats.binned_statistic_dd`` on ``np.linspace(0, 1, b + 1)``
edges. The clipping never moves a value to another bin (``1.0`` lands in the last, closed, bin
either way), so the bins are identical; it only shifts the mean confidence of a bin containing
exact 0s or 1s by at most ``eps`` (about ``2e-16`` in float64, ``1.2e-7`` in float32), which
changes ECE/D-ECE by at most that much. netcal's ``ACE`` is the *unweighted* mean gap over
non-empty quantile bins with ``np.quantile`` edges; :func:`ace` here is the sample-weighted sum
of ``NOTES-metrics.md``. The two agree when all bins hold the same number of boxes.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.numeric import binary_nll_logits, weighted_mean
from det_calib.numeric import sigmoid as _sigmoid
from det_calib.validation import (
    as_1d,
    as_binary,
    as_float,
    as_int_ids,
    as_unit,
    as_weights,
    check_choice,
    check_lengths,
    check_positive_int,
)

__all__ = [
    "ReliabilityBins",
    "ace",
    "bootstrap_ci",
    "bootstrap_sd",
    "box_features",
    "brier",
    "calibration_summary",
    "dece",
    "ece",
    "laace",
    "laece",
    "mce",
    "nll",
    "nll_logits",
    "per_class",
    "reliability_bins",
    "sigmoid",
]

Strategy = Literal["uniform", "quantile"]
_STRATEGIES = ("uniform", "quantile")

# Values of ``iou`` up to this much above 1 are accepted (and clipped), as in det_calib.data.box_table.
_IOU_TOL = 1e-9


def sigmoid(z: ArrayLike, temperature: float = 1.0) -> np.ndarray:
    """``sigmoid(z / temperature)`` in float64, shape of ``z``; no overflow for any finite ``z``.

    The confidence a calibrated head reports: :func:`det_calib.numeric.sigmoid` of ``z / T``.
    """
    return _sigmoid(np.asarray(z, dtype=np.float64) / temperature)


# --------------------------------------------------------------------------------------------
# input validation


def _check_strategy(strategy: object) -> str:
    return str(check_choice(strategy, _STRATEGIES, "strategy"))


# --------------------------------------------------------------------------------------------
# binning cores (inputs already validated)


def _uniform_edges(n_bins: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n_bins + 1)


def _uniform_index(x: np.ndarray, n_bins: int) -> np.ndarray:
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
    idx = _uniform_index(conf, n_bins)
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


def _gap_sum(count: np.ndarray, s_conf: np.ndarray, s_tgt: np.ndarray) -> float:
    """``sum_m |B_m|/N * |mean target - mean conf|`` over non-empty bins (nan if N == 0)."""
    total = float(count.sum())
    if total <= 0.0:
        return float("nan")
    nonempty = count > 0
    return float(np.abs(s_tgt[nonempty] - s_conf[nonempty]).sum() / total)


# --------------------------------------------------------------------------------------------
# reliability bins, ECE, ACE, MCE


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
    strategy: Strategy

    def __post_init__(self) -> None:
        _check_strategy(self.strategy)
        for name in ("edges", "count", "conf", "acc"):
            arr = np.array(getattr(self, name))
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        m = self.count.shape
        if self.count.ndim != 1 or self.conf.shape != m or self.acc.shape != m or self.edges.shape != (m[0] + 1,):
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


def _reliability_core(conf, target, w, n_bins, strategy) -> ReliabilityBins:
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
    return ReliabilityBins(edges=edges, count=count, conf=mean_conf, acc=mean_acc, strategy=strategy)


def reliability_bins(
    conf: ArrayLike,
    correct: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: Strategy = "uniform",
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
    return _reliability_core(c, y, w, n_bins, strategy)


def ece(conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None) -> float:
    """Expected calibration error with equal-width bins.

    ``ECE = sum_m |B_m| / n * |acc(B_m) - conf(B_m)|`` over bins ``[m/M, (m+1)/M)``, the last
    closed at 1.0. Equals netcal's ``ECE(bins=n_bins, detection=True).measure(conf, correct)``
    up to netcal's clipping of conf to ``[eps, 1 - eps]``.

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1.
        n_bins: Number of equal-width bins M (15 in the temperature-scaling literature,
            10 in netcal).
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The ECE in [0, 1]; nan for no boxes.

    >>> round(ece([0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1], n_bins=2), 6)  # 2/4*|0.5-0.25| + 2/4*|1-0.85|
    0.2
    """
    return reliability_bins(conf, correct, n_bins=n_bins, strategy="uniform", weights=weights).ece()


def ace(conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None) -> float:
    """Adaptive calibration error: the ECE sum over equal-mass bins.

    ``ACE = sum_m |B_m| / n * |acc(B_m) - conf(B_m)|`` with the box of stable confidence rank r
    in bin ``floor(r * M / n)``. (netcal's ``ACE`` is the unweighted mean over non-empty bins;
    the two agree when n is a multiple of M.)

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1.
        n_bins: Number of equal-mass bins M.
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The ACE; nan for no boxes.

    >>> ace([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], n_bins=2)  # 1/2*|0-0.15| + 1/2*|1-0.35|
    0.4
    """
    return reliability_bins(conf, correct, n_bins=n_bins, strategy="quantile", weights=weights).ece()


def mce(conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None) -> float:
    """Maximum calibration error: the largest ``|acc - conf|`` over non-empty equal-width bins.

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1.
        n_bins: Number of equal-width bins M (same convention as :func:`ece`).
        weights: Optional (n,) non-negative per-box weights (a zero-weight box does not make its
            bin non-empty).

    Returns:
        The MCE; nan for no boxes.

    >>> mce([0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
    0.25
    """
    return reliability_bins(conf, correct, n_bins=n_bins, strategy="uniform", weights=weights).mce()


# --------------------------------------------------------------------------------------------
# proper scoring rules


def nll(prob: ArrayLike, correct: ArrayLike, *, eps: float = 1e-12, weights: ArrayLike | None = None) -> float:
    """Mean binary cross-entropy of probabilities against the matched flag.

    ``-mean(y log p + (1 - y) log(1 - p))`` with p clipped to ``[eps, 1 - eps]``. Prefer
    :func:`nll_logits` when logits are available: a float32 probability of 1.0 loses the
    information that the clipping here replaces with ``eps``.

    Args:
        prob: (n,) probabilities in [0, 1].
        correct: (n,) bool or 0/1.
        eps: Clipping constant in (0, 0.5).
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The mean NLL in nats; nan for no boxes.

    >>> round(nll([0.5, 0.5], [1, 0]), 6)  # log 2
    0.693147
    """
    if not (isinstance(eps, numbers.Real) and 0.0 < eps < 0.5):
        raise InputError(f"Expected argument `eps` to be a float in (0, 0.5), but got {eps!r}")
    p = as_unit(prob, "prob")
    y = as_binary(correct, "correct")
    n = check_lengths(prob=p, correct=y)
    w = as_weights(weights, n, "prob")
    p = np.clip(p, eps, 1.0 - eps)
    loss = np.where(y > 0.5, -np.log(p), -np.log1p(-p))
    return weighted_mean(loss, w)


def nll_logits(
    logits: ArrayLike,
    correct: ArrayLike,
    *,
    temperature: float = 1.0,
    weights: ArrayLike | None = None,
) -> float:
    """Mean binary cross-entropy of ``sigmoid(logits / temperature)``, computed from logits.

    Per box, with ``z = logit / T``: ``softplus(-z)`` if correct else ``softplus(z)``, where
    ``softplus(x) = logaddexp(0, x)``. There is no cancellation, so the loss is accurate to
    rounding for any finite z (``|z|`` up to 1e4 and beyond), including where ``sigmoid(z)``
    rounds to exactly 0.0 or 1.0 in float64.

    Args:
        logits: (n,) finite raw logits.
        correct: (n,) bool or 0/1.
        temperature: Positive finite T dividing the logits.
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The mean NLL in nats; nan for no boxes.

    >>> round(nll_logits([0.0, 0.0], [1, 0]), 6)
    0.693147
    >>> nll_logits([50.0], [1])  # log1p(exp(-50)); sigmoid(50) == 1.0 in float64
    1.9287498479639178e-22
    """
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not np.isfinite(temperature)
        or temperature <= 0
    ):
        raise InputError(
            f"Expected argument `temperature` to be a finite number larger than 0, but got {temperature!r}"
        )
    z = as_float(logits, "logits") / float(temperature)
    y = as_binary(correct, "correct")
    n = check_lengths(logits=z, correct=y)
    w = as_weights(weights, n, "logits")
    return binary_nll_logits(z, y, w)


def brier(prob: ArrayLike, correct: ArrayLike, *, weights: ArrayLike | None = None) -> float:
    """Brier score: mean squared difference between probability and matched flag.

    Args:
        prob: (n,) probabilities in [0, 1].
        correct: (n,) bool or 0/1.
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        ``mean((p - y) ** 2)``; nan for no boxes.

    >>> round(brier([0.9, 0.2], [1, 0]), 12)  # (0.01 + 0.04) / 2
    0.025
    """
    p = as_unit(prob, "prob")
    y = as_binary(correct, "correct")
    n = check_lengths(prob=p, correct=y)
    w = as_weights(weights, n, "prob")
    return weighted_mean((p - y) ** 2, w)


# --------------------------------------------------------------------------------------------
# detection-specific: D-ECE, LaECE, LaACE


def box_features(
    x1: ArrayLike,
    y1: ArrayLike,
    x2: ArrayLike,
    y2: ArrayLike,
    img_w: ArrayLike,
    img_h: ArrayLike,
) -> np.ndarray:
    """Normalised box features for :func:`dece`: centre x, centre y, width, height.

    Args:
        x1, y1, x2, y2: (n,) box corners in pixels; an inverted box (``x2 < x1``) gets width 0.
        img_w, img_h: Image size in pixels, a positive scalar or one per box (n,).

    Returns:
        (n, 4) float64 array ``[(x1+x2)/2/W, (y1+y2)/2/H, (x2-x1)/W, (y2-y1)/H]``, clipped to
        [0, 1] (boxes reaching past the image border; inverted boxes).

    >>> box_features([0], [10], [50], [30], 100, 40).tolist()
    [[0.25, 0.5, 0.5, 0.5]]
    """
    xs = {name: as_float(v, name) for name, v in (("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2))}
    n = check_lengths(**xs)
    size = {}
    for name, v in (("img_w", img_w), ("img_h", img_h)):
        arr = np.asarray(v, dtype=np.float64) if np.ndim(v) == 0 else as_float(v, name)
        if arr.ndim == 1:
            check_lengths(x1=xs["x1"], **{name: arr})
        if arr.size and not (np.isfinite(arr).all() and (arr > 0).all()):
            raise InputError(f"Expected argument `{name}` to be positive and finite, but got {float(arr.min()):g}")
        size[name] = arr
    W, H = size["img_w"], size["img_h"]
    feats = np.empty((n, 4))
    feats[:, 0] = (xs["x1"] + xs["x2"]) / 2.0 / W
    feats[:, 1] = (xs["y1"] + xs["y2"]) / 2.0 / H
    feats[:, 2] = (xs["x2"] - xs["x1"]) / W
    feats[:, 3] = (xs["y2"] - xs["y1"]) / H
    return np.clip(feats, 0.0, 1.0)


def _check_dece_bins(n_bins: object, n_features: int) -> list[int]:
    if isinstance(n_bins, numbers.Integral) and not isinstance(n_bins, bool):
        return [check_positive_int(n_bins)] * (n_features + 1)
    if isinstance(n_bins, (Sequence, np.ndarray)) and not isinstance(n_bins, str):
        bins = list(n_bins)
        if len(bins) != n_features + 1:
            raise InputError(
                f"Expected argument `n_bins` to be an integer or a sequence of {n_features + 1} integers "
                f"(confidence first, then one per feature column), but got {len(bins)}"
            )
        return [check_positive_int(b, "n_bins") for b in bins]
    raise InputError(
        f"Expected argument `n_bins` to be an integer larger than 0 or a sequence of them, but got {n_bins!r}"
    )


def dece(
    conf: ArrayLike,
    correct: ArrayLike,
    features: ArrayLike,
    *,
    n_bins: int | Sequence[int] = 10,
    weights: ArrayLike | None = None,
) -> float:
    """Detection ECE (Küppers et al., CVPR-W 2020): ECE over joint bins of (conf, features).

    Every column (confidence first, then each feature) is cut into equal-width bins over [0, 1]
    with the same convention as :func:`ece` (``[lo, hi)``, last bin closed at 1.0); a box's bin
    is the tuple of its per-column bins. ``D-ECE = sum_b N_b / N * |prec_b - conf_b|`` over
    non-empty joint bins. Same value as netcal
    ``ECE(bins=n_bins, detection=True).measure(np.column_stack([conf, features]), correct)``
    up to netcal's clipping of all columns to ``[eps, 1 - eps]`` (see the module docstring).

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1.
        features: (n, J) box features already normalised to [0, 1], e.g. from
            :func:`box_features`; J may be 0 (then D-ECE is the ECE).
        n_bins: One int for every column (default 10, netcal's default), or J + 1 ints,
            confidence first. The number of joint bins is their product: keep it well below n.
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The D-ECE; nan for no boxes.

    >>> conf = [0.2, 0.3, 0.8, 0.9]
    >>> feats = [[0.1], [0.9], [0.1], [0.9]]  # every box alone in its joint bin
    >>> round(dece(conf, [0, 1, 1, 1], feats, n_bins=2), 6)  # (0.2 + 0.7 + 0.2 + 0.1) / 4
    0.3
    """
    c = as_unit(conf, "conf")
    y = as_binary(correct, "correct")
    f = np.asarray(features)
    if f.ndim != 2:
        raise InputError(f"Expected argument `features` to have shape (n, J), but got shape {f.shape}")
    n = check_lengths(conf=c, correct=y, features=f)
    if f.size:
        f = np.stack([as_unit(f[:, j], f"features[:, {j}]") for j in range(f.shape[1])], axis=1)
    else:
        f = f.astype(np.float64).reshape(n, f.shape[1])
    bins = _check_dece_bins(n_bins, f.shape[1])
    w = as_weights(weights, n, "conf")
    if n == 0:
        return float("nan")
    if np.prod([float(b) for b in bins]) > 2.0**62:
        raise InputError(f"Expected argument `n_bins` to give fewer than 2**62 joint bins, but got {bins}")
    idx = [_uniform_index(c, bins[0])] + [_uniform_index(f[:, j], b) for j, b in enumerate(bins[1:])]
    flat = np.ravel_multi_index(tuple(idx), tuple(bins))
    _, cell = np.unique(flat, return_inverse=True)
    cell = cell.ravel()
    ww = np.ones(n) if w is None else w
    count = np.bincount(cell, weights=ww)
    s_conf = np.bincount(cell, weights=ww * c)
    s_tgt = np.bincount(cell, weights=ww * y)
    return _gap_sum(count, s_conf, s_tgt)


def _laece_prepare(c, t, k, n_bins) -> Callable[[np.ndarray], float]:
    """``w -> LaECE of the boxes with (n,) weights w``: the class ids and bins, which do not depend
    on the weights, are found once (a bootstrap replicate then only sums)."""
    if c.size == 0:
        return lambda ww: float("nan")
    _, cls_idx = np.unique(k, return_inverse=True)
    n_cls = int(cls_idx.max()) + 1
    key = cls_idx.ravel() * n_bins + _uniform_index(c, n_bins)
    size = n_cls * n_bins

    def weighted(ww: np.ndarray) -> float:
        count = np.bincount(key, weights=ww, minlength=size).reshape(n_cls, n_bins)
        s_conf = np.bincount(key, weights=ww * c, minlength=size).reshape(n_cls, n_bins)
        s_tgt = np.bincount(key, weights=ww * t, minlength=size).reshape(n_cls, n_bins)
        n_c = count.sum(axis=1)
        present = n_c > 0  # a class whose boxes all weigh 0 (none drawn) is not averaged in
        if not present.any():
            return float("nan")
        per_cls = np.abs(s_tgt - s_conf).sum(axis=1)[present] / n_c[present]
        return float(per_cls.mean())

    return weighted


def _laece_core(c, t, k, w, n_bins) -> float:
    return _laece_prepare(c, t, k, n_bins)(np.ones(c.size) if w is None else w)


def _check_loc(conf, target_iou, cls, weights):
    c = as_unit(conf, "conf")
    t = as_unit(target_iou, "target_iou", tol=_IOU_TOL)
    k = as_int_ids(cls, "cls")
    n = check_lengths(conf=c, target_iou=t, cls=k)
    w = as_weights(weights, n, "conf")
    return c, t, k, w


def laece(
    conf: ArrayLike,
    target_iou: ArrayLike,
    cls: ArrayLike,
    *,
    n_bins: int = 25,
    weights: ArrayLike | None = None,
) -> float:
    """Localisation-aware ECE (Oksuz et al., CVPR 2023), averaged over classes.

    Per class c with N_c boxes, over equal-width confidence bins (same convention as
    :func:`ece`): ``LaECE_c = sum_m |B_m| / N_c * |mean conf(B_m) - mean target(B_m)|``;
    the result is the mean of LaECE_c over the classes that have boxes.

    Args:
        conf: (n,) confidences in [0, 1].
        target_iou: (n,) IoU with the matched ground truth for matched boxes and **0 for
            unmatched ones** (zero it yourself: the box table's ``iou`` column holds the best IoU
            even for unmatched boxes). Values up to 1 + 1e-9 are clipped to 1.
        cls: (n,) integer predicted class ids.
        n_bins: Number of equal-width bins M (25 in the papers).
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The class-averaged LaECE; nan for no boxes.

    >>> laece([0.9, 0.9, 0.3], [0.8, 0.0, 0.6], [0, 0, 1], n_bins=10)  # (|0.9-0.4| + |0.3-0.6|)/2
    0.4
    """
    n_bins = check_positive_int(n_bins)
    c, t, k, w = _check_loc(conf, target_iou, cls, weights)
    return _laece_core(c, t, k, w, n_bins)


def laace(
    conf: ArrayLike,
    target_iou: ArrayLike,
    cls: ArrayLike,
    *,
    weights: ArrayLike | None = None,
) -> float:
    """Localisation-aware ACE: per class the mean ``|target_i - conf_i|``, averaged over classes.

    Args:
        conf: (n,) confidences in [0, 1].
        target_iou: (n,) matched IoU, 0 for unmatched boxes (see :func:`laece`).
        cls: (n,) integer predicted class ids.
        weights: Optional (n,) non-negative per-box weights.

    Returns:
        The class-averaged LaACE; nan for no boxes.

    >>> laace([0.9, 0.9, 0.3], [0.8, 0.0, 0.6], [0, 0, 1])  # ((0.1 + 0.9)/2 + 0.3) / 2
    0.4
    """
    c, t, k, w = _check_loc(conf, target_iou, cls, weights)
    if c.size == 0:
        return float("nan")
    _, cls_idx = np.unique(k, return_inverse=True)
    ww = np.ones(c.size) if w is None else w
    n_c = np.bincount(cls_idx, weights=ww)
    s = np.bincount(cls_idx, weights=ww * np.abs(t - c))
    present = n_c > 0
    if not present.any():
        return float("nan")
    return float(np.mean(s[present] / n_c[present]))


# --------------------------------------------------------------------------------------------
# per class, bootstrap, summary


def per_class(
    metric: Callable[..., float],
    conf: ArrayLike,
    correct: ArrayLike,
    cls: ArrayLike,
    **kwargs: object,
) -> dict[int, float]:
    """Apply ``metric(conf[m], correct[m], **kwargs)`` to the boxes of each class present.

    Args:
        metric: A metric with signature ``metric(conf, correct, **kwargs)``, e.g. :func:`ece`.
        conf: (n,) confidences (or logits, for :func:`nll_logits`).
        correct: (n,) bool or 0/1.
        cls: (n,) integer class ids.
        **kwargs: Passed to ``metric``; a ``weights`` array of length n is split per class too.

    Returns:
        ``{class_id: value}`` in increasing class id, for each class with at least one box.

    >>> res = per_class(ece, [0.9, 0.8, 0.6], [1, 1, 0], [3, 3, 7], n_bins=10)
    >>> {k: round(v, 6) for k, v in res.items()}  # class 3: (0.1 + 0.2) / 2
    {3: 0.15, 7: 0.6}
    """
    c = np.asarray(conf)
    y = np.asarray(correct)
    k = as_int_ids(cls, "cls")
    check_lengths(conf=c, correct=y, cls=k)
    w = kwargs.pop("weights", None)
    if w is not None:
        w = as_weights(w, len(c), "conf")
    out: dict[int, float] = {}
    for cid in np.unique(k):
        m = k == cid
        if w is not None:
            kwargs["weights"] = w[m]
        out[int(cid)] = float(metric(c[m], y[m], **kwargs))
    return out


# --------------------------------------------------------------------------------------------
# bootstrap replicates: validate once outside the loop, hoist what does not depend on the draws

#: A batch statistic: ``(r, n_img)`` int64 draw counts of ``r`` replicates (row ``b``: how often
#: each image is drawn in replicate ``b``) -> ``(r,)`` float64 values of the statistic.
_Batch = Callable[[np.ndarray], np.ndarray]

# drawn image indices held in memory at once (8 MiB of int64)
_DRAW_CHUNK = 1 << 20


def _multiplicities(rng: np.random.Generator, n_img: int, n_boot: int):
    """Yield the draw counts of ``n_boot`` replicates as ``(r, n_img)`` int64 blocks, in order.

    Row ``b`` counts ``rng.integers(0, n_img, size=n_img)`` of replicate ``b``. One call for a
    block of ``r`` replicates, ``rng.integers(0, n_img, size=(r, n_img))``, gives exactly the
    draws of ``r`` successive calls of size ``n_img``: for the default int64 dtype every value
    is one Lemire draw from the bit generator's own ``next_uint32`` (ranges below 2**32) or
    ``next_uint64`` stream, with no buffer local to the call (only the uint8/uint16/bool
    dtypes buffer within a call); ``tests/metrics/test_calibration.py`` pins this.
    """
    rows = max(1, _DRAW_CHUNK // n_img)
    for start in range(0, n_boot, rows):
        r = min(rows, n_boot - start)
        draws = rng.integers(0, n_img, size=(r, n_img))
        draws += (np.arange(r) * n_img)[:, None]
        yield np.bincount(draws.ravel(), minlength=r * n_img).reshape(r, n_img)


def _per_replicate(weighted: Callable[[np.ndarray], float], img: np.ndarray) -> _Batch:
    """Batch of ``weighted(w)`` with ``w`` (n,) float64 the draw count of each box's image."""

    def batch(mult: np.ndarray) -> np.ndarray:
        return np.array([weighted(m[img]) for m in mult.astype(np.float64)], dtype=np.float64)

    return batch


def _ece_tables(img: np.ndarray, n_img: int, c: np.ndarray, y: np.ndarray, n_bins: int) -> _Batch:
    """Batch ECE (equal-width bins) from per-image tables: no per-box work per replicate.

    ECE is a function of the per-bin count and sums of conf and target, and a replicate's sums
    are its image draw counts times each image's per-bin sums: one ``(n_img, M)`` table each,
    then one matrix product per table for a block of replicates. The numbers equal those of
    :func:`ece` with the draw counts as weights up to float summation order.
    """
    cell = img * n_bins + _uniform_index(c, n_bins)
    per = [np.bincount(cell, weights=v, minlength=n_img * n_bins).reshape(n_img, n_bins)
           for v in (np.ones_like(c), c, y)]

    table = np.concatenate(per, axis=1)  # one product for the three tables

    def batch(mult: np.ndarray) -> np.ndarray:
        sums = mult.astype(np.float64) @ table
        count, s_conf, s_tgt = sums[:, :n_bins], sums[:, n_bins:2 * n_bins], sums[:, 2 * n_bins:]
        total = count.sum(axis=1)
        empty = count <= 0
        with np.errstate(invalid="ignore", divide="ignore"):
            term = count / total[:, None] * np.abs(s_tgt / count - s_conf / count)
        term[empty] = 0.0
        out = term.sum(axis=1)
        out[total <= 0] = np.nan
        return out

    return batch


def _check_binned(conf, correct, *, n_bins=15):
    n_bins = check_positive_int(n_bins)
    c = as_unit(conf, "conf")
    y = as_binary(correct, "correct")
    check_lengths(conf=c, correct=y)
    return (c, y), {"n_bins": n_bins}


def _check_brier(prob, correct):
    p = as_unit(prob, "prob")
    y = as_binary(correct, "correct")
    check_lengths(prob=p, correct=y)
    return (p, y), {}


def _prepare_ece(img, n_img, conf, correct, *, n_bins=15) -> _Batch:
    (c, y), options = _check_binned(conf, correct, n_bins=n_bins)
    return _ece_tables(img, n_img, c, y, options["n_bins"])


def _prepare_laece(img, n_img, conf, target_iou, cls, *, n_bins=25) -> _Batch:
    n_bins = check_positive_int(n_bins)
    c, t, k, _ = _check_loc(conf, target_iou, cls, None)
    from det_calib.metrics.bootstrap_tables import laece_tables  # pooled (image, cell) sums: no per-box work

    return laece_tables(img, n_img, c, t, k, _uniform_index(c, n_bins), n_bins)


def _weighted_core(check: Callable, core: Callable) -> Callable[..., _Batch]:
    """``prepare`` of a metric from ``check(*arrays, **options) -> (arrays, options)`` (validates
    as the metric does) and ``core(*arrays, weights=w, **options)`` (the same number, unchecked)."""

    def prepare(img, n_img, *arrays, **options) -> _Batch:
        args, options = check(*arrays, **options)
        return _per_replicate(lambda w: core(*args, weights=w, **options), img)

    return prepare


#: ``public metric -> prepare``: ``prepare(img, n_img, *arrays, **options)`` validates the arrays
#: as the metric does (raising what it raises) and returns a :data:`_Batch` giving, for each
#: replicate, ``metric(*arrays, weights=draw counts, **options)``: bit-identical, or for ECE equal
#: up to float summation order. A statistic from another module joins by carrying the same
#: function as its ``_bootstrap_prepare`` attribute (:func:`det_calib.metrics.operating_point.kept_ece`).
_UNCHECKED: dict[Callable, Callable[..., _Batch]] = {
    ece: _prepare_ece,
    ace: _weighted_core(_check_binned, lambda c, y, *, n_bins, weights:
                        _reliability_core(c, y, weights, n_bins, "quantile").ece()),
    mce: _weighted_core(_check_binned, lambda c, y, *, n_bins, weights:
                        _reliability_core(c, y, weights, n_bins, "uniform").mce()),
    brier: _weighted_core(_check_brier, lambda p, y, *, weights: weighted_mean((p - y) ** 2, weights)),
    laece: _prepare_laece,
}


def _batch_statistic(statistic: Callable, img: np.ndarray, n_img: int, arrays: list[np.ndarray]) -> _Batch | None:
    """The :data:`_Batch` of ``statistic`` on ``arrays``, for a metric of :data:`_UNCHECKED` or a
    statistic with a ``_bootstrap_prepare`` attribute (also as a ``functools.partial`` with keyword
    options only, ``weights`` not among them); None for any other statistic. Raises what the
    statistic would raise for invalid arrays."""
    fn, options = statistic, {}
    if isinstance(statistic, functools.partial):
        if statistic.args:
            return None
        fn, options = statistic.func, dict(statistic.keywords)
    if "weights" in options:
        return None
    try:
        prepare = _UNCHECKED.get(fn)
    except TypeError:  # an unhashable callable
        prepare = None
    if prepare is None:
        prepare = getattr(fn, "_bootstrap_prepare", None)
    if prepare is None:
        return None
    return prepare(img, n_img, *arrays, **options)


def _accepts_weights(fn: Callable) -> bool:
    try:
        param = inspect.signature(fn).parameters.get("weights")
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)


def _replicates(statistic: Callable, img: np.ndarray, n_img: int, arrays: list[np.ndarray], n_boot: int,
                seed: int) -> np.ndarray:
    """(n_boot,) values of ``statistic`` on the replicates of seed ``seed`` (``img``: (n,) image
    index of each box in ``range(n_img)``). Every path gives the numbers of the indexed one,
    ``statistic(*[a[idx] for a in arrays])``, from the same draws."""
    from det_calib.metrics.bootstrap_tables import seeded_multiplicities

    batch = None
    if isinstance(statistic, functools.partial) and "weights" in statistic.keywords:
        # weights bound by the caller: a replicate weighs each box by them times its draw count
        bound = np.asarray(statistic.keywords["weights"], dtype=np.float64)
        if bound.shape != img.shape:
            raise InputError(f"Expected the statistic's bound `weights` to have shape {img.shape} (one per box), "
                             f"but got {bound.shape}")
        rest = {k: v for k, v in statistic.keywords.items() if k != "weights"}
        inner = functools.partial(statistic.func, *statistic.args, *arrays, **rest)
        batch = _per_replicate(lambda w: inner(weights=bound * w), img)
    elif _accepts_weights(statistic):
        batch = _batch_statistic(statistic, img, n_img, arrays)
        if batch is None:
            inner = functools.partial(statistic, *arrays)
            batch = _per_replicate(lambda w: inner(weights=w), img)
    if batch is not None:
        blocks = seeded_multiplicities(seed, n_img, n_boot, _multiplicities, _DRAW_CHUNK)
        return np.concatenate([batch(mult) for mult in blocks])
    stats = np.empty(n_boot)
    order = np.argsort(img, kind="stable")
    per_img = np.bincount(img, minlength=n_img)
    start = np.concatenate([[0], np.cumsum(per_img)[:-1]])
    b = 0
    for block in seeded_multiplicities(seed, n_img, n_boot, _multiplicities, _DRAW_CHUNK):
        for mult in block:
            drawn = np.repeat(np.arange(n_img), mult)  # image k appears mult[k] times, in order
            lens = per_img[drawn]
            offs = np.repeat(start[drawn] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
            idx = order[offs + np.arange(lens.sum())]
            stats[b] = statistic(*[a[idx] for a in arrays])
            b += 1
    return stats


def bootstrap_sd(statistic: Callable[..., float], image_ids: ArrayLike, *arrays: ArrayLike, n_boot: int = 1000,
                 seed: int = 0) -> float:
    """Standard deviation of a statistic over the image bootstrap of :func:`bootstrap_ci` (the same
    replicates for the same seed; replicates that give nan are dropped): its standard error.

    >>> img = np.repeat(np.arange(40), 5)
    >>> x = np.arange(200) % 2.0
    >>> bootstrap_sd(lambda v, weights=None: float(np.average(v, weights=weights)), img, x, n_boot=200) > 0
    True
    """
    n_boot = check_positive_int(n_boot, "n_boot")
    ids = as_1d(image_ids, "image_ids")
    arrs = [np.asarray(a) for a in arrays]
    if len(ids) == 0 or any(len(a) != len(ids) for a in arrs):
        raise InputError(f"Expected `image_ids` and every array to have the same non-zero length, but got "
                         f"{len(ids)} and {[len(a) for a in arrs]}")
    _, img = np.unique(ids, return_inverse=True)
    img = img.ravel()
    stats = _replicates(statistic, img, int(img.max()) + 1, arrs, n_boot, seed)
    good = stats[np.isfinite(stats)]
    return float(good.std(ddof=1)) if good.size > 1 else float("nan")


def bootstrap_ci(
    statistic: Callable[..., float],
    image_ids: ArrayLike,
    *arrays: ArrayLike,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    method: Literal["bc-normal", "bc", "basic", "percentile", "normal"] = "bc-normal",
) -> tuple[float, float]:
    """Bootstrap interval of a statistic, resampling images (not boxes); bias-corrected by default,
    and always containing the estimate by default.

    Each replicate draws as many images as there are, uniformly with replacement; every box of
    a drawn image comes along, once per draw. If ``statistic`` has a ``weights`` parameter (all
    metrics here do), the replicate is computed as ``statistic(*arrays, weights=w)`` with ``w``
    the per-box draw count of its image (no copying; weights bound in a ``functools.partial`` are
    multiplied by the draw counts); for :func:`ece`, :func:`ace`, :func:`mce`,
    :func:`brier`, :func:`laece`, :func:`det_calib.metrics.operating_point.kept_ece` and
    :meth:`det_calib.metrics.operating_point.LaECE0Targets.statistic` (also as a ``functools.partial`` with
    keyword options) the arrays are validated once, before the replicates, what does not depend
    on the draws (class ids, bins, kept boxes) is computed once, and ECE's replicates are matrix
    products of per-image bin sums; otherwise the arrays are indexed
    (``statistic(*[a[idx] for a in arrays])``). All give the same numbers for the same seed (up
    to float summation order).

    Args:
        statistic: Function of the arrays returning a float, e.g. :func:`ece` or
            ``functools.partial(ece, n_bins=10)``.
        image_ids: (n,) image id of each box (any hashable numpy dtype).
        *arrays: Arrays with n rows (first axis), passed positionally to ``statistic``.
        n_boot: Number of bootstrap replicates.
        seed: Seed for ``np.random.default_rng``; same seed, same interval.
        level: Coverage in (0, 1); the percentile interval is the ``(1 - level)/2`` and
            ``(1 + level)/2`` percentiles of the replicates (2.5 and 97.5 for 0.95).
        method: ``"bc"`` (default): the bias-corrected percentile interval (Efron 1981): with
            ``z0 = Phi^-1(share of replicates below the estimate, ties counted half)``, the
            ``Phi(2 z0 -+ z_level)`` percentiles. A binned calibration error is biased upward,
            so plain percentiles sit above the estimate; BC moves them back and stays within the
            replicates' range (never below 0). ``"basic"``: ``(2 theta - q_hi, 2 theta - q_lo)``.
            ``"percentile"``: ``(q_lo, q_hi)``. All three contain the estimate exactly when the
            estimate lies between the ``(1 -+ level)/2`` quantiles of the replicates; when
            sampling bias exceeds the spread (the estimate below 97.5% of the replicates), no
            percentile-type interval contains it, and BC reports the lowest replicates.
            ``"normal"``: ``theta -+ z_level * sd(replicates)``: always contains the estimate
            (it ignores the bias), for statistics whose resampling bias exceeds their spread.
            ``"bc-normal"`` (default): the BC interval where it contains the estimate, else the
            normal one with its low end raised to the lowest replicate or the estimate,
            whichever is lower (a binned error is never below 0): an interval printed next to
            its estimate always contains it.

    Returns:
        ``(low, high)``. Replicates where the statistic is nan are dropped (with a warning).

    >>> rng = np.random.default_rng(0)
    >>> img = np.repeat(np.arange(50), 20)  # 50 images of 20 boxes
    >>> conf = rng.uniform(size=1000)
    >>> correct = rng.uniform(size=1000) < conf
    >>> lo, hi = bootstrap_ci(brier, img, conf, correct, n_boot=200, seed=1)
    >>> bool(lo < brier(conf, correct) < hi)
    True
    """
    n_boot = check_positive_int(n_boot, "n_boot")
    if not (isinstance(level, numbers.Real) and 0.0 < level < 1.0):
        raise InputError(f"Expected argument `level` to be a number in (0, 1), but got {level!r}")
    ids = as_1d(image_ids, "image_ids")
    arrs = [np.asarray(a) for a in arrays]
    if not arrs:
        raise InputError("Expected at least one array after `image_ids`, but got none")
    for i, a in enumerate(arrs):
        if a.ndim == 0 or len(a) != len(ids):
            got = "a scalar" if a.ndim == 0 else str(len(a))
            raise InputError(
                f"Expected arguments `image_ids` and `arrays[{i}]` to have the same length, "
                f"but got {len(ids)} and {got}"
            )
    if len(ids) == 0:
        return float("nan"), float("nan")
    _, img = np.unique(ids, return_inverse=True)
    img = img.ravel()
    stats = _replicates(statistic, img, int(img.max()) + 1, arrs, n_boot, seed)
    bad = np.isnan(stats)
    if bad.all():
        return float("nan"), float("nan")
    if bad.any():
        warnings.warn(f"bootstrap_ci: {int(bad.sum())} of {n_boot} replicates gave nan and were dropped", stacklevel=2)
    if method not in ("bc-normal", "bc", "basic", "percentile", "normal"):
        raise InputError(
            f"Expected argument `method` to be 'bc-normal', 'bc', 'basic', 'percentile' or 'normal', but got {method!r}"
        )
    alpha = (1.0 - level) / 2.0
    good = stats[~bad]
    if method == "percentile":
        lo, hi = np.percentile(good, [100.0 * alpha, 100.0 * (1.0 - alpha)])
        return float(lo), float(hi)
    theta = float(statistic(*arrs))
    if method == "bc-normal":
        lo, hi = _bc_interval(good, theta, alpha)
        if lo <= theta <= hi or math.isnan(theta):
            return lo, hi
        lo, hi = _normal_interval(good, theta, alpha)
        return max(lo, min(float(good.min()), theta)), hi
    if method == "normal":
        return _normal_interval(good, theta, alpha)
    if method == "basic":
        q_lo, q_hi = np.percentile(good, [100.0 * alpha, 100.0 * (1.0 - alpha)])
        return float(2 * theta - q_hi), float(2 * theta - q_lo)
    return _bc_interval(good, theta, alpha)


def _normal_interval(good: np.ndarray, theta: float, alpha: float) -> tuple[float, float]:
    half = statistics.NormalDist().inv_cdf(1.0 - alpha) * float(np.std(good, ddof=1)) if good.size > 1 else 0.0
    return theta - half, theta + half


def _bc_interval(good: np.ndarray, theta: float, alpha: float) -> tuple[float, float]:
    """The bias-corrected percentile interval of replicates ``good`` around the estimate ``theta``."""
    nd = statistics.NormalDist()
    # ties with the estimate within float summation error (a replicate that redraws every image
    # once is the estimate, summed in another order) count half, as exact ties
    tie = np.isclose(good, theta, rtol=1e-12, atol=1e-15)
    share = (np.count_nonzero((good < theta) & ~tie) + 0.5 * np.count_nonzero(tie)) / good.size
    share = min(max(share, 0.5 / good.size), 1.0 - 0.5 / good.size)
    z0, za = nd.inv_cdf(share), nd.inv_cdf(1.0 - alpha)
    lo, hi = np.percentile(good, [100.0 * nd.cdf(2 * z0 - za), 100.0 * nd.cdf(2 * z0 + za)])
    return float(lo), float(hi)


def calibration_summary(conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15) -> dict:
    """ECE, ACE, MCE, NLL and Brier of one set of boxes, with the counts and bin count used.

    Args:
        conf: (n,) confidences in [0, 1].
        correct: (n,) bool or 0/1.
        n_bins: Bin count for ECE (equal width), ACE (equal mass) and MCE.

    Returns:
        ``{"ece", "ace", "mce", "nll", "brier": float, "n", "n_correct", "n_bins": int}``; the
        floats are nan when there are no boxes.

    >>> s = calibration_summary([0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
    >>> round(s["ece"], 6), s["n"], s["n_correct"], s["n_bins"]
    (0.2, 4, 3, 2)
    """
    n_bins = check_positive_int(n_bins)
    c = as_unit(conf, "conf")
    y = as_binary(correct, "correct")
    n = check_lengths(conf=c, correct=y)
    uniform = _reliability_core(c, y, None, n_bins, "uniform")
    return {
        "ece": uniform.ece(),
        "ace": _reliability_core(c, y, None, n_bins, "quantile").ece(),
        "mce": uniform.mce(),
        "nll": nll(c, y),
        "brier": brier(c, y),
        "n": int(n),
        "n_correct": int(y.sum()),
        "n_bins": n_bins,
    }

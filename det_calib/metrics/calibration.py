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

import numbers
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.metrics.binning import (
    reliability_bins,
    reliability_core,
    uniform_index,
)
from det_calib.metrics.bootstrap import (
    Batch,
    bootstrap_ci,
    bootstrap_sd,
    ece_of_sums,
    weighted_core,
)
from det_calib.metrics.detection_metrics import laece, prepare_laece
from det_calib.metrics.metric_inputs import (
    as_binary,
    as_float,
    as_int_ids,
    as_unit,
    as_weights,
    check_lengths,
    check_positive_int,
)
from det_calib.numeric import binary_nll_logits, weighted_mean

__all__ = [
    "ace",
    "bootstrap_ci",
    "bootstrap_sd",
    "brier",
    "calibration_summary",
    "ece",
    "laece",
    "mce",
    "nll",
    "nll_logits",
    "per_class",
    "reliability_bins",
]


# Values of ``iou`` up to this much above 1 are accepted (and clipped), as in det_calib.data.box_table.


# --------------------------------------------------------------------------------------------
# input validation


# --------------------------------------------------------------------------------------------
# binning cores (inputs already validated)


# --------------------------------------------------------------------------------------------
# reliability bins, ECE, ACE, MCE


def ece(
    conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None
) -> float:
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


def ace(
    conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None
) -> float:
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
    return reliability_bins(
        conf, correct, n_bins=n_bins, strategy="quantile", weights=weights
    ).ece()


def mce(
    conf: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, weights: ArrayLike | None = None
) -> float:
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


def nll(
    prob: ArrayLike, correct: ArrayLike, *, eps: float = 1e-12, weights: ArrayLike | None = None
) -> float:
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
            "Expected argument `temperature` to be a finite number larger than 0, but got "
            f"{temperature!r}"
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


def _ece_tables(img: np.ndarray, n_img: int, c: np.ndarray, y: np.ndarray, n_bins: int) -> Batch:
    """Batch ECE (equal-width bins) from per-image tables: no per-box work per replicate.

    A bin's term of the ECE, ``count / total * |s_tgt / count - s_conf / count|``, is
    ``|s_tgt - s_conf| / total``, so ECE is a function of the per-bin sums of ``target - conf`` and
    the box count, and a replicate's sums are its image draw counts times each image's sums: one
    ``(n_img, n_bins + 1)`` table, one matrix product for a block of replicates (16 columns at 15
    bins, where the three per-bin tables took 45: on a COCO-shaped split the products cost about
    half). The numbers equal those of :func:`ece` with the draw counts as weights up to float
    summation order (``tests/metrics/test_calibration.py``: to 1e-12).
    """
    cell = img * n_bins + uniform_index(c, n_bins)
    table = np.empty((n_img, n_bins + 1))
    table[:, :n_bins] = np.bincount(
        cell, weights=np.asarray(y, dtype=np.float64) - c, minlength=n_img * n_bins
    ).reshape(n_img, n_bins)
    table[:, n_bins] = np.bincount(img, minlength=n_img)

    def batch(mult: np.ndarray) -> np.ndarray:
        return ece_of_sums(np.asarray(mult, dtype=np.float64) @ table, n_bins)

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


def prepare_ece(img, n_img, conf, correct, *, n_bins=15) -> Batch:
    (c, y), options = _check_binned(conf, correct, n_bins=n_bins)
    return _ece_tables(img, n_img, c, y, options["n_bins"])


# The metrics' bootstrap fast paths (:mod:`det_calib.metrics.bootstrap`): ``prepare(img, n_img, *arrays,
# **options)`` validates the arrays as the metric does (raising what it raises) and returns a
# :data:`~det_calib.metrics.bootstrap.Batch` giving, for each replicate, ``metric(*arrays, weights=draw
# counts, **options)``: bit-identical, or for ECE equal up to float summation order.
ece._bootstrap_prepare = prepare_ece  # type: ignore[attr-defined]
ace._bootstrap_prepare = weighted_core(
    _check_binned,
    lambda c, y, *, n_bins, weights: (  # type: ignore[attr-defined]
        reliability_core(c, y, weights, n_bins, "quantile").ece()
    ),
)
mce._bootstrap_prepare = weighted_core(
    _check_binned,
    lambda c, y, *, n_bins, weights: (  # type: ignore[attr-defined]
        reliability_core(c, y, weights, n_bins, "uniform").mce()
    ),
)
brier._bootstrap_prepare = weighted_core(  # type: ignore[attr-defined]
    _check_brier, lambda p, y, *, weights: weighted_mean((p - y) ** 2, weights)
)
laece._bootstrap_prepare = prepare_laece  # type: ignore[attr-defined]


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
    uniform = reliability_core(c, y, None, n_bins, "uniform")
    return {
        "ece": uniform.ece(),
        "ace": reliability_core(c, y, None, n_bins, "quantile").ece(),
        "mce": uniform.mce(),
        "nll": nll(c, y),
        "brier": brier(c, y),
        "n": int(n),
        "n_correct": int(y.sum()),
        "n_bins": n_bins,
    }

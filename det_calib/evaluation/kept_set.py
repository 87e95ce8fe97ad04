"""How the set of boxes kept at a conf threshold changes when scores are calibrated.

A box is kept at threshold ``t`` when ``conf > t`` (strictly, as Ultralytics' NMS filter does).
Because the capture floor is far below ``t`` and NMS is greedy by score, the boxes above ``t`` in
a low-floor capture are exactly the boxes Ultralytics returns at ``conf=t``; because matching is
greedy by descending score, their correct/incorrect labels are the same too.

For a shared temperature the calibrated score is monotone in the raw one, so the change happens at
one end of the ranking: with T > 1 scores move towards 0.5, so at a threshold below 0.5 boxes are
only added (and at one above 0.5 only removed); with T < 1 the reverse. The raw threshold ``t`` is
equivalent to the calibrated threshold ``sigmoid(logit(t) / T)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from det_calib.calibrators.temperature import equivalent_threshold
from det_calib.data.box_view import kept_mask
from det_calib.errors import InputError
from det_calib.record.threshold_shift import ThresholdShift


def threshold_shift(
    conf_before: np.ndarray,
    conf_after: np.ndarray,
    correct: np.ndarray,
    *,
    conf: float,
    n_gt: int,
    temperature: float | None = None,
    equivalent_conf: float | None = None,
) -> ThresholdShift:
    """Compare the boxes kept at ``conf`` before and after calibration.

    Args:
        conf_before: (n,) raw confidences.
        conf_after: (n,) calibrated confidences of the same boxes.
        correct: (n,) matched flags.
        conf: Threshold.
        n_gt: Number of ground-truth boxes for recall.
        temperature: The shared temperature, to report the equivalent threshold.
        equivalent_conf: The equivalent threshold of any other map, computed by the caller
            (:func:`det_calib.pipeline.fitting.equivalent_conf`); not with ``temperature``.

    Returns:
        A :class:`ThresholdShift`.

    Examples:
        >>> s = threshold_shift(np.array([0.3, 0.2]), np.array([0.2, 0.1]), np.array([True, False]), conf=0.25, n_gt=2)
        >>> s.kept_before, s.kept_after, s.removed, s.removed_correct
        (1, 0, 1, 1)
    """
    a, b, y = _shift_inputs(conf_before, conf_after, correct, conf=conf)
    equivalent_conf = _equivalent_conf(conf, temperature, equivalent_conf)
    kb, ka = kept_mask(a, conf), kept_mask(b, conf)
    added, removed = ka & ~kb, kb & ~ka
    tp_b, tp_a = int((kb & y).sum()), int((ka & y).sum())
    return ThresholdShift(
        conf=float(conf),
        equivalent_conf=None if equivalent_conf is None else float(equivalent_conf),
        n_gt=int(n_gt),
        kept_before=int(kb.sum()),
        kept_after=int(ka.sum()),
        added=int(added.sum()),
        added_correct=int((added & y).sum()),
        removed=int(removed.sum()),
        removed_correct=int((removed & y).sum()),
        precision_before=_ratio(tp_b, int(kb.sum())),
        precision_after=_ratio(tp_a, int(ka.sum())),
        recall_before=_ratio(tp_b, int(n_gt)),
        recall_after=_ratio(tp_a, int(n_gt)),
    )


def _shift_inputs(
    conf_before, conf_after, correct, *, conf: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`threshold_shift`'s arrays as float64, float64 and bool, checked for one shape ``(n,)``."""
    a = np.asarray(conf_before, dtype=np.float64)
    b = np.asarray(conf_after, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    if not (a.shape == b.shape == y.shape) or a.ndim != 1:
        raise InputError(
            f"Expected `conf_before`, `conf_after` and `correct` of one shape (n,), got {a.shape}, "
            f"{b.shape}, {y.shape}"
        )
    if not 0 <= conf <= 1:
        raise InputError(f"Expected argument `conf` in [0, 1], but got {conf}")
    return a, b, y


def _equivalent_conf(
    conf: float, temperature: float | None, equivalent_conf: float | None
) -> float | None:
    """The equivalent threshold given, or a shared temperature's, or None."""
    if temperature is not None and equivalent_conf is not None:
        raise InputError("give `temperature` or `equivalent_conf`, not both")
    if equivalent_conf is None and temperature and 0 < conf < 1:
        equivalent_conf = equivalent_threshold(conf, temperature)
    return equivalent_conf


def _ratio(x: int, n: int) -> float:
    return x / n if n else float("nan")


class PRCurve(NamedTuple):
    """Precision and recall of the kept set ``conf > t`` over a grid of thresholds t.

    Attributes:
        thresholds: (k,) thresholds t.
        precision: (k,) precision of the kept set (nan where nothing is kept).
        recall: (k,) recall of the kept set (nan when there is no ground truth).
        kept: (k,) number of kept boxes.
    """

    thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    kept: np.ndarray


def precision_recall_vs_conf(
    conf: np.ndarray, correct: np.ndarray, *, n_gt: int, grid: np.ndarray | None = None
) -> PRCurve:
    """Precision and recall of the set ``conf > t`` for each t of ``grid`` (default 0..1, 201 points).

    Returns:
        A :class:`PRCurve` (a named tuple: ``grid, precision, recall, kept = ...`` works).
    """
    c = np.asarray(conf, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    grid = np.linspace(0, 1, 201) if grid is None else np.asarray(grid, dtype=np.float64)
    # a box of conf c is kept at the thresholds t < c: the first j of the sorted grid, j the number
    # of grid points below c; the kept set at grid point i is then the boxes whose j exceeds i (a
    # count over the grid's intervals, no sort of the boxes)
    order = np.argsort(grid, kind="stable")
    j = np.searchsorted(grid[order], c, side="left")
    n_at = np.bincount(j, minlength=len(grid) + 1)
    tp_at = np.bincount(j[y], minlength=len(grid) + 1)
    # the boxes with j > i, i over the sorted grid
    kept_sorted = (n_at[::-1].cumsum()[::-1] - n_at)[:-1]
    tp_sorted = (tp_at[::-1].cumsum()[::-1] - tp_at)[:-1]
    kept, tp = np.empty_like(kept_sorted), np.empty_like(tp_sorted)
    kept[order], tp[order] = kept_sorted, tp_sorted
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(kept > 0, tp / np.maximum(kept, 1), np.nan)
        recall = tp / n_gt if n_gt else np.full(len(grid), np.nan)
    return PRCurve(grid, precision, recall, kept)

"""The threshold criteria other than the certified precision: max-F1 and LRP-optimal, on the
counts of :mod:`det_calib.thresholds.grid_counts`; the criteria's names and the options' checks.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from det_calib.errors import InputError
from det_calib.thresholds.grid_counts import ClassCounts, figures_at

__all__ = ["CRITERIA", "Criterion", "Fallback", "Unit", "lrp", "max_f1", "validate_params"]

CRITERIA = ("target_precision", "max_f1", "lrp")
Criterion = Literal["target_precision", "max_f1", "lrp"]
Unit = Literal["image", "box"]
Fallback = Literal["global", "drop"]


def validate_params(target_precision: float, delta: float, unit: str, fallback: str) -> None:
    if not (isinstance(target_precision, (int, float)) and 0 < target_precision < 1):
        raise InputError(
            f"Expected argument `target_precision` in (0, 1), but got {target_precision!r}"
        )
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InputError(f"Expected argument `delta` in (0, 1), but got {delta!r}")
    if unit not in ("image", "box"):
        raise InputError(f"Expected argument `unit` to be 'image' or 'box', but got {unit!r}")
    if fallback not in ("global", "drop"):
        raise InputError(
            f"Expected argument `fallback` to be 'global' or 'drop', but got {fallback!r}"
        )


def _argbest(values: np.ndarray, *, maximise: bool) -> int:
    v = np.where(np.isfinite(values), values, -np.inf if maximise else np.inf)
    if not np.isfinite(v).any():
        return -1
    best = v.max() if maximise else v.min()
    return int(np.flatnonzero(v == best)[0])  # lowest threshold among ties


def _f1_curve(c: ClassCounts) -> np.ndarray:
    """F1 ``2 TP / (kept + n_gt)`` at each grid threshold."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c.n + c.n_gt > 0, 2 * c.k / (c.n + c.n_gt), np.nan)


def _lrp_curve(c: ClassCounts) -> np.ndarray:
    """LRP error ``(loc + FP + FN) / (TP + FP + FN)`` at each grid threshold (nan without GT)."""
    n, k, loc = c.n, c.k, c.loc.sum(0)
    den = n + c.n_gt - k
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((den > 0) & (c.n_gt > 0), (loc + (n - k) + (c.n_gt - k)) / den, np.nan)


def max_f1(c: ClassCounts) -> dict[str, Any]:
    if c.n_gt == 0:
        return {**figures_at(c, -1), "f1": None, "flag": "no_ground_truth"}
    f1 = _f1_curve(c)
    j = _argbest(f1, maximise=True)
    return {
        **figures_at(c, j),
        "f1": float(f1[j]) if j >= 0 else None,
        "flag": None if j >= 0 else "no_boxes",
    }


def lrp(c: ClassCounts) -> dict[str, Any]:
    if c.n_gt == 0:
        return {**figures_at(c, -1), "lrp": None, "flag": "no_ground_truth"}
    lrp = _lrp_curve(c)
    j = _argbest(lrp, maximise=False)
    return {
        **figures_at(c, j),
        "lrp": float(lrp[j]) if j >= 0 else None,
        "flag": None if j >= 0 else "no_boxes",
    }

"""Counts of kept boxes on a grid of conf thresholds, per image (:class:`ClassCounts`), and the
figures read off them (precision, recall, kept boxes at a threshold; bootstrap coverage).

A box is kept at ``t`` when its score is ``> t`` (strictly, as Ultralytics keeps boxes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from det_calib.errors import InputError

__all__ = [
    "DEFAULT_GRID",
    "ClassCounts",
    "bootstrap_coverage",
    "check_grid",
    "counts_by_image",
    "figures_at",
    "realised",
]

DEFAULT_GRID = np.round(np.arange(1000) / 1000.0, 3)


@dataclass(frozen=True)
class ClassCounts:
    """Per-image counts of the boxes kept at each grid threshold.

    Attributes:
        grid: (G,) thresholds, increasing.
        kept: (m, G) boxes with score > grid[j], per image.
        tp: (m, G) of them correct, per image.
        loc: (m, G) sum of ``(1 - IoU) / (1 - tau)`` over the kept correct boxes, per image.
        n_gt: Ground-truth boxes of the selection (recall denominator).
    """

    grid: np.ndarray
    kept: np.ndarray
    tp: np.ndarray
    loc: np.ndarray
    n_gt: int

    @property
    def n(self) -> np.ndarray:
        return self.kept.sum(0)

    @property
    def k(self) -> np.ndarray:
        return self.tp.sum(0)


def counts_by_image(
    score: np.ndarray,
    correct: np.ndarray,
    image_id: np.ndarray,
    *,
    grid: np.ndarray,
    iou: np.ndarray | None = None,
    tau: float = 0.5,
    n_gt: int = 0,
) -> ClassCounts:
    """Count, per image and grid threshold ``t``, the boxes with ``score > t`` and the correct ones.

    Args:
        score: (n,) calibrated scores.
        correct: (n,) matched flags.
        image_id: (n,) image of each box (any integers; images without boxes contribute nothing).
        grid: (G,) increasing thresholds.
        iou: (n,) IoU with the matched ground truth, for the LRP localisation term.
        tau: LRP's IoU threshold.
        n_gt: Ground-truth count carried along for recall.
    """
    s = np.asarray(score, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    _, img = np.unique(np.asarray(image_id), return_inverse=True)
    m = int(img.max()) + 1 if img.size else 0
    g = len(grid)
    # box kept at grid[j] iff s > grid[j] iff j < searchsorted(grid, s, "left")
    top = np.searchsorted(grid, s, side="left")  # kept at thresholds 0..top-1

    def acc(w: np.ndarray) -> np.ndarray:
        h = np.zeros((m, g + 1), dtype=np.float64)
        np.add.at(h, (img, top), w)
        # a box with index `top` is kept at thresholds j < top: reverse cumulative sum from the right
        return np.cumsum(h[:, ::-1], axis=1)[:, ::-1][:, 1:]

    kept = acc(np.ones_like(s))
    tp = acc(y.astype(np.float64))
    if iou is not None:
        le = np.clip((1 - np.asarray(iou, dtype=np.float64)) / (1 - tau), 0, 1) * y
        loc = acc(le)
    else:
        loc = np.zeros_like(kept)
    return ClassCounts(np.asarray(grid, float), kept, tp, loc, int(n_gt))


def check_grid(grid: np.ndarray | None) -> np.ndarray:
    g = DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if g.ndim != 1 or g.size == 0 or not np.all(np.diff(g) > 0) or g[0] < 0 or g[-1] >= 1:
        raise InputError(
            "Expected argument `grid` to be a non-empty strictly increasing array in [0, 1)"
        )
    return g


def _ratio(a: Any, b: Any) -> float | None:
    return float(a) / float(b) if b else None


def figures_at(c: ClassCounts, j: int) -> dict[str, Any]:
    """Threshold, precision, recall and boxes kept at grid index j (j = -1: keep nothing, t = 1)."""
    if j < 0:
        return {"threshold": 1.0, "precision": None, "recall": 0.0 if c.n_gt else None, "kept": 0}
    n, k = float(c.n[j]), float(c.k[j])
    return {
        "threshold": float(c.grid[j]),
        "precision": _ratio(k, n),
        "recall": _ratio(k, c.n_gt),
        "kept": int(n),
    }


def realised(c: ClassCounts, t: float) -> dict[str, Any]:
    """Precision, recall and boxes kept on a split at threshold t (t = 1 keeps nothing)."""
    if t >= 1:
        return {"precision": None, "recall": 0.0 if c.n_gt else None, "kept": 0}
    j = int(np.searchsorted(c.grid, t))
    if j >= len(c.grid) or c.grid[j] != t:  # a threshold off the grid: fall back to the exact one
        raise AssertionError(
            "threshold not on the grid"
        )  # pragma: no cover - thresholds come from the grid
    return {
        "precision": _ratio(c.k[j], c.n[j]),
        "recall": _ratio(c.k[j], c.n_gt),
        "kept": int(c.n[j]),
    }


def bootstrap_coverage(
    c: ClassCounts, t: float, target: float, weights: np.ndarray
) -> float | None:
    """Fraction of image-bootstrap resamples whose precision at t is >= target (nan-free resamples only)."""
    if t >= 1 or c.kept.shape[0] == 0:
        return None
    j = int(np.searchsorted(c.grid, t))
    n = weights @ c.kept[:, j]
    k = weights @ c.tp[:, j]
    ok = n > 0
    if not ok.any():
        return None
    return float(np.mean(k[ok] / n[ok] >= target - 1e-12))

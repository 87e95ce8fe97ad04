"""Isotonic calibration in logit space, global and per class, as a strictly increasing map.

The fit is the pool-adjacent-violators (PAV) solution of the weighted least-squares isotonic
regression of the labels on the raw logit (:func:`isotonic_regression`, the same values as
scikit-learn's ``IsotonicRegression`` at the fit points). PAV gives a step function: boxes on
one step tie, and ties reorder under ranking. To keep the ranking (and so mAP, for one map
shared by every class) the calibrator is the **strictly increasing piecewise-linear function in
logit space** through the steps: adjacent PAV blocks are pooled to at most ``max_knots`` (see
``_pool``); knot ``x_j`` = weighted mean raw logit of block j, value ``y_j = logit(p_j)`` with
``p_j = (k_j + 1/2) / (n_j + 1)``, the block's fraction correct (``k_j`` correct of weight
``n_j``) under a Jeffreys prior, made to rise at least :data:`MIN_SLOPE` per logit between knots
(so a PAV step, flat in probability, still keeps the raw order of its boxes). The
prior keeps a block whose boxes are all correct (or all wrong) off probability 1 (or 0): the
raw block mean would put the top boxes at 0.999999, which no finite block shows, and one wrong
box there would cost 14 nats; on a block of thousands of boxes it moves the value by less than
1e-3. Slope ``tail_slope`` beyond the end knots; fitted above a fit floor (only the boxes above
a raw conf), the slope left of the first knot is ``left_slope`` (1 by
:func:`det_calib.selection.cross_validation.fit_calibrator`: the boxes below the floor, never seen by the fit,
keep their raw spacing instead of all taking the value of the lowest fitted block). Such a map
folds into a detector as ReLU hinges (see :func:`det_calib.deploy.fold.fold_calibrator`).

Per class (:class:`ClassIsotonicCalibrator`), each class's curve is shrunk toward the global
curve in logit space, ``g_c(z) = s_c f_c(z) + (1 - s_c) g(z)`` with ``s_c = n_c / (n_c + m)``:
``m`` is a pseudo-count of boxes chosen by K-fold CV (grouped by image) on held-out NLL over
:data:`BLEND_GRID` (``inf`` = the global curve for every class), the largest ``m`` within one
standard error of the best. A blend of strictly increasing maps is strictly increasing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from det_calib.calibrators.affine import (
    check_classes,
    check_format,
    group_folds,
    prepare_fit,
)
from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.fit_support import check_logits
from det_calib.calibrators.registry import register
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import binary_nll_terms, logit

__all__ = ["ClassIsotonicCalibrator", "IsotonicCalibrator", "PiecewiseLinear"]

#: Candidate pseudo-counts for the per-class blend; ``inf`` = the global curve.
_BLEND_GRID: tuple[float, ...] = (10.0, 100.0, 1000.0, 10000.0, math.inf)

_MIN_SLOPE = 0.01
"""Smallest slope of a fitted map between its knots, as beyond them (``tail_slope``'s default): a flat PAV
step keeps the raw order of its boxes, a rise of 0.01 logit per logit (a step 1 logit wide spans
0.01 in calibrated logit, under 0.0025 in probability), too little to move a calibration figure."""

_EPS = 1e-6
_MIN_RISE = 1e-6
_PRIOR = 0.5  # Jeffreys: Beta(1/2, 1/2) on each block's fraction correct
_ISO_FORMAT = "det_calib.IsotonicCalibrator"
_CLASS_ISO_FORMAT = "det_calib.ClassIsotonicCalibrator"
_VERSION = 1


def _pav_blocks(y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PAV on values already sorted by x: return block ``(start index, weight, mean)`` arrays.

    Adjacent blocks are pooled while the left mean is >= the right mean, so block means are
    strictly increasing. Linear time (a stack of blocks).
    """
    n = y.shape[0]
    start = np.empty(n, dtype=np.int64)
    wsum = np.empty(n)
    mean = np.empty(n)
    top = -1
    yl, wl = y.tolist(), w.tolist()
    for i in range(n):
        top += 1
        start[top], wsum[top], mean[top] = i, wl[i], yl[i]
        while top > 0 and mean[top - 1] >= mean[top]:
            wt = wsum[top - 1] + wsum[top]
            if wt > 0:
                mean[top - 1] = (wsum[top - 1] * mean[top - 1] + wsum[top] * mean[top]) / wt
            else:
                mean[top - 1] = min(mean[top - 1], mean[top])
            wsum[top - 1] = wt
            top -= 1
    return start[: top + 1], wsum[: top + 1], mean[: top + 1]


def _pav_sorted(z: np.ndarray, y: np.ndarray, w: np.ndarray):
    """Sort by z, collapse equal z (their fitted value must be equal), run PAV.

    Returns ``(block x-centre, block weight, block mean)``.
    """
    order = np.argsort(z, kind="stable")
    zs, ys, ws = z[order], y[order], w[order]
    uniq, first = np.unique(zs, return_index=True)
    wu = np.add.reduceat(ws, first)
    yu = np.add.reduceat(ws * ys, first) / np.where(wu > 0, wu, 1.0)
    zu = uniq
    # Pool runs of equal targets first: they lie on one straight piece of the cumulative-sum
    # diagram, so the solution is constant over them. With 0/1 labels this shrinks the PAV
    # input from the number of distinct logits to the number of label changes.
    run = np.flatnonzero(np.concatenate([[True], yu[1:] != yu[:-1]]))
    w_run = np.add.reduceat(wu, run)
    b_start, wsum, mean = _pav_blocks(yu[run], w_run)
    start = run[b_start]
    wz = np.add.reduceat(wu * zu, start)
    xc = wz / np.where(wsum > 0, wsum, 1.0)
    return xc, wsum, mean, (zu, wu, start)


def _isotonic_regression(x: Any, y: Any, *, weights: Any = None) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of ``y`` on ``x``, at the points (PAV).

    Equal ``x`` share one fitted value (their weighted mean is pooled first), as in
    scikit-learn's ``IsotonicRegression(increasing=True)``.

    Args:
        x: ``(n,)`` finite real values (here: raw logits).
        y: ``(n,)`` real targets (here: 0/1 labels).
        weights: Optional ``(n,)`` non-negative weights.

    Returns:
        ``(n,)`` fitted values in the input order.

    >>> _isotonic_regression([1, 2, 3, 4], [0, 1, 0, 1]).tolist()
    [0.0, 0.5, 0.5, 1.0]
    """
    xv = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    if xv.ndim != 1 or yv.shape != xv.shape:
        raise InputError(
            f"Expected arguments `x` and `y` of the same shape (n,), but got {xv.shape} and "
            f"{yv.shape}"
        )
    wv = np.ones(xv.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if wv.shape != xv.shape or (wv < 0).any():
        raise InputError(f"Expected argument `weights` of shape {xv.shape} and >= 0")
    if xv.size == 0:
        return np.zeros(0)
    if not np.isfinite(xv).all():
        raise InputError("Expected argument `x` to be finite")
    order = np.argsort(xv, kind="stable")
    _, _, mean, (zu, _wu, start) = _pav_sorted(xv, yv, wv)
    # value of each unique x, then of each point
    block_len = np.diff(np.append(start, zu.shape[0]))
    per_unique = np.repeat(mean, block_len)
    zs = xv[order]
    uidx = np.searchsorted(zu, zs)
    out = np.empty_like(xv)
    out[order] = per_unique[uidx]
    return out


def _strict(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Values at the knots ``x`` that rise at least :data:`MIN_SLOPE` per unit of ``x`` (and ``_MIN_RISE``
    per knot): a running max of ``y`` less that ramp, plus the ramp.

    A PAV step (or two blocks that the prior gives one value) would otherwise be a flat piece: every
    box on it would get one calibrated score, and ties reorder under ranking (Ultralytics val breaks
    them its own way in its float32 scores). The slope keeps the raw order inside each such piece.
    """
    ramp = _MIN_SLOPE * (x - x[0]) + _MIN_RISE * np.arange(y.size)
    return np.maximum.accumulate(y - ramp) + ramp


class PiecewiseLinear:
    """A strictly increasing piecewise-linear map ``R -> R`` (knots, values, tail slopes).

    Attributes:
        x: ``(K,)`` strictly increasing knots.
        y: ``(K,)`` strictly increasing values at the knots.
        tail_slope: Slope left of ``x[0]`` (> 0), and right of ``x[-1]`` unless ``right_slope`` is given.
        right_slope: Slope right of ``x[-1]`` (> 0); defaults to ``tail_slope``.
    """

    def __init__(self, x: Any, y: Any, tail_slope: float, *, right_slope: float | None = None):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        self.tail_slope = float(tail_slope)
        self.right_slope = self.tail_slope if right_slope is None else float(right_slope)
        if self.x.ndim != 1 or self.x.shape != self.y.shape or self.x.size < 1:
            raise InputError(
                "piecewise-linear map: knots and values must be (K,) with K >= 1, got "
                f"{self.x.shape}, {self.y.shape}"
            )
        if not (np.isfinite(self.x).all() and np.isfinite(self.y).all()):
            raise InputError("piecewise-linear map: knots and values must be finite")
        if (
            (np.diff(self.x) <= 0).any()
            or (np.diff(self.y) <= 0).any()
            or not self.tail_slope > 0
            or not self.right_slope > 0
            or not math.isfinite(self.tail_slope + self.right_slope)
        ):
            raise InputError(
                "piecewise-linear map: knots, values must be strictly increasing and tail slopes > "
                "0"
            )

    def __call__(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        out = np.interp(z, self.x, self.y)
        lo, hi = z < self.x[0], z > self.x[-1]
        out[lo] = self.y[0] + self.tail_slope * (z[lo] - self.x[0])
        out[hi] = self.y[-1] + self.right_slope * (z[hi] - self.x[-1])
        return out

    def hinges(self) -> tuple[float, float, np.ndarray, np.ndarray]:
        """The map as ``c0 + s0 * z + sum_j coef_j * relu(z - x_j)``: returns ``(c0, s0, x, coef)``."""
        slopes = np.diff(self.y) / np.diff(self.x) if self.x.size > 1 else np.zeros(0)
        s = np.concatenate([[self.tail_slope], slopes, [self.right_slope]])
        coef = np.diff(s)
        s0 = self.tail_slope
        c0 = self.y[0] - s0 * self.x[0]
        return float(c0), float(s0), self.x.copy(), coef

    def to_dict(self) -> dict[str, Any]:
        """``{"x", "y", "tail_slope"}``, plus ``"right_slope"`` when the right tail differs."""
        out: dict[str, Any] = {
            "x": self.x.tolist(),
            "y": self.y.tolist(),
            "tail_slope": self.tail_slope,
        }
        if self.right_slope != self.tail_slope:
            out["right_slope"] = self.right_slope
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PiecewiseLinear:
        if not isinstance(d, dict) or not {"x", "y", "tail_slope"} <= set(d):
            raise InputError("piecewise-linear map dict needs keys x, y, tail_slope")
        return cls(d["x"], d["y"], d["tail_slope"], right_slope=d.get("right_slope"))


def _pool(xc: np.ndarray, wsum: np.ndarray, mean: np.ndarray, max_knots: int):
    """At most ``max_knots`` blocks, by pooling runs of adjacent PAV blocks.

    Pooled blocks take their weighted mean target and weighted mean logit, so the curve stays
    non-decreasing and every value is still a calibrated frequency. Group boundaries are the
    union of equal-weight quantiles of all boxes and of the correct boxes (half the knots
    each): the first follows the mass (mostly low scores), the second keeps resolution where
    the correct boxes are, i.e. in the operating range.
    """
    if xc.size <= max_knots:
        return xc, wsum, mean
    half = max(1, max_knots // 2)
    cuts = []
    for mass in (wsum, wsum * mean):
        cw = np.cumsum(mass)
        if cw[-1] <= 0:
            continue
        targets = np.linspace(0.0, cw[-1], half + 1)[1:-1]
        cuts.append(np.searchsorted(cw, targets, side="right"))
    starts = np.unique(np.concatenate([[0], *cuts]))
    starts = starts[starts < xc.size]
    w = np.add.reduceat(wsum, starts)
    m = np.add.reduceat(wsum * mean, starts) / w
    x = np.add.reduceat(wsum * xc, starts) / w
    return x, w, m


def _curve(
    z: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    max_knots: int,
    tail_slope: float,
    left_slope: float | None = None,
    pav: tuple | None = None,
) -> PiecewiseLinear:
    """The map of the PAV fit of ``(z, y, w)`` (``pav``: ``_pav_sorted(z, y, w)`` where the caller has
    it already: not sorted again)."""
    xc, wsum, mean, _ = _pav_sorted(z, y, w) if pav is None else pav
    keep = wsum > 0
    xc, wsum, mean = xc[keep], wsum[keep], mean[keep]
    x, n, m = _pool(xc, wsum, mean, max_knots)
    # the prior pulls a small block toward 1/2, possibly below a bigger neighbour's value: the
    # running max of _strict then gives it that value (plus the minimum rise), as PAV would pool them
    p = (n * m + _PRIOR) / (n + 2 * _PRIOR)
    return PiecewiseLinear(
        x,
        _strict(x, logit(np.clip(p, _EPS, 1.0 - _EPS))),
        tail_slope if left_slope is None else left_slope,
        right_slope=tail_slope,
    )


def _check_iso_options(max_knots: Any, tail_slope: Any, left_slope: Any = None) -> None:
    if isinstance(max_knots, bool) or not isinstance(max_knots, (int, np.integer)) or max_knots < 2:
        raise InputError(
            f"Expected argument `max_knots` to be an integer >= 2, but got {max_knots!r}"
        )
    for name, v in (("tail_slope", tail_slope), ("left_slope", left_slope)):
        if v is None and name == "left_slope":
            continue
        if isinstance(v, bool) or not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise InputError(f"Expected argument `{name}` to be a finite number > 0, but got {v!r}")


def _check_iso_degenerate(z, y, w, what: str, min_samples: int) -> None:
    used = w > 0
    n = int(used.sum())
    if n < max(2, min_samples):
        raise DegenerateFitError(
            f"{what} fit needs at least {max(2, min_samples)} samples, got {n}"
        )
    if not np.isfinite(z[used]).all():
        raise DegenerateFitError(f"{what} fit got non-finite logits (nan or inf)")
    yu = y[used]
    if not (yu > 0).any() or not (yu < 1).any():  # soft labels in (0, 1) count toward both
        raise DegenerateFitError(
            f"{what} fit got {'no correct' if not (yu > 0).any() else 'no incorrect'} boxes"
        )


@register(
    "isotonic",
    order=60,
    build=lambda *, seed=0, shrinkage="auto", fit_min_conf=0.0: IsotonicCalibrator(
        left_slope=1.0 if fit_min_conf > 0 else None
    ),
)
class IsotonicCalibrator(LogitCalibrator):
    """Global isotonic calibration as a strictly increasing piecewise-linear map of the logit.

    Args:
        max_knots: Most knots of the map (each is one ReLU hinge per class when deployed).
        tail_slope: Slope beyond the end knots (keeps the map strictly increasing everywhere).
        left_slope: Slope left of the first knot, when it differs from ``tail_slope`` (None: the
            same); :func:`det_calib.selection.cross_validation.fit_calibrator` sets 1 for a fit above a floor.
        min_samples: Minimum number of fit boxes.

    Attributes:
        map_ (PiecewiseLinear): The fitted map, raw logit -> calibrated logit.
        n_blocks_ (int): PAV blocks before thinning.
        n_samples_ (int): Fit boxes.
    """

    format = _ISO_FORMAT
    soft_labels = (
        True  # PAV of soft labels: weighted block means, the isotonic minimiser of any Bregman loss
    )
    deploy_form = "hinges"
    _fitted_attr = "map_"

    def __init__(
        self,
        *,
        max_knots: int = 32,
        tail_slope: float = 0.01,
        left_slope: float | None = None,
        min_samples: int = 10,
    ):
        self.max_knots = max_knots
        self.tail_slope = tail_slope
        self.left_slope = left_slope
        self.min_samples = min_samples

    def __repr__(self) -> str:
        fitted = f", knots={self.map_.x.size}" if hasattr(self, "map_") else ""
        return f"IsotonicCalibrator(max_knots={self.max_knots!r}{fitted})"

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> IsotonicCalibrator:
        """Fit the map; ``classes`` is ignored. Raises DegenerateFitError on one label only or too few boxes."""
        _check_iso_options(self.max_knots, self.tail_slope, self.left_slope)
        z, y, w = prepare_fit(logits, labels, weights)
        _check_iso_degenerate(z, y, w, "isotonic", int(self.min_samples))
        used = w > 0
        zu, yu, wu = z[used], y[used], w[used]
        pav = _pav_sorted(zu, yu, wu)  # sorted once: the block count and the map's blocks
        self.n_blocks_ = int(pav[0].size)
        self.map_ = _curve(
            zu, yu, wu, int(self.max_knots), float(self.tail_slope), self.left_slope, pav=pav
        )
        self.n_samples_ = int(z.shape[0])
        return self

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Calibrated logits ``map_(z)`` (float64, ``(n,)``)."""
        self._check_fitted()
        return self.map_(check_logits(logits, "sigmoid"))

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return f"isotonic ({len((d.get('map') or {}).get('x') or [])} steps)"

    def hinge_maps(self, n_classes: int) -> list[PiecewiseLinear]:
        self._check_fitted()
        return [self.map_] * n_classes

    def to_dict(self) -> dict[str, Any]:
        """``{"format": "det_calib.IsotonicCalibrator", "version": 1, "map": {"x": [...], "y": [...],
        "tail_slope"}, "max_knots", "n_samples"}``."""
        self._check_fitted()
        return {
            "format": _ISO_FORMAT,
            "version": _VERSION,
            "map": self.map_.to_dict(),
            "max_knots": int(self.max_knots),
            "n_samples": getattr(self, "n_samples_", None),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IsotonicCalibrator:
        d = check_format(d, _ISO_FORMAT)
        m = PiecewiseLinear.from_dict(d.get("map"))
        obj = cls(
            max_knots=int(d.get("max_knots", 32)),
            tail_slope=m.right_slope,
            left_slope=None if m.tail_slope == m.right_slope else m.tail_slope,
        )
        obj.map_ = m
        if d.get("n_samples") is not None:
            obj.n_samples_ = int(d["n_samples"])
        return obj


def _blend(f: PiecewiseLinear, g: PiecewiseLinear, s: float) -> PiecewiseLinear:
    """``s f + (1 - s) g`` on the union of the knots (exact: both are linear between them)."""
    if s <= 0:
        return g
    if s >= 1:
        return f
    x = np.union1d(f.x, g.x)
    x = x[np.concatenate([[True], np.diff(x) > 1e-9])]  # knots of f and g that nearly coincide
    return PiecewiseLinear(
        x,
        _strict(x, s * f(x) + (1 - s) * g(x)),
        s * f.tail_slope + (1 - s) * g.tail_slope,
        right_slope=s * f.right_slope + (1 - s) * g.right_slope,
    )


@register(
    "class-isotonic",
    order=70,
    build=lambda *, seed=0, shrinkage="auto", fit_min_conf=0.0: ClassIsotonicCalibrator(
        blend=shrinkage, seed=seed, left_slope=1.0 if fit_min_conf > 0 else None
    ),
)
class ClassIsotonicCalibrator(LogitCalibrator):
    """Per-class isotonic maps shrunk toward the global one: ``s_c f_c + (1 - s_c) g``, ``s_c = n_c / (n_c + m)``.

    Args:
        blend: ``"auto"`` (choose ``m`` from ``blend_grid`` by ``n_folds``-fold CV on held-out
            NLL, then the largest ``m`` within one standard error of the best) or a fixed
            ``m >= 0`` (``inf``: the global map for every class).
        blend_grid: Candidates for ``"auto"``.
        n_folds: Folds of the CV (grouped by ``groups`` when given to :meth:`fit`).
        max_knots: Most knots of each class curve before blending (the blend has at most twice).
        tail_slope: Slope beyond the end knots.
        left_slope: Slope left of the first knot of every curve (None: ``tail_slope``), as
            :class:`IsotonicCalibrator`.
        min_samples: Minimum boxes of the global fit; a class with fewer than ``min_samples``
            boxes, or with one label only, gets ``s_c = 0`` (the global map).
        seed: Seed of the fold assignment.

    Attributes:
        global_ (PiecewiseLinear): The global map.
        maps_ (list[PiecewiseLinear]): ``n_classes_`` blended maps, one per class id.
        weights_ (ndarray): ``(n_classes_,)`` blend weights ``s_c``.
        blend_ (float): The ``m`` used.
        cv_nll_ (dict[float, float] | None): Held-out mean NLL per grid value (``"auto"`` only).
    """

    format = _CLASS_ISO_FORMAT
    soft_labels = True
    per_class = True
    deploy_form = "hinges"
    _fitted_attr = "maps_"

    def __init__(
        self,
        *,
        blend: float | str = "auto",
        blend_grid: Sequence[float] = _BLEND_GRID,
        n_folds: int = 3,
        max_knots: int = 32,
        tail_slope: float = 0.01,
        left_slope: float | None = None,
        min_samples: int = 10,
        seed: int = 0,
    ):
        self.blend = blend
        self.blend_grid = blend_grid
        self.n_folds = n_folds
        self.max_knots = max_knots
        self.tail_slope = tail_slope
        self.left_slope = left_slope
        self.min_samples = min_samples
        self.seed = seed

    def __repr__(self) -> str:
        fitted = f", blend_={self.blend_:.3g}" if hasattr(self, "blend_") else ""
        return f"ClassIsotonicCalibrator(blend={self.blend!r}{fitted})"

    def _curves(self, z, y, w, k, n_cls):
        g = _curve(z, y, w, int(self.max_knots), float(self.tail_slope), self.left_slope)
        own: list[PiecewiseLinear | None] = []
        counts = np.bincount(k, weights=w, minlength=n_cls)
        order = np.argsort(k, kind="stable")
        bounds = np.searchsorted(k[order], np.arange(n_cls + 1))
        for c in range(n_cls):
            idx = order[bounds[c] : bounds[c + 1]]
            yc, wc = y[idx], w[idx]
            pos = float(np.dot(wc, yc))
            if idx.size < max(2, int(self.min_samples)) or pos <= 0 or pos >= wc.sum():
                own.append(None)
            else:
                own.append(
                    _curve(
                        z[idx], yc, wc, int(self.max_knots), float(self.tail_slope), self.left_slope
                    )
                )
        return g, own, counts

    @staticmethod
    def _maps(g, own, counts, m) -> tuple[list[PiecewiseLinear], np.ndarray]:
        s = np.array(
            [
                0.0 if f is None or math.isinf(m) else counts[c] / (counts[c] + m)
                for c, f in enumerate(own)
            ]
        )
        return [g if f is None else _blend(f, g, s[c]) for c, f in enumerate(own)], s

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> ClassIsotonicCalibrator:
        """Fit the global and per-class maps and the blend (see the class docstring for the arguments)."""
        _check_iso_options(self.max_knots, self.tail_slope, self.left_slope)
        b = self.blend
        if b != "auto" and not (isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 0):
            raise InputError(
                f"Expected argument `blend` to be 'auto' or a number >= 0, but got {b!r}"
            )
        z, y, w = prepare_fit(logits, labels, weights)
        k = check_classes(classes, z.shape[0])
        _check_iso_degenerate(z, y, w, "per-class isotonic", int(self.min_samples))
        n_cls = int(k.max()) + 1
        cv = None
        if b == "auto":
            grid = sorted((float(v) for v in self.blend_grid), reverse=True)
            folds = group_folds(z.shape[0], int(self.n_folds), groups, seed=int(self.seed))
            scores = np.zeros((int(self.n_folds), len(grid)))
            for f in range(int(self.n_folds)):
                tr, te = folds != f, folds == f
                g, own, counts = self._curves(z[tr], y[tr], w[tr], k[tr], n_cls)
                for j, m in enumerate(grid):
                    maps, _ = self._maps(g, own, counts, m)
                    scores[f, j] = _class_nll(maps, z[te], y[te], w[te], k[te])
            mean = scores.mean(axis=0)
            se = scores.std(axis=0, ddof=1) / math.sqrt(scores.shape[0])
            best = int(np.argmin(mean))
            m = grid[next(j for j in range(len(grid)) if mean[j] <= mean[best] + se[best])]
            cv = {float(gv): float(v) for gv, v in zip(grid, mean, strict=True)}
        else:
            m = float(b)
        g, own, counts = self._curves(z, y, w, k, n_cls)
        self.maps_, self.weights_ = self._maps(g, own, counts, m)
        self.global_ = g
        self.blend_ = m
        self.cv_nll_ = cv
        self.n_classes_ = n_cls
        self.class_counts_ = np.bincount(k, minlength=n_cls)
        return self

    def map_for(self, c: int) -> PiecewiseLinear:
        """The map of class ``c`` (the global map for an id never seen in the fit)."""
        self._check_fitted()
        return self.maps_[c] if 0 <= c < len(self.maps_) else self.global_

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return (
            f"class-isotonic ({len(d.get('maps') or [])} class curves on a global one of "
            f"{len((d.get('global') or {}).get('x') or [])} steps)"
        )

    def hinge_maps(self, n_classes: int) -> list[PiecewiseLinear]:
        return [self.map_for(c) for c in range(n_classes)]

    @property
    def cv_grid(self) -> tuple[float, ...]:
        return tuple(self.blend_grid)

    def fit_grid(
        self, logits, labels, *, classes, weights, grid, build
    ) -> list[ClassIsotonicCalibrator]:
        """One map per blend ``m`` of ``grid`` sharing the class curves (the fold fits of ``auto``'s CV)."""
        z, y, k, w = logits, labels, classes, weights
        proto = build(math.inf)
        _check_iso_degenerate(z, y, w, "per-class isotonic", proto.min_samples)
        n_cls = int(k.max()) + 1
        g, own, counts = proto._curves(z, y, w, k, n_cls)
        out = []
        for m in grid:
            cal = build(m)
            cal.maps_, cal.weights_ = proto._maps(g, own, counts, m)
            cal.global_, cal.blend_, cal.cv_nll_, cal.n_classes_ = g, m, None, n_cls
            out.append(cal)
        return out

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Per-box calibrated logits (float64, ``(n,)``)."""
        self._check_fitted()
        z = check_logits(logits, "sigmoid")
        k = check_classes(classes, z.shape[0])
        out = np.empty_like(z)
        for c in np.unique(k):
            m = k == c
            out[m] = self.map_for(int(c))(z[m])
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"format": "det_calib.ClassIsotonicCalibrator", "version": 1, "global": map, "maps": [map per
        class], "weights": [s_c], "blend": m or "inf", "class_counts", "cv_nll"}``; a map is
        ``{"x", "y", "tail_slope"}``."""
        self._check_fitted()
        return {
            "format": _CLASS_ISO_FORMAT,
            "version": _VERSION,
            "global": self.global_.to_dict(),
            "maps": [m.to_dict() for m in self.maps_],
            "weights": [float(v) for v in self.weights_],
            "blend": "inf" if math.isinf(self.blend_) else float(self.blend_),
            "class_counts": [int(v) for v in getattr(self, "class_counts_", [])],
            "cv_nll": None
            if self.cv_nll_ is None
            else {str(k): v for k, v in self.cv_nll_.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClassIsotonicCalibrator:
        d = check_format(d, _CLASS_ISO_FORMAT)
        g = PiecewiseLinear.from_dict(d.get("global"))
        obj = cls(
            tail_slope=g.right_slope,
            left_slope=None if g.tail_slope == g.right_slope else g.tail_slope,
        )
        obj.global_ = g
        obj.maps_ = [PiecewiseLinear.from_dict(m) for m in d.get("maps", [])]
        obj.weights_ = np.asarray(d.get("weights", [0.0] * len(obj.maps_)), dtype=np.float64)
        bl = d.get("blend", "inf")
        obj.blend_ = math.inf if bl == "inf" else float(bl)
        obj.cv_nll_ = (
            None
            if d.get("cv_nll") is None
            else {float(k): float(v) for k, v in d["cv_nll"].items()}
        )
        obj.n_classes_ = len(obj.maps_)
        obj.class_counts_ = np.asarray(d.get("class_counts", []), dtype=np.int64)
        return obj


def _class_nll(maps: list[PiecewiseLinear], z, y, w, k) -> float:
    t = np.empty_like(z)
    for c in np.unique(k):
        m = k == c
        t[m] = maps[int(c)](z[m])
    return float(np.dot(w, binary_nll_terms(t, y)) / max(w.sum(), 1e-300))

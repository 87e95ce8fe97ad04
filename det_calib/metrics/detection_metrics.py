"""The detection-specific calibration metrics: D-ECE over box position and size
(:func:`dece`, features from :func:`box_features`), and the localisation-aware LaECE and LaACE
(:func:`laece`, :func:`laace`); bin conventions of :mod:`det_calib.metrics.calibration`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.metrics.binning import dense_ids, gap_sum, uniform_index
from det_calib.metrics.bootstrap import Batch
from det_calib.metrics.bootstrap_tables import laece_tables
from det_calib.metrics.metric_inputs import (
    as_binary,
    as_float,
    as_int_ids,
    as_unit,
    as_weights,
    check_lengths,
    check_positive_int,
)

__all__ = ["box_features", "dece", "laace", "laece", "prepare_laece"]

_IOU_TOL = 1e-9


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
            raise InputError(
                f"Expected argument `{name}` to be positive and finite, but got "
                f"{float(arr.min()):g}"
            )
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
                f"Expected argument `n_bins` to be an integer or a sequence of {n_features + 1} "
                "integers "
                f"(confidence first, then one per feature column), but got {len(bins)}"
            )
        return [check_positive_int(b, "n_bins") for b in bins]
    raise InputError(
        "Expected argument `n_bins` to be an integer larger than 0 or a sequence of them, but got "
        f"{n_bins!r}"
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
        raise InputError(
            f"Expected argument `features` to have shape (n, J), but got shape {f.shape}"
        )
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
        raise InputError(
            f"Expected argument `n_bins` to give fewer than 2**62 joint bins, but got {bins}"
        )
    idx = [uniform_index(c, bins[0])] + [uniform_index(f[:, j], b) for j, b in enumerate(bins[1:])]
    flat = np.ravel_multi_index(tuple(idx), tuple(bins))
    _, cell = dense_ids(flat)  # np.unique's inverse, by counting: the joint bins are few
    ww = np.ones(n) if w is None else w
    count = np.bincount(cell, weights=ww)
    s_conf = np.bincount(cell, weights=ww * c)
    s_tgt = np.bincount(cell, weights=ww * y)
    return gap_sum(count, s_conf, s_tgt)


def _laece_prepare(c, t, k, n_bins) -> Callable[[np.ndarray], float]:
    """``w -> LaECE of the boxes with (n,) weights w``: the class ids and bins, which do not depend
    on the weights, are found once (a bootstrap replicate then only sums)."""
    if c.size == 0:
        return lambda ww: float("nan")
    _, cls_idx = dense_ids(k)
    n_cls = int(cls_idx.max()) + 1
    key = cls_idx.ravel() * n_bins + uniform_index(c, n_bins)
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


def laece_core(c, t, k, w, n_bins) -> float:
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
    return laece_core(c, t, k, w, n_bins)


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
    _, cls_idx = dense_ids(k)
    ww = np.ones(c.size) if w is None else w
    n_c = np.bincount(cls_idx, weights=ww)
    s = np.bincount(cls_idx, weights=ww * np.abs(t - c))
    present = n_c > 0
    if not present.any():
        return float("nan")
    return float(np.mean(s[present] / n_c[present]))


def prepare_laece(img, n_img, conf, target_iou, cls, *, n_bins=25) -> Batch:
    n_bins = check_positive_int(n_bins)
    c, t, k, _ = _check_loc(conf, target_iou, cls, None)

    return laece_tables(img, n_img, c, t, k, uniform_index(c, n_bins), n_bins)

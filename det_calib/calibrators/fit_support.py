"""What the maps share for their fits: checked logits, labels and weights (:func:`check_fit`, one
call for a fit's three arrays; :func:`check_logits` for the logits a fitted map is applied to),
checked class ids (:func:`check_classes`), the refusal of a degenerate fit
(:func:`check_degenerate`), and the image-grouped folds of the affine and isotonic maps'
cross-validated shrinkage (:func:`group_folds`). Messages in the package's one style
(:mod:`det_calib.validation`).

>>> z, y, w = check_fit([0.5, -1.0], [True, False])
>>> z.tolist(), y.tolist(), w
([0.5, -1.0], [1.0, 0.0], None)
>>> check_fit([0.5, -1.0], [1, 0], [0.0, 0.0])
Traceback (most recent call last):
...
det_calib.errors.InputError: Expected argument `weights` to have at least one positive weight, but all are 0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from det_calib.errors import DegenerateFitError, InputError

__all__ = [
    "check_classes",
    "check_degenerate",
    "check_fit",
    "check_logits",
    "group_folds",
]


def _as_array(x: Any, name: str) -> np.ndarray:
    """Convert a numpy array, sequence or torch tensor (without importing torch) to a numpy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise InputError(
            f"Expected argument `{name}` to be an array, but got one numpy cannot convert ({e})"
        ) from None


def check_logits(logits: Any, kind: str) -> np.ndarray:
    """Logits of a fit: float64, shape (n,) for ``kind="sigmoid"``, (n, K >= 2) for ``"softmax"``."""
    z = _as_array(logits, "logits")
    if z.dtype == bool or not (
        np.issubdtype(z.dtype, np.floating) or np.issubdtype(z.dtype, np.integer)
    ):
        raise InputError(
            f"Expected argument `logits` to be a real-valued array, but got dtype {z.dtype}"
        )
    if kind == "sigmoid" and z.ndim != 1:
        raise InputError(
            f"Expected argument `logits` of shape (n,) for kind='sigmoid', but got shape {z.shape}"
        )
    if kind == "softmax" and (z.ndim != 2 or z.shape[1] < 2):
        raise InputError(
            "Expected argument `logits` of shape (n, K) with K >= 2 for kind='softmax', but got "
            f"shape {z.shape}"
        )
    return z.astype(np.float64, copy=False)


def _check_labels(labels: Any, kind: str, n: int, n_classes: int) -> np.ndarray:
    """Labels of a fit: float64 0/1 or soft labels in [0, 1] (``"sigmoid"``; integer labels must be 0/1)
    or intp class ids in ``[0, n_classes)``."""
    y = _as_array(labels, "labels")
    if y.ndim != 1:
        raise InputError(f"Expected argument `labels` of shape (n,), but got shape {y.shape}")
    if y.shape[0] != n:
        raise InputError(
            f"Expected argument `labels` to have the length of `logits` ({n}), but got {y.shape[0]}"
        )
    if kind == "sigmoid":
        if y.dtype == bool:
            return y.astype(np.float64)
        if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
            raise InputError(
                f"Expected argument `labels` to be bool or 0/1, but got dtype {y.dtype}"
            )
        # soft labels (a target in [0, 1], e.g. the IoU of the box's match) are floats in [0, 1]
        ok = np.isin(y, (0, 1)) if np.issubdtype(y.dtype, np.integer) else (y >= 0) & (y <= 1)
        if not ok.all():
            bad = y[~ok][:3].tolist()
            raise InputError(
                "Expected argument `labels` to hold only 0/1 (or soft labels in [0, 1]) for "
                "kind='sigmoid', "
                f"but got e.g. {bad}"
            )
        return y.astype(np.float64)
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(
            "Expected argument `labels` to hold integer class ids for kind='softmax', but got "
            f"dtype {y.dtype}"
        )
    if n and (y.min() < 0 or y.max() >= n_classes):
        raise InputError(
            f"Expected argument `labels` to hold class ids in [0, {n_classes}), "
            f"but got values in [{y.min()}, {y.max()}]"
        )
    return y.astype(np.intp, copy=False)


def _check_weights(weights: Any, n: int) -> np.ndarray | None:
    """None, or (n,) float64 fit weights: finite, >= 0, at least one positive."""
    if weights is None:
        return None
    w = _as_array(weights, "weights")
    if w.ndim != 1 or w.shape[0] != n:
        raise InputError(f"Expected argument `weights` of shape ({n},), but got shape {w.shape}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all() or (w < 0).any():
        raise InputError("Expected argument `weights` to be finite and >= 0")
    if not (w > 0).any():
        raise InputError(
            "Expected argument `weights` to have at least one positive weight, but all are 0"
        )
    return w


def check_fit(
    logits: Any, labels: Any, weights: Any = None, *, kind: str = "sigmoid"
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A fit's checked logits, labels and weights: :func:`check_logits`, :func:`_check_labels` (their
    classes: the logits' columns for ``kind="softmax"``, 2 for ``"sigmoid"``) and
    :func:`_check_weights` (None stays None)."""
    z = check_logits(logits, kind)
    y = _check_labels(labels, kind, z.shape[0], z.shape[1] if kind == "softmax" else 2)
    return z, y, _check_weights(weights, z.shape[0])


def check_classes(classes: Any, n: int) -> np.ndarray:
    if classes is None:
        raise InputError(
            "Expected argument `classes` (n,) of integer class ids for a per-class calibrator, but "
            "got None"
        )
    k = _as_array(classes, "classes")
    if k.ndim != 1 or k.shape[0] != n:
        raise InputError(f"Expected argument `classes` of shape ({n},), but got shape {k.shape}")
    integral = np.issubdtype(k.dtype, np.integer) or (
        np.issubdtype(k.dtype, np.floating) and np.all(k == np.round(k))
    )
    if k.size and not integral:
        raise InputError(
            f"Expected argument `classes` to hold integer class ids, but got dtype {k.dtype}"
        )
    k = k.astype(np.int64)
    if k.size and k.min() < 0:
        raise InputError(f"Expected argument `classes` to hold ids >= 0, but got {int(k.min())}")
    return k


def check_degenerate(
    z: np.ndarray, y: np.ndarray, w: np.ndarray, what: str, min_samples: int
) -> None:
    used = w > 0
    n_used = int(used.sum())
    if n_used < max(2, min_samples):
        raise DegenerateFitError(
            f"{what} fit needs at least {max(2, min_samples)} samples, got {n_used}"
        )
    if not np.isfinite(z[used]).all():
        raise DegenerateFitError(f"{what} fit got non-finite logits (nan or inf)")
    yu, zu = y[used], z[used]
    # soft labels (in [0, 1]) count toward both sides: a box is "incorrect" by 1 - y, "correct" by y
    if not (yu > 0).any():
        raise DegenerateFitError(f"{what} fit got no correct boxes (all labels 0)")
    if not (yu < 1).any():
        raise DegenerateFitError(f"{what} fit got no incorrect boxes (all labels 1)")
    if zu.min() == zu.max():
        raise DegenerateFitError(
            f"{what} fit got one logit value for every box: the slope is undetermined"
        )
    if zu[yu < 1].max() <= zu[yu > 0].min():
        raise DegenerateFitError(
            f"{what} fit is degenerate: every correct box has a higher logit than every incorrect "
            "one "
            "(separable), so the slope grows without bound"
        )


def group_folds(n: int, n_folds: int, groups: Any = None, *, seed: int = 0) -> np.ndarray:
    """Assign each of ``n`` rows to one of ``n_folds`` folds, keeping each group in one fold.

    Args:
        n: Number of rows.
        n_folds: Number of folds K >= 2.
        groups: Optional ``(n,)`` group ids (image ids): all rows of a group share a fold. Groups
            are shuffled with ``seed`` and dealt round-robin, so folds hold about n / K groups.
            Without groups, rows are dealt individually.
        seed: Seed of the shuffle.

    Returns:
        ``(n,)`` int fold index in ``[0, n_folds)``.

    Raises:
        InputError: ``n_folds < 2``, more folds than groups, or a wrongly shaped ``groups``.
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise InputError(f"Expected argument `n_folds` to be an integer >= 2, but got {n_folds!r}")
    if groups is None:
        g = np.arange(n)
    else:
        g = _as_array(groups, "groups")
        if g.ndim != 1 or g.shape[0] != n:
            raise InputError(f"Expected argument `groups` of shape ({n},), but got shape {g.shape}")
    _, inv = np.unique(g, return_inverse=True)
    inv = inv.ravel()
    n_groups = int(inv.max()) + 1 if n else 0
    if n_groups < n_folds:
        raise InputError(
            f"Expected at least `n_folds`={n_folds} groups (images) to split, but got {n_groups}"
        )
    perm = np.random.default_rng(seed).permutation(n_groups)
    fold_of_group = np.empty(n_groups, dtype=np.int64)
    fold_of_group[perm] = np.arange(n_groups) % n_folds
    return fold_of_group[inv]

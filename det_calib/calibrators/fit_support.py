"""What the affine and isotonic maps share for their fits: checked class ids
(:func:`check_classes`), the refusal of a degenerate fit (:func:`check_degenerate`), and the
image-grouped folds of their cross-validated shrinkage (:func:`group_folds`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from det_calib.errors import DegenerateFitError, InputError
from det_calib.validation import as_array

__all__ = ["check_classes", "check_degenerate", "group_folds"]


def check_classes(classes: Any, n: int) -> np.ndarray:
    if classes is None:
        raise InputError(
            "Expected argument `classes` (n,) of integer class ids for a per-class calibrator, but "
            "got None"
        )
    k = as_array(classes, "classes")
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
        g = as_array(groups, "groups")
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

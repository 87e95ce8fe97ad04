"""Choose a classifier's map on held-out folds of the fit split.

Every candidate of :data:`~det_calib.tasks.classify.softmax_maps.MULTICLASS_METHODS` ("none" always
among them) is fitted on all folds but one and scored by its mean categorical NLL on the one left
out, over ``folds`` stratified folds repeated ``repeats`` times; the choice is the simplest map
whose held-out NLL is within one standard error (of its paired per-image difference) of the best
map's, so a bigger map must earn its parameters. A candidate whose fit fails on a fold
(degenerate data) is out.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(0, 2, (600, 4))
    >>> y = z.argmax(1)  # the logits already rank perfectly: a sharper temperature wins
    >>> choose_classifier_map(3.0 * z, y, seed=0).method in ("temperature", "vector", "matrix")
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from det_calib.errors import DegenerateFitError, InputError
from det_calib.tasks.classify.softmax_maps import MULTICLASS_METHODS, fit_multiclass

__all__ = ["ClassifierChoice", "choose_classifier_map"]


@dataclass(frozen=True)
class ClassifierChoice:
    """The chosen map and every candidate's held-out score.

    Attributes:
        method: The chosen map's name.
        nll: Held-out mean NLL per candidate (NaN where its fit failed).
        se: Standard error of each candidate's per-image NLL difference from the best candidate.
        folds: Folds per repeat; ``repeats``: repeats.
    """

    method: str
    nll: dict[str, float]
    se: dict[str, float]
    folds: int
    repeats: int


def _fold_ids(y: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified fold of each image: each class's images dealt round the folds in random order."""
    ids = np.empty(y.size, dtype=np.int64)
    for k in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == k))
        ids[idx] = (np.arange(idx.size) + rng.integers(folds)) % folds
    return ids


def choose_classifier_map(
    logits: np.ndarray,
    labels: np.ndarray,
    *,
    methods: tuple[str, ...] = MULTICLASS_METHODS,
    folds: int = 5,
    repeats: int = 2,
    seed: int = 0,
) -> ClassifierChoice:
    """Choose among ``methods`` by held-out NLL (see the module's docstring).

    Raises:
        InputError: Fewer images than ``2 * folds``, or an unknown method.
    """
    z, y = np.asarray(logits, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    if y.size < 2 * folds:
        raise InputError(
            f"{y.size} images cannot be split into {folds} folds: give at least {2 * folds}"
        )
    rng = np.random.default_rng(seed)
    losses = {m: np.zeros((repeats, y.size)) for m in methods}
    failed: set[str] = set()
    for r in range(repeats):
        fold = _fold_ids(y, folds, rng)
        for f in range(folds):
            test, train = fold == f, fold != f
            for m in methods:
                if m in failed:
                    continue
                try:
                    mapped = fit_multiclass(m, z[train], y[train])
                except DegenerateFitError:
                    failed.add(m)
                    continue
                lp = mapped.log_proba(z[test])
                losses[m][r, test] = -lp[np.arange(lp.shape[0]), y[test]]
    per_image = {m: v.mean(axis=0) for m, v in losses.items() if m not in failed}
    nll = {m: float(per_image[m].mean()) if m in per_image else float("nan") for m in methods}
    best = min(per_image, key=lambda m: nll[m])
    se = {
        m: float(np.std(per_image[m] - per_image[best], ddof=1) / np.sqrt(y.size))
        if m in per_image
        else float("nan")
        for m in methods
    }
    chosen = next(m for m in methods if m in per_image and nll[m] <= nll[best] + se[m])
    return ClassifierChoice(chosen, nll, se, folds, repeats)

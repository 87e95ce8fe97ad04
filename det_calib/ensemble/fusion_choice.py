"""Choose how an ensemble fuses (the order and the score rule) on the fit split's folds, as
``--method auto`` chooses a calibrator.

The candidates are both orders under every score rule (``--fusion-order`` or ``--fusion-score``
fixes one of the two). Each is fused on the fit split and labelled, and its calibrator of the fused
score is chosen on the whole fit split as ``calibrate`` chooses one. The criterion is the figure
users read at deployment: the **kept-set ECE** (at the lowest ``--conf``, ``--ece-bins`` bins) of
the candidate's **out-of-fold** calibrated scores:

- the fit split's images are dealt into ``--cv-folds`` K folds, ``--cv-repeats`` R times with
  fresh assignments (``--seed``), the same folds for every candidate;
- on each fold, the candidate's calibrator (its method and fit floor) is refitted on the other
  K - 1 folds and scores the held-out fold's fused boxes; the K held-out folds pooled are every
  fused box of the fit split scored by a map that never saw its image, and their kept-set ECE is
  the score of that assignment; the candidate's CV score is the mean over the R assignments;
- under ``calibrate-then-fuse`` every member's calibrator is cross-fitted first, on the same
  folds (refitted on the other folds, applied to the held-out fold's member boxes), and the
  members' out-of-fold calibrated scores are fused; the fused score's calibrator then refits on
  those fused boxes fold by fold as above.

Kept-set ECEs of different box sets compare (each is the error of the boxes a user keeps), unlike
the NLL ``--method auto`` uses among maps of one box set. The rule:

1. **Accuracy first.** A candidate is eligible when its fit-split mAP50-95 (COCO mAP of the fused
   boxes, ``--map-engine``) is within :data:`_MAP_TOLERANCE` of the best candidate's: an ensemble is built for its
   accuracy, which no calibrator restores, so none is traded for calibration.
2. **The lowest CV kept-set ECE** among the eligible wins, unless
3. **a simpler eligible candidate** is as good: behind the best by less than :data:`Z_SIMPLER`
   (one) paired standard error, the one-standard-error rule; the first such in the order of
   preference wins. Preference: ``fuse-then-calibrate`` (one calibrator) before
   ``calibrate-then-fuse`` (one per member and one more); then the rules in the order of
   :data:`_RULE_PREFERENCE` (``best-avg`` first: the deep ensemble's average of the members'
   probabilities, each member counted once by its best box; then ``agree``, which counts members,
   not boxes, in its share, but averages every box). The standard error of a difference is
   that of the two candidates' pooled kept-set ECEs over an image bootstrap (the same images
   resampled for both, first assignment). Fusions whose kept boxes the fit split cannot tell
   apart so keep the preferred one, instead of one chosen by the noise of a few hundred images.

``benchmarks/measure_fusion_choice.py`` measures the rule on the demo ensemble over fit-split
sizes and seeds, against the fixed default and every fixed cell.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from det_calib.calibrators.fit_support import group_folds
from det_calib.data.box_view import BoxView, usable_rows
from det_calib.errors import DegenerateFitError
from det_calib.metrics.calibration import bootstrap_sd
from det_calib.metrics.operating_point import kept_ece
from det_calib.selection.cross_validation import fit_calibrator

_MAP_TOLERANCE = 0.01
"""A candidate whose fit-split mAP50-95 is more than this below the best candidate's is not eligible."""
Z_SIMPLER = 1.0
"""A preferred candidate behind the best by less than this many paired standard errors is chosen."""
_RULE_PREFERENCE = ("best-avg", "agree", "avg", "absent", "max", "present")
"""Score rules, preferred first (among candidates the fit split cannot tell apart)."""
_N_BOOT = 200
"""Image-bootstrap replicates of the paired standard error."""


@dataclass
class FusionCandidate:
    """One fusion candidate on the fit split.

    Attributes:
        order, score: The fusion order and score rule.
        method, floor: The fused score's calibrator chosen on the whole fit split (method, fit floor).
        fit_map50_95: COCO mAP50-95 (``--map-engine``) of the fused fit boxes.
        cv_scores: Pooled out-of-fold kept-set ECE, one per fold assignment.
        diff, diff_se: Difference of CV scores from the best eligible candidate, and its paired
            standard error (image bootstrap).
        verdict: Why it won or lost, in a few words.
        error: Why it could not be scored (a fold's fit failed), else None.
        oof: ``(p, y, image_id)`` of its out-of-fold scored boxes (first assignment), for the
            paired standard errors.
    """

    order: str
    score: str
    method: str
    floor: float
    fit_map50_95: float
    cv_scores: list[float] = field(default_factory=list)
    diff: float = math.nan
    diff_se: float = math.nan
    verdict: str = ""
    error: str | None = None
    oof: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def cv_mean(self) -> float:
        v = np.asarray(self.cv_scores, dtype=np.float64)
        return float(v.mean()) if v.size and np.isfinite(v).all() else math.nan


def usable_index(boxes: pl.DataFrame) -> np.ndarray:
    """Row positions (int64, ascending) of the boxes of a table that evaluation uses (:func:`usable_rows`),
    to align arrays computed for every row (out-of-fold scores) with them."""
    return usable_rows(boxes.with_row_index("_row"))["_row"].to_numpy().astype(np.int64)


def image_folds(n_images: int, n_folds: int, seed: int) -> np.ndarray:
    """The fold of every image id ``0..n_images-1`` (grouped K-fold, as ``--method auto`` deals them)."""
    return group_folds(n_images, n_folds, np.arange(n_images), seed=seed)


def out_of_fold(
    boxes: pl.DataFrame, method: str, floor: float, fold_of_image: np.ndarray, *, seed: int
) -> np.ndarray:
    """Every box's conf under ``method`` (fit floor ``floor``) refitted without its image's fold.

    ``boxes``: a matched table (``logit``, ``conf``, ``cls``, ``image_id``, ``correct``, ``ignore``);
    fits use the boxes not crowd-matched; every box is scored (crowd-matched ones too).

    Raises:
        DegenerateFitError: A fold's boxes cannot determine the map.
    """
    every = BoxView.from_boxes(boxes, geometry=False, ignore=False)
    z, p0, k, img, y = every.logit, every.conf, every.cls, every.image_id, every.correct
    use = usable_index(boxes)
    fold = fold_of_image[img]
    out = p0.copy()
    if method == "none":
        return out
    for f in np.unique(fold):
        test = fold == f
        train = use[fold[use] != f]
        cal = fit_calibrator(
            method,
            z[train],
            y[train],
            classes=k[train],
            groups=img[train],
            fit_min_conf=floor,
            seed=seed,
        )
        out[test] = every.subset(test).scored(cal).conf
    return out


def _ece_difference(
    p: np.ndarray,
    y: np.ndarray,
    which: np.ndarray,
    *,
    threshold: float,
    n_bins: int,
    weights: np.ndarray | None = None,
) -> float:
    """Kept-set ECE of the boxes of candidate 0 minus that of candidate 1 (``which``)."""
    w = np.ones(len(p)) if weights is None else weights
    a, b = which == 0, which == 1
    return kept_ece(p[a], y[a], threshold=threshold, n_bins=n_bins, weights=w[a]) - kept_ece(
        p[b], y[b], threshold=threshold, n_bins=n_bins, weights=w[b]
    )


def _paired_se(
    a: tuple[np.ndarray, np.ndarray, np.ndarray],
    b: tuple[np.ndarray, np.ndarray, np.ndarray],
    threshold: float,
    n_bins: int,
    seed: int,
    n_boot: int = _N_BOOT,
) -> float:
    """Standard error of ``kept_ece(a) - kept_ece(b)`` over an image bootstrap (the images of the
    fit split resampled once for both). ``a``, ``b``: ``(p, y, image_id)`` of two candidates' boxes."""
    which = np.concatenate([np.zeros(len(a[0]), np.int8), np.ones(len(b[0]), np.int8)])
    p, y, img = (np.concatenate([u, v]) for u, v in zip(a, b, strict=True))
    stat = functools.partial(_ece_difference, threshold=threshold, n_bins=n_bins)
    return bootstrap_sd(stat, img, p, y, which, n_boot=n_boot, seed=seed)


def choose(
    cands: Sequence[FusionCandidate],
    *,
    orders: Sequence[str],
    threshold: float,
    n_bins: int,
    seed: int,
    z_simpler: float | None = None,
) -> FusionCandidate:
    """Apply the rule (module docstring) to scored candidates; sets every ``verdict``, ``diff``,
    ``diff_se``. ``orders``: the fusion orders, simplest first; ``z_simpler``: the margin (default
    :data:`Z_SIMPLER`, read when called)."""
    z_simpler = Z_SIMPLER if z_simpler is None else z_simpler
    ok = [
        c
        for c in cands
        if c.error is None and math.isfinite(c.cv_mean) and math.isfinite(c.fit_map50_95)
    ]
    if not ok:
        raise DegenerateFitError("no fusion candidate could be scored on the fit split's folds")
    top_map = max(c.fit_map50_95 for c in ok)
    eligible = [c for c in ok if c.fit_map50_95 >= top_map - _MAP_TOLERANCE]

    def simpler(
        c: FusionCandidate,
    ) -> tuple[int, int]:  # the simpler order, then the preferred rule
        return orders.index(c.order), _RULE_PREFERENCE.index(
            c.score
        ) if c.score in _RULE_PREFERENCE else 99

    best = min(eligible, key=lambda c: (c.cv_mean, simpler(c)))
    for c in eligible:
        c.diff = c.cv_mean - best.cv_mean
        c.diff_se = 0.0 if c is best else _paired_se(c.oof, best.oof, threshold, n_bins, seed)
    rank = sorted(eligible, key=simpler)
    chosen = next(
        (
            c
            for c in rank
            if c is best or (math.isfinite(c.diff_se) and c.diff < z_simpler * c.diff_se)
        ),
        best,
    )
    for c in cands:
        if c.error is not None:
            c.verdict = f"not scored: {c.error}"
        elif c not in eligible:
            c.verdict = (
                f"mAP50-95 {c.fit_map50_95:.4f} more than {_MAP_TOLERANCE:g} below the best "
                f"({top_map:.4f})"
                if math.isfinite(c.fit_map50_95)
                else "not scored"
            )
        elif c is chosen and c is best:
            c.verdict = "chosen: lowest CV kept-set ECE"
        elif c is chosen:
            c.verdict = (
                f"chosen: preferred, behind the best ({best.order}, {best.score}) by {c.diff:.4f} "
                "< "
                f"{z_simpler:g} SE ({c.diff_se:.4f})"
            )
        elif c is best:
            c.verdict = f"lowest CV kept-set ECE, but ({chosen.order}, {chosen.score}) is preferred and as good"
        else:
            c.verdict = f"behind the best by {c.diff:.4f} (SE {c.diff_se:.4f})"
    return chosen

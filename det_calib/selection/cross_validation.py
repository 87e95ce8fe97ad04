"""Choose a calibrator and its fit range by cross-validation grouped by image.

Candidates are (method x fit range). Methods (the registry's, simplest first): ``none`` (keep
the raw scores; always a candidate), ``temperature``, ``platt``, ``spline`` (Platt whose slope
changes at two knots in the operating range, :class:`~det_calib.calibrators.spline.SplineCalibrator`),
``class-temperature``, ``class-platt``, ``isotonic``, ``class-isotonic``. A fit range is a conf floor: ``0.0`` fits on
every box, ``0.1`` only on boxes whose raw conf is above 0.1.

Criterion (stated with every result): K-fold CV with folds grouped by image, repeated R times
with fresh fold assignments (``n_repeats``, default 5: one assignment alone decides close calls
by luck, and ``--seed`` would change the choice); each candidate is fitted on K-1 folds (on its
fit range) and scored on the held-out fold by the mean NLL (``criterion="nll"``) of the held-out
boxes whose **raw** conf is above ``min_conf`` (the operating range: the lowest conf threshold
the user keeps boxes at; the same boxes for every candidate, so the scores compare), by their
Brier score (``criterion="brier"``, squared error: it weighs the middle of the range as NLL
weighs the ends), or by the
ECE (15 bins) of the held-out boxes whose **calibrated** conf is above ``min_conf``
(``criterion="ece"``, the error of the kept set). Between maps that keep the ranking of the
boxes, a difference in held-out NLL is a difference in calibration alone (their ranking, hence
their refinement, is the same), which is why NLL is the default.

The rule (:func:`_paired_choice`) compares candidates **paired, on the shared folds**: every
candidate is scored on the same R x K held-out folds, so the fold-by-fold difference of two
candidates is far more precise than either score (the images' own difficulty cancels). Its
standard error is corrected for the overlap of the training folds (Nadeau and Bengio, 2003):
``sd * sqrt(1 / (R K) + 1 / (K - 1))``.

1. **Against the raw scores first.** A calibrator is eligible only if it beats ``none`` fold by
   fold by more than ``z_none`` (1) such standard errors of its difference from ``none``. With
   no eligible calibrator, ``none`` is chosen: keep the raw scores.
2. **The best eligible candidate** (lowest CV mean) wins, unless
3. **a simpler eligible candidate** (earlier in the registry's order, or the same method on an
   earlier fit range) is as good: behind it by less than ``z_simpler`` (0.25) standard errors
   of their difference, fold by fold, or keeping at least 99% of its CV gain over the raw scores
   (a difference no kept-set figure can show); then the simplest such wins. This
   is a proportionate preference: a two-parameter map is not a leap from a one-parameter one,
   so a simpler map is kept only where the data cannot tell it from the better one at all, not
   wherever it is within one standard error (the rule that kept the raw scores, or a temperature,
   on real detectors whose kept boxes Platt made twice as reliable).

The numbers are measured, not assumed: ``benchmarks/measure_selection.py`` runs the rule on the
demo at 64, 128 and 400 fit images, several seeds and both heads, against always-Platt,
always-temperature and the best map in hindsight. The per-class methods choose their shrinkage
on the same folds (the best grid value by CV mean). The chosen candidate is refitted on all
boxes of its fit range. Every candidate records why it won or lost (``verdict``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from det_calib.calibrators import registry
from det_calib.calibrators.base import LogitCalibrator, box_kwargs
from det_calib.calibrators.fit_support import check_classes, check_fit, group_folds
from det_calib.errors import DegenerateFitError, InputError
from det_calib.metrics.binning import uniform_index
from det_calib.metrics.calibration import ece as _ece
from det_calib.numeric import binary_nll_terms, logit_threshold, sigmoid, weighted_mean
from det_calib.validation import check_choice

__all__ = ["Candidate", "Selection", "fit_calibrator", "paired_rule_words", "select_calibrator"]

_log = logging.getLogger(__name__)

_Z_NONE = 1.0
"""A calibrator must beat the raw scores by more than this many paired standard errors."""
_Z_SIMPLER = 0.25
"""A simpler calibrator behind the best by less than this many paired standard errors is preferred."""
_GAIN_KEPT = 0.99
"""... and so is one that keeps at least this share of the best's CV gain over the raw scores."""


def paired_rule_words() -> str:
    """The paired rule in words, with its numbers, as the report's Calibrators compared section
    states it (after "compared paired, fold by fold: ")."""
    return (
        "a calibrator is eligible only if it beats the raw scores (none) by more than "
        f"{_Z_NONE:g} standard error of that difference; the best eligible one wins, unless a "
        f"simpler eligible one is as good: behind it by less than {_Z_SIMPLER:g} standard error "
        f"of theirs, or keeping {_GAIN_KEPT:.0%} of its gain over the raw scores"
    )


@dataclass
class Candidate:
    """CV result of one (method, fit floor) candidate.

    Attributes:
        method: One of the registry (:func:`~det_calib.calibrators.registry.methods`).
        fit_min_conf: Fit range: boxes with raw conf above this (0.0 = all boxes).
        mean: Mean of the held-out criterion over the R x K folds (nan when every fold failed).
        se: Standard error of that mean, corrected for overlapping training folds (see the
            module docstring): ``sd * sqrt(1 / (R K) + 1 / (K - 1))``.
        fold_scores: Held-out criterion per fold, repeat after repeat (R x K values).
        shrinkage: Per-class methods: the shrinkage (``lam`` or ``m``) their CV chose.
        error: Why the candidate could not be scored (a degenerate fit), else None.
        diff: Mean fold-by-fold difference from the best candidate's scores (0 for the best).
        diff_se: Corrected standard error of ``diff`` (how consistently the best beats this
            candidate on the fit split's folds).
        diff_none, diff_none_se: The same against ``none`` (the raw scores): negative is better
            than raw. A calibrator is eligible when ``diff_none < -z_none * diff_none_se``.
        verdict: Why the candidate won or lost, in a few words (set by :func:`_paired_choice`).
    """

    method: str
    fit_min_conf: float
    mean: float
    se: float
    fold_scores: list[float]
    shrinkage: float | None = None
    error: str | None = None
    diff: float = math.nan
    diff_se: float = math.nan
    diff_none: float = math.nan
    diff_none_se: float = math.nan
    verdict: str = ""

    @property
    def name(self) -> str:
        return self.method if self.method == "none" else f"{self.method}@{self.fit_min_conf:g}"


@dataclass
class Selection:
    """Result of :func:`select_calibrator`.

    Attributes:
        candidates: Every candidate's CV score, in the order tried.
        chosen: The chosen candidate.
        best: The candidate with the lowest CV mean (may differ from ``chosen``: see :func:`_paired_choice`).
        calibrator: The chosen method refitted on all boxes of its fit range.
        criterion: ``"nll"`` or ``"ece"``; ``min_conf``: the operating floor it looks at.
        n_folds: K. ``reason``: one sentence saying why ``chosen`` won.
        n_repeats: R, the fold assignments (seeds ``seed`` .. ``seed + R - 1``).
    """

    candidates: list[Candidate]
    chosen: Candidate
    best: Candidate
    calibrator: LogitCalibrator
    criterion: str
    min_conf: float
    n_folds: int
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)
    n_repeats: int = 1


CRITERIA: tuple[str, ...] = ("nll", "brier", "ece")
"""What the CV scores: NLL or Brier score of the held-out boxes above ``min_conf`` raw (the same
boxes for every candidate), or the ECE of those kept above it calibrated."""


def _score(t, y, w, raw_keep, criterion: str, min_conf: float) -> float:
    if criterion in ("nll", "brier"):
        if not raw_keep.any():
            return math.nan
        tt, yy, ww = t[raw_keep], y[raw_keep], w[raw_keep]
        if criterion == "brier":
            return weighted_mean((sigmoid(tt) - yy) ** 2, ww)
        return weighted_mean(binary_nll_terms(tt, yy), ww)
    p = sigmoid(t)
    keep = p > min_conf
    if not keep.any():
        return math.nan
    if _is_soft(y):
        return _soft_ece(p[keep], y[keep], w[keep], n_bins=15)
    return float(_ece(p[keep], y[keep].astype(bool), n_bins=15, weights=w[keep]))


def _is_soft(y: np.ndarray) -> bool:
    """Labels that are not all 0/1: soft labels (the IoU target)."""
    return not np.isin(y, (0.0, 1.0)).all()


def _soft_ece(p: np.ndarray, y: np.ndarray, w: np.ndarray, *, n_bins: int = 15) -> float:
    """ECE against soft labels: equal-width bins of ``p``, ``sum_m |sum w (p - y)| / sum w`` (the
    binned gap LaECE takes per class, here over every box; with 0/1 labels it is the ECE)."""
    idx = uniform_index(p, n_bins)
    gap = np.bincount(idx, weights=w * (p - y), minlength=n_bins)
    total = float(w.sum())
    return float(np.abs(gap).sum() / total) if total > 0 else math.nan


def _compress(z, y, k, folds, resolution):
    """Round logits to ``resolution`` and pool identical (fold, class, logit, label) rows into weights.

    Soft labels are pooled by (fold, class, logit) into their mean label: the NLL, the fits (linear
    in the label) and the soft ECE are unchanged; the Brier score drops the labels' variance within a
    pooled row, the same for every candidate (their paired differences are unchanged)."""
    if _is_soft(y):
        return _compress_soft(z, y, k, folds, resolution)
    q = np.round(z / resolution).astype(np.int64)
    q -= q.min()
    kk = np.zeros(z.shape[0], dtype=np.int64) if k is None else k
    span_q, span_k = int(q.max()) + 1, int(kk.max()) + 1
    key = ((folds * span_k + kk) * span_q + q) * 2 + y.astype(np.int64)
    uniq, counts = _distinct_counts(key)
    yc = (uniq % 2).astype(np.float64)
    rest = uniq // 2
    qc = rest % span_q
    rest //= span_q
    kc = rest % span_k
    fc = rest // span_k
    zc = (qc + np.round(z / resolution).astype(np.int64).min()) * resolution
    return zc, yc, (None if k is None else kc), fc, counts.astype(np.float64)


def _distinct_counts(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_counts=True)`` of non-negative int64 keys: counted over the keys'
    range where it is no wider than four times their number (the CV rows' keys at the default
    resolution), else sorted; the same arrays.

    >>> key = np.array([9, 2, 9, 0, 2, 9])
    >>> [a.tolist() for a in _distinct_counts(key)]
    [[0, 2, 9], [1, 2, 3]]
    >>> wide = np.array([10**9, 5, 5])  # a range past four times the keys: sorted
    >>> [a.tolist() for a in _distinct_counts(wide)]
    [[5, 1000000000], [2, 1]]
    """
    if key.size and int(key.min()) >= 0 and int(key.max()) < 4 * key.size + 1024:
        every = np.bincount(key)
        uniq = np.flatnonzero(every)
        return uniq, every[uniq]
    return np.unique(key, return_counts=True)


def _compress_soft(z, y, k, folds, resolution):
    """:func:`_compress` of soft labels: identical (fold, class, logit) rows pooled, with their mean label."""
    q = np.round(z / resolution).astype(np.int64)
    q0 = int(q.min())
    q -= q0
    kk = np.zeros(z.shape[0], dtype=np.int64) if k is None else k
    span_q, span_k = int(q.max()) + 1, int(kk.max()) + 1
    uniq, inv, counts = np.unique(
        (folds * span_k + kk) * span_q + q, return_inverse=True, return_counts=True
    )
    yc = np.bincount(inv.ravel(), weights=y, minlength=uniq.size) / counts
    qc, rest = uniq % span_q, uniq // span_q
    zc = (qc + q0) * resolution
    return zc, yc, (None if k is None else rest % span_k), rest // span_k, counts.astype(np.float64)


def select_calibrator(
    logits: Any,
    labels: Any,
    *,
    classes: Any = None,
    groups: Any = None,
    methods: Sequence[str] | None = None,
    fit_min_confs: Sequence[float] | None = None,
    min_conf: float = 0.25,
    criterion: Literal["nll", "brier", "ece"] = "nll",
    n_folds: int = 5,
    n_repeats: int = 5,
    seed: int = 0,
    cv_resolution: float | None = 0.01,
    log_area: Any = None,
) -> Selection:
    """Cross-validate every (method x fit range) candidate and refit the chosen one.

    Args:
        logits: ``(n,)`` raw box logits of the fit split.
        labels: ``(n,)`` bool or 0/1, 1 = correct box; or soft labels in [0, 1] (the IoU target:
            the NLL is then the cross-entropy, the ECE the binned gap to the mean label).
        classes: ``(n,)`` predicted class ids (needed by the ``class-*`` methods; without them
            those methods are skipped).
        groups: ``(n,)`` image ids: the folds keep an image's boxes together. Without them the
            folds split boxes (boxes of one image are correlated: pass them).
        methods: Methods to try (default every registered method); ``none`` is always added.
        fit_min_confs: Fit floors to try (0.0 = all boxes); default ``(0.0, min_conf / 2)``.
        min_conf: The operating floor the criterion looks at (the lowest conf threshold used).
        criterion: ``"nll"`` or ``"ece"``, see the module docstring.
        n_folds: K >= 2.
        n_repeats: R >= 1 fold assignments (seeds ``seed``, ``seed + 1``, ...); every candidate
            is scored on all R x K held-out folds.
        seed: Seed of the first fold assignment and of the per-class shrinkage CV.
        cv_resolution: For speed, the CV fits and scores run on logits rounded to this grid,
            identical (fold, class, logit, label) rows pooled into weights (0.01 moves a
            probability by at most 0.0025, far below the folds' noise); None: exact logits.
            The final refit always uses the exact logits. A size-conditioned candidate
            (``log_area`` given) turns the pooling off: boxes of one logit differ by size.
        log_area: ``(n,)`` the boxes' log relative areas (:func:`~det_calib.calibrators.base.log_area`),
            needed by the maps that read the box's size (without them those are skipped).

    Returns:
        A :class:`Selection`.

    Raises:
        InputError: Bad arguments.
        DegenerateFitError: Every candidate except ``none`` failed (the result would be ``none``
            anyway; raised only when the data cannot even be scored).
    """
    z, y, _ = check_fit(logits, labels)
    k = None if classes is None else check_classes(classes, z.shape[0])
    check_choice(criterion, CRITERIA, "criterion")
    if not (0.0 <= min_conf < 1.0):
        raise InputError(f"Expected argument `min_conf` in [0, 1), but got {min_conf!r}")
    known = registry.methods()
    methods = known if methods is None else methods
    bad = [m for m in methods if m not in known]
    if bad:
        raise InputError(f"Expected argument `methods` to hold names from {known}, but got {bad}")
    floors = tuple(fit_min_confs) if fit_min_confs is not None else (0.0, min_conf / 2)
    if any(not (0.0 <= f < 1.0) for f in floors):
        raise InputError(f"Expected every `fit_min_confs` value in [0, 1), but got {floors}")
    use = [m for m in known if m in set(methods) | {"none"}]
    if k is None:
        skipped = [m for m in use if registry.method_spec(m).per_class]
        if skipped:
            _log.info("no `classes` given: skipping %s", ", ".join(skipped))
        use = [m for m in use if not registry.method_spec(m).per_class]
    a = None if log_area is None else np.asarray(log_area, dtype=np.float64).reshape(-1)
    if a is None or not any(registry.method_spec(m).uses_size for m in use):
        skipped = [m for m in use if registry.method_spec(m).uses_size]
        if skipped:
            _log.info("no `log_area` given: skipping %s", ", ".join(skipped))
        use, a = [m for m in use if not registry.method_spec(m).uses_size], None
    elif a.shape != z.shape:
        raise InputError(f"Expected argument `log_area` of shape {z.shape}, but got {a.shape}")
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise InputError(
            f"Expected argument `n_repeats` to be a positive integer, but got {n_repeats!r}"
        )
    if not np.isfinite(z).all():
        raise DegenerateFitError("calibrator selection got non-finite logits (nan or inf)")
    if cv_resolution is not None and not (
        isinstance(cv_resolution, (int, float)) and cv_resolution > 0
    ):
        raise InputError(
            "Expected argument `cv_resolution` to be a number > 0 or None, but got "
            f"{cv_resolution!r}"
        )
    repeats = []  # per fold assignment: (logits, labels, classes, folds, weights, raw_keep, log_area) of the CV rows
    for r in range(int(n_repeats)):
        folds = group_folds(z.shape[0], n_folds, groups, seed=seed + r)
        if cv_resolution is not None and a is None:
            # the classes enter the pooling only when a per-class method needs them: the global
            # maps see pooled rows of equal (fold, logit, label), the same sums in fewer rows
            kc_in = k if any(registry.method_spec(m).per_class for m in use) else None
            zc, yc, kc, fc, wc = _compress(z, y, kc_in, folds, float(cv_resolution))
        else:
            zc, yc, kc, fc, wc = z, y, k, folds, np.ones(z.shape[0])
        repeats.append((zc, yc, kc, fc, wc, zc > logit_threshold(min_conf), a))
    if not repeats[0][5].any() and criterion != "ece":
        raise DegenerateFitError(
            f"no fit box has raw conf above min_conf={min_conf}: nothing to score the candidates on"
        )

    cands: list[Candidate] = []
    for method in use:
        for floor in (0.0,) if method == "none" else floors:
            cands.append(_cv_candidate(method, floor, repeats, n_folds, criterion, min_conf, seed))

    ok = [c for c in cands if c.error is None and math.isfinite(c.mean)]
    if not ok:
        raise DegenerateFitError(
            "every calibrator candidate failed to fit or score; see the candidates' errors"
        )
    repeated = f", repeated {int(n_repeats)} times" if int(n_repeats) > 1 else ""
    chosen, best, reason = _paired_choice(
        ok,
        floors,
        n_folds,
        criterion=criterion,
        folds_text=f"{n_folds}-fold cross-validation grouped by image{repeated}",
    )
    cal = refit(chosen, z, y, k, groups, seed, log_area=a)
    _log.debug("calibrator selection: %s", reason)
    return Selection(
        cands,
        chosen,
        best,
        cal,
        criterion,
        float(min_conf),
        int(n_folds),
        reason,
        n_repeats=int(n_repeats),
    )


def fit_calibrator(
    method: str,
    logits: Any,
    labels: Any,
    *,
    classes: Any = None,
    groups: Any = None,
    fit_min_conf: float = 0.0,
    seed: int = 0,
    in_range: bool = False,
    log_area: Any = None,
) -> Any:
    """Fit one method on its fit range: the boxes with raw conf above ``fit_min_conf`` (0.0: all).

    Args:
        method: One of the registry (:func:`~det_calib.calibrators.registry.methods`).
        logits, labels: ``(n,)`` raw logits and 0/1 (or soft, in [0, 1]) labels.
        classes: ``(n,)`` class ids (required by the ``class-*`` methods).
        groups: ``(n,)`` image ids for the per-class shrinkage CV.
        fit_min_conf: Fit-range floor in [0, 1).
        seed: Seed of the shrinkage CV folds.
        in_range: The boxes given are already those of the fit range (the caller applied
            ``fit_min_conf`` its own way): fit on all of them; the floor then only shapes the map
            below it (see :func:`make_calibrator`).
        log_area: ``(n,)`` the boxes' log relative areas (required by a map that reads the box's size).

    Returns:
        The fitted calibrator (apply it to every box, inside and outside the fit range).

    Raises:
        InputError: Bad arguments. DegenerateFitError: The fit range cannot determine the map.
    """
    # an unknown method: InputError naming the methods
    per_class = registry.method_spec(method).per_class
    if not (0.0 <= fit_min_conf < 1.0):
        raise InputError(f"Expected argument `fit_min_conf` in [0, 1), but got {fit_min_conf!r}")
    z, y, _ = check_fit(logits, labels)
    k = None if classes is None else check_classes(classes, z.shape[0])
    if per_class and k is None:
        raise InputError(f"Expected argument `classes` for method {method!r}, but got None")
    return refit(
        Candidate(method, float(fit_min_conf), math.nan, math.nan, []),
        z,
        y,
        k,
        groups,
        seed,
        in_range=in_range,
        log_area=log_area,
    )


def _fit_range(z: np.ndarray, floor: float) -> np.ndarray:
    return z > logit_threshold(floor) if floor > 0 else np.ones(z.shape[0], dtype=bool)


def refit(
    c: Candidate, z, y, k, groups, seed, *, in_range: bool = False, log_area: Any = None
) -> Any:
    """Candidate ``c`` refitted on every box of its fit range (every box given, with ``in_range``);
    ``log_area``: the boxes' sizes, for a map that reads them."""
    m = np.ones(z.shape[0], dtype=bool) if in_range else _fit_range(z, c.fit_min_conf)
    if not m.any():
        raise DegenerateFitError(
            f"no fit box has raw conf above the fit floor {c.fit_min_conf:g}: nothing to fit "
            f"{c.method} on"
        )
    shrinkage = c.shrinkage if c.shrinkage is not None else "auto"
    cal = registry.make_calibrator(
        c.method, seed=seed, shrinkage=shrinkage, fit_min_conf=c.fit_min_conf
    )
    per_class = registry.method_spec(c.method).per_class
    kw = box_kwargs(
        cal,
        classes=k[m] if per_class else None,
        log_area=None if log_area is None else np.asarray(log_area, dtype=np.float64)[m],
    )
    if per_class and groups is not None:
        kw["groups"] = np.asarray(groups)[m]
    return cal.fit(z[m], y[m], **kw)


def _fold_fits(method, grid, z, y, k, w, seed, floor=0.0, a=None):
    """Fitted calibrators on one training fold (fit floor ``floor``): one per grid value
    (:meth:`~det_calib.calibrators.base.LogitCalibrator.fit_grid`; per-class maps share the global
    fit and the per-class curves across the grid)."""

    def build(g):
        return registry.make_calibrator(
            method, seed=seed, shrinkage="auto" if g is None else g, fit_min_conf=floor
        )

    proto = build(None) if grid == [None] else build(math.inf)
    more = {"log_area": a} if proto.uses_size else {}
    return proto.fit_grid(z, y, classes=k, weights=w, grid=grid, build=build, **more)


def _paired_choice(
    ok: list[Candidate],
    floors: Sequence[float],
    n_folds: int,
    *,
    criterion: str = "nll",
    z_none: float | None = None,
    z_simpler: float | None = None,
    folds_text: str = "folds",
) -> tuple[Candidate, Candidate, str]:
    """``(chosen, best, reason)`` among scored candidates, by the paired rule of the module docstring.

    Sets every candidate's ``diff``/``diff_se`` (against the best), ``diff_none``/``diff_none_se``
    (against ``none``) and ``verdict``. ``none`` must be among ``ok`` (it always is in
    :func:`select_calibrator`); without it every candidate is compared with the best only.

    >>> none = Candidate("none", 0.0, 0.50, 0.01, [0.50, 0.52, 0.48, 0.51, 0.49])
    >>> platt = Candidate("platt", 0.0, 0.47, 0.01, [0.47, 0.49, 0.45, 0.48, 0.46])
    >>> chosen, best, reason = _paired_choice([none, platt], (0.0,), 5)
    >>> chosen.name, chosen.verdict
    ('platt@0', 'chosen: the best of the calibrators that beat the raw scores')
    """
    z_none = _Z_NONE if z_none is None else float(z_none)
    z_simpler = _Z_SIMPLER if z_simpler is None else float(z_simpler)
    rank = {m: i for i, m in enumerate(registry.methods())}

    def order(c: Candidate) -> tuple[int, int]:
        return rank[c.method], (floors.index(c.fit_min_conf) if c.fit_min_conf in floors else 0)

    best = min(ok, key=lambda c: c.mean)
    none = next((c for c in ok if c.method == "none"), None)
    for c in ok:
        c.diff, c.diff_se = _paired_diff(c.fold_scores, best.fold_scores, n_folds)
        if none is not None:
            c.diff_none, c.diff_none_se = _paired_diff(c.fold_scores, none.fold_scores, n_folds)
    eligible = [
        c
        for c in ok
        if c.method != "none"
        and (
            none is None
            or (math.isfinite(c.diff_none_se) and c.diff_none < -z_none * c.diff_none_se)
        )
    ]
    if not eligible:
        reason = _raw_kept(ok, none, criterion=criterion, z_none=z_none, folds_text=folds_text)
        return none, best, reason  # type: ignore[return-value]
    top = min(eligible, key=lambda c: c.mean)
    near = []
    for c in eligible:
        d, se = _paired_diff(c.fold_scores, top.fold_scores, n_folds)
        kept = (
            none is not None
            and math.isfinite(top.diff_none)
            and top.diff_none < 0
            and c.diff_none <= _GAIN_KEPT * top.diff_none
        )
        if c is top or (
            order(c) < order(top) and ((math.isfinite(se) and d <= z_simpler * se) or kept)
        ):
            near.append(c)
    chosen = min(near, key=order)
    _set_verdicts(ok, chosen, top, eligible, near, z_none=z_none, z_simpler=z_simpler)
    if none is not None:
        vs = _vs_raw(criterion, chosen, none)
    else:
        vs = f"{criterion} {chosen.mean:.5g}"
    if chosen is top:
        reason = f"{chosen.name} has the lowest CV {criterion} of the calibrators that beat the raw scores ({vs}; "
    else:
        reason = (
            f"{chosen.name} is as good as the best, {top.name} ({top.mean:.5g}: behind it by less "
            "than "
            f"{z_simpler:g} paired SE, or keeping {_GAIN_KEPT:.0%} of its gain over the raw "
            "scores), and simpler "
            f"({vs}; "
        )
    return chosen, best, reason + folds_text + ")"


def _vs_raw(criterion: str, c: Candidate, none: Candidate) -> str:
    """Candidate ``c``'s CV score against the raw scores' (``none``), with its paired SE."""
    return f"{criterion} {c.mean:.5g} vs raw {none.mean:.5g}: {c.diff_none:+.3g} ± {c.diff_none_se:.2g} paired SE"


def _raw_kept(
    ok: list[Candidate], none: Candidate | None, *, criterion: str, z_none: float, folds_text: str
) -> str:
    """:func:`_paired_choice` when no calibrator is eligible: every verdict, and the reason for ``none``."""
    for c in ok:
        c.verdict = (
            f"chosen: no calibrator beat the raw scores by more than {z_none:g} paired SE"
            if c is none
            else f"not better than the raw scores by more than {z_none:g} paired SE"
        )
    top = min((c for c in ok if c is not none), key=lambda c: c.mean, default=None)
    reason = (
        f"none: no calibrator beats the raw scores by more than {z_none:g} paired standard error "
        "on the "
        f"shared folds ({folds_text})"
    )
    if top is not None and none is not None:
        reason += f"; the best, {top.name}: " + _vs_raw(criterion, top, none)
    return reason


def _set_verdicts(
    ok: list[Candidate],
    chosen: Candidate,
    top: Candidate,
    eligible: list[Candidate],
    near: list[Candidate],
    *,
    z_none: float,
    z_simpler: float,
) -> None:
    """Every candidate's ``verdict`` once :func:`_paired_choice` has chosen among the eligible ones."""
    for c in ok:
        if c is chosen:
            c.verdict = (
                "chosen: the best of the calibrators that beat the raw scores"
                if c is top
                else f"chosen: simpler than {top.name} and as good (behind it by less than {z_simpler:g} "
                f"paired SE, or keeping {_GAIN_KEPT:.0%} of its gain over the raw scores)"
            )
        elif c.method == "none":
            c.verdict = f"beaten by {chosen.name} by more than {z_none:g} paired SE"
        elif c not in eligible:
            c.verdict = f"not better than the raw scores by more than {z_none:g} paired SE"
        elif c in near:
            c.verdict = f"as good as {top.name}, but {chosen.name} is simpler"
        else:
            c.verdict = f"behind {top.name} by more than {z_simpler:g} paired SE"


def _corrected_se(d: np.ndarray, n_folds: int) -> float:
    """Standard error of the mean of R x K held-out fold scores (or score differences), corrected
    for the overlap of the training folds (Nadeau and Bengio, 2003): ``sd * sqrt(1/(R K) + 1/(K-1))``."""
    d = d[np.isfinite(d)]
    if d.size < 2:
        return math.nan
    return float(np.std(d, ddof=1) * math.sqrt(1.0 / d.size + 1.0 / (n_folds - 1)))


def _paired_diff(scores: list[float], best: list[float], n_folds: int) -> tuple[float, float]:
    """Mean and corrected standard error of ``scores - best``, fold by fold (the folds both scored)."""
    d = np.asarray(scores, dtype=np.float64) - np.asarray(best, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return math.nan, math.nan
    return float(d.mean()), _corrected_se(d, n_folds)


def _cv_candidate(method, floor, repeats, n_folds, criterion, min_conf, seed) -> Candidate:
    per_class = registry.method_spec(method).per_class
    cv_grid = registry.make_calibrator(method, seed=seed).cv_grid
    grid: list[float] = [None] if cv_grid is None else list(cv_grid)  # type: ignore[list-item]
    scores = np.full((len(repeats) * n_folds, len(grid)), np.nan)
    try:
        for r, (z, y, k, folds, w, raw_keep, a) in enumerate(repeats):
            in_range = _fit_range(z, floor)
            for f in range(n_folds):
                tr = (folds != f) & in_range
                te = folds == f
                if not tr.any():
                    raise DegenerateFitError(
                        f"no box of the training folds has raw conf above the fit floor {floor:g}"
                    )
                fits = _fold_fits(
                    method,
                    grid,
                    z[tr],
                    y[tr],
                    None if k is None else k[tr],
                    w[tr],
                    seed,
                    floor,
                    None if a is None else a[tr],
                )
                for j, cal in enumerate(fits):
                    kw = box_kwargs(
                        cal,
                        classes=k[te] if per_class else None,
                        log_area=None if a is None else a[te],
                    )
                    t = cal.transform_logits(z[te], **kw)
                    scores[r * n_folds + f, j] = _score(
                        t, y[te], w[te], raw_keep[te], criterion, min_conf
                    )
    except DegenerateFitError as e:
        return Candidate(method, float(floor), math.nan, math.nan, [], error=str(e))
    mean = np.nanmean(scores, axis=0) if np.isfinite(scores).any() else np.full(len(grid), np.nan)
    j = int(np.nanargmin(mean)) if np.isfinite(mean).any() else 0
    col = scores[:, j]
    se = _corrected_se(col, n_folds)
    return Candidate(
        method,
        float(floor),
        float(mean[j]),
        se,
        [float(v) for v in col],
        shrinkage=grid[j] if cv_grid is not None else None,
    )

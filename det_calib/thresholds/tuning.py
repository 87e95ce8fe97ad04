"""Tuning one head's thresholds: every criterion chosen on the fit split's boxes, per class and
globally, and checked on the eval split (:func:`tune`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_view import BoxView
from det_calib.errors import InputError
from det_calib.thresholds.certification import (
    certified_threshold,
    image_fdp,
    min_certifiable,
    min_certifiable_images,
)
from det_calib.thresholds.criteria import CRITERIA, Fallback, Unit, lrp, max_f1, validate_params
from det_calib.thresholds.grid_counts import (
    ClassCounts,
    bootstrap_coverage,
    check_grid,
    counts_by_image,
    figures_at,
    realised,
)

__all__ = ["tune"]


def _counts(
    a: BoxView, mask: np.ndarray | None, grid: np.ndarray, n_gt: int, tau: float
) -> ClassCounts:
    v = a if mask is None else a.subset(mask)
    return counts_by_image(v.conf, v.correct, v.image_id, grid=grid, iou=v.iou, tau=tau, n_gt=n_gt)


def tune(
    fit: pl.DataFrame,
    fit_score: np.ndarray,
    *,
    n_gt_fit: Mapping[int, int],
    class_names: Sequence[str],
    target_precision: float = 0.9,
    delta: float = 0.1,
    unit: Unit = "image",
    fallback: Fallback = "global",
    eval_boxes: pl.DataFrame | None = None,
    eval_score: np.ndarray | None = None,
    n_gt_eval: Mapping[int, int] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    grid: np.ndarray | None = None,
    min_threshold: float = 0.0,
    lrp_tau: float = 0.5,
) -> dict[str, Any]:
    """Choose per-class and global thresholds on one head's fit boxes; validate on its eval boxes.

    Args:
        fit: Fit-split boxes of one head (columns ``cls``, ``correct``, ``iou``, ``image_id``;
            crowd-ignored boxes already dropped).
        fit_score: (n_fit,) calibrated scores of those boxes.
        n_gt_fit: Ground-truth boxes per class on the fit split (classes absent: 0).
        class_names: Names, indexed by class id.
        target_precision, delta: The precision target and the error level of its guarantee.
        unit: ``"image"`` (design-effect correction for boxes of one image) or ``"box"``.
        fallback: Rule for classes that cannot be certified (see the module docstring).
        eval_boxes, eval_score, n_gt_eval: The eval split, the same way (optional).
        n_boot, seed: Image-bootstrap resamples of the eval split for the coverage.
        grid: Candidate thresholds (increasing, in [0, 1)).
        min_threshold: Candidates below this are left out (the calibrated capture floor).
        lrp_tau: IoU threshold in the LRP localisation term.

    Returns:
        The ``criteria`` object of one head in ``thresholds.json`` (see :func:`tune_run`).

    Raises:
        InputError: A parameter is out of range, or the fit split has no boxes.
    """
    validate_params(target_precision, delta, unit, fallback)
    grid = _candidate_grid(fit, fit_score, grid, min_threshold=min_threshold, n_boot=n_boot)
    fa = BoxView.from_boxes(fit, conf=fit_score, ignore=False)
    ea, uimg, w_eval = _eval_side(eval_boxes, eval_score, n_boot=n_boot, seed=seed)
    classes = _tuned_classes(fa, ea, n_gt_fit)
    fit_counts = _class_counts(fa, classes, n_gt_fit, grid, lrp_tau)
    ev_counts = (
        {}
        if ea is None
        else _class_counts(ea, classes, dict(n_gt_eval or {}), grid, lrp_tau, uimg=uimg)
    )
    rule = _Rule(target_precision, delta, unit, fallback, lrp_tau, n_boot, seed)
    return {
        crit: _tune_criterion(
            crit,
            rule,
            fit_counts,
            ev_counts,
            classes=classes,
            class_names=class_names,
            grid=grid,
            w_eval=w_eval,
        )
        for crit in CRITERIA
    }


@dataclass(frozen=True)
class _Rule:
    """:func:`tune`'s options that shape every criterion's choice and check."""

    target_precision: float
    delta: float
    unit: Unit
    fallback: Fallback
    lrp_tau: float
    n_boot: int
    seed: int


def _tune_criterion(
    crit: str,
    rule: _Rule,
    fit_counts: dict[int | None, ClassCounts],
    ev_counts: dict[int | None, ClassCounts],
    *,
    classes: list[int],
    class_names: Sequence[str],
    grid: np.ndarray,
    w_eval: np.ndarray | None,
) -> dict[str, Any]:
    """Criterion ``crit``'s entry of ``thresholds.json``: its params, the global and per-class
    thresholds with their fit and eval figures, and for ``target_precision`` the eval validation."""
    choose, params = _criterion(crit, rule)
    g = choose(fit_counts[None])
    g["fallback"] = None
    rows = [
        _class_row(
            c,
            _class_name(class_names, c),
            choose(fit_counts[c]),
            fit_counts[c],
            g,
            grid,
            crit=crit,
            fallback=rule.fallback,
        )
        for c in classes
    ]
    for r, c in [(g, None), *((r, r["cls"]) for r in rows)]:
        _add_figures(
            r,
            fit_counts[c],
            ev_counts.get(c),
            crit=crit,
            target_precision=rule.target_precision,
            w_eval=w_eval,
            per_image=rule.unit == "image",
        )
    out = {"params": params, "global": g, "per_class": rows}
    if crit == "target_precision" and ev_counts:
        out["validation"] = _validation_summary(
            rows,
            ev_counts,
            w_eval,
            rule.target_precision,
            rule.delta,
            rule.n_boot,
            rule.seed,
            per_image=rule.unit == "image",
        )
    return out


def _tuned_classes(fa: BoxView, ea: BoxView | None, n_gt_fit: Mapping[int, int]) -> list[int]:
    """The classes with fit boxes, fit ground truth or eval boxes, in order."""
    classes = set(fa.cls.tolist()) | {c for c, v in n_gt_fit.items() if v}
    return sorted(classes | set(ea.cls.tolist())) if ea is not None else sorted(classes)


def _class_counts(
    v: BoxView,
    classes: list[int],
    n_gt: Mapping[int, int],
    grid: np.ndarray,
    tau: float,
    uimg: np.ndarray | None = None,
) -> dict[int | None, ClassCounts]:
    """Counts of each class in ``classes`` and, under ``None``, of all boxes; with ``uimg`` (the
    eval split), one row per image of ``uimg``."""

    def one(mask: np.ndarray | None, n: int) -> ClassCounts:
        return (
            _counts(v, mask, grid, n, tau)
            if uimg is None
            else _eval_counts(v, uimg, mask, grid, n, tau)
        )

    out: dict[int | None, ClassCounts] = {None: one(None, int(sum(n_gt.values())))}
    out.update({c: one(v.cls == c, int(n_gt.get(c, 0))) for c in classes})
    return out


def _candidate_grid(
    fit: pl.DataFrame,
    fit_score: np.ndarray,
    grid: np.ndarray | None,
    *,
    min_threshold: float,
    n_boot: int,
) -> np.ndarray:
    """:func:`tune`'s candidate thresholds at or above ``min_threshold``, once ``n_boot`` and the fit
    split's boxes and scores are checked."""
    grid = check_grid(grid)
    grid = grid[grid >= min_threshold]
    if grid.size == 0:
        raise InputError(
            f"no candidate threshold at or above the capture floor {min_threshold:.4g}"
        )
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise InputError(
            f"Expected argument `n_boot` to be an integer larger than 0, but got {n_boot!r}"
        )
    if fit.height == 0:
        raise InputError("the fit split has no boxes for this head: nothing to tune thresholds on")
    if len(fit_score) != fit.height:
        raise InputError(f"Expected `fit_score` of length {fit.height}, but got {len(fit_score)}")
    if not np.all(np.isfinite(fit_score)) or np.any(
        (np.asarray(fit_score) < 0) | (np.asarray(fit_score) > 1)
    ):
        raise InputError("calibrated scores of the fit split must lie in [0, 1]")
    return grid


def _eval_side(
    eval_boxes: pl.DataFrame | None, eval_score: np.ndarray | None, *, n_boot: int, seed: int
):
    """The eval split's boxes as a view, its images that have boxes, and the bootstrap's weights over
    those images; three Nones without eval boxes."""
    if eval_boxes is None or not eval_boxes.height:
        return None, None, None
    if eval_score is None or len(eval_score) != eval_boxes.height:
        raise InputError("Expected `eval_score` with one score per eval box")
    ea = BoxView.from_boxes(eval_boxes, conf=eval_score, ignore=False)
    rng = np.random.default_rng(seed)
    uimg = np.unique(ea.image_id)
    # resample weights over the eval images that have boxes (images without boxes add nothing
    # to precision): multinomial counts, one row per resample
    w_eval = rng.multinomial(len(uimg), np.full(len(uimg), 1 / len(uimg)), size=n_boot).astype(
        np.float64
    )
    return ea, uimg, w_eval


def _eval_counts(
    ea: BoxView, uimg: np.ndarray, mask: np.ndarray | None, grid: np.ndarray, n_gt: int, tau: float
) -> ClassCounts:
    """Counts of the eval boxes in ``mask`` (all: None), one row per eval image of ``uimg``."""
    c = _counts(ea, mask, grid, n_gt, tau)
    if c.kept.shape[0] < len(uimg):  # align rows with the resample weights (one per eval image)
        full_k = np.zeros((len(uimg), len(grid)))
        full_t, full_l = full_k.copy(), full_k.copy()
        rows = np.searchsorted(
            uimg, np.unique(ea.image_id[mask] if mask is not None else ea.image_id)
        )
        full_k[rows], full_t[rows], full_l[rows] = c.kept, c.tp, c.loc
        c = ClassCounts(grid, full_k, full_t, full_l, n_gt)
    return c


def _class_name(class_names: Sequence[str], c: int) -> str:
    return str(class_names[c]) if 0 <= c < len(class_names) else str(c)


def _criterion(
    crit: str, rule: _Rule
) -> tuple[Callable[[ClassCounts], dict[str, Any]], dict[str, Any]]:
    """Criterion ``crit``'s choice of a threshold on counts, and its ``params`` in ``thresholds.json``."""
    if crit == "target_precision":

        def choose(c: ClassCounts) -> dict[str, Any]:
            return certified_threshold(
                c, target=rule.target_precision, delta=rule.delta, unit=rule.unit
            )

        params = {
            "target_precision": rule.target_precision,
            "delta": rule.delta,
            "unit": rule.unit,
            "fallback": rule.fallback,
            "test": (
                "fixed-sequence, Hoeffding-Bentkus on the mean precision of the images that keep a "
                "box, "
                "thresholds high to low"
                if rule.unit == "image"
                else "fixed-sequence, exact binomial (Clopper-Pearson) on boxes assumed independent, "
                "thresholds high to low"
            ),
            "min_certifiable_boxes": min_certifiable(rule.target_precision, rule.delta),
        }
        if rule.unit == "image":
            params["min_certifiable_images"] = min_certifiable_images(
                rule.target_precision, rule.delta
            )
        return choose, params
    if crit == "max_f1":
        return max_f1, {}
    return lrp, {"tau": rule.lrp_tau}


def _class_row(
    c: int,
    name: str,
    chosen: dict[str, Any],
    counts: ClassCounts,
    g: dict[str, Any],
    grid: np.ndarray,
    *,
    crit: str,
    fallback: Fallback,
) -> dict[str, Any]:
    """Class ``c``'s row: its own choice, or for an uncertified class the fallback (the global
    threshold or dropping the class) with the in-sample figures at the threshold used."""
    r = {"cls": int(c), "name": name, **chosen, "fallback": None}
    if crit == "target_precision" and not r["certified"]:
        if fallback == "global" and g["certified"]:
            r["threshold"], r["fallback"] = g["threshold"], "global"
        else:
            r["threshold"], r["fallback"] = 1.0, "drop"
        # in-sample figures at the threshold actually used
        if r["threshold"] < 1:
            j = int(np.searchsorted(grid, r["threshold"]))
            r.update(figures_at(counts, j))
        else:
            r.update(figures_at(counts, -1))
    return r


def _add_figures(
    r: dict[str, Any],
    fit_counts: ClassCounts,
    cc: ClassCounts | None,
    *,
    crit: str,
    target_precision: float,
    w_eval: np.ndarray | None,
    per_image: bool = False,
) -> None:
    """Row ``r``'s in-sample figures moved under ``fit``, and the eval split's (counts ``cc``) added under ``eval``.
    ``per_image``: the target is on the mean precision of the images that keep a box (the image unit), which
    ``meets_target`` and ``coverage`` then read."""
    r["fit"] = {
        "precision": r.pop("precision"),
        "recall": r.pop("recall"),
        "kept": r.pop("kept"),
        "n_gt": fit_counts.n_gt,
    }
    if crit == "target_precision" and per_image:
        r["fit"]["precision_per_image"] = _per_image(fit_counts, r["threshold"])
        r.pop("precision_per_image", None)
    if cc is not None:
        r["eval"] = {**realised(cc, r["threshold"]), "n_gt": cc.n_gt}
        if crit == "target_precision":
            key = "precision"
            if per_image:
                key = "precision_per_image"
                r["eval"][key] = _per_image(cc, r["threshold"])
                r["eval"]["coverage"] = _per_image_coverage(
                    cc, r["threshold"], target_precision, w_eval
                )
            else:
                r["eval"]["coverage"] = bootstrap_coverage(
                    cc, r["threshold"], target_precision, w_eval
                )
            r["eval"]["meets_target"] = (
                None if r["eval"][key] is None else bool(r["eval"][key] >= target_precision)
            )


def _per_image(c: ClassCounts, t: float) -> float | None:
    """Mean precision of the images that keep a box at ``t`` (None: none does)."""
    if t >= 1 or c.kept.shape[0] == 0:
        return None
    j = int(np.searchsorted(c.grid, t))
    fdp, n = image_fdp(c.kept[:, j : j + 1], c.tp[:, j : j + 1])
    return float(1 - fdp[0]) if n[0] else None


def _per_image_coverage(c: ClassCounts, t: float, target: float, w: np.ndarray) -> float | None:
    """Fraction of image-bootstrap resamples whose mean per-image precision at ``t`` is >= ``target``."""
    if t >= 1 or c.kept.shape[0] == 0:
        return None
    j = int(np.searchsorted(c.grid, t))
    has = c.kept[:, j] > 0
    prec = np.where(has, c.tp[:, j] / np.maximum(c.kept[:, j], 1), 0.0)
    n = w @ has
    ok = n > 0
    return float(np.mean((w @ prec)[ok] / n[ok] >= target - 1e-12)) if ok.any() else None


def _validation_summary(
    rows: list[dict[str, Any]],
    per_ev: Mapping[int | None, ClassCounts],
    w: np.ndarray,
    target: float,
    delta: float,
    n_boot: int,
    seed: int,
    per_image: bool = False,
) -> dict[str, Any]:
    """Coverage of the certified classes jointly, and the classes that missed the target on eval (``per_image``:
    the mean precision of the images that keep a box)."""
    cert = [r for r in rows if r["certified"] and per_ev[r["cls"]] is not None]
    joint = None
    if cert:
        hits = []
        for r in cert:
            c = per_ev[r["cls"]]
            j = int(np.searchsorted(c.grid, r["threshold"]))
            n, k = w @ c.kept[:, j], w @ c.tp[:, j]
            if per_image:
                has = c.kept[:, j] > 0
                n, k = w @ has, w @ np.where(has, c.tp[:, j] / np.maximum(c.kept[:, j], 1), 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                hits.append(np.where(n > 0, k / np.maximum(n, 1) >= target - 1e-12, True))
        joint = float(np.mean(np.all(hits, axis=0)))
    misses = [r["name"] for r in cert if r["eval"]["meets_target"] is False]
    return {
        "split": "eval",
        "n_boot": n_boot,
        "seed": seed,
        "resampling_unit": "image",
        "certified_classes": len(cert),
        "classes_meeting_target": sum(1 for r in cert if r["eval"]["meets_target"]),
        "classes_missing_target": misses,
        "expected_misses": delta * len(cert),
        "coverage_all_certified": joint,
        "note": (
            "coverage: fraction of image-bootstrap resamples of the eval split whose precision at "
            "the chosen "
            "threshold is >= the target; each class's guarantee holds with probability >= 1 - "
            "delta on its "
            "own, so about delta x (certified classes) misses are expected"
        ),
    }

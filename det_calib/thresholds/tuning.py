"""Tuning one head's thresholds: every criterion chosen on the fit split's boxes, per class and
globally, and checked on the eval split (:func:`tune`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_view import BoxView
from det_calib.errors import InputError
from det_calib.thresholds.certification import certified_threshold, min_certifiable
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

def _counts(a: BoxView, mask: np.ndarray | None, grid: np.ndarray, n_gt: int, tau: float) -> ClassCounts:
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
    grid = check_grid(grid)
    grid = grid[grid >= min_threshold]
    if grid.size == 0:
        raise InputError(f"no candidate threshold at or above the capture floor {min_threshold:.4g}")
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise InputError(f"Expected argument `n_boot` to be an integer larger than 0, but got {n_boot!r}")
    if fit.height == 0:
        raise InputError("the fit split has no boxes for this head: nothing to tune thresholds on")
    if len(fit_score) != fit.height:
        raise InputError(f"Expected `fit_score` of length {fit.height}, but got {len(fit_score)}")
    if not np.all(np.isfinite(fit_score)) or np.any((np.asarray(fit_score) < 0) | (np.asarray(fit_score) > 1)):
        raise InputError("calibrated scores of the fit split must lie in [0, 1]")
    fa = BoxView.from_boxes(fit, conf=fit_score, ignore=False)
    classes = sorted(set(fa.cls.tolist()) | {c for c, v in n_gt_fit.items() if v})
    n_gt_total = int(sum(n_gt_fit.values()))

    ea = None
    if eval_boxes is not None and eval_boxes.height:
        if eval_score is None or len(eval_score) != eval_boxes.height:
            raise InputError("Expected `eval_score` with one score per eval box")
        ea = BoxView.from_boxes(eval_boxes, conf=eval_score, ignore=False)
        n_gt_eval = dict(n_gt_eval or {})
        classes = sorted(set(classes) | set(ea.cls.tolist()))
        rng = np.random.default_rng(seed)
        uimg = np.unique(ea.image_id)
        # resample weights over the eval images that have boxes (images without boxes add nothing
        # to precision): multinomial counts, one row per resample
        w_eval = rng.multinomial(len(uimg), np.full(len(uimg), 1 / len(uimg)), size=n_boot).astype(np.float64)

    def ev_counts(mask: np.ndarray | None, n_gt: int) -> ClassCounts | None:
        if ea is None:
            return None
        c = _counts(ea, mask, grid, n_gt, lrp_tau)
        if c.kept.shape[0] < len(uimg):  # align rows with the resample weights (one per eval image)
            full_k = np.zeros((len(uimg), len(grid)))
            full_t, full_l = full_k.copy(), full_k.copy()
            rows = np.searchsorted(uimg, np.unique(ea.image_id[mask] if mask is not None else ea.image_id))
            full_k[rows], full_t[rows], full_l[rows] = c.kept, c.tp, c.loc
            c = ClassCounts(grid, full_k, full_t, full_l, n_gt)
        return c

    def name(c: int) -> str:
        return str(class_names[c]) if 0 <= c < len(class_names) else str(c)

    out: dict[str, Any] = {}
    glob_fit = _counts(fa, None, grid, n_gt_total, lrp_tau)
    glob_ev = ev_counts(None, int(sum((n_gt_eval or {}).values()))) if ea is not None else None
    per_fit = {c: _counts(fa, fa.cls == c, grid, int(n_gt_fit.get(c, 0)), lrp_tau) for c in classes}
    per_ev = {c: ev_counts(ea.cls == c, int(n_gt_eval.get(c, 0))) for c in classes} if ea is not None else {}

    for crit in CRITERIA:
        if crit == "target_precision":
            def choose(c: ClassCounts) -> dict[str, Any]:
                return certified_threshold(c, target=target_precision, delta=delta, unit=unit)
            params = {"target_precision": target_precision, "delta": delta, "unit": unit, "fallback": fallback,
                      "test": "fixed-sequence, exact binomial (Clopper-Pearson), thresholds high to low",
                      "min_certifiable_boxes": min_certifiable(target_precision, delta)}
        elif crit == "max_f1":
            choose = max_f1
            params = {}
        else:
            choose = lrp
            params = {"tau": lrp_tau}
        g = choose(glob_fit)
        g["fallback"] = None
        rows = []
        for c in classes:
            r = {"cls": int(c), "name": name(c), **choose(per_fit[c]), "fallback": None}
            if crit == "target_precision" and not r["certified"]:
                if fallback == "global" and g["certified"]:
                    r["threshold"], r["fallback"] = g["threshold"], "global"
                else:
                    r["threshold"], r["fallback"] = 1.0, "drop"
                # in-sample figures at the threshold actually used
                if r["threshold"] < 1:
                    j = int(np.searchsorted(grid, r["threshold"]))
                    r.update(figures_at(per_fit[c], j))
                else:
                    r.update(figures_at(per_fit[c], -1))
            rows.append(r)
        for r, c in [(g, None), *((r, r["cls"]) for r in rows)]:
            r["fit"] = {"precision": r.pop("precision"), "recall": r.pop("recall"), "kept": r.pop("kept"),
                        "n_gt": (per_fit[c] if c is not None else glob_fit).n_gt}
            if ea is not None:
                cc = per_ev[c] if c is not None else glob_ev
                r["eval"] = {**realised(cc, r["threshold"]), "n_gt": cc.n_gt}
                if crit == "target_precision":
                    r["eval"]["coverage"] = bootstrap_coverage(cc, r["threshold"], target_precision, w_eval)
                    r["eval"]["meets_target"] = (None if r["eval"]["precision"] is None
                                                 else bool(r["eval"]["precision"] >= target_precision))
        out[crit] = {"params": params, "global": g, "per_class": rows}
        if crit == "target_precision" and ea is not None:
            out[crit]["validation"] = _validation_summary(rows, per_ev, w_eval, target_precision, delta, n_boot, seed)
    return out


def _validation_summary(rows: list[dict[str, Any]], per_ev: dict[int, ClassCounts], w: np.ndarray, target: float,
                        delta: float, n_boot: int, seed: int) -> dict[str, Any]:
    """Coverage of the certified classes jointly, and the classes that missed the target on eval."""
    cert = [r for r in rows if r["certified"] and per_ev[r["cls"]] is not None]
    joint = None
    if cert:
        hits = []
        for r in cert:
            c = per_ev[r["cls"]]
            j = int(np.searchsorted(c.grid, r["threshold"]))
            n, k = w @ c.kept[:, j], w @ c.tp[:, j]
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
        "note": ("coverage: fraction of image-bootstrap resamples of the eval split whose precision at the chosen "
                 "threshold is >= the target; each class's guarantee holds with probability >= 1 - delta on its "
                 "own, so about delta x (certified classes) misses are expected"),
    }
